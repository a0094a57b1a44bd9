"""Partitioning a Relax module between the ICCA chip and the host CPU.

:func:`partition_for_icca` follows the convention of TVM's contrib backends
(``partition_for_tensorrt``, ``partition_for_nnapi``): ``FuseOpsByPattern`` with the ``icca.*``
patterns of :mod:`tvm_icca.partition.patterns` (``annotate_codegen=False``), then
``MergeCompositeFunctions``, which wraps neighbouring composites into region functions carrying
``Codegen == "icca"`` and a ``global_symbol``. Each region additionally carries the chip it was
partitioned for as JSON in the ``icca.hardware`` attribute, which the codegen reads back.

:func:`partition_report` / :func:`host_ops` tell what went where, and why an op the chip knows
stayed on the host.
"""

from __future__ import annotations

import collections
import logging
import re
from typing import Any

import tvm
from tvm import relax
from tvm.ir import IRModule, PrimType
from tvm.relax.transform import (
    ConvertToDataflow,
    FoldConstant,
    FuseOpsByPattern,
    MergeCompositeFunctions,
)

from runtime_sim.contract.labels import region_label
from tvm_icca.frontend.conv_rewrites import FoldInferenceBatchNorm
from tvm_icca.frontend.empty_reductions import FoldEmptyReductions, refuse_empty_reductions
from tvm_icca.frontend.gather_nd import GatherNDAsTakes
from tvm_icca.frontend.group_norm import DecomposeGroupNorm
from tvm_icca.frontend.onnx_loader import ONNX_OPS_ATTR
from tvm_icca.frontend.pad_rewrites import RecognizePad
from tvm_icca.frontend.resize_rewrites import DecomposeResize
from tvm_icca.frontend.rewrites import RecognizeActivations, RecognizeNorms
from tvm_icca.hardware_choice import (
    HardwareLike,
    HardwareSpec,
    hardware_from_json,
    hardware_to_json,
    resolve_hardware,
)
from tvm_icca.ops.data_movement import split_to_slices
from tvm_icca.ops.attention import bind_scalar_constants
from tvm_icca.ops.conv_transpose import ConvTransposeAsConvs
from tvm_icca.ops.mask_predicates import MasksAsPredicates
from tvm_icca.partition.patterns import (
    CODEGEN_NAME,
    OFFLOADABLE_OPS,
    REWRITTEN_OPS,
    checking_for,
    composite_label,
    get_icca_patterns,
    tensors_reason,
    unsupported_reason,
    user_pattern_names,
    user_patterns_matching,
)
from tvm_icca.partition.prefilter import may_fold, op_calls, patterns_that_may_match
from tvm_icca.partition.region_names import shorten_region_names
from tvm_icca.tvm_warnings import tvm_warnings_once

__all__ = [
    "HARDWARE_ATTR",
    "format_report",
    "host_op_lines",
    "host_ops",
    "host_time_note",
    "icca_regions",
    "is_partitioned",
    "partition_for_icca",
    "partition_report",
    "nothing_on_chip",
    "partition_module",
    "region_hardware",
]

logger = logging.getLogger(__name__)

#: Function (and module) attribute holding ``HardwareSpec.to_dict()`` as JSON.
HARDWARE_ATTR = "icca.hardware"

#: Module attribute: why nothing of the module was partitioned (shown by the partition report).
HOST_NOTE_ATTR = "icca.host_note"

#: Relax ops that call a lowered function (TIR or packed) rather than name an operator: TVM's
#: importers emit these for ONNX ops they lower straight to TE (Einsum, TopK, ...).
_CALL_OPS = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_tir_with_grad",
             "relax.call_dps_packed")

_MATCH_CAST_NOTE = ("the model has data-dependent shapes (a match_cast after NonZero, Unique or "
                    "similar), around which TVM's MergeCompositeFunctions cannot form regions, "
                    "so the whole model runs on the host")


_UNMERGEABLE_NOTE = ("function '{where}' {what}, around which TVM's MergeCompositeFunctions "
                     "cannot form regions, so the whole model runs on the host")


