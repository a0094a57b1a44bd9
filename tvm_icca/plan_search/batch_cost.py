"""Plan costs on arrays of candidates: the analytic model of :mod:`.cost`, vectorized.

The search scores millions of candidates, far too many to build an :class:`OpLayout` for
each; :class:`AnalyticBatchModel` computes exactly what :class:`AnalyticCostModel` computes
from a layout (compute, synchronization, shifts, final reduction, epilogue: T10 §4.3.1's cost
structure), for whole :class:`PlanBatch` es at once, with the best loop order of every plan.

Best loop order (T10 §4.4 orders loops by tensor size; we solve it exactly): with ``w_a``
the time of one round of shifts on axis ``a`` and ``S_a`` its steps, an order costs
``sum_a w_a * prod(S of loops outside a)``. In one round every tensor rotating on ``a`` costs
``S_a`` partition shifts, not its own ``f_t``: the Cannon skew (:mod:`runtime_sim.contract.layout`)
staggers the cores of a tensor rotating slower than the axis steps (``f_t < S_a``) by the
digits of the fastest one, so at every step some core receives a partition of every rotating
tensor, and a bulk-synchronous step lasts as long as its busiest core's shifts (T10 §5; the
timing simulator's shift phases). Costing ``f_t`` shifts made a Llama2-70B o_proj plan that
rotates its weight twice and its input 28 times look 6x cheaper than the device runs it.
Swapping two adjacent loops ``a``, ``b`` changes the cost by the sign of
``w_a (S_b - 1) - w_b (S_a - 1)``, so sorting axes by ``w / (S - 1)``, largest outermost, is
optimal (an exchange argument, as for Smith's rule).

A model also gives lower bounds per ``F_op`` row that hold for every plan with that row:
the branch-and-bound search (:mod:`.search`) prunes with them, so they must never exceed a
real plan's time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan_rules import STAT_BYTES, local_splits
from runtime_sim.machine.links import (
    chunk_latency_seconds,
    hop_latency_seconds,
    link_transfer_seconds,
    replica_reduction_seconds,
    split_combine_seconds,
    transfer_chunks,
)
from schedules import template_for
from schedules.attention import AttentionTemplate
from schedules.attention import role_sizes as attention_role_sizes
from schedules.attention import step_cycles as attention_step_cycles
from schedules.base import (
    ComputeTemplate,
    MatrixTemplate,
    arithmetic_nodes,
    contraction_roles,
    matrix_flops_per_cycle,
)
from tvm_icca.plan_search.bounds import (
    partition_lower_bounds,
    step_partition_lower_bounds,
    subtensor_lower_bounds,
)
from tvm_icca.plan_search.intmath import INT, ceil_div, unique_rows
from tvm_icca.plan_search.plan_space import PlanBatch, loop_order_row, sharing_counts
from tvm_icca.plan_search.rotation_cover import least_rotation_bytes
from tvm_icca.plan_search.structure import PlanStructure, build_structure


class BatchCostModel(Protocol):
    """A cost model the exact search can use (vectorized over candidate plans)."""

    def times(self, batch: PlanBatch) -> tuple[np.ndarray, np.ndarray]:
        """Time in seconds of every plan under its best loop order, and that order.

        The order is ``(N, A)`` axis indices, outermost first; axes without steps may be
        anywhere (they are dropped from the plan).
        """
        ...

    def time_lower_bound(self, structure: PlanStructure, F: np.ndarray) -> np.ndarray:
        """For each F_op row, a time no plan with that row beats."""
        ...

    def rotating_lower_bound(self, structure: PlanStructure, F: np.ndarray,
                             budget: float = math.inf) -> np.ndarray:
        """Like :meth:`time_lower_bound`, for the row's plans that rotate something and fit
        ``budget`` bytes per core (inf where none can)."""
        ...


def best_loop_order(S: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact minimum of ``sum_a w_a * prod(S outside a)`` over loop orders, per row.

    Returns ``(order, cost)``; ``order`` lists axis indices outermost first.
    """
    stepping = S > 1
    key = np.where(stepping, w / np.maximum(S - 1, 1), -np.inf)
    order = np.argsort(-key, axis=1, kind="stable")
    return order, loop_order_cost(S, w, order)


