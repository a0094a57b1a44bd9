"""The pattern checks of partitioning (tvm_icca.partition.patterns): the memo that judges
each distinct call once (issue 40) answers as :func:`unsupported_reason` does."""

from __future__ import annotations

import pytest
import tvm_ffi
from tvm import relax

import tvm_icca.partition.partitioner as partitioner
from tvm_icca.hardware_choice import resolve_hardware
from tvm_icca.partition.patterns import SupportMemo, unsupported_reason
from tvm_icca.workloads import get_workload


def _add(shape: tuple[int, ...], dtype: str, name: str) -> relax.Call:
    """``add(a, b)`` of two fresh variables named after ``name``, normalized (typed)."""
    a = relax.Var(f"{name}_a", relax.TensorType(shape, dtype))
    b = relax.Var(f"{name}_b", relax.TensorType(shape, dtype))
    return relax.BlockBuilder().normalize(relax.op.add(a, b))


def test_memo_judges_each_structure_once_as_unsupported_reason_does() -> None:
    hw = resolve_hardware("ipu-pod4-hbm")
    memo = SupportMemo(hw)
    calls = [_add((4, 8), "float32", "layer0"), _add((4, 8), "float32", "layer1"),
             _add((4, 9), "float32", "wider"), _add((4, 8), "float64", "double"),
             _add((4, 8), "float64", "double2")]
    answers = [memo.supported(c) for c in calls]
    assert answers == [unsupported_reason(c, hw) is None for c in calls]
    assert answers == [True, True, True, False, False]  # the chip computes no float64
    # the second layer's call and the second float64 call were memo hits
    assert memo.judged == 3


@pytest.mark.parametrize("name,kwargs", [
    ("llama2-13b", {"num_layers": 3, "tiny": True}),
    ("resnet18", {"tiny": True}),
])
def test_partition_is_the_same_without_the_memo(name: str, kwargs: dict,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    hw = resolve_hardware("ipu-pod4-hbm")
    mod = get_workload(name, **kwargs).mod
    judged: list[int] = []
    plain_supported = SupportMemo.supported

    def counted(self: SupportMemo, call: relax.Call) -> bool:
        fits = plain_supported(self, call)
        judged.append(self.judged)
        return fits

    monkeypatch.setattr(SupportMemo, "supported", counted)
    memoized = partitioner.partition_module(mod, hw)
    asked, distinct = len(judged), judged[-1]
    assert 0 < distinct < asked  # identical layers and blocks share their calls
    monkeypatch.setattr(SupportMemo, "supported",
                        lambda self, call: unsupported_reason(call, self.hw) is None)
    assert tvm_ffi.structural_equal(memoized, partitioner.partition_module(mod, hw))
