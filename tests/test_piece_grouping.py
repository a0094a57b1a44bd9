"""The Elk refinement's classes over nested repeats (issue 40): a long prompt's layer repeats
the pieces of its split operators, and the local search moves every identical piece
together (``group_pieces``, :func:`tvm_icca.elk.periods.representatives`).

Exact checks: the representatives against their definition on small sequences; the search
with the option off is the layer-position search; with it on, never slower on the estimate
(synthetic LLMs whose layers repeat pieces) nor on the timing simulator (a tiny Llama prefill
split on a small HBM chip), within 0.1%."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.presets import small_chip
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.elk.designs import plan_preloads
from tvm_icca.elk.period_reuse import plan_preloads_by_period
from tvm_icca.elk.periods import find_repeats, representatives
from tvm_icca.elk.refine import _boundary_split, local_search
from tvm_icca.elk.synthetic import LAYER, SRAM, synthetic_llm
from tvm_icca.elk.tradeoffs import ElkMachine
from tvm_icca.model_pass import CompileOptions
from tvm_icca.model_pass.elk_pass import schedule_preloads
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.split.region_split import original_operator
from tvm_icca.workloads import get_workload

MACHINE = ElkMachine(SRAM)


def _pieced_layer(pieces: int) -> tuple:
    """A decoder layer whose attention and MLP run as ``pieces`` identical pieces each."""
    head, attn, mid, mlp = LAYER[:4], LAYER[7:11], LAYER[11:14], LAYER[14:19]
    return head + attn * pieces + mid + mlp * pieces + LAYER[19:]


def test_representatives_of_nested_repeats():
    keys = "xabababyzcdcdcdAqqqB" * 3
    rep = representatives(keys)
    first = [0, 1, 2, 1, 2, 1, 2, 7, 8, 9, 10, 9, 10, 9, 10, 15, 16, 16, 16, 19]
    assert rep == first * 3


@pytest.mark.parametrize("keys", ["", "a", "ab", "abc", "aaaa", "abcabd"] +
                         ["".join(p) for p in itertools.product("ab", repeat=7)])
def test_representatives_are_earlier_items_with_the_same_key(keys):
    rep = representatives(keys)
    assert len(rep) == len(keys)
    for i, r in enumerate(rep):
        assert r <= i and keys[r] == keys[i] and rep[r] == r
    # the top-level repeat's later periods stand at their first period's positions
    found = find_repeats(keys)
    if found is not None:
        for i in range(found.start + found.period, found.end):
            assert rep[i] == rep[found.start + (i - found.start) % found.period]


def test_without_repeats_every_item_stands_for_itself():
    assert representatives("abcdef") == list(range(6))


@pytest.mark.parametrize("layers, pieces, design", [
    (2, 3, "elk-dyn"), (2, 3, "elk-full"), (5, 4, "elk-dyn"),
    pytest.param(5, 4, "elk-full", marks=pytest.mark.long_run)])  # 10 s: make test-full
def test_grouped_search_never_slower_on_the_estimate(layers, pieces, design):
    ops = synthetic_llm(layers, layer=_pieced_layer(pieces))
    grouped = plan_preloads_by_period(ops, MACHINE, design, group_pieces=True)
    each = plan_preloads_by_period(ops, MACHINE, design, group_pieces=False)
    assert grouped.total_s <= each.total_s * (1 + 1e-3)


#: A layer whose three projections and two MLP inputs are identical operators (one key
#: each), as OPT's and Llama's q/k/v projections are: the nested repeats tie them together.
_IDENTICAL_PROJECTIONS = LAYER[:1] + (LAYER[1],) * 3 + LAYER[4:14] + (LAYER[14],) * 2 + LAYER[16:]


@pytest.mark.parametrize("seed, hbm_bw", [(1, 24e9), (0, 6e9)])
def test_grouped_search_sets_identical_projections_apart(seed, hbm_bw):
    """The first of a layer's identical projections sees another preload window than the
    others; moving all three as one class cost 3.4% on seed 1 (OPT-30B decode: 0.2% on the
    timing simulator). The grouped search then sweeps each tied class split into its first
    position, its last and those between, so it is never slower than the layer-position one.
    Seed 1 is that case; seed 0 at a quarter of the HBM bandwidth another preload regime."""
    ops = synthetic_llm(3, seed=seed, hbm_bw=hbm_bw, layer=_IDENTICAL_PROJECTIONS)
    grouped = plan_preloads(ops, MACHINE, "elk-full", group_pieces=True)
    each = plan_preloads(ops, MACHINE, "elk-full", group_pieces=False)
    assert grouped.total_s <= each.total_s * (1 + 1e-9)


@pytest.mark.parametrize("seed, hbm_bw", [(0, 24e9), (2, 24e9), (1, 24e9)])
def test_grouped_local_search_never_slower_than_the_layer_positions(seed, hbm_bw):
    """Without pieces the layer positions are no more classes than the grouped search and
    its split: both searches run and the faster is kept, so from any start the grouped
    search is no slower than the layer-position one (Gemma2-27B decode on 4,416 cores, Elk
    Fig. 23: grouped then split, Elk-Full's best order refined 1.9% slower). Seeds 0 and 2
    are cases where the grouped path is the faster one, seed 1 one where they agree."""
    ops = synthetic_llm(3, seed=seed, hbm_bw=hbm_bw, layer=_IDENTICAL_PROJECTIONS)
    for design in ("static", "elk-dyn"):
        start = plan_preloads(ops, MACHINE, design)
        grouped = local_search(ops, MACHINE, start, group_pieces=True)
        each = local_search(ops, MACHINE, start, group_pieces=False)
        assert grouped.total_s <= each.total_s * (1 + 1e-12)
        assert grouped.total_s <= start.total_s


def test_boundary_split_of_tied_classes():
    coarse = [[0, 1, 2, 3, 4, 10, 11, 12, 13, 14], [5], [6, 7]]
    fine = [[0, 10], [1, 11], [2, 12], [3, 13], [4, 14], [5], [6], [7]]
    assert _boundary_split(coarse, fine) == [[0, 10], [1, 2, 3, 11, 12, 13], [4, 14], [6], [7]]


def test_grouping_changes_nothing_without_pieces():
    """Layers without repeated pieces: the classes are the layer positions either way (three
    layers: a repeat of three periods)."""
    ops = synthetic_llm(3)
    a = plan_preloads(ops, MACHINE, "elk-full", group_pieces=True)
    b = plan_preloads(ops, MACHINE, "elk-full", group_pieces=False)
    assert (a.exec_choice, a.preload_choice, a.preload_order, a.total_s) == \
        (b.exec_choice, b.preload_choice, b.preload_order, b.total_s)


def test_group_option_is_checked():
    assert CompileOptions().group_pieces is True
    with pytest.raises(IccaError, match="group_pieces"):
        CompileOptions(group_pieces=1)


def _scheduled(compiled, design, group_pieces, cache):
    """``compiled``'s programs with ``design``'s preload schedule: what
    ``compile_programs(..., preload=design, group_pieces=group_pieces)`` gives (the Elk pass
    runs after the planner, whose programs do not depend on the design)."""
    programs, summary = schedule_preloads(list(compiled.programs), compiled.hw, cache, design,
                                          group_pieces=group_pieces)
    return dataclasses.replace(compiled, programs=tuple(programs), preload=summary)


def _same_programs(a, b) -> bool:
    """Equal programs but for the module id (a digest of the module they were read from)."""
    return [dataclasses.replace(p, module="") for p in a.programs] == \
        [dataclasses.replace(p, module="") for p in b.programs]


@pytest.mark.parametrize("group_pieces", [True, False])
def test_compile_programs_schedules_what_the_elk_pass_gives(group_pieces, monkeypatch):
    """``compile_programs`` hands ``group_pieces`` to the Elk pass, and its programs are the
    planner's programs (those of ``preload="off"``) with the pass's schedule: the split
    prefill below schedules the planned programs directly (a tiny Llama decode on a small
    HBM chip here)."""
    import tvm_icca.model_pass.planner as planner

    seen = []
    real = planner.schedule_preloads
    monkeypatch.setattr(planner, "schedule_preloads",
                        lambda *a, **kw: (seen.append(kw["group_pieces"]), real(*a, **kw))[1])
    chip = small_chip(16, 64 * 1024).with_overrides(name="hbm-16", hbm_bandwidth=1e11,
                                                    hbm_controllers=2)
    workload = get_workload("llama2-13b", tiny=True, batch=2, context=8)
    cache = PlanCache(jobs=1)
    off = compile_programs(workload, chip, plan_cache=cache, preload="off", progress=False)
    assert not seen and off.programs[0].preload_schedule is None
    full = compile_programs(workload, chip, plan_cache=cache, preload="elk-full", progress=False,
                            group_pieces=group_pieces)
    assert seen == [group_pieces]
    assert _same_programs(full, _scheduled(off, "elk-full", group_pieces, cache))


@pytest.mark.slow
@pytest.mark.xdist_group("split_llama")  # the session split_prefill: test_tradeoff_tables
@pytest.mark.parametrize("design", ["elk-dyn", "elk-full"])
def test_split_prefill_never_slower_on_the_timing_simulator(design, split_prefill, plan_cache):
    """A tiny Llama prefill whose attention is split into pieces on a small HBM chip (24 KiB
    per core: the fused attention does not fit whole): grouped within 0.1% of the per-piece
    search, or faster, on the timing simulator. The model is planned once (the session's
    ``split_prefill``), each design and grouping schedules its programs."""
    compiled = split_prefill.compiled
    assert any(original_operator(op.name) != op.name
               for p in compiled.programs for op in p.ops), "the case must need a split"
    runs = {g: _scheduled(compiled, design, g, plan_cache) for g in (True, False)}
    assert runs[True].simulate().total_s <= runs[False].simulate().total_s * (1 + 1e-3)
