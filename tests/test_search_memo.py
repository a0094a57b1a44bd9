"""The plan search memo is an object its caller owns (no module-global caches)."""

import dataclasses

import numpy as np
import pytest

import tvm_icca.plan_search.plan_space as partitions
import tvm_icca.plan_search.search as search
import tvm_icca.plan_search.structure as structure
from runtime_sim.contract.presets import small_chip
from tvm_icca.plan_search import SearchMemo, plan_operator, space_sizes
from tvm_icca.plan_search.filters import PlanFilters
from tvm_icca.plan_search.plan_space import op_partitions, plans_for
from tvm_icca.plan_search.search_memo import plan_structure


def _renamed(expr, suffix):
    inputs = tuple(dataclasses.replace(t, name=t.name + suffix) for t in expr.inputs)
    return dataclasses.replace(expr, inputs=inputs,
                               output=dataclasses.replace(expr.output, name=expr.output.name + suffix))


def test_no_module_global_caches():
    for module in (search, structure, partitions):
        assert not any(name.startswith("_") and name.isupper() or name in ("_CACHE", "_STRUCTURES")
                       for name in vars(module)), module.__name__
    assert not any(f.name.startswith("_combo") for f in dataclasses.fields(structure.PlanStructure))


def test_cached_search_equals_uncached(exprs):
    hw = small_chip(16, 64 * 1024)
    cache = SearchMemo()
    for expr in (exprs.matmul(48, 64, 40), exprs.conv2d(2, 4, 8, 8, 6, 3, 3, stride=1, pad=1)):
        alone = plan_operator(expr, hw)
        first = plan_operator(expr, hw, cache=cache)
        again = plan_operator(expr, hw, cache=cache)
        assert first.plan == alone.plan and first.time_s == alone.time_s
        assert again is first  # memoized for the default model
    sizes = space_sizes(exprs.matmul(16, 32, 8), hw, PlanFilters.t10(), cache=cache)
    assert sizes == space_sizes(exprs.matmul(16, 32, 8), hw, PlanFilters.t10())


def test_operators_differing_in_names_share_the_memo_and_keep_their_names(exprs):
    hw = small_chip(16, 64 * 1024)
    cache = SearchMemo()
    a = exprs.matmul(48, 64, 40)
    b = _renamed(a, "_2")
    sa, sb = plan_structure(a, cache), plan_structure(b, cache)
    assert sa.expr is a and sb.expr is b and sa.key == sb.key
    F = op_partitions(sa, 16)
    assert len(plans_for(sa, F, cache=cache)) == len(plans_for(sb, F, cache=cache))
    pa, pb = plan_operator(a, hw, cache=cache), plan_operator(b, hw, cache=cache)
    assert pb.plan == pa.plan and pb.time_s == pa.time_s
    assert pb.expr is b and pb.layout.expr is b


def test_assignment_memo_is_bounded(exprs):
    cache = SearchMemo(max_assignment_bytes=1)
    s = plan_structure(exprs.matmul(48, 64, 40), cache)
    batch = plans_for(s, op_partitions(s, 16), cache=cache)
    assert len(batch) == len(plans_for(s, op_partitions(s, 16)))
    entries, held = cache._assignments[s.rotation_key]
    assert len(entries) == 1 and held[0] == next(iter(entries.values())).combos.nbytes


@pytest.mark.parametrize("max_plans", [1, 2])
def test_plan_memo_is_bounded(exprs, max_plans):
    hw = small_chip(8, 64 * 1024)
    cache = SearchMemo(max_plans=max_plans)
    for n in (8, 16, 24):
        plan_operator(exprs.matmul(n, 16, 8), hw, cache=cache)
    assert len(cache._plans) == max_plans


def _as_rows(batch):
    return [(tuple(f), t.tobytes()) for f, t in zip(batch.F.tolist(), batch.ft)]


def test_assignments_are_shared_by_operators_with_one_rotation_pattern(exprs):
    a = plan_structure(exprs.conv2d(2, 4, 8, 8, 6, 3, 3, stride=1, pad=1))
    b = plan_structure(exprs.conv2d(1, 8, 6, 6, 4, 3, 3, stride=1, pad=1))
    assert a.key != b.key and a.rotation_key == b.rotation_key
    cache = SearchMemo()
    for s in (a, b):
        F = op_partitions(s, 16)
        assert _as_rows(plans_for(s, F, cache=cache)) == _as_rows(plans_for(s, F))
    assert list(cache._assignments) == [a.rotation_key]


def test_capped_assignments_are_the_complete_ones_within_the_caps(exprs):
    s = plan_structure(exprs.conv2d(2, 4, 8, 8, 6, 3, 3, stride=1, pad=1))
    P = (4, 8, 16, 2)[:s.num_tensors]
    full = partitions.temporal_assignments(s, P)
    for caps in ((1,) * s.num_axes, (2, 1, 4, 4, 2, 3, 3)[:s.num_axes]):
        capped = partitions.assignments(s, P, SearchMemo(), caps).combos
        within = full[(full <= np.array(caps)[None, None, :]).all(axis=(1, 2))]
        np.testing.assert_array_equal(capped, within)  # same assignments, same order
        assert (capped[0] == 1).all()  # the unrotated one first
    assert partitions.assignment_count(s, P, SearchMemo()) == len(full)


