"""What an execution plan means on the cores: placement, rotation and chunk schedule.

This is the semantics of :class:`runtime_sim.contract.program.ExecutionPlan`, shared by the compiler
(which must only emit valid plans and needs their memory footprint) and the device (which
executes them). Everything is computed for all cores at once as numpy arrays.

The construction generalizes T10 §4.2 and §4.4 ("Sub-tensor placement"):

* ``F_op`` splits every axis ``a`` of the operator; core ``c`` runs the sub-operator at grid
  index ``g[a](c)`` (row-major over the axes in the plan's ``core_order``, by default the
  expression's axis order). ``S_a`` is the largest temporal factor of any
  tensor on ``a``; the padded sub-operator extent is ``xp_a = S_a * ceil(ceil(E_a / F_a) / S_a)``
  and the rotating pace is ``rp_a = xp_a / S_a``: the sub-task length on ``a`` in one step.
* A tensor ``T`` is shared by the ``P_T`` cores that differ only on axes ``T`` does not have.
  With ``R_T = prod f_t^T`` partitions per sub-tensor, those cores form ``P_T / R_T`` rings
  of ``R_T`` cores (``P_T / R_T`` replicas of the sub-tensor).
* At temporal step ``s`` a core computes chunk ``q_a = (s_a + off_a) mod S_a`` of each axis. The
  offsets skew the cores the way Cannon's algorithm does: ring position digits of every
  tensor that rotates on ``a`` add ``(S_a / f_t^T_a) * digit`` to ``off_a``. A core then holds,
  of every tensor, exactly the partition that contains its current chunk
  (``p_a = q_a div (S_a / f_t^T_a)``); when the loop on ``a`` advances, a tensor whose ``p_a``
  changes receives the partition of the ring member that is one partition ahead: a circular
  shift within the ring. :meth:`OpLayout.validate` checks these invariants for every core.
* Every loop wraps around at its end (the final wrap included), so every tensor is back in its
  initial placement after the last step. Output replicas of different rings are then summed
  into ring 0 (the partial sums of a split reduction axis).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator, Mapping

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError, InvalidPlanError, short_name
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.program import (
    AffineIndex,
    ExecutionPlan,
    OpProgram,
    TensorExpr,
    VgmPlan,
    dtype_bytes,
    expr_loads,
    load_index,
    walk_expr,
)


#: bytes of one partial statistic combined across cores (computed in float32, COMPUTE_DTYPE)
STAT_BYTES = 4


def padded_extent(extent: int, parts: int, steps: int) -> int:
    """``S * ceil(ceil(E / F) / S)``: the sub-operator extent, padded so that S steps divide it."""
    return steps * math.ceil(math.ceil(extent / parts) / steps)


def pinned_axes(expr: TensorExpr) -> set[str]:
    """Axes that cannot be partitioned (neither split nor rotated).

    * Axes that share a tensor dimension with a core-local axis: a dimension read with a
      core-local axis (a softmax row, a layer-norm statistic) must be whole on every core,
      so any axis that also indexes that dimension stays unsplit.
    * Top-level reduction axes of a ``max``/``min`` combiner (:class:`TensorExpr`): each
      core reduces whole windows.
    * The inner axes of an output dimension that merges axes row-major
      (:attr:`TensorExpr.merged_inner_axes`, :func:`~runtime_sim.contract.program.merged_axes`: a
      reshape ``[B, S, H, D] -> [B, S, H*D]``, a grouped convolution's channel
      ``g*(F/G) + f``). This is the layout rule of such a dimension: only its outermost axis
      is partitioned, so every core's share of it is one contiguous block (whole groups,
      whole heads), the output blocks stay boxes (placement grids, re-layouts and the
      assembled output need boxes, :func:`producer_grid`), and the other tensors indexed by
      the same axes (the weight's ``g*(F/G) + f``) get the same boxes.
    """
    local = {a.name for a in expr.local_axes}
    pinned: set[str] = set(expr.merged_inner_axes)
    # a max/min over top-level axes: its partial results could not be summed into ring 0
    if expr.combiner != "sum":
        pinned.update(expr.reduce_axes)
    accesses: list[tuple[int, tuple[AffineIndex, ...]]] = []
    for node in expr_loads(expr.body) + expr_loads(expr.epilogue):
        accesses.append((int(node["input"]), load_index(node)))
    for t, access in enumerate(expr.inputs):
        accesses.append((t, access.indices))
    whole_dims = {
        (t, d) for t, idx in accesses for d, i in enumerate(idx) if set(i.axes) & local
    }
    for t, idx in accesses:
        for d, i in enumerate(idx):
            if (t, d) in whole_dims:
                pinned.update(a for a in i.axes if a not in local)
    return pinned


def local_splits(expr: TensorExpr) -> dict[str, str]:
    """Core-local axes a plan may split across cores: local axis -> the pinned axis it follows.

    A wide reduction (a layer-norm or RMS-norm statistic, a softmax row) reads a dimension
    that a top-level axis ``a`` also indexes (``X[i, j]`` and ``sum_k X[i, k]``). Splitting
    ``a`` in ``F_a`` parts splits every local axis that follows it the same way: the core
    at grid index ``g_a`` holds positions ``[g_a * E_a / F_a, (g_a + 1) * E_a / F_a)`` of the
    row, its reductions over those axes give partial statistics, and the cores sharing a
    row combine them (:meth:`OpLayout.combine_groups`, sum / max / min across the group) before
    the rest of the expression uses them. A local axis follows ``a`` when every dimension
    it indexes is indexed, at every access, by itself or by ``a`` alone (plain indices,
    same extent). The axis ``a`` may then be split (F_a dividing its extent, no rotation on
    it) only when every local axis sharing a dimension with it follows it; operators with a
    top-level reduction or with local axes in the epilogue are never split this way.
    """
    local = {a.name: a.extent for a in expr.local_axes}
    if not local or expr.reduce_axes:
        return {}
    extent = {a.name: a.extent for a in expr.axes}
    accesses: list[tuple[int, tuple[AffineIndex, ...]]] = []
    for node in expr_loads(expr.body) + expr_loads(expr.epilogue):
        accesses.append((int(node["input"]), load_index(node)))
    for t, access in enumerate(expr.tensors[:-1]):
        accesses.append((t, access.indices))
    accesses.append((-1, expr.output.indices))
    epilogue_axes = {n["axis"] for n in walk_expr(expr.epilogue)} if expr.epilogue else set()
    for node in expr_loads(expr.epilogue):
        epilogue_axes.update(a for i in load_index(node) for a in i.axes)
    users: dict[tuple[int, int], set[str]] = {}  # (tensor, dim) -> axes indexing it
    bad: set[str] = epilogue_axes & set(local)  # in a compound index, or local in the epilogue
    for t, idx in accesses:
        for d, i in enumerate(idx):
            users.setdefault((t, d), set()).update(i.axes)
            if not i.is_simple:
                bad.update(i.axes)
    follow: dict[str, str] = {}
    for name, n in local.items():
        tops = {a for users_d in users.values() if name in users_d for a in users_d if a not in local}
        if name in bad or len(tops) != 1:
            continue
        (a,) = tops
        if a not in bad and extent[a] == n:
            follow[name] = a
    # a pinned axis splits only if every local axis reading one of its dimensions follows it
    blocked = {a for users_d in users.values() if users_d & set(local)
               for a in users_d if a not in local and any(follow.get(b) != a for b in users_d & set(local))}
    return {l: a for l, a in follow.items() if a not in blocked}


def reduce_key(node: dict, follow: Mapping[str, str]) -> str:
    """One key for reductions that compute the same statistic under other local axis names
    (softmax's two row maxima, layer norm's two means): split local axes renamed to the
    axis they follow."""
    def rename(n: dict) -> dict:
        out = dict(n)
        if n["op"] == "reduce":
            out["axes"] = sorted(follow.get(a, a) for a in n["axes"])
        if n["op"] == "load":
            out["index"] = [
                {**i, "terms": [[follow.get(a, a), c] for a, c in i.get("terms", ())]}
                for i in n["index"]
            ]
        if "args" in n:
            out["args"] = [rename(a) for a in n["args"]]
        return out

    return json.dumps(rename(node), sort_keys=True)


def split_reductions(expr: TensorExpr, follow: Mapping[str, str]) -> dict[str, tuple[int, frozenset]]:
    """The distinct reductions of the body over the split local axes ``follow``:
    :func:`reduce_key` -> (level, top-level axes the statistic depends on).

    Level 1 statistics need no other combined statistic; a level ``n`` one (the variance
    around a combined mean, softmax's sum of exp around the combined max) waits for level
    ``n - 1``: the combine steps of one operator are its levels, one after another.
    """
    found: dict[str, tuple[int, frozenset]] = {}
    local = {a.name for a in expr.local_axes}

    def visit(node: dict) -> tuple[set, int]:
        op = node["op"]
        if op == "load":
            return {a for i in load_index(node) for a in i.axes}, 0
        if op == "axis":
            return {node["axis"]}, 0
        free, level = set(), 0
        for arg in node.get("args", ()):
            f, lv = visit(arg)
            free |= f
            level = max(level, lv)
        if op == "reduce":
            free -= set(node["axes"])
            if set(node["axes"]) & set(follow):
                level += 1
                key = reduce_key(node, follow)
                old = found.get(key, (0, frozenset()))
                found[key] = (max(old[0], level), frozenset(free - local))
        return free, level

    if follow:
        visit(expr.body)
    return found


def padding_safe_reduce(expr: TensorExpr) -> bool:
    """True when zero-padded inputs add nothing to the reduced sum.

    A reduction axis padded past its extent reads positions beyond the tensors, which the
    device zero-fills. That adds nothing when the body is a product one of whose factors
    reads such a position as zero: a load that indexes the axis alone, over a dimension as
    long as the axis (matmul's ``B[k, n]``, a convolution's weight ``W[f, c, kh, kw]``). A
    body like ``exp(x)`` would add exp(0) = 1 per padded element, and a window read
    ``x[h*s + kh]`` alone (average pooling) would add real elements of the next window, so
    their reduction axes must not be padded.
    """
    extent = {a.name: a.extent for a in expr.axes}

    def zero_when_padded(node: dict, axis: str) -> bool:
        if node["op"] == "load":
            shape = expr.inputs[int(node["input"])].shape
            return any(ix.is_simple and ix.terms[0][0] == axis and extent[axis] == shape[d]
                       for d, ix in enumerate(load_index(node)))
        if node["op"] == "mul":
            return any(zero_when_padded(a, axis) for a in node["args"])
        if node["op"] in ("cast", "neg"):
            return zero_when_padded(node["args"][0], axis)
        return False

    return all(zero_when_padded(expr.body, a) for a in expr.reduce_axes)


@dataclass(frozen=True)
class ShiftEvent:
    """Tensor ``tensor`` moves along axis ``axis``: core ``c`` receives from ``source[c]``."""

    tensor: int
    axis: str
    source: np.ndarray  # core -> core it receives from (itself where nothing moves)
    moving: np.ndarray  # boolean mask of cores that receive a new partition


class OpLayout:
    """The placement and step schedule of one operator under one execution plan."""

    def __init__(self, expr: TensorExpr, plan: ExecutionPlan, cores_per_chip: int | None = None):
        self.expr = expr
        self.plan = plan
        self.axes = expr.axis_names
        unknown = set(plan.op_partition) - set(self.axes)
        if unknown:
            raise InvalidPlanError(f"F_op names unknown axes {sorted(unknown)}")
        if len(plan.temporal) != len(expr.tensors):
            raise InvalidPlanError(
                f"plan has temporal factors for {len(plan.temporal)} tensors, "
                f"operator has {len(expr.tensors)}"
            )
        self.extent = {a.name: a.extent for a in expr.axes}
        self.F = {a: plan.F(a) for a in self.axes}
        for a, f in self.F.items():
            if not 1 <= f <= self.extent[a]:
                raise InvalidPlanError(f"F_op[{a}]={f} must be in [1, {self.extent[a]}]")
        self.S = {
            a: max([plan.ft(t, a) for t in range(len(expr.tensors))] + [1]) for a in self.axes
        }
        self.xp = {a: padded_extent(self.extent[a], self.F[a], self.S[a]) for a in self.axes}
        self.rp = {a: self.xp[a] // self.S[a] for a in self.axes}
        self.num_cores = int(np.prod([self.F[a] for a in self.axes], dtype=np.int64))
        #: split core-local axes (:func:`local_splits`) -> the axis whose grid they follow
        self.local_follow = {
            l: a for l, a in local_splits(expr).items() if self.F[a] > 1
        } if expr.local_axes else {}
        #: per-core length of each core-local axis (its share of the row when split)
        self.local_extent = {
            a.name: (self.xp[self.local_follow[a.name]] if a.name in self.local_follow else a.extent)
            for a in expr.local_axes
        }
        self.loop_axes = tuple(plan.loop_order) if plan.loop_order else tuple(
            a for a in self.axes if self.S[a] > 1
        )
        if sorted(self.loop_axes) != sorted(a for a in self.axes if self.S[a] > 1):
            raise InvalidPlanError(
                f"loop order {list(self.loop_axes)} must list exactly the axes with temporal "
                f"steps {[a for a in self.axes if self.S[a] > 1]}"
            )
        self.steps = int(np.prod([self.S[a] for a in self.loop_axes], dtype=np.int64))
        self.core_order = tuple(plan.core_order) if plan.core_order else self.axes
        if sorted(self.core_order) != sorted(self.axes):
            raise InvalidPlanError(
                f"core order {list(plan.core_order)} must be a permutation of the axes "
                f"{list(self.axes)} (or empty)"
            )
        #: chips the numbered cores are spread over (``plan.chips``, see :attr:`physical`)
        self.chips = int(getattr(plan, "chips", 1))
        self.cores_per_chip = None if cores_per_chip is None else int(cores_per_chip)
        if self.chips < 1:
            raise InvalidPlanError(f"chips={self.chips} must be at least 1")
        if self.chips > 1:
            if self.num_cores % self.chips:
                raise InvalidPlanError(
                    f"a plan on {self.num_cores} cores cannot be spread evenly over {self.chips} chips"
                )
            if self.cores_per_chip is not None and self.num_cores // self.chips > self.cores_per_chip:
                raise InvalidPlanError(
                    f"{self.num_cores // self.chips} cores per chip do not fit on a chip of "
                    f"{self.cores_per_chip} cores"
                )

    # -- per-core grid ------------------------------------------------------------------
    @cached_property
    def grid(self) -> dict[str, np.ndarray]:
        """``g[a](c)``: the sub-operator index of core ``c`` on axis ``a``.

        Cores are numbered row-major over the axes in :attr:`core_order` (the plan's
        ``core_order``, else the expression's axis order), outermost first. This is the one
        mapping of sub-operators to physical cores: everything that names a core (rings,
        shift sources, owners, placement grids) derives from it, for the functional device
        and the timing simulator alike.
        """
        order = self.core_order
        shape = [self.F[a] for a in order]
        idx = np.unravel_index(np.arange(self.num_cores), shape) if shape else ()
        by_axis = {a: np.asarray(i, dtype=np.int64) for a, i in zip(order, idx)}
        return {a: by_axis[a] for a in self.axes}

    @cached_property
    def physical(self) -> np.ndarray:
        """The physical core of each numbered core ``i``.

        Per-core arrays of a layout are indexed by numbered core (``0 .. num_cores - 1``);
        anything that names a core to the hardware (flows, SRAM, owners of a
        :class:`BlockGrid`, chips) goes through this map.

        With ``plan.chips == 1`` the identity: the plan occupies cores ``0 .. num_cores - 1``.
        Spread over ``k = plan.chips`` chips, the numbered cores form ``k`` equal contiguous
        groups of ``g = num_cores / k``, one at the start of each chip:
        ``physical(i) = (i // g) * cores_per_chip + i % g``. This and :attr:`grid` are the one
        definition of where a sub-operator runs, for the functional device, the timing
        simulator and the compiler's mapping cost alike.
        """
        i = np.arange(self.num_cores, dtype=np.int64)
        if self.chips == 1:
            return i
        if self.cores_per_chip is None:
            raise InvalidPlanError(
                f"a plan spread over {self.chips} chips needs the chip's cores_per_chip to be placed"
            )
        g = self.num_cores // self.chips
        return (i // g) * self.cores_per_chip + i % g

    @property
    def span(self) -> int:
        """One more than the highest physical core the plan occupies."""
        return int(self.physical[-1]) + 1 if self.num_cores else 0

    def chip_of_core(self, cores_per_chip: int) -> np.ndarray:
        """The chip of each numbered core on a system of ``cores_per_chip`` cores per chip."""
        return self.physical // int(cores_per_chip)

    def tensor_axes(self, t: int) -> tuple[str, ...]:
        """Top-level axes that index tensor ``t`` (its sub-tensor is chosen by them)."""
        return tuple(a for a in self.expr.tensors[t].axes if a in self.extent)

    def temporal_axes(self, t: int) -> tuple[str, ...]:
        return tuple(a for a in self.axes if self.plan.ft(t, a) > 1)

    def sharing(self, t: int) -> int:
        """P_T: how many cores share one sub-tensor of tensor ``t``."""
        own = set(self.tensor_axes(t))
        return int(np.prod([self.F[a] for a in self.axes if a not in own], dtype=np.int64))

    def ring_size(self, t: int) -> int:
        """R_T = prod f_t: partitions per sub-tensor, i.e. cores per rotation ring."""
        return int(np.prod([self.plan.ft(t, a) for a in self.axes], dtype=np.int64))

    def replicas(self, t: int) -> int:
        return self.sharing(t) // self.ring_size(t)

    @cached_property
    def _rings(self) -> list[dict[str, np.ndarray]]:
        rings = []
        for t in range(len(self.expr.tensors)):
            own = set(self.tensor_axes(t))
            free = [a for a in self.axes if a not in own]
            mine = [a for a in self.axes if a in own]
            g_free = _ravel([self.grid[a] for a in free], [self.F[a] for a in free], self.num_cores)
            sub = _ravel([self.grid[a] for a in mine], [self.F[a] for a in mine], self.num_cores)
            R = self.ring_size(t)
            pos = g_free % R
            temporal = self.temporal_axes(t)
            digits = (
                np.unravel_index(pos, [self.plan.ft(t, a) for a in temporal]) if temporal else ()
            )
            rings.append(
                {
                    "subtensor": sub,
                    "ring": g_free // R,
                    "position": pos,
                    **{f"digit:{a}": np.asarray(d, np.int64) for a, d in zip(temporal, digits)},
                }
            )
        return rings

    def ring_id(self, t: int) -> np.ndarray:
        return self._rings[t]["ring"]

    def subtensor_id(self, t: int) -> np.ndarray:
        return self._rings[t]["subtensor"]

    @cached_property
    def offset(self) -> dict[str, np.ndarray]:
        """``off_a(c)``: the Cannon-style skew of each core's chunk schedule."""
        off = {a: np.zeros(self.num_cores, np.int64) for a in self.axes}
        for t in range(len(self.expr.tensors)):
            for a in self.temporal_axes(t):
                off[a] += (self.S[a] // self.plan.ft(t, a)) * self._rings[t][f"digit:{a}"]
        return {a: off[a] % self.S[a] for a in self.axes}

    # -- chunks and partitions ----------------------------------------------------------
    def chunk(self, counters: Mapping[str, int]) -> dict[str, np.ndarray]:
        """``q_a`` of every core for loop counters ``s`` (axes without steps are 0)."""
        return {a: (int(counters.get(a, 0)) + self.offset[a]) % self.S[a] for a in self.axes}

    def partition(self, t: int, q: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``p_a`` of the partition of tensor ``t`` held by each core while at chunk ``q``."""
        return {
            a: q[a] // (self.S[a] // self.plan.ft(t, a)) for a in self.temporal_axes(t)
        }

    def partition_shape(self, t: int) -> tuple[int, ...]:
        """Shape of one partition of tensor ``t`` (what a core stores)."""
        access = self.expr.tensors[t]
        return tuple(self._dim_length(t, d, idx) for d, idx in enumerate(access.indices))

    def _dim_length(self, t: int, d: int, idx: AffineIndex) -> int:
        access = self.expr.tensors[t]
        if any(a in self.local_extent for a in idx.axes):
            if idx.is_simple and idx.terms[0][0] in self.local_follow:
                return self.local_extent[idx.terms[0][0]]
            return self.expr.access_shape(t)[d]
        if not idx.terms:
            return 1
        if idx.is_simple:
            a = idx.terms[0][0]
            return self.xp[a] // self.plan.ft(t, a)
        return sum(abs(c) * (self.xp[a] - 1) for a, c in idx.terms) + 1

    def partition_bytes(self, t: int) -> int:
        access = self.expr.tensors[t]
        return int(np.prod(self.partition_shape(t), dtype=np.int64)) * dtype_bytes(access.dtype)

    def memory_bytes_per_core(self) -> int:
        """Bytes of tensor partitions on each core (every core holds one of each tensor)."""
        return sum(self.partition_bytes(t) for t in range(len(self.expr.tensors)))

    def partition_start(self, t: int, p: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Global index of the first element of each core's partition, per dimension."""
        access = self.expr.tensors[t]
        starts = []
        for d, idx in enumerate(access.indices):
            if any(a in self.local_extent for a in idx.axes):
                if idx.is_simple and idx.terms[0][0] in self.local_follow:
                    a = self.local_follow[idx.terms[0][0]]
                    starts.append(self.grid[a] * self.xp[a])
                else:
                    starts.append(np.zeros(self.num_cores, np.int64))
            elif idx.is_simple:
                a = idx.terms[0][0]
                length = self.xp[a] // self.plan.ft(t, a)
                start = self.grid[a] * self.xp[a]
                if a in p:
                    start = start + p[a] * length
                starts.append(start)
            else:
                # the lowest position the core's sub-operator reads; a negative coefficient
                # (a reversing slice) reads downwards from its block's first point
                start = np.full(self.num_cores, idx.offset, np.int64)
                for a, c in idx.terms:
                    start = start + c * self.grid[a] * self.xp[a] + min(c, 0) * (self.xp[a] - 1)
                starts.append(start)
        return starts

    def chunk_index(
        self, index: AffineIndex, q: Mapping[str, np.ndarray], axis_order: tuple[str, ...]
    ) -> np.ndarray:
        """Global index of one dimension for every core and every point of the chunk.

        The result has shape ``[cores, *chunk lengths of axis_order]`` with size-1 axes where
        the dimension does not depend on an axis, ready for numpy advanced indexing.
        """
        shape = [self.num_cores] + [1] * len(axis_order)
        out = np.full(shape, index.offset, np.int64)
        for a, c in index.terms:
            pos = axis_order.index(a)
            view = [1] * (len(axis_order) + 1)
            if a in self.local_extent:
                values = np.arange(self.local_extent[a], dtype=np.int64)
                view[pos + 1] = values.size
                out = out + c * values.reshape(view)
                if a in self.local_follow:  # this core's share of a split row
                    f = self.local_follow[a]
                    out = out + c * (self.grid[f] * self.xp[f]).reshape([-1] + [1] * len(axis_order))
            else:
                base = self.grid[a] * self.xp[a] + q[a] * self.rp[a]
                view[pos + 1] = self.rp[a]
                span = np.arange(self.rp[a], dtype=np.int64).reshape(view)
                out = out + c * (base.reshape([-1] + [1] * len(axis_order)) + span)
        return out

    # -- schedule -----------------------------------------------------------------------
    def counters(self) -> Iterator[tuple[dict[str, int], tuple[str, ...]]]:
        """Yield, per step, the loop counters and the axes that advance after the step.

        The innermost loop advances after every step; a loop that wraps also advances the
        one outside it. After the last step every loop wraps (returning tensors home).
        """
        order = self.loop_axes
        counters = {a: 0 for a in order}
        for _ in range(self.steps):
            advancing = []
            for a in reversed(order):
                advancing.append(a)
                if counters[a] + 1 < self.S[a]:
                    break
            yield dict(counters), tuple(advancing)
            for a in advancing:
                counters[a] = (counters[a] + 1) % self.S[a]

    @cached_property
    def _shift_sources(self) -> dict[tuple[int, str], np.ndarray]:
        sources = {}
        q0 = self.chunk({})
        for t in range(len(self.expr.tensors)):
            temporal = self.temporal_axes(t)
            if not temporal:
                continue
            p0 = self.partition(t, q0)
            radices = [self.plan.ft(t, a) for a in temporal]
            group = self._group_key(t)
            for a in temporal:
                ahead = dict(p0)
                ahead[a] = (p0[a] + 1) % self.plan.ft(t, a)
                want = group * self.ring_size(t) + _ravel([ahead[b] for b in temporal], radices, self.num_cores)
                have = group * self.ring_size(t) + _ravel([p0[b] for b in temporal], radices, self.num_cores)
                order = np.argsort(have, kind="stable")
                pos = np.searchsorted(have[order], want)
                sources[(t, a)] = order[np.minimum(pos, self.num_cores - 1)]
        return sources

    def shift_sources(self, t: int, a: str) -> np.ndarray:
        """For every core, the core it receives tensor ``t``'s partition from when ``t``
        shifts on ``a`` (each core shifts :meth:`shift_count_per_core` times)."""
        return self._shift_sources[(t, a)]

    def _group_key(self, t: int) -> np.ndarray:
        """A number identifying (sub-tensor, ring) of tensor ``t`` on every core."""
        rings = self._rings[t]
        return rings["subtensor"] * max(self.replicas(t), 1) + rings["ring"]

    def shifts_after(self, counters: Mapping[str, int], advancing: tuple[str, ...]) -> list[ShiftEvent]:
        """The shifts that follow the step at ``counters`` when ``advancing`` loops move on."""
        q = self.chunk(counters)
        events = []
        for a in advancing:
            for t in range(len(self.expr.tensors)):
                ft = self.plan.ft(t, a)
                if ft <= 1:
                    continue
                moving = (q[a] + 1) % (self.S[a] // ft) == 0
                if not moving.any():
                    continue
                src = np.where(moving, self._shift_sources[(t, a)], np.arange(self.num_cores))
                events.append(ShiftEvent(t, a, src, moving))
        return events

    def shift_count_per_core(self, t: int, a: str) -> int:
        """Closed form: times one core receives a partition of tensor ``t`` along ``a``."""
        ft = self.plan.ft(t, a)
        if ft <= 1:
            return 0
        outer = self.loop_axes[: self.loop_axes.index(a)]
        return ft * int(np.prod([self.S[b] for b in outer], dtype=np.int64))

    def shift_bytes(self) -> int:
        """Closed form: bytes received over the interconnect by all cores during the steps."""
        total = 0
        for t in range(len(self.expr.tensors)):
            for a in self.temporal_axes(t):
                total += self.num_cores * self.shift_count_per_core(t, a) * self.partition_bytes(t)
        return total

    def reduction_bytes(self) -> int:
        """Bytes sent to sum output replicas into ring 0 after the last step, plus those that
        combine the partial statistics of split core-local reductions (:meth:`combine_bytes`)."""
        out = len(self.expr.tensors) - 1
        replica = self.num_cores // self.replicas(out) * (self.replicas(out) - 1) * self.partition_bytes(out)
        return replica + self.combine_bytes()

    # -- split core-local reductions (local_splits) ----------------------------------------
    @cached_property
    def combine_groups(self) -> np.ndarray:
        """For every core, the number of its combine group: the cores that hold parts of
        the same rows (they differ only on the axes split core-local axes follow)."""
        rows = set(self.local_follow.values())
        keep = [a for a in self.axes if a not in rows]
        return _ravel([self.grid[a] for a in keep], [self.F[a] for a in keep], self.num_cores)

    @property
    def combine_size(self) -> int:
        """Cores per combine group (1 when no core-local axis is split)."""
        rows = set(self.local_follow.values())
        return int(np.prod([self.F[a] for a in rows], dtype=np.int64))

    @cached_property
    def split_reduces(self) -> dict[str, tuple[int, int]]:
        """The distinct reductions over split core-local axes of the body, each combined once
        per step (:func:`split_reductions`): key -> (level, statistic elements per core, the
        product of this core's chunk lengths over the top-level axes it depends on)."""
        if not self.local_follow:
            return {}
        return {
            key: (level, int(np.prod([self.rp[a] for a in free], dtype=np.int64)))
            for key, (level, free) in split_reductions(self.expr, self.local_follow).items()
        }

    def reduce_key(self, node: dict) -> str:
        """:func:`reduce_key` under this plan's split axes."""
        return reduce_key(node, self.local_follow)

    def combine_levels(self) -> list[int]:
        """Statistic elements per core combined at each level (level 1 first)."""
        levels: dict[int, int] = {}
        for level, elems in self.split_reduces.values():
            levels[level] = levels.get(level, 0) + elems
        return [levels[k] for k in sorted(levels)]

    def combine_bytes(self) -> int:
        """Closed form: bytes sent to combine partial statistics over all steps. Each level
        is an all-reduce of float32 statistics in every group of ``G`` cores: a reduction to
        the group's first core and a broadcast back, ``2 (G - 1)`` messages per group."""
        G = self.combine_size
        if G <= 1:
            return 0
        groups = self.num_cores // G
        elems = sum(self.combine_levels())
        return self.steps * groups * 2 * (G - 1) * elems * STAT_BYTES

    def owners(self) -> np.ndarray:
        """Cores whose output partition is final (ring 0 of the output)."""
        return np.flatnonzero(self.ring_id(len(self.expr.tensors) - 1) == 0)

    def output_owner_of(self) -> np.ndarray:
        """For every core, the ring-0 core that holds the same output partition."""
        out = len(self.expr.tensors) - 1
        key = self.partition_key(out)
        owners = self.owners()
        order = np.argsort(key[owners], kind="stable")
        pos = np.searchsorted(key[owners][order], key)
        return owners[order[pos]]

    def partition_key(self, t: int) -> np.ndarray:
        """An id of the partition of tensor ``t`` each core holds at its first step: cores with
        equal ids are replicas of one partition (T10 §4.2)."""
        temporal = self.temporal_axes(t)
        p0 = self.partition(t, self.chunk({}))
        radices = [self.plan.ft(t, a) for a in temporal]
        return self._rings[t]["subtensor"] * self.ring_size(t) + _ravel(
            [p0[a] for a in temporal], radices, self.num_cores
        )

    # -- validity -----------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`InvalidPlanError` unless the plan obeys every T10 rule (§4.2)."""
        expr = self.expr
        pinned = pinned_axes(expr)
        rows = set(local_splits(expr).values()) if any(self.F[a] > 1 for a in pinned) else set()
        for a in pinned:
            if self.S[a] != 1 or (self.F[a] != 1 and a not in rows):
                why = ("lies inside a merged output dimension" if a in expr.merged_inner_axes
                       else "shares a dimension with a core-local axis")
                raise InvalidPlanError(f"axis '{a}' {why} and cannot be split")
            if self.extent[a] % self.F[a]:
                raise InvalidPlanError(
                    f"axis '{a}' splits core-local reductions: F_op[{a}]={self.F[a]} must divide {self.extent[a]}"
                )
        if not padding_safe_reduce(expr):
            for a in expr.reduce_axes:
                if self.F[a] * self.xp[a] != self.extent[a]:
                    raise InvalidPlanError(f"reduction axis '{a}' of this body cannot be padded")
        for t, access in enumerate(expr.tensors):
            own = self.tensor_axes(t)
            for a, f in self.plan.temporal[t].items():
                if int(f) < 1:
                    raise InvalidPlanError(f"temporal factor of {access.name} on '{a}' is {f}")
                if int(f) == 1:
                    continue
                if a not in own:
                    raise InvalidPlanError(f"{access.name} has no axis '{a}' to partition temporally")
                dims = [i for i in access.indices if a in i.axes]
                if len(dims) != 1 or not dims[0].is_simple:
                    raise InvalidPlanError(
                        f"{access.name} is indexed by '{a}' through a compound index; it cannot rotate on it"
                    )
                if t in expr.epilogue_inputs:
                    raise InvalidPlanError(f"epilogue input {access.name} cannot rotate")
            if self.sharing(t) % self.ring_size(t):
                raise InvalidPlanError(
                    f"prod f_t of {access.name} ({self.ring_size(t)}) does not divide the "
                    f"{self.sharing(t)} cores that share each of its sub-tensors"
                )
        for a in self.axes:
            factors = sorted({self.plan.ft(t, a) for t in range(len(expr.tensors))})
            for lo, hi in zip(factors, factors[1:]):
                if hi % lo:
                    raise InvalidPlanError(
                        f"temporal factors on axis '{a}' ({factors}) are not pairwise factor/multiple"
                    )
        self._check_rings()

    def _check_rings(self) -> None:
        q0 = self.chunk({})
        for t in range(len(self.expr.tensors)):
            temporal = self.temporal_axes(t)
            if not temporal:
                continue
            key = self.partition_key(t) * max(self.replicas(t), 1) + self.ring_id(t)
            if np.unique(key).size != self.num_cores:
                raise InvalidPlanError(
                    f"rotation rings of {self.expr.tensors[t].name} do not hold each partition once"
                )
            group = self._group_key(t)
            for a in temporal:
                phase = q0[a] % (self.S[a] // self.plan.ft(t, a))
                order = np.argsort(group, kind="stable")
                g_sorted, ph_sorted = group[order], phase[order]
                same = g_sorted[1:] == g_sorted[:-1]
                if np.any(same & (ph_sorted[1:] != ph_sorted[:-1])):
                    raise InvalidPlanError(
                        f"ring members of {self.expr.tensors[t].name} would shift on '{a}' at different steps"
                    )


def _ravel(indices: list[np.ndarray], radices: list[int], n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    for i, r in zip(indices, radices):
        out = out * int(r) + i
    return out


def check_op_inputs(op: OpProgram) -> None:
    """An operator names one region tensor per input of its expression."""
    if len(op.input_names) != len(op.expr.inputs):
        raise DeviceProgramError(
            f"operator '{short_name(op.name)}' names {len(op.input_names)} inputs, "
            f"its expression has {len(op.expr.inputs)}"
        )


def checked_layout(op: OpProgram, hw: HardwareSpec) -> OpLayout:
    """The validated layout of one compute-shift operator of a program on the chip ``hw``.

    Both ways of running a compute-shift program (functional and timing) start here, so it is
    accepted or refused the same way by both. A VGM plan has no such layout: the functional
    device runs it with :mod:`runtime_sim.functional.vgm_exec` before getting here, and its time comes
    from :func:`runtime_sim.timing.vgm_timing.simulate_vgm_timing`, so reaching here with one (the
    compute-shift timing simulator) is an error.
    """
    if isinstance(op.plan, VgmPlan):
        raise DeviceProgramError(
            f"operator '{short_name(op.name)}' has a VGM plan, which the compute-shift path "
            "cannot take: time "
            "VGM programs with runtime_sim.timing.vgm_timing.simulate_vgm_timing (the functional device runs "
            "them on data, through runtime_sim.functional.vgm_exec)"
        )
    check_op_inputs(op)
    layout = OpLayout(op.expr, op.plan, hw.cores_per_chip)
    layout.validate()
    if layout.num_cores > hw.num_cores:
        raise InvalidPlanError(
            f"operator '{short_name(op.name)}' is planned on {layout.num_cores} cores, "
            f"but chip '{hw.name}' has {hw.num_cores}"
        )
    if layout.chips > hw.num_chips:
        raise InvalidPlanError(
            f"operator '{short_name(op.name)}' is spread over {layout.chips} chips, "
            f"but '{hw.name}' has {hw.num_chips}"
        )
    return layout


# -- placement grids (where a tensor sits between operators; read by the compiler too) -----
@dataclass(frozen=True)
class BlockGrid:
    """A tensor stored as blocks ``[k*block, (k+1)*block)`` per dimension, block ``k`` on
    physical core ``owner[ravel(k)]`` (``counts`` blocks per dimension)."""

    shape: tuple[int, ...]
    block: tuple[int, ...]
    counts: tuple[int, ...]
    owner: np.ndarray  # flat, row-major over ``counts``; -1 where no core holds the block
    itemsize: int


def producer_grid(layout: OpLayout) -> BlockGrid:
    """Where a producer's output is once its steps and replica reduction are done.

    Every tensor is back in its initial placement after the last step (the final wrap of
    every loop, :mod:`runtime_sim.contract.layout`), and ring 0 holds the reduced output.
    """
    grid = _block_grid(layout, len(layout.expr.tensors) - 1, layout.owners())
    assert grid is not None  # an output's index is simple on every dimension
    return grid


def placement_grid(layout: OpLayout, t: int) -> BlockGrid | None:
    """Where tensor ``t`` sits while its operator is idle in ``layout`` (T10 §4.3.2): the
    initial placement, each block taken from the lowest core that holds it (replicas of a
    sub-tensor hold equal blocks). ``None`` when the partitions are not aligned blocks (a
    compound index, e.g. a convolution's input window)."""
    return _block_grid(layout, t, np.arange(layout.num_cores))


def _block_grid(layout: OpLayout, t: int, cores: np.ndarray) -> BlockGrid | None:
    access = layout.expr.tensors[t]
    if getattr(access, "gather", None) is not None:
        return None  # its partitions are rows picked by data, not blocks of the tensor
    shape = tuple(int(s) for s in access.shape)
    itemsize = dtype_bytes(access.dtype)
    cores = np.asarray(cores, np.int64)
    if not shape:
        return BlockGrid((), (), (), layout.physical[cores[:1]], itemsize)
    starts = layout.partition_start(t, layout.partition(t, layout.chunk({})))
    block = tuple(max(int(b), 1) for b in layout.partition_shape(t))
    ks = []
    for d, length in enumerate(block):
        start = np.broadcast_to(np.asarray(starts[d], np.int64), (layout.num_cores,))[cores]
        if np.any(start % length):
            return None
        ks.append(np.maximum(start // length, 0))
    counts = tuple(max(math.ceil(shape[d] / block[d]), int(ks[d].max()) + 1) for d in range(len(shape)))
    flat = np.ravel_multi_index(tuple(ks), counts)
    blocks, first = np.unique(flat, return_index=True)
    owner = np.full(int(np.prod(counts)), -1, np.int64)
    owner[blocks] = layout.physical[cores[first]]
    return BlockGrid(shape, block, counts, owner, itemsize)


def canonical_grid(shape: tuple[int, ...], itemsize: int, num_cores: int) -> BlockGrid:
    """An on-chip tensor of unknown origin (another region's output): near-square blocks,
    one per core in row-major order -- the shape a 2D-partitioned producer leaves.

    The prime factors of the core count go, largest first, to the dimension whose blocks are
    currently longest (as long as it can still be split).
    """
    counts = [1] * len(shape)
    for p in _prime_factors(num_cores)[::-1]:
        splittable = [d for d in range(len(shape)) if counts[d] * p <= shape[d]]
        if not splittable:
            continue
        d = max(splittable, key=lambda d: (math.ceil(shape[d] / counts[d]), -d))
        counts[d] *= p
    block = [max(1, math.ceil(s / c)) if s else 1 for s, c in zip(shape, counts)]
    counts = [max(1, math.ceil(s / b)) for s, b in zip(shape, block)]
    total = int(np.prod(counts)) if counts else 1
    return BlockGrid(tuple(shape), tuple(block), tuple(counts), np.arange(total, dtype=np.int64), itemsize)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


# -- where a tensor must be, and which bytes a re-layout moves (runtime_sim.timing.geometry
#    describes these; they live here because the compiler's mapping cost reads them too) --
#: (owner, consumer) pairs above which a re-layout is estimated from a sample of consumers.
#: Chosen so that one re-layout stays within ~0.1 s of numpy work in the worst case.
MAX_PAIRS = 500_000


@dataclass(frozen=True)
class Boxes:
    """Per core, the half-open box ``[lo, hi)`` of a tensor it needs (``[cores, dims]``)."""

    lo: np.ndarray
    hi: np.ndarray
    shape: tuple[int, ...]
    itemsize: int
    #: cores that need the tensor at all (``None``: every core); see :meth:`placed`
    present: np.ndarray | None = None

    @property
    def num_cores(self) -> int:
        return int(self.lo.shape[0])

    @property
    def nbytes(self) -> np.ndarray:
        """Bytes of real data each core needs (0 for a box entirely in the padding)."""
        if not self.shape:
            need = np.full(self.num_cores, self.itemsize, np.int64)
        else:
            need = np.prod(np.maximum(self.hi - self.lo, 0), axis=1) * self.itemsize
        return need if self.present is None else np.where(self.present, need, 0)

    def placed(self, physical: np.ndarray, span: int) -> "Boxes":
        """The same boxes indexed by physical core (``physical[i]`` is numbered core ``i``'s),
        over cores ``0 .. span - 1``; cores outside the plan need nothing."""
        physical = np.asarray(physical, np.int64)
        if physical.size == span and np.array_equal(physical, np.arange(span)):
            return self
        D = self.lo.shape[1]
        lo = np.zeros((span, D), np.int64)
        hi = np.zeros((span, D), np.int64)
        lo[physical], hi[physical] = self.lo, self.hi
        present = np.zeros(span, bool)
        present[physical] = True if self.present is None else self.present
        return Boxes(lo, hi, self.shape, self.itemsize, present)

    def unique_bytes_per_chip(self, chip_of_core: np.ndarray, num_chips: int) -> np.ndarray:
        """Bytes of distinct boxes needed on each chip: what an off-chip source must send once.

        Replicas of a box (cores sharing a sub-tensor, T10 §4.2) count once per chip; boxes
        that overlap without being equal (convolution halos) are counted in full, a small
        over-estimate.
        """
        chip = chip_of_core[: self.num_cores]
        need = self.nbytes
        keep = need > 0
        rows = np.concatenate([chip[:, None], self.lo, self.hi], axis=1)[keep]
        if rows.size == 0:
            return np.zeros(num_chips)
        uniq, first = np.unique(rows, axis=0, return_index=True)
        return np.bincount(uniq[:, 0], weights=need[keep][first].astype(np.float64), minlength=num_chips)


def input_boxes(layout: OpLayout, t: int) -> Boxes:
    """The box of input ``t`` each core of ``layout`` holds at its first step.

    For a gathered input (:class:`~runtime_sim.contract.program.Gather`) the box is in the gathered
    view: its bytes are the table rows the core receives, whatever the ids (an off-chip
    source reads only those rows, not the whole table); :func:`gather_relayout` says where
    they come from on chip."""
    access = layout.expr.tensors[t]
    shape = tuple(int(s) for s in layout.expr.access_shape(t))
    n = layout.num_cores
    starts = layout.partition_start(t, layout.partition(t, layout.chunk({})))
    pshape = layout.partition_shape(t)
    if not shape:
        empty = np.zeros((n, 0), np.int64)
        return Boxes(empty, empty, shape, dtype_bytes(access.dtype))
    start = np.stack([np.broadcast_to(np.asarray(s, np.int64), (n,)) for s in starts], axis=1)
    length = np.asarray(pshape, np.int64)[None, :]
    limit = np.asarray(shape, np.int64)[None, :]
    lo = np.clip(start, 0, limit)
    hi = np.clip(start + length, 0, limit)
    return Boxes(lo, np.maximum(hi, lo), shape, dtype_bytes(access.dtype))


@dataclass(frozen=True)
class Flows:
    """Point-to-point transfers (``src[i] -> dst[i]``, ``nbytes[i]`` bytes).

    ``sample_weight`` > 1 when only a stride sample of the destinations is listed.
    ``multicast[i]`` numbers the bytes a flow carries (equal: same bytes, same source).
    """

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    sample_weight: float = 1.0
    multicast: np.ndarray | None = None


@dataclass(frozen=True)
class Relayout:
    """A re-layout, aggregated: consumer cores with equal boxes (replicas) share their pairs.

    ``pair_*`` list, per distinct consumer box ``u``, the (owner block, bytes) overlaps;
    ``recv_bytes`` is exact per core (its box minus what it owns itself); pieces are the
    distinct (owner, overlap box) data, each with its receivers per chip.
    """

    num_cores: int
    box_of_core: np.ndarray  # [cores] distinct-box index, -1 when the core needs nothing
    pair_box: np.ndarray
    pair_src: np.ndarray
    pair_bytes: np.ndarray
    pair_piece: np.ndarray
    piece_src: np.ndarray
    piece_bytes: np.ndarray
    piece_receivers: np.ndarray  # [pieces, chips]: receivers other than the owner itself
    recv_bytes: np.ndarray  # [cores]
    local_bytes: float
    box_weight: float  # > 1 when the distinct boxes were sampled (pair lists of a sample)

    @property
    def moved_bytes(self) -> float:
        return float(self.recv_bytes.sum())

    def inter_chip_bytes(self, cores_per_chip: int) -> float:
        """Bytes that cross chips: every piece once per chip, other than its owner's, whose
        cores receive it (the multicast a chip-to-chip link carries once)."""
        foreign = self.piece_receivers > 0
        live = np.flatnonzero(self.piece_src >= 0)
        foreign[live, self.piece_src[live] // cores_per_chip] = False
        return float((self.piece_bytes * foreign.sum(axis=1)).sum()) * self.box_weight

    def flows(self, max_pairs: int = MAX_PAIRS) -> Flows:
        """Explicit per-destination flows (a stride sample of destinations beyond ``max_pairs``)."""
        cores = np.flatnonzero(self.box_of_core >= 0)
        order = np.argsort(self.pair_box, kind="stable")
        n_boxes = int(self.box_of_core.max()) + 1 if cores.size else 0
        per_box = np.bincount(self.pair_box, minlength=n_boxes)
        first = np.cumsum(per_box) - per_box
        count = per_box[self.box_of_core[cores]] if cores.size else np.zeros(0, np.int64)
        weight = self.box_weight
        total = int(count.sum())
        if total > max_pairs:
            stride = math.ceil(total / max_pairs)
            pick = np.arange(0, cores.size, stride)
            weight *= cores.size / pick.size
            cores, count = cores[pick], count[pick]
            total = int(count.sum())
        row = np.repeat(np.arange(cores.size), count)
        offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        pair = order[first[self.box_of_core[cores]][row] + offs]
        dst = cores[row]
        src = self.pair_src[pair]
        keep = src != dst
        return Flows(src[keep], dst[keep], self.pair_bytes[pair][keep], weight,
                     self.pair_piece[pair][keep])


def _distinct_boxes(boxes: Boxes, cores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(box_of_core, lo, hi)``: the distinct boxes of ``cores`` (replicas of a sub-tensor
    need the same bytes) and, per core, the index of its box (-1 for the other cores)."""
    box_of_core = np.full(boxes.num_cores, -1, np.int64)
    D = len(boxes.shape)
    cols = [boxes.lo[cores, d] for d in range(D)] + [boxes.hi[cores, d] for d in range(D)]
    keys = _row_ids(cols, [s + 1 for s in boxes.shape] * 2) if D else np.zeros(cores.size, np.int64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    box_of_core[cores] = inverse.reshape(-1)
    return box_of_core, boxes.lo[cores[first]], boxes.hi[cores[first]]


def relayout(grid: BlockGrid, boxes: Boxes, chip_of_core: np.ndarray, num_chips: int,
             max_pairs: int = MAX_PAIRS) -> Relayout:
    """Who sends what to whom so that every consumer core holds its box (see module doc)."""
    n = boxes.num_cores
    need = boxes.nbytes.astype(np.float64)
    cores = np.flatnonzero(need > 0)
    chip = chip_of_core[:n]
    D = len(boxes.shape)
    box_of_core, lo, hi = _distinct_boxes(boxes, cores)
    U = len(lo)
    block = np.asarray(grid.block, np.int64)

    # what each core already holds: the overlap of its box with the block it owns
    own = np.zeros(n)
    valid = np.flatnonzero(grid.owner >= 0)
    owner_cores = grid.owner[valid]
    mine = owner_cores < n
    block_of = np.full(n, -1, np.int64)
    block_of[owner_cores[mine]] = valid[mine]
    holders = np.flatnonzero((block_of >= 0) & (need > 0))
    if holders.size:
        ks = np.unravel_index(block_of[holders], grid.counts) if D else ()
        ov = np.ones(holders.size)
        for d in range(D):
            start = np.maximum(boxes.lo[holders, d], ks[d] * block[d])
            stop = np.minimum(boxes.hi[holders, d], (ks[d] + 1) * block[d])
            ov *= np.maximum(stop - start, 0)
        own[holders] = ov * boxes.itemsize
    recv = need - own

    # pairs (distinct box, owner block) with their overlap box
    weight = 1.0
    if D:
        klo, khi = lo // block, (hi - 1) // block
        width = khi - klo + 1
        count = np.prod(width, axis=1)
        boxes_kept = np.arange(U)
        if int(count.sum()) > max_pairs:  # a stride sample of the distinct boxes
            stride = math.ceil(int(count.sum()) / max_pairs)
            boxes_kept = np.arange(0, U, stride)
            weight = U / boxes_kept.size
        cnt = count[boxes_kept]
        total = int(cnt.sum())
        row = np.repeat(boxes_kept, cnt)
        offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        nbytes = np.full(total, float(boxes.itemsize))
        ks, piece_cols = [None] * D, []
        for d in range(D - 1, -1, -1):
            w = width[row, d]
            k = klo[row, d] + offs % w
            offs //= w
            start = np.maximum(lo[row, d], k * block[d])
            stop = np.minimum(hi[row, d], (k + 1) * block[d])
            nbytes *= stop - start
            ks[d] = k
            piece_cols += [start, stop]
        src = grid.owner[np.ravel_multi_index(tuple(ks), grid.counts)]
        radices = [int(grid.owner.max()) + 1] + [s + 1 for s in boxes.shape for _ in (0, 1)]
        piece_key = _row_ids([src] + piece_cols, radices)
    else:
        row = np.zeros(min(U, 1), np.int64)
        src = grid.owner[:1].repeat(row.size)
        nbytes = np.full(row.size, float(boxes.itemsize))
        piece_key = src.copy()
    _, piece_first, pair_piece = np.unique(piece_key, return_index=True, return_inverse=True)
    pair_piece = pair_piece.reshape(-1)

    # receivers of each pair per chip: the cores with that box, but not the owner itself
    per_box_chip = np.bincount(box_of_core[cores] * num_chips + chip[cores],
                               minlength=U * num_chips).reshape(U, num_chips).astype(np.float64)
    receivers = per_box_chip[row]
    src_in = src < n
    self_rx = np.zeros(row.size, bool)
    self_rx[src_in] = box_of_core[src[src_in]] == row[src_in]
    if self_rx.any():
        receivers[np.flatnonzero(self_rx), chip[src[self_rx]]] -= 1
    piece_rx = np.stack([np.bincount(pair_piece, weights=receivers[:, k], minlength=piece_first.size)
                         for k in range(num_chips)], axis=1)
    return Relayout(
        num_cores=n, box_of_core=box_of_core, pair_box=row, pair_src=src, pair_bytes=nbytes,
        pair_piece=pair_piece, piece_src=src[piece_first], piece_bytes=nbytes[piece_first],
        piece_receivers=piece_rx, recv_bytes=recv, local_bytes=float(own.sum()),
        box_weight=weight,
    )


def relayout_flows(grid: BlockGrid, boxes: Boxes, max_pairs: int = MAX_PAIRS) -> Flows:
    """Explicit per-destination transfers of a re-layout onto one chip's worth of cores."""
    chips = np.zeros(boxes.num_cores, np.int64)
    return relayout(grid, boxes, chips, 1, max_pairs).flows(max_pairs)


# -- gathered inputs (embedding lookups): rows picked by data -----------------------------------
def rests_spread(expr: TensorExpr, t: int) -> bool:
    """Whether resident input ``t`` of ``expr`` idles spread over all cores whatever the
    operator's idle plan: a gathered table (its plan holds rows picked by this call's ids,
    not the table)."""
    return t < len(expr.inputs) and expr.inputs[t].gather is not None


def gather_relayout(grid: BlockGrid, boxes: Boxes, axis: int, chip_of_core: np.ndarray,
                    num_chips: int, rows: np.ndarray | None = None) -> Relayout:
    """Who sends which table rows to whom so that every core holds its block of a gathered
    view (:class:`~runtime_sim.contract.program.Gather`): the data movement of an embedding lookup.

    ``grid`` is where the table sits (its own shape), ``boxes`` the view boxes of the
    consumer cores (:func:`input_boxes` placed on physical cores), ``axis`` the gathered
    dimension of the table. A core whose box covers ids positions ``P`` and the ranges ``W``
    of the other dimensions receives, for every position ``p`` in ``P``, row ``rows[p]`` over
    ``W`` from the cores owning those blocks; the part it owns itself does not move. Every
    position is counted (a row read twice by one core travels twice: no deduplication).

    ``rows`` (the ids resolved by :func:`~runtime_sim.contract.program.gather_rows`, shaped like the
    ids) makes the count exact: the functional device passes the ids of the call. Without
    them (timing only: ids are data), each position is a uniformly random row of the table,
    and every count is its expectation: a row block ``k`` of ``b_k`` rows out of ``n`` sends
    ``|P| * b_k / n`` rows' worth of bytes to every core. The two agree exactly when each
    core's ids fall evenly on the table's row blocks.
    """
    n = boxes.num_cores
    D = len(grid.shape)
    k = len(boxes.shape) - D + 1  # ids dimensions standing for the gathered one
    need = boxes.nbytes.astype(np.float64)
    cores = np.flatnonzero(need > 0)
    chip = chip_of_core[:n]
    V = len(boxes.shape)
    box_of_core, lo, hi = _distinct_boxes(boxes, cores)
    U = len(lo)
    block = np.asarray(grid.block, np.int64)
    n_rows = int(grid.shape[axis])
    kb = int(grid.counts[axis])
    row_block = np.minimum((np.arange(kb) + 1) * block[axis], n_rows) - np.arange(kb) * block[axis]
    # rows per (distinct box, row block of the table): counted from the ids, or expected
    hist = np.zeros((U, kb))
    positions = np.prod(hi[:, axis:axis + k] - lo[:, axis:axis + k], axis=1) if U else np.zeros(0)
    if rows is None:
        hist[:] = positions[:, None] * (np.maximum(row_block, 0) / n_rows)[None, :]
    else:
        rows = np.asarray(rows, np.int64)
        for u in range(U):
            window = rows[tuple(slice(int(a), int(b)) for a, b in
                                zip(lo[u, axis:axis + k], hi[u, axis:axis + k]))]
            hist[u] = np.bincount(window.reshape(-1) // block[axis], minlength=kb)[:kb]
    # the other dimensions: the view box's ranges against the table's blocks
    other = [d for d in range(D) if d != axis]
    view_dim = {d: (d if d < axis else d + k - 1) for d in other}
    u_idx, b_idx = np.nonzero(hist)
    weight = hist[u_idx, b_idx]
    ks = {axis: b_idx}
    elems = np.ones(u_idx.size)
    for d in other:
        v = view_dim[d]
        klo, khi = lo[u_idx, v] // block[d], (hi[u_idx, v] - 1) // block[d]
        width = khi - klo + 1
        rep = np.repeat(np.arange(u_idx.size), width)
        offs = np.arange(rep.size) - np.repeat(np.cumsum(width) - width, width)
        kd = klo[rep] + offs
        start = np.maximum(lo[u_idx[rep], v], kd * block[d])
        stop = np.minimum(hi[u_idx[rep], v], (kd + 1) * block[d])
        u_idx, b_idx, weight = u_idx[rep], b_idx[rep], weight[rep]
        elems = elems[rep] * (stop - start)
        ks = {a: arr[rep] for a, arr in ks.items()}
        ks[d] = kd
    src = grid.owner[np.ravel_multi_index(tuple(ks[d] for d in range(D)), grid.counts)] \
        if D else grid.owner[:1].repeat(u_idx.size)
    nbytes = weight * elems * boxes.itemsize
    # one pair per (distinct box, source core): the rows that core sends to those boxes
    key = u_idx * (int(grid.owner.max()) + 2) + (src + 1)
    uniq, first_p, inv = np.unique(key, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    pair_box, pair_src = u_idx[first_p], src[first_p]
    pair_bytes = np.bincount(inv, weights=nbytes, minlength=uniq.size)
    # what a core holds itself: the rows of its own box that it owns
    own = np.zeros(n)
    src_in = (pair_src >= 0) & (pair_src < n)
    self_pair = np.zeros(pair_src.size, bool)
    self_pair[src_in] = box_of_core[pair_src[src_in]] == pair_box[src_in]
    np.add.at(own, pair_src[self_pair], pair_bytes[self_pair])
    per_box_chip = np.bincount(box_of_core[cores] * num_chips + chip[cores],
                               minlength=U * num_chips).reshape(U, num_chips).astype(np.float64)
    receivers = per_box_chip[pair_box]
    if self_pair.any():
        receivers[np.flatnonzero(self_pair), chip[pair_src[self_pair]]] -= 1
    return Relayout(
        num_cores=n, box_of_core=box_of_core, pair_box=pair_box, pair_src=pair_src,
        pair_bytes=pair_bytes, pair_piece=np.arange(pair_box.size), piece_src=pair_src,
        piece_bytes=pair_bytes, piece_receivers=receivers, recv_bytes=need - own,
        local_bytes=float(own.sum()), box_weight=1.0,
    )


def input_relayout(grid: BlockGrid, layout: OpLayout, t: int, chip_of_core: np.ndarray,
                   num_chips: int, rows: np.ndarray | None = None,
                   boxes: Boxes | None = None) -> Relayout:
    """The re-layout that brings input ``t`` of ``layout`` from ``grid`` onto its cores: box
    overlaps (:func:`relayout`), or for a gathered input the rows its ids pick
    (:func:`gather_relayout`, exact with ``rows``, else the uniform estimate). ``boxes``: the
    input's :func:`input_boxes` on physical cores, when the caller has them."""
    if boxes is None:
        boxes = input_boxes(layout, t).placed(layout.physical, layout.span)
    g = layout.expr.tensors[t].gather if t < len(layout.expr.inputs) else None
    if g is None:
        return relayout(grid, boxes, chip_of_core, num_chips)
    return gather_relayout(grid, boxes, g.axis, chip_of_core, num_chips, rows)


def _row_ids(columns: list[np.ndarray], radices: list[int]) -> np.ndarray:
    """Equal ids for equal rows of ``columns`` (values below ``radices``).

    The row is read as a mixed-radix number; when that would overflow int64 the partial key
    is first renumbered densely (``np.unique``), which keeps it exact.
    """
    if not columns or columns[0].size == 0:
        return np.zeros(0, np.int64)
    key = np.zeros(columns[0].size, np.int64)
    span = 1  # key < span
    for col, radix in zip(columns, radices):
        if span * radix >= 2 ** 62:
            uniq, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1).astype(np.int64)
            span = max(int(uniq.size), 1)
        key = key * radix + col
        span *= radix
    return key
