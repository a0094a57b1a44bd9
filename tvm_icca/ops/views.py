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

* A repeat (``relax.repeat``, each element ``r`` times along an axis: nearest upsampling by an
  integer factor) reads ``x[.., h // r, ..]``. It iterates its repeated dimension over the
  atoms ``(H, r)`` and writes it through the compound index ``h0*r + h1``; TVM's simplifier,
  which knows the ranges of ``h0`` and ``h1``, turns ``(h0*r + h1) // r`` into ``h0``, an
  affine read. The repeats of two axes (a nearest 2-D upsampling,
  :mod:`tvm_icca.frontend.resize_rewrites`) are one composite, :func:`repeat_pattern`: one
  re-layout writes the output once.

Both reshape forms iterate over the *atoms* of the reshape (:func:`reshape_atoms`): the
coarsest dimensions of which both the input and the output dimensions are row-major
products. A reshape without them (``[6, 4] -> [4, 6]``: the 4 elements of an output row
straddle two input rows) is not a re-layout of blocks and stays on the host, with that
reason in the partition report.
"""

from __future__ import annotations

from typing import Callable, Sequence

import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import Pattern
from tvm.relax.dpl.pattern import is_op, wildcard
from tvm.relax.transform import PatternCheckContext

from tvm_icca.ops.relax_types import static_shape

__all__ = ["RESHAPE_OPS", "VIEW_OPS", "output_atoms", "repeat_atoms", "repeat_pattern",
           "reshape_atoms", "view_reason"]

#: View ops offloaded on their own: pattern suffix -> Relax op. ONNX Reshape, Flatten,
#: Transpose, Unsqueeze, Squeeze and Expand import as these (TVM's ONNX frontend).
VIEW_OPS: dict[str, str] = {
    "reshape": "relax.reshape",
    "flatten": "relax.flatten",
    "permute_dims": "relax.permute_dims",
    "expand_dims": "relax.expand_dims",
    "squeeze": "relax.squeeze",
    "broadcast_to": "relax.broadcast_to",
    "repeat": "relax.repeat",
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


def repeat_atoms(shape: Sequence[int], repeats: Sequence[tuple[int, int]]) -> tuple[tuple[int, ...], ...]:
    """Per output dimension, its atoms after ``repeats`` (``(repeats, axis)`` pairs, applied
    in order) of a tensor of ``shape``: a dimension of extent ``n`` repeated ``r`` then ``s``
    times has the atoms ``(n, r, s)``, outermost first, and is read at its outermost atom."""
    atoms = [(int(n),) for n in shape]
    for r, axis in repeats:
        atoms[axis] = atoms[axis] + (int(r),)
    return tuple(atoms)


def _repeats(call: relax.Call, bound: dict) -> tuple[relax.Expr, list[tuple[int, int]]] | None:
    """The data under a chain of repeats ending in ``call`` (through the bindings ``bound``)
    and the chain's ``(repeats, axis)``, innermost first; ``None`` if a repeat has no axis."""
    chain: list[tuple[int, int]] = []
    while isinstance(call, relax.Call) and _op_name(call) == "relax.repeat":
        data = call.args[0]
        if call.attrs.axis is None or static_shape(data.ty) is None:
            return None
        chain.append((int(call.attrs.repeats), int(call.attrs.axis) % len(static_shape(data.ty))))
        call = bound.get(data, data)
    return call, chain[::-1]


def output_atoms(func: relax.Function) -> tuple[tuple[int, ...], ...] | None:
    """Atoms of the output dimensions of ``func`` when its result is a reshape or a chain of
    repeats, else ``None``.

    :mod:`tvm_icca.lower.te_to_expr` iterates such an op over these axes, which turns the
    div/mod of TVM's reshape TE and the floordiv of its repeat TE into affine indices.
    """
    call = _result_call(func)
    if call is not None and _op_name(call) == "relax.repeat":
        body = func.body
        bound = {b.var: b.value for block in body.blocks for b in block.bindings}
        chain = _repeats(call, bound)
        if chain is None:
            return None
        data, repeats = chain
        return repeat_atoms(static_shape(data.ty), repeats)
    if call is None or _op_name(call) not in RESHAPE_OPS:
        return None
    src, dst = static_shape(call.args[0].ty), static_shape(call.ty)
    if src is None or dst is None:
        return None
    return reshape_atoms(src, dst)


def view_reason(call: relax.Call) -> str | None:
    """Why the view op ``call`` cannot be a re-layout on the chip, or ``None`` if it can."""
    if _op_name(call) == "relax.repeat" and call.attrs.axis is None:
        return "repeat without an axis (of the flattened tensor) is not offloaded"
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


def repeat_pattern(prefix: str, check: Callable[[PatternCheckContext], bool]) -> Pattern:
    """``<prefix>.repeat_twice``: a repeat of a repeat (both axes of a nearest upsampling) as
    one re-layout, accepted by ``check`` (the pattern table's operand check,
    :mod:`tvm_icca.partition.patterns`)."""
    data = wildcard()
    inner = is_op("relax.repeat")(data)
    root = is_op("relax.repeat")(inner)
    return (f"{prefix}.repeat_twice", root, {"data": data, "inner": inner, "root": root}, check)


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
