"""Elk trade-off tables (tvm_icca.model_pass.tradeoff_tables): the arrival of on-chip inputs."""

from __future__ import annotations

import pytest

from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.relayout import canonical_grid, producer_grid
from runtime_sim.machine.topology import make_topology
from tvm_icca.model_pass.tradeoff_tables import arrival_seconds
from tvm_icca.testing import exprs

CHIP = small_chip(4, 64 * 1024)
TOPO = make_topology(CHIP)


def test_arrival_of_a_row_split_input_replicated_on_every_core():
    # the producer leaves C [8, 16] float32 split by rows over 4 cores (128 B each); the
    # consumer splits its own output columns, so every core needs all of A = C: 512 B, of
    # which it already holds the producer's 128 B -> 384 B over its link
    producer = OpLayout(exprs.matmul(8, 4, 16), ExecutionPlan({"m": 4}, ({}, {}, {})))
    consumer = OpLayout(exprs.matmul(8, 16, 4), ExecutionPlan({"n": 4}, ({}, {}, {})))
    time_s, busy_s = arrival_seconds(consumer, [(0, producer_grid(producer))], TOPO)
    assert busy_s == pytest.approx(384 / CHIP.link_bandwidth)
    assert time_s == pytest.approx(busy_s + CHIP.link_latency_s)  # one chunk, one hop


def test_arrival_is_free_where_the_producer_left_the_data():
    producer = OpLayout(exprs.matmul(8, 4, 16), ExecutionPlan({"m": 4}, ({}, {}, {})))
    consumer = OpLayout(exprs.matmul(8, 16, 4), ExecutionPlan({"m": 4}, ({}, {}, {})))
    assert arrival_seconds(consumer, [(0, producer_grid(producer))], TOPO) == (0.0, 0.0)
    assert arrival_seconds(consumer, [], TOPO) == (0.0, 0.0)


def test_arrival_of_a_region_input_from_its_canonical_blocks():
    consumer = OpLayout(exprs.matmul(8, 16, 4), ExecutionPlan({"n": 4}, ({}, {}, {})))
    grid = canonical_grid((8, 16), 4, CHIP.num_cores)
    # each core needs the whole 128-float input and holds one canonical block of it
    held = int(grid.block[0] * grid.block[1]) * 4
    _, busy_s = arrival_seconds(consumer, [(0, grid)], TOPO)
    assert busy_s == pytest.approx((512 - held) / CHIP.link_bandwidth)


def test_arrival_from_one_core_is_held_by_its_send_port():
    # the producer leaves all of C [4, 16] float32 on core 0 (one block, 256 B); the consumer
    # splits its output rows over 4 cores, so core 0 sends three distinct 64 B row blocks,
    # 192 B through its one port, while each receiver takes only 64 B
    producer = OpLayout(exprs.matmul(4, 4, 16), ExecutionPlan({}, ({}, {}, {})))
    consumer = OpLayout(exprs.matmul(4, 16, 4), ExecutionPlan({"m": 4}, ({}, {}, {})))
    _, busy_s = arrival_seconds(consumer, [(0, producer_grid(producer))], TOPO)
    assert busy_s == pytest.approx(192 / CHIP.link_bandwidth)


