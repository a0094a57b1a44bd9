"""The complete plan space (tvm_icca.plan_search.plan_space, space_size) and the exact search (plan_operator).

The references here are independent of the vectorized code: plain loops over every factor
tuple, judged by ``OpLayout.validate`` (the one definition of plan validity) and scored by
``AnalyticCostModel`` on real layouts.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest

from runtime_sim.contract.errors import IccaError, InvalidPlanError
from runtime_sim.contract.expr import AffineIndex, Axis, TensorAccess, TensorExpr, make_load
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import preset, small_chip
from tvm_icca.plan_search import AnalyticCostModel, plan_operator
from tvm_icca.plan_search.batch_cost import (
    AnalyticBatchModel,
    ArrivalCostModel,
    best_loop_order,
    replica_reduction_array,
    replica_reduction_lower_bound,
)
from tvm_icca.plan_search.filters import PlanFilters
from tvm_icca.plan_search.plan_space import (
    iter_plan_chunks,
    op_partitions,
    plans_for,
    temporal_assignments,
)
from tvm_icca.plan_search.search import candidate_partitions
from tvm_icca.plan_search.search_memo import SearchMemo, plan_structure
from tvm_icca.plan_search.space_size import count_complete_space

ax = AffineIndex.of_axis


def _shared_rings(n1: int, n2: int, n3: int) -> TensorExpr:
    """O[i] = sum_{k,l} A[k,l] * B[k,l] * C[i]: A and B rotate on k and l and both lack i,
    so their rings can collide (the one case where OpLayout's ring check bites)."""
    A = TensorAccess("A", (n1, n2), "float32", (ax("k"), ax("l")))
    B = TensorAccess("B", (n1, n2), "float32", (ax("k"), ax("l")))
    C = TensorAccess("C", (n3,), "float32", (ax("i"),))
    O = TensorAccess("O", (n3,), "float32", (ax("i"),))
    body = {"op": "mul", "args": [{"op": "mul", "args": [make_load(0, A.indices), make_load(1, B.indices)]},
                                  make_load(2, C.indices)]}
    return TensorExpr("elementwise", (Axis("i", n3), Axis("k", n1, True), Axis("l", n2, True)),
                      (A, B, C), O, body)


def _sum_exp(m: int, n: int) -> TensorExpr:
    """Y[i] = sum_k exp(X[i,k]): zero padding would add exp(0), so k is never padded."""
    X = TensorAccess("X", (m, n), "float32", (ax("i"), ax("k")))
    Y = TensorAccess("Y", (m,), "float32", (ax("i"),))
    return TensorExpr("reduce", (Axis("i", m), Axis("k", n, True)), (X,), Y,
                      {"op": "exp", "args": [make_load(0, X.indices)]})


def brute_force_plans(expr: TensorExpr, cores: int) -> set[tuple]:
    """Every (F_op, f_t) OpLayout.validate accepts on up to ``cores`` cores, by plain loops.

    Temporal factors are tried on every axis a tensor has, with values up to its sharing
    count (``prod f_t <= P`` is the only shortcut: a product above P cannot divide it).
    """
    axes = expr.axis_names
    extent = {a.name: a.extent for a in expr.axes}
    found = set()
    for F in itertools.product(*[range(1, extent[a] + 1) for a in axes]):
        if math.prod(F) > cores:
            continue
        op_partition = dict(zip(axes, F))
        base = OpLayout(expr, ExecutionPlan(op_partition, tuple({} for _ in expr.tensors)))
        per_tensor = []
        for t in range(len(expr.tensors)):
            own, P = base.tensor_axes(t), base.sharing(t)
            per_tensor.append([dict(zip(own, c)) for c in itertools.product(range(1, P + 1), repeat=len(own))
                               if math.prod(c) <= P])
        for temporal in itertools.product(*per_tensor):
            try:
                OpLayout(expr, ExecutionPlan(op_partition, tuple(temporal))).validate()
            except InvalidPlanError:
                continue
            found.add((F, tuple(t.get(a, 1) for t in temporal for a in axes)))
    return found


def _as_set(batch) -> set[tuple]:
    rows = {(tuple(int(x) for x in batch.F[i]), tuple(int(x) for x in batch.ft[i].ravel()))
            for i in range(len(batch))}
    assert len(rows) == len(batch), "the enumeration lists a plan twice"
    return rows


CASES = {
    "matmul": (lambda e: e.matmul(3, 4, 5), 8),
    "batched matmul": (lambda e: e.matmul(2, 3, 2, batch=2), 8),
    "conv2d stride 2": (lambda e: e.conv2d(1, 2, 5, 5, 2, 3, 3, stride=2, pad=1), 6),
    "softmax (pinned row)": (lambda e: e.softmax(4, 6), 8),
    "row sum": (lambda e: e.row_sum(4, 6), 8),
    "bias add (broadcast)": (lambda e: e.bias_add(4, 6), 8),
    "matmul + epilogue input": (lambda e: e.matmul_bias_relu(2, 4, 3), 8),
    "shared rings": (lambda e: _shared_rings(4, 2, 4), 8),
    "unpaddable reduction": (lambda e: _sum_exp(4, 6), 12),
    # keys split and rotated (K, V, mask), rows and features split only; padded keys allowed
    "attention": (lambda e: e.attention_expr(3, 5, 2, batch=(2,), value_dim=2, mask=True), 6),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_enumeration_is_exactly_the_valid_space(exprs, case) -> None:
    build, cores = CASES[case]
    expr = build(exprs)
    structure = plan_structure(expr)
    batch = plans_for(structure, op_partitions(structure, cores))
    assert _as_set(batch) == brute_force_plans(expr, cores)
    counted = count_complete_space(structure, cores)
    assert counted.complete_plans == len(batch)


def test_ring_rule_is_applied(exprs) -> None:
    """Without the ring check the shared-rings op would list plans OpLayout rejects."""
    expr = _shared_rings(4, 2, 4)
    structure = plan_structure(expr)
    F = op_partitions(structure, 8)
    raw = sum(len(temporal_assignments(structure, p)) for p in
              (np.prod(np.where(~structure.own[None], f[None, None, :], 1), axis=2)[0] for f in F))
    assert raw > len(plans_for(structure, F))


@pytest.mark.parametrize("case", ["matmul", "batched matmul", "conv2d stride 2", "shared rings"])
def test_enumerated_plans_validate_with_any_loop_order(exprs, case) -> None:
    build, cores = CASES[case]
    expr = build(exprs)
    structure = plan_structure(expr)
    batch = plans_for(structure, op_partitions(structure, cores))
    rng = np.random.default_rng(0)
    for i in rng.choice(len(batch), size=min(len(batch), 60), replace=False):
        order = rng.permutation(structure.num_axes)
        OpLayout(expr, batch.plan(int(i), order)).validate()


@pytest.mark.parametrize("build,cores", [
    (lambda e: e.matmul(24, 16, 12), 64),
    (lambda e: e.matmul(8, 12, 6, batch=4), 48),
    (lambda e: e.conv2d(2, 4, 6, 6, 4, 3, 3, pad=1), 24),
])
def test_complete_count_matches_listing(exprs, build, cores) -> None:
    """The combinatorial count (with loop orders) equals listing every plan."""
    structure = plan_structure(build(exprs))
    plans = orders = 0
    for batch in iter_plan_chunks(structure, op_partitions(structure, cores)):
        plans += len(batch)
        orders += sum(math.factorial(int(k)) for k in (batch.S > 1).sum(axis=1))
    counted = count_complete_space(structure, cores)
    assert (counted.complete_plans, counted.complete) == (plans, orders)


def test_complete_count_takes_the_tensor_expression(exprs) -> None:
    """The public entry point counts an operator's expression as it counts its structure,
    and refuses anything else with an IccaError."""
    expr = exprs.matmul(24, 16, 12)
    assert count_complete_space(expr, 64) == count_complete_space(plan_structure(expr), 64)
    assert count_complete_space(expr, 64, SearchMemo()) == count_complete_space(expr, 64)
    with pytest.raises(IccaError, match="TensorExpr or a PlanStructure"):
        count_complete_space("matmul", 64)
    with pytest.raises(IccaError, match="positive number of cores"):
        count_complete_space(expr, 0)


def test_complete_space_of_a_large_operator_is_counted_not_listed(exprs) -> None:
    start = time.perf_counter()
    counted = count_complete_space(plan_structure(exprs.matmul(4096, 1024, 4096, "float16")), 1472)
    assert counted.complete > 10**7 and counted.complete > counted.complete_plans
    assert time.perf_counter() - start < 20


def test_search_constraints(exprs) -> None:
    """Parallelism and padding filters (T10 §4.3.1) keep exactly the plans they should."""
    expr = exprs.matmul(30, 20, 50)
    structure = plan_structure(expr)
    filters = PlanFilters.t10()
    assert filters.max_padding_ratio == pytest.approx(1 / 0.9)
    everything = plans_for(structure, op_partitions(structure, 64))
    kept = plans_for(structure, candidate_partitions(structure, 64, filters), max_padding=filters.max_padding_ratio)
    most = int(everything.cores.max())
    expected = (everything.cores >= math.ceil(0.9 * most)) & (everything.padding() <= 1 / 0.9 + 1e-9)
    assert _as_set(kept) == _as_set(everything.take(np.flatnonzero(expected)))
    assert 0 < len(kept) < len(everything)


def test_batch_cost_equals_layout_cost(exprs) -> None:
    """The vectorized analytic model gives AnalyticCostModel's numbers, best loop order included."""
    hw = small_chip(16, 64 * 1024, link_latency_s=1e-7)
    model, reference = AnalyticBatchModel(hw), AnalyticCostModel()
    rng = np.random.default_rng(1)
    for expr in (exprs.conv2d(2, 3, 7, 7, 4, 3, 3, stride=2, pad=1), exprs.matmul_bias_relu(8, 12, 10),
                 exprs.matmul(6, 8, 4, batch=3), exprs.row_sum(12, 10, mean=True),
                 exprs.attention_expr(4, 10, 4, batch=(2,), mask=True, dtype="float16")):
        structure = plan_structure(expr)
        batch = plans_for(structure, op_partitions(structure, 16))
        times, orders = model.times(batch)
        for i in rng.choice(len(batch), size=min(len(batch), 40), replace=False):
            plan = batch.plan(int(i))
            best = min(reference(OpLayout(expr, ExecutionPlan(plan.op_partition, plan.temporal, order)), hw).time_s
                       for order in itertools.permutations(plan.loop_order))
            assert times[i] == pytest.approx(best, rel=1e-12)
            chosen = OpLayout(expr, batch.plan(int(i), orders[i]))
            assert reference(chosen, hw).time_s == pytest.approx(best, rel=1e-12)
            assert batch.memory()[i] == chosen.memory_bytes_per_core()


def test_best_loop_order_is_exact() -> None:
    rng = np.random.default_rng(2)
    S = rng.integers(1, 6, size=(300, 4))
    w = rng.random((300, 4)) * (S > 1)
    order, cost = best_loop_order(S, w)
    for i in range(len(S)):
        brute = min(sum(w[i, a] * math.prod(S[i, b] for b in p[:j]) for j, a in enumerate(p))
                    for p in itertools.permutations(range(4)))
        assert cost[i] == pytest.approx(brute, rel=1e-12)


def _exhaustive_best(expr: TensorExpr, hw, budgets: list[int]) -> dict[int, float]:
    """Per budget, the min analytic time over every valid plan and loop order that fits
    (plain loops); an attention operator's replicas summed as the device schedules them (what
    its search uses). One enumeration serves every budget: each plan's best order is timed
    once, and a budget takes the best plan within it."""
    if expr.kind == "attention":
        schedule = AnalyticBatchModel(hw, reduction="schedule")
        structure = plan_structure(expr)

        def model(layout, hw):
            return type("Time", (), {"time_s": sum(schedule.layout_terms(layout, structure).values())})
    else:
        model = AnalyticCostModel()
    axes = expr.axis_names
    best = dict.fromkeys(budgets, math.inf)
    for F, flat in brute_force_plans(expr, hw.num_cores):
        temporal = tuple({a: flat[t * len(axes) + j] for j, a in enumerate(axes) if flat[t * len(axes) + j] > 1}
                         for t in range(len(expr.tensors)))
        op_partition = dict(zip(axes, F))
        layout = OpLayout(expr, ExecutionPlan(op_partition, temporal))
        memory = layout.memory_bytes_per_core()
        fits = [budget for budget in budgets if memory <= budget]
        if not fits:
            continue
        time_s = min(model(OpLayout(expr, ExecutionPlan(op_partition, temporal, order)), hw).time_s
                     for order in itertools.permutations(layout.loop_axes))
        for budget in fits:
            best[budget] = min(best[budget], time_s)
    return best


@pytest.mark.parametrize("build,cores", [
    (lambda e: e.matmul(12, 16, 10), 8),
    (lambda e: e.matmul(4, 6, 8, batch=2), 8),
    (lambda e: e.conv2d(1, 2, 5, 5, 3, 3, 3, pad=1), 6),
    (lambda e: e.attention_expr(3, 8, 8, batch=(2,), value_dim=2, mask=True), 6),
])
def test_plan_operator_is_the_exhaustive_optimum(exprs, build, cores) -> None:
    """For several budgets, from the smallest footprint up: same time as brute force."""
    expr = build(exprs)
    hw = small_chip(cores, 1024 * 1024)
    structure = plan_structure(expr)
    memory = plans_for(structure, op_partitions(structure, cores)).memory()
    budgets = sorted(set(np.quantile(memory, [0.0, 0.1, 0.4, 1.0]).astype(int).tolist()))
    exhaustive = _exhaustive_best(expr, hw, budgets)
    for budget in budgets:
        planned = plan_operator(expr, hw, budget_bytes=budget)
        planned.layout.validate()
        assert planned.memory_bytes_per_core <= budget
        assert planned.time_s == pytest.approx(exhaustive[budget], rel=1e-12)


def test_plan_operator_is_fast_on_a_full_chip(exprs) -> None:
    hw = preset("ipu-mk2")
    expr = exprs.matmul(512, 1024, 3072, "float16")
    start = time.perf_counter()
    plan_operator(expr, hw, budget_bytes=hw.usable_sram_bytes - 1)  # (not cached)
    assert time.perf_counter() - start < 1.0


def test_custom_cost_model_reranks_a_shortlist(exprs) -> None:
    """A plain CostModel callable is honoured; one equal to the analytic model finds its optimum."""
    hw = small_chip(16, 12 * 1024)
    expr = exprs.matmul(32, 48, 40)
    analytic = AnalyticCostModel()
    exact = plan_operator(expr, hw)
    same = plan_operator(expr, hw, cost_model=lambda layout, h: analytic(layout, h))
    assert same.time_s == pytest.approx(exact.time_s, rel=1e-12)

    def no_rotation_please(layout, h):  # a model that hates shifts
        cost = analytic(layout, h)
        return type(cost)(cost.compute_s, cost.sync_s, 100 * cost.shift_s, cost.reduction_s, cost.epilogue_s)

    planned = plan_operator(expr, hw, cost_model=no_rotation_please)
    planned.layout.validate()
    assert planned.memory_bytes_per_core <= hw.usable_sram_bytes
    assert planned.time_s == pytest.approx(no_rotation_please(planned.layout, hw).time_s)


@pytest.mark.parametrize("build,cores,arriving", [
    (lambda e: e.matmul(12, 16, 10), 8, (0,)),
    (lambda e: e.matmul(4, 6, 8, batch=2), 8, (0, 1)),
])
def test_arrival_aware_search_is_exact(exprs, build, cores, arriving) -> None:
    """With the arrival of some inputs charged (ArrivalCostModel), the exact search still
    finds the brute-force optimum of that model, and its bounds never exceed a plan."""
    from tvm_icca.plan_search.batch_cost import ArrivalCostModel
    from tvm_icca.plan_search.search import best_plan

    expr = build(exprs)
    hw = small_chip(cores, 1024 * 1024)
    structure = plan_structure(expr)
    model = ArrivalCostModel(AnalyticBatchModel(hw), arriving, hw)
    batch = plans_for(structure, op_partitions(structure, cores))
    assert (batch.replicas()[:, -1] > 1).any()  # the device reduction term is exercised
    times, _ = model.times(batch)
    bound = model.time_lower_bound(structure, batch.F)
    assert (bound <= times * (1 + 1e-12)).all()
    for budget in sorted(set(np.quantile(batch.memory(), [0.1, 1.0]).astype(int).tolist())):
        fits = batch.memory() <= budget
        found = best_plan(structure, model, budget, cores)
        assert float(found.time[0]) == pytest.approx(float(times[fits].min()), rel=1e-12)
    # the arrival term is what it says: partition bytes of the arriving inputs over a link
    plain, _ = AnalyticBatchModel(hw).times(batch)
    arrival_only, _ = ArrivalCostModel(AnalyticBatchModel(hw), arriving, hw, device_reduction=False).times(batch)
    parts = batch.partition_bytes()[:, list(arriving)].sum(axis=1)
    assert np.allclose(arrival_only - plain, parts / hw.link_bandwidth, rtol=1e-12, atol=0)
    # and the reduction is the device's schedule, as the simulator times it
    from runtime_sim.machine.topology import make_topology
    from runtime_sim.timing.opcost import op_cost

    topo = make_topology(hw)
    for i in np.flatnonzero(batch.replicas()[:, -1] > 1)[:5]:
        layout = OpLayout(expr, batch.plan(int(i)))
        cost = op_cost(layout, hw, topo)
        red = cost.reduction.time_s + cost.reduction_compute_s
        assert times[i] - arrival_only[i] == pytest.approx(
            red - AnalyticCostModel()(layout, hw).reduction_s, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_bounds_never_exceed_a_plan(exprs, case) -> None:
    """The (F_op, steps) bounds the searches prune with hold for every plan of the complete
    space: partition bytes, and time (compute, sync and the least shifts; compute and sync
    alone below that)."""
    from tvm_icca.plan_search.bounds import step_partition_lower_bounds

    build, cores = CASES[case]
    structure = plan_structure(build(exprs))
    batch = plans_for(structure, op_partitions(structure, cores))
    parts = step_partition_lower_bounds(structure, batch.F, batch.S, batch.xp)
    assert (parts <= batch.partition_bytes() * (1 + 1e-12)).all()
    for hw in (small_chip(cores, 1024 * 1024), preset("ipu-mk2")):
        model = AnalyticBatchModel(hw)
        times, _ = model.times(batch)
        bound = model.step_lower_bound(structure, batch.F, batch.S, batch.xp)
        assert (bound <= times).all()
        # the cheap first stage (compute and sync) is below the whole bound
        fixed = model.step_fixed_lower_bound(structure, batch.F, batch.S, batch.xp)
        assert (fixed <= bound).all()
        rotating = (batch.S > 1).any(axis=1)
        if rotating.any():  # the shift term is in the bound, not only compute and sync
            hw_steps = np.prod(batch.S, axis=1) * hw.sync_cycles / hw.clock_hz
            assert (bound[rotating] > hw_steps[rotating]).all()
        # the compiler's model: arrival of the first input, the device's replica reduction
        arrival = ArrivalCostModel(model, (0,), hw)
        times, _ = arrival.times(batch)
        bound = arrival.step_lower_bound(structure, batch.F, batch.S, batch.xp)
        assert (bound <= times).all()
        assert (arrival.step_fixed_lower_bound(structure, batch.F, batch.S, batch.xp) <= bound).all()
        out = structure.num_tensors - 1
        replicas = batch.sharing()[:, out] // np.prod(batch.ft[:, out], axis=1)
        base = model.step_lower_bound(structure, batch.F, batch.S, batch.xp)
        reduced = replicas > 1
        if reduced.any():  # the reduction term is in the bound
            assert (bound[reduced] > base[reduced] + arrival._arrival(parts)[reduced]).any()


def test_replica_reduction_bound_holds_for_more_replicas_and_bytes() -> None:
    """The closed-form bound at (R, p) never exceeds the device's schedule at any (R', p')
    with R' >= R and p' >= p, across the tree/chain switch and the buffer's chunking."""
    hw = preset("ipu-mk2")
    R = np.array([1, 2, 3, 4, 7, 8, 16, 33, 128, 1472], float)
    p = np.array([4, 64, 1000, 4096, 8192, 8196, 20000, 65536, 400000], float)
    RR, PP = (a.ravel() for a in np.meshgrid(R, p, indexing="ij"))
    bound = replica_reduction_lower_bound(RR, PP, 4, hw)
    actual = replica_reduction_array(RR, PP, 4, hw)
    assert (bound[RR == 1] == 0).all()
    for i in range(len(RR)):
        larger = (RR >= RR[i]) & (PP >= PP[i])
        assert bound[i] <= actual[larger].min()
    assert (bound[RR > 1] > 0.5 * actual[RR > 1]).mean() > 0.5  # not a vacuous bound


def test_input_in_place_arrives_free_and_moves_nothing(exprs) -> None:
    """An input its producer left as contiguous blocks (InPlace) costs no arrival in a plan
    that reads it in the same blocks, exactly when the device's re-layout moves nothing for
    it; the bounds stay below every plan and the exact search stays exact."""
    from runtime_sim.contract.relayout import input_relayout, producer_grid
    from tvm_icca.plan_search.batch_cost import ArrivalCostModel
    from tvm_icca.plan_search.search import best_plan, in_place_inputs

    cores = 8
    hw = small_chip(cores, 1024 * 1024)
    producer = plan_operator(exprs.matmul(16, 8, 12), hw).layout
    consumer = exprs.softmax(16, 12)
    assert producer.expr.output.shape == consumer.inputs[0].shape
    in_place = in_place_inputs([(0, producer)], (0,), mapped=False)
    assert in_place, "the producer's output sits in contiguous blocks"
    structure = plan_structure(consumer)
    plain = ArrivalCostModel(AnalyticBatchModel(hw), (0,), hw)
    model = ArrivalCostModel(AnalyticBatchModel(hw), (0,), hw, in_place=in_place)
    batch = plans_for(structure, op_partitions(structure, cores))
    times, _ = model.times(batch)
    full, _ = plain.times(batch)
    free = times < full
    assert free.any()
    grid = producer_grid(producer)
    for i in range(len(batch)):
        layout = OpLayout(consumer, batch.plan(i))
        moved = input_relayout(grid, layout, 0, np.zeros(cores, np.int64), 1).moved_bytes
        assert (moved == 0) == bool(free[i]), batch.plan(i)
    assert (model.time_lower_bound(structure, batch.F) <= times * (1 + 1e-12)).all()
    found = best_plan(structure, model, math.inf, cores)
    assert float(found.time[0]) == pytest.approx(float(times.min()), rel=1e-12)


def test_reader_of_a_spread_producer_is_mapped_onto_its_blocks(exprs) -> None:
    """On two chips, a producer spread over both with its columns outermost; its reader (a
    bias add),
    planned with the arrival priced, reads the output in the producer's blocks and is
    mapped as the producer (mapping.candidate_placements), so nothing is re-laid out."""
    import dataclasses

    from runtime_sim.contract.plan import ExecutionPlan
    from runtime_sim.contract.relayout import input_relayout, producer_grid
    from tvm_icca.plan_search.mapping import producer_numbering

    hw = small_chip(8, 1024 * 1024).with_overrides(num_chips=2, inter_chip_bandwidth=1e10)
    plan = ExecutionPlan({"m": 2, "n": 4, "k": 1}, ({}, {}, {}), (),
                         core_order=("n", "m", "k"), chips=2)
    producer = OpLayout(exprs.matmul(16, 8, 64), plan, hw.cores_per_chip)
    assert producer_numbering(producer) == ((1, 0), 2)
    reader = plan_operator(exprs.bias_add(16, 64), hw, producers=[(0, producer)], arriving=(0,))
    layout = reader.layout
    chip_of = np.arange(hw.num_cores) // hw.cores_per_chip
    moved = input_relayout(producer_grid(producer), layout, 0, chip_of, hw.num_chips).moved_bytes
    assert moved == 0, (reader.plan, dataclasses.asdict(reader.cost))


def _joined_by_loops(structure, P, caps=None):
    """Every tuple's f_t assignments in join order by loops over rows (without the join's
    lookup table or its check before rows are built): tensors with fewest
    rotatable axes first, each option of a tensor (divisor tuples of its sharing count,
    :func:`factor_tuples` order) after every assignment so far, kept when every axis's
    factors are pairwise factor/multiple (and within ``caps``)."""
    from tvm_icca.plan_search.intmath import factor_tuples

    order = sorted((t for t in range(structure.num_tensors) if structure.rotatable[t].any()),
                   key=lambda t: int(structure.rotatable[t].sum()))
    rows = [np.ones((structure.num_tensors, structure.num_axes), np.int64)]
    for t in order:
        axes = np.flatnonzero(structure.rotatable[t])
        options = factor_tuples(int(P[t]), len(axes)).astype(np.int64)
        if caps is not None:
            options = options[(options <= np.array([caps[a] for a in axes])).all(axis=1)]
        out = []
        for row in rows:
            # the pairwise factor/multiple check of each option against the row's other
            # tensors on its axes (one comparison per option at once, same order as loops)
            ok = np.ones(len(options), bool)
            for k, a in enumerate(axes):
                for u in range(structure.num_tensors):
                    if u != t and structure.rotatable[u, a] and row[u, a] > 1:
                        f = options[:, k]
                        ok &= (f % row[u, a] == 0) | (row[u, a] % f == 0)
            for option in options[ok]:
                new = row.copy()
                new[t, axes] = option
                out.append(new)
        rows = out
    return np.array(rows).reshape(-1, structure.num_tensors, structure.num_axes)


@pytest.mark.parametrize("seed", range(3))
def test_join_equals_plain_loops_in_order(exprs, seed) -> None:
    """The vectorized join (plan_space._join_group: the alignment rule by a lookup table,
    checked before rows are built) lists, per sharing tuple, exactly the assignments plain
    loops list, in the same order, with and without caps; several tuples joined at once."""
    from tvm_icca.plan_search import plan_space

    rng = np.random.default_rng(seed)
    for expr in (exprs.matmul(6, 8, 12, batch=2), exprs.conv2d(1, 2, 6, 6, 4, 3, 3, stride=1, pad=1)):
        s = plan_structure(expr)
        # sharing counts with many divisors, as on a 5,888-core chip (2^8 x 23)
        pool = [1, 2, 6, 12, 23, 36, 46, 64, 92, 256]
        keys = np.array([[int(rng.choice(pool)) for _ in range(s.num_tensors)] for _ in range(5)])
        caps = [None, None, tuple(int(c) for c in rng.integers(1, 9, s.num_axes)), None,
                tuple([4] * s.num_axes)]
        combos, owner = plan_space._join_group(s, keys, caps)
        for k, (P, cap) in enumerate(zip(keys, caps)):
            np.testing.assert_array_equal(combos[owner == k].astype(np.int64),
                                          _joined_by_loops(s, P, cap))
