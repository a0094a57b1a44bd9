"""First-stage plan search: every chosen plan is valid, fits SRAM and is costed sensibly."""

import dataclasses
import math

import pytest

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import preset, small_chip
from tvm_icca.plan_search import AnalyticCostModel, plan_operator, rotating_tensors
from tvm_icca.plan_search.intmath import divisors
from tvm_icca.plan_search.plan_space import axis_values
from tvm_icca.plan_search.search_memo import plan_structure


def test_factor_candidates(exprs):
    assert divisors(12) == (1, 2, 3, 4, 6, 12)
    # F_op candidates of an axis: every value up to min(extent, cores) (the complete space)
    values = axis_values(plan_structure(exprs.matmul(32, 5120, 8)), 1472)
    assert [list(v) for v in values] == [list(range(1, 33)), list(range(1, 9)), list(range(1, 1473))]  # m, n, k


@pytest.mark.parametrize("cores,sram", [(4, 16 * 1024), (16, 12 * 1024), (64, 10 * 1024)])
def test_plan_is_valid_and_fits(cores, sram, exprs):
    hw = small_chip(cores, sram)
    planned = plan_operator(exprs.matmul(32, 48, 40), hw)
    planned.layout.validate()
    assert planned.layout.num_cores <= cores
    assert planned.memory_bytes_per_core <= hw.usable_sram_bytes
    assert planned.memory_bytes_per_core == planned.layout.memory_bytes_per_core()


def test_tight_memory_forces_rotation(exprs):
    roomy = plan_operator(exprs.matmul(64, 64, 64), small_chip(16, 256 * 1024))
    tight = plan_operator(exprs.matmul(64, 64, 64), small_chip(16, 8 * 1024 + 3 * 1024))
    assert tight.memory_bytes_per_core < roomy.memory_bytes_per_core
    assert any(tight.plan.temporal[t] for t in range(3)), "a tight budget needs temporal partitions"
    assert tight.time_s >= roomy.time_s


def test_single_core_cost_is_closed_form(exprs):
    hw = small_chip(1, 1024 * 1024)
    planned = plan_operator(exprs.matmul(32, 32, 32), hw)
    # One core, one step: 32^3 MAC on the matrix unit plus one synchronization.
    expected = 2 * 32**3 / hw.matrix_flops_per_cycle / hw.clock_hz + hw.sync_cycles / hw.clock_hz
    assert planned.time_s == pytest.approx(expected)


def test_shift_cost_counts_every_rotation(exprs):
    hw = small_chip(4, 1024 * 1024, link_latency_s=1e-7)
    expr = exprs.matmul(8, 8, 8)
    plan = ExecutionPlan({"m": 2, "n": 2, "k": 1}, ({"k": 2}, {"k": 2}, {}), ("k",))
    layout = OpLayout(expr, plan)
    layout.validate()
    cost = AnalyticCostModel()(layout, hw)
    # A's partition is 4 x (8/2) fp32 = 64 bytes, B's (8/2) x 4 = 64 bytes; each shifts twice
    # per core (f_t = 2, no outer loop); each shift is one chunk paying one hop's latency.
    assert cost.shift_s == pytest.approx(2 * 2 * (64 / hw.link_bandwidth + hw.link_latency_s))
    assert layout.shift_bytes() == 4 * 2 * 2 * 64


def test_shift_cost_of_a_slower_rotation_is_paid_every_step(exprs):
    """A tensor rotating slower than its axis steps is staggered over the cores by the Cannon
    skew, so some core shifts it at every step, and a bulk-synchronous step waits for that
    core: the analytic shift term is the simulator's, not ``f_t`` shifts per tensor."""
    from runtime_sim.machine.topology import make_topology
    from runtime_sim.timing.opcost import op_cost

    hw = small_chip(8, 1024 * 1024, link_latency_s=0.0)
    expr = exprs.matmul(8, 8, 8)
    # A rotates on k 4 times (a ring of F_n = 4), B twice (a ring of F_m = 2): S_k = 4
    plan = ExecutionPlan({"m": 2, "n": 4, "k": 1}, ({"k": 4}, {"k": 2}, {}), ("k",))
    layout = OpLayout(expr, plan)
    layout.validate()
    a, b = layout.partition_bytes(0), layout.partition_bytes(1)
    cost = AnalyticCostModel()(layout, hw)
    assert cost.shift_s == pytest.approx(4 * (a + b) / hw.link_bandwidth)
    device = op_cost(layout, hw, make_topology(hw)).shift.time_s
    assert cost.shift_s == pytest.approx(device, rel=1e-9)
    assert cost.shift_s > (4 * a + 2 * b) / hw.link_bandwidth * 1.1  # what f_t shifts would say


