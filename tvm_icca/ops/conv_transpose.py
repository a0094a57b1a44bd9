"""Transposed convolution (ONNX ``ConvTranspose``) on the chip, as the convolutions of its
output phases.

A transposed convolution of stride ``s``, dilation ``d``, padding ``pb``/``pe`` and output
padding ``op`` (ONNX operator specification, ConvTranspose) scatters every input element into
the output: along one spatial axis, with input length ``I`` and kernel length ``k``,

    ``y[o] = sum over (i, t) with i*s + t*d - pb = o of x[i] * w[t]``,
    ``o < O = s*(I-1) + d*(k-1) + 1 + op - pb - pe``.

It is written here, before partitioning, as convolutions the chip already runs
(:class:`ConvTransposeAsConvs`): the *sub-pixel (phase) decomposition*. The outputs
``o = s*q + r`` of one *phase* ``r`` (``0 <= r < s``) receive only the taps ``t`` with
``t*d = r + pb (mod s)``: with ``g = gcd(d, s)`` those are ``t0(r) + j*(s/g)``, and they read
``x[q - c(t)]`` with ``c(t) = (t*d - r - pb) / s``, which grows by ``d/g`` per tap. So phase
``r`` is an ordinary stride-1 convolution with dilation ``d/g`` of ``x`` with that phase's
taps in reverse order (the flipped kernel), padded by ``c(last tap)`` before and whatever
gives ``Q = ceil(O / s)`` rows after (a negative padding crops the input instead: the rows
it drops are read by no output). In 2-D the phases are the pairs ``(ry, rx)``. The phase
outputs, stacked on a phase axis, interleave into ``y`` by a depth-to-space re-layout
(reshape, transpose, reshape) and a slice to ``O`` rows, all view and data movement ops the
chip runs (:mod:`tvm_icca.ops.views`, :mod:`tvm_icca.ops.data_movement`).

Phases whose taps have the same count and the same offsets (``k = s`` and ``pb = 0``:
every phase, as in U-Net's up-convolutions) read the same input window and are *one*
convolution whose output channels are the phases' stacked kernels; a run of consecutive
phases that share them is one convolution. With ``d = 1`` an axis has at most four runs: the
first tap ``(r + pb) mod s`` wraps once over the phases, which changes the offset, and the tap
count ``ceil((k - t0) / s)`` changes at most once on either side of the wrap (FCN's
32x upsampling, ``k = 64, s = 32, p = 16``: two runs of 16 phases). A phase that no tap
reaches (``d*(k-1) + 1 < s``, or ``gcd(d, s) > 1``) is zero (a constant).

Why this formulation and not TVM's own TE (topi ``conv2d_transpose_nchw``: insert ``s - 1``
zeros between the input rows, pad, convolve with the flipped kernel): that convolution
multiplies every kernel tap with every position of the zero-inserted input, so ``s`` times
the multiply-adds per axis (``s_h * s_w`` in 2-D), all but one in ``s`` with a zero, and its
index ``x[i / s]`` under ``i % s == 0`` is not affine (T10 §5), so
:mod:`tvm_icca.lower.te_to_expr` cannot read it; written with ops the chip has, the zeros
would be a re-layout of the input into a tensor ``s_h * s_w`` times larger, before a
convolution ``s_h * s_w`` times costlier. The phase convolutions do exactly the
multiply-adds of the definition (each tap meets each input element once per output it
reaches) and are planned like any convolution; what they add is the interleave, one
re-layout of the output (where the zero-inserted form re-lays out its input into a tensor
as large as the output per channel). So there is nothing for the cost model to choose
between: the phases are never more work.

Group convolution (``group``, depthwise included) keeps its groups: the kernel
``[C, F/G, k...]`` becomes the conv kernel ``[F, C/G, k...]`` group by group, and the stacked
phases of one run sit inside each group (output channels ``(g, phase, f)``). ``bias`` stays
the elementwise add that follows (TVM's importer writes it so). Constant kernels are
rearranged once here in numpy; a kernel that is an input is rearranged by the same steps as
Relax ops (:class:`_Arrays`), which the chip also runs. Refused (the call stays on the host
and :func:`conv_transpose_reason` says why): layouts other than NCHW/IOHW (NCW/IOW) and
operands of different dtypes. TVM's ONNX importer drops ``output_shape`` and clamps a
negative ``SAME_*`` padding; :mod:`tvm_icca.frontend.onnx_conv_transpose` writes both as
the explicit pads the specification defines before the importer runs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import tvm
from tvm import relax

from tvm_icca.ops.relax_types import static_shape

__all__ = [
    "AxisPhases",
    "CONV_TRANSPOSE_OPS",
    "ConvTransposeAsConvs",
    "PhaseRun",
    "axis_phases",
    "conv_transpose_reason",
]

#: Transposed convolutions offloaded as the convolutions of their phases: pattern-style
#: name -> Relax op. (``conv3d_transpose`` has no ICCA implementation: nor has ``conv3d``.)
CONV_TRANSPOSE_OPS: dict[str, str] = {
    "conv1d_transpose": "relax.nn.conv1d_transpose",
    "conv2d_transpose": "relax.nn.conv2d_transpose",
}

# per op: (data layout, kernel layout) offloaded, and the convolution its phases are
_LAYOUTS: dict[str, tuple[str, str]] = {
    "relax.nn.conv1d_transpose": ("NCW", "IOW"),
    "relax.nn.conv2d_transpose": ("NCHW", "IOHW"),
}
_CONVS: dict[str, tuple[Callable[..., relax.Expr], str, str]] = {
    "relax.nn.conv1d_transpose": (relax.op.nn.conv1d, "NCW", "OIW"),
    "relax.nn.conv2d_transpose": (relax.op.nn.conv2d, "NCHW", "OIHW"),
}


def conv_transpose_reason(call: relax.Call) -> str | None:
    """Why the transposed convolution ``call`` cannot run on the chip, or ``None`` if it can
    (the operands' shapes and dtypes the chip holds are checked by the caller)."""
    name = call.op.name
    short = name.rsplit(".", 1)[-1]
    attrs = call.attrs
    data_layout, kernel_layout = _LAYOUTS[name]
    out_layout = attrs.out_layout or attrs.data_layout
    if (attrs.data_layout, attrs.kernel_layout, out_layout) != (data_layout, kernel_layout, data_layout):
        return (f"{short} layout {attrs.data_layout}/{attrs.kernel_layout}->{out_layout} (only "
                f"{data_layout} data, {kernel_layout} kernel and {data_layout} output are offloaded)")
    data, weight = call.args
    if data.ty.dtype != weight.ty.dtype:
        return f"{short} operands have different dtypes ({data.ty.dtype}, {weight.ty.dtype})"
    return None


# -- one spatial axis ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PhaseRun:
    """Consecutive output phases ``first .. first + count - 1`` of one axis that are one
    stride-1 convolution: the same number of taps at the same offsets.

    ``taps[p]`` are the kernel taps of phase ``first + p`` in the order the convolution reads
    them (the flipped kernel); empty for a phase no tap reaches (then the run is zeros).
    ``crop`` input rows are dropped at (begin, end) and ``pad`` zero rows added.
    """

    first: int
    count: int
    taps: tuple[tuple[int, ...], ...]
    dilation: int
    crop: tuple[int, int]
    pad: tuple[int, int]

    @property
    def empty(self) -> bool:
        """No tap reaches these phases: their outputs are zero."""
        return not self.taps[0]


@dataclass(frozen=True)
class AxisPhases:
    """The phase decomposition of one spatial axis of a transposed convolution."""

    stride: int
    out_size: int  # O: the transposed convolution's output length
    rows: int  # Q = ceil(O / stride): output rows per phase (the last phases may have one too many)
    runs: tuple[PhaseRun, ...]  # in phase order, covering 0 .. stride - 1


def axis_phases(size: int, kernel: int, stride: int, dilation: int, pad: tuple[int, int],
                output_padding: int) -> AxisPhases:
    """The phases of one axis of a transposed convolution (see the module docstring).

    Parameters
    ----------
    size, kernel : int
        Input length ``I`` and kernel length ``k``.
    stride, dilation : int
        ``s`` and ``d``, at least 1.
    pad : (int, int)
        ``pb`` and ``pe``, the padding ONNX removes from the output's two ends (negative
        values add zero rows, as an ``output_shape`` larger than the natural size asks).
    output_padding : int
        ``op``, rows added at the output's end.

    Returns
    -------
    AxisPhases
        The output length, the rows per phase and the runs of phases, in phase order.
    """
    pb, pe = pad
    out_size = stride * (size - 1) + dilation * (kernel - 1) + 1 + output_padding - pb - pe
    rows = -(-out_size // stride)
    conv_dilation = dilation // math.gcd(dilation, stride)  # input step between a phase's taps
    shapes = []
    for r in range(stride):
        taps = [t for t in range(kernel) if (t * dilation - r - pb) % stride == 0]
        if not taps:
            shapes.append(((), conv_dilation, (0, 0), (0, 0)))
            continue
        first = (taps[0] * dilation - r - pb) // stride  # x[q - first] meets the first tap
        last = (taps[-1] * dilation - r - pb) // stride
        before, after = last, rows - size - first
        crop = (max(0, -before), max(0, -after))
        if size - crop[0] - crop[1] <= 0:  # every tap falls outside the input: zeros
            shapes.append(((), conv_dilation, (0, 0), (0, 0)))
            continue
        shapes.append((tuple(reversed(taps)), conv_dilation, crop, (max(0, before), max(0, after))))
    runs: list[PhaseRun] = []
    for r, (taps, dil, crop, padding) in enumerate(shapes):
        prev = runs[-1] if runs else None
        if prev is not None and _same_window(prev, taps, crop, padding):
            runs[-1] = PhaseRun(prev.first, prev.count + 1, prev.taps + (taps,), dil, crop, padding)
        else:
            runs.append(PhaseRun(r, 1, (taps,), dil, crop, padding))
    return AxisPhases(stride, out_size, rows, tuple(runs))


def _same_window(run: PhaseRun, taps: tuple[int, ...], crop: tuple[int, int],
                 pad: tuple[int, int]) -> bool:
    """Whether a phase with ``taps``, ``crop`` and ``pad`` reads the window of ``run``'s
    phases, so that their kernels stack into one convolution."""
    return len(run.taps[0]) == len(taps) and run.crop == crop and run.pad == pad


# -- arrays: the kernel's rearrangement, once for numpy and for Relax -----------------------------
class _Arrays:
    """The few array steps a phase kernel is made with, on numpy arrays (a constant kernel,
    rearranged at compile time) or emitted as Relax ops (a kernel that is an input)."""

    def __init__(self, bb: relax.BlockBuilder | None) -> None:
        self.bb = bb

    def taps(self, w, axis: int, taps: Sequence[int]):
        """``w`` at ``taps`` (evenly spaced, descending or not) along ``axis``."""
        step = taps[1] - taps[0] if len(taps) > 1 else 1
        stop = taps[-1] + step
        if self.bb is None:
            index = [slice(None)] * w.ndim
            index[axis] = slice(taps[0], stop if stop >= 0 else None, step)
            return w[tuple(index)]
        extent = int(static_shape(w.ty)[axis])
        end = stop if stop >= 0 else -extent - 1  # a negative step runs past index 0
        return self.bb.emit(relax.op.strided_slice(w, axes=[axis], begin=[taps[0]], end=[end],
                                                   strides=[step]))

    def reshape(self, w, shape: Sequence[int]):
        if self.bb is None:
            return w.reshape(shape)
        return self.bb.emit(relax.op.reshape(w, list(shape)))

    def permute(self, w, axes: Sequence[int]):
        if self.bb is None:
            return w.transpose(axes)
        return self.bb.emit(relax.op.permute_dims(w, list(axes)))

    def stack(self, ws: list, axis: int):
        if len(ws) == 1:
            return self.reshape(ws[0], _inserted(_shape(ws[0]), axis, 1))
        if self.bb is None:
            return np.stack(ws, axis)
        expanded = [self.bb.emit(relax.op.expand_dims(w, axis)) for w in ws]
        return self.bb.emit(relax.op.concat(expanded, axis))

    def finish(self, w) -> relax.Expr:
        return relax.const(np.ascontiguousarray(w)) if self.bb is None else w


def _shape(w) -> tuple[int, ...]:
    return tuple(w.shape) if isinstance(w, np.ndarray) else static_shape(w.ty)


def _inserted(shape: Sequence[int], axis: int, extent: int) -> list[int]:
    return [*shape[:axis], extent, *shape[axis:]]


def _run_kernel(arrays: _Arrays, weight, groups: int, runs: Sequence[PhaseRun]):
    """The conv kernel ``[G * phases * F/G, C/G, taps...]`` of one combination of runs (one
    per axis) from the transposed kernel ``[C, F/G, k...]``: per phase, its taps along every
    axis, the input and output channels swapped within each group, the phases stacked."""
    c, f_group, *_ = _shape(weight)
    spatial = len(runs)
    kernels = []
    for phase in np.ndindex(*(run.count for run in runs)):
        w = weight
        for axis, (run, p) in enumerate(zip(runs, phase)):
            w = arrays.taps(w, 2 + axis, run.taps[p])
        taps = _shape(w)[2:]
        w = arrays.reshape(w, [groups, c // groups, f_group, *taps])
        kernels.append(arrays.permute(w, [0, 2, 1, *range(3, 3 + spatial)]))
    stacked = arrays.stack(kernels, 1)  # [G, phases, F/G, C/G, taps...]
    return arrays.finish(arrays.reshape(stacked, [-1, c // groups, *_shape(stacked)[4:]]))


# -- the rewrite --------------------------------------------------------------------------------
def ConvTransposeAsConvs(offload: Callable[[relax.Call], bool]) -> tvm.transform.Pass:  # noqa: N802
    """A pass writing every transposed convolution ``offload`` accepts as the convolutions
    of its output phases and their interleave (module docstring); the others are left for
    the host. The partitioner passes its judgement of the call on the chip it partitions
    for (:func:`tvm_icca.partition.patterns.unsupported_reason`)."""

    @tvm.transform.module_pass(opt_level=0, name="IccaConvTransposeAsConvs")
    def transform(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        updates = {}
        for gvar, func in mod.functions_items():
            if not isinstance(func, relax.Function) or (func.attrs or {}).get("Composite"):
                continue
            if not _calls_conv_transpose(func):
                continue
            updates[gvar] = relax.analysis.remove_all_unused(_Rewriter(mod, offload).visit_expr(func))
        for gvar, func in updates.items():
            mod[gvar] = func
        return mod

    return transform


def _calls_conv_transpose(func: relax.Function) -> bool:
    found = []

    def visit(node: relax.Expr) -> None:
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op) and node.op.name in _LAYOUTS:
            found.append(node)

    relax.analysis.post_order_visit(func.body, visit)
    return bool(found)


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, offload: Callable[[relax.Call], bool]) -> None:
        super().__init__(mod)
        self.offload = offload

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # noqa: N802
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name in _LAYOUTS and self.offload(call):
            return _phase_convolutions(self.builder_, call)
        return call


def _phase_convolutions(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``call`` (a transposed convolution the chip takes) as its phase convolutions,
    interleaved: the module docstring's decomposition."""
    data, weight = call.args
    attrs = call.attrs
    shape = static_shape(data.ty)
    kernel_shape = static_shape(weight.ty)
    spatial = len(shape) - 2
    groups = int(attrs.groups)
    batch, f = shape[0], kernel_shape[1] * groups
    pads = [int(p) for p in attrs.padding]
    axes = [axis_phases(shape[2 + a], kernel_shape[2 + a], int(attrs.strides[a]), int(attrs.dilation[a]),
                        (pads[a], pads[spatial + a]), int(attrs.output_padding[a]))
            for a in range(spatial)]
    conv, data_layout, kernel_layout = _CONVS[call.op.name]
    constant = isinstance(weight, tvm.ir.GenericConst)
    arrays = _Arrays(None if constant else bb)
    w = weight.value.numpy() if constant else weight
    dtype = str(call.ty.dtype)
    rows = [ax.rows for ax in axes]
    strides = [ax.stride for ax in axes]
    cropped: dict[tuple, relax.Expr] = {}

    def convolution(runs: tuple[PhaseRun, ...]) -> relax.Expr:
        """The outputs of the phases of one run per axis, ``[N, G * phases * F/G, Q...]``
        (channels ordered group, phases, channel in the group)."""
        phases = math.prod(run.count for run in runs)
        if any(run.empty for run in runs):
            return relax.const(np.zeros([batch, f * phases, *rows], dtype))
        crop = tuple(run.crop for run in runs)
        x = cropped.get(crop)
        if x is None:
            x = data
            if any(b or e for b, e in crop):
                x = bb.emit(relax.op.strided_slice(
                    data, axes=list(range(2, 2 + spatial)), begin=[b for b, _ in crop],
                    end=[shape[2 + a] - e for a, (_, e) in enumerate(crop)], strides=[1] * spatial))
            cropped[crop] = x
        kernel = _run_kernel(arrays, w, groups, runs)
        padding = [run.pad[0] for run in runs] + [run.pad[1] for run in runs]
        return bb.emit(conv(x, kernel, strides=1, padding=padding, dilation=[run.dilation for run in runs],
                            groups=groups, data_layout=data_layout, kernel_layout=kernel_layout,
                            out_dtype=attrs.out_dtype))

    blocks = list(itertools.product(*(ax.runs for ax in axes)))
    outputs = [convolution(runs) for runs in blocks]
    if len(blocks) == 1 and all(s == 1 for s in strides):
        return outputs[0]  # one phase: an ordinary convolution
    # the phase outputs on phase axes, then depth to space: [N, lead..., s..., tail, Q...]
    # -> [N, lead..., tail, Q_0, s_0, Q_1, s_1, ...] -> [N, F, Q_0 * s_0, ...]
    if len(blocks) == 1:  # channels (g, phases, f): the phase axes inside the group axis
        lead, tail = [groups] if groups > 1 else [], f // groups
        stacked = bb.emit(relax.op.reshape(outputs[0], [batch, *lead, *strides, tail, *rows]))
    elif _in_phase_order(blocks, groups):  # one concat of the channels: (phases, f)
        lead, tail = [], f
        stacked = bb.emit(relax.op.concat(outputs, 1))
        stacked = bb.emit(relax.op.reshape(stacked, [batch, *strides, tail, *rows]))
    else:  # each block's phases on their phase axes, the blocks joined along those axes
        lead, tail = [groups], f // groups
        views = iter([bb.emit(relax.op.reshape(y, [batch, groups, *(run.count for run in runs), tail, *rows]))
                      for y, runs in zip(outputs, blocks)])

        def along(axis: int) -> relax.Expr:
            if axis == spatial:
                return next(views)
            parts = [along(axis + 1) for _ in axes[axis].runs]
            return parts[0] if len(parts) == 1 else bb.emit(relax.op.concat(parts, 2 + axis))

        stacked = along(0)
    first = 1 + len(lead)  # the first phase axis
    perm = [*range(first), first + spatial,
            *[i for a in range(spatial) for i in (first + spatial + 1 + a, first + a)]]
    out = bb.emit(relax.op.permute_dims(stacked, perm))
    out = bb.emit(relax.op.reshape(out, [batch, f, *[q * s for q, s in zip(rows, strides)]]))
    if any(q * s != ax.out_size for q, s, ax in zip(rows, strides, axes)):
        out = bb.emit(relax.op.strided_slice(out, axes=list(range(2, 2 + spatial)), begin=[0] * spatial,
                                             end=[ax.out_size for ax in axes], strides=[1] * spatial))
    return out


def _in_phase_order(blocks: Sequence[tuple[PhaseRun, ...]], groups: int) -> bool:
    """Whether the blocks' output channels, concatenated, are ordered (phase, channel) with
    the phases in row-major order: true when each block is one phase, or without groups
    when the blocks' phases follow each other in that order."""
    if groups > 1 and any(run.count > 1 for runs in blocks for run in runs):
        return False  # a block's channels are (group, phases, f)
    order = [tuple(run.first + p for run, p in zip(runs, phase))
             for runs in blocks for phase in np.ndindex(*(run.count for run in runs))]
    return order == sorted(order)
