"""One value per metric: the functional device and the timing simulator, run over the same
programs, report the same value of every metric the glossary says both produce
(runtime_sim.contract.metrics, source "both"; issue 38).

Here: the bundled encoder layer on ipu-mk2, and Elk preload streams on a chip with HBM. Every
zoo model at its tiny size is checked where tests/test_workloads.py runs it on the chip
(test_tiny_config_on_icca_matches_llvm, the same check: tvm_icca.testing.device_runs
.assert_metrics_agree). The programs come from the timing-only path, which
tests/test_workloads.py checks is byte for byte what a compiled executable runs; the device
executes them on random data (the counted bytes and peaks do not depend on values), then the
timing simulator times the same run (runtime_sim.run_stats). Counts and bytes must be equal
exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tvm_icca
from runtime_sim import run_stats
from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.functional.device import SimulatedDevice
from tvm_icca.cli.demo_command import demo_model_path
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.testing.device_runs import assert_metrics_agree
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.workloads import get_workload, list_workloads

# one worker builds the module's shared fixture once (make test runs on several)
pytestmark = [pytest.mark.xdist_group("metric_agreement"), pytest.mark.slow]

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
    encoder = compile_programs(tvm_icca.load_onnx(demo_model_path()), preset("ipu-mk2"),
                               plan_cache=cache, progress=False, jobs=1)
    out["encoder"] = (encoder.programs, *_run(encoder.programs))
    for name, design in STREAMS:
        model = compile_programs(_tiny(name), HBM_CHIP, preload=design, plan_cache=cache,
                                 progress=False, jobs=1)
        out[f"{name}-{design}"] = (model.programs, *_run(model.programs))
    return out


CASES = ["encoder", *(f"{n}-{d}" for n, d in STREAMS)]


@pytest.mark.parametrize("case", CASES)
def test_every_both_metric_has_one_value(runs, case) -> None:
    """Every metric both executors produce, run-level and per operator, and the counts
    against the programs (assert_metrics_agree)."""
    programs, stats, report = runs[case]
    assert_metrics_agree(programs, stats, report, case)


def test_stream_cases_exercise_every_stream_metric(runs) -> None:
    for name, design in STREAMS:
        _, stats, _ = runs[f"{name}-{design}"]
        assert stats["preloads"] > 0 and stats["executes"] > 0 and stats["preloaded_bytes"] > 0
        assert stats["peak_preload_bytes_per_core"] > 0
    assert any(runs[f"{n}-{d}"][1]["distributed_bytes"] > 0 for n, d in STREAMS)
