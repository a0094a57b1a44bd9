"""The op kinds a device program may hold.

An operator's kind (:attr:`runtime_sim.contract.expr.TensorExpr.kind`) names the per-core
template that computes it: how one core computes its sub-task of a compute-shift step (T10
§4.4, the ``compute`` interface) -- on the matrix unit for a sum of products (``matmul``,
``conv2d``), on the vector unit otherwise (``depthwise_conv2d``, ``elementwise``, ``reduce``,
and ``softmax`` / ``layer_norm`` with their core-local row statistics), and ``attention``,
the fused ``softmax(score) @ value`` whose scores never leave a core (both units: the two
products on the matrix unit, the online softmax on the vector unit).

The list lives in the contract because both sides depend on it: the compiler's templates
(the package ``schedules``) register against it -- building their registry refuses a
template of any other kind -- and :func:`runtime_sim.contract.validation.validate_program`
refuses an operator of any other kind. The contract itself therefore never needs to import
the templates.
"""

from __future__ import annotations

__all__ = ["OP_KINDS"]

#: Every op kind a device program may hold, in the order error messages list them.
OP_KINDS: tuple[str, ...] = (
    "matmul",
    "conv2d",
    "depthwise_conv2d",
    "elementwise",
    "reduce",
    "softmax",
    "layer_norm",
    "attention",
)