def partition_for_icca(
    mod: IRModule,
    hw: HardwareLike | None = None,
    *,
    fold_constants: bool = True,
    bind_constants: bool = False,
) -> IRModule:
    """Partition ``mod``, offloading the subgraphs the ICCA chip supports.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module, before ``LegalizeOps``. Binding blocks are turned into dataflow blocks
        first, since ``FuseOpsByPattern`` only looks inside dataflow blocks.
    hw : HardwareSpec, preset name or dict, optional
        The chip; defaults to :func:`tvm_icca.use_hardware`'s choice, else ``ipu-mk2``.
        Ops whose dtype the chip cannot compute stay on the host.
    fold_constants : bool
        Run ``FoldConstant`` first, so that e.g. the ``reshape`` of a constant conv bias
        emitted by the ONNX importer becomes a constant and the bias add can be fused (and
        a batch norm folded into a conv's weights becomes constant weights). Inference batch
        norms are always rewritten first (:mod:`tvm_icca.frontend.conv_rewrites`).
        Written-out activations (ReLU6 as ``call_tir`` max/min, GELU with erf or tanh, SiLU)
        are then given their Relax ops back (:class:`tvm_icca.frontend.rewrites.RecognizeActivations`),
        as are RMS norm and layer norm written out (:class:`tvm_icca.frontend.rewrites.RecognizeNorms`);
        a ``resize2d`` becomes repeats, slices, takes and tap sums
        (:class:`tvm_icca.frontend.resize_rewrites.DecomposeResize`), and a ``gather_nd`` by
        a constant outer-product table one take per axis
        (:class:`tvm_icca.frontend.gather_nd.GatherNDAsTakes`).
    bind_constants : bool
        Keep constants (weights) inside the composite functions, so the region compiler can
        bake them into the device program. By default they become region parameters: device
        programs stay small and the host passes weights like any other input.

    Returns
    -------
    tvm.IRModule
        The module with ``Codegen == "icca"`` region functions, each with the
        ``icca.hardware`` attribute. The report of what stayed on the host is logged at INFO
        level on the ``tvm_icca.partition.partitioner`` logger (see :func:`partition_report`).
        A module that already has ICCA regions is returned unchanged (partitioning it again
        would wrap regions into regions).
    """
    return partition_module(mod, resolve_hardware(hw), fold_constants=fold_constants,
                            bind_constants=bind_constants)


