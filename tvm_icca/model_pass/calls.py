"""What ``main`` says about the ICCA regions of a partitioned module.

The model-level decisions (:mod:`tvm_icca.model_pass.planner`) need facts only ``main`` knows:
the order in which it calls the regions (a region of identical layers is called once per
layer), where each argument of each call comes from (model state, an earlier region, the
host), how much activation memory the model needs at once, and how many Relax operators ran
where. This module reads them; it decides nothing.
"""

from __future__ import annotations

import collections
from typing import Any, Collection, Iterator, Mapping

import tvm
from tvm import relax
from tvm.ir import IRModule

from runtime_sim.contract.errors import IccaError
from tvm_icca.ops.relax_types import static_bytes, static_shape
from tvm_icca.partition.partitioner import icca_regions, partition_report
from tvm_icca.partition.patterns import composite_label

__all__ = [
    "CHIP", "HOST", "STATE", "VIEW_OPS", "argument_origins", "default_resident", "gathered_state", "host_reads", "main_function",
    "largest_activations", "model_state_tensors", "on_chip_reservation", "partitioned_op_counts", "region_call_order", "region_gvars",
    "state_read_by_regions",
]

#: Host ops that only reinterpret the shape of a row-major tensor: an input read through one
#: of them has the source of the op's operand (a reshaped weight is still a weight in HBM, a
#: reshaped region output is still on chip). Transposes and slices move data, so they do not.
VIEW_OPS = frozenset({"relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten"})

#: Origins of a region argument (:func:`argument_origins`): produced by an earlier region,
#: computed or fed by the host.
CHIP = "chip"
HOST = "host"
#: Origin of a region argument that is model state (weights, KV caches, constants).
STATE = "state"


def region_call_order(mod: IRModule) -> list[str]:
    """ICCA regions in the order ``main`` calls them (a region called twice appears twice)."""
    gvars = region_gvars(mod)
    return [r for b in _bindings(main_function(mod)) if (r := _region_of_call(b.value, gvars)) is not None]


def argument_origins(mod: IRModule, resident: Collection[str]) -> list[tuple[str, ...]]:
    """Per region call of ``main`` (in order), where each argument comes from: ``"state"``
    (a ``main`` parameter named in ``resident``, or a constant, possibly through a view op),
    ``"chip"`` (an earlier region's result) or ``"host"`` (anything else)."""
    return [tuple(origin for origin, _ in args) for args in _region_arguments(mod, resident)]


def state_read_by_regions(mod: IRModule, resident: Collection[str]) -> frozenset[str]:
    """The ``main`` parameters named in ``resident`` that some region reads (directly or
    through view ops): the model state the chip reads, as opposed to state only the host
    uses (e.g. an embedding table gathered on the host)."""
    return frozenset(name for args in _region_arguments(mod, resident)
                     for _, names in args for name in names)


def _region_arguments(mod: IRModule, resident: Collection[str]
                      ) -> list[list[tuple[str, frozenset[str]]]]:
    """Per region call of ``main``, per argument: its origin and the resident parameters it
    is (a view of)."""
    main = main_function(mod)
    origin: dict[relax.Var, tuple[str, frozenset[str]]] = {}
    for param in main.params:
        name = str(param.name)
        origin[param] = (STATE, frozenset([name])) if name in resident else (HOST, frozenset())
    gvars = region_gvars(mod)
    nothing = (HOST, frozenset())

    def source_of(expr: relax.Expr) -> tuple[str, frozenset[str]]:
        if isinstance(expr, tvm.ir.GenericConst):
            return STATE, frozenset()
        if isinstance(expr, relax.Var):
            return origin.get(expr, nothing)
        if isinstance(expr, relax.TupleGetItem):
            return source_of(expr.tuple_value)
        return nothing

    result: list[list[tuple[str, frozenset[str]]]] = []
    for binding, kind, operand in _dataflow(main, gvars):
        if kind == _REGION:
            result.append([source_of(arg) for arg in binding.value.args])
            origin[binding.var] = (CHIP, frozenset())
        else:  # an alias or view has its operand's origin; a host op's result is the host's
            origin[binding.var] = source_of(operand) if kind == _ALIAS else nothing
    return result


