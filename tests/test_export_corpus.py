"""Exporter-shaped blocks of real architectures run on the chip (issue: real models on the chip).

Each case of :mod:`tvm_icca.testing.export_corpus` is an ONNX graph written the way PyTorch's
exporters write BERT, GPT-2, ViT, MobileNetV2, SqueezeNet, ResNet and Llama blocks. On the
chip it must compute what ``onnx.reference.ReferenceEvaluator`` computes, as one region
(one device call), with nothing on the host but integer index, position and mask arithmetic.
"""

from __future__ import annotations

import pytest

import tvm_icca
from tvm_icca.testing.export_corpus import CORPUS, check_case, float_host_ops

HW = tvm_icca.small_chip(64)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_export_runs_on_the_chip_in_one_region(name: str) -> None:
    case = CORPUS[name]()
    result = check_case(case, HW)
    assert result.max_rel_error <= 1e-5, result
    assert result.regions == 1 and result.device_calls == 1, result
    assert float_host_ops(result.partitioned) == [], (result.host_ops, result.host_reasons)
    for op, reasons in result.host_reasons.items():
        assert all("ICCA" not in r and "call_tir" not in r for r in reasons), (op, reasons)