def partition_module(mod: IRModule, spec: HardwareSpec, *, fold_constants: bool = True,
                     bind_constants: bool = False) -> IRModule:
    """:func:`partition_for_icca` for a chip already resolved by the caller (the entry points
    resolve ``hw`` once and pass the :class:`HardwareSpec` down)."""
    if icca_regions(mod):
        logger.debug("module already has ICCA regions; not partitioning it again")
        return mod
    # a reduction over nothing is its identity: TVM's build would read uninitialized memory,
    # and FoldConstant's legalization of an empty mean divides by zero
    first = tvm.transform.Sequential([ConvertToDataflow(min_size=1), FoldEmptyReductions()])
    passes: list[tvm.transform.Pass] = []
    # batch norm in inference form becomes conv weights + bias or elementwise arithmetic
    passes.append(FoldInferenceBatchNorm)
    # after folding: the importer computes Clip's bounds from constants
    passes += [RecognizeActivations(), RecognizeNorms()]
    passes.append(RecognizePad())  # ONNX Pad is an opaque call_tir of TVM's importer
    passes.append(DecomposeGroupNorm())  # its TE reads channels through div/mod
    passes.append(DecomposeResize())  # its TE reads through floor of float coordinates
    # after folding, which makes the importer's negative-index normalization a constant
    passes.append(GatherNDAsTakes())
    passes.append(split_to_slices())  # a tuple result is no tensor expression; slices are one
    # a transposed convolution the chip takes becomes the convolutions of its output phases
    passes.append(ConvTransposeAsConvs(lambda call: unsupported_reason(call, spec) is None))
    # after folding, so a mask folded into a constant is read by value: an attention's causal
    # or banded mask becomes a predicate on the axis values, not an [S, S] input
    passes.append(MasksAsPredicates())
    # FoldConstant legalizes every op to try to fold it: TVM's warnings once, not per op and
    # again when the regions are lowered (tvm_icca.tvm_warnings)
    with tvm_warnings_once():
        mod = first(mod)
        refuse_empty_reductions(mod)  # before FoldConstant could build one with garbage
        # where no call can fold it would legalize every op for nothing (prefilter)
        fold = [FoldConstant()] if fold_constants and may_fold(mod) else []
        mod = tvm.transform.Sequential(fold + passes)(mod)
    unfused = mod
    blocker = _unmergeable(mod)
    if blocker is not None:
        # decided here, before any region is formed: TVM raises an InternalError from C++
        mod = unfused.with_attr(HOST_NOTE_ATTR, blocker)
    else:
        with checking_for(spec):
            # a pattern of an operator the model never calls costs a pass over it (prefilter)
            mod = FuseOpsByPattern(
                patterns_that_may_match(get_icca_patterns(), mod), bind_constants=bind_constants,
                annotate_codegen=False
            )(mod)
            mod = bind_scalar_constants(mod)
            try:
                mod = shorten_region_names(MergeCompositeFunctions()(mod), CODEGEN_NAME)
            except TypeError as err:
                # TVM 0.27's MergeCompositeFunctions cannot visit a match_cast binding (the
                # data-dependent shape of NonZero, Unique, ...): the model runs on the host
                if "MatchCast" not in str(err):
                    raise
                mod = unfused.with_attr(HOST_NOTE_ATTR, _MATCH_CAST_NOTE)
    mod = _stamp_hardware(mod, spec)
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s", format_report(partition_report(mod)))
    return mod


def _unmergeable(mod: IRModule) -> str | None:
    """Why TVM 0.27's MergeCompositeFunctions cannot partition ``mod`` (None: it can).

    It has no visitor for ``relax.If`` (an ONNX ``If``), and it looks up every variable a call
    takes in the bindings it has seen, so a symbolic dimension passed as a value (TVM's
    importer writes ``arange(0, n)`` for ONNX ``Range`` or ``Trilu`` over a dimension it left
    symbolic) fails its lookup.
    """
    for gvar, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        branches: list[relax.If] = []
        bound: list[relax.Var] = list(func.params)
        values: list[relax.Var] = []

        def visit(node: Any) -> None:
            if isinstance(node, relax.If):
                branches.append(node)
            elif isinstance(node, relax.Function):
                bound.extend(node.params)
            elif isinstance(node, relax.SeqExpr):
                bound.extend(b.var for block in node.blocks for b in block.bindings)
            elif isinstance(node, relax.Call):
                values.extend(a for a in node.args
                              if isinstance(a, relax.Var) and isinstance(a.ty, PrimType))

        relax.analysis.post_order_visit(func, visit)
        if branches:
            return _UNMERGEABLE_NOTE.format(where=gvar.name_hint,
                                            what="has control flow (an ONNX If, a relax.If)")
        free = [v for v in values if not any(v.same_as(b) for b in bound)]
        if free:
            return _UNMERGEABLE_NOTE.format(
                where=gvar.name_hint,
                what=f"computes with the symbolic dimension '{free[0]}' as a value")
    return None


def partition_key(hw: HardwareSpec) -> tuple:
    """What :func:`partition_module` reads of ``hw``, for a memo of partitioned modules
    (:meth:`tvm_icca.PlanCache.partitioned`): the element types the chip computes, which is
    all the built-in patterns ask of it, and, when a user's ``icca.*`` pattern is
    registered, its name and the whole chip (a user's check may read any field)."""
    users = user_pattern_names()
    if not users:
        return ("dtypes", tuple(hw.dtypes))
    return ("dtypes", tuple(hw.dtypes), "user patterns", users, hardware_to_json(hw))


