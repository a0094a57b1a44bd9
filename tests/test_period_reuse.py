"""One period scheduled and expanded (tvm_icca.elk.period_reuse): the cut stands for the run,
the expansion is the run's order and points, and the reuse path's programs run as fast on the
timing simulator as the whole run's search gives (tiny zoo LLMs, every design)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.presets import small_chip
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.elk import reorder
from tvm_icca.elk.designs import DESIGNS, plan_preloads
from tvm_icca.elk.draft import schedule_at_points
from tvm_icca.elk.period_reuse import (CUT_LAYERS, REUSE_DESIGNS, cut_run, expand_decisions,
                                      plan_preloads_by_period)
from tvm_icca.elk.periods import Repeats, find_repeats
from tvm_icca.elk.elk_schedule import ElkSchedule, PlanStats, Timeline, estimate
from tvm_icca.elk.synthetic import SRAM, synthetic_llm
from tvm_icca.elk.tradeoffs import ElkMachine
from tvm_icca.model_pass import CompileOptions
from tvm_icca.workloads import get_workload

# one worker builds the module's shared fixture once (make test runs on several)
pytestmark = pytest.mark.xdist_group("hbm64_llama")  # with tests/test_elk_pass.py: plan_cache

HBM_CHIP = small_chip(64, 64 * 1024).with_overrides(name="hbm-64", hbm_bandwidth=1e12,
                                                    hbm_controllers=2)
MACHINE = ElkMachine(SRAM)


def _schedule(ops, order, ex=None, pc=None) -> ElkSchedule:
    """A schedule holding only decisions (no estimate), for the expansion."""
    n = len(ops)
    return ElkSchedule("elk-full", tuple(ex or [0] * n), tuple(pc or [0] * n), tuple(order),
                       (len(order),) * n, Timeline((), (), (), (), (), (), (), 0.0), 0.0,
                       PlanStats())


def test_cut_keeps_first_standing_and_last_layer():
    ops = synthetic_llm(7)
    rep = find_repeats([o.key for o in ops])
    assert rep == Repeats(1, len(ops[1:-2]) // 7, 7)
    small, cut = cut_run(ops, rep)
    assert len(small) == len(ops) - (rep.count - CUT_LAYERS) * rep.period
    assert find_repeats([o.key for o in small]) == Repeats(rep.start, rep.period, CUT_LAYERS)
    # every operator of the run stands for itself or an identical one of the cut
    for i, op in enumerate(ops):
        t = cut.standing_for(i)
        assert small[t].key == op.key
        if rep.layer_of(i) in (None, 0, rep.count - 1):
            assert cut.kept[t] == i
        else:
            assert t in cut.middle


def test_standing_layer_holds_the_most_live_bytes():
    """A layer holding more than the one before (cache updates kept live): the standing layer
    takes, per position, the most of any middle layer."""
    ops = synthetic_llm(6)
    rep = find_repeats([o.key for o in ops])
    grown = [replace(o, live_bytes=o.live_bytes + 1000 * (rep.layer_of(i) or 0) * (i % 3))
             for i, o in enumerate(ops)]
    small, cut = cut_run(grown, rep)
    for r in range(rep.period):
        middle = [grown[rep.start + l * rep.period + r].live_bytes for l in range(1, rep.count - 1)]
        assert small[cut.middle.start + r].live_bytes == max(middle)
    with pytest.raises(ValueError):
        cut_run(synthetic_llm(3), find_repeats([o.key for o in synthetic_llm(3)]))


@pytest.mark.parametrize("perm_index", [0, 1, 5])
def test_expanded_order_is_the_runs_order(perm_index):
    """Elk §4.4's order of one permutation, built on the cut and expanded, is the order the
    same permutation builds on the whole run; points follow their standing operator."""
    ops = synthetic_llm(6, seed=1)
    rep = find_repeats([o.key for o in ops])
    small, cut = cut_run(ops, rep)
    groups = reorder.layer_groups(ops, rep)
    perms = [tuple(range(len(groups.groups)))] + reorder.candidate_orders(ops, MACHINE, rep, groups)
    perm = perms[min(perm_index, len(perms) - 1)]
    small_rep = find_repeats([o.key for o in small])
    order = reorder.build_order(small, small_rep, groups, perm)
    ex = [t % len(small[t].execs) for t in range(len(small))]
    ex_full, _, order_full = expand_decisions(cut, _schedule(small, order, ex=ex))
    assert order_full == reorder.build_order(ops, rep, groups, perm)
    assert ex_full == [ex[cut.standing_for(i)] for i in range(len(ops))]


def test_interleaved_order_has_no_expansion():
    """The standing layer's preloads split by another layer's: no slice to repeat."""
    ops = synthetic_llm(5)
    small, cut = cut_run(ops, find_repeats([o.key for o in ops]))
    order = [t for t, o in enumerate(small) if o.loads]
    last_middle = [t for t in order if t in cut.middle][-1]
    mixed = [t for t in order if t != last_middle] + [last_middle]    # after the suffix's
    assert expand_decisions(cut, _schedule(small, order)) is not None
    assert expand_decisions(cut, _schedule(small, mixed)) is None


@pytest.mark.parametrize("seed", [0, 1])
def test_reuse_matches_the_whole_run_search(seed):
    """Synthetic LLM tables: the expanded Elk-Dyn schedule, having searched a cut of 3 of the
    8 layers, is a schedule of the whole run (its estimate is the run's) no slower than the
    whole run's search (on these tables: as fast; points may differ where they tie)."""
    ops = synthetic_llm(8, seed=seed)
    whole = plan_preloads(ops, MACHINE, "elk-dyn")
    reused = plan_preloads_by_period(ops, MACHINE, "elk-dyn")
    assert "expanded" in reused.stats.source
    assert estimate(ops, MACHINE, reused).total_s == reused.total_s
    assert reused.total_s <= whole.total_s * (1 + 1e-3)


@pytest.mark.parametrize("design", ["elk-dyn", "elk-full"])
def test_reuse_ranks_the_cuts_finalists_on_the_run(design):
    """The cut weighs its standing layer once, the run ``count - 2`` times, so the design's
    candidates are ranked again on the run: the reused schedule is no slower than any
    finalist of the cut's search expanded and estimated on the run (independently here).
    Gemma2-27B decode on 4,416 cores (Elk Fig. 23) ranked them on the cut: 2.6% slower."""
    ops = synthetic_llm(8, seed=1, hbm_bw=24e9)
    small, cut = cut_run(ops, find_repeats([o.key for o in ops]))
    finalists: list[ElkSchedule] = []
    chosen = plan_preloads(small, MACHINE, design, finalists=finalists)
    assert len(finalists) > 1 and (finalists[0].exec_choice, finalists[0].preload_choice) == \
        (chosen.exec_choice, chosen.preload_choice)
    run = []
    for found in finalists:
        ex, pc, order = expand_decisions(cut, found)
        sched = schedule_at_points(ops, MACHINE, design, order, ex, pc, "", found.stats)
        if sched is not None:
            run.append(sched.total_s)
    reused = plan_preloads_by_period(ops, MACHINE, design)
    assert "expanded" in reused.stats.source
    assert estimate(ops, MACHINE, reused).total_s == reused.total_s
    assert reused.total_s <= min(run) * (1 + 1e-12)


def test_other_designs_and_short_runs_search_the_whole_run():
    ops = synthetic_llm(6)
    for design in ("basic", "static", "ideal"):
        machine = replace(MACHINE, separate_interconnect=design == "ideal")
        assert plan_preloads_by_period(ops, machine, design).total_s == \
            plan_preloads(ops, machine, design).total_s
    short = synthetic_llm(CUT_LAYERS)
    assert plan_preloads_by_period(short, MACHINE, "elk-dyn").stats.source == \
        plan_preloads(short, MACHINE, "elk-dyn").stats.source


def test_cut_with_other_heavy_operators_falls_back():
    """Elk §4.4's heavy operators are those above the run's average bytes: a prologue so large
    that the cut's average hides a layer's heavy operators makes the whole run searched."""
    ops = synthetic_llm(8)
    rep = find_repeats([o.key for o in ops])
    layer_bytes = sum(o.hbm_bytes for o in ops[rep.start:rep.start + rep.period])
    ops[0] = replace(ops[0], hbm_bytes=layer_bytes * 2.0)
    small, _ = cut_run(ops, rep)
    assert reorder.layer_groups(small, find_repeats([o.key for o in small])) != \
        reorder.layer_groups(ops, rep)
    reused = plan_preloads_by_period(ops, MACHINE, "elk-dyn")
    whole = plan_preloads(ops, MACHINE, "elk-dyn")
    assert reused.stats.source == f"{whole.stats.source} (whole run: the cut's heavy operators differ)"
    assert reused.total_s == whole.total_s


def test_reuse_option_is_checked():
    assert CompileOptions().reuse_layers is True
    with pytest.raises(IccaError, match="reuse_layers"):
        CompileOptions(reuse_layers="no")


@pytest.fixture(scope="module")
def tiny_runs(plan_cache):
    """A tiny Llama of 5 layers (4 identical after the first) under every design with reuse,
    and under the designs that reuse a period (REUSE_DESIGNS) without it too (one plan
    cache, the session's: tests/test_elk_pass.py plans this chip's layers too): for the others
    both options run the same whole-run search."""
    cache = plan_cache
    workload = get_workload("llama2-13b", tiny=True, batch=2, context=8, num_layers=5)
    return {(d, reuse): compile_programs(workload, HBM_CHIP, plan_cache=cache, preload=d,
                                         jobs=1, progress=False, reuse_layers=reuse)
            for d in DESIGNS for reuse in (True, False) if reuse or d in REUSE_DESIGNS}


@pytest.mark.parametrize("design", DESIGNS)
def test_reuse_never_slower_on_the_timing_simulator(tiny_runs, design):
    """The reuse path's programs, timed by the timing simulator, within 0.1% of the whole run's
    search (or faster); the Elk designs did plan one period, the others the whole run."""
    reused = tiny_runs[(design, True)]
    source = reused.preload.stats["source"]
    assert ("expanded" in source) == (design in REUSE_DESIGNS)
    if design in REUSE_DESIGNS:
        whole = tiny_runs[(design, False)]
        assert reused.simulate().total_s <= whole.simulate().total_s * (1 + 1e-3)
        assert "expanded" not in whole.preload.stats["source"]
