"""One vocabulary: every key a run reports is defined once in runtime_sim.contract.metrics."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_icca
from runtime_sim.contract.metrics import METRICS, OP_METRICS, metric
from runtime_sim.contract.presets import small_chip
from runtime_sim.timing.timing_report import OpTiming, TimingReport
from tvm_icca.cli.main import main
from tvm_icca.testing.relax_functions import relax_function


def _mlp() -> tvm.IRModule:
    def body(x, w1, w2):
        return relax.op.matmul(relax.op.nn.relu(relax.op.matmul(x, w1)), w2)

    func = relax_function([(8, 32), (32, 32), (32, 16)], body, names=["x", "w1", "w2"])
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def _undefined(keys) -> list[str]:
    return sorted(k for k in keys if k not in METRICS and k not in OP_METRICS)


def _rows_keys(rows) -> set[str]:
    return {k for row in rows for k in row}


@pytest.mark.parametrize("state", ["chip", "host"])
def test_run_statistics_use_only_defined_names(state: str) -> None:
    hw = small_chip(16)
    vm = relax.VirtualMachine(tvm_icca.compile(_mlp(), hw, state=state,
                                               resident=["w1", "w2"]), tvm.cpu())
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((8, 32), (32, 32), (32, 16))]
    got = vm["main"](*(tvm.runtime.tensor(a) for a in args)).numpy()
    np.testing.assert_allclose(got, np.maximum(args[0] @ args[1], 0) @ args[2], rtol=1e-5, atol=1e-5)
    stats = tvm_icca.last_run_stats()
    assert _undefined(stats) == []
    assert _undefined(_rows_keys(stats["simulated_ops"])) == []
    assert stats["simulated_s"] > 0 and stats["host_placed_bytes"] >= 0


def test_timing_report_uses_only_defined_names() -> None:
    # a chip with HBM: the preload stream's metrics are all there
    from tvm_icca.drivers.device_programs import compile_programs

    hw = small_chip(16).with_overrides(hbm_bandwidth=1e11, hbm_controllers=2)
    report = compile_programs(_mlp(), hw, resident=["w1", "w2"]).simulate()
    data = json.loads(report.to_json())
    assert _undefined(data) == []
    for table in ("per_op", "op_kinds", "slow_kinds", "slow_ops"):
        assert _undefined(_rows_keys(data[table])) == [], table
    assert _undefined(f.name for f in dataclasses.fields(OpTiming)) == []
    assert _undefined(TimingReport._SUMMARY) == []
    assert data["design"] == "elk-full" and data["hbm_bytes"] > 0


def test_simulate_json_uses_only_defined_names(capsys) -> None:
    assert main(["simulate", "nerf", "--tiny", "--json", "--no-progress"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert _undefined(data) == []
    assert "utilization" not in data  # the utilizations have one (flat) name each


def test_every_definition_is_complete() -> None:
    for name, m in {**METRICS, **OP_METRICS}.items():
        assert m.unit and m.meaning, name
        assert m.source in ("timing", "device", "both", "gpu"), name
    # a name is defined once: per-operator rows reuse the run-level definitions
    assert not set(METRICS) & set(OP_METRICS)
    assert metric("host_in_bytes").unit == "bytes"
    with pytest.raises(KeyError):
        metric("host_bytes")  # retired: it had two meanings


def test_dse_row_names_are_defined_once() -> None:
    from runtime_sim.contract.metrics import DSE_METRICS

    for name, m in DSE_METRICS.items():
        assert m.unit and m.meaning and m.source == "dse", name
    assert not set(DSE_METRICS) & (set(METRICS) | set(OP_METRICS))
    assert metric("status") is DSE_METRICS["status"]
    assert {"hbm_floor_s", "compute_floor_s", "interconnect_floor_s", "link_bytes"} <= set(METRICS)
