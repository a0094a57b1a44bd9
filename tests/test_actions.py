"""schedules.actions: the actions that cost energy, one count in both executors.

A matmul's FLOPs, SRAM bytes and energy by hand from its plan; the functional device's counts
equal the timing simulator's on an all-to-all chip, a mesh chip and two chips (a compiled
model, and a load-compute-store program); the reports' energy line, JSON keys, warning and
trace (the power track: tests/test_trace.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tvm_icca
from runtime_sim import run_stats
from runtime_sim.contract.energy import ActionCounts, run_energy
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan, VgmPlan
from runtime_sim.contract.preset_energies import ENERGY_FIELDS
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.functional.device import SimulatedDevice
from runtime_sim.timing import simulate_timing
from runtime_sim.timing.trace import timing_trace
from runtime_sim.timing.vgm_timing import simulate_vgm_timing
from schedules.actions import ACTION_METRICS, chunk_bytes, op_actions
from tvm_icca.testing import exprs as builders
from tvm_icca.testing.timing_programs import one_op_program

#: per-action energies of the hand computation (pJ; W), all different so that a count in the
#: wrong component shows
#: a chip without an energy model: every energy field 0 (small_chip inherits the IPU's)
UNPRICED = {**{name: 0.0 for name in ENERGY_FIELDS}, "matrix_pj_per_flop_by_dtype": {}}
PRICES = dict(UNPRICED, matrix_pj_per_flop=0.5, vector_pj_per_flop=0.25,
              sram_read_pj_per_byte=1.0, sram_write_pj_per_byte=2.0, link_pj_per_byte=3.0,
              host_pj_per_byte=4.0, static_w_per_core=0.01, static_w_per_chip=0.5)
PJ = 1e-12


def _run(programs) -> tuple[dict, object]:
    """The programs on a fresh functional device (random data), its counters beside the
    timing report of the same run."""
    dev = SimulatedDevice()
    rng = np.random.default_rng(0)
    for program in programs:
        dev.run(program, [rng.standard_normal(d.shape).astype(d.dtype)
                          if np.dtype(d.dtype).kind == "f" else np.zeros(d.shape, d.dtype)
                          for d in program.inputs])
    return run_stats.last_run_stats(device=dev), run_stats.last_run_timing(dev)


def test_matmul_by_hand():
    """C = A @ B (6x8 @ 8x10) on 8 cores: m and n split in two, k split in two (replicas)
    and rotated in two steps. Every core runs 2 sub-tasks of 3x2x5 multiply-adds."""
    hw = small_chip(16, **PRICES)
    expr = builders.matmul(6, 8, 10)
    plan = ExecutionPlan({"m": 2, "n": 2, "k": 2}, ({"k": 2}, {}, {}))
    layout = OpLayout(expr, plan)
    assert (layout.num_cores, layout.steps) == (8, 2)
    assert [chunk_bytes(layout, t) for t in range(3)] == [3 * 2 * 4, 2 * 5 * 4, 3 * 5 * 4]
    counts = op_actions(layout, hw)
    subtasks = 8 * 2
    assert counts.matrix_flops == (("float32", 2.0 * 6 * 8 * 10),)  # no padding: 2 M N K
    # the k replicas (4 cores) send their 3x5 partial sums: one add per element
    assert counts.vector_flops == 4 * 3 * 5
    assert counts.sram_read_bytes == subtasks * (24 + 40)
    assert counts.sram_write_bytes == subtasks * 60

    # the host reads C: it returns from the cores that own it
    program = dataclasses.replace(one_op_program(expr, plan, hw), host_outputs=("C",))
    report = simulate_timing([program], hw)
    (op,) = report.per_op
    moved = op.rotation_bytes + op.reduction_bytes + op.relayout_bytes
    assert op.reduction_bytes == 4 * 60
    delivered = op.preloaded_bytes  # A and B from the host into every core's box
    # each core's partitions: A 3x2 (rotating over the two k steps), B 4x5
    assert delivered == 8 * (3 * 2 * 4 + 4 * 5 * 4)
    returned = op.host_out_bytes
    assert returned == 4 * 60  # C back to the host from its 4 owners
    a = report.actions
    assert a.sram_read_bytes == subtasks * 64 + moved + returned
    assert a.sram_write_bytes == subtasks * 60 + moved + delivered
    # the all-to-all exchange: every byte received (cores and host) passes it once
    assert a.link_byte_hops == moved + delivered + returned
    assert a.host_bytes == op.host_in_bytes + returned and a.hbm_bytes == 0
    by_hand = (960 * 0.5 + 60 * 0.25 + a.sram_read_bytes * 1.0 + a.sram_write_bytes * 2.0
               + a.link_byte_hops * 3.0 + a.host_bytes * 4.0) * PJ \
        + (16 * 0.01 + 0.5) * report.total_s
    assert report.energy.energy_j == pytest.approx(by_hand, rel=1e-12)
    data = report.to_dict()
    assert data["energy_j"] == report.energy.energy_j
    assert data["average_power_w"] == pytest.approx(by_hand / report.total_s)
    assert data["energy_breakdown_j"]["matrix"] == pytest.approx(960 * 0.5 * PJ)
    assert {k: data[k] for k in ACTION_METRICS} == {k: data["per_op"][0][k] for k in ACTION_METRICS}
    assert data["matrix_flops"] == 960


def test_matrix_flops_by_dtype():
    """A float16 matmul is priced at its dtype's energy (matrix_pj_per_flop_by_dtype)."""
    hw = small_chip(16, matrix_pj_per_flop=1.0,
                    matrix_pj_per_flop_by_dtype={"float16": 0.25})
    expr = builders.matmul(8, 8, 8, dtype="float16")
    counts = op_actions(OpLayout(expr, ExecutionPlan({"m": 2}, ({}, {}, {}))), hw)
    assert counts.matrix_flops == (("float16", 1024.0),)
    energy = run_energy(counts, hw.energy_table(), 0.0, cores=16, chips=1)
    assert energy.breakdown_j["matrix"] == pytest.approx(1024 * 0.25 * PJ)