def stamp_hardware(mod: IRModule, hw: HardwareSpec) -> IRModule:
    """``mod`` (partitioned) with its regions and itself stamped for ``hw`` (as
    :func:`partition_module` leaves them); ``mod`` itself when it is already."""
    stamped = mod.attrs.get(HARDWARE_ATTR) if mod.attrs is not None else None
    if stamped is not None and str(stamped) == hardware_to_json(hw):
        return mod
    return _stamp_hardware(mod, hw)


def _stamp_hardware(mod: IRModule, hw: HardwareSpec) -> IRModule:
    text = hardware_to_json(hw)
    updates = {
        gvar: func.with_attr(HARDWARE_ATTR, text)
        for gvar, func in mod.functions_items()
        if _is_icca_region(func)
    }
    for gvar, func in updates.items():
        mod[gvar] = func
    # Also on the module: tells later passes that partitioning happened (even if no op was
    # offloaded) and for which chip, so the pipeline does not partition twice.
    return mod.with_attr(HARDWARE_ATTR, text)


# -- inspection -----------------------------------------------------------------------------
def _is_icca_region(func: Any) -> bool:
    return (
        isinstance(func, relax.Function)
        and func.attrs is not None
        and str(func.attrs.get("Codegen", "")) == CODEGEN_NAME
    )


def icca_regions(mod: IRModule) -> dict[str, relax.Function]:
    """The offloaded region functions of a partitioned module.

    Parameters
    ----------
    mod : tvm.IRModule
        A module partitioned by :func:`partition_for_icca` (any other module has none).

    Returns
    -------
    dict of str to relax.Function
        The ``Codegen == "icca"`` functions by global symbol (or name), sorted by name.
    """
    regions = {}
    for gvar, func in mod.functions_items():
        if _is_icca_region(func):
            regions[str(func.attrs.get("global_symbol", gvar.name_hint))] = func
    return dict(sorted(regions.items()))


def is_partitioned(mod: IRModule) -> bool:
    """Whether ``mod`` went through :func:`partition_for_icca` (or was partitioned by hand)."""
    return (mod.attrs is not None and HARDWARE_ATTR in mod.attrs) or bool(icca_regions(mod))


def region_hardware(func: relax.Function) -> HardwareSpec | None:
    """The chip stamped on a region by :func:`partition_for_icca`, if any."""
    if func.attrs is None or HARDWARE_ATTR not in func.attrs:
        return None
    return hardware_from_json(str(func.attrs[HARDWARE_ATTR]))


