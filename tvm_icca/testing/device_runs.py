"""A workload run on the functional device against TVM's CPU build, with both executors'
counts of the same run (``tvm_icca.last_run_stats`` and the timing report)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

import tvm_icca
from runtime_sim.contract.metrics import METRICS
from runtime_sim.contract.program import PRELOAD
from runtime_sim.contract.stream import run_stream
from runtime_sim.run_stats import last_run_timing

#: TVM's CPU build without optimizations: the independent reference of a device run.
REFERENCE_TARGET = {"kind": "llvm", "opt-level": 0}


#: Reference builds kept per process, by module structure: the test suite compares several
#: device runs of one module (other chips, other phases of the same weights) with one CPU
#: build, and a build plus its LLVM JIT costs seconds. Bounded, oldest dropped first.
_BUILT: dict[int, list[tuple[Any, Any]]] = {}
_BUILT_LIMIT = 32


def reference_build(mod: Any) -> Any:
    """TVM's CPU build of ``mod`` for :data:`REFERENCE_TARGET`, loaded as a library: what a
    device run is compared with (pass it to ``relax.VirtualMachine``). Unoptimized LLVM code
    is numerically the same TIR and builds several times faster (a tiny BERT-Large: 1.6 s
    against 7.9 s at ``-O3``). It is exported as a shared library and loaded, not left to
    TVM's LLVM JIT, whose machine code for the first virtual machine costs the same whatever
    the target's ``opt-level`` (a tiny Llama2-7B: 1.1 s of CPU, the library 0.3 s with its
    link). A module structurally equal to one built earlier in this process gets that build
    (a library is not changed by running it)."""
    key = tvm_ffi.structural_hash(mod)
    for seen, built in _BUILT.get(key, ()):
        if tvm_ffi.structural_equal(seen, mod):
            return built
    executable = tvm.compile(mod, target=tvm.target.Target(REFERENCE_TARGET))
    with tempfile.TemporaryDirectory(prefix="icca-reference-") as folder:
        path = os.path.join(folder, "reference.so")
        executable.export_library(path)
        built = tvm.runtime.load_module(path)  # mapped: the file may go
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


#: run-level metrics both executors produce (the glossary's source "both"); the per-operator
#: rows are compared by :data:`OP_KEYS`
BOTH_METRICS = tuple(sorted(k for k, m in METRICS.items() if m.source == "both"
                            and k not in ("simulated_s", "simulated_ops", "regions")))
#: per-operator counts both executors give (device ``regions[*]["ops"]``, timing ``per_op``)
OP_KEYS = ("steps", "shift_bytes", "rotation_bytes", "reduction_bytes", "relayout_bytes",
           "sram_bytes_per_core", "preloaded_bytes", "distributed_bytes", "hbm_bytes")


def assert_metrics_agree(programs: Any, stats: dict[str, Any], report: Any, case: str) -> None:
    """One value per metric (issue 38): the functional device's counters of a run
    (``last_run_stats``) and the timing simulator's report of the same programs
    (``last_run_timing``) give the same value of every metric both produce, run-level and
    operator by operator, exactly; and the counts are the programs' own: one execute per
    operator of a preload stream (none without one), one preload per preload instruction,
    peaks within the SRAM."""
    timing = report.to_dict(per_op=False)
    differ = {k: (stats[k], timing[k]) for k in BOTH_METRICS if stats[k] != timing[k]}
    assert not differ, f"{case}: device vs timing {differ}"
    assert stats["simulated_s"] == report.total_s
    device_ops = [op for region in stats["regions"] for op in region["ops"]]
    assert [op["op"] for op in device_ops] == [op.name for op in report.per_op]
    assert len(stats["regions"]) == len(report.regions) == len(programs)
    for dev_op, row in zip(device_ops, stats["simulated_ops"]):
        differ = {k: (dev_op.get(k, 0), row[k]) for k in OP_KEYS if dev_op.get(k, 0) != row[k]}
        assert not differ, f"{case}: operator {row['name']}: device vs timing {differ}"
    stream = run_stream(programs, report.hw.hbm_bandwidth > 0)
    num_ops = sum(len(p.ops) for p in programs)
    assert stats["executes"] == (num_ops if stream else 0)
    assert stats["preloads"] == sum(1 for ins in stream if ins.kind == PRELOAD)
    assert (stats["preloads"] > 0) == bool(stream) == (stats["distributed_bytes"] >= 0 and
                                                       stats["peak_preload_bytes_per_core"] > 0)
    assert report.hw.shift_buffer_bytes < stats["peak_sram_bytes_per_core"] <= \
        report.hw.sram_bytes_per_core
