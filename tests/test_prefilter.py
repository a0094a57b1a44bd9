"""The partitioning passes skipped because they cannot change a module (issue 40): the module
partitioned with them skipped is the one partitioned with every pass run."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.transform import FoldConstant

import tvm_icca.partition.partitioner as partitioner
from tvm_icca.hardware_choice import resolve_hardware
from tvm_icca.partition.patterns import get_icca_patterns
from tvm_icca.partition.prefilter import called_ops, may_fold, may_match, patterns_that_may_match
from tvm_icca.workloads import get_workload

F32 = "float32"


def _module(with_constants: bool) -> tvm.IRModule:
    """``main(x) = relu(x @ w + c)``, ``w`` a parameter or, ``with_constants``, ``c`` computed
    from two constants (which FoldConstant folds)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), F32))
    w = relax.Var("w", relax.TensorType((8, 16), F32))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, w))
            if with_constants:
                one = relax.const(np.ones(16, F32))
                c = bb.emit(relax.op.add(one, one))
                y = bb.emit(relax.op.add(y, c))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    return bb.get()


def _unfiltered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition as before the prefilter: every pattern, FoldConstant always."""
    monkeypatch.setattr(partitioner, "may_fold", lambda mod: True)
    monkeypatch.setattr(partitioner, "patterns_that_may_match", lambda patterns, mod: list(patterns))


def test_fold_constant_changes_nothing_where_may_fold_says_so() -> None:
    plain, folded = _module(False), _module(True)
    assert not may_fold(plain)
    assert tvm_ffi.structural_equal(FoldConstant()(plain), plain)
    assert may_fold(folded)
    assert not tvm_ffi.structural_equal(FoldConstant()(folded), folded)


def test_patterns_of_absent_operators_cannot_match() -> None:
    mod = _module(False)
    ops = called_ops(mod)
    assert ops == {"relax.matmul", "relax.nn.relu"}
    patterns = get_icca_patterns()
    kept = patterns_that_may_match(patterns, mod)
    names = [p.name for p in kept]
    assert names == [p.name for p in patterns if p.name in names]      # priority order kept
    assert "icca.matmul_relu" in names or "icca.matmul" in names
    assert not any("conv2d" in n for n in names)
    # every dropped pattern, alone, leaves the module as it is
    for pattern in patterns:
        if pattern.name not in names:
            assert not may_match(pattern.pattern, ops)
    fused = relax.transform.FuseOpsByPattern(
        [p for p in patterns if p.name not in names][:20], annotate_codegen=False)(mod)
    assert tvm_ffi.structural_equal(fused, mod)


@pytest.mark.parametrize("name,kwargs", [
    ("llama2-13b", {"num_layers": 2, "tiny": True}),
    ("resnet18", {"tiny": True}),
    ("bert-large", {"num_layers": 1, "tiny": True}),
])
def test_partition_is_the_same_without_the_prefilter(name: str, kwargs: dict,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    hw = resolve_hardware("ipu-pod4-hbm")
    mod = get_workload(name, **kwargs).mod
    filtered = partitioner.partition_module(mod, hw)
    _unfiltered(monkeypatch)
    assert tvm_ffi.structural_equal(filtered, partitioner.partition_module(mod, hw))


def test_constants_still_fold_when_partitioning(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = resolve_hardware("ipu-pod4-hbm")
    mod = _module(True)
    filtered = partitioner.partition_module(mod, hw)
    _unfiltered(monkeypatch)
    assert tvm_ffi.structural_equal(filtered, partitioner.partition_module(mod, hw))