def _region_contents(func: relax.Function) -> tuple[list[str], collections.Counter[str]]:
    """Composite names (one per call, in order) and op counts of a region.

    MergeCompositeFunctions binds identical composites once and calls them several times, so
    ops are counted per call of a composite, not per function definition.
    """
    local_funcs: dict[relax.Var, relax.Function] = {}
    composites: list[str] = []
    ops: collections.Counter[str] = collections.Counter()
    body = func.body
    blocks = body.blocks if isinstance(body, relax.SeqExpr) else []
    for block in blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                local_funcs[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in local_funcs:
                callee = local_funcs[value.op]
                composites.append(str((callee.attrs or {}).get("Composite", "?")))
                ops.update(call.op.name for call in op_calls(callee.body))
            else:
                ops.update(call.op.name for call in op_calls(value))
    return composites, ops


def partition_report(mod: IRModule, hw: HardwareLike | None = None) -> dict[str, Any]:
    """What runs on the chip and what stays on the host, in a partitioned module.

    Print it with :func:`format_report`::

        mod = tvm_icca.partition_for_icca(mod, "ipu-mk2")
        print(tvm_icca.format_report(tvm_icca.partition_report(mod)))

    Parameters
    ----------
    mod : tvm.IRModule
        A module partitioned by :func:`partition_for_icca`.
    hw : HardwareSpec, preset name or dict, optional
        The chip used to explain host ops; by default the one :func:`partition_for_icca`
        stamped on the module, else the current choice (:func:`tvm_icca.use_hardware`).

    Returns
    -------
    dict
        A JSON-serializable dict with

        * ``hardware``: name of the chip partitioned for;
        * ``regions``: per offloaded region, its ``name`` (the generated global symbol, a key
          for machines), ``label`` (what a person reads, e.g. ``"region 0: conv2d+bias+relu,
          max_pool2d (3 ops)"``, :func:`runtime_sim.contract.labels.region_label`),
          ``composites`` (pattern names) and ``ops`` (Relax op -> count);
        * ``offloaded_ops`` / ``host_ops``: Relax op -> count over the whole module;
        * ``host_reasons``: for each op left on the host, the distinct reasons why (e.g.
          ``"conv2d with groups=2 (only groups == 1 is offloaded)"``; for an op matched by
          an ``icca.*`` pattern a user registered, that its check function refused it);
        * ``host_sources``: per operator left on the host, as the model names it
          (:func:`source_op`: ``Einsum``, not ``relax.call_tir``), its ``op``, ``relax_op``,
          ``count`` and ``reasons``, most frequent first (:func:`host_op_lines` prints them);
        * ``notes``: remarks about the whole model (e.g. why all of it stays on the host),
          usually empty.
    """
    if hw is not None:
        spec = resolve_hardware(hw)
    elif mod.attrs is not None and HARDWARE_ATTR in mod.attrs:
        spec = hardware_from_json(str(mod.attrs[HARDWARE_ATTR]))
    else:
        spec = resolve_hardware(None)

    regions = []
    offloaded: collections.Counter[str] = collections.Counter()
    for name, func in icca_regions(mod).items():
        composites, ops = _region_contents(func)
        offloaded.update(ops)
        regions.append({"name": name, "label": _region_label(composites, len(regions)),
                        "composites": composites, "ops": dict(sorted(ops.items()))})

    host: collections.Counter[str] = collections.Counter()
    reasons: dict[str, list[str]] = {}
    sources: dict[tuple[str, str], dict[str, Any]] = {}
    note = mod.attrs.get(HOST_NOTE_ATTR) if mod.attrs is not None else None
    onnx_ops = ({_op_key(str(t)): str(t) for t in mod.attrs[ONNX_OPS_ATTR]}
                if mod.attrs is not None and ONNX_OPS_ATTR in mod.attrs else {})
    for gvar, func in mod.functions_items():
        if not isinstance(func, relax.Function) or _is_icca_region(func):
            continue
        if func.attrs is not None and "Composite" in func.attrs:
            continue  # a composite not merged into a region (only if partitioning failed)
        var2val = None  # the function's bindings, read only for a user's pattern
        for call in op_calls(func.body):
            name = call.op.name
            host[name] += 1
            if name not in OFFLOADABLE_OPS and var2val is None:
                var2val = relax.analysis.get_var2val(func)
            reason = _host_reason(call, spec, whole_model=note is not None, var2val=var2val)
            if reason not in reasons.setdefault(name, []):
                reasons[name].append(reason)
            source = source_op(call, onnx_ops)
            entry = sources.setdefault((source, name), {"op": source, "relax_op": name,
                                                        "count": 0, "reasons": []})
            entry["count"] += 1
            if reason not in entry["reasons"]:
                entry["reasons"].append(reason)
    return {
        "hardware": spec.name,
        "regions": regions,
        "offloaded_ops": dict(sorted(offloaded.items())),
        "host_ops": dict(sorted(host.items())),
        "host_reasons": dict(sorted(reasons.items())),
        "host_sources": sorted(sources.values(), key=lambda e: (-e["count"], e["op"])),
        "notes": [str(note)] if note is not None else [],
    }


def _op_key(name: str) -> str:
    """How an op name is compared across ONNX and Relax: ``Einsum``, ``einsum``, ``einsum1``
    (a second TIR function of the same name), ``nn.max_pool1d`` and ``nn.softmax`` ->
    ``einsum``, ``maxpool``, ``softmax``."""
    name = name.rsplit(".", 1)[-1]
    # a numbered duplicate (einsum1) and Relax's rank suffix (max_pool1d: ONNX MaxPool) drop
    return re.sub(r"_?\d+d?$", "", name).replace("_", "").lower()


def _called_function(call: relax.Call) -> str | None:
    """The name of the TIR or packed function a ``call_tir``-like call runs."""
    if call.op.name not in _CALL_OPS or not call.args:
        return None
    callee = call.args[0]
    if isinstance(callee, tvm.ir.GlobalVar):
        return str(callee.name_hint)
    if isinstance(callee, relax.ExternFunc):
        return str(callee.global_symbol)
    return None


def source_op(call: relax.Call, onnx_ops: dict[str, str] | None = None) -> str:
    """The operator a host call stands for, as the user knows it: the ONNX op type when the
    model came from :func:`tvm_icca.load_onnx` and one of its op types has this op's name
    (``Einsum`` for ``call_tir(einsum, ...)``, ``MatMul`` for ``relax.matmul``), else the
    lowered function's name for a ``call_tir`` (``einsum``), else the Relax op's name
    (``relax.nn.softmax``)."""
    called = _called_function(call)
    name = called if called is not None else call.op.name
    return (onnx_ops or {}).get(_op_key(name), name)


def _integer_result(call: relax.Call) -> bool:
    ty = call.ty
    return isinstance(ty, relax.TensorType) and (str(ty.dtype).startswith(("int", "uint"))
                                                 or str(ty.dtype) == "bool")


def _host_reason(call: relax.Call, hw: HardwareSpec, whole_model: bool = False,
                 var2val: dict | None = None) -> str:
    name = call.op.name
    if _integer_result(call):
        # ids, positions, shapes and masks are computed where the inputs come from; the
        # chip reads the results (a bool mask, integer ids) but computes in floating point
        return (f"integer or boolean result (dtype {call.ty.dtype}): index, position and mask "
                "arithmetic stays on the host")
    if name not in OFFLOADABLE_OPS and name not in REWRITTEN_OPS:
        user = user_patterns_matching(call, var2val)
        if user:
            return _user_pattern_reason(call, user[0], hw, whole_model)
        called = _called_function(call)
        if called is not None:
            return (f"TVM's importer lowered it to the TIR function '{called}', and the chip "
                    "offloads Relax operators only")
        return "no ICCA implementation"
    try:
        reason = unsupported_reason(call, hw)
    except Exception as err:  # pylint: disable=broad-except
        # An op outside the patterns' assumptions (e.g. untyped) must not break a report.
        reason = f"cannot be analysed ({err})"
    if reason is not None:
        return reason
    if whole_model:
        return "the whole model stays on the host (see the note)"
    if name == "relax.permute_dims":
        return "a transpose is offloaded only as the transposed operand of a matmul"
    return "not matched by an ICCA pattern (outside a dataflow block, or an intermediate " \
        "value of a fused pattern is used elsewhere)"


def _user_pattern_reason(call: relax.Call, pattern: Any, hw: HardwareSpec, whole_model: bool) -> str:
    """Why an op that a user's pattern matches stayed on the host. TVM's check functions
    answer only yes or no, so the reason names the pattern and adds what the chip itself
    cannot hold (a dtype, a dynamic shape), the usual cause of a refusal."""
    if whole_model:
        return "the whole model stays on the host (see the note)"
    if pattern.check is None:
        return (f"pattern '{pattern.name}' matches it but did not fuse it (outside a dataflow "
                "block, or an intermediate value of the match is used elsewhere)")
    try:
        fact = tensors_reason(call, hw)
    except Exception:  # pylint: disable=broad-except  (a report never fails on an odd call)
        fact = None
    return (f"the check function of pattern '{pattern.name}' refused it"
            + (f": {fact}" if fact else ""))


def host_ops(mod: IRModule) -> dict[str, int]:
    """Relax ops left on the host in a partitioned module, with their counts.

    Parameters
    ----------
    mod : tvm.IRModule
        A module partitioned by :func:`partition_for_icca`.

    Returns
    -------
    dict of str to int
        Relax op name (e.g. ``"relax.nn.softmax"``) -> calls left on the host: the
        ``host_ops`` of :func:`partition_report`, whose ``host_reasons`` say why.
    """
    return partition_report(mod)["host_ops"]


def _region_label(composites: list[str], index: int) -> str:
    """A region as the report shows it: its number and its composites in the user's words
    (``region 0: conv2d+bias+relu, max_pool2d (3 ops)``)."""
    return region_label([composite_label(c) for c in composites], index)


def format_report(report: dict[str, Any]) -> str:
    """A human-readable, multi-line rendering of :func:`partition_report`.

    Parameters
    ----------
    report : dict
        What :func:`partition_report` returned (or the same dict read back from JSON).

    Returns
    -------
    str
        A headline (chip, regions, ops offloaded and left on the host), one line per region
        (its label), one per host op kind with its count and reasons, then the notes.
    """
    fused = sum(len(region["composites"]) for region in report["regions"])
    offloaded = sum(report["offloaded_ops"].values())
    # a region's label counts its fused operators (matmul+bias is one), the headline Relax
    # ops: say so where the two differ, or "29 offloaded" beside "(22 ops)" reads as a loss
    fusion = (f" (fused into {fused} device op(s), as the regions below count them)"
              if fused and fused != offloaded else "")
    lines = [
        f"ICCA partition for '{report['hardware']}': {len(report['regions'])} region(s), "
        f"{offloaded} Relax op(s) offloaded{fusion}, "
        f"{sum(report['host_ops'].values())} op(s) on the host"
    ]
    for index, region in enumerate(report["regions"]):
        # the region symbol (hundreds of characters) stays in the report's "name" field
        lines.append(f"  {region.get('label') or _region_label(region['composites'], index)}")
    lines += ["  " + line for line in host_op_lines(report)]
    for note in report.get("notes", []):
        lines.append(f"  note: {note}")
    if not report["regions"]:
        lines.append("  nothing runs on the chip: the model runs on the host CPU only")
    return "\n".join(lines)


def host_op_lines(report: dict[str, Any]) -> list[str]:
    """One line per operator left on the host, by its source op (:func:`source_op`), with
    its count, the Relax op it became and why it stays there: ``host: Einsum x1
    (relax.call_tir: TVM's importer lowered it ...)``.
    A report without ``host_sources`` (read back from an older JSON) falls back to the
    Relax op names."""
    entries = report.get("host_sources")
    if entries is None:
        entries = [{"op": name, "relax_op": name, "count": count,
                    "reasons": report["host_reasons"].get(name, [])}
                   for name, count in report["host_ops"].items()]
    lines = []
    for entry in entries:
        relax_name = "" if entry["relax_op"] == entry["op"] else f"{entry['relax_op']}: "
        why = "; ".join(entry["reasons"]) or "no pattern"
        lines.append(f"host: {entry['op']} x{entry['count']} ({relax_name}{why})")
    return lines


def host_time_note(report: dict[str, Any]) -> str | None:
    """What the simulated time leaves out when ops stay on the host (None when none do):
    the chip is simulated, the host CPU is not, so their compute time is not in it."""
    count = sum(report["host_ops"].values())
    if not count:
        return None
    return (f"the simulated time covers the chip and its host link only: the {count} op(s) "
            "left on the host CPU are not timed (their share of the run is not estimated)")


def nothing_on_chip(report: dict[str, Any]) -> str | None:
    """Why nothing of a partitioned model runs on the chip, in one paragraph (None when some
    of it does): the ops left on the host, most frequent first, with their reasons."""
    if report["regions"]:
        return None
    ops = sorted(report["host_ops"].items(), key=lambda kv: -kv[1])
    listed = "; ".join(f"{name} x{count}: {', '.join(report['host_reasons'].get(name, [])) or 'no pattern'}"
                       for name, count in ops[:4])
    more = f"; and {len(ops) - 4} more op kind(s)" if len(ops) > 4 else ""
    notes = "".join(f" ({note})" for note in report.get("notes", []))
    return (f"nothing of the model runs on the chip '{report['hardware']}'{notes}"
            + (f": {listed}{more}" if ops else " (it has no operators)"))
