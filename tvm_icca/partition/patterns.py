"""Pattern table of the ICCA BYOC backend.

Every pattern is registered with :func:`tvm.relax.backend.pattern_registry.register_patterns`
under a name ``icca.<op>``, like the patterns of TVM's own contrib backends. Anchors with
epilogues (``icca.matmul_bias_relu``, ``icca.conv2d_bias``, ...) are built with TVM's
``make_matmul_pattern`` / ``make_conv2d_pattern`` so the epilogue lands in the same composite
function as the matrix op; single elementwise, reduction and normalization ops have their own
patterns, and :func:`tvm.relax.transform.MergeCompositeFunctions` joins neighbouring composites
into one offloaded region.

Whether a matched op can run on the chip is decided by :func:`unsupported_reason`, shared by
the check functions (which reject the match, leaving the ops on the host) and by
:func:`tvm_icca.partition.partitioner.partition_report` (which tells the user why an op stayed on the
host). The checks consult the chip being partitioned for (:func:`checking_for`), since a chip
may store fewer dtypes than float32/float16.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Callable, Iterator

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.backend.pattern_registry import Pattern, get_patterns_with_prefix, register_patterns
from tvm.relax.backend.patterns import (
    make_conv2d_pattern,
    make_fused_bias_activation_pattern,
    make_matmul_pattern,
)
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl.pattern import DFPattern, is_op, wildcard
from tvm.relax.transform import FusionPattern, PatternCheckContext

from runtime_sim.contract.errors import UnsupportedDtypeError
from tvm_icca.frontend.gather_nd import gather_nd_reason
from tvm_icca.frontend.resize_rewrites import resize_reason
from tvm_icca.hardware_choice import HardwareSpec, current_hardware, use_hardware
from tvm_icca.ops.attention import attention_pattern, predicate_calls
from tvm_icca.ops.conv_transpose import CONV_TRANSPOSE_OPS, conv_transpose_reason
from tvm_icca.ops.data_movement import (
    DATA_MOVEMENT_OPS,
    data_movement_patterns,
    data_movement_reason,
    rotary_embedding_pattern,
    tensor_operands,
)
from tvm_icca.ops.gather import GATHER_OPS, take_pattern, take_reason
from tvm_icca.ops.normalization import instance_norm_patterns
from tvm_icca.ops.padding import PAD_OPS, pad_pattern, pad_reason
from tvm_icca.ops.resize import tap_sum_pattern
from tvm_icca.ops.views import VIEW_OPS, repeat_pattern, view_reason

__all__ = [
    "ACTIVATIONS",
    "BINARY_OPS",
    "CODEGEN_NAME",
    "OFFLOADABLE_OPS",
    "POOL_OPS",
    "REDUCE_OPS",
    "REWRITTEN_OPS",
    "UNARY_OPS",
    "VIEW_OPS",
    "checking_for",
    "get_icca_patterns",
    "tensors_reason",
    "unsupported_reason",
    "user_patterns_matching",
]

#: Value of the ``Codegen`` attribute of offloaded regions, and the pattern name prefix.
CODEGEN_NAME = "icca"

#: Activations fused as epilogues of matmul / conv2d: pattern suffix -> Relax op.
ACTIVATIONS: dict[str, str] = {
    "relu": "relax.nn.relu",
    "gelu": "relax.nn.gelu",
    "gelu_tanh": "relax.nn.gelu_tanh",
    "tanh": "relax.tanh",
    "sigmoid": "relax.sigmoid",
    "silu": "relax.nn.silu",  # SwiGLU MLPs (Llama), DiT's adaLN: x * sigmoid(x)
    "clip": "relax.clip",  # ReLU6 (MobileNetV2), HardSigmoid; see tvm_icca.frontend.rewrites
}

#: Standalone elementwise ops: pattern suffix -> Relax op.
UNARY_OPS: dict[str, str] = {**ACTIVATIONS, "exp": "relax.exp", "negative": "relax.negative",
                             "erf": "relax.erf",  # a written-out GELU rewrites could not name
                             "astype": "relax.astype", "sqrt": "relax.sqrt",
                             "rsqrt": "relax.rsqrt", "log": "relax.log", "abs": "relax.abs",
                             "sin": "relax.sin", "cos": "relax.cos"}
#: Ops whose trailing arguments are attributes (``relax.clip``'s bounds), not tensors.
_ATTRIBUTE_ARGS: dict[str, int] = {"relax.clip": 2}
BINARY_OPS: dict[str, str] = {
    "add": "relax.add",
    "subtract": "relax.subtract",
    "multiply": "relax.multiply",
    "divide": "relax.divide",
    "maximum": "relax.maximum",
    "minimum": "relax.minimum",
    "power": "relax.power",
}
# max/min reduce on the core that owns a row (a core-local "reduce" node of the tensor
# expression, like softmax's running maximum): only sums are split across cores.
# A variance is core-local too: its mean is read inside its sum (instance and group norm).
REDUCE_OPS: dict[str, str] = {"sum": "relax.sum", "mean": "relax.mean", "max": "relax.max",
                              "min": "relax.min", "variance": "relax.variance"}
#: Pooling over spatial windows: pattern suffix -> Relax op. Max pooling is a core-local
#: max over the window (padding reads -inf through a bounds select); average pooling is a
#: window sum with the divisor in its epilogue (count_include_pad or the in-bounds count).
POOL_OPS: dict[str, str] = {
    "max_pool2d": "relax.nn.max_pool2d",
    "avg_pool2d": "relax.nn.avg_pool2d",
    "adaptive_avg_pool2d": "relax.nn.adaptive_avg_pool2d",
}
_OTHER_OPS: dict[str, str] = {
    "softmax": "relax.nn.softmax",
    "layer_norm": "relax.nn.layer_norm",
    "rms_norm": "relax.nn.rms_norm",
    "matmul": "relax.matmul",
    "conv2d": "relax.nn.conv2d",
    # audio front ends (wav2vec2, Whisper): the same templates as conv2d, one spatial axis
    "conv1d": "relax.nn.conv1d",
    "where": "relax.where",
}

#: Every Relax op some ICCA pattern can offload (view ops as re-layouts on the chip,
#: :mod:`tvm_icca.ops.views`, or inlined into a transposed matmul operand).
OFFLOADABLE_OPS: frozenset[str] = frozenset(
    [*UNARY_OPS.values(), *BINARY_OPS.values(), *REDUCE_OPS.values(), *POOL_OPS.values(),
     *_OTHER_OPS.values(), *DATA_MOVEMENT_OPS.values(), *VIEW_OPS.values(),
     *GATHER_OPS.values(), *PAD_OPS.values(),
     # written as the convolutions of their output phases before the patterns see them
     # (tvm_icca.ops.conv_transpose.ConvTransposeAsConvs, run by the partitioner)
     *CONV_TRANSPOSE_OPS.values()]
)

#: Relax ops no pattern offloads as they are, which a rewrite before partitioning turns into
#: offloaded ops (:func:`tvm_icca.partition.partitioner.partition_for_icca` runs it): op -> why
#: one stayed as it is (``None``: the rewrite takes it).
REWRITTEN_OPS: dict[str, Callable[[relax.Call], str | None]] = {
    "relax.image.resize2d": resize_reason,  # tvm_icca.frontend.resize_rewrites.DecomposeResize
    "relax.gather_nd": gather_nd_reason,  # tvm_icca.frontend.gather_nd.GatherNDAsTakes
}

# The chip the check functions judge against. Check functions are called back from C++ by
# FuseOpsByPattern on the calling thread, so a context variable set around the pass reaches
# them (and two threads partitioning for different chips do not interfere).
_CHECK_HW: contextvars.ContextVar[HardwareSpec | None] = contextvars.ContextVar(
    "tvm_icca_check_hardware", default=None
)


class SupportMemo:
    """Whether calls fit one chip (:func:`unsupported_reason` is ``None``), by call structure.

    The layers of an LLM are identical, so ``FuseOpsByPattern`` asks the check functions about
    the same call (the same op, attributes and operand and result types) once per layer and
    pattern: 2,405 matches of Llama2-70B's 80 layers, each of whose calls would read every
    operand's shape through the FFI again. Calls are keyed on ``tvm_ffi.structural_hash`` /
    ``structural_equal`` with their operands as free variables (the types of a call, its
    operands and its result take part in both; variable names do not), so a call is judged
    once per structure. The memo answers ``None`` or not only: a reason's text may name a
    symbolic dimension, which free variables do not tell apart. :func:`checking_for` holds
    one for the pass it surrounds.
    """

    def __init__(self, hw: HardwareSpec) -> None:
        self.hw = hw
        self.judged = 0  # calls judged by unsupported_reason (the rest were memo hits)
        self._buckets: dict[int, list[tuple[relax.Call, bool]]] = {}

    def supported(self, call: relax.Call) -> bool:
        """Whether ``call`` can be offloaded to :attr:`hw`."""
        bucket = self._buckets.setdefault(tvm_ffi.structural_hash(call, map_free_vars=True), [])
        for seen, fits in bucket:
            if tvm_ffi.structural_equal(seen, call, map_free_vars=True):
                return fits
        fits = unsupported_reason(call, self.hw) is None
        self.judged += 1
        bucket.append((call, fits))
        return fits


# The memo of the check functions of the pass :func:`checking_for` surrounds (one chip).
_CHECK_MEMO: contextvars.ContextVar[SupportMemo | None] = contextvars.ContextVar(
    "tvm_icca_check_memo", default=None
)


@contextlib.contextmanager
def checking_for(hw: HardwareSpec) -> Iterator[HardwareSpec]:
    """Judge pattern matches against ``hw`` inside the ``with`` block.

    :func:`tvm_icca.current_hardware` is ``hw`` there too, so the check function of a pattern
    a user registers (``icca.<name>``, see :func:`user_patterns_matching`) sees the chip being
    partitioned for, whichever way the caller named it. The built-in checks judge each
    distinct call once there (:class:`SupportMemo`).
    """
    token = _CHECK_HW.set(hw)
    memo_token = _CHECK_MEMO.set(SupportMemo(hw))
    try:
        with use_hardware(hw):
            yield hw
    finally:
        _CHECK_MEMO.reset(memo_token)
        _CHECK_HW.reset(token)


def _check_hardware() -> HardwareSpec:
    hw = _CHECK_HW.get()
    return hw if hw is not None else current_hardware()


# -- what the chip accepts ------------------------------------------------------------------
def _op_name(call: relax.Call) -> str:
    op = call.op
    return op.name if isinstance(op, tvm.ir.Op) else str(op)


def _tensor_reason(what: str, ty: relax.Type, hw: HardwareSpec, mask: bool = False,
                   index: bool = False) -> str | None:
    """Why a value of type ``ty`` cannot live on the chip, or ``None`` if it can."""
    if not isinstance(ty, relax.TensorType):
        return f"{what} is not a tensor ({ty})"
    if ty.shape is None or not isinstance(ty.shape, relax.ShapeExpr):
        return f"{what} has an unknown shape"
    dims = list(ty.shape.values)
    if any(not isinstance(d, tvm.tirx.IntImm) for d in dims):
        return f"{what} has a dynamic shape {[str(d) for d in dims]}"
    if any(int(d) <= 0 for d in dims):
        return f"{what} is empty (shape {[int(d) for d in dims]})"
    try:
        hw.check_dtype(ty.dtype, what, mask=mask, index=index)
    except UnsupportedDtypeError as err:
        return str(err)
    return None


def tensors_reason(call: relax.Call, hw: HardwareSpec) -> str | None:
    """Why a tensor operand or the result of ``call`` cannot live on ``hw`` (a dtype the chip
    lacks, a dynamic or empty shape), or ``None`` if all can; whatever the op."""
    for i, arg in enumerate(call.args):
        if isinstance(arg.ty, relax.TensorType):
            reason = _tensor_reason(f"argument {i}", arg.ty, hw)
            if reason is not None:
                return reason
    return _tensor_reason("the result", call.ty, hw)


def _static_shape(expr: relax.Expr) -> tuple[int, ...]:
    return tuple(int(d) for d in expr.ty.shape.values)


def _matmul_reason(call: relax.Call) -> str | None:
    lhs, rhs = call.args
    if lhs.ty.ndim < 2 or rhs.ty.ndim < 2:
        return "matmul with a 1-D operand is not offloaded (operands must be at least 2-D)"
    if lhs.ty.dtype != rhs.ty.dtype:
        return f"matmul operands have different dtypes ({lhs.ty.dtype}, {rhs.ty.dtype})"
    return None


#: The layouts offloaded per convolution op: (data, kernel); the output is laid out as the data.
_CONV_LAYOUTS: dict[str, tuple[str, str]] = {
    "relax.nn.conv2d": ("NCHW", "OIHW"),
    "relax.nn.conv1d": ("NCW", "OIW"),
}


def _conv_reason(call: relax.Call) -> str | None:
    attrs = call.attrs
    name = _op_name(call)
    short = name.rsplit(".", 1)[-1]
    data_layout, kernel_layout = _CONV_LAYOUTS[name]
    out_layout = attrs.out_layout or attrs.data_layout
    if (attrs.data_layout, attrs.kernel_layout, out_layout) != (data_layout, kernel_layout, data_layout):
        return (
            f"{short} layout {attrs.data_layout}/{attrs.kernel_layout}->{out_layout} "
            f"(only {data_layout} data, {kernel_layout} kernel and {data_layout} output are offloaded)"
        )
    data, weight = call.args
    if data.ty.dtype != weight.ty.dtype:
        return f"{short} operands have different dtypes ({data.ty.dtype}, {weight.ty.dtype})"
    return None


def _swaps_last_two_axes(call: relax.Call) -> bool:
    """Is the permute_dims ``call`` a transpose of its last two axes (a transposed matmul
    operand, ``x @ w.T``)? Any other permutation is offloaded as a view op of its own."""
    ndim = call.args[0].ty.ndim
    axes = call.attrs.axes
    perm = list(range(ndim))[::-1] if axes is None else [int(a) for a in axes]
    return ndim >= 2 and perm == list(range(ndim - 2)) + [ndim - 1, ndim - 2]


def _clip_reason(call: relax.Call) -> str | None:
    bounds = []
    for what, arg in zip(("min", "max"), call.args[1:]):
        # a constant bound is a FloatImm / IntImm argument (or a PrimValue wrapping one)
        imm = arg if isinstance(arg, (tvm.tirx.FloatImm, tvm.tirx.IntImm)) else getattr(arg, "value", None)
        if not isinstance(imm, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):
            return f"clip with a {what} bound that is not a constant ({arg})"
        bounds.append(float(imm.value))
    if not all(math.isfinite(b) for b in bounds):
        return f"clip with an infinite bound {bounds} (a one-sided clip is a maximum or minimum)"
    return None


def _where_reason(call: relax.Call) -> str | None:
    cond = call.args[0]
    if str(cond.ty.dtype) != "bool":
        return f"where with a {cond.ty.dtype} condition (the chip reads bool masks)"
    values = [str(a.ty.dtype) for a in call.args[1:]]
    if len(set(values)) != 1:
        return f"where with values of different dtypes ({', '.join(values)})"
    return None


def _pool_reason(call: relax.Call) -> str | None:
    attrs = call.attrs
    out_layout = attrs.out_layout or attrs.layout
    if (attrs.layout, out_layout) != ("NCHW", "NCHW"):
        return f"{_op_name(call)} layout {attrs.layout}->{out_layout} (only NCHW is offloaded)"
    return None


_OP_REASONS: dict[str, Callable[[relax.Call], str | None]] = {
    "relax.clip": _clip_reason,
    "relax.where": _where_reason,
    **{name: _pool_reason for name in POOL_OPS.values()},
    "relax.matmul": _matmul_reason,
    **{name: _conv_reason for name in _CONV_LAYOUTS},
    **{op: data_movement_reason for op in DATA_MOVEMENT_OPS.values()},
    **{op: view_reason for op in VIEW_OPS.values()},
    "relax.take": take_reason,
    **{op: pad_reason for op in PAD_OPS.values()},
    **{op: conv_transpose_reason for op in CONV_TRANSPOSE_OPS.values()},
}


def unsupported_reason(call: relax.Call, hw: HardwareSpec | None = None) -> str | None:
    """Why ``call`` cannot be offloaded to ``hw``, or ``None`` if it can.

    ``hw`` defaults to the chip being partitioned for (or :func:`current_hardware`).
    """
    hw = hw if hw is not None else _check_hardware()
    name = _op_name(call)
    if name in REWRITTEN_OPS:
        reason = REWRITTEN_OPS[name](call)
        return reason if reason is not None else (
            f"{name} runs on the chip as the operators partition_for_icca rewrites it into, "
            "and this call was not rewritten")
    if name not in OFFLOADABLE_OPS:
        return f"{name} has no ICCA implementation"
    operands = tensor_operands(call)
    operands = operands[:len(operands) - _ATTRIBUTE_ARGS.get(name, 0)]
    for i, arg in enumerate(operands):
        if isinstance(arg.ty, relax.ShapeType):
            continue  # a view op's target shape: the result's type below must be static
        mask = name == "relax.where" and i == 0  # the condition: a mask the cores only read
        index = name == "relax.take" and i == 1  # the ids: row numbers the cores only read
        reason = _tensor_reason(f"argument {i}", arg.ty, hw, mask=mask, index=index)
        if reason is not None:
            return reason
    reason = _tensor_reason("the result", call.ty, hw)
    if reason is not None:
        return reason
    check = _OP_REASONS.get(name)
    return check(call) if check is not None else None


# -- check functions ------------------------------------------------------------------------
def _matched_calls(context: PatternCheckContext) -> list[relax.Call]:
    """All op calls a match would move into the composite function."""
    calls = [v for v in context.matched_bindings.values() if isinstance(v, relax.Call)]
    if isinstance(context.matched_expr, relax.Call) and not any(
        c.same_as(context.matched_expr) for c in calls
    ):
        calls.append(context.matched_expr)
    return calls


def _check_ops(context: PatternCheckContext) -> bool:
    """Accept a match whose every op fits the chip and whose intermediates stay inside."""
    if has_leaking_intermediate_variables(context):
        return False
    memo = _CHECK_MEMO.get()
    if memo is not None:
        return all(memo.supported(call) for call in _matched_calls(context))
    hw = _check_hardware()
    return all(unsupported_reason(call, hw) is None for call in _matched_calls(context))


def _check_attention_ops(context: PatternCheckContext) -> bool:
    """:func:`_check_ops` for fused attention, less the calls of a mask predicate (integer
    and bool axis values the lowering turns into a condition; tvm_icca.ops.masks)."""
    if has_leaking_intermediate_variables(context):
        return False
    calls = _matched_calls(context)
    skip = predicate_calls(calls)
    calls = [c for c in calls if not any(c.same_as(p) for p in skip)]
    memo = _CHECK_MEMO.get()
    if memo is not None:
        return all(memo.supported(call) for call in calls)
    hw = _check_hardware()
    return all(unsupported_reason(call, hw) is None for call in calls)


def _check_anchor_with_epilogue(context: PatternCheckContext) -> bool:
    """Like :func:`_check_ops`; epilogues must also keep the anchor's output shape.

    A bias add that broadcast the matmul/conv result to a larger tensor would not be an
    elementwise map of the anchor's iteration space, so it cannot be fused as an epilogue
    (the shorter pattern without the add is tried instead).
    """
    if not _check_ops(context):
        return False
    root = context.annotated_expr["root"]
    out = context.matched_expr
    return _static_shape(out) == _static_shape(root) and out.ty.dtype == root.ty.dtype


def _with_transposed_operand(check: Callable[[PatternCheckContext], bool]) -> Callable:
    """``check`` of a transposed-matmul pattern, which fuses only a transpose of the last two
    axes of the operand (otherwise the permute_dims is a view op of its own)."""

    def checked(context: PatternCheckContext) -> bool:
        permutes = [c for c in _matched_calls(context) if _op_name(c) == "relax.permute_dims"]
        return all(_swaps_last_two_axes(c) for c in permutes) and check(context)

    return checked


# -- the pattern table ----------------------------------------------------------------------
def _apply(op: str, data: DFPattern) -> DFPattern:
    """``op`` applied to ``data``, with a wildcard for each attribute argument (clip's bounds)."""
    return is_op(op)(data, *(wildcard() for _ in range(_ATTRIBUTE_ARGS.get(op, 0))))


def _unary_pattern(name: str, op: str) -> Pattern:
    data = wildcard()
    root = _apply(op, data)
    return (f"{CODEGEN_NAME}.{name}", root, {"data": data, "root": root}, _check_ops)


def _view_pattern(name: str, op: str) -> Pattern:
    """A view op on its own data (its shape argument, if any, is part of the match)."""
    data = wildcard()
    root = is_op(op)(data, wildcard()) if op in ("relax.reshape", "relax.broadcast_to") else is_op(op)(data)
    return (f"{CODEGEN_NAME}.{name}", root, {"data": data, "root": root}, _check_ops)


def _binary_pattern(name: str, op: str) -> Pattern:
    lhs, rhs = wildcard(), wildcard()
    root = is_op(op)(lhs, rhs)
    return (f"{CODEGEN_NAME}.{name}", root, {"lhs": lhs, "rhs": rhs, "root": root}, _check_ops)


def _where_pattern() -> Pattern:
    cond, lhs, rhs = wildcard(), wildcard(), wildcard()
    root = is_op("relax.where")(cond, lhs, rhs)
    annotations: dict[str, DFPattern] = {"condition": cond, "lhs": lhs, "rhs": rhs, "root": root}
    return (f"{CODEGEN_NAME}.where", root, annotations, _check_ops)


def _layer_norm_pattern() -> Pattern:
    data, gamma, beta = wildcard(), wildcard(), wildcard()
    root = is_op("relax.nn.layer_norm")(data, gamma, beta)
    annotations: dict[str, DFPattern] = {"data": data, "gamma": gamma, "beta": beta, "root": root}
    return (f"{CODEGEN_NAME}.layer_norm", root, annotations, _check_ops)


def _rms_norm_pattern() -> Pattern:
    data, weight = wildcard(), wildcard()
    root = is_op("relax.nn.rms_norm")(data, weight)
    annotations: dict[str, DFPattern] = {"data": data, "weight": weight, "root": root}
    return (f"{CODEGEN_NAME}.rms_norm", root, annotations, _check_ops)


def _anchor_patterns(anchor: str) -> list[Pattern]:
    """``anchor`` (matmul, conv2d or conv1d) alone and with a transposed operand, bias and
    activation.

    Ordered by the number of ops a pattern fuses, ascending: since later entries have higher
    priority for ``register_patterns``, a bigger match is always tried before its prefix.
    """
    sized: list[tuple[int, Pattern]] = []
    variants = [("", False)] if anchor != "matmul" else [("", False), ("_transposed", True)]
    for suffix, transposed in variants:
        for with_bias in (False, True):
            for act in (None, *ACTIVATIONS):
                name = f"{CODEGEN_NAME}.{anchor}{suffix}"
                name += "_bias" if with_bias else ""
                name += f"_{act}" if act else ""
                act_op = ACTIVATIONS[act] if act else None
                if anchor == "conv2d":
                    pattern, annotations = make_conv2d_pattern(with_bias)
                elif anchor == "conv1d":
                    pattern, annotations = make_fused_bias_activation_pattern(_OTHER_OPS[anchor], with_bias)
                else:
                    pattern, annotations = make_matmul_pattern(with_bias, None, transposed)
                if act_op is not None:
                    pattern = _apply(act_op, pattern)
                check = _check_anchor_with_epilogue if (with_bias or act) else _check_ops
                if transposed:
                    check = _with_transposed_operand(check)
                size = 1 + transposed + with_bias + (act is not None)
                sized.append((size, (name, pattern, dict(annotations), check)))
    return [pattern for _, pattern in sorted(sized, key=lambda item: item[0])]


def _pattern_table() -> list[Pattern]:
    """All ICCA patterns; for ``register_patterns`` later entries have higher priority."""
    table: list[Pattern] = []
    # view ops first (lowest priority): a transposed matmul operand fuses into the matmul
    table += [_view_pattern(name, op) for name, op in VIEW_OPS.items()]
    table += [_unary_pattern(name, op) for name, op in UNARY_OPS.items()]
    table += [_binary_pattern(name, op) for name, op in BINARY_OPS.items()]
    table += [_unary_pattern(name, op) for name, op in REDUCE_OPS.items()]
    table += [_unary_pattern(name, op) for name, op in POOL_OPS.items()]
    table.append(_unary_pattern("softmax", "relax.nn.softmax"))
    table.append(_where_pattern())
    table.append(_layer_norm_pattern())
    table.append(_rms_norm_pattern())
    table += instance_norm_patterns(CODEGEN_NAME, _check_ops, _check_anchor_with_epilogue)
    table += data_movement_patterns(CODEGEN_NAME, _check_ops)
    table.append(take_pattern(CODEGEN_NAME, _check_ops))
    table.append(pad_pattern(CODEGEN_NAME, _check_ops))
    table.append(repeat_pattern(CODEGEN_NAME, _check_ops))  # before one repeat: one re-layout
    table.append(tap_sum_pattern(CODEGEN_NAME, _check_ops))  # before its sum and multiply
    for anchor in ("matmul", "conv2d", "conv1d"):
        table += _anchor_patterns(anchor)
    table.append(rotary_embedding_pattern(CODEGEN_NAME, _check_ops))  # before its slices, concat, products
    # last, so tried first: the product, scores, softmax and product of attention fuse into
    # one operator before the matmul, softmax and elementwise patterns take them apart
    table.append(attention_pattern(CODEGEN_NAME, _check_attention_ops))
    return table


_REGISTERED = False
#: The names of the patterns of :func:`_pattern_table`; any other ``icca.*`` pattern of TVM's
#: registry was registered by a user.
_BUILTIN_NAMES: frozenset[str] = frozenset()


def register_icca_patterns() -> None:
    """Register the ICCA patterns with TVM's pattern registry (idempotent)."""
    global _REGISTERED, _BUILTIN_NAMES  # pylint: disable=global-statement
    if not _REGISTERED:
        table = _pattern_table()
        _BUILTIN_NAMES = frozenset(p.name if isinstance(p, FusionPattern) else p[0] for p in table)
        register_patterns(table)
        _REGISTERED = True


def get_icca_patterns() -> list[FusionPattern]:
    """The registered ICCA partition patterns, highest priority first.

    Every ``icca.*`` pattern of TVM's registry, including those a user registers with
    ``tvm.relax.backend.pattern_registry.register_patterns`` (registered later, so tried
    first): registering one is how a new operator is offloaded.

    Returns
    -------
    list of tvm.relax.transform.FusionPattern
        The ``icca.*`` patterns of TVM's pattern registry, in the order
        ``relax.transform.FuseOpsByPattern`` wants them (a fused pattern before its parts).
    """
    register_icca_patterns()
    return list(get_patterns_with_prefix(CODEGEN_NAME))


register_icca_patterns()


def user_pattern_names() -> tuple[str, ...]:
    """The names of the ``icca.*`` patterns of TVM's registry that a user registered (not
    this module), sorted."""
    register_icca_patterns()
    return tuple(sorted(p.name for p in get_patterns_with_prefix(CODEGEN_NAME)
                        if p.name not in _BUILTIN_NAMES))


def user_patterns_matching(call: relax.Call, var2val: dict | None = None) -> list[FusionPattern]:
    """The ``icca.*`` patterns registered by a user (not by this module) that match ``call``.

    The partitioner reads every ``icca.*`` pattern of TVM's registry, so registering one
    (``register_patterns([("icca.my_op", pattern, {}, check)])``) offloads an op this
    backend has no pattern for. When such an op stays on the host, the report names the
    pattern that matched it (:func:`tvm_icca.partition.partitioner.partition_report`).

    Parameters
    ----------
    call : relax.Call
        An op call of a (partitioned) function; it is the root of the matches looked for.
    var2val : dict, optional
        The function's variable bindings (``relax.analysis.get_var2val``), so that a pattern
        of several ops matches through the bindings between them.

    Returns
    -------
    list of tvm.relax.transform.FusionPattern
        The matching user patterns, highest priority first.
    """
    register_icca_patterns()
    return [p for p in get_patterns_with_prefix(CODEGEN_NAME)
            if p.name not in _BUILTIN_NAMES and p.pattern.match(call, var2val)]


def composite_label(composite: str) -> str:
    """The operator a composite function computes, in the user's words: the pattern name
    without the codegen prefix, its fused parts joined by ``+`` (``"icca.conv2d_bias_relu"``
    -> ``"conv2d + bias + relu"``, ``"icca.layer_norm"`` -> ``"layer norm"``). Error messages
    name operators so (:class:`runtime_sim.contract.program.OpProgram` ``label``)."""
    name = composite.removeprefix(f"{CODEGEN_NAME}.")
    parts: list[str] = []
    # anchor patterns are named anchor[_transposed][_bias][_activation] (_anchor_patterns)
    for act in sorted(ACTIVATIONS, key=len, reverse=True):
        if name.endswith(f"_{act}") and name not in ACTIVATIONS:
            name, parts = name[:-len(act) - 1], [act]
            break
    if name.endswith("_bias"):
        name, parts = name[:-len("_bias")], ["bias", *parts]
    return " + ".join(p.replace("_", " ") for p in [name, *parts])
