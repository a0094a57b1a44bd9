"""What plan validity and cost need to know about one tensor expression, as arrays.

:func:`build_structure` builds it; :func:`tvm_icca.plan_search.search_memo.plan_structure` memoizes it
per expression in the caller's :class:`~tvm_icca.plan_search.search_memo.SearchMemo`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime_sim.contract.expr import TensorExpr, dtype_bytes
from runtime_sim.contract.plan_rules import (
    attention_scratch_bytes,
    attention_state_bytes,
    fixed_axes,
    local_splits,
    padding_safe_reduce,
    pinned_axes,
    split_reductions,
)
from tvm_icca.plan_search.intmath import INT


@dataclass(frozen=True, eq=False)
class PlanStructure:
    """What plan validity and cost need to know about a tensor expression, as arrays.

    Axes are in ``expr.axes`` order, tensors in ``expr.tensors`` order (inputs then output).
    """

    expr: TensorExpr
    axes: tuple[str, ...]
    extents: np.ndarray  # (A,)
    pinned: np.ndarray  # (A,) bool
    exact: np.ndarray  # (A,) bool: reduction axes that must not be padded
    own: np.ndarray  # (T, A) bool: tensor t is indexed by axis a
    rotatable: np.ndarray  # (T, A) bool: tensor t may rotate on axis a
    ring_risks: tuple[tuple[int, int, int, np.ndarray], ...]  # (axis, t, u, shared free mask)
    dims: tuple[tuple[tuple, ...], ...]  # per tensor, per dimension: how its length derives
    elem_bytes: np.ndarray  # (T,)
    key: str = ""  # expr.structure_key(views=False): equal for operators that differ only in tensor names
    #: axes that core-local reductions follow (runtime_sim.contract.plan_rules.local_splits): splitting one
    #: splits those reductions across cores
    row_axes: tuple[int, ...] = ()
    #: per distinct split reduction: (level, axes its statistic depends on), for the combine
    split_stats: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def extra_bytes(self, xp: np.ndarray, rp: np.ndarray) -> np.ndarray:
        """SRAM per core beyond the partitions of plans with padded extents ``xp`` and chunk
        lengths ``rp`` ((N, A)): an attention operator's online-softmax state and score block
        (:meth:`runtime_sim.contract.layout.OpLayout.extra_bytes_per_core`); zeros otherwise."""
        if self.expr.kind != "attention":
            return np.zeros(len(xp), INT)
        return self.state_bytes(xp) + attention_scratch_bytes(
            self.expr, {a: rp[:, i] for i, a in enumerate(self.axes)})

    def state_bytes(self, xp: np.ndarray) -> np.ndarray:
        """An attention operator's running max and sum beside an output partition of plans
        with padded extents ``xp`` (:func:`runtime_sim.contract.plan_rules.attention_state_bytes`):
        on the core, and sent with the partition when replicas are combined; zeros otherwise."""
        if self.expr.kind != "attention":
            return np.zeros(len(xp), INT)
        return np.asarray(attention_state_bytes(self.expr, {a: xp[:, i] for i, a in enumerate(self.axes)}),
                          INT) * np.ones(len(xp), INT)

    @property
    def num_axes(self) -> int:
        return len(self.axes)

    @property
    def num_tensors(self) -> int:
        return len(self.expr.tensors)

    @property
    def rotation_key(self) -> tuple[int, int, bytes]:
        """What the f_t assignments of a sharing tuple depend on (:func:`.plan_space.
        temporal_assignments`): the tensors, the axes and which tensor may rotate on which
        axis. Operators of different shapes with the same key share their assignments."""
        return (self.num_tensors, self.num_axes, self.rotatable.tobytes())


def build_structure(expr: TensorExpr) -> PlanStructure:
    axes = expr.axis_names
    index = {a: i for i, a in enumerate(axes)}
    local = {a.name: a.extent for a in expr.local_axes}
    follow = local_splits(expr)
    rows = set(follow.values())
    pinned = pinned_axes(expr)
    still = pinned | fixed_axes(expr)  # no tensor rotates on these (attention: all but the keys)
    n_t, n_a = len(expr.tensors), len(axes)
    own = np.zeros((n_t, n_a), bool)
    rot = np.zeros((n_t, n_a), bool)
    dims = []
    for t, access in enumerate(expr.tensors):
        for a in access.axes:
            if a in index:
                own[t, index[a]] = True
        for a in access.axes:
            if a not in index or a in still or t in expr.epilogue_inputs:
                continue
            using = [i for i in access.indices if a in i.axes]
            if len(using) == 1 and using[0].is_simple:
                rot[t, index[a]] = True
        spec = []
        for d, idx in enumerate(access.indices):
            # Mirrors OpLayout._dim_length: whole dimension, constant index, simple, compound.
            if idx.is_simple and idx.terms[0][0] in follow:  # split with the row it follows
                spec.append(("simple", index[follow[idx.terms[0][0]]]))
            elif any(a in local for a in idx.axes):
                spec.append(("whole", access.shape[d]))
            elif not idx.terms:
                spec.append(("const",))
            elif idx.is_simple:
                spec.append(("simple", index[idx.terms[0][0]]))
            else:
                spec.append(("compound", tuple((index[a], abs(c)) for a, c in idx.terms)))
        dims.append(tuple(spec))
    exact = np.zeros(n_a, bool)
    if not padding_safe_reduce(expr):
        for a in expr.reduce_axes:
            exact[index[a]] = True
    for a in rows:  # a split row is never padded (runtime_sim.contract.layout: F must divide it)
        exact[index[a]] = True
    free = ~own
    risks = []
    for a in range(n_a):
        ts = np.flatnonzero(rot[:, a])
        for i, t in enumerate(ts):
            for u in ts[i + 1:]:
                shared = free[t] & free[u]
                if shared.any():
                    risks.append((a, int(t), int(u), shared))
    return PlanStructure(
        expr=expr,
        axes=axes,
        extents=np.array([a.extent for a in expr.axes], INT),
        pinned=np.array([a in pinned and a not in rows for a in axes], bool),
        exact=exact,
        own=own,
        rotatable=rot,
        ring_risks=tuple(risks),
        dims=tuple(dims),
        elem_bytes=np.array([dtype_bytes(t.dtype) for t in expr.tensors], INT),
        key=expr.structure_key(views=False),
        row_axes=tuple(sorted(index[a] for a in rows)),
        split_stats=tuple((level, tuple(sorted(index[a] for a in free)))
                          for level, free in split_reductions(expr, follow).values()),
    )