@pytest.mark.parametrize("padding", [1.0, 1.0 / 0.9, 1.5])
def test_padding_caps_keep_every_plan_within_the_padding(exprs, padding):
    """plans_for with a padding bound (capped joins) lists exactly the plans of the complete
    space within that bound, in the same order, with or without a shared cache."""
    for expr in (exprs.conv2d(2, 4, 8, 8, 6, 3, 3, stride=1, pad=1), exprs.matmul(48, 64, 40)):
        s = plan_structure(expr)
        F = op_partitions(s, 16)
        complete = plans_for(s, F)
        want = complete.take(np.flatnonzero(complete.padding() <= padding + partitions.PADDING_SLACK))
        cache = SearchMemo()
        for _ in range(2):  # cold, then from the memo
            assert _as_rows(plans_for(s, F, max_padding=padding, cache=cache)) == _as_rows(want)
        assert _as_rows(plans_for(s, F, max_padding=padding)) == _as_rows(want)


def test_tuples_joined_together_are_joined_as_alone(exprs):
    """Several (sharing tuple, caps) joined at once give each tuple the list it gets alone,
    in the same order, whatever the others (the memo may hold either)."""
    s = plan_structure(exprs.conv2d(2, 4, 8, 8, 6, 3, 3, stride=1, pad=1))
    F = op_partitions(s, 64)
    keys = np.unique(partitions.sharing_counts(s, F), axis=0)[::7]
    caps = [None if i % 3 == 0 else tuple(int(c) for c in (2 + i % 4,) * s.num_axes)
            for i in range(len(keys))]
    together = partitions.assignments_many(s, keys, caps)
    assert len(together) == len(keys) > 10
    for key, cap, entry in zip(keys, caps, together):
        alone = partitions.assignments(s, key, None, cap)
        np.testing.assert_array_equal(entry.combos, alone.combos)
        np.testing.assert_array_equal(entry.s_rows, alone.s_rows)
        np.testing.assert_array_equal(entry.s_start, alone.s_start)
        assert partitions.assignment_count(s, key) >= len(entry.combos)
    counts = partitions.assignment_counts(s, keys, SearchMemo())
    assert counts == [len(partitions.assignments(s, k).combos) for k in keys]


def test_capped_lists_cut_from_counted_lists_are_the_joined_ones(exprs, monkeypatch):
    """With a memo, the complete lists joined to count a tuple's assignments are kept and
    the capped lists cut from them (plan_space.assignments_many): the same lists, steps
    groups and order as joining with the caps, and no second join."""
    s = plan_structure(exprs.conv2d(2, 4, 8, 8, 6, 3, 3, stride=1, pad=1))
    keys = np.unique(partitions.sharing_counts(s, op_partitions(s, 64)), axis=0)[::5]
    caps = [tuple(int(c) for c in (1 + i % 4, 2 + i % 3) * s.num_axes)[:s.num_axes]
            for i in range(len(keys))]
    want = partitions.assignments_many(s, keys, caps)  # joined with the caps, no memo
    cache = SearchMemo()
    counts = partitions.assignment_counts(s, keys, cache)
    assert counts == [len(partitions.assignments(s, k).combos) for k in keys]
    joins = []
    join = partitions._join_many
    monkeypatch.setattr(partitions, "_join_many",
                        lambda *a: joins.append(len(a[1])) or join(*a))
    cut = partitions.assignments_many(s, keys, caps, cache)
    assert sum(joins) == 0 and len(cut) == len(keys) > 5
    assert any(len(w.combos) < n for w, n in zip(want, counts))  # the caps cut something
    for got, ref in zip(cut, want):
        np.testing.assert_array_equal(got.wide(), ref.wide())
        np.testing.assert_array_equal(got.s_rows, ref.s_rows)
        np.testing.assert_array_equal(got.s_start, ref.s_start)


def test_row_arrays_are_kept_read_only_per_model_and_bounded(exprs):
    """The candidate rows and a model's bounds of them (SearchMemo.row_arrays) are computed
    once per structure, chip and model (an operator's search and its chip-aware shortlist,
    identical operators within other budgets), read-only, the last few only; a search that
    reads them returns what a fresh one returns, and another model's bounds are its own."""
    from tvm_icca.plan_search.batch_cost import AnalyticBatchModel, ArrivalCostModel
    from tvm_icca.plan_search.search_memo import MAX_ROW_ARRAYS

    hw = small_chip(16, 64 * 1024)
    expr = exprs.conv2d(1, 4, 8, 8, 8, 3, 3, pad=1)
    cache = SearchMemo()
    s = plan_structure(expr, cache)
    plain = AnalyticBatchModel(hw)
    arriving = ArrivalCostModel(AnalyticBatchModel(hw), (0,), hw)
    assert plain.bound_key != arriving.bound_key
    assert arriving.bound_key == ArrivalCostModel(AnalyticBatchModel(hw), (0,), hw).bound_key
    for model in (plain, arriving):
        for budget in (hw.usable_sram_bytes, 2048):
            kept = search.best_plan(s, model, budget, 16, cache=cache)
            fresh = search.best_plan(s, model, budget, 16)
            assert kept.plan(0) == fresh.plan(0) and float(kept.time[0]) == float(fresh.time[0])
    F, bound = search._rows_and_bounds(s, arriving, 16, None, float("inf"), cache)
    assert not F.flags.writeable and not bound.flags.writeable
    np.testing.assert_array_equal(bound, arriving.time_lower_bound(s, op_partitions(s, 16)))
    assert (bound > plain.time_lower_bound(s, F)).any()  # not the plain model's bounds
    assert len(cache._row_arrays) == 3  # the rows, and the bounds of each model
    F2, _ = search._rows_and_bounds(s, arriving, 16, None, float("inf"), cache)
    assert F2 is F  # kept: not computed again
    for n in range(8, 8 + MAX_ROW_ARRAYS):
        other = plan_structure(exprs.matmul(n, 16, 8), cache)
        search._rows_and_bounds(other, plain, 16, None, float("inf"), cache)
    assert len(cache._row_arrays) == MAX_ROW_ARRAYS