#: Kinds of a binding of ``main`` (:func:`_dataflow`).
_REGION, _ALIAS, _HOST = "region", "alias", "host"


def _dataflow(main: relax.Function, gvars: Mapping[tvm.ir.GlobalVar, str]
              ) -> Iterator[tuple[relax.Binding, str, relax.Expr | None]]:
    """Each binding of ``main`` with its kind: a call of an ICCA region; an alias that moves no
    data (a variable, tuple, projection, constant or view op, :data:`VIEW_OPS`) with the
    operand whose data it is; or a host op. The one classification :func:`argument_origins`
    and :func:`host_reads` propagate through."""
    for binding in _bindings(main):
        value = binding.value
        if _region_of_call(value, gvars) is not None:
            yield binding, _REGION, None
        elif isinstance(value, (relax.Var, relax.TupleGetItem, relax.Tuple, tvm.ir.GenericConst)):
            yield binding, _ALIAS, value
        elif (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
              and value.op.name in VIEW_OPS):
            yield binding, _ALIAS, value.args[0]
        else:
            yield binding, _HOST, None


def host_reads(mod: IRModule, result_only: bool = False) -> list[frozenset[int]]:
    """Per region call of ``main`` (in order), the indices of its outputs the host reads: those
    a host operator consumes (through view ops, tuple projections and aliases, which move no
    data) or that ``main`` returns. With ``result_only``, only what ``main`` returns (when the
    model treats host ops between regions as on-chip re-layouts). The rule mirrors
    :func:`argument_origins`: an output read by a host op returns to the host, and what the
    host op produces comes back as a ``"host"`` argument."""
    main = main_function(mod)
    gvars = region_gvars(mod)
    origin: dict[relax.Var, list[tuple[int, int | None]]] = {}
    reads: list[set[int | None]] = []

    def origins(expr: relax.Expr) -> list[tuple[int, int | None]]:
        if isinstance(expr, relax.Var):
            return origin.get(expr, [])
        if isinstance(expr, relax.TupleGetItem):
            return [(c, expr.index if i is None else i) for c, i in origins(expr.tuple_value)]
        if isinstance(expr, relax.Tuple):
            return [o for field in expr.fields for o in origins(field)]
        return []

    def mark(expr: relax.Expr) -> None:
        for c, i in origins(expr):
            reads[c].add(i)

    for binding, kind, operand in _dataflow(main, gvars):
        if kind == _REGION:
            origin[binding.var] = [(len(reads), None)]
            reads.append(set())
        elif kind == _ALIAS:
            origin[binding.var] = origins(operand)
        elif isinstance(binding.value, relax.Call) and not result_only:
            for arg in binding.value.args:  # a host op reads its operands
                mark(arg)
    body = main.body
    mark(body.body if isinstance(body, relax.SeqExpr) else body)
    return [frozenset(i for i in r if i is not None) | (frozenset([-1]) if None in r else frozenset())
            for r in reads]


def default_resident(mod: IRModule) -> frozenset[str]:
    """The ``main`` parameters that are model state by default: those after the first
    ``num_input`` (the attribute ``relax.frontend.nn`` exports set), else none (an ONNX import
    binds its weights as constants, which count as model state anyway)."""
    main = main_function(mod)
    num_input = main.attrs.get("num_input") if main.attrs is not None else None
    if num_input is None:
        return frozenset()
    return frozenset(str(p.name) for p in list(main.params)[int(num_input):])


