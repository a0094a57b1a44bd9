"""Embedding lookups on the chip: ``relax.take`` of a float table by integer ids.

An embedding lookup (ONNX ``Gather`` on a float table, which TVM's importer turns into
``relax.take(table, ids, axis)`` after normalizing negative ids on the host with
``where(ids < 0, ids + n, ids)``) computes nothing: every core that owns a block of the output
receives the table rows its ids pick. No affine index map says which rows, so the program
format has a data-dependent index for it, :class:`runtime_sim.contract.expr.Gather`: the table is
read through its *gathered view* ``take(table, ids, axis)``, whose blocks the planner
partitions like any tensor, and which the device and the timing simulator fill from the rows
the ids pick (:func:`runtime_sim.contract.relayout.gather_relayout`).

The tensor expression comes from TVM's own TE of the op (topi ``take``, captured by
:func:`tvm_icca.ops.te_capture.compose_te`): ``out[.., i.., ..] = table[.., g(ids[i..]), ..]``
with ``g`` the identity (mode ``"fast"``), ``min(max(0, .), n - 1)`` (``"clip"``) or
``truncmod(truncmod(., n) + n, n)`` (``"wrap"``). The mode is carried into the program and
the device applies it (:func:`runtime_sim.contract.expr.gather_rows`). Integer arithmetic on the
ids (the importer's negative-id normalization, shape arithmetic) stays on the host.
"""

from __future__ import annotations

from typing import Any, Callable

import tvm
from tvm import relax, te, tirx
from tvm.relax.backend.pattern_registry import Pattern
from tvm.relax.dpl.pattern import is_op, wildcard
from tvm.relax.transform import PatternCheckContext

from runtime_sim.contract.expr import AffineIndex, Axis, Gather, TensorAccess, TensorExpr, make_load
from runtime_sim.contract.hardware import INDEX_DTYPES, check_dtype
from tvm_icca.ops.extracted_op import ExtractedOp
from tvm_icca.ops.te_capture import ComposedTE
from tvm_icca.ops.te_capture import ffi_key as _key

__all__ = ["GATHER_OPS", "gather_op", "take_pattern", "take_reason"]

#: Gather ops that run on the chip: pattern suffix -> Relax op.
GATHER_OPS: dict[str, str] = {"take": "relax.take"}

#: topi's out-of-range modes the device implements (``"nan"`` is not one).
_MODES = ("fast", "clip", "wrap")


def take_reason(call: relax.Call) -> str | None:
    """Why a ``relax.take`` cannot run on the chip, or ``None`` if it can (dtypes and static
    shapes are checked with every other op's operands)."""
    if call.attrs.axis is None:
        return "take without an axis (of a flattened tensor) is not offloaded"
    mode = str(call.attrs.mode)
    if mode not in _MODES:
        return f"take with mode '{mode}' (offloaded: {', '.join(_MODES)})"
    ids = call.args[1]
    if str(ids.ty.dtype) not in INDEX_DTYPES:
        return f"take with {ids.ty.dtype} ids (the chip reads {', '.join(INDEX_DTYPES)} ids)"
    return None


def take_pattern(prefix: str, check: Callable[[PatternCheckContext], bool]) -> Pattern:
    """``<prefix>.take``: one embedding lookup per composite, accepted by ``check`` (the pattern
    table's operand check, :mod:`tvm_icca.partition.patterns`)."""
    table, ids = wildcard(), wildcard()
    root = is_op("relax.take")(table, ids)
    return (f"{prefix}.take", root, {"table": table, "ids": ids, "root": root}, check)


# -- TE -> TensorExpr -------------------------------------------------------------------------
def _is_load(e: Any) -> bool:
    return isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "te.tensor_load"


def _strip_cast(e: Any) -> Any:
    while isinstance(e, tirx.Cast):
        e = e.value
    return e


def _int(e: Any) -> int | None:
    e = _strip_cast(e)
    return int(e.value) if isinstance(e, tirx.IntImm) else None


