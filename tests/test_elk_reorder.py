"""Elk §4.4: layer detection, suffix-tree candidate orders, and reordered schedules."""

from __future__ import annotations

import itertools

from tvm_icca.elk import reorder
from tvm_icca.elk.designs import plan_preloads
from tvm_icca.elk.inductive import min_horizons
from tvm_icca.elk.synthetic import LAYER, SRAM, synthetic_llm
from tvm_icca.elk.tradeoffs import ElkMachine


def test_detect_layers_of_prologue_layers_epilogue():
    for n_layers in (2, 3, 7):
        ops = synthetic_llm(n_layers)
        layers = reorder.detect_layers([o.key for o in ops])
        assert layers == reorder.LayerStructure(1, len(LAYER), n_layers)
    assert reorder.detect_layers(list("abcdef")) is None
    assert reorder.detect_layers(list("xabababy")) == reorder.LayerStructure(1, 2, 3)


def test_groups_put_light_ops_with_the_next_heavy_one():
    ops = synthetic_llm(3)
    layers = reorder.detect_layers([o.key for o in ops])
    groups = reorder.layer_groups(ops, layers)
    heavy = reorder.heavy_ops(ops)
    flat = [r for g in groups.groups for r in g] + list(groups.tail)
    assert flat == [r for r in range(layers.period) if ops[layers.start + r].loads]
    for g in groups.groups:
        assert heavy[layers.start + g[-1]] and not any(heavy[layers.start + r] for r in g[:-1])


def _fits(perm, pre_bytes, exec_min, sram):
    """The suffix tree's rule, checked on a whole permutation: when group g executes, every group
    executed after it but preloaded before it is resident."""
    slot = {g: s for s, g in enumerate(perm)}
    return all(sum(pre_bytes[u] for u in perm if u > g and slot[u] < slot[g]) + exec_min[g] <= sram
               for g in perm)


def test_suffix_tree_enumerates_exactly_the_valid_bounded_orders():
    ops = synthetic_llm(2, layer=LAYER[:13])          # 6 heavy groups: 720 permutations
    layers = reorder.detect_layers([o.key for o in ops])
    groups = reorder.layer_groups(ops, layers)
    n = len(groups.groups)
    base = layers.start
    pre_bytes = [sum(min(p[-1].space for p in ops[base + r].preloads) for r in g) for g in groups.groups]
    exec_min = [ops[base + g[-1]].execs[-1].space + ops[base + g[-1]].live_bytes for g in groups.groups]
    assert n == 6
    for sram in (SRAM, int(SRAM * 0.35), int(SRAM * 0.6)):
        for shift in (1, 2, 4):
            got = reorder.candidate_orders(ops, ElkMachine(sram), layers, groups, shift, max_orders=10**6)
            want = [p for p in itertools.permutations(range(n))
                    if p != tuple(range(n)) and all(abs(s - g) <= shift for s, g in enumerate(p))
                    and _fits(p, pre_bytes, exec_min, sram)]
            assert sorted(got) == sorted(want)
            assert len(set(got)) == len(got)
    capped = reorder.candidate_orders(ops, ElkMachine(SRAM), layers, groups, 4, max_orders=7)
    assert len(capped) == 7


def test_one_layer_order_is_applied_to_every_layer():
    ops = synthetic_llm(3)
    layers = reorder.detect_layers([o.key for o in ops])
    groups = reorder.layer_groups(ops, layers)
    perm = reorder.candidate_orders(ops, ElkMachine(SRAM), layers, groups)[0]
    order = reorder.build_order(ops, layers, groups, perm)
    assert sorted(order) == [i for i, o in enumerate(ops) if o.loads]
    per_layer = []
    for layer in range(layers.count):
        lo = layers.start + layer * layers.period
        per_layer.append([j - lo for j in order if lo <= j < lo + layers.period])
    assert all(p == per_layer[0] for p in per_layer)
    assert [j for j in order if j < layers.start] == [j for j in range(layers.start) if ops[j].loads]
    assert reorder.layer_displacement(perm) > 0


def test_elk_full_reorders_when_it_pays():
    ops = synthetic_llm(4, seed=5, hbm_bw=30e9)
    machine = ElkMachine(SRAM)
    dyn = plan_preloads(ops, machine, "elk-dyn")
    full = plan_preloads(ops, machine, "elk-full")
    assert full.total_s < dyn.total_s
    assert full.stats.source.startswith("reordered")
    assert 0 < full.stats.avg_displacement <= 4
    assert full.stats.orders_tried > 1
    # the schedule follows its preload order: every op's preload is issued before it executes
    m = min_horizons(len(ops), full.preload_order)
    assert full.preload_order != tuple(sorted(full.preload_order))
    assert all(h >= mi for h, mi in zip(full.horizon, m))