def loop_order_cost(S: np.ndarray, w: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``sum_a w_a * prod(S outside a)`` per row for the given orders (outermost first)."""
    S_sorted = np.take_along_axis(S, order, axis=1).astype(float)
    w_sorted = np.take_along_axis(w, order, axis=1)
    outer = np.cumprod(np.concatenate([np.ones((len(S), 1)), S_sorted[:, :-1]], axis=1), axis=1)
    return (w_sorted * outer).sum(axis=1)


def _overrides(template: object, name: str, base: type) -> bool:
    return getattr(type(template), name) is not getattr(base, name)


class TemplateCycles:
    """Per-step cycles of an op's template for arrays of chunk shapes.

    The matrix and vector formulas of :mod:`schedules.base` are evaluated on arrays; a
    template that overrides them is called once per distinct chunk shape instead (exact
    either way).
    """

    def __init__(self, structure: PlanStructure, hw: HardwareSpec):
        self.structure = structure
        self.hw = hw
        expr = structure.expr
        self.template = template_for(expr.kind)
        t = self.template
        if isinstance(t, AttentionTemplate):
            self.kind = "attention"  # its closed form on arrays (schedules.attention.step_cycles)
        elif isinstance(t, MatrixTemplate) and not _overrides(t, "subtask_cycles", MatrixTemplate):
            self.kind = "matrix"
            roles = contraction_roles(expr)
            idx = {a: i for i, a in enumerate(structure.axes)}
            self.roles = [[idx[a] for a in axes] for axes in (roles.batch, roles.m, roles.k, roles.n)]
            self.matrix_rate = matrix_flops_per_cycle(expr, hw)  # the operands' dtype's rate
        elif not _overrides(t, "subtask_cycles", ComputeTemplate):
            self.kind = "vector"
        else:
            self.kind = "custom"
        idx = {a: i for i, a in enumerate(structure.axes)}
        follow = local_splits(expr)
        # a core-local axis that follows a split row is as long as the row's chunk
        self.local_fixed = math.prod(a.extent for a in expr.local_axes if a.name not in follow)
        self.local_rows = [idx[follow[a.name]] for a in expr.local_axes if a.name in follow]
        self.body_ops = max(arithmetic_nodes(expr.body), 1)
        self.epilogue_ops = arithmetic_nodes(expr.epilogue)
        self.custom_epilogue = _overrides(t, "epilogue_cycles", ComputeTemplate)
        self.non_reduce = np.array([not a.reduce for a in expr.axes], bool)

    @property
    def bounded(self) -> bool:
        """Whether :meth:`subtask` of the unpadded sub-operator bounds all its step sums.

        Attention's does: only its keys step, each step pays its per-row and per-output
        terms at least once and its per-key terms over ``S`` blocks of at least ``ceil(E /
        F)`` keys in all (a tile-padded block count only grows when cut in pieces)."""
        return self.kind != "custom"

    def subtask(self, chunk: np.ndarray) -> np.ndarray:
        """Cycles of one step over chunks ``(N, A)`` (axis lengths)."""
        hw = self.hw
        if self.kind == "matrix":
            b, m, k, n = (np.prod(chunk[:, r], axis=1).astype(float) for r in self.roles)
            tm, tk, tn = hw.matrix_tile
            macs = b * (ceil_div(m, tm) * tm) * (ceil_div(k, tk) * tk) * (ceil_div(n, tn) * tn)
            return 2 * macs / self.matrix_rate
        if self.kind == "attention":
            length = {a: chunk[:, i].astype(np.int64) for i, a in enumerate(self.structure.axes)}
            expr = self.structure.expr
            return np.asarray(attention_step_cycles(expr, attention_role_sizes(expr, length), hw), float) \
                * np.ones(len(chunk))
        if self.kind == "vector":
            points = np.prod(chunk.astype(float), axis=1) * self.local_fixed
            for a in self.local_rows:
                points = points * chunk[:, a]
            return points * self.body_ops / hw.vector_flops_per_cycle
        return self._per_unique(chunk, lambda c: self.template.subtask_cycles(self.structure.expr, c, hw))

    def epilogue(self, partition: np.ndarray) -> np.ndarray:
        """Cycles of the fused epilogue over output partitions ``(N, A)``."""
        hw = self.hw
        if self.custom_epilogue:
            return self._per_unique(
                partition, lambda c: self.template.epilogue_cycles(self.structure.expr, c, hw))
        if not self.epilogue_ops:
            return np.zeros(len(partition))
        n = np.prod(np.where(self.non_reduce[None, :], partition, 1).astype(float), axis=1)
        return n * self.epilogue_ops / hw.vector_flops_per_cycle

    def _per_unique(self, chunk: np.ndarray, fn) -> np.ndarray:
        uniq, inv, _ = unique_rows(chunk)
        axes = self.structure.axes
        vals = np.array([fn({a: int(v) for a, v in zip(axes, row)}) for row in uniq], float)
        return vals[inv]


def rotation_shift_bound(structure: PlanStructure, F: np.ndarray, seconds_per_byte: float,
                         budget: float = math.inf, hw: HardwareSpec | None = None,
                         stay: np.ndarray | None = None,
                         rotated: np.ndarray | None = None) -> np.ndarray:
    """Least shift time of any plan of each F_op row that rotates something (inf: none fits).

    A tensor with ``R = prod f_t > 1`` partitions shifts at least ``R`` times on its
    innermost rotating loop (the loops outside it step at least ``f_t`` times each), so every
    core receives at least ``R`` partitions: its whole sub-tensor. The cheapest set of
    rotating tensors whose rotation can bring the footprint within ``budget`` (the others
    whole, the rotating ones split as far as their sharing allows) bounds the shift time:
    :func:`.rotation_cover.least_rotation_bytes`, exact for few rotatable tensors and
    polynomial in the number of tensors (a relaxation) beyond.

    ``hw``: the shifts also pay their chunks' hop latency (:func:`runtime_sim.machine.links.
    link_transfer_seconds`, the analytic model's shift time): ``R >= 2`` shifts of one chunk
    at least, and at least ``ceil(sub-tensor / shift buffer)`` chunks in all. ``stay`` and
    ``rotated`` ((N, T) seconds, ``rotated >= 0``, ``stay`` at most a tensor's sub-tensor
    bytes times ``seconds_per_byte``): what the model charges a tensor besides its shifts
    when it does not rotate and when it does (:class:`ArrivalCostModel`: an arriving input's
    whole sub-tensor, or one partition); the bound is then of the shifts plus those charges,
    over the same sets, so a set that rotates little pays for what arrives whole.
    """
    whole = subtensor_lower_bounds(structure, F)
    split = partition_lower_bounds(structure, F)
    P = sharing_counts(structure, F)
    can = (P > 1) & structure.rotatable.any(axis=1)[None, :]
    if hw is None and stay is None and rotated is None:
        return least_rotation_bytes(whole, split, can, budget) * seconds_per_byte
    cost = whole * seconds_per_byte
    if hw is not None:
        shifts = np.maximum(2.0, np.asarray(transfer_chunks(whole, hw), float))
        cost = cost + shifts * float(hop_latency_seconds(hw, 1))
    held = np.zeros(len(F))
    if stay is not None:
        cost = cost - stay
        held = stay.sum(axis=1)
    if rotated is not None:
        cost = cost + rotated
    return least_rotation_bytes(whole, split, can, budget, cost) + held


#: How the analytic model costs the replica reduction: ``"ring"``, T10's ``(R - 1) / R`` of
#: an output partition over a link (bandwidth only), or ``"schedule"``, the device's
#: tree, chain or reduce-scatter schedule as the timing simulator runs it (:func:`replica_reduction_array`,
#: every round paying its latency and synchronization; :meth:`AnalyticBatchModel.
#: reduction_lower_bound` keeps the search exact). The search uses the ring term: with the
#: schedule, Llama2-13B's weight matmuls trade their k splits for batch splits whose weight
#: replicas land on two chips and are read twice from HBM, which the plan cost does not see
#: (2 layers: matmuls 7% slower, compile 4x longer); the split combine of core-local
#: reductions is the simulator's schedule either way (:func:`combine_seconds`).
REDUCTION_TERMS = ("ring", "schedule")

#: Relative margin of the shift bound of :meth:`AnalyticBatchModel.step_lower_bound`: the
#: bound's loop order and a plan's may sum in different orders, which rounds differently in
#: the last bits; a bound a millionth low prunes as well and is safe.
SHIFT_BOUND_MARGIN = 1e-6


class AnalyticBatchModel:
    """:class:`.cost.AnalyticCostModel`, vectorized (same terms, same numbers).

    ``reduction`` (:data:`REDUCTION_TERMS`): T10's ring term (default) or the replica
    reduction as the device schedules it.
    """

    def __init__(self, hw: HardwareSpec, reduction: str = "ring"):
        if reduction not in REDUCTION_TERMS:
            raise ValueError(f"reduction must be one of {REDUCTION_TERMS}, not {reduction!r}")
        self.hw = hw
        self.reduction = reduction
        self._cycles: dict[int, TemplateCycles] = {}

    @property
    def bound_key(self) -> tuple:
        """What its bounds read besides the structure and the rows: a search may keep them
        under it (:func:`.search.best_plan`)."""
        return ("analytic", self.hw, self.reduction)

    def cycles(self, structure: PlanStructure) -> TemplateCycles:
        hit = self._cycles.get(id(structure))
        if hit is None or hit.structure is not structure:
            hit = TemplateCycles(structure, self.hw)
            self._cycles[id(structure)] = hit
        return hit

    def times(self, batch: PlanBatch) -> tuple[np.ndarray, np.ndarray]:
        return self.components(batch)[0]

    def components(self, batch: PlanBatch, order: np.ndarray | None = None):
        """((time, order), dict of per-term arrays) for every plan of the batch, under its
        best loop order, or under ``order`` ((N, A) axis indices, outermost first) if given."""
        hw = self.hw
        structure = batch.structure
        cyc = self.cycles(structure)
        S = batch.S
        xp = batch.xp
        rp = xp // S
        steps = np.prod(S, axis=1).astype(float)
        parts = batch.partition_bytes(xp)
        compute = steps * cyc.subtask(rp) / hw.clock_hz
        sync = steps * hw.sync_cycles / hw.clock_hz
        per_shift = link_transfer_seconds(parts, hw)  # (N, T)
        ft = batch.ft
        # every tensor rotating on an axis shifts at each of its steps on some core (module doc)
        w = (np.where(ft > 1, S[:, None, :], 0) * per_shift[:, :, None]).sum(axis=1)  # (N, A)
        if order is None:
            order, shift = best_loop_order(S, w)
        else:
            shift = loop_order_cost(S, w, order)
        out = structure.num_tensors - 1
        replicas = (sharing_counts(structure, batch.F)[:, out] // np.prod(ft[:, out], axis=1)).astype(float)
        # a replica sends its partition, and an attention operator's running max and sum
        sent = parts[:, out] + structure.state_bytes(xp)
        if self.reduction == "ring":
            reduction = (replicas - 1) / replicas * sent / hw.link_bandwidth
        else:
            reduction = replica_reduction_array(replicas, sent, int(structure.elem_bytes[out]), hw)
        reduction = reduction + steps * combine_seconds(structure, batch.F, rp, hw)
        epilogue = cyc.epilogue(xp // ft[:, out]) / hw.clock_hz
        time = compute + sync + shift + reduction + epilogue
        terms = {"compute_s": compute, "sync_s": sync, "shift_s": shift,
                 "reduction_s": reduction, "epilogue_s": epilogue}
        return (time, order), terms

    def layout_terms(self, layout: OpLayout, structure: PlanStructure | None = None) -> dict[str, float]:
        """The terms of one plan (a one-row batch under the layout's own loop order);
        ``structure``: ``layout.expr``'s, if the caller has it."""
        if structure is None or structure.expr is not layout.expr:
            structure = build_structure(layout.expr)
        batch = PlanBatch.of_plan(structure, layout.plan)
        order = loop_order_row(structure, layout.loop_axes)[None, :]
        _, terms = self.components(batch, order)
        return {k: float(v[0]) for k, v in terms.items()}

    def time_lower_bound(self, structure: PlanStructure, F: np.ndarray) -> np.ndarray:
        hw = self.hw
        cyc = self.cycles(structure)
        sync = hw.sync_cycles / hw.clock_hz
        red = self.reduction_lower_bound(structure, F)
        if not cyc.bounded:
            return sync + red
        c = ceil_div(structure.extents[None, :], F)
        return cyc.subtask(c) / hw.clock_hz + sync + red

    def reduction_lower_bound(self, structure: PlanStructure, F: np.ndarray) -> np.ndarray:
        """Per F_op row, a time no plan's replica reduction beats (``reduction="schedule"``):
        with an output that cannot rotate, every plan of the row has the row's replicas of a
        partition at least the unpadded one; the tree then costs at least its time on that
        partition (it grows with the bytes) and the chain at least one transfer, its ``R - 2``
        fill latencies and a synchronization. 0 for the ring term or a rotatable output."""
        out = structure.num_tensors - 1
        if self.reduction != "schedule" or structure.rotatable[out].any() or not len(F):
            return np.zeros(len(F))
        R = sharing_counts(structure, F)[:, out]
        p = partition_lower_bounds(structure, F)[:, out]
        return replica_reduction_lower_bound(R, p, int(structure.elem_bytes[out]), self.hw)

    def step_lower_bound(self, structure: PlanStructure, F: np.ndarray, S: np.ndarray,
                         xp: np.ndarray, parts: np.ndarray | None = None) -> np.ndarray:
        """Per plan with F_op rows ``F``, steps ``S`` and padded extents ``xp`` (all (n, A)):
        a time no plan with these steps beats (``parts``: their
        :func:`.bounds.step_partition_lower_bounds`, if the caller has them).

        Its compute and synchronization terms, computed as :meth:`components` computes them,
        plus a bound of its shifts: on an axis that steps, some tensor rotates with factor
        ``S_a``, so the axis's shift weight is at least ``S_a`` shifts of the smallest
        partition (:func:`.bounds.step_partition_lower_bounds`) of the tensors that may
        rotate on it, under the best loop order of those weights. The remaining terms are
        non-negative and added after them (floating-point addition is monotonic).
        """
        hw = self.hw
        fixed = self.step_fixed_lower_bound(structure, F, S, xp)
        stepping = S > 1
        if not stepping.any():
            return fixed
        if parts is None:
            parts = step_partition_lower_bounds(structure, F, S, xp)
        per_shift = link_transfer_seconds(parts, hw)
        least = np.where(structure.rotatable[None, :, :], per_shift[:, :, None], np.inf).min(axis=1)
        w = np.where(stepping, S * np.where(np.isfinite(least), least, 0.0), 0.0)
        _, shift = best_loop_order(S, w)
        # (the loop order minimizing real weights may round differently: keep a margin)
        return fixed + shift * (1.0 - SHIFT_BOUND_MARGIN)

    def step_fixed_lower_bound(self, structure: PlanStructure, F: np.ndarray, S: np.ndarray,
                               xp: np.ndarray) -> np.ndarray:
        """The compute and synchronization terms of :meth:`step_lower_bound` alone: a weaker
        bound, but far cheaper than the shifts' loop-order search, so a search can drop most
        (F_op row, steps) pairs with it first (:func:`.search.steps_within`)."""
        hw = self.hw
        steps = np.prod(S, axis=1).astype(float)
        compute = steps * self.cycles(structure).subtask(xp // S) / hw.clock_hz
        return compute + steps * hw.sync_cycles / hw.clock_hz

    def rotating_lower_bound(self, structure: PlanStructure, F: np.ndarray,
                             budget: float = math.inf, stay: np.ndarray | None = None,
                             rotated: np.ndarray | None = None) -> np.ndarray:
        """Per F_op row, a time no plan of the row that rotates something and fits
        ``budget`` beats: :meth:`time_lower_bound`, a second synchronization (two steps at
        least) and :func:`rotation_shift_bound` with the shifts' latencies; ``stay``,
        ``rotated``: a wrapping model's charges per tensor, as that function takes them
        (:class:`ArrivalCostModel`). The terms sum in another order than :meth:`components`',
        so the bound keeps :data:`SHIFT_BOUND_MARGIN` for the rounding."""
        hw = self.hw
        extra = hw.sync_cycles / hw.clock_hz
        shift = rotation_shift_bound(structure, F, 1.0 / hw.link_bandwidth, budget, hw, stay, rotated)
        return (self.time_lower_bound(structure, F) + extra + shift) * (1.0 - SHIFT_BOUND_MARGIN)


def combine_seconds(structure: PlanStructure, F: np.ndarray, rp: np.ndarray,
                    hw: HardwareSpec) -> np.ndarray:
    """Per row, one step's combine of the partial statistics of split core-local reductions
    (:func:`runtime_sim.machine.links.split_combine_seconds`; 0 where no row axis is split)."""
    if not structure.row_axes or not structure.split_stats:
        return np.zeros(len(F))
    group = np.prod(F[:, list(structure.row_axes)], axis=1).astype(float)
    levels: dict[int, np.ndarray] = {}
    for level, free in structure.split_stats:
        elems = np.prod(rp[:, list(free)], axis=1).astype(float) if free else np.ones(len(F))
        levels[level] = levels.get(level, 0) + elems
    cols = np.stack([group] + [levels[k] for k in sorted(levels)], axis=1)
    uniq, inverse = np.unique(cols, axis=0, return_inverse=True)  # few distinct rows per batch
    times = np.asarray(split_combine_seconds(uniq[:, 0], list(uniq[:, 1:].T), hw, STAT_BYTES))
    return times[inverse.reshape(-1)]


def replica_reduction_lower_bound(replicas: np.ndarray, partition_bytes: np.ndarray,
                                  elem_bytes: int, hw: HardwareSpec) -> np.ndarray:
    """A time no replica reduction (:func:`replica_reduction_array`) of at least ``replicas``
    copies of a partition of at least ``partition_bytes`` beats, per entry, in closed form.

    Tree (:func:`runtime_sim.machine.links.gather_seconds`): a core that takes ``f_j`` values in
    round ``j`` multiplies the values it holds by at most ``1 + f_j <= 2^f_j``, so the root
    receives at least ``ceil(log2 R)`` partitions over at least one round, each receive an
    add. Chain: the per-hop chunk is not monotonic in the bytes (the buffer splits them), so
    it is bounded by one transfer of the partition, ``R - 2`` fill latencies and its
    synchronization. Reduce-scatter + gather: every core receives ``R - 1`` pieces of at
    least ``p / R`` bytes and adds them, over two rounds each paying a hop's latency and a
    synchronization. All three grow with ``R`` and the bytes, so the bounds hold for any
    larger. The two-level schedule of replicas spread over chips
    (:func:`runtime_sim.machine.links.two_level_stages`) stays above the smallest of them:
    its levels' receives and adds sum to at least one level's over ``R`` replicas
    (tests/test_links.py checks it on random cases).
    """
    R = np.asarray(replicas, float)
    p = np.asarray(partition_bytes, float)
    many = R > 1
    sync = hw.sync_cycles / hw.clock_hz
    receives = np.ceil(np.log2(np.maximum(R, 1.0)))
    add = p / elem_bytes / hw.vector_flops_per_cycle / hw.clock_hz
    tree = (receives * (p / hw.link_bandwidth + add)
            + np.asarray(chunk_latency_seconds(p, hw, 1)) + sync)
    chain = np.asarray(link_transfer_seconds(p, hw)) + (R - 2) * hw.link_latency_s + sync
    share = (R - 1) / np.maximum(R, 1.0)
    scatter = share * (p / hw.link_bandwidth + add) + 2 * (hw.link_latency_s + sync)
    return np.where(many, np.minimum(np.minimum(tree, chain), scatter), 0.0)


def step_replica_reduction_bound(structure: PlanStructure, F: np.ndarray, S: np.ndarray,
                                 parts: np.ndarray, hw: HardwareSpec) -> np.ndarray:
    """Per (F_op row, steps) pair, a time no plan's replica reduction beats
    (:func:`replica_reduction_lower_bound`): the output's temporal factors are at most the
    steps of its rotatable axes and divide its sharing count ``P``, so its replicas are at
    least ``ceil(P / min(P, prod S))``; ``parts``: the pairs'
    :func:`.bounds.step_partition_lower_bounds`."""
    out = structure.num_tensors - 1
    P = sharing_counts(structure, F)[:, out]
    rot = structure.rotatable[out]
    most = np.prod(S[:, rot], axis=1) if rot.any() else np.ones(len(F), INT)
    R = ceil_div(P, np.minimum(P, most))
    return replica_reduction_lower_bound(R, parts[:, out], int(structure.elem_bytes[out]), hw)


def replica_reduction_array(replicas: np.ndarray, partition_bytes: np.ndarray, elem_bytes: int,
                            hw: HardwareSpec) -> np.ndarray:
    """Summing ``replicas`` copies of an output partition as the device and the timing
    simulator schedule it (:func:`runtime_sim.machine.links.replica_reduction_seconds`, the one
    closed form of the tree-or-chain schedule); 0 where there is one replica.

    The analytic model uses it with ``reduction="schedule"``; by default it keeps T10's
    ``(R-1)/R`` ring term (see :data:`REDUCTION_TERMS`). :class:`ArrivalCostModel` and the
    fitted model (:mod:`.fitted`) use this schedule.
    """
    R = np.asarray(replicas, float)
    p = np.asarray(partition_bytes, float)
    R, p = np.broadcast_arrays(R, p)
    if R.size <= 64:
        return np.asarray(replica_reduction_seconds(R, p, p / elem_bytes, hw))
    # a batch holds few distinct (replicas, partition) pairs: cost each once
    if R.max() >= 2 ** 13 or p.max() >= 2 ** 40 or (p != np.floor(p)).any():
        return np.asarray(replica_reduction_seconds(R, p, p / elem_bytes, hw))
    key = R.ravel() * 2.0 ** 40 + p.ravel()  # exact: replicas < 2^13, whole bytes < 2^40
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    Ru, pu = R.ravel()[first], p.ravel()[first]
    times = np.asarray(replica_reduction_seconds(Ru, pu, pu / elem_bytes, hw))
    return times[inverse.reshape(-1)].reshape(R.shape)


@dataclass(frozen=True)
class InPlace:
    """An arriving input whose producer left it as ``counts`` blocks of ``block`` elements
    per dimension, one per core (:func:`.mapping.producer_numbering`). A plan that
    partitions the input into exactly these blocks, unreplicated and unrotated, and is
    mapped to the cores as its producer (:func:`.mapping.candidate_placements`) finds its
    partitions in place: the re-layout moves nothing (:mod:`runtime_sim.contract.relayout`)."""

    tensor: int
    block: tuple[int, ...]
    counts: tuple[int, ...]
    #: the dimensions in the producer's numbering, outermost first, when the reader's plan is
    #: not mapped afterwards (one chip): its own numbering, row-major over its axes, must
    #: follow them; ``None`` when the mapping places the reader as the producer
    order: tuple[int, ...] | None = None


def in_place_rows(p: InPlace, structure: PlanStructure, F: np.ndarray,
                  xp: np.ndarray | None = None, ft: np.ndarray | None = None) -> np.ndarray:
    """Rows of ``F`` (narrowed by the padded extents ``xp`` and the temporal factors ``ft``
    when given) whose partitions of ``p.tensor`` are its producer's blocks on the same cores."""
    dims = structure.dims[p.tensor]
    ok = np.ones(len(F), bool)
    if len(dims) != len(p.block) or any(d[0] != "simple" for d in dims):
        return ~ok
    axes = [d[1] for d in dims]
    if len(set(axes)) < len(axes):
        return ~ok  # a diagonal read: its partitions are not the producer's blocks
    if p.order is not None and [axes[d] for d in p.order] != sorted(axes):
        return ~ok  # numbered row-major over the axes in order, not as the producer
    # unreplicated: every axis the tensor lacks is not split
    ok &= sharing_counts(structure, F)[:, p.tensor] == 1
    for d, a in enumerate(axes):
        ok &= F[:, a] == p.counts[d]
        if xp is not None:
            ok &= xp[:, a] == p.block[d]
        if ft is not None:
            ok &= ft[:, p.tensor, a] == 1
    return ok


class ArrivalCostModel:
    """The analytic batch model as the whole-model reconciliation needs it (T10 §4.3.2).

    Two terms change. (1) An operator's input produced by another operator (or region) sits
    in its producer's layout; before the first step every core must receive its partition of
    it over its link (the re-layout the timing simulator charges, T10 §5 "the program may
    rearrange the data"): ``partition bytes / link bandwidth`` is added for the arriving
    ``tensors``, so that replicating an activation onto every core is not free. (2) With
    ``device_reduction`` the replica reduction is costed as the device schedules it
    (:func:`replica_reduction_array`) even over a base model with T10's ``(R-1)/R`` ring
    term (``reduction="ring"``), which under-estimates it badly for many replicas of small
    partitions. Lower bounds add the
    arrival of the partitions' lower bounds and no reduction, so they stay valid and the
    exact searches stay exact for this model.

    ``in_place``: arriving inputs whose producers left them in contiguous blocks
    (:class:`InPlace`); a plan that reads such an input in the same blocks pays no arrival
    for it. Without this, the three operators of an attention piece (scores, softmax,
    ``P V``) each re-laid out the ``heads x rows x keys`` scores although one partition of
    them suits all three.
    """

    def __init__(self, base: AnalyticBatchModel, tensors: tuple[int, ...], hw: HardwareSpec,
                 device_reduction: bool = True, in_place: tuple[InPlace, ...] = ()):
        self.base = base
        self.tensors = tuple(int(t) for t in tensors)
        self.hw = hw
        self.device_reduction = device_reduction
        self.in_place = tuple(p for p in in_place if p.tensor in self.tensors)

    @property
    def bound_key(self) -> tuple | None:
        """What its bounds read besides the structure and the rows (None: not known)."""
        base = getattr(self.base, "bound_key", None)
        if base is None:
            return None
        return ("arrival", base, self.tensors, self.hw, self.device_reduction, self.in_place)

    def _arrival(self, parts: np.ndarray, structure: PlanStructure | None = None,
                 F: np.ndarray | None = None, xp: np.ndarray | None = None,
                 ft: np.ndarray | None = None) -> np.ndarray:
        """Arrival seconds per row: ``parts`` bytes of the arriving tensors over a link, less
        the inputs found in place (``F`` given: rows that may find them so, further narrowed
        by the padded extents ``xp`` and the temporal factors ``ft`` when given)."""
        if not self.tensors:
            return np.zeros(len(parts))
        total = parts[:, list(self.tensors)].sum(axis=1)
        if F is not None:
            for p in self.in_place:
                total = total - np.where(self._aligned(p, structure, F, xp, ft), parts[:, p.tensor], 0)
        return total / self.hw.link_bandwidth

    def arrival(self, batch: PlanBatch) -> np.ndarray:
        """Seconds per plan of ``batch`` its arriving inputs take to arrive: the term
        :meth:`times` adds (inputs found in place free). The region planner prices its
        producers' departures with it (:mod:`.departure`)."""
        return self._arrival(batch.partition_bytes(), batch.structure, batch.F, batch.xp, batch.ft)

    @staticmethod
    def aligned(p: InPlace, structure: PlanStructure, F: np.ndarray, xp: np.ndarray | None = None,
                ft: np.ndarray | None = None) -> np.ndarray:
        """Rows whose partitions of ``p.tensor`` are the blocks ``p`` names, one per core,
        unreplicated and unrotated (``xp``, ``ft``: narrowed further when given). For an
        input, the plans that find it in place; for an output, the plans that leave it where
        a reader finds it in place (:mod:`.departure`)."""
        return ArrivalCostModel._aligned(p, structure, F, xp, ft)

    @staticmethod
    def _aligned(p: InPlace, structure: PlanStructure, F: np.ndarray, xp: np.ndarray | None,
                 ft: np.ndarray | None) -> np.ndarray:
        return in_place_rows(p, structure, F, xp, ft)

    @property
    def _swaps_reduction(self) -> bool:
        """Whether the base's ring term is replaced by the device's reduction schedule."""
        return self.device_reduction and getattr(self.base, "reduction", "ring") == "ring"

    def times(self, batch: PlanBatch) -> tuple[np.ndarray, np.ndarray]:
        (time, order), terms = self.base.components(batch)
        parts = batch.partition_bytes()
        if self._swaps_reduction:
            structure = batch.structure
            out = structure.num_tensors - 1
            replicas = (sharing_counts(structure, batch.F)[:, out]
                        // np.prod(batch.ft[:, out], axis=1)).astype(float)
            sent = parts[:, out] + structure.state_bytes(batch.xp)  # attention: its statistics too
            time = time - terms["reduction_s"] + replica_reduction_array(
                replicas, sent, int(structure.elem_bytes[out]), self.hw)
        return time + self._arrival(parts, batch.structure, batch.F, batch.xp, batch.ft), order

    def time_lower_bound(self, structure: PlanStructure, F: np.ndarray) -> np.ndarray:
        return (self.base.time_lower_bound(structure, F)
                + self._arrival(partition_lower_bounds(structure, F), structure, F))

    def step_lower_bound(self, structure: PlanStructure, F: np.ndarray, S: np.ndarray,
                         xp: np.ndarray, parts: np.ndarray | None = None) -> np.ndarray:
        """The base model's, plus (when this model swaps in the device's reduction) a bound of
        that reduction with these steps (:func:`step_replica_reduction_bound`), plus the
        arrival of the partitions' lower bounds (:func:`.bounds.step_partition_lower_bounds`).
        :meth:`times` sums its terms in another order, so the bound keeps a margin for the
        rounding."""
        if parts is None:
            parts = step_partition_lower_bounds(structure, F, S, xp)
        base = self.base.step_lower_bound(structure, F, S, xp, parts)
        if self._swaps_reduction:
            base = base + step_replica_reduction_bound(structure, F, S, parts, self.hw)
        return (base + self._arrival(parts, structure, F, xp)) * (1.0 - SHIFT_BOUND_MARGIN)

    def step_fixed_lower_bound(self, structure: PlanStructure, F: np.ndarray, S: np.ndarray,
                               xp: np.ndarray) -> np.ndarray:
        """The base model's (the terms this model adds are not negative), with
        :meth:`step_lower_bound`'s rounding margin."""
        return self.base.step_fixed_lower_bound(structure, F, S, xp) * (1.0 - SHIFT_BOUND_MARGIN)

    def rotating_lower_bound(self, structure: PlanStructure, F: np.ndarray,
                             budget: float = math.inf) -> np.ndarray:
        """The base model's, its shifts and the arrivals bounded together
        (:func:`rotation_shift_bound`'s ``stay`` and ``rotated``): an arriving input that
        does not rotate arrives whole (its sub-tensor, nothing where it may be found in
        place), one that rotates arrives as a partition and then shifts its sub-tensor in.
        Bounding the two terms apart counted every arriving input as one partition, whatever
        rotated: a ResNet-50 convolution on 5,888 cores then expanded 80 million (row, steps)
        pairs of which none could beat its unrotated optimum."""
        whole = subtensor_lower_bounds(structure, F)
        arriving = np.zeros(structure.num_tensors, bool)
        arriving[list(self.tensors)] = True
        stay = np.where(arriving[None, :], whole, 0.0)
        for p in self.in_place:
            stay[:, p.tensor] = np.where(self._aligned(p, structure, F, None, None), 0.0, stay[:, p.tensor])
        rotated = np.where(arriving[None, :], partition_lower_bounds(structure, F), 0.0)
        # (seconds per byte as rotation_shift_bound prices the shifts: a tensor's sub-tensor
        # then costs it exactly what it saves by not arriving whole, never a rounding less)
        per_byte = 1.0 / self.hw.link_bandwidth
        return self.base.rotating_lower_bound(structure, F, budget, stay * per_byte, rotated * per_byte)
