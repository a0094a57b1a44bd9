"""T10's rules checked on a layout: whether a plan is valid for its operator (T10 §4.2).

:meth:`OpLayout.validate <runtime_sim.contract.layout.OpLayout.validate>` runs
:func:`check_layout`; the compiler's batched plan space decides the ring rule alone, for the
rare candidates its array checks cannot decide, on the cores of all of them at once
(:func:`rings_hold`, :mod:`tvm_icca.plan_search.plan_space`). The ring rule is stated once,
:func:`ring_faults`, on the per-core layout of one plan or many
(:class:`~runtime_sim.contract.core_layout.CoreLayout`, the one definition of grid, rings, Cannon
skew and partitions). The rules an expression imposes before any plan exists are in
:mod:`runtime_sim.contract.plan_rules`. Layouts are typed ``Any``:
:mod:`runtime_sim.contract.layout` imports this module.
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


def ring_faults(cores: Any, t: int) -> tuple[np.ndarray, np.ndarray]:
    """T10's ring rule (§4.2) for tensor ``t`` of every plan of ``cores`` (a
    :class:`~runtime_sim.contract.core_layout.CoreLayout`, one plan or many): each rotation ring
    holds every partition of its sub-tensor once, and its members shift on each axis at the
    same steps (they are at the same chunk within their partitions at the first step).

    This is the one statement of the rule: :func:`check_rings` reads it for one layout,
    :func:`rings_hold` for a plan space's batch.

    Returns
    -------
    twice : numpy.ndarray
        (n,) bool: a ring of ``t`` holds some partition more than once.
    astray : numpy.ndarray
        (n, A) bool: ring members of ``t`` would shift on axis ``a`` at different steps.
    """
    rotates = cores.ft[:, t] > 1                                   # (n, A)
    moving = rotates.any(axis=1)
    twice = np.zeros(len(rotates), bool)
    astray = np.zeros(rotates.shape, bool)
    if not moving.any():
        return twice, astray
    many = cores.num_plans > 1
    plan = cores.plan
    held = cores.partition_key(t) * cores.at_cores(np.maximum(cores.replicas[:, t], 1)) \
        + cores.ring[t]                                            # (partition, ring)
    # numbered apart per plan, so that one sort brings a plan's equal keys together
    # (sorting beats np.unique's hash)
    radix = int(held.max()) + 1 if many else 0
    if many:
        held += plan * radix
    held.sort()
    again = held[1:] == held[:-1]
    if many:
        twice[held[1:][again] // radix] = True
    else:
        twice[0] = again.any()
    group = cores.group_key(t)
    if many:
        group += plan * (int(group.max()) + 1)
    order = np.argsort(group)
    group = group[order]
    same = group[1:] == group[:-1]                                 # neighbours in one ring
    members = plan[order][1:] if many else None
    q0, span = cores.offset, cores.span(t)
    for a in np.flatnonzero(rotates.any(axis=0)).tolist():
        phase = (q0[a] % span[a])[order]                           # chunk within the partition
        shifted = same & (phase[1:] != phase[:-1])
        if many:
            astray[members[shifted], a] = True
        else:
            astray[0, a] = shifted.any()
    return twice & moving, astray & rotates


def check_rings(layout: Any) -> None:
    """Raise :class:`InvalidPlanError` unless every rotation ring of ``layout`` (an
    :class:`~runtime_sim.contract.layout.OpLayout`) holds each partition once and its members
    shift on every axis at the same steps (T10 §4.2; :func:`ring_faults`)."""
    for t, access in enumerate(layout.expr.tensors):
        if not layout.temporal_axes(t):
            continue
        twice, astray = ring_faults(layout.cores, t)
        if twice[0]:
            raise InvalidPlanError(f"rotation rings of {access.name} do not hold each partition once")
        for a in np.flatnonzero(astray[0]):
            raise InvalidPlanError(
                f"ring members of {access.name} would shift on '{layout.axes[a]}' at different steps"
            )


def rings_hold(cores: Any) -> np.ndarray:
    """:func:`check_rings` of many plans of one expression at once: whether every rotation
    ring of each plan of ``cores`` (a :class:`~runtime_sim.contract.core_layout.CoreLayout`) holds
    each partition once and shifts in step (T10 §4.2; :func:`ring_faults`). A plan space
    checks thousands of candidates this way in a few dozen array operations per tensor.
    Returns (n,) bool."""
    ok = np.ones(cores.num_plans, bool)
    for t in range(len(cores.own)):
        twice, astray = ring_faults(cores, t)
        ok &= ~(twice | astray.any(axis=1))
    return ok