@pytest.mark.parametrize("k_split", [4, 16])
def test_k_split_point_costs_the_device_replica_reduction(k_split):
    # the plan search prices the replica reduction with T10's ring term; an execute-state
    # point must cost it as the device sums the replicas (tree or chain), which is what the
    # timing simulator charges for the same plan's steps and reduction (Elk §4.3, Fig. 12)
    from runtime_sim.machine.topology import make_topology
    from runtime_sim.timing.opcost import op_cost
    from tvm_icca.model_pass.tradeoff_tables import _device_correction
    from tvm_icca.plan_search.cost import AnalyticCostModel

    hw = small_chip(64, 64 * 1024)
    layout = OpLayout(exprs.matmul(4, 4096, 64), ExecutionPlan({"k": k_split, "n": 4}, ({}, {}, {})))
    ring = AnalyticCostModel()(layout, hw)
    extra, traffic = _device_correction(layout, ring, hw)
    sim = op_cost(layout, hw, make_topology(hw))
    assert extra > 0.0  # the ring term under-estimates the schedule
    assert ring.time_s + extra == pytest.approx(sim.exec_s, rel=1e-6)
    # its link time: the bandwidth the reduction's transfers hold on the device (no hop
    # latency, adds or synchronizations), what a preload streaming beside it cannot use
    assert traffic == pytest.approx(sim.shift.busy_s + sim.reduction.busy_s, rel=1e-6)
    assert traffic < sim.shift.time_s + sim.reduction.time_s
    assert traffic < ring.time_s + extra


def test_rotation_across_chips_costs_the_fabric():
    # the plan search is chip-unaware; an execute-state point whose rotation ring spans two
    # chips must cost each shift phase at the inter-chip fabric when that is the bottleneck,
    # as the device does (A's ring of 8 cores has two links crossing chips: 256 B per phase
    # over 1 GB/s against 128 B per port over 5.5 GB/s)
    from runtime_sim.timing.opcost import op_cost
    from tvm_icca.model_pass.tradeoff_tables import _device_correction
    from tvm_icca.plan_search.cost import AnalyticCostModel

    hw = small_chip(8, 64 * 1024, num_chips=2, inter_chip_bandwidth=1e9)
    layout = OpLayout(exprs.matmul(4, 64, 8), ExecutionPlan({"n": 8}, ({"k": 8}, {}, {}), ("k",)),
                      hw.cores_per_chip)
    layout.validate()
    plain = AnalyticCostModel()(layout, hw)
    extra, traffic = _device_correction(layout, plain, hw)
    sim = op_cost(layout, hw, make_topology(hw))
    assert sim.shift.inter_busy_s > sim.shift.intra_busy_s  # the fabric binds
    assert extra == pytest.approx(sim.shift.time_s - plain.shift_s, rel=1e-6)
    assert plain.time_s + extra == pytest.approx(sim.exec_s, rel=1e-6)
    assert traffic == pytest.approx(sim.shift.busy_s, rel=1e-6)


@pytest.mark.xdist_group("hbm64_llama")  # the session's plan_cache: tests/test_elk_pass.py's chip
def test_layers_of_one_region_share_their_table_keys(plan_cache):
    # with its outputs kept on chip to the region's end (no host reads them here), every
    # layer of a decoder holds the KV-cache updates of the layers before it, so the live
    # bytes around identical operators differ; their keys (their trade-off points) must not,
    # or Elk §4.4 finds no repeated layer to reorder
    import dataclasses

    from tvm_icca.drivers.device_programs import compile_programs
    from tvm_icca.elk import reorder
    from tvm_icca.model_pass.tradeoff_tables import operator_tables
    from tvm_icca.workloads import get_workload

    hw = small_chip(64, 64 * 1024).with_overrides(name="hbm-64", hbm_bandwidth=1e12,
                                                   hbm_controllers=2)
    cache = plan_cache
    layers = 4
    model = compile_programs(get_workload("llama2-13b", tiny=True, batch=2, context=8,
                                          num_layers=layers), hw, plan_cache=cache)
    programs = [dataclasses.replace(p, host_outputs=()) for p in model.programs]
    tables = operator_tables(programs, hw, cache)
    found = reorder.detect_layers([t.key for t in tables])
    assert found is not None and found.count >= layers - 1
    period = found.period
    live = {t.live_bytes for t in tables[found.start:found.end:period]}
    assert len(live) > 1  # the live bytes do differ from layer to layer


