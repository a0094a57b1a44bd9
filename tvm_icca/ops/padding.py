"""Padding on the chip: ``relax.nn.pad`` in the modes constant, reflect and replicate (edge).

Padding computes nothing: every output element is an element of the input, or the pad value.
Like concat (:mod:`tvm_icca.ops.data_movement`) it is a re-layout whose index map TVM's own TE
gives (:mod:`tvm_icca.ops.te_capture`), converted by :mod:`tvm_icca.lower.te_to_expr`:

* constant: ``out[i] = x[i - b]`` inside the input's range, the pad value outside: a
  bounds-checked read; a zero pad is the plain read the device zero-fills (as a convolution's
  padding), any other value a select on the bounds, so a non-zero value stays exact;
* replicate (ONNX ``edge``): ``x[max(0, min(W-1, i - b))]``, and reflect:
  ``x[m - |m - |i - b||]`` with ``m = W-1``: piecewise affine, read as a select over the
  affine reads of the left border, the interior and the right border
  (:mod:`tvm_icca.lower.te_pieces`), each an ordinary access whose input box the layout
  clips to the input.

ONNX ``Pad`` reaches Relax as an opaque ``call_tir``; :class:`tvm_icca.frontend.pad_rewrites.RecognizePad`
turns it into ``relax.nn.pad`` first.
"""

from __future__ import annotations

from typing import Callable

from tvm import relax
from tvm.relax.backend.pattern_registry import Pattern
from tvm.relax.dpl.pattern import is_op, wildcard
from tvm.relax.transform import PatternCheckContext

from tvm_icca.ops.relax_types import static_shape

__all__ = ["PAD_MODES", "PAD_OPS", "pad_pattern", "pad_reason"]

#: Padding ops that run on the chip: pattern suffix -> Relax op.
PAD_OPS: dict[str, str] = {"pad": "relax.nn.pad"}

#: The ``relax.nn.pad`` modes whose TE is affine or piecewise affine (``circular``'s
#: ``floormod`` is neither).
PAD_MODES: frozenset[str] = frozenset({"constant", "reflect", "replicate"})


def pad_reason(call: relax.Call) -> str | None:
    """Why the pad ``call`` cannot run on the chip, or ``None`` if it can."""
    attrs = call.attrs
    mode = str(attrs.pad_mode)
    if mode not in PAD_MODES:
        return f"pad mode '{mode}' has no ICCA implementation (only {', '.join(sorted(PAD_MODES))})"
    widths = [int(w) for w in attrs.pad_width]
    if any(w < 0 for w in widths):
        return f"pad with negative widths {widths} (a crop) is not offloaded"
    padded = sum(1 for d in range(len(widths) // 2) if widths[2 * d] or widths[2 * d + 1])
    if mode != "constant" and padded > 1:
        return (f"{mode} pad of {padded} axes at once (one read of three affine pieces per axis; "
                "tvm_icca.frontend.pad_rewrites.per_axis_pads writes it as one pad per axis)")
    shape = static_shape(call.args[0].ty)
    if mode == "reflect" and shape is not None and any(
            max(widths[2 * d], widths[2 * d + 1]) >= n for d, n in enumerate(shape)):
        # topi's reflect index m - |m - |i - b|| folds once: wider pads read outside the input
        return f"reflect pad {widths} of shape {list(shape)}: a width is not smaller than its dimension"
    return None


def pad_pattern(prefix: str, check: Callable[[PatternCheckContext], bool]) -> Pattern:
    """``<prefix>.pad``: one ``relax.nn.pad``, accepted by ``check`` (the pattern table's
    operand check, :mod:`tvm_icca.partition.patterns`)."""
    data = wildcard()
    root = is_op("relax.nn.pad")(data)
    return (f"{prefix}.pad", root, {"data": data, "root": root}, check)
