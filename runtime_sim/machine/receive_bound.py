"""What an execution of a product must receive over links, at least: the receive side of the
execution/preload trade-off of Elk §2.2-3.3 (every core holding a weight block is reached by
the activation broadcast, and a block of part of the reduction axis takes part in summing
the partial results).

Shared by the timing simulator's execution bound
(:func:`runtime_sim.timing.floors.execute_bound_seconds`) and the compiler's test of whether
a region's executions can outlast its HBM reads
(:func:`tvm_icca.model_pass.region_plans.compute_bound`), so both read one formula.
"""

from __future__ import annotations

import math

from runtime_sim.contract.expr import TensorExpr, dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec

__all__ = ["block_receive_bytes", "receive_bound_seconds", "weight_receive_bytes"]


def block_receive_bytes(rows: int, k: int, cols: int, cores: int, in_bytes: int = 2,
                        out_bytes: int = 2) -> float:
    """Least bytes a core receives in a product ``[rows, k] x [k, cols]`` whose right operand
    (the weight) is spread over ``cores`` in equal blocks ``dk x dn``, one copy of each
    element (``dk dn = k cols / cores``), over every block shape.

    A core holding a block must receive the ``rows x dk`` slice of the left operand it
    multiplies (``in_bytes`` each) and, when ``dk < k``, take part in summing the
    ``k / dk`` partial ``rows x dn`` results of its column group: at least one partial per
    core (``out_bytes`` each). With ``A = k cols / cores``, the bytes
    ``f(dk) = in rows dk + out rows A / dk`` are least at ``dk* = sqrt(out A / in)`` (clamped
    to ``[A / cols, k]``), ``2 rows sqrt(in out A)``; a block of whole columns (``dk = k``)
    needs no partial sums and receives ``in rows k``. The result is the smaller; blocks of
    integer sides can only receive more. Fewer cores only enlarge the blocks, so a plan on
    part of the chip receives at least this too.

    It is not a floor of every plan: a plan that copies weight blocks at preload time
    (Elk §3.3) trades these bytes for preload bytes, so the resource floors
    (:func:`runtime_sim.timing.floors.resource_floors`) do not count it.
    """
    if min(rows, k, cols, cores) <= 0:
        return 0.0
    area = k * cols / min(cores, k * cols)
    whole = float(in_bytes * rows * k)
    dk = min(max(math.sqrt(out_bytes * area / in_bytes), area / cols), k)
    split = in_bytes * rows * dk + out_bytes * rows * area / dk
    return min(whole, split)


def weight_receive_bytes(expr: TensorExpr, cores: int) -> float | None:
    """:func:`block_receive_bytes` of a sum of products whose two operands share no spatial
    axis (``x[b, k] @ w[k, n]``: a layer's weight times its activations), with whichever
    operand is held in blocks receiving the least (the weight, for a decode step); ``None``
    for anything else (attention's per-sequence products, elementwise operators)."""
    body = [t for i, t in enumerate(expr.inputs) if i not in expr.epilogue_inputs]
    if expr.kind != "matmul" or len(body) != 2 or not expr.reduce_axes:
        return None
    reduce = set(expr.reduce_axes)
    spatial = [set(t.axes) - reduce for t in body]
    if spatial[0] & spatial[1] or not all(set(t.axes) & reduce for t in body):
        return None
    size = [math.prod(expr.extent(a) for a in s) for s in spatial]
    k = math.prod(expr.extent(a) for a in reduce)
    out = dtype_bytes(expr.output.dtype)
    return min(block_receive_bytes(size[1 - held], k, size[held], cores,
                                   dtype_bytes(body[1 - held].dtype), out) for held in (0, 1))


def receive_bound_seconds(expr: TensorExpr, hw: HardwareSpec) -> float:
    """Least seconds an execution of ``expr`` spends receiving, under plans that keep one copy
    of its weight spread over the cores of ``hw``: :func:`weight_receive_bytes` at one core's
    ``link_bandwidth`` (an operator's steps compute and then exchange, bulk-synchronous, so
    this adds to its compute); 0 for operators without a weight operand."""
    received = weight_receive_bytes(expr, hw.num_cores) or 0.0
    return received / hw.link_bandwidth
