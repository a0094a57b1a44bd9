"""Fused attention on one core: scores, online softmax and the weighted sum of one key block.

The sub-task of a step (kind ``"attention"``, :class:`runtime_sim.contract.expr.TensorExpr`)
takes a core's rows of queries and a block of keys and values
(:mod:`runtime_sim.functional.attention_step` computes it):

* matrix unit: the scores ``Q K^T`` (per batch position, ``i x k`` by ``k x j``) and the
  weighted sum ``P V`` (``i x j`` by ``j x d``), each padded to the unit's tile as every
  GEMM (T10 §4.3.1), at the operands' dtype rate (:func:`schedules.base.matrix_flops_per_cycle`);
* vector unit, per score: the elementwise score expression around the dot product
  (soft-cap, mask, causal select: one operation per arithmetic node, :func:`score_ops`;
  a constant scale is folded into the core's rows of Q, a node that does not read the key is
  run once per row), then the online softmax's max, subtract, exponential and sum
  (:data:`SOFTMAX_OPS_PER_SCORE`); per row: the new running max, the correction
  ``exp(m - m')`` and the running sum's update (:data:`SOFTMAX_OPS_PER_ROW`); per output
  element: rescaling the running output (:data:`RESCALE_OPS_PER_OUTPUT`).

The two units are charged one after the other, as the GEMM templates and the vector
templates are (a step's dependency chain: scores, then softmax, then ``P V``). After the
steps, the epilogue divides each output element by its row's sum (one operation) before any
epilogue of the expression's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from runtime_sim.contract.expr import Expr, TensorExpr, attention_roles, walk_expr
from runtime_sim.contract.hardware import HardwareSpec
from schedules.base import ComputeTemplate, arithmetic_nodes, matrix_flops_per_cycle

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


@dataclass(frozen=True)
class ScoreOps:
    """Vector operations of a score expression around its dot product, by how often a core
    runs them in a step (:func:`score_ops`)."""

    per_score: int  # depend on the key: once per (row, key) pair
    per_row: int  # independent of the key (a causal mask's ``i + offset``): once per row
    per_query: int  # a constant scale of the dot product, folded into the rows of Q (x k)


def score_ops(expr: TensorExpr) -> ScoreOps:
    """The arithmetic nodes of the score outside its core-local reduction (which the matrix
    unit computes), each charged as a row-wise kernel runs it: a node that does not read the
    key axis once per row (hoisted out of the key loop, as :func:`schedules.base.hoisted_ops`
    hoists), a constant multiplying the dot product once per element of the core's block of
    Q (``(c q) . k = c (q . k)``: Q stays on its core, so the kernel scales it, not every
    score), every other node once per score."""
    key = attention_roles(expr).key
    counts = {"per_score": 0, "per_row": 0, "per_query": 0}

    def visit(node: Expr) -> bool:
        """Count the nodes under ``node``; whether it reads the key axis."""
        op = node["op"]
        if op == "reduce":
            return True  # the dot product: on the matrix unit, per (row, key)
        if op == "load":
            return any(a == key for i in node["index"] for a, _ in i.get("terms", ()))
        if op == "axis":
            return node["axis"] == key
        args = node.get("args", ())
        keyed = [visit(a) for a in args]
        if arithmetic_nodes({"op": op}):
            folded = op == "mul" and len(args) == 2 and {a["op"] for a in args} == {"reduce", "const"}
            counts["per_query" if folded else "per_score" if any(keyed) else "per_row"] += 1
        return any(keyed)

    visit(expr.body["args"][0])
    return ScoreOps(**counts)


def role_sizes(expr: TensorExpr, length: Mapping[str, Any]) -> dict[str, Any]:
    """Per role, the product of the step's chunk lengths (``length``: axis -> an int, or an
    array of them for many plans at once): batch (rows the value reads too), query rows
    (the rest of the rows: ``i``, and a grouped-query head ``g``), keys, features and the
    head dimension (whole on a core)."""
    roles = attention_roles(expr)
    value_axes = {a for n in walk_expr(expr.body["args"][1]) if n["op"] == "load"
                  for i in n["index"] for a, _ in i.get("terms", ())}
    return {
        "b": math.prod((length[a] for a in roles.rows if a in value_axes), start=1),
        "i": math.prod((length[a] for a in roles.rows if a not in value_axes), start=1),
        "j": length[roles.key],
        "d": math.prod((length[a] for a in roles.features), start=1),
        "k": math.prod(a.extent for a in expr.local_axes),
    }


def _padded(n: Any, tile: int) -> Any:
    return -(-n // tile) * tile  # round up to the tile, for ints and integer arrays alike


def step_cycles(expr: TensorExpr, n: Mapping[str, Any], hw: HardwareSpec) -> Any:
    """Cycles of one step with role sizes ``n`` (:func:`role_sizes`; ints or arrays): the two
    products on the matrix unit, padded to its tile, then the vector work."""
    tm, tk, tn = hw.matrix_tile
    macs = n["b"] * _padded(n["i"], tm) * (_padded(n["k"], tk) * _padded(n["j"], tn)
                                           + _padded(n["j"], tk) * _padded(n["d"], tn))
    return 2 * macs / matrix_flops_per_cycle(expr, hw) + step_vector_ops(expr, n) / hw.vector_flops_per_cycle


def step_vector_ops(expr: TensorExpr, n: Mapping[str, Any]) -> Any:
    """The vector operations of one step with role sizes ``n`` (the module docstring): the
    score expression around the dot product, the online softmax and the rescaling."""
    rows = n["b"] * n["i"]
    score = score_ops(expr)
    return (rows * n["j"] * (score.per_score + SOFTMAX_OPS_PER_SCORE)
            + rows * (SOFTMAX_OPS_PER_ROW + score.per_row) + rows * n["k"] * score.per_query
            + rows * n["d"] * RESCALE_OPS_PER_OUTPUT)


class AttentionTemplate(ComputeTemplate):
    """One key block of fused attention on a core: two GEMMs and the online softmax."""

    kind = "attention"
    unit = "matrix"

    def subtask_cycles(self, expr: TensorExpr, chunk: Mapping[str, int], hw: HardwareSpec) -> float:
        length = {a.name: int(chunk.get(a.name, a.extent)) for a in expr.axes}
        return float(step_cycles(expr, role_sizes(expr, length), hw))

    def epilogue_cycles(self, expr: TensorExpr, partition: Mapping[str, int], hw: HardwareSpec) -> float:
        """``o / l`` and the expression's own epilogue over one output partition."""
        ops = NORMALIZE_OPS + arithmetic_nodes(expr.epilogue)
        n = math.prod(int(partition.get(a.name, a.extent)) for a in expr.axes if not a.reduce)
        return n * ops / hw.vector_flops_per_cycle

    def step_vector_flops(self, expr: TensorExpr, chunk: Mapping[str, int]) -> int:
        """The vector unit's operations in a sub-task over ``chunk`` beside its matrix FLOPs
        (:func:`step_vector_ops`: the online softmax)."""
        length = {a.name: int(chunk.get(a.name, a.extent)) for a in expr.axes}
        return int(step_vector_ops(expr, role_sizes(expr, length)))

    def flops(self, expr: TensorExpr, chunk: Mapping[str, int]) -> int:
        """The two products' FLOPs over ``chunk``: :meth:`TensorExpr.flops` for the whole
        operator (``chunk`` empty)."""
        n = role_sizes(expr, {a.name: int(chunk.get(a.name, a.extent)) for a in expr.axes})
        return 2 * n["b"] * n["i"] * n["j"] * (n["k"] + n["d"])