def test_attention_counts_both_units():
    """Fused attention (8 rows, 16 keys in 2 steps of 8, head 4) on 2 cores by rows: per
    sub-task its two products (2 x 4 rows x 8 keys x (4 + 4)) on the matrix unit and its
    online softmax on the vector unit: 4 ops per score, 5 per row, 2 per output element
    (schedules.attention), the scale folded into Q (once per element of the core's rows)."""
    hw = small_chip(16)
    expr = builders.attention_expr(8, 16, 4)
    layout = OpLayout(expr, ExecutionPlan({"i": 2}, ({}, {"j": 2}, {"j": 2}, {})))
    assert (layout.num_cores, layout.steps) == (2, 2)
    counts = op_actions(layout, hw)
    runs = 2 * 2
    assert counts.matrix_flops == (("float32", runs * 2 * 4 * 8 * (4 + 4)),)
    softmax = 4 * 8 * 4 + 4 * 5 + 4 * 4 * 1 + 4 * 4 * 2
    normalize = 8 * 4  # o / l on every output element, once
    assert counts.vector_flops == runs * softmax + normalize


def test_vector_work_is_vector():
    """An element-wise operator runs on the vector unit: no matrix FLOPs."""
    hw = small_chip(16)
    expr = builders.bias_add(6, 12)
    counts = op_actions(OpLayout(expr, ExecutionPlan({"i": 3, "j": 2}, ({}, {"j": 3}, {}))), hw)
    assert counts.matrix_flops == () and counts.vector_flops == 6 * 12


@pytest.fixture(scope="module")
def compiled_runs():
    """A one-layer tiny Llama on three systems: (chip, device counters, timing report)."""
    workload = tvm_icca.get_workload("llama2-7b", tiny=True, batch=1, context=8, num_layers=1)
    chips = {"all-to-all": small_chip(16, **PRICES),
             "mesh": small_chip(16, topology="mesh", **PRICES),
             "two chips": small_chip(8, num_chips=2, inter_chip_bandwidth=1e10,
                                     **{**PRICES, "inter_chip_pj_per_byte": 5.0})}
    out = {}
    for name, hw in chips.items():
        programs = tvm_icca.compile_programs(workload, hw, progress=False, jobs=1).programs
        out[name] = (hw, *_run(programs))
    return out


