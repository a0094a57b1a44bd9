"""Timing-only compilation: a Relax model to the device programs of its regions, no LLVM.

``tvm.compile(mod, target="icca")`` builds a runnable executable: host kernels through LLVM,
device programs inside LLVM stubs. To *time* a model on the simulated chip none of the host
side is needed, and for a 40-layer LLM it would dominate the compile time. This module does
only what the timing simulator (:func:`runtime_sim.timing.simulate_timing`) consumes:

1. :func:`~tvm_icca.partition.partition_for_icca` (the same partition ``tvm.compile`` uses);
2. :func:`~tvm_icca.compiler.compile_region` on every ICCA region, **in the order ``main``
   calls them** (the simulator runs programs in list order);
3. each program input gets its :attr:`~runtime_sim.program.TensorDecl.source`: model state
   (weights, KV caches; constants) is ``"hbm"`` on a chip with HBM, else ``"host"``; a value
   produced by an earlier region is ``"chip"``; activations the host feeds or computes are
   ``"host"``.

Layers of an LLM are identical, so their operators are planned once: a
:class:`~tvm_icca.compiler.PlanCache` shared by every region memoizes plans by the operator's
structure (names stripped), the chip and the SRAM budget, and tensor expressions are memoized
per composite function structure (``tvm_ffi.structural_hash`` / ``structural_equal``).

Example::

    from tvm_icca.simulate import compile_programs
    from tvm_icca.workloads import get_workload

    model = compile_programs(get_workload("llama2-13b", batch=32, context=2048), "ipu-pod4-hbm")
    report = model.simulate()            # runtime_sim.timing.TimingReport
    print(report.table())
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Collection, Iterable, Iterator, Mapping, Sequence

import tvm
from tvm import relax
from tvm.ir import IRModule

from runtime_sim.errors import IccaError, PlanNotFoundError
from runtime_sim.program import DeviceProgram

from .compiler import PlanCache, compile_region, extract_region
from .hardware import HardwareLike, HardwareSpec, resolve_hardware
from .partition import icca_regions, partition_for_icca, partition_report
from .reconciliation import ModelPlan, reconcile_regions
from .relax_types import static_bytes

if TYPE_CHECKING:  # pragma: no cover
    from runtime_sim.timing import TimingReport

    from .workloads import Workload

__all__ = [
    "CompiledModel", "compile_programs", "input_sources", "partitioned_op_counts", "region_call_order",
]

#: Host ops that only reinterpret the shape of a row-major tensor: an input read through one
#: of them has the source of the op's operand (a reshaped weight is still a weight in HBM, a
#: reshaped region output is still on chip). Transposes and slices move data, so they do not.
VIEW_OPS = frozenset({"relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten"})


@dataclass
class CompiledModel:
    """The device programs of a model, in execution order, ready for the timing simulator."""

    name: str
    hw: HardwareSpec
    programs: tuple[DeviceProgram, ...]
    partition: Mapping[str, Any]  # partition_report of the partitioned module
    op_counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # see partitioned_op_counts
    compile_s: float = 0.0
    plan_cache: Mapping[str, int] = field(default_factory=dict)  # hits, misses
    model_plan: ModelPlan | None = None  # idle/active decisions when the model is kept on chip

    @property
    def num_regions(self) -> int:
        return len(self.programs)

    @property
    def num_device_ops(self) -> int:
        """Operators of the device programs (one per offloaded composite call)."""
        return sum(len(p.ops) for p in self.programs)

    def offloaded_op_counts(self) -> dict[str, int]:
        """Relax operators run on the chip, per op, counted per region call."""
        return dict(self.op_counts["offloaded"])

    @property
    def offloaded_ops(self) -> int:
        """Relax operators inside ICCA regions (per call)."""
        return sum(self.offloaded_op_counts().values())

    @property
    def host_ops(self) -> int:
        """Relax operators left to the host."""
        return sum(self.op_counts["host"].values())

    def input_bytes(self) -> dict[str, int]:
        """Bytes of program inputs per source (``host``, ``hbm``, ``chip``)."""
        totals: collections.Counter[str] = collections.Counter()
        for program in self.programs:
            for decl in program.inputs:
                totals[decl.source] += decl.nbytes
        return {s: totals.get(s, 0) for s in ("host", "hbm", "chip")}

    def summary(self) -> dict[str, Any]:
        """JSON-ready facts about the compilation (no timing)."""
        return {
            "model": self.name,
            "hardware": self.hw.name,
            "regions": self.num_regions,
            "distinct_regions": len({p.region for p in self.programs}),
            "device_ops": self.num_device_ops,
            "offloaded_relax_ops": self.offloaded_ops,
            "host_relax_ops": self.host_ops,
            "host_ops": dict(self.op_counts["host"]),
            "input_bytes": self.input_bytes(),
            "compile_s": self.compile_s,
            "plan_cache": dict(self.plan_cache),
        }

    def simulate(self, *, trace: bool = False, progress: bool = False) -> "TimingReport":
        """Time the programs with :func:`runtime_sim.timing.simulate_timing`."""
        from runtime_sim.timing import simulate_timing  # pylint: disable=import-outside-toplevel

        return simulate_timing(self.programs, self.hw, trace=trace, progress=progress)


def compile_programs(
    model: "IRModule | Workload",
    hw: HardwareLike | None = None,
    *,
    resident: Collection[str] | None = None,
    progress: bool = False,
    plan_cache: PlanCache | None = None,
    name: str | None = None,
    execution: str = "t10",
    state_on_chip: bool = False,
) -> CompiledModel:
    """Partition ``model`` and compile its ICCA regions to device programs (no LLVM build).

    Parameters
    ----------
    model : tvm.IRModule or tvm_icca.workloads.Workload
        A Relax module whose entry is ``main`` (before or after ``partition_for_icca``), or a
        workload of the zoo (which knows its weights and KV caches).
    hw : HardwareSpec, preset name or dict, optional
        The chip; defaults to :func:`tvm_icca.use_hardware`'s choice.
    resident : names of ``main`` parameters, optional
        The parameters that are model state (weights, KV caches), sourced from HBM. By
        default: a workload's weights and caches; for a module, the parameters after the
        first ``num_input`` (the attribute ``relax.frontend.nn`` exports set), else none (an
        ONNX import binds its weights as constants, which count as model state).
    progress : bool
        Show a tqdm progress bar over the regions.
    plan_cache : PlanCache, optional
        Share plans across calls (e.g. the same model at several batch sizes); a fresh cache
        is used otherwise.
    execution : "t10" or "vgm"
        Compute-shift plans, or the virtual-global-memory baseline (T10 §2.2).
    state_on_chip : bool
        Keep the whole model on the chip (T10 §4.3.2: weights stay in on-chip memory, only
        inputs and outputs cross the chip boundary). Activations between regions are then
        sourced ``"chip"`` (host layout ops between regions become on-chip re-layouts) and
        every core reserves the largest activation pair (an operator's input and output).
        With compute-shift plans the model state is ``"resident"``: T10 Algorithm 1 chooses
        an idle and an active plan per operator (:mod:`tvm_icca.reconciliation`; the
        decisions are in :attr:`CompiledModel.model_plan`). The VGM keeps the state in its
        region too (its share per core reserved). :class:`PlanNotFoundError` when the model
        does not fit.
    """
    start = time.perf_counter()
    spec = resolve_hardware(hw)
    mod, resident_names, label = _unpack(model, resident)
    part = partition_for_icca(mod, spec)
    regions = icca_regions(part)
    order = region_call_order(part)
    missing = sorted(set(regions) - set(order))
    if missing:
        raise IccaError(f"ICCA regions not called from main: {', '.join(missing)}")
    origins = argument_origins(part, resident_names)
    cache = plan_cache if plan_cache is not None else PlanCache()
    model_label = label or name or "model"
    module_id = _module_id(model_label, spec, order)
    model_plan = None
    if state_on_chip:
        margin = on_chip_reservation(part, resident_names, spec.num_cores,
                                     include_state=execution == "vgm")
        if margin >= spec.usable_sram_bytes:
            what = "its weights and largest activations" if execution == "vgm" else "its largest activations"
            raise PlanNotFoundError(
                f"model '{model_label}' does not fit on '{spec.name}': {what} need {margin} "
                f"bytes per core, {spec.usable_sram_bytes} are usable"
            )
        if execution == "vgm":
            # The VGM keeps everything in its region: weights and activations alike.
            sources = [tuple("chip" for _ in row) for row in origins]
            programs = _compile_each(order, regions, spec, cache, execution, margin, sources,
                                     module_id, progress, label)
        else:
            plan_hw = spec.with_overrides(sram_bytes_per_core=spec.sram_bytes_per_core - margin)
            programs, model_plan = _compile_reconciled(order, regions, plan_hw, cache, origins,
                                                       module_id, progress, model_label)
    else:
        programs = _compile_each(order, regions, spec, cache, execution, None,
                                 _state_sources(origins, spec), module_id, progress, label)
    report = partition_report(part, spec)
    return CompiledModel(
        name=name or label or "model",
        hw=spec,
        programs=tuple(programs),
        partition=report,
        op_counts=partitioned_op_counts(part, report),
        compile_s=time.perf_counter() - start,
        plan_cache={"hits": cache.hits, "misses": cache.misses},
        model_plan=model_plan,
    )


def _compile_each(order, regions, hw, cache, execution, region_bytes, sources, module_id,
                  progress, label) -> list[DeviceProgram]:
    """Every region planned on its own (operators get the SRAM the region leaves them)."""
    compiled: dict[str, DeviceProgram] = {}
    programs: list[DeviceProgram] = []
    for index, region in enumerate(_progress(order, progress, label)):
        program = compiled.get(region)
        if program is None:
            program = compile_region(regions[region], region, hw, plan_cache=cache,
                                     execution=execution, vgm_region_bytes=region_bytes)
            compiled[region] = program
        programs.append(_with_sources(program, sources[index], module_id))
    return programs


def _compile_reconciled(order, regions, plan_hw, cache, origins, module_id, progress,
                        label) -> tuple[list[DeviceProgram], ModelPlan]:
    """The model kept on chip: idle and active plans for all operators together (T10
    Algorithm 1, :mod:`tvm_icca.reconciliation`). Model state is ``"resident"``, every other
    region input ``"chip"`` (the host only reshapes between regions, an on-chip re-layout)."""
    extracted = {r: extract_region(regions[r], r, plan_hw, cache)
                 for r in _progress(list(dict.fromkeys(order)), progress, label)}
    state: dict[str, frozenset[str]] = {}
    for region, row in zip(order, origins):
        names = frozenset(d.name for d, o in zip(extracted[region].inputs, row) if o == STATE)
        state[region] = names if region not in state else state[region] & names
    model_plan = reconcile_regions(extracted, order, state, plan_hw, cache, label)
    programs = []
    for region in order:
        program = extracted[region].program(plan_hw, model_plan.ops[region])
        sources = tuple("resident" if d.name in state[region] else "chip" for d in program.inputs)
        programs.append(_with_sources(program, sources, module_id))
    return programs, model_plan


def _with_sources(program: DeviceProgram, sources: Sequence[str], module_id: str) -> DeviceProgram:
    decls = tuple(dataclasses.replace(decl, source=source)
                  for decl, source in zip(program.inputs, sources, strict=True))
    return dataclasses.replace(program, inputs=decls, module=module_id)


def on_chip_reservation(mod: IRModule, resident: Collection[str], num_cores: int,
                        include_state: bool = True) -> int:
    """Bytes per core that keeping the model on chip reserves: all model state (weights, KV
    caches, constants) spread over every core (unless ``include_state`` is off: compute-shift
    plans place the state themselves, :mod:`tvm_icca.reconciliation`), plus the largest
    input/output pair of any binding of ``main`` (the live activations while it runs)."""
    main = _main(mod)
    state = sum(static_bytes(p.ty) for p in main.params if str(p.name) in resident)
    largest = 0
    for binding in _bindings(main):
        value = binding.value
        out = static_bytes(binding.var.ty)
        ins = 0
        if isinstance(value, relax.Call):
            ins = sum(static_bytes(a.ty) for a in value.args if isinstance(a, relax.Var)
                      and str(a.name) not in resident)
            for arg in value.args:
                if isinstance(arg, tvm.ir.GenericConst):
                    state += static_bytes(arg.ty)
        largest = max(largest, ins + out)
    return -(-((state if include_state else 0) + largest) // num_cores)


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


def _unpack(model: Any, resident: Collection[str] | None) -> tuple[IRModule, frozenset[str], str | None]:
    if isinstance(model, IRModule):
        if resident is None:
            resident = _default_resident(model)
        return model, frozenset(resident), None
    mod = getattr(model, "mod", None)
    if not isinstance(mod, IRModule):
        raise IccaError(f"compile_programs needs a tvm.IRModule or a Workload, got {type(model).__name__}")
    names = model.resident_names if resident is None else frozenset(resident)
    return mod, frozenset(names), str(getattr(model, "name", "")) or None


def _main(mod: IRModule) -> relax.Function:
    for gvar, func in mod.functions_items():
        if gvar.name_hint == "main" and isinstance(func, relax.Function):
            return func
    raise IccaError("the module has no Relax function 'main'")


def _default_resident(mod: IRModule) -> frozenset[str]:
    main = _main(mod)
    num_input = main.attrs.get("num_input") if main.attrs is not None else None
    if num_input is None:
        return frozenset()
    return frozenset(str(p.name) for p in list(main.params)[int(num_input):])


def _bindings(func: relax.Function) -> Iterator[relax.Binding]:
    body = func.body
    if isinstance(body, relax.SeqExpr):
        for block in body.blocks:
            yield from block.bindings


def _region_gvars(mod: IRModule) -> dict[tvm.ir.GlobalVar, str]:
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


def region_call_order(mod: IRModule) -> list[str]:
    """ICCA regions in the order ``main`` calls them (a region called twice appears twice)."""
    gvars = _region_gvars(mod)
    return [r for b in _bindings(_main(mod)) if (r := _region_of_call(b.value, gvars)) is not None]


def input_sources(
    mod: IRModule, hw: HardwareSpec, resident: Collection[str]
) -> list[tuple[str, ...]]:
    """Per region call of ``main`` (in order), the source of each argument.

    ``"chip"``: produced by an earlier region (possibly through a view op, see
    :data:`VIEW_OPS`, or a tuple field); model state -- ``main`` parameters named in
    ``resident`` and constants -- ``"hbm"`` when ``hw.hbm_bandwidth > 0`` else ``"host"``;
    anything else (activations, results of host ops) ``"host"``.
    """
    return _state_sources(argument_origins(mod, resident), hw)


def _state_sources(origins: Sequence[tuple[str, ...]], hw: HardwareSpec) -> list[tuple[str, ...]]:
    """Origins as program sources: model state is in HBM on a chip that has it, else the host
    sends it."""
    state = "hbm" if hw.hbm_bandwidth > 0 else "host"
    return [tuple(state if o == STATE else o for o in row) for row in origins]


#: Origin of a region argument that is model state (weights, KV caches, constants).
STATE = "state"


def argument_origins(mod: IRModule, resident: Collection[str]) -> list[tuple[str, ...]]:
    """Per region call of ``main`` (in order), where each argument comes from: ``"state"``
    (a ``main`` parameter named in ``resident``, or a constant, possibly through a view op),
    ``"chip"`` (an earlier region's result) or ``"host"`` (anything else)."""
    main = _main(mod)
    origin: dict[relax.Var, str] = {}
    for param in main.params:
        origin[param] = STATE if str(param.name) in resident else "host"
    gvars = _region_gvars(mod)

    def source_of(expr: relax.Expr) -> str:
        if isinstance(expr, tvm.ir.GenericConst):
            return STATE
        if isinstance(expr, relax.Var):
            return origin.get(expr, "host")
        if isinstance(expr, relax.TupleGetItem):
            return source_of(expr.tuple_value)
        return "host"

    result: list[tuple[str, ...]] = []
    for binding in _bindings(main):
        value = binding.value
        region = _region_of_call(value, gvars)
        if region is not None:
            result.append(tuple(source_of(arg) for arg in value.args))
            origin[binding.var] = "chip"
        elif isinstance(value, (relax.Var, relax.TupleGetItem, tvm.ir.GenericConst)):
            origin[binding.var] = source_of(value)
        elif (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
              and value.op.name in VIEW_OPS):
            origin[binding.var] = source_of(value.args[0])
        else:
            origin[binding.var] = "host"
    return result


def _module_id(label: str, hw: HardwareSpec, order: Sequence[str]) -> str:
    digest = hashlib.sha1(label.encode())
    digest.update(hw.name.encode())
    for region in order:
        digest.update(region.encode())
    return digest.hexdigest()[:16]


def _progress(items: Sequence[str], enabled: bool, label: str | None) -> Iterable[str]:
    if not enabled or len(items) < 2:
        return items
    try:
        from tqdm import tqdm  # pylint: disable=import-outside-toplevel
    except ImportError:  # tqdm is optional: no bar then
        return items
    return tqdm(items, desc=f"compiling {label or 'regions'}", unit="region")