def test_rotating_tensors_follow_f_op(exprs):
    planned = plan_operator(exprs.matmul(64, 64, 64), small_chip(16, 8 * 1024 + 3 * 1024))
    rts = rotating_tensors(planned.layout)
    F = planned.layout.F
    assert rts[0].spatial_partition_factor == (F["m"], F["k"])
    assert rts[1].spatial_partition_factor == (F["k"], F["n"])
    for t, rt in enumerate(rts):
        sharing = planned.layout.sharing(t)
        assert sharing % math.prod(rt.temporal_partition_factor) == 0


def test_tensor_larger_than_chip_is_a_clear_error(exprs):
    with pytest.raises(PlanNotFoundError, match="exceeds the on-chip memory"):
        plan_operator(exprs.matmul(2048, 2048, 2048), small_chip(4, 64 * 1024))


def test_nothing_fits_names_op_and_budget(exprs):
    with pytest.raises(PlanNotFoundError, match="budget"):
        plan_operator(exprs.matmul(16, 16, 16), small_chip(1, 8 * 1024 + 2048), name="mm0")


def test_default_chip_plans_large_matmul_quickly(exprs):
    planned = plan_operator(exprs.matmul(32, 5120, 15360, "float16"), preset("ipu-mk2"))
    assert planned.layout.num_cores > 1000
    assert planned.memory_bytes_per_core <= preset("ipu-mk2").usable_sram_bytes


def test_search_maps_hbm_replicas_onto_one_chip(exprs) -> None:
    """On a 2-chip system with HBM the search keeps its (chip-unaware) optimum and maps it so
    that no weight block is read from two chips' HBM: the order with the batch rows innermost
    is as fast and avoids the duplicate reads. On one chip nothing changes."""
    from tvm_icca.plan_search.mapping import mapping_cost

    hw = small_chip(64, 256 * 1024, hbm_bandwidth=1e11, hbm_controllers=2, num_chips=2,
                    inter_chip_bandwidth=50e9)
    e = exprs.matmul(32, 512, 512, "float16")
    planned = plan_operator(e, hw, hbm_inputs=(1,))
    unmapped = plan_operator(e, hw)
    assert planned.plan.op_partition["m"] > 1  # the batch rows are split: B has replicas
    assert planned.plan.core_order  # ... which the default numbering puts on both chips
    default = OpLayout(e, ExecutionPlan(planned.plan.op_partition, planned.plan.temporal,
                                        planned.plan.loop_order))
    before, after = mapping_cost(default, hw, (1,)), mapping_cost(planned.layout, hw, (1,))
    assert before.hbm_read_bytes == 2 * before.hbm_unique_bytes
    assert after.hbm_read_bytes == after.hbm_unique_bytes == 512 * 512 * 2
    assert after.time_s < before.time_s
    assert planned.time_s == pytest.approx(unmapped.time_s)  # same plan, same time
    one_chip = small_chip(64, 256 * 1024, hbm_bandwidth=1e11, hbm_controllers=2)
    assert plan_operator(e, one_chip, hbm_inputs=(1,)).plan.core_order == ()