def _row_index(e: Any, rows: int) -> tuple[Any, str] | None:
    """``(ids load, mode)`` when ``e`` is topi take's index expression for that mode."""
    e = _strip_cast(e)
    if _is_load(e):
        return e, "fast"
    # clip: min(max(0, ids[..]), n - 1)
    if isinstance(e, tirx.Min) and _int(e.b) == rows - 1:
        inner = _strip_cast(e.a)
        if isinstance(inner, tirx.Max):
            for zero, load in ((inner.a, inner.b), (inner.b, inner.a)):
                if _int(zero) == 0 and _is_load(_strip_cast(load)):
                    return _strip_cast(load), "clip"
    # wrap: truncmod(truncmod(ids[..], n) + n, n)
    if isinstance(e, tirx.Mod) and _int(e.b) == rows:
        add = _strip_cast(e.a)
        if isinstance(add, tirx.Add) and _int(add.b) == rows:
            inner = _strip_cast(add.a)
            if isinstance(inner, tirx.Mod) and _int(inner.b) == rows and _is_load(_strip_cast(inner.a)):
                return _strip_cast(inner.a), "wrap"
    return None


def gather_op(func: relax.Function, composed: ComposedTE, name: str = "out") -> ExtractedOp | None:
    """The :class:`~tvm_icca.ops.extracted_op.ExtractedOp` of a function whose TE is one take
    (``out[..] = table[.., g(ids[..]), ..]``), or ``None`` when it is something else."""

    out = composed.output
    op = out.op
    if not isinstance(op, te.ComputeOp) or len(op.body) != 1 or not _is_load(op.body[0]):
        return None
    load = op.body[0]
    table, index = load.args[0], list(load.args[1:])
    params = {_key(ph.op): i for i, ph in enumerate(composed.placeholders)}
    consts = {_key(ph.op): value for ph, value in composed.constants}
    axis_of = {_key(iv.var): d for d, iv in enumerate(op.axis)}
    found = [(d, _row_index(i, int(table.shape[d]))) for d, i in enumerate(index)]
    gathered = [(d, r) for d, r in found if r is not None]
    if len(gathered) != 1:
        return None
    axis, (ids_load, mode) = gathered[0]
    ids = ids_load.args[0]
    k = len(ids_load.args) - 1
    # the take map exactly: ids read at output dims axis..axis+k-1, the table at the others
    expected_ids = list(range(axis, axis + k))
    expected_table = [d for d in range(len(op.axis)) if d not in expected_ids]

    def dim(e: Any) -> int | None:
        e = _strip_cast(e)
        return axis_of.get(_key(e)) if isinstance(e, tvm.ir.Var) else None

    if [dim(i) for i in ids_load.args[1:]] != expected_ids:
        return None
    if [dim(i) for d, i in enumerate(index) if d != axis] != expected_table:
        return None
    for t in (table, ids):
        if not isinstance(t.op, te.PlaceholderOp) or (_key(t.op) not in params and _key(t.op) not in consts):
            return None
    check_dtype(str(table.dtype), f"input '{table.op.name}'")
    check_dtype(str(ids.dtype), f"input '{ids.op.name}'", index=True)
    names = [iv.var.name for iv in op.axis]
    shape = tuple(int(s) for s in out.shape)
    view = tuple(AffineIndex.of_axis(a) for a in names)
    table_name = func.params[params[_key(table.op)]].name if _key(table.op) in params else "const"
    ids_name = func.params[params[_key(ids.op)]].name if _key(ids.op) in params else "const"
    expr = TensorExpr(
        kind="elementwise",
        axes=tuple(Axis(a, n) for a, n in zip(names, shape)),
        inputs=(
            TensorAccess(table_name, tuple(int(s) for s in table.shape), str(table.dtype), view,
                         Gather(ids=1, axis=axis, mode=mode)),
            TensorAccess(ids_name, tuple(int(s) for s in ids.shape), str(ids.dtype),
                         view[axis:axis + k]),
        ),
        output=TensorAccess(name, shape, str(out.dtype), view),
        body=make_load(0, view),
    )
    sources = (table, ids)
    return ExtractedOp(
        expr=expr,
        param_of_input=tuple(params.get(_key(t.op)) for t in sources),
        constants={i: consts[_key(t.op)] for i, t in enumerate(sources) if _key(t.op) in consts},
    )
