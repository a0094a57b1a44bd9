"""One value per metric: the functional device and the timing simulator, run over the same
programs, report the same value of every metric the glossary says both produce
(runtime_sim.contract.metrics, source "both"; issue 38).

Every zoo model at its tiny size (one per distinct program: the tiny OPTs are one module),
the bundled encoder layer on ipu-mk2, and Elk preload streams on a chip with HBM. The programs
come from the timing-only path, which tests/test_workloads.py checks is byte for byte what a
compiled executable runs; the device executes them on random data (the counted bytes and
peaks do not depend on values), then the timing simulator times the same run
(runtime_sim.run_stats). Counts and bytes must be equal exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tvm_icca
from runtime_sim import run_stats
from runtime_sim.contract.metrics import METRICS
from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.contract.program import PRELOAD
from runtime_sim.contract.stream import run_stream
from runtime_sim.functional.device import SimulatedDevice
from tvm_icca.cli.demo_command import demo_model_path
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.workloads import get_workload, list_workloads

# one worker builds the module's shared fixture once (make test runs on several)
pytestmark = [pytest.mark.xdist_group("metric_agreement"), pytest.mark.slow]

#: run-level metrics both executors produce; the tables are compared row by row below
BOTH = sorted(k for k, m in METRICS.items()
              if m.source == "both" and k not in ("simulated_s", "simulated_ops", "regions"))
#: per-operator counts both executors give (device ``regions[*]["ops"]``, timing ``per_op``)
OP_KEYS = ("steps", "shift_bytes", "rotation_bytes", "reduction_bytes", "relayout_bytes",
           "sram_bytes_per_core", "preloaded_bytes", "distributed_bytes")

CHIP = small_chip(16, 64 * 1024)
HBM_CHIP = small_chip(16, 64 * 1024, hbm_bandwidth=1e12, hbm_controllers=4)
LLMS = tuple(n for n in list_workloads() if n.startswith(("opt-", "llama2-", "gemma2-")))
STREAMS = [("llama2-7b", "elk-full"), ("llama2-7b", "ideal"), ("bert-large", "basic")]


def _tiny(name: str):
    return get_workload(name, tiny=True, batch=1, **({"context": 8} if name in LLMS else {}))


def _run(programs) -> tuple[dict[str, Any], Any]:
    """Run ``programs`` (one model invocation) on a fresh functional device on random data;
    its counters and the timing report of the same programs."""
    dev = SimulatedDevice()
    rng = np.random.default_rng(0)
    for program in programs:
        # floats at random; integer inputs (gather ids) zero, always a valid row
        dev.run(program, [rng.standard_normal(d.shape).astype(d.dtype)
                          if np.dtype(d.dtype).kind == "f" else np.zeros(d.shape, d.dtype)
                          for d in program.inputs])
    return run_stats.last_run_stats(device=dev), run_stats.last_run_timing(dev)


@pytest.fixture(scope="session")
def runs() -> dict[str, tuple[Any, dict[str, Any], Any]]:
    """Case -> (programs, device counters, timing report), each distinct program set once."""
    cache = PlanCache(jobs=1)
    out: dict[str, tuple[Any, dict[str, Any], Any]] = {}
    seen: dict[tuple[str, ...], str] = {}
    for name in list_workloads():
        model = compile_programs(_tiny(name), CHIP, plan_cache=cache, progress=False, jobs=1)
        key = tuple(p.to_json() for p in model.programs)
        if key in seen:  # the same programs as an earlier zoo model (tiny configs coincide)
            out[name] = out[seen[key]]
            continue
        seen[key] = name
        out[name] = (model.programs, *_run(model.programs))
    encoder = compile_programs(tvm_icca.load_onnx(demo_model_path()), preset("ipu-mk2"),
                               plan_cache=cache, progress=False, jobs=1)
    out["encoder"] = (encoder.programs, *_run(encoder.programs))
    for name, design in STREAMS:
        model = compile_programs(_tiny(name), HBM_CHIP, preload=design, plan_cache=cache,
                                 progress=False, jobs=1)
        out[f"{name}-{design}"] = (model.programs, *_run(model.programs))
    return out


CASES = [*list_workloads(), "encoder", *(f"{n}-{d}" for n, d in STREAMS)]


@pytest.mark.parametrize("case", CASES)
def test_every_both_metric_has_one_value(runs, case) -> None:
    programs, stats, report = runs[case]
    timing = report.to_dict(per_op=False)
    differ = {k: (stats[k], timing[k]) for k in BOTH if stats[k] != timing[k]}
    assert not differ, f"{case}: device vs timing {differ}"
    assert stats["simulated_s"] == report.total_s
    # the device's per-operator rows and the timing simulator's, operator by operator
    device_ops = [op for region in stats["regions"] for op in region["ops"]]
    assert [op["op"] for op in device_ops] == [op.name for op in report.per_op]
    assert len(stats["regions"]) == len(report.regions) == len(programs)
    for dev_op, row in zip(device_ops, stats["simulated_ops"]):
        differ = {k: (dev_op.get(k, 0), row[k]) for k in OP_KEYS if dev_op.get(k, 0) != row[k]}
        assert not differ, f"{case}: operator {row['name']}: device vs timing {differ}"


@pytest.mark.parametrize("case", CASES)
def test_counts_against_the_programs(runs, case) -> None:
    """The counts both agree on are the programs' own: one execute per operator of a stream
    (none without one), one preload per preload instruction; peaks within the SRAM."""
    programs, stats, report = runs[case]
    stream = run_stream(programs, report.hw.hbm_bandwidth > 0)
    num_ops = sum(len(p.ops) for p in programs)
    assert stats["executes"] == (num_ops if stream else 0)
    assert stats["preloads"] == sum(1 for ins in stream if ins.kind == PRELOAD)
    assert (stats["preloads"] > 0) == bool(stream) == (stats["distributed_bytes"] >= 0 and
                                                       stats["peak_preload_bytes_per_core"] > 0)
    assert report.hw.shift_buffer_bytes < stats["peak_sram_bytes_per_core"] <= \
        report.hw.sram_bytes_per_core


def test_stream_cases_exercise_every_stream_metric(runs) -> None:
    for name, design in STREAMS:
        _, stats, _ = runs[f"{name}-{design}"]
        assert stats["preloads"] > 0 and stats["executes"] > 0 and stats["preloaded_bytes"] > 0
        assert stats["peak_preload_bytes_per_core"] > 0
    assert any(runs[f"{n}-{d}"][1]["distributed_bytes"] > 0 for n, d in STREAMS)
