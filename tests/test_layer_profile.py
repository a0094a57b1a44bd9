"""benchmarks/layer_profile.py: operators grouped by label, with their execution bounds."""

from __future__ import annotations

import pathlib
import sys

import pytest

from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram
from runtime_sim.timing import simulate_timing
from runtime_sim.timing.floors import execute_bound_seconds

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import layer_profile  # noqa: E402


def test_exec_bound_of_a_weight_product(exprs):
    """A decode-shaped product x[4, 64] @ w[64, 64] split 4 x 4 on 16 cores, x from the host:
    its group carries its execution bound, the run takes at least it, and the table shows
    the ratio."""
    hw = small_chip(16, 1024 * 1024)
    e = exprs.matmul(4, 64, 64, dtype="float16")
    consts = {t.name: {"dtype": t.dtype, "shape": list(t.shape), "source": "host"}
              for t in e.inputs}
    op = OpProgram("op0", e, ExecutionPlan({"k": 4, "n": 4}, ({}, {}, {})), ("A", "B"), "C")
    program = DeviceProgram("r0", hw.to_dict(), (), ("C",), (op,), constants=consts)
    report = simulate_timing([program])
    exprs_by_op = {(o.region, o.name): e for o in report.per_op}
    (group,) = layer_profile.group_ops(report, exprs_by_op)
    bound = execute_bound_seconds(e, report.per_op[0].flops, hw)
    assert group.exec_bound_s == pytest.approx(bound) and bound > 0
    assert report.per_op[0].duration_s >= bound
    assert layer_profile.group_ops(report)[0].exec_bound_s == 0.0
    table = "\n".join(layer_profile.profile_table(report, "t", exprs=exprs_by_op))
    assert "x exec bound" in table and "their execution bounds" in table
