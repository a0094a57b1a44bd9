"""benchmarks/model_flops.py: the written FLOPs of a zoo decoder equal the FLOPs of its
matrix operators as the compiler lowers them (TensorExpr.flops, with no causal cut), for a
grouped-query model in training and a soft-capped, sliding-window one in prefill."""

from __future__ import annotations

import pathlib
import sys

import pytest

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.split import split_choice

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
from model_flops import mfu, written_flops  # noqa: E402


@pytest.mark.parametrize("model,phase", [("llama2-70b", "train"), ("gemma2-27b", "prefill")])
def test_written_flops_are_the_lowered_matrix_operators(model, phase, monkeypatch) -> None:
    # as lowered: no causal attention cut into query pieces over their visible keys
    monkeypatch.setattr(split_choice, "causal_split", lambda *args, **kwargs: None)
    workload = tvm_icca.get_workload(model, tiny=True, phase=phase, seq_len=16)
    compiled = compile_programs(workload, small_chip(64, 512 * 1024))
    matrix = sum(op.expr.flops() for p in compiled.programs for op in p.ops
                 if op.expr.kind in ("matmul", "attention"))
    assert written_flops(workload.config) == matrix
    assert mfu(workload.config, 1.0, float(matrix)) == pytest.approx(1.0)