def test_chooser_spreads_a_small_consumer_next_to_its_producer(exprs) -> None:
    """The mapping chooser costs the re-layout from a producer spread over 4 chips: a 4-core
    consumer is placed one core per chip (nothing crosses chips) rather than on chip 0; with
    no producer (nothing to gain) the contiguous placement stays; on one chip nothing changes."""
    from tvm_icca.plan_search.mapping import choose_core_order, mapping_cost

    hw = small_chip(16, 256 * 1024, num_chips=4, inter_chip_bandwidth=1e9)
    prod = OpLayout(exprs.bias_add(16, 64), ExecutionPlan({"i": 16}, ({}, {}, {})), hw.cores_per_chip)
    cons = exprs.row_sum(16, 64)
    plan = ExecutionPlan({"i": 4}, ({}, {}))
    chosen = choose_core_order(cons, plan, hw, producers=((0, prod),))
    assert chosen.chips == 4
    spread = mapping_cost(OpLayout(cons, chosen, hw.cores_per_chip), hw, producers=((0, prod),))
    contiguous = mapping_cost(OpLayout(cons, plan, hw.cores_per_chip), hw, producers=((0, prod),))
    assert spread.inter_chip_bytes == 0 and contiguous.inter_chip_bytes == 12 * 64 * 4
    assert choose_core_order(cons, plan, hw).chips == 1
    assert choose_core_order(cons, plan, small_chip(16, 256 * 1024), producers=((0, prod),)) == plan
    # the search passes the producers to the chooser (and keys its memo on them)
    from tvm_icca.plan_search import SearchMemo
    cache = SearchMemo()
    budget = 2 * 64 * 4 * 8  # room for a few rows per core: the search's own plan is small
    alone = plan_operator(cons, hw, budget_bytes=budget, cache=cache)
    fed = plan_operator(cons, hw, budget_bytes=budget, cache=cache, producers=((0, prod),))
    assert fed.plan.op_partition == alone.plan.op_partition
    assert mapping_cost(fed.layout, hw, producers=((0, prod),)).inter_chip_bytes == 0


@pytest.mark.parametrize("cap_share", [0.5, 0.25])
def test_output_cap_is_the_fastest_plan_within_it(exprs, cap_share) -> None:
    """``output_cap`` bounds the output's partition, and the plan is still the exact optimum
    among the plans that meet it (checked against scoring the whole space)."""
    import numpy as np

    from tvm_icca.plan_search.batch_cost import AnalyticBatchModel
    from tvm_icca.plan_search.search import scan

    hw = small_chip(64, 64 * 1024)
    expr = exprs.matmul(32, 256, 64)  # its fastest plan cuts the reduction 8 ways
    free = plan_operator(expr, hw)
    out = len(expr.tensors) - 1
    cap = int(free.layout.partition_bytes(out) * cap_share)
    capped = plan_operator(expr, hw, output_cap=cap)
    assert capped.layout.partition_bytes(out) <= cap < free.layout.partition_bytes(out)
    best = math.inf
    for scored in scan(plan_structure(expr), AnalyticBatchModel(hw), hw.num_cores, None,
                       hw.usable_sram_bytes):
        fits = scored.batch.partition_bytes()[:, out] <= cap
        if fits.any():
            best = min(best, float(np.min(scored.time[fits])))
    assert capped.time_s == pytest.approx(best, rel=1e-9)
    assert capped.time_s >= free.time_s


def test_output_cap_below_every_plan_is_a_clear_error(exprs) -> None:
    with pytest.raises(PlanNotFoundError, match="at most 1 bytes per core of its output"):
        plan_operator(exprs.matmul(64, 48, 40), small_chip(4, 64 * 1024), output_cap=1)


def test_a_budget_below_a_proved_least_footprint_fails_without_a_search(exprs, monkeypatch):
    """A failing search proves the least footprint of the structure (plan_search.search.
    least_memory); a later, smaller budget of the same structure (a trade-off ladder's next
    rung, another layer's) fails at once with the same finding, and a budget at that
    footprint is still searched and fits."""
    from tvm_icca.plan_search import search as search_module
    from tvm_icca.plan_search.search_memo import SearchMemo

    hw, expr, memo = small_chip(16, 64 * 1024), exprs.matmul(64, 64, 64), SearchMemo()
    with pytest.raises(PlanNotFoundError) as first:
        plan_operator(expr, hw, budget_bytes=2000, cache=memo)
    need = search_module.least_memory(plan_structure(expr, memo), hw, memo)
    assert f"the smallest needs {need} bytes per core" in str(first.value)
    assert need == search_module.least_memory(plan_structure(expr), hw)  # against no memo

    def no_search(*args, **kwargs):
        raise AssertionError("searched below the proved least footprint")

    with monkeypatch.context() as patch:
        patch.setattr(search_module, "best_plan", no_search)
        with pytest.raises(PlanNotFoundError) as second:
            plan_operator(expr, hw, budget_bytes=1500, cache=memo)
    assert f"the smallest needs {need} bytes per core, the budget is 1500" in str(second.value)
    fits = plan_operator(expr, hw, budget_bytes=need, cache=memo)
    assert fits.memory_bytes_per_core <= need


