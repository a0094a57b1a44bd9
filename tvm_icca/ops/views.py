"""View operators on the chip: reshape, flatten, permute_dims, expand_dims, squeeze, broadcast_to.

A view op moves data without computing: on an ICCA chip it is a re-layout between the
placement its producer leaves and the placement its consumer needs, the same operation the
device performs between any two operators (:func:`runtime_sim.contract.relayout.relayout`) with a
different index map. Each view op offloaded on its own becomes a copy
:class:`~runtime_sim.contract.expr.TensorExpr` (elementwise, body = one load) whose index maps
come from TVM's own TE of the op (:mod:`tvm_icca.lower.te_to_expr`):

* ``permute_dims``, ``expand_dims``, ``squeeze`` and ``broadcast_to`` read their input
  through plain (or constant) axes: ``out[b, h, s, d] = in[b, s, h, d]``.
* A reshape that splits a dimension reads a compound index of the finer axes (T10 §5):
  ``out[b, s, h, d] = in[b, s, h*D + d]``.
* A reshape that merges dimensions iterates over the finer axes as well and *writes* the
  merged dimension through a compound index: ``out[b, s, h*D + d] = in[b, s, h, d]``
  (:func:`runtime_sim.contract.expr.merged_axes`). The layout contract keeps the inner axes of a
  merged dimension whole on every core (:func:`runtime_sim.contract.plan_rules.pinned_axes`), so each
  core's output is one contiguous block of the merged dimension.

Both reshape forms iterate over the *atoms* of the reshape (:func:`reshape_atoms`): the
coarsest dimensions of which both the input and the output dimensions are row-major
products. A reshape without them (``[6, 4] -> [4, 6]``: the 4 elements of an output row
straddle two input rows) is not a re-layout of blocks and stays on the host, with that
reason in the partition report.
"""

from __future__ import annotations

from typing import Sequence

import tvm
from tvm import relax

from tvm_icca.ops.relax_types import static_shape

__all__ = ["RESHAPE_OPS", "VIEW_OPS", "output_atoms", "reshape_atoms", "view_reason"]

#: View ops offloaded on their own: pattern suffix -> Relax op. ONNX Reshape, Flatten,
#: Transpose, Unsqueeze, Squeeze and Expand import as these (TVM's ONNX frontend).
VIEW_OPS: dict[str, str] = {
    "reshape": "relax.reshape",
    "flatten": "relax.flatten",
    "permute_dims": "relax.permute_dims",
    "expand_dims": "relax.expand_dims",
    "squeeze": "relax.squeeze",
    "broadcast_to": "relax.broadcast_to",
}

#: The view ops that re-read a row-major order under another shape.
RESHAPE_OPS: frozenset[str] = frozenset({"relax.reshape", "relax.flatten"})


def reshape_atoms(src: Sequence[int], dst: Sequence[int]) -> tuple[tuple[int, ...], ...] | None:
    """Per dimension of ``dst``, the extents of its atoms (outermost first), or ``None``.

    Atoms are the dimensions of the finest shape both ``src`` and ``dst`` are row-major
    merges of. They exist exactly when the strides of the two shapes (the products of the
    dimensions inside each one) form one chain under divisibility; the atoms are then the
    ratios of consecutive strides. A unit dimension of ``dst`` has one atom of extent 1.
    """
    src, dst = [int(s) for s in src], [int(s) for s in dst]
    total = 1
    for s in src:
        total *= s
    if total != _product(dst) or total == 0:
        return None
    strides = sorted(set(_strides(src)) | set(_strides(dst)))
    if any(b % a for a, b in zip(strides, strides[1:])):
        return None
    atoms = []
    for d, extent in enumerate(dst):
        inner = _product(dst[d + 1:])
        if extent == 1:
            atoms.append((1,))
            continue
        cuts = [s for s in strides if inner <= s <= inner * extent]
        atoms.append(tuple(b // a for a, b in zip(cuts[-2::-1], cuts[:0:-1])))
    return tuple(atoms)


def output_atoms(func: relax.Function) -> tuple[tuple[int, ...], ...] | None:
    """Atoms of the output dimensions of ``func`` when its result is a reshape, else ``None``.

    :mod:`tvm_icca.lower.te_to_expr` iterates a reshape over these axes, which turns the
    div/mod of TVM's reshape TE into affine indices.
    """
    call = _result_call(func)
    if call is None or _op_name(call) not in RESHAPE_OPS:
        return None
    src, dst = static_shape(call.args[0].ty), static_shape(call.ty)
    if src is None or dst is None:
        return None
    return reshape_atoms(src, dst)


def view_reason(call: relax.Call) -> str | None:
    """Why the view op ``call`` cannot be a re-layout on the chip, or ``None`` if it can."""
    if _op_name(call) not in RESHAPE_OPS:
        return None
    src, dst = static_shape(call.args[0].ty), static_shape(call.ty)
    if src is None or dst is None:
        return "reshape with a dynamic shape"
    if reshape_atoms(src, dst) is None:
        return (
            f"reshape {list(src)} -> {list(dst)} neither splits nor merges whole dimensions "
            "(an output row straddles input rows), so it is not a re-layout of blocks"
        )
    return None


# -- helpers ----------------------------------------------------------------------------------
def _product(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _strides(shape: Sequence[int]) -> list[int]:
    """The row-major strides of ``shape`` and its total size: every ``prod(shape[d:])``."""
    return [_product(shape[d:]) for d in range(len(shape) + 1)]


def _op_name(call: relax.Call) -> str:
    return call.op.name if isinstance(call.op, tvm.ir.Op) else str(call.op)


def _result_call(func: relax.Function) -> relax.Call | None:
    """The call whose value ``func`` returns (through its dataflow output), if any."""
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return None
    result = body.body
    bound = {b.var: b.value for block in body.blocks for b in block.bindings}
    while isinstance(result, relax.Var) and result in bound:
        result = bound[result]
    return result if isinstance(result, relax.Call) else None
