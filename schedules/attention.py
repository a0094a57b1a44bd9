"""Fused attention on one core: scores, online softmax and the weighted sum of one key block.

The sub-task of a step (kind ``"attention"``, :class:`runtime_sim.contract.expr.TensorExpr`)
takes a core's rows of queries and a block of keys and values
(:mod:`runtime_sim.functional.attention_step` computes it):

* matrix unit: the scores ``Q K^T`` (per batch position, ``i x k`` by ``k x j``) and the
  weighted sum ``P V`` (``i x j`` by ``j x d``), each padded to the unit's tile as every
  GEMM (T10 §4.3.1), at the operands' dtype rate (:func:`schedules.base.matrix_flops_per_cycle`);
* vector unit, per score: the elementwise score expression around the dot product (scale,
  soft-cap, mask, causal select: one operation per arithmetic node,
  :func:`score_elementwise_ops`), then the online softmax's max, subtract, exponential and
  sum (:data:`SOFTMAX_OPS_PER_SCORE`); per row: the new running max, the correction
  ``exp(m - m')`` and the running sum's update (:data:`SOFTMAX_OPS_PER_ROW`); per output
  element: rescaling the running output (:data:`RESCALE_OPS_PER_OUTPUT`).

The two units are charged one after the other, as the GEMM templates and the vector
templates are (a step's dependency chain: scores, then softmax, then ``P V``). After the
steps, the epilogue divides each output element by its row's sum (one operation) before any
epilogue of the expression's own.
"""

from __future__ import annotations

import math
from typing import Mapping

from runtime_sim.contract.expr import Expr, TensorExpr, attention_roles, walk_expr
from runtime_sim.contract.hardware import HardwareSpec
from schedules.base import ComputeTemplate, arithmetic_nodes, matrix_flops_per_cycle, round_up

#: Vector operations per score of the online softmax: the block max, ``s - m'``, ``exp``
#: and the block sum (Milakov & Gimelshein 2018, Algorithm 3 per element).
SOFTMAX_OPS_PER_SCORE = 4
#: Vector operations per row and step: ``m' = max(m, block max)``, ``m - m'``,
#: ``exp(m - m')``, ``l * exp(m - m')`` and ``+ block sum``.
SOFTMAX_OPS_PER_ROW = 5
#: Vector operations per running output element and step: ``o * exp(m - m')`` and ``+ P V``.
RESCALE_OPS_PER_OUTPUT = 2
#: Vector operations per output element after the steps: ``o / l``.
NORMALIZE_OPS = 1


def score_elementwise_ops(expr: TensorExpr) -> int:
    """Vector operations per score around the dot product: the arithmetic nodes of the
    score outside its core-local reduction (which the matrix unit computes)."""
    def outside(node: Expr) -> Expr:
        if node["op"] == "reduce":
            return {"op": "const", "value": 0.0}
        return {**node, "args": [outside(a) for a in node.get("args", ())]}

    return arithmetic_nodes(outside(expr.body["args"][0]))


def _sizes(expr: TensorExpr, chunk: Mapping[str, int]) -> dict[str, int]:
    """Per role, the product of the chunk's lengths: batch (rows the value reads too),
    query rows, keys, features and the head dimension."""
    roles = attention_roles(expr)
    value_axes = {a for n in walk_expr(expr.body["args"][1]) if n["op"] == "load"
                  for i in n["index"] for a, _ in i.get("terms", ())}
    length = {a.name: int(chunk.get(a.name, a.extent)) for a in expr.axes}
    return {
        "b": math.prod(length[a] for a in roles.rows if a in value_axes),
        "i": math.prod(length[a] for a in roles.rows if a not in value_axes),
        "j": length[roles.key],
        "d": math.prod(length[a] for a in roles.features),
        "k": math.prod(a.extent for a in expr.local_axes),
    }


class AttentionTemplate(ComputeTemplate):
    """One key block of fused attention on a core: two GEMMs and the online softmax."""

    kind = "attention"
    unit = "matrix"

    def matrix_cycles(self, expr: TensorExpr, chunk: Mapping[str, int], hw: HardwareSpec) -> float:
        """Cycles of the two products of a step, padded to the matrix unit's tile."""
        n = _sizes(expr, chunk)
        tm, tk, tn = hw.matrix_tile
        rows = round_up(n["i"], tm)
        macs = n["b"] * rows * (round_up(n["k"], tk) * round_up(n["j"], tn)
                                + round_up(n["j"], tk) * round_up(n["d"], tn))
        return 2 * macs / matrix_flops_per_cycle(expr, hw)

    def vector_ops(self, expr: TensorExpr, chunk: Mapping[str, int]) -> int:
        """Vector operations of a step: the scores' elementwise tail and online softmax, the
        rows' statistics, the running output's rescale."""
        n = _sizes(expr, chunk)
        rows = n["b"] * n["i"]
        return (rows * n["j"] * (score_elementwise_ops(expr) + SOFTMAX_OPS_PER_SCORE)
                + rows * SOFTMAX_OPS_PER_ROW + rows * n["d"] * RESCALE_OPS_PER_OUTPUT)

    def subtask_cycles(self, expr: TensorExpr, chunk: Mapping[str, int], hw: HardwareSpec) -> float:
        return self.matrix_cycles(expr, chunk, hw) + self.vector_ops(expr, chunk) / hw.vector_flops_per_cycle

    def epilogue_cycles(self, expr: TensorExpr, partition: Mapping[str, int], hw: HardwareSpec) -> float:
        """``o / l`` and the expression's own epilogue over one output partition."""
        ops = NORMALIZE_OPS + arithmetic_nodes(expr.epilogue)
        n = math.prod(int(partition.get(a.name, a.extent)) for a in expr.axes if not a.reduce)
        return n * ops / hw.vector_flops_per_cycle

    def flops(self, expr: TensorExpr, chunk: Mapping[str, int]) -> int:
        """The two products' FLOPs over ``chunk``: :meth:`TensorExpr.flops` for the whole
        operator (``chunk`` empty)."""
        n = _sizes(expr, chunk)
        return 2 * n["b"] * n["i"] * n["j"] * (n["k"] + n["d"])