@pytest.mark.parametrize("build,cores", [
    (lambda e: e.matmul(12, 16, 10), 8),
    (lambda e: e.conv2d(1, 2, 5, 5, 3, 3, 3, pad=1), 6),
])
def test_step_filter_keeps_every_plan_that_fits_and_beats_the_limit(exprs, build, cores) -> None:
    """``steps_within`` (the search's pair filter, budget and time bound) never drops the
    (F_op, steps) pair of a plan that fits the budget and the output cap and is no slower than
    the limit; and within a tight budget it does drop pairs (else it would prune nothing)."""
    import numpy as np

    from tvm_icca.plan_search.batch_cost import AnalyticBatchModel
    from tvm_icca.plan_search.plan_space import op_partitions, plans_for
    from tvm_icca.plan_search.search import steps_within

    hw = small_chip(cores, 1024 * 1024)
    structure = plan_structure(build(exprs))
    model = AnalyticBatchModel(hw)
    batch = plans_for(structure, op_partitions(structure, cores))
    times, _ = model.times(batch)
    memory = batch.memory()
    out = batch.partition_bytes()[:, -1]
    for share in (0.0, 0.1, 0.5):
        budget = float(np.quantile(memory, share))
        cap = float(np.quantile(out, 1 - share))
        limit = float(np.quantile(times, 1 - share))
        keep = steps_within(model, structure, limit, budget, cap)(batch.F, batch.S, batch.xp)
        wanted = (memory <= budget) & (out <= cap) & (times <= limit)
        assert keep[wanted].all()
        if share == 0.0:
            assert not keep.all()


def test_a_gathered_table_counts_its_rows_not_the_table():
    """An embedding lookup holds the rows its ids pick (the gathered view), not its table: a
    table of 50,000 rows (12.8 MB) plans on 4 x 64 KiB of SRAM; a view larger than the chip is refused."""
    from tvm import relax

    from tvm_icca.lower.te_to_expr import extract_op

    def take(rows: int, ids: int):
        bb = relax.BlockBuilder()
        table = relax.Var("table", relax.TensorType((rows, 64), "float32"))
        index = relax.Var("ids", relax.TensorType((ids,), "int64"))
        with bb.function("f", [table, index]):
            with bb.dataflow():
                out = bb.emit_output(relax.op.take(table, index, axis=0))
            bb.emit_func_output(out)
        return extract_op(bb.get()["f"]).expr

    chip = small_chip(4, 64 * 1024)
    expr = take(50_000, 16)
    assert expr.inputs[0].nbytes > chip.num_cores * chip.sram_bytes_per_core
    planned = plan_operator(expr, chip)
    assert planned.memory_bytes_per_core <= chip.usable_sram_bytes
    with pytest.raises(PlanNotFoundError, match=r"tensor 'table' of shape \[4096, 64\]"):
        plan_operator(take(100, 4096), chip)