@pytest.mark.parametrize("system", ["all-to-all", "mesh", "two chips"])
def test_device_counts_equal_timing(compiled_runs, system):
    hw, stats, report = compiled_runs[system]
    timing = report.to_dict()
    assert {k: stats[k] for k in ACTION_METRICS} == {k: timing[k] for k in ACTION_METRICS}
    assert timing["matrix_flops"] > 0 and timing["vector_flops"] > 0
    assert timing["link_byte_hops"] > 0
    device_ops = [op for region in stats["regions"] for op in region["ops"]]
    for dev_op, row in zip(device_ops, timing["per_op"]):
        assert {k: dev_op[k] for k in ACTION_METRICS} == {k: row[k] for k in ACTION_METRICS}
    # the run's energy reaches the statistics (run_stats), as the report has it
    assert stats["energy_j"] == report.energy.energy_j > 0
    assert stats["energy_breakdown_j"] == report.energy.breakdown_j
    if system == "two chips":
        assert report.actions.inter_chip_bytes > 0
        assert report.energy.breakdown_j["inter_chip"] == pytest.approx(
            report.actions.inter_chip_bytes * 5.0 * PJ)


def test_mesh_byte_hops_exceed_the_exchange(compiled_runs):
    """The same programs' bytes cross more than one link on a mesh: byte-hops at least the
    bytes (the mesh routes every transfer over one link or more)."""
    _, _, mesh = compiled_runs["mesh"]
    _, _, exchange = compiled_runs["all-to-all"]
    assert mesh.actions.link_byte_hops > exchange.actions.link_byte_hops


def test_vgm_counts_equal_timing():
    """A load-compute-store matmul: the device's tile counts equal the VGM timing's."""
    hw = small_chip(16, **PRICES)
    expr = builders.matmul(16, 32, 16)
    plan = VgmPlan({"m": 4, "n": 8, "k": 16})
    decls = (TensorDecl("A", (16, 32), "float32"), TensorDecl("B", (32, 16), "float32"))
    program = DeviceProgram("r0", hw.to_dict(), decls, ("C",),
                            (OpProgram("op0", expr, plan, ("A", "B"), "C"),))
    stats, report = _run([program])
    timing = report.to_dict()
    assert {k: stats[k] for k in ACTION_METRICS} == {k: timing[k] for k in ACTION_METRICS}
    assert timing["matrix_flops"] == 2 * 16 * 32 * 16
    assert report.energy is not None and "energy" in report.table()
    assert simulate_vgm_timing([program], small_chip(16, **UNPRICED)).energy is None


def test_not_modelled_and_warning():
    hw = small_chip(16, **UNPRICED)
    expr = builders.matmul(6, 8, 10)
    plan = ExecutionPlan({"m": 2, "n": 2}, ({}, {}, {}))
    report = simulate_timing([one_op_program(expr, plan, hw)], hw)
    data = report.to_dict(per_op=False)
    assert data["energy_j"] is None and data["energy_breakdown_j"] == {}
    assert data["matrix_flops"] == 960  # counted even without energies
    assert "energy    not modelled (chip gives no per-action energies)" in report.table()
    assert not [e for e in timing_trace(report) if e["ph"] == "C"]

    # static power of 100 W per core on a chip rated 10 W: warned
    hot = small_chip(16, **{**UNPRICED, "static_w_per_core": 100.0, "board_power_w": 10.0})
    report = simulate_timing([one_op_program(expr, plan, hot)], hot)
    assert report.energy.over_board_power
    assert "warning   average power 1600.0 W exceeds" in report.table()


def test_counts_add():
    a = ActionCounts.of({"float32": 2.0}, sram_read_bytes=3.0)
    assert (a + a).to_dict()["matrix_flops"] == 4.0 and (a + a).sram_read_bytes == 6.0