def test_unmeasured_points_scale_by_the_device_priced_ratio():
    # a tuning record measures one k-split plan; an unmeasured ladder point (already priced
    # with the device's replica reduction) is scaled by measured / device-priced analytic,
    # not by measured / ring-priced analytic, which would count the reduction twice
    from runtime_sim.contract.program import OpProgram
    from tvm_icca.model_pass.tradeoff_tables import _device_time, _with_records
    from tvm_icca.plan_search.cost import AnalyticCostModel

    hw = small_chip(64, 64 * 1024)
    expr = exprs.matmul(4, 4096, 64)
    measured_plan = ExecutionPlan({"k": 16, "n": 4}, ({}, {}, {}))
    other_plan = ExecutionPlan({"k": 4, "n": 4}, ({}, {}, {}))
    layout = OpLayout(expr, measured_plan)
    device_s, _ = _device_time(layout, AnalyticCostModel()(layout, hw), hw)
    assert device_s > AnalyticCostModel()(layout, hw).time_s  # the two references differ
    op = OpProgram("mm", expr, measured_plan, ("a", "b"), "c")
    ladder = [(measured_plan, device_s, device_s / 2, False),
              (other_plan, device_s / 10, device_s / 20, False)]
    points = _with_records(op, (), hw, ladder, [(3.0 * device_s, measured_plan)])
    times = {json_plan(p): t for p, t, _, _ in points}
    assert times[json_plan(measured_plan)] == pytest.approx(3.0 * device_s)
    assert times[json_plan(other_plan)] == pytest.approx(3.0 * device_s / 10)  # on the front


def json_plan(plan):
    from tvm_icca.records.keys import plan_signature
    return plan_signature(plan)


@pytest.mark.parametrize("topology", ["all-to-all", "mesh"])
def test_preload_points_are_priced_as_the_device_delivers_them(topology):
    # every preload-state point's load and distribution time is what the timing simulator
    # charges for that preload (its delivery through the controllers, the mesh's edge ports
    # and multicast trees; its distribution phase), whatever the topology (Elk §4.3, §5)
    from runtime_sim.timing.work import WorkBuilder
    from tvm_icca.model_pass.tradeoff_tables import _preload_points

    hw = small_chip(64, 64 * 1024, topology=topology, hbm_bandwidth=1e12, hbm_controllers=4)
    topo = make_topology(hw)
    # B [64, 32] float32 replicated over the 16 row blocks of the output: 16 replicas
    layout = OpLayout(exprs.matmul(64, 64, 32), ExecutionPlan({"m": 16, "n": 4}, ({}, {}, {})),
                      hw.cores_per_chip)
    points = _preload_points(layout, (1,), (1,), (), hw, topo)
    assert len(points) > 1 and points[0].space > points[-1].space  # MaxPreload first
    planner = WorkBuilder(hw, topo)
    for p in points:
        s = dict(p.chunks).get(1, 1)
        load, space = planner.preload("hbm", "op", layout, (1,), (s,))
        assert p.load_s == pytest.approx(load.duration_s, rel=1e-12)
        assert p.network_s == pytest.approx(load.network.time_s, rel=1e-12)
        assert p.space == int(space.max())
        phase, _ = planner.distribute("op", layout, ((1, s),))
        assert p.distribute_s == pytest.approx(phase.time_s, rel=1e-12)
    if topology == "mesh":
        # the edge ports, not one core's link, bound the whole-partition delivery: preload
        # bytes over the link bandwidth (the tables' earlier price) is far too fast
        assert points[0].network_s > 2 * points[0].space / hw.link_bandwidth