@pytest.mark.parametrize("shape, budget_share", [
    (dict(rows=256, keys=512, head_dim=64, batch=(8,), causal=True), 1.0),
    (dict(rows=256, keys=2048, head_dim=128, batch=(4,), mask=True), 0.03),  # K and V rotate
    (dict(rows=1024, keys=1024, head_dim=128, batch=(1, 4), group=2, causal=True), 0.1),
])
def test_attention_estimate_is_the_simulated_time(shape, budget_share) -> None:
    """The fused attention operator's chosen plan on a full IPU Mk2: the search's estimate
    (the device's replica reduction, as it was chosen) against the timing simulator's time of
    the same layout, within 5% (the analytic model's MAPE on random matmul plans is 7.5%,
    benchmarks/results/cost_model_accuracy.md)."""
    from runtime_sim.machine.topology import make_topology
    from runtime_sim.timing.opcost import op_cost
    from tvm_icca.testing.exprs import attention_expr

    hw = preset("ipu-mk2")
    expr = attention_expr(shape.pop("rows"), shape.pop("keys"), shape.pop("head_dim"),
                          dtype="float16", **shape)
    planned = plan_operator(expr, hw, budget_bytes=int(hw.usable_sram_bytes * budget_share))
    planned.layout.validate()
    assert planned.memory_bytes_per_core <= hw.usable_sram_bytes * budget_share
    simulated = op_cost(planned.layout, hw, make_topology(hw)).exec_s
    assert planned.time_s == pytest.approx(simulated, rel=0.05)
    if budget_share < 1:  # the tight budget is met by rotating keys and values
        assert planned.layout.S["j"] > 1


# -- chip-aware choice (issue 41) -----------------------------------------------------------------
def _feed_program(hw, prod, p_plan, cons, c_plan, weight: bool):
    """Y = X + b (``prod`` in ``p_plan``), then ``cons`` reads Y in ``c_plan`` (and, with
    ``weight``, its second input W from HBM)."""
    from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl

    decls = (TensorDecl("X", prod.inputs[0].shape, "float32", "host"),
             TensorDecl("b", prod.inputs[1].shape, "float32", "host"))
    second = ("W",) if weight else ()
    if weight:
        decls += (TensorDecl("W", cons.inputs[1].shape, "float32", "hbm"),)
    ops = (OpProgram("op0", prod, p_plan, ("X", "b"), "Y"),
           OpProgram("op1", cons, c_plan, ("Y",) + second, "Z"))
    return DeviceProgram("r0", hw.to_dict(), decls, ("Z",), ops)


@pytest.mark.parametrize("chips", [2, 4])
def test_chip_aware_inter_chip_bytes_agree_with_the_timing_simulator(exprs, chips) -> None:
    """The bytes the chip-aware search prices as crossing chips (:func:`mapping_cost`: the
    rotations' shifts from another chip and the re-layout from the producer) are the bytes the
    timing simulator sends over the inter-chip fabric, for plans whose rings and re-layouts
    cross chips, on two and four chips (the chosen plans:
    :func:`test_chip_aware_search_picks_a_plan_the_simulator_confirms_faster`)."""
    from runtime_sim.timing import simulate_timing
    from tvm_icca.plan_search.mapping import mapping_cost, rotation_inter_chip_bytes

    hw = small_chip(16, 256 * 1024, num_chips=chips, inter_chip_bandwidth=2e9, hbm_bandwidth=1e12,
                    hbm_controllers=chips)
    prod, cons = exprs.bias_add(16, 256), exprs.matmul(16, 256, 16)
    p_plan = ExecutionPlan({"i": 1, "j": 16}, ({}, {}, {}))  # chips hold column blocks of Y
    producer = OpLayout(prod, p_plan, hw.cores_per_chip)
    ring = ExecutionPlan({"m": 16}, ({}, {"k": 16}, {}))  # B rotates in one ring over all chips
    rows = ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {}))  # re-lays Y out by rows
    rotations = relayouts = 0.0
    for plan in (ring, rows, dataclasses.replace(rows, core_order=("n", "m", "k"))):
        layout = OpLayout(cons, plan, hw.cores_per_chip)
        assert layout.replicas(2) == 1  # no partial sums: rotations and re-layouts only
        estimate = mapping_cost(layout, hw, (1,), ((0, producer),)).inter_chip_bytes
        report = simulate_timing([_feed_program(hw, prod, p_plan, cons, plan, True)])
        assert report.per_op[1].inter_chip_bytes == pytest.approx(estimate, rel=1e-12)
        rotated = rotation_inter_chip_bytes(layout, hw.cores_per_chip)
        rotations, relayouts = rotations + rotated, relayouts + estimate - rotated
    assert rotations > 0 and relayouts > 0  # both kinds were compared


