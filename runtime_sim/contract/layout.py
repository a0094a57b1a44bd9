"""What an execution plan means on the cores: placement, rotation and chunk schedule.

This is the semantics of :class:`runtime_sim.contract.plan.ExecutionPlan`, shared by the compiler
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
  shift within the ring. :meth:`OpLayout.validate` checks these invariants for every core
  (:mod:`runtime_sim.contract.layout_checks`).
* Every loop wraps around at its end (the final wrap included), so every tensor is back in its
  initial placement after the last step. Output replicas of different rings are then summed
  into ring 0 (the partial sums of a split reduction axis).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator, Mapping

import numpy as np

from runtime_sim.contract.core_layout import CoreLayout, ring_counts, temporal_steps
from runtime_sim.contract.errors import DeviceProgramError, InvalidPlanError, short_name
from runtime_sim.contract.expr import (
    AffineIndex,
    TensorExpr,
    dtype_bytes,
)
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout_checks import check_layout
from runtime_sim.contract.plan import ExecutionPlan, VgmPlan
from runtime_sim.contract.plan_rules import (
    STAT_BYTES,
    attention_scratch_bytes,
    attention_state_bytes,
    local_splits,
    padded_extent,
    reduce_key,
    split_reductions,
)
from runtime_sim.contract.program import OpProgram


def cost_key(expr: TensorExpr, plan: ExecutionPlan) -> str:
    """What an operator's layout, and so every cost of it, depends on: its expression's
    structure and its plan, not its tensors' names (the same layer repeated in a model is
    costed once)."""
    return json.dumps([expr.structure_key(), plan.to_dict()], sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class ShiftEvent:
    """Tensor ``tensor`` moves along axis ``axis``: core ``c`` receives from ``source[c]``."""

    tensor: int
    axis: str
    source: np.ndarray  # core -> core it receives from (itself where nothing moves)
    moving: np.ndarray  # boolean mask of cores that receive a new partition


class OpLayout:
    """The placement and step schedule of one operator under one execution plan.

    Parameters
    ----------
    expr : TensorExpr
        The operator's tensor expression.
    plan : ExecutionPlan
        Its compute-shift plan.
    cores_per_chip : int, optional
        Cores per chip, needed to place a plan spread over several chips.

    Attributes
    ----------
    F : dict of str to int
        F_op per axis: sub-operators along it.
    S : dict of str to int
        Temporal steps along each axis (the largest f_t of any tensor on it).
    xp : dict of str to int
        The padded length of each sub-operator along each axis.
    rp : dict of str to int
        The rotating pace: the sub-task length along each axis in one step (``xp / S``).
    loop_axes : tuple of str
        The axes that take steps, outermost loop first.
    steps : int
        Compute-shift steps: the product of ``S`` over the loop axes.
    num_cores : int
        Cores the plan uses: the product of F_op.

    Raises
    ------
    InvalidPlanError
        The plan names unknown axes, has an F_op out of range, or a loop or core order that
        does not match the axes (:meth:`validate` checks the rest of T10's rules).
    """

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
        #: f_t of each tensor on each axis (1 where the plan gives none), read once: the ring,
        #: partition and shift rules below ask for them per tensor and axis many times (the
        #: plan space's ring check builds a layout per candidate plan)
        self.ft_table: tuple[dict[str, int], ...] = tuple(
            {a: plan.ft(t, a) for a in self.axes} for t in range(len(expr.tensors)))
        #: f_t as a (T, A) array: S and the per-core layout (:attr:`cores`) read it
        self._ft = np.array([[ft[a] for a in self.axes] for ft in self.ft_table],
                            np.int64).reshape(len(expr.tensors), len(self.axes))
        self.S = dict(zip(self.axes, temporal_steps(self._ft).tolist()))
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
    def cores(self) -> CoreLayout:
        """The per-core layout of this plan: grid, rings, skew, partitions (T10 §4.2)."""
        return CoreLayout(self._own_mask, [[self.F[a] for a in self.axes]], self._ft[None],
                          [self.axes.index(a) for a in self.core_order] if self.plan.core_order else None)

    @property
    def _own_mask(self) -> np.ndarray:
        """(T, A): whether each tensor is indexed by each axis."""
        return np.array([[a in o for a in self.axes] for o in self._own], bool).reshape(self._ft.shape)

    @cached_property
    def _own(self) -> tuple[tuple[str, ...], ...]:
        """The top-level axes that index each tensor (:meth:`tensor_axes`)."""
        return tuple(tuple(a for a in access.axes if a in self.extent) for access in self.expr.tensors)

    @cached_property
    def grid(self) -> dict[str, np.ndarray]:
        """``g[a](c)``: the sub-operator index of core ``c`` on axis ``a``.

        Cores are numbered row-major over the axes in :attr:`core_order` (the plan's
        ``core_order``, else the expression's axis order), outermost first. This is the one
        mapping of sub-operators to physical cores: everything that names a core (rings,
        shift sources, owners, placement grids) derives from it, for the functional device
        and the timing simulator alike (:attr:`CoreLayout.grid`).
        """
        return dict(zip(self.axes, self.cores.grid))

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
        return self._per_tensor[t][0]

    def temporal_axes(self, t: int) -> tuple[str, ...]:
        return self._per_tensor[t][1]

    def sharing(self, t: int) -> int:
        """P_T: how many cores share one sub-tensor of tensor ``t``."""
        return self._per_tensor[t][2]

    def ring_size(self, t: int) -> int:
        """R_T = prod f_t: partitions per sub-tensor, i.e. cores per rotation ring."""
        return self._per_tensor[t][3]

    @cached_property
    def _per_tensor(self) -> tuple[tuple[tuple[str, ...], tuple[str, ...], int, int], ...]:
        """(own axes, temporal axes, P_T, R_T) of each tensor, computed once per layout (they
        are asked for per core group, ring and shift; the layout does not change)."""
        out = []
        F = np.array([[self.F[a] for a in self.axes]], np.int64)
        sharing, rings = (counts[0].tolist() for counts in ring_counts(self._own_mask, F, self._ft[None]))
        for t, own in enumerate(self._own):
            ft = self.ft_table[t]
            out.append((own, tuple(a for a in self.axes if ft[a] > 1), sharing[t], rings[t]))
        return tuple(out)

    def replicas(self, t: int) -> int:
        """Rotation rings of tensor ``t``: copies of each sub-tensor (``P_T / R_T``)."""
        return self.sharing(t) // self.ring_size(t)

    def ring_id(self, t: int) -> np.ndarray:
        """Each core's rotation ring of tensor ``t`` (:attr:`CoreLayout.ring`)."""
        return self.cores.ring[t]

    def subtensor_id(self, t: int) -> np.ndarray:
        """Which sub-tensor of tensor ``t`` each core holds (:attr:`CoreLayout.subtensor`)."""
        return self.cores.subtensor[t]

    @cached_property
    def offset(self) -> dict[str, np.ndarray]:
        """``off_a(c)``: the Cannon-style skew of each core's chunk schedule
        (:attr:`CoreLayout.offset`)."""
        return dict(zip(self.axes, self.cores.offset))

    # -- chunks and partitions ----------------------------------------------------------
    def chunk(self, counters: Mapping[str, int]) -> dict[str, np.ndarray]:
        """``q_a`` of every core for loop counters ``s`` (axes without steps are 0)."""
        return {a: (int(counters.get(a, 0)) + self.offset[a]) % self.S[a] for a in self.axes}

    def partition(self, t: int, q: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``p_a`` of the partition of tensor ``t`` held by each core while at chunk ``q``
        (:meth:`CoreLayout.partition`)."""
        return {a: self.cores.partition(t, q[a], self.axes.index(a)) for a in self.temporal_axes(t)}

    def partition_shape(self, t: int) -> tuple[int, ...]:
        """Shape of one partition of tensor ``t`` (what a core stores)."""
        access = self.expr.tensors[t]
        return tuple(self._dim_length(t, d, idx) for d, idx in enumerate(access.indices))

    def _dim_length(self, t: int, d: int, idx: AffineIndex) -> int:
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
        """Bytes of one partition of tensor ``t`` (what a core stores of it)."""
        access = self.expr.tensors[t]
        return int(np.prod(self.partition_shape(t), dtype=np.int64)) * dtype_bytes(access.dtype)

    def memory_bytes_per_core(self) -> int:
        """Bytes of tensor partitions on each core (every core holds one of each tensor), and
        of an attention operator's online-softmax state and score scratch
        (:meth:`extra_bytes_per_core`)."""
        return sum(self.partition_bytes(t) for t in range(len(self.expr.tensors))) \
            + self.extra_bytes_per_core()

    def extra_bytes_per_core(self) -> int:
        """SRAM per core beyond the partitions: for an attention operator its state beside
        the output partition (:func:`attention_state_bytes`) and one step's scores
        (:func:`attention_scratch_bytes`); 0 for other kinds."""
        if self.expr.kind != "attention":
            return 0
        return int(attention_state_bytes(self.expr, self.xp) + attention_scratch_bytes(self.expr, self.rp))

    def replica_bytes(self) -> int:
        """Bytes one output replica sends when replicas are combined into ring 0: its output
        partition, and for an attention operator its running max and sum per row."""
        out = len(self.expr.tensors) - 1
        state = attention_state_bytes(self.expr, self.xp) if self.expr.kind == "attention" else 0
        return self.partition_bytes(out) + state

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
            radices = [self.ft_table[t][a] for a in temporal]
            group = self.ring_group_key(t)
            for a in temporal:
                ahead = dict(p0)
                ahead[a] = (p0[a] + 1) % self.ft_table[t][a]
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

    def ring_group_key(self, t: int) -> np.ndarray:
        """A number identifying (sub-tensor, ring) of tensor ``t`` on every core
        (:meth:`CoreLayout.group_key`)."""
        return self.cores.group_key(t)

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
        """Bytes sent to sum output replicas into ring 0 after the last step by a gather tree
        or a chain (``R - 1`` partitions per output partition), plus those that combine the
        partial statistics of split core-local reductions (:meth:`combine_bytes`). A
        reduce-scatter + gather sends its pieces and then the gathered sums instead; the
        executors count the schedule they run
        (:func:`runtime_sim.machine.op_transfers.replica_reduction`)."""
        out = len(self.expr.tensors) - 1
        replica = self.num_cores // self.replicas(out) * (self.replicas(out) - 1) * self.replica_bytes()
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
        equal ids are replicas of one partition (T10 §4.2; :meth:`CoreLayout.partition_key`)."""
        return self.cores.partition_key(t)

    # -- validity -----------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`InvalidPlanError` unless the plan obeys every T10 rule (§4.2)
        (:func:`runtime_sim.contract.layout_checks.check_layout`)."""
        check_layout(self)


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