def on_chip_reservation(mod: IRModule, resident: Collection[str], num_cores: int,
                        include_state: bool = True) -> int:
    """Bytes per core that keeping the model on chip reserves: all model state (weights, KV
    caches, constants) spread over every core (unless ``include_state`` is off: compute-shift
    plans place the state themselves, :mod:`tvm_icca.model_pass.idle_active`), plus the largest
    input/output pair of any binding of ``main`` (the live activations while it runs)."""
    main = main_function(mod)
    state = sum(nbytes for _, nbytes in model_state_tensors(mod, resident))
    largest = max((_activation_bytes(b, resident) for b in _bindings(main)), default=0)
    return -(-((state if include_state else 0) + largest) // num_cores)


def model_state_tensors(mod: IRModule, resident: Collection[str]) -> list[tuple[str, int]]:
    """The model state of ``mod`` (the ``resident`` parameters of ``main``: weights, KV
    caches; and the constants its calls read), as ``(description, bytes)`` pairs, largest
    first; a description is the tensor's name (or ``constant``), shape and element type."""
    main = main_function(mod)
    out = [(f"'{p.name}' {_shape_text(p.ty)}", static_bytes(p.ty)) for p in main.params
           if str(p.name) in resident]
    for binding in _bindings(main):
        value = binding.value
        if isinstance(value, relax.Call):
            out += [(f"a constant {_shape_text(arg.ty)}", static_bytes(arg.ty)) for arg in value.args
                    if isinstance(arg, tvm.ir.GenericConst)]
    return sorted(out, key=lambda t: -t[1])


#: The composite of an embedding lookup on the chip (:mod:`tvm_icca.ops.gather`).
_TAKE_COMPOSITE = "icca.take"


def gathered_state(mod: IRModule, resident: Collection[str]) -> frozenset[str]:
    """The ``main`` parameters named in ``resident`` that are read only as the table of an
    embedding lookup on the chip (``relax.take`` offloaded): the chip reads rows of them,
    never the whole tensor, so the tensor need not fit the chip (in HBM or on the host it is
    read row by row, :mod:`runtime_sim.contract.hbm_reads`). A parameter with any other use
    is not one."""
    main = main_function(mod)
    gvars = region_gvars(mod)
    names = {p: str(p.name) for p in main.params if str(p.name) in resident}
    out = set(names.values())
    for binding in _bindings(main):
        value = binding.value
        if _region_of_call(value, gvars) is None:
            # any other use (a host op, a tuple, main's result) reads the whole tensor
            for var in relax.analysis.free_vars(value) if isinstance(value, relax.Expr) else ():
                out.discard(names.get(var, ""))
            continue
        for i, arg in enumerate(value.args):
            if arg in names and not _only_gathered(mod[value.op], i):
                out.discard(names[arg])
    result = main.body.body if isinstance(main.body, relax.SeqExpr) else main.body
    for var in relax.analysis.free_vars(result):
        out.discard(names.get(var, ""))
    return frozenset(out)


def _only_gathered(region: relax.Function, i: int) -> bool:
    """Whether parameter ``i`` of ``region`` is used only as the table (first argument) of
    its take composites."""
    param = region.params[i]
    takes = set()
    for binding in _bindings(region):
        value = binding.value
        if isinstance(value, relax.Function):
            if str((value.attrs or {}).get("Composite", "")) == _TAKE_COMPOSITE:
                takes.add(binding.var)
            continue
        if isinstance(value, relax.Call) and value.op in takes and value.args \
                and value.args[0].same_as(param) and not any(a.same_as(param) for a in value.args[1:]):
            continue
        if isinstance(value, relax.Expr) and param in relax.analysis.free_vars(value):
            return False
    body = region.body.body if isinstance(region.body, relax.SeqExpr) else region.body
    return param not in relax.analysis.free_vars(body)


def largest_activations(mod: IRModule, resident: Collection[str]) -> str:
    """The binding of ``main`` whose activations :func:`on_chip_reservation` reserves, in a
    message's words: what it computes (a region's operator kinds, or the host op) and the
    shapes it reads and writes."""
    main = main_function(mod)
    bindings = list(_bindings(main))
    if not bindings:
        return "nothing"
    binding = max(bindings, key=lambda b: _activation_bytes(b, resident))
    value = binding.value
    gvars = region_gvars(mod)
    region = _region_of_call(value, gvars)
    if region is not None:
        kinds = collections.Counter(composite_label(c) for c in _composites(mod[value.op]))
        what = ", ".join(k if n == 1 else f"{k} (x{n})" for k, n in kinds.items()) or "region"
    elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        what = str(value.op.name).removeprefix("relax.")
    else:
        what = type(value).__name__
    args = value.args if isinstance(value, relax.Call) else []
    reads = [_shape_text(a.ty) for a in args if isinstance(a, relax.Var) and str(a.name) not in resident]
    return f"{what} reading {', '.join(reads) or 'nothing'} and writing {_shape_text(binding.var.ty)}"


def _activation_bytes(binding: relax.Binding, resident: Collection[str]) -> int:
    value = binding.value
    ins = 0
    if isinstance(value, relax.Call):
        ins = sum(static_bytes(a.ty) for a in value.args if isinstance(a, relax.Var)
                  and str(a.name) not in resident)
    return ins + static_bytes(binding.var.ty)


def _shape_text(ty: relax.Type) -> str:
    if isinstance(ty, relax.TupleType):
        return f"({', '.join(_shape_text(f) for f in ty.fields)})"
    shape = static_shape(ty)
    return f"{list(shape)} {ty.dtype}" if shape is not None else str(ty)


def _composites(func: relax.Function) -> list[str]:
    """Composite names a region calls, in order."""
    local: dict[relax.Var, str] = {}
    names = []
    for binding in _bindings(func):
        if isinstance(binding.value, relax.Function):
            local[binding.var] = str((binding.value.attrs or {}).get("Composite", "?"))
        elif isinstance(binding.value, relax.Call) and binding.value.op in local:
            names.append(local[binding.value.op])
    return names


def partitioned_op_counts(
    part: IRModule, report: Mapping[str, Any] | None = None
) -> dict[str, dict[str, int]]:
    """Relax ops of a partitioned module: ``{"offloaded": {op: n}, "host": {op: n}}``.

    ``MergeCompositeFunctions`` emits one function for identical regions (the layers of an
    LLM share theirs) and :func:`partition_report` lists each function once, so offloaded ops
    are weighted here by how many times ``main`` calls their region. Offloaded plus host
    ops equal the ops of the module before partitioning.
    """
    report = report if report is not None else partition_report(part)
    calls = collections.Counter(region_call_order(part))
    offloaded: collections.Counter[str] = collections.Counter()
    for region in report["regions"]:
        for op, count in region["ops"].items():
            offloaded[op] += count * calls[region["name"]]
    return {"offloaded": dict(sorted(offloaded.items())), "host": dict(report["host_ops"])}


def main_function(mod: IRModule) -> relax.Function:
    for gvar, func in mod.functions_items():
        if gvar.name_hint == "main" and isinstance(func, relax.Function):
            return func
    raise IccaError("the module has no Relax function 'main'")


def _bindings(func: relax.Function) -> Iterator[relax.Binding]:
    body = func.body
    if isinstance(body, relax.SeqExpr):
        for block in body.blocks:
            yield from block.bindings


def region_gvars(mod: IRModule) -> dict[tvm.ir.GlobalVar, str]:
    """GlobalVar -> name (as :func:`icca_regions` names them) of every ICCA region."""
    regions = icca_regions(mod)
    out = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, relax.Function) or func.attrs is None:
            continue
        name = str(func.attrs.get("global_symbol", gvar.name_hint))
        if name in regions and regions[name].same_as(func):
            out[gvar] = name
    return out


def _region_of_call(value: Any, gvars: Mapping[tvm.ir.GlobalVar, str]) -> str | None:
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar):
        return gvars.get(value.op)
    return None