@pytest.mark.parametrize("chips", [2, 4])
def test_arrival_of_an_unplaced_input_is_what_a_spread_producer_sends(exprs, chips) -> None:
    """An input whose producer is not planned yet (a causal attention's pieces are weighed
    before their region is planned) is priced as if its producer spread it evenly over the
    chips: each chip receives ``(C - 1) / C`` of the distinct bytes its cores read. A matmul
    whose every core reads all of ``A`` receives ``(C - 1) |A|`` across chips, which the
    timing simulator sends from a producer that holds column blocks of ``A`` on every chip;
    its arrival is the slower of the cores' links and the fabric, as the simulator's phase."""
    from runtime_sim.timing import simulate_timing
    from tvm_icca.plan_search.mapping import arrival_seconds, unplaced_inter_chip_bytes

    hw = small_chip(16, 256 * 1024, num_chips=chips, inter_chip_bandwidth=2e9, hbm_bandwidth=1e12,
                    hbm_controllers=chips)
    prod, cons = exprs.bias_add(16, 256), exprs.matmul(16, 256, 16)
    p_plan = ExecutionPlan({"i": 1, "j": 16}, ({}, {}, {}))
    plan = ExecutionPlan({"n": 16}, ({}, {}, {}))  # every core reads all of A
    layout = OpLayout(cons, plan, hw.cores_per_chip)
    a_bytes = 16 * 256 * 4
    assert unplaced_inter_chip_bytes(layout, 0, hw) == (chips - 1) * a_bytes
    report = simulate_timing([_feed_program(hw, prod, p_plan, cons, plan, True)])
    assert report.per_op[1].inter_chip_bytes == pytest.approx((chips - 1) * a_bytes, rel=1e-12)
    link_s = layout.partition_bytes(0) / hw.link_bandwidth
    fabric_s = (chips - 1) * a_bytes / hw.inter_chip_bandwidth
    assert arrival_seconds(layout, hw, (0,)) == pytest.approx(max(link_s, fabric_s), rel=1e-12)
    # a producer's layout, when known, replaces the assumption (here the same bytes)
    producer = OpLayout(prod, p_plan, hw.cores_per_chip)
    assert arrival_seconds(layout, hw, (0,), ((0, producer),)) == pytest.approx(max(link_s, fabric_s))
    # a row block per chip, where each chip's cores read only their own rows
    rows = ExecutionPlan({"m": 16}, ({}, {}, {}))
    by_rows = OpLayout(cons, rows, hw.cores_per_chip)
    assert unplaced_inter_chip_bytes(by_rows, 0, hw) == pytest.approx(a_bytes * (chips - 1) / chips)
    one_chip = small_chip(16, 256 * 1024)
    assert arrival_seconds(OpLayout(cons, plan), one_chip, (0,)) == pytest.approx(
        layout.partition_bytes(0) / one_chip.link_bandwidth)
    assert arrival_seconds(layout, hw, ()) == 0.0


@pytest.mark.parametrize("chips", [2, 4])
def test_chip_aware_search_picks_a_plan_the_simulator_confirms_faster(exprs, chips) -> None:
    """A bias add reads a producer's output that the chips hold in row blocks (its bias from
    HBM). The chip-unaware optimum splits the columns over all cores, so most of the data
    crosses chips however it is numbered; the chip-aware search takes the plan that reads
    the producer's blocks where they are. The timing simulator confirms it: fewer bytes cross
    chips and the operator is faster, and the estimate counts the bytes the simulator sends.
    On one chip the search's plan is unchanged."""
    from runtime_sim.timing import simulate_timing
    from tvm_icca.plan_search.mapping import choose_core_order, mapping_cost
    from tvm_icca.plan_search.search import _search
    from tvm_icca.plan_search.search_memo import SearchMemo

    hw = small_chip(16, 256 * 1024, num_chips=chips, inter_chip_bandwidth=2e9, hbm_bandwidth=1e12,
                    hbm_controllers=chips)
    prod, cons = exprs.bias_add(64, 32), exprs.bias_add(64, 32)
    p_plan = ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {}))
    producer = OpLayout(prod, p_plan, hw.cores_per_chip)
    feeds = ((0, producer),)
    aware = plan_operator(cons, hw, producers=feeds, hbm_inputs=(1,)).plan
    optimum = _search(cons, hw, None, hw.usable_sram_bytes, "add", SearchMemo(), True).plan
    unaware = choose_core_order(cons, optimum, hw, (1,), feeds)  # the mapping alone
    assert aware.op_partition != unaware.op_partition
    runs = [simulate_timing([_feed_program(hw, prod, p_plan, cons, p, True)]).per_op[1]
            for p in (aware, unaware)]
    assert runs[0].inter_chip_bytes < runs[1].inter_chip_bytes
    assert runs[0].end_s - runs[0].start_s < runs[1].end_s - runs[1].start_s
    for plan, run in zip((aware, unaware), runs):  # and the estimate counts what the device sends
        layout = OpLayout(cons, plan, hw.cores_per_chip)
        assert mapping_cost(layout, hw, (1,), feeds).inter_chip_bytes == pytest.approx(run.inter_chip_bytes)
    one_chip = small_chip(16, 256 * 1024, hbm_bandwidth=1e12, hbm_controllers=1)
    assert (plan_operator(cons, one_chip, producers=((0, OpLayout(prod, p_plan)),), hbm_inputs=(1,)).plan
            == _search(cons, one_chip, None, one_chip.usable_sram_bytes, "add", SearchMemo(), True).plan)


