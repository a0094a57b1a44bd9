"""A workload run on the functional device against TVM's CPU build, with both executors'
counts of the same run (``tvm_icca.last_run_stats`` and the timing report)."""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

import tvm_icca
from runtime_sim.run_stats import last_run_timing

#: TVM's CPU build without optimizations: the independent reference of a device run.
REFERENCE_TARGET = {"kind": "llvm", "opt-level": 0}


#: Reference builds kept per process, by module structure: the test suite compares several
#: device runs of one module (other chips, other phases of the same weights) with one CPU
#: build, and a build plus its LLVM JIT costs seconds. Bounded, oldest dropped first.
_BUILT: dict[int, list[tuple[Any, Any]]] = {}
_BUILT_LIMIT = 32


def reference_build(mod: Any) -> Any:
    """TVM's CPU build of ``mod`` for :data:`REFERENCE_TARGET`: what a device run is compared
    with. Unoptimized LLVM code is numerically the same TIR and builds several times faster
    (a tiny BERT-Large: 1.6 s against 7.9 s at ``-O3``). A module structurally equal to one
    built earlier in this process gets that build (an executable is not changed by running
    it)."""
    key = tvm_ffi.structural_hash(mod)
    for seen, built in _BUILT.get(key, ()):
        if tvm_ffi.structural_equal(seen, mod):
            return built
    built = tvm.compile(mod, target=tvm.target.Target(REFERENCE_TARGET))
    while _BUILT and sum(map(len, _BUILT.values())) >= _BUILT_LIMIT:
        del _BUILT[next(iter(_BUILT))]
    _BUILT.setdefault(key, []).append((mod, built))
    return built


def run_outputs(executable: Any, args: list[Any]) -> list[Any]:
    """``main``'s outputs of ``executable`` on ``args``, as a list."""
    out = relax.VirtualMachine(executable, tvm.cpu())["main"](*args)
    return [out] if hasattr(out, "numpy") else list(out)


def run_against_llvm(workload: Any, chip: Any, preload: str, seed: int = 3,
                     tol: float = 1e-4, planned: Any = None) -> tuple[dict[str, Any], Any]:
    """Compile ``workload`` for ``chip`` with ``preload``, run it on random arguments, assert
    that every output matches TVM's CPU build (``tol``) and that both executors counted the
    same executes, preloaded bytes (some) and distributed bytes; returns the functional
    device's run statistics and the timing report of the same run.

    ``planned``, a module ``compile_programs`` already planned for ``chip`` and ``preload``
    (``CompiledModel.module``), is built in place of ``workload.mod`` without planning it
    again (the planning pass leaves a planned module alone); the reference is still
    ``workload.mod``."""
    args = [tvm.runtime.tensor(a) for a in workload.random_args(seed=seed)]
    mod = planned if planned is not None else workload.mod
    got = run_outputs(tvm_icca.compile(mod, chip, preload=preload), args)
    stats = tvm_icca.last_run_stats()
    want = run_outputs(reference_build(workload.mod), args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=tol, atol=tol)
    report = last_run_timing()
    assert stats["executes"] == report.executes == report.num_ops
    assert stats["preloaded_bytes"] == report.preloaded_bytes > 0
    assert stats["distributed_bytes"] == report.distributed_bytes
    return stats, report
