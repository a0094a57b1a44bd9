"""The semantics of execution plans (runtime_sim.contract.layout), checked without data.

Partitions are tracked as labels: every core starts with the label of its initial partition,
shift events move labels, and at every step each core must hold the partition its chunk
needs (T10 §4.2 "aligning the rotations", §4.4 "sub-tensor placement").
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.contract.errors import InvalidPlanError
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.plan_rules import padded_extent, pinned_axes
from runtime_sim.contract.relayout import input_boxes, producer_grid


def _labels(layout: OpLayout, t: int, q) -> np.ndarray:
    """One number per core naming (sub-tensor, partition) of tensor ``t`` at chunk ``q``."""
    temporal = layout.temporal_axes(t)
    p = layout.partition(t, q)
    label = layout.subtensor_id(t).copy()
    for a in temporal:
        label = label * layout.plan.ft(t, a) + p[a]
    return label


def _walk(layout: OpLayout) -> tuple[int, int]:
    """Run the schedule on labels; assert the invariants; return (steps, shift bytes)."""
    n_t = len(layout.expr.tensors)
    held = [_labels(layout, t, layout.chunk({})) for t in range(n_t)]
    home = [h.copy() for h in held]
    steps = moved = 0
    for counters, advancing in layout.counters():
        q = layout.chunk(counters)
        for t in range(n_t):
            np.testing.assert_array_equal(held[t], _labels(layout, t, q), err_msg=f"tensor {t} step {steps}")
        for ev in layout.shifts_after(counters, advancing):
            assert np.all(ev.source[~ev.moving] == np.flatnonzero(~ev.moving))
            assert np.all(ev.source[ev.moving] != np.flatnonzero(ev.moving))
            held[ev.tensor] = held[ev.tensor][ev.source]
            moved += int(ev.moving.sum()) * layout.partition_bytes(ev.tensor)
        steps += 1
    for t in range(n_t):  # every loop wraps: tensors are home again
        np.testing.assert_array_equal(held[t], home[t])
    return steps, moved


def test_padded_extent() -> None:
    assert padded_extent(10, 2, 1) == 5
    assert padded_extent(10, 3, 2) == 4  # ceil(10/3)=4, already a multiple of 2
    assert padded_extent(7, 1, 4) == 8


def test_cannon_matmul_3x3(exprs) -> None:
    """T10 Fig. 10: 3x3 cores, A and B rotate along k in rings of 3."""
    e = exprs.matmul(3, 3, 3)
    layout = OpLayout(e, ExecutionPlan({"m": 3, "n": 3}, ({"k": 3}, {"k": 3}, {})))
    layout.validate()
    assert layout.num_cores == 9 and layout.steps == 3 and layout.rp["k"] == 1
    assert layout.partition_shape(0) == (1, 1) and layout.partition_shape(2) == (1, 1)
    q0 = layout.chunk({})["k"].reshape(3, 3)
    # Cannon's skew: every row and every column starts at a different chunk of k
    assert all(len(set(r)) == 3 for r in q0) and all(len(set(c)) == 3 for c in q0.T)
    steps, moved = _walk(layout)
    assert steps == 3
    assert moved == layout.shift_bytes() == 2 * 9 * 3 * 4


def test_partition_shapes_and_memory(exprs) -> None:
    e = exprs.matmul(8, 6, 4)
    plan = ExecutionPlan({"m": 2, "n": 2, "k": 1}, ({"k": 2}, {"k": 2}, {}))
    layout = OpLayout(e, plan)
    layout.validate()
    assert layout.partition_shape(0) == (4, 3)
    assert layout.partition_shape(1) == (3, 2)
    assert layout.partition_shape(2) == (4, 2)
    assert layout.memory_bytes_per_core() == 4 * (12 + 6 + 8)


def test_conv_compound_partition(exprs) -> None:
    e = exprs.conv2d(1, 2, 9, 9, 2, 3, 3, stride=2, pad=1)
    layout = OpLayout(e, ExecutionPlan({"y": 2}, tuple({} for _ in range(3))))
    layout.validate()
    OH = exprs.conv_out(9, 3, 2, 1, 1)
    xp = padded_extent(OH, 2, 1)
    # rows y*2 + kh - 1 of a sub-operator span 2*(xp-1) + (3-1) + 1 input rows
    assert layout.partition_shape(0)[2] == 2 * (xp - 1) + 3
    starts = layout.partition_start(0, {})[2]
    np.testing.assert_array_equal(starts, 2 * xp * np.arange(2) - 1)  # negative: zero padding


def test_output_owners_cover_once(exprs) -> None:
    e = exprs.matmul(6, 8, 6)
    layout = OpLayout(e, ExecutionPlan({"m": 2, "n": 2, "k": 4}, ({"k": 2}, {"k": 2}, {})))
    layout.validate()
    owners = layout.owners()
    assert owners.size == 4 and layout.replicas(2) == 4
    owner_of = layout.output_owner_of()
    assert set(owner_of.tolist()) == set(owners.tolist())
    np.testing.assert_array_equal(layout.grid["m"][owner_of], layout.grid["m"])
    np.testing.assert_array_equal(layout.grid["n"][owner_of], layout.grid["n"])
    assert layout.reduction_bytes() == 12 * layout.partition_bytes(2)


def test_counters_nested_loops(exprs) -> None:
    e = exprs.matmul(4, 4, 4, batch=2)
    plan = ExecutionPlan({"b": 2, "m": 2, "n": 2}, ({"k": 2}, {"k": 2}, {}), ("k",))
    layout = OpLayout(e, plan)
    seen = list(layout.counters())
    assert [c["k"] for c, _ in seen] == [0, 1]
    assert all(adv == ("k",) for _, adv in seen)


@pytest.mark.parametrize(
    "F, temporal, why",
    [
        ({"m": 2, "n": 2}, ({"n": 2}, {}, {}), "no axis"),
        ({"m": 2, "n": 3}, ({"k": 2}, {}, {}), "does not divide"),
        ({"m": 2, "n": 4}, ({"k": 4}, {"k": 3}, {}), "does not divide"),
    ],
)
def test_invalid_plans(exprs, F, temporal, why) -> None:
    with pytest.raises(InvalidPlanError, match=why):
        OpLayout(exprs.matmul(8, 12, 8), ExecutionPlan(F, temporal)).validate()


def test_softmax_row_is_pinned(exprs) -> None:
    e = exprs.softmax(4, 6)
    assert pinned_axes(e) == {"j"}
    # the row may be split across cores (its statistics combined), never rotated or padded
    OpLayout(e, ExecutionPlan({"j": 2}, ({}, {}))).validate()
    with pytest.raises(InvalidPlanError, match="cannot be split"):
        OpLayout(e, ExecutionPlan({"i": 2}, ({"j": 2}, {}))).validate()
    with pytest.raises(InvalidPlanError, match="must divide"):
        OpLayout(e, ExecutionPlan({"j": 4}, ({}, {}))).validate()


def test_epilogue_input_cannot_rotate(exprs) -> None:
    e = exprs.matmul_bias_relu(4, 4, 4)
    with pytest.raises(InvalidPlanError, match="epilogue input"):
        OpLayout(e, ExecutionPlan({"m": 2}, ({}, {}, {"n": 2}, {}))).validate()


_SHAPES = {
    "matmul": lambda e, d: e.matmul(d(st.integers(1, 9)), d(st.integers(1, 9)), d(st.integers(1, 9))),
    "bmm": lambda e, d: e.matmul(d(st.integers(1, 5)), d(st.integers(1, 6)), d(st.integers(1, 5)),
                                 transpose_b=d(st.booleans()), batch=d(st.integers(1, 4))),
    "conv": lambda e, d: e.conv2d(d(st.integers(1, 2)), d(st.integers(1, 4)), 6, 6,
                                  d(st.integers(1, 4)), 3, 3, stride=d(st.integers(1, 2)), pad=1),
}


@settings(max_examples=40, deadline=None)
@given(data=st.data(), kind=st.sampled_from(sorted(_SHAPES)), cores=st.sampled_from([4, 8, 16, 64]))
def test_random_plans_hold_needed_partitions(exprs, data, kind, cores) -> None:
    """Whatever the valid plan, each core holds at each step the partitions of its chunk."""
    e = _SHAPES[kind](exprs, data.draw)
    plan = exprs.random_plan(data.draw, e, cores, core_order=data.draw(st.booleans()))
    layout = OpLayout(e, plan)
    assert layout.num_cores <= cores
    steps, moved = _walk(layout)
    assert steps == layout.steps
    assert moved == layout.shift_bytes()
    if plan.core_order:  # the same plan in the default numbering: cores renamed, nothing else
        _check_renumbering(OpLayout(e, ExecutionPlan(plan.op_partition, plan.temporal, plan.loop_order)), layout)
    spread = [k for k in (2, 3, 4) if layout.num_cores % k == 0]
    if spread:
        _check_spread(layout, data.draw(st.sampled_from(spread)), cores)


def _check_spread(layout: OpLayout, k: int, cores_per_chip: int) -> None:
    """Spread over ``k`` chips, the plan keeps its numbering (grid, rings, shifts) and only
    its physical cores move: equal contiguous groups at the start of each chip, and the
    placement grids name those physical cores."""
    spread = OpLayout(layout.expr, dataclasses.replace(layout.plan, chips=k), cores_per_chip)
    n, g = layout.num_cores, layout.num_cores // k
    phys = spread.physical
    assert np.unique(phys).size == n and spread.span <= k * cores_per_chip
    np.testing.assert_array_equal(phys // cores_per_chip, np.repeat(np.arange(k), g))
    np.testing.assert_array_equal(phys % cores_per_chip, np.tile(np.arange(g), k))
    for a in layout.axes:
        np.testing.assert_array_equal(spread.grid[a], layout.grid[a])
    np.testing.assert_array_equal(spread.owners(), layout.owners())
    base, moved = producer_grid(layout), producer_grid(spread)
    held = base.owner >= 0
    np.testing.assert_array_equal(moved.owner[held], phys[base.owner[held]])
    boxes = input_boxes(layout, 0)
    placed = boxes.placed(phys, spread.span)
    np.testing.assert_array_equal(placed.nbytes[phys], boxes.nbytes)
    assert placed.nbytes.sum() == boxes.nbytes.sum()


def _check_renumbering(default: OpLayout, mapped: OpLayout) -> None:
    """``mapped`` is ``default`` with its cores renumbered: every per-core quantity agrees
    once cores are matched by their grid index, and core ids follow the renaming."""
    axes = default.axes
    key_d = np.ravel_multi_index([default.grid[a] for a in axes], [default.F[a] for a in axes])
    key_m = np.ravel_multi_index([mapped.grid[a] for a in axes], [mapped.F[a] for a in axes])
    assert sorted(key_m.tolist()) == list(range(default.num_cores))
    perm = np.empty(default.num_cores, np.int64)  # default core -> mapped core
    perm[key_m] = np.arange(mapped.num_cores)
    perm = perm[key_d]
    for a in axes:
        np.testing.assert_array_equal(mapped.grid[a][perm], default.grid[a])
        np.testing.assert_array_equal(mapped.offset[a][perm], default.offset[a])
    for t in range(len(default.expr.tensors)):
        np.testing.assert_array_equal(mapped.ring_id(t)[perm], default.ring_id(t))
        np.testing.assert_array_equal(mapped.subtensor_id(t)[perm], default.subtensor_id(t))
    for counters, advancing in default.counters():
        for ev_d, ev_m in zip(default.shifts_after(counters, advancing), mapped.shifts_after(counters, advancing)):
            np.testing.assert_array_equal(ev_m.source[perm], perm[ev_d.source])
            np.testing.assert_array_equal(ev_m.moving[perm], ev_d.moving)
    np.testing.assert_array_equal(np.sort(mapped.owners()), np.sort(perm[default.owners()]))
    np.testing.assert_array_equal(mapped.output_owner_of()[perm], perm[default.output_owner_of()])


def test_core_order_permutes_core_ids(exprs) -> None:
    """The plan's core order numbers the cores: with the batch axis innermost, the two
    replicas of each weight block are neighbours instead of ``num_cores / 2`` apart."""
    e = exprs.matmul(8, 6, 12)  # axes m, n, k; the weights B[k, n] lack m (the batch rows)
    F = {"m": 2, "n": 3, "k": 2}
    temporal = tuple({} for _ in e.tensors)
    default = OpLayout(e, ExecutionPlan(F, temporal))
    order = ("n", "k", "m")
    mapped = OpLayout(e, ExecutionPlan(F, temporal, (), order))
    np.testing.assert_array_equal(default.grid["m"], np.repeat([0, 1], 6))
    np.testing.assert_array_equal(mapped.grid["m"], np.tile([0, 1], 6))
    np.testing.assert_array_equal(mapped.grid["k"], np.tile(np.repeat([0, 1], 2), 3))
    weights = 1  # B: cores holding the same sub-tensor
    for layout, gap in ((default, 6), (mapped, 1)):
        sub = layout.subtensor_id(weights)
        for s in np.unique(sub):
            holders = np.flatnonzero(sub == s)
            assert holders.size == 2 and holders[1] - holders[0] == gap
    _check_renumbering(default, mapped)
    assert "core_order" not in default.plan.to_dict()
    assert ExecutionPlan.from_dict(mapped.plan.to_dict()) == mapped.plan


@pytest.mark.parametrize("order", [("b", "m"), ("b", "m", "n", "k", "k"), ("b", "m", "n", "x")])
def test_core_order_must_permute_the_axes(exprs, order) -> None:
    e = exprs.matmul(8, 6, 12, batch=2)
    with pytest.raises(InvalidPlanError, match="core order"):
        OpLayout(e, ExecutionPlan({"b": 2}, tuple({} for _ in e.tensors), (), order))


# -- merged output dimensions (a reshape [B, H, D] -> [B, H*D], tvm_icca.ops.views) ----------------
def _merge_expr(B: int = 2, H: int = 6, D: int = 4):
    from runtime_sim.contract.expr import AffineIndex, Axis, TensorAccess, TensorExpr, make_load

    a = AffineIndex.of_axis
    x = TensorAccess("X", (B, H, D), "float32", (a("b"), a("h"), a("d")))
    y = TensorAccess("Y", (B, H * D), "float32", (a("b"), AffineIndex((("h", D), ("d", 1)))))
    return TensorExpr("elementwise", (Axis("b", B), Axis("h", H), Axis("d", D)), (x,), y,
                      make_load(0, x.indices))


def test_inner_axes_of_a_merged_output_are_pinned() -> None:
    e = _merge_expr()
    assert e.merged_inner_axes == ("d",) and pinned_axes(e) == {"d"}
    with pytest.raises(InvalidPlanError, match="'d' lies inside a merged output dimension"):
        OpLayout(e, ExecutionPlan({"d": 2}, ({}, {}))).validate()


@pytest.mark.parametrize("F_h", [1, 2, 4])  # 4 does not divide H = 6: the last block is padded
def test_merged_output_partitions_are_blocks_of_the_merged_dim(F_h: int) -> None:
    e = _merge_expr()
    layout = OpLayout(e, ExecutionPlan({"b": 2, "h": F_h}, ({}, {})))
    layout.validate()
    xp = layout.xp["h"]
    assert layout.partition_shape(1) == (1, xp * 4)
    grid = producer_grid(layout)
    assert grid.block == (1, xp * 4)
    # block (b, k) of the merged dim holds rows k*xp .. of every head; owned by one core each
    assert sorted(grid.owner[grid.owner >= 0].tolist()) == list(range(layout.num_cores))
