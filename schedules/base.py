"""What every per-op-type template provides: the cost of one sub-task on one core.

A template describes how a single core computes the sub-task of one compute-shift step
(T10 §4.4, the ``compute`` interface): which unit runs it (the matrix unit for
sums of products, the vector unit otherwise) and how many cycles it takes for a given chunk
of the iteration space. Plan rules that follow from the tensor expression itself (pinned
axes, padding of reductions, compound indices) are enforced generically by
:mod:`runtime_sim.contract.layout`; a template adds only rules that are specific to its op type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from runtime_sim.contract.expr import DTYPE_BYTES, Expr, TensorExpr, walk_expr
from runtime_sim.contract.hardware import SUPPORTED_DTYPES, HardwareSpec
from runtime_sim.contract.plan_rules import local_splits

#: Expression nodes that cost no arithmetic on a core (data access and constants).
_FREE_NODES = ("load", "const", "axis", "result", "cast")


def _follow(expr: TensorExpr) -> dict[str, str]:
    """The core-local axes a plan splits with a placing axis (:func:`local_splits`)."""
    if not expr.local_axes:
        return {}  # nothing to follow: skip walking the expression
    return local_splits(expr)


def arithmetic_nodes(expr: Expr | None) -> int:
    """Operations per evaluated point: each arithmetic node counts as one vector FLOP.

    Transcendentals are counted as one operation as well; the fitted cost model of a later
    stage replaces this with measured per-op costs.
    """
    if expr is None:
        return 0
    return sum(1 for n in walk_expr(expr) if n["op"] not in _FREE_NODES)


@dataclass(frozen=True)
class ContractionRoles:
    """Axes of a sum of products grouped as a batched GEMM: batch x (M x K) @ (K x N)."""

    batch: tuple[str, ...]
    m: tuple[str, ...]
    n: tuple[str, ...]
    k: tuple[str, ...]


def contraction_roles(expr: TensorExpr) -> ContractionRoles:
    """Infer GEMM roles from which tensors an axis indexes (conv: M=b,h,w N=f K=c,kh,kw)."""
    main = [t for i, t in enumerate(expr.inputs) if i not in expr.epilogue_inputs]
    lhs = set(main[0].axes) if main else set()
    rhs = set(main[1].axes) if len(main) > 1 else set()
    spatial = [a.name for a in expr.axes if not a.reduce]
    batch = tuple(a for a in spatial if a in lhs and a in rhs)
    m = tuple(a for a in spatial if a not in batch and a not in rhs)
    n = tuple(a for a in spatial if a not in batch and a not in m)
    return ContractionRoles(batch, m, n, expr.reduce_axes)


def round_up(value: int, multiple: int) -> int:
    return multiple * math.ceil(value / multiple)


def compute_dtype(expr: TensorExpr) -> str:
    """The element type an operator's sub-tasks compute in: the widest floating-point dtype
    among the inputs its body reads (a mixed-precision product runs in its wider operand's
    format), else its output's. Masks, index tensors and epilogue-only inputs do not count.

    The matrix unit runs at this dtype's rate
    (:meth:`~runtime_sim.contract.hardware.HardwareSpec.matrix_flops_per_cycle_for`); a
    float16 matmul on an IPU Mk2 at its FP16 peak, a float32 one at a quarter of it.
    """
    ids = expr.gather_ids
    floats = [t.dtype for i, t in enumerate(expr.inputs)
              if i not in expr.epilogue_inputs and i not in ids and t.dtype in SUPPORTED_DTYPES]
    if not floats:
        return expr.output.dtype
    return max(floats, key=lambda d: (DTYPE_BYTES[d], -floats.index(d)))


def matrix_flops_per_cycle(expr: TensorExpr, hw: HardwareSpec) -> float:
    """Matrix-unit FLOP per cycle per core for ``expr``'s sub-tasks on ``hw``: the rate of its
    :func:`compute_dtype`. The one lookup the templates and the compiler's batched cost model
    (:class:`tvm_icca.plan_search.batch_cost.TemplateCycles`) share."""
    return hw.matrix_flops_per_cycle_for(compute_dtype(expr))


class ComputeTemplate:
    """Base template: a vector-unit sub-task (elementwise work over the chunk)."""

    kind = "elementwise"
    unit = "vector"

    def points(self, expr: TensorExpr, chunk: Mapping[str, int]) -> int:
        n = 1
        for a in expr.axes:
            n *= int(chunk.get(a.name, a.extent))
        follow = _follow(expr)
        for a in expr.local_axes:
            n *= int(chunk.get(follow[a.name], a.extent)) if a.name in follow else a.extent
        return n

    def subtask_cycles(self, expr: TensorExpr, chunk: Mapping[str, int], hw: HardwareSpec) -> float:
        """Cycles one core spends on the sub-task of one step over ``chunk`` (axis -> length)."""
        ops = max(arithmetic_nodes(expr.body), 1)
        return self.points(expr, chunk) * ops / hw.vector_flops_per_cycle

    def epilogue_cycles(self, expr: TensorExpr, partition: Mapping[str, int], hw: HardwareSpec) -> float:
        """Cycles of the fused elementwise epilogue over one output partition."""
        ops = arithmetic_nodes(expr.epilogue)
        if not ops:
            return 0.0
        n = 1
        for a in expr.axes:
            if not a.reduce:
                n *= int(partition.get(a.name, a.extent))
        return n * ops / hw.vector_flops_per_cycle

    def flops(self, expr: TensorExpr, chunk: Mapping[str, int]) -> int:
        return self.points(expr, chunk) * max(arithmetic_nodes(expr.body), 1)

    def step_vector_flops(self, expr: TensorExpr, chunk: Mapping[str, int]) -> int:
        """Vector operations of a sub-task over ``chunk`` beside its :meth:`flops` on its own
        unit: none, but for a template whose matrix sub-task has vector work too (fused
        attention's online softmax). The energy model counts them
        (:func:`schedules.actions.op_actions`)."""
        del expr, chunk
        return 0


def hoisted_ops(expr: TensorExpr, chunk: Mapping[str, int]) -> int:
    """Vector operations of one sub-task when each subexpression is computed once per value of
    the axes it depends on (loop-invariant hoisting, as any row-wise kernel does).

    A row statistic such as softmax's ``max_k x[i, k]`` then costs one pass over the row per
    row, not one per output element; nested statistics (the max inside softmax's
    denominator) are hoisted out of the enclosing reduction. At least one operation per
    output point of the chunk is counted.
    """
    length = {a.name: int(chunk.get(a.name, a.extent)) for a in expr.axes}
    # a core-local axis split with the row it follows (runtime_sim.contract.plan_rules.local_splits) is as
    # long as the row's chunk on this core (the whole row when the row is not split)
    follow = _follow(expr)
    length.update({a.name: length[follow[a.name]] if a.name in follow else a.extent
                   for a in expr.local_axes})

    def size(axes: frozenset) -> int:
        return math.prod(length.get(a, 1) for a in axes)

    def visit(node: Expr) -> tuple[frozenset, int]:
        op = node["op"]
        if op == "load":
            return frozenset(a for i in node["index"] for a, _ in i.get("terms", ())), 0
        if op == "axis":
            return frozenset([node["axis"]]), 0
        if op in ("const", "result"):
            return frozenset(), 0
        free, ops = frozenset(), 0
        for arg in node.get("args", ()):
            f, o = visit(arg)
            free, ops = free | f, ops + o
        if op == "cast":
            return free, ops
        if op == "reduce":  # one combine per evaluated element
            return free - frozenset(node["axes"]), ops + size(free)
        return free, ops + size(free)

    _, ops = visit(expr.body)
    top = math.prod(length[a.name] for a in expr.axes)
    return max(ops, top)


class LocalReductionTemplate(ComputeTemplate):
    """Vector work with core-local reductions (softmax, layer norm): hoisted row statistics."""

    def subtask_cycles(self, expr: TensorExpr, chunk: Mapping[str, int], hw: HardwareSpec) -> float:
        return hoisted_ops(expr, chunk) / hw.vector_flops_per_cycle

    def flops(self, expr: TensorExpr, chunk: Mapping[str, int]) -> int:
        return hoisted_ops(expr, chunk)


class MatrixTemplate(ComputeTemplate):
    """A sum of products on the matrix unit, padded to its tile shape (T10 §4.3.1 padding), at
    the rate of the operands' dtype (:func:`matrix_flops_per_cycle`)."""

    unit = "matrix"

    def subtask_cycles(self, expr: TensorExpr, chunk: Mapping[str, int], hw: HardwareSpec) -> float:
        roles = contraction_roles(expr)
        size = {r: math.prod(int(chunk.get(a, expr.extent(a))) for a in axes)
                for r, axes in (("b", roles.batch), ("m", roles.m), ("n", roles.n), ("k", roles.k))}
        tm, tk, tn = hw.matrix_tile
        macs = size["b"] * round_up(size["m"], tm) * round_up(size["k"], tk) * round_up(size["n"], tn)
        return 2 * macs / matrix_flops_per_cycle(expr, hw)

    def flops(self, expr: TensorExpr, chunk: Mapping[str, int]) -> int:
        return 2 * self.points(expr, chunk)