def test_live_bytes_bound_every_choice_of_execute_points():
    """An operator's ``live_bytes`` bounds what the earlier outputs hold while it runs,
    whichever execute-state points the Elk pass picks for their producers: checked against
    the device's lifetime rule for random choices on a tiny Llama training forward. A held
    output's smaller points never take a larger partition than the region planner's plan
    (``ladder_output_caps``), so no choice holds more than the planner budgeted around, and
    ``live_bytes`` is exactly what the planner's plans hold."""
    import random

    from runtime_sim.contract.lifetimes import held_bytes
    from tvm_icca.drivers.device_programs import compile_programs
    from tvm_icca.model_pass.plan_cache import PlanCache
    from tvm_icca.model_pass.tradeoff_tables import ladder_output_caps, operator_tables
    from tvm_icca.workloads import get_workload

    # small enough SRAM that tighter execute points would split some outputs over fewer cores
    chip = small_chip(64, 32 * 1024).with_overrides(hbm_bandwidth=1e12, hbm_controllers=2)
    workload = get_workload("llama2-13b", tiny=True, phase="train", batch=2, seq_len=64)
    cache = PlanCache(jobs=1)
    programs = list(compile_programs(workload.mod, chip, plan_cache=cache, state="hbm",
                                     preload="off").programs)
    tables = operator_tables(programs, chip, cache)
    assert any(len(t.execs) > 1 for t in tables)
    assert any(ladder_output_caps(program, chip) for program in programs)
    rng = random.Random(0)
    for _ in range(40):
        flat = 0
        for program in programs:
            out = []
            for op in program.ops:
                point = rng.choice(tables[flat + len(out)].execs)
                layout = OpLayout(op.expr, point.plan.plan, chip.cores_per_chip)
                out.append(layout.partition_bytes(len(op.expr.tensors) - 1))
            names = ([op.input_names for op in program.ops], [op.output_name for op in program.ops],
                     program.staying_outputs)
            held = held_bytes(*names, out)
            planner = held_bytes(*names, [OpLayout(op.expr, op.plan, chip.cores_per_chip)
                                          .partition_bytes(len(op.expr.tensors) - 1)
                                          for op in program.ops])
            assert all(h <= tables[flat + k].live_bytes for k, h in enumerate(held))
            assert all(h <= p for h, p in zip(held, planner))
            assert [t.live_bytes for t in tables[flat:flat + len(program.ops)]] == planner
            flat += len(program.ops)


@pytest.mark.xdist_group("split_llama")  # the session's split_prefill: tests/test_piece_grouping.py
def test_pieces_with_equal_points_share_one_key(split_prefill, plan_cache):
    """The pieces of a split read equal blocks at different places (their expressions differ
    in their views): those whose points are equal get one key, so that Elk sees them repeat,
    and a key never joins tables whose points differ."""
    from tvm_icca.elk.periods import representatives
    from tvm_icca.model_pass.tradeoff_tables import operator_tables
    from tvm_icca.split.region_split import original_operator

    # tests/test_piece_grouping.py's split prefill: the fused attention split into pieces
    chip = split_prefill.chip
    cache = plan_cache  # its plans and tables shared with that test
    programs = list(split_prefill.compiled.programs)
    ops = [op for p in programs for op in p.ops]
    tables = operator_tables(programs, chip, cache)
    by_key: dict[str, object] = {}
    for t in tables:
        first = by_key.setdefault(t.key, t)
        assert (first.execs, first.preloads, first.hbm_bytes) == (t.execs, t.preloads, t.hbm_bytes)
    # pieces of one operator reading different blocks, now one key
    shared = [(a, b) for a, b in zip(ops, tables) if original_operator(a.name) != a.name
              and a.expr.structure_key() != a.expr.structure_key(views=False)]
    assert shared, "the case must split an operator into pieces that read views"
    keys_per_piece_expr = {}
    for op, t in shared:
        keys_per_piece_expr.setdefault(t.key, set()).add(op.expr.structure_key())
    assert any(len(exprs_) > 1 for exprs_ in keys_per_piece_expr.values())
    # and they repeat: some piece stands for another
    rep = representatives([t.key for t in tables])
    assert any(rep[i] != i for i, (op, _) in enumerate(zip(ops, tables))
               if original_operator(op.name) != op.name)
