"""Reading Relax tensor types: static shapes and sizes."""

from __future__ import annotations

from tvm import relax, tirx

from runtime_sim.contract.expr import tensor_bytes


def static_shape(ty: relax.Type) -> tuple[int, ...] | None:
    """The shape of a tensor type whose every dimension is a constant, else ``None``."""
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    if not all(isinstance(dim, tirx.IntImm) for dim in ty.shape.values):
        return None
    return tuple(int(dim) for dim in ty.shape.values)


def static_bytes(ty: relax.Type) -> int:
    """Bytes of a static tensor type (tuples summed); 0 for anything without a static size."""
    if isinstance(ty, relax.TupleType):
        return sum(static_bytes(field) for field in ty.fields)
    shape = static_shape(ty)
    return 0 if shape is None else tensor_bytes(shape, str(ty.dtype))