def test_fastest_rows_are_the_k_fastest_rows_of_the_whole_space(exprs) -> None:
    """``fastest_rows`` (the chip-aware choice's shortlist) returns each of the ``k`` fastest
    F_op rows' fastest plan, as scoring every plan of the space finds them; ``k = 1`` is the
    search's optimum."""
    import numpy as np

    from tvm_icca.plan_search.batch_cost import AnalyticBatchModel
    from tvm_icca.plan_search.search import fastest_rows, scan

    hw = small_chip(16, 16 * 1024)
    expr = exprs.matmul(32, 64, 48)
    structure, model = plan_structure(expr), AnalyticBatchModel(hw)
    best: dict[bytes, float] = {}
    for scored in scan(structure, model, hw.num_cores, None, hw.usable_sram_bytes):
        for F, t in zip(scored.batch.F, scored.time):
            best[F.tobytes()] = min(best.get(F.tobytes(), math.inf), float(t))
    k = 5
    found = fastest_rows(structure, model, hw.usable_sram_bytes, hw.num_cores, k)
    assert len(found) == k
    np.testing.assert_allclose(found.time, sorted(best.values())[:k], rtol=1e-12)
    for F, t in zip(found.batch.F, found.time):
        assert best[F.tobytes()] == pytest.approx(float(t), rel=1e-12)
    assert found.time[0] == pytest.approx(plan_operator(expr, hw).time_s, rel=1e-12)


def test_fastest_rows_capped_rotating_groups_lie_between_unrotated_and_complete(exprs) -> None:
    """``rotating_groups`` (the chip-aware choice's cap) scores the rotating plans of the
    first groups of rows only: none is the unrotated search, enough is the complete one, and
    any cap finds no plan faster than the complete search and no fewer rows than no rotations."""
    import numpy as np

    from tvm_icca.plan_search.batch_cost import AnalyticBatchModel
    from tvm_icca.plan_search.search import fastest_rows

    hw = small_chip(64, 16 * 1024)
    structure = plan_structure(exprs.matmul(64, 128, 96))
    model = AnalyticBatchModel(hw)
    budget = hw.usable_sram_bytes // 2  # tight: most rows fit only with rotations

    def found(**kwargs):
        return fastest_rows(structure, model, budget, hw.num_cores, 5, **kwargs)

    unrotated, complete = found(rotating=False), found()
    assert len(unrotated) < len(complete) == 5  # the case rotates: a cap can change the answer
    np.testing.assert_array_equal(found(rotating_groups=0).time, unrotated.time)
    np.testing.assert_array_equal(found(rotating_groups=1000).time, complete.time)
    for cap in (1, 2, 3):
        capped = found(rotating_groups=cap)
        assert len(unrotated) <= len(capped) <= 5
        assert (capped.time >= complete.time[:len(capped)] * (1 - 1e-12)).all()
