"""T10's rules checked on a layout: whether a plan is valid for its operator (T10 §4.2).

:meth:`OpLayout.validate <runtime_sim.contract.layout.OpLayout.validate>` runs
:func:`check_layout`; the compiler's batched plan space runs :func:`check_rings` alone on the
rare candidates its array checks cannot decide (:mod:`tvm_icca.plan_search.plan_space`). The rules
an expression imposes before any plan exists are in :mod:`runtime_sim.contract.plan_rules`.
The layout is typed ``Any``: :mod:`runtime_sim.contract.layout` imports this module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime_sim.contract.errors import InvalidPlanError
from runtime_sim.contract.plan_rules import fixed_axes, local_splits, padding_safe_reduce, pinned_axes


def check_layout(layout: Any) -> None:
    """Raise :class:`InvalidPlanError` unless the plan of ``layout`` (an
    :class:`~runtime_sim.contract.layout.OpLayout`) obeys every T10 rule (§4.2): what may be
    split and rotated, ring sizes that divide the cores sharing a sub-tensor, pairwise
    factor/multiple temporal factors, and rings that hold each partition once and shift in
    step (:func:`check_rings`)."""
    expr = layout.expr
    pinned = pinned_axes(expr)
    rows = set(local_splits(expr).values()) if any(layout.F[a] > 1 for a in pinned) else set()
    for a in pinned:
        if layout.S[a] != 1 or (layout.F[a] != 1 and a not in rows):
            why = ("lies inside a merged output dimension" if a in expr.merged_inner_axes
                   else "shares a dimension with a core-local axis")
            raise InvalidPlanError(f"axis '{a}' {why} and cannot be split")
        if layout.extent[a] % layout.F[a]:
            raise InvalidPlanError(
                f"axis '{a}' splits core-local reductions: F_op[{a}]={layout.F[a]} must divide {layout.extent[a]}"
            )
    for a in sorted(fixed_axes(expr)):
        if layout.S[a] != 1:
            raise InvalidPlanError(f"axis '{a}' of an attention operator may be split but not "
                                   "rotated (only its key axis takes temporal factors)")
    if not padding_safe_reduce(expr):
        for a in expr.reduce_axes:
            if layout.F[a] * layout.xp[a] != layout.extent[a]:
                raise InvalidPlanError(f"reduction axis '{a}' of this body cannot be padded")
    for t, access in enumerate(expr.tensors):
        own = layout.tensor_axes(t)
        for a, f in layout.plan.temporal[t].items():
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
        if layout.sharing(t) % layout.ring_size(t):
            raise InvalidPlanError(
                f"prod f_t of {access.name} ({layout.ring_size(t)}) does not divide the "
                f"{layout.sharing(t)} cores that share each of its sub-tensors"
            )
    for a in layout.axes:
        factors = sorted({layout.plan.ft(t, a) for t in range(len(expr.tensors))})
        for lo, hi in zip(factors, factors[1:]):
            if hi % lo:
                raise InvalidPlanError(
                    f"temporal factors on axis '{a}' ({factors}) are not pairwise factor/multiple"
                )
    check_rings(layout)

def check_rings(layout: Any) -> None:
    """Raise :class:`InvalidPlanError` unless every rotation ring of ``layout`` holds each
    partition once and its members shift on every axis at the same steps (T10 §4.2)."""
    q0 = layout.chunk({})
    for t in range(len(layout.expr.tensors)):
        temporal = layout.temporal_axes(t)
        if not temporal:
            continue
        key = np.sort(layout.partition_key(t) * max(layout.replicas(t), 1) + layout.ring_id(t))
        if np.any(key[1:] == key[:-1]):  # a repeated (partition, ring): sorting beats np.unique's hash
            raise InvalidPlanError(
                f"rotation rings of {layout.expr.tensors[t].name} do not hold each partition once"
            )
        group = layout.ring_group_key(t)
        for a in temporal:
            phase = q0[a] % (layout.S[a] // layout.plan.ft(t, a))
            order = np.argsort(group, kind="stable")
            g_sorted, ph_sorted = group[order], phase[order]
            same = g_sorted[1:] == g_sorted[:-1]
            if np.any(same & (ph_sorted[1:] != ph_sorted[:-1])):
                raise InvalidPlanError(
                    f"ring members of {layout.expr.tensors[t].name} would shift on '{a}' at different steps"
                )


def rings_hold(own: np.ndarray, F: np.ndarray, ft: np.ndarray) -> np.ndarray:
    """:func:`check_rings` of many plans of one expression at once: whether every rotation
    ring of each plan holds each partition once and shifts in step (T10 §4.2).

    The plans are given as arrays, for a plan space that checks thousands of candidates:
    ``own`` (T, A) whether tensor ``t`` is indexed by top-level axis ``a``
    (:meth:`OpLayout.tensor_axes <runtime_sim.contract.layout.OpLayout.tensor_axes>`),
    ``F`` (n, A) the F_op of each plan and ``ft`` (n, T, A) its temporal factors (1 where
    none), cores numbered row-major over the axes (a plan without ``core_order``). Each plan's
    cores are laid out as :class:`~runtime_sim.contract.layout.OpLayout` lays them (its
    ``grid``, ``_rings``, ``offset`` and ``partition_key``), all plans' cores in one array,
    so the rule costs a few dozen array operations per call rather than per plan; the test
    suite checks it against :func:`check_rings` on random plans. Returns (n,) bool.
    """
    F = np.asarray(F, np.int64)
    ft = np.asarray(ft, np.int64)
    n, A = F.shape
    ok = np.ones(n, bool)
    if n == 0:
        return ok
    S = np.maximum(ft.max(axis=1), 1)                   # (n, A): OpLayout.S
    cores = np.prod(F, axis=1)
    plan = np.repeat(np.arange(n), cores)                # the plan of every core
    local = np.arange(plan.size, dtype=np.int64) - (np.cumsum(cores) - cores)[plan]
    Fc, Sc = F[plan], S[plan]
    stride = np.ones((n, A), np.int64)                   # row-major over the axes (grid)
    for a in range(A - 2, -1, -1):
        stride[:, a] = stride[:, a + 1] * F[:, a + 1]
    grid = local[:, None] // stride[plan] % Fc

    def ravel(axes: np.ndarray, values: np.ndarray, radices: np.ndarray) -> np.ndarray:
        out = np.zeros(plan.size, np.int64)              # layout._ravel, over ``axes`` in order
        for a in np.flatnonzero(axes):
            out = out * radices[:, a] + values[:, a]
        return out

    per_tensor = []
    offset = np.zeros((plan.size, A), np.int64)
    for t in range(own.shape[0]):
        ftc = ft[plan, t]                                # (C, A); 1 where t does not rotate
        ring_size = np.prod(ft[:, t], axis=1)[plan]
        g_free = ravel(~own[t], grid, Fc)
        sub = ravel(own[t], grid, Fc)
        pos, ring = g_free % ring_size, g_free // ring_size
        # the ring position's digits over t's temporal axes (radix 1 elsewhere: digit 0)
        tstride = np.ones((plan.size, A), np.int64)
        for a in range(A - 2, -1, -1):
            tstride[:, a] = tstride[:, a + 1] * ftc[:, a + 1]
        offset += Sc // ftc * (pos[:, None] // tstride % ftc)
        per_tensor.append((ftc, ring_size, sub, ring))
    q0 = offset % Sc                                     # chunk({}): the Cannon skew
    for t, (ftc, ring_size, sub, ring) in enumerate(per_tensor):
        temporal = (ft[:, t] > 1).any(axis=1)            # plans where t rotates at all
        if not temporal.any():
            continue
        sharing = np.prod(np.where(own[t], 1, F), axis=1)     # P_T
        replicas = np.maximum(sharing // np.prod(ft[:, t], axis=1), 1)[plan]
        p0 = q0 // (Sc // ftc)                           # 0 on axes t does not rotate on
        key = (sub * ring_size + ravel(np.ones(A, bool), p0, ftc)) * replicas + ring
        order = np.lexsort((key, plan))
        p_s, k_s = plan[order], key[order]
        twice = (p_s[1:] == p_s[:-1]) & (k_s[1:] == k_s[:-1]) & temporal[p_s[1:]]
        ok[p_s[1:][twice]] = False
        group = sub * replicas + ring
        order = np.lexsort((group, plan))
        p_s, g_s = plan[order], group[order]
        same = (p_s[1:] == p_s[:-1]) & (g_s[1:] == g_s[:-1])
        for a in range(A):
            rotates = ft[:, t, a] > 1
            if not rotates.any():
                continue
            phase = (q0[:, a] % (Sc[:, a] // ftc[:, a]))[order]
            shifted = same & (phase[1:] != phase[:-1]) & rotates[p_s[1:]]
            ok[p_s[1:][shifted]] = False
    return ok
