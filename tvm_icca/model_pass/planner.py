"""The one model-level compiler pass: every ICCA region's device program, decided for the model.

:func:`plan_device_programs` is a ``tvm.transform`` module pass that runs after
:func:`~tvm_icca.partition.partitioner.partition_for_icca`. It is the only place where regions become
device programs, for both ways of compiling a model:

* ``tvm.compile(mod, target="icca")`` (:mod:`tvm_icca.backend.target`): partition, this pass,
  ``RunCodegen`` (whose ``relax.ext.icca`` only serializes the programs into LLVM stubs,
  :mod:`tvm_icca.backend.codegen`), then the host build;
* the timing-only path (:func:`tvm_icca.drivers.device_programs.compile_programs`): partition, this pass, and
  the programs read back off the module in call order for the timing simulator.

It sees ``main`` and every region together (:mod:`tvm_icca.model_pass.calls`) and makes every
decision that depends on the model rather than on one region:

1. **input sources** of every region call: model state (weights, KV caches, constants) is
   ``"resident"`` when the model is kept on chip, ``"hbm"`` when it lives in HBM, else
   ``"host"`` (:attr:`CompileOptions.state`; by default HBM on a chip with HBM, else on chip
   when the model fits, :mod:`tvm_icca.model_pass.state_place`); an earlier region's result is
   ``"chip"``; anything else the host sends;
2. **the execution model**, compute-shift (T10) or load-compute-store on a virtual global
   memory (the VGM baseline, T10 §2.2);
3. **idle and active plans** of every operator when the model state stays on chip (T10
   §4.3.2, Algorithm 1, :mod:`tvm_icca.model_pass.idle_active`), after reserving the activations
   every core must hold.

A region called with different sources (the first layer's input comes from the host, the
next layers' from the chip) is a different device program: such a region is cloned, one
function per distinct program, and ``main`` calls the right one. Each region function then
carries its program as JSON in the :data:`PROGRAM_ATTR` attribute; every program names the
module (:attr:`~runtime_sim.contract.program.DeviceProgram.module`, a digest of all programs) and the
regions of one invocation in call order (``run_order``), so the device knows where a run of
the model ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Collection, Iterable, Iterator, Sequence

import tvm
from tvm import relax
from tvm.ir import IRModule

from runtime_sim.contract.errors import (
    HbmCapacityError,
    IccaError,
    PlanNotFoundError,
    StateCapacityError,
    short_name,
)
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.program import DeviceProgram, model_state_source, parse_program
from runtime_sim.contract.units import format_bytes
from tvm_icca.ffi_errors import raise_through_ffi
from tvm_icca.hardware_choice import HardwareLike, hardware_from_json, resolve_hardware
from tvm_icca.lower.region import extract_region, outputs_at
from tvm_icca.partition.partitioner import (
    HARDWARE_ATTR,
    icca_regions,
    is_partitioned,
    partition_module,
)
from tvm_icca.model_pass.calls import (
    CHIP,
    STATE,
    argument_origins,
    gathered_state,
    default_resident,
    host_reads,
    largest_activations,
    model_state_tensors,
    main_function,
    on_chip_reservation,
    region_call_order,
    region_gvars,
)
from tvm_icca.model_pass.elk_pass import (
    DEFAULT_HBM_DESIGN,
    PRELOAD_DESIGNS,
    PreloadSummary,
    schedule_preloads,
)
from tvm_icca.model_pass.idle_active import ModelPlan, reconcile_regions
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.model_pass.region_plans import EXECUTION_MODELS, compile_region
from tvm_icca.model_pass.state_place import (
    STATE_ATTR,
    STATE_CHOICES,
    StatePlacement,
    check_state,
    state_candidates,
    state_placement_of,
)
from tvm_icca.plan_search.plan_hook import compiled_with_hook
from tvm_icca.progress import Progress, as_progress
from tvm_icca.records.apply import database_scope

__all__ = [
    "EXECUTION_MODELS",
    "MODEL_PLAN_ATTR",
    "PRELOAD_CHOICES",
    "PRELOAD_DESIGNS",
    "PRELOAD_OFF",
    "PRELOAD_PLAN_ATTR",
    "preload_summary_of",
    "PROGRAM_ATTR",
    "CompileOptions",
    "icca_model_passes",
    "is_planned",
    "model_plan_of",
    "plan_device_programs",
    "program_of",
    "device_programs",
    "STATE_ATTR",
    "STATE_CHOICES",
    "StatePlacement",
    "state_placement_of",
]

#: Attribute of a region function holding its device program (``DeviceProgram.to_json()``).
PROGRAM_ATTR = "icca.program"
#: Module attribute holding the idle/active decisions (``ModelPlan.to_dict()`` as JSON) when
#: the model is kept on chip with compute-shift plans.
MODEL_PLAN_ATTR = "icca.model_plan"
#: Module attribute holding the Elk pass's summary (``PreloadSummary.to_dict()`` as JSON).
PRELOAD_PLAN_ATTR = "icca.preload_plan"
#: :attr:`CompileOptions.preload` value that turns the preload schedule off.
PRELOAD_OFF = "off"
#: Every value :attr:`CompileOptions.preload` (and ``--design``) accepts besides ``None``.
PRELOAD_CHOICES = PRELOAD_DESIGNS + (PRELOAD_OFF,)
#: Module attribute naming the model in messages (the timing-only path sets a workload's name).
MODEL_NAME_ATTR = "icca.model_name"


@dataclass(frozen=True)
class CompileOptions:
    """The model-level choices a user makes (everything else is searched).

    Parameters
    ----------
    execution : str
        The execution model: ``"t10"`` (compute-shift plans, the backend's own, T10 §3) or
        ``"vgm"`` (the load-compute-store baseline on a virtual global memory, T10 §2.2).
    state : str or None
        Where model state (weights, KV caches) lives: ``"chip"`` (the whole model kept in the
        chip's SRAM, T10 §4.3.2: only inputs and outputs cross the chip boundary), ``"hbm"``
        or ``"host"``; ``None`` (or ``"auto"``): HBM on a chip with HBM, else on chip when
        the model fits, else the host (:mod:`tvm_icca.model_pass.state_place`).
    resident : frozenset of str or None
        Names of ``main`` parameters that are model state (any collection of names is
        accepted); ``None`` takes :func:`~tvm_icca.model_pass.calls.default_resident`
        (constants always are).
    preload : str or None
        The HBM preload design (Elk §6.1), one of :data:`PRELOAD_DESIGNS`:

        * ``basic``: each operator at its fastest plan that fits; only the next operator's
          preload overlaps an execution;
        * ``static``: one split of SRAM between execution and preloads for the whole model;
        * ``elk-dyn``: Elk's inductive scheduling (§4.2) with cost-aware memory allocation
          (§4.3), in execution order;
        * ``elk-full``: ``elk-dyn`` plus preload order permutation (§4.4);
        * ``ideal``: a roofline with a separate interconnect and a second SRAM for preloads.

        The algorithms are :mod:`tvm_icca.elk.designs`. ``"off"``: no preload schedule (the
        device's next-operator prefetch); ``None``: ``"elk-full"`` on a chip with HBM
        (compute-shift plans, state in HBM), nothing otherwise.
    jobs : int or None
        Worker processes for the operators' candidate scans (:mod:`tvm_icca.plan_search.option_pool`)
        when the pass makes its own plan cache; ``None``: every CPU this process may use,
        ``1``: no workers (nothing is forked).
    progress : Progress, bool or None
        How the long phases report (:class:`tvm_icca.progress.Progress`); ``True`` or ``None``
        is the default, bars on standard error on a terminal once a phase has run two
        seconds; ``False``: none. It changes no decision, so options differing only in it
        compare equal.
    reuse_layers : bool
        Whether the Elk pass searches one period of a run's identical layers (plus the first
        and last layers and what is around them) and expands its decisions to every repeat
        (:mod:`tvm_icca.elk.period_reuse`), so its search no longer grows with the layers;
        ``False``: the whole run is searched (to compare the two).
    group_pieces : bool
        Whether the Elk pass's refinement moves every operator at one position of the run's
        nested repeats together -- the identical pieces of a split operator as well as the
        identical layers (:func:`tvm_icca.elk.refine.local_search`), so its search no longer
        grows with the square of a long prompt's pieces; ``False``: one class per layer
        position (to compare the two).

    Raises
    ------
    IccaError
        An unknown execution model, state place or preload design, ``jobs`` that is not a
        positive integer, or ``resident`` that is not a collection of names.
    """

    execution: str = "t10"
    state: str | None = None
    resident: frozenset[str] | None = None
    preload: str | None = None
    jobs: int | None = None
    progress: Progress = field(default_factory=Progress, compare=False)
    reuse_layers: bool = True
    group_pieces: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "progress", as_progress(self.progress))
        if self.jobs is not None and (isinstance(self.jobs, bool) or not isinstance(self.jobs, int)
                                      or self.jobs < 1):
            raise IccaError(f"jobs must be a positive number of processes, got {self.jobs!r}")
        if self.preload is not None and self.preload not in PRELOAD_CHOICES:
            raise IccaError(f"unknown preload design {self.preload!r}; choose one of "
                            f"{PRELOAD_CHOICES}")
        for flag in ("reuse_layers", "group_pieces"):
            if not isinstance(getattr(self, flag), bool):
                raise IccaError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.execution not in EXECUTION_MODELS:
            raise IccaError(
                f"unknown execution model {self.execution!r}; choose one of {EXECUTION_MODELS}")
        if self.state is not None and not isinstance(self.state, str):
            raise IccaError(f"state must be one of {STATE_CHOICES} or None, got {self.state!r}")
        object.__setattr__(self, "state", check_state(self.state))
        if self.resident is not None:
            names = self.resident
            if isinstance(names, str) or not isinstance(names, Iterable):
                names = None
            else:
                names = tuple(names)  # an iterator is read once
            if names is None or not all(isinstance(n, str) for n in names):
                raise IccaError(
                    f"resident must be a collection of parameter names, got {self.resident!r}")
            object.__setattr__(self, "resident", frozenset(names))


def plan_device_programs(
    hw: HardwareLike | None = None,
    options: CompileOptions | None = None,
    *,
    plan_cache: PlanCache | None = None,
) -> tvm.transform.Pass:
    """The model-level planning pass: every ICCA region's device program, decided for the model.

    It runs after :func:`~tvm_icca.partition.partitioner.partition_for_icca` and makes the
    decisions that depend on the whole model (the module docstring lists them: input sources,
    execution model, idle and active plans, T10 §4.3.2 Algorithm 1, and Elk's preload schedule,
    Elk §4). A module without ICCA regions, or already planned, is returned unchanged.

    Parameters
    ----------
    hw : HardwareSpec, preset name or dict, optional
        The chip; defaults to the chip the module was partitioned for.
    options : CompileOptions, optional
        The model-level choices; defaults to ``CompileOptions()``. The long phases (regions,
        Elk's preload schedule) report as its ``progress`` says.
    plan_cache : PlanCache, optional
        Plans shared with other compilations (e.g. the same model at several batch sizes);
        by default the pass makes its own, with ``options.jobs`` workers.

    Returns
    -------
    tvm.transform.Pass
        A module pass that attaches each region's device program (:data:`PROGRAM_ATTR`).

    Raises
    ------
    InvalidHardwareSpecError
        ``hw`` names no chip, or an impossible one (raised here, not when the pass runs).
    """
    # a bad chip fails here, not later
    return _planning_pass(resolve_hardware(hw) if hw is not None else None, options,
                          plan_cache=plan_cache)


def _planning_pass(spec: HardwareSpec | None, options: CompileOptions | None, *,
                   plan_cache: PlanCache | None) -> tvm.transform.Pass:
    """:func:`plan_device_programs` for a resolved chip (``None``: the module's own)."""
    opts = options if options is not None else CompileOptions()

    @tvm.transform.module_pass(opt_level=0, name="PlanIccaDevicePrograms")
    def _plan(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        try:
            if is_planned(mod) or not icca_regions(mod):
                return mod
            chip = spec if spec is not None else _module_hardware(mod)
            cache = plan_cache if plan_cache is not None else PlanCache(jobs=opts.jobs)
            order = region_call_order(mod)
            # inside meta_schedule's `with database:` its ICCA records apply (records.apply)
            with database_scope():
                programs, model_plan, preloads, placement = _decide(mod, order, chip, opts, cache)
                # tell tuning which operators kept tuned plans
                compiled_with_hook(programs, planned_jointly=placement.place == "chip")
            mod = _attach(mod, order, programs, model_plan).with_attr(STATE_ATTR,
                                                                       placement.to_json())
            if preloads is not None:
                mod = mod.with_attr(PRELOAD_PLAN_ATTR, json.dumps(preloads.to_dict(), separators=(",", ":")))
            return mod
        except IccaError as err:
            # Called from C++ (Sequential, tvm.compile): keep the error's class intact.
            raise_through_ffi(err)
            raise

    return _plan


def icca_model_passes(
    hw: HardwareSpec,
    options: CompileOptions | None = None,
    *,
    plan_cache: PlanCache | None = None,
) -> tvm.transform.Pass:
    """Partition for ``hw`` (unless partitioned) and plan every region's device program: the
    passes ``tvm.compile(mod, target="icca")`` runs before ``RunCodegen``, and all the
    timing-only path runs. ``hw`` is the chip its caller resolved (once, at the entry point:
    :func:`tvm_icca.backend.target.offload_to_icca`,
    :func:`tvm_icca.drivers.device_programs.compile_programs`)."""
    if not isinstance(hw, HardwareSpec):
        raise IccaError(f"icca_model_passes needs a resolved HardwareSpec, got {type(hw).__name__}")

    @tvm.transform.module_pass(opt_level=0, name="PartitionForIcca")
    def _partition(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        try:
            main_function(mod)  # a model is a module with a Relax "main"
            return mod if is_partitioned(mod) else partition_module(mod, hw)
        except IccaError as err:
            raise_through_ffi(err)
            raise

    return tvm.transform.Sequential(
        [_partition, _planning_pass(hw, options, plan_cache=plan_cache)],
        name="IccaModelPasses")


def is_planned(mod: IRModule) -> bool:
    """Whether every ICCA region of ``mod`` carries its device program."""
    regions = icca_regions(mod)
    return bool(regions) and all(
        func.attrs is not None and PROGRAM_ATTR in func.attrs for func in regions.values())


def program_of(func: relax.Function) -> DeviceProgram:
    """The device program a planned region function carries."""
    if func.attrs is None or PROGRAM_ATTR not in func.attrs:
        name = func.attrs.get("global_symbol", "?") if func.attrs is not None else "?"
        raise IccaError(
            f"ICCA region '{short_name(name)}' has no device program: run "
            "tvm_icca.plan_device_programs() after partition_for_icca (tvm.compile with target "
            "'icca' does both)")
    # parsed once per text (runtime_sim.contract.program.parse_program): the codegen, the
    # program listing and the device calls read the same text
    return parse_program(str(func.attrs[PROGRAM_ATTR]))


def device_programs(mod: IRModule) -> list[DeviceProgram]:
    """The device programs of a planned module, in the order ``main`` runs them.

    Parameters
    ----------
    mod : tvm.IRModule
        A module after :func:`plan_device_programs` (or ``tvm_icca.compile_programs(...).module``).

    Returns
    -------
    list of runtime_sim.contract.program.DeviceProgram
        One program per region call (a region called once per layer appears once per call).
        Each holds its operators (:class:`~runtime_sim.contract.program.OpProgram`: the tensor
        expression ``expr`` and the chosen rTensor ``plan``) and where its inputs come from.
    """
    regions = icca_regions(mod)
    order = region_call_order(mod)
    # a region of every layer is parsed once
    parsed = {name: program_of(regions[name]) for name in dict.fromkeys(order)}
    return [parsed[name] for name in order]


def preload_summary_of(mod: IRModule) -> PreloadSummary | None:
    """What the Elk pass decided for ``mod`` (None without a preload schedule)."""
    text = mod.attrs.get(PRELOAD_PLAN_ATTR) if mod.attrs is not None else None
    return None if text is None else PreloadSummary.from_dict(json.loads(str(text)))


def model_plan_of(mod: IRModule) -> ModelPlan | None:
    """The idle/active decisions the pass left on ``mod`` (None unless the model is kept on
    chip with compute-shift plans)."""
    text = mod.attrs.get(MODEL_PLAN_ATTR) if mod.attrs is not None else None
    return None if text is None else ModelPlan.from_dict(json.loads(str(text)))


# -- decisions ------------------------------------------------------------------------------
def _module_hardware(mod: IRModule) -> HardwareSpec:
    """The chip ``mod`` was partitioned for, else the current choice."""
    text = mod.attrs.get(HARDWARE_ATTR) if mod.attrs is not None else None
    return hardware_from_json(str(text)) if text is not None else resolve_hardware(None)


def _decide(mod: IRModule, order: Sequence[str], spec: HardwareSpec, opts: CompileOptions,
            cache: PlanCache
            ) -> tuple[list[DeviceProgram], ModelPlan | None, PreloadSummary | None, StatePlacement]:
    """Per region call of ``main``, in order, its device program (no module id yet), with the
    outputs the host reads after it (:func:`host_reads`; only ``main``'s result when every
    region input is on chip, as host ops between regions then count as on-chip re-layouts),
    and where the model state went (the first of :func:`state_candidates` that fits)."""
    candidates = state_candidates(spec, opts.state)
    resident = _resident(mod, opts)
    check_state_capacity(mod, resident, spec)
    for k, placement in enumerate(candidates):
        if placement.place == "hbm":
            check_hbm_capacity(mod, resident, spec)
        reads = host_reads(mod, result_only=placement.place == "chip")
        try:
            programs, model_plan = _decide_sources(mod, order, spec, opts, cache, placement.place,
                                                   resident, _read_in_every_call(order, reads))
            break
        except PlanNotFoundError as err:
            if k + 1 == len(candidates):
                raise
            # the next place is taken because of this failure: say which
            nxt = candidates[k + 1]
            candidates[k + 1] = dataclasses.replace(nxt, reason=f"{nxt.reason}: {_first_clause(err)}")
    programs = [_with_host_outputs(p, r) for p, r in zip(programs, reads, strict=True)]
    design = preload_design(spec, opts, placement.place)
    summary = None
    if design is not None:
        programs, summary = schedule_preloads(programs, spec, cache, design, opts.progress,
                                              reuse_layers=opts.reuse_layers,
                                              group_pieces=opts.group_pieces)
    return programs, model_plan, summary, placement


#: Largest model-state tensors an HBM capacity error names.
_NAMED_TENSORS = 3


def check_state_capacity(mod: IRModule, resident: Collection[str], spec: HardwareSpec) -> None:
    """Refuse, before any plan search, a model one of whose state tensors (weights, KV caches,
    constants: :func:`model_state_tensors`) is larger than the whole chip's memory, the SRAM
    of every core less its shift buffer plus the HBM: :class:`StateCapacityError`, naming the
    tensor and the bytes needed and available.

    Such a tensor fits no placement: kept on chip or in HBM the whole state is larger still,
    and sent from the host it could only stream through the chip in pieces every run (a
    16 TB KV cache ran minutes of operator splitting before its error, issue 39). The whole
    state is checked by each placement's own rule: in SRAM by the planner's idle footprint
    (T10 Algorithm 1), in HBM by :func:`check_hbm_capacity`; state sent from the host every
    run has no total bound. A chip whose HBM capacity is not modelled (0 with HBM bandwidth)
    is not checked."""
    if spec.hbm_bandwidth > 0 and spec.hbm_capacity_bytes <= 0:
        return
    # a table only looked up is read row by row (its rows count with the operators' own
    # checks, tvm_icca.plan_search.search): it never has to be whole on the chip
    tensors = model_state_tensors(mod, set(resident) - gathered_state(mod, resident))
    if not tensors:
        return
    what, needed = tensors[0]
    sram = spec.usable_sram_bytes * spec.num_cores
    available = sram + spec.hbm_capacity_bytes
    if needed <= available:
        return
    label = str(mod.attrs.get(MODEL_NAME_ATTR, "model")) if mod.attrs is not None else "model"
    hbm = (f" plus {_bytes(spec.hbm_capacity_bytes)} of HBM: {_bytes(available)} in all"
           if spec.hbm_capacity_bytes else "")
    raise StateCapacityError(
        f"model '{short_name(label)}' cannot run on chip '{spec.name}': its state tensor {what} "
        f"alone needs {_bytes(needed)}, and the chip has {_bytes(sram)} of SRAM "
        f"({spec.num_cores} cores x {format_bytes(spec.usable_sram_bytes)} less the shift "
        f"buffer){hbm}. Use a chip with more memory, a smaller batch or context, or fewer "
        "layers", needed, available)


def _bytes(nbytes: int) -> str:
    """Exact bytes for the record beside the readable size: ``16 TiB (17592186044416 bytes)``."""
    return f"{format_bytes(nbytes)} ({nbytes} bytes)"


def check_hbm_capacity(mod: IRModule, resident: Collection[str], spec: HardwareSpec) -> None:
    """Raise :class:`HbmCapacityError` when the model state of ``mod`` (weights, KV caches,
    constants: :func:`model_state_tensors`) does not fit in ``spec``'s HBM
    (:attr:`HardwareSpec.hbm_capacity_bytes`; a capacity of 0 is not modelled: no check),
    naming the largest tensors and the capacity."""
    capacity = spec.hbm_capacity_bytes
    if capacity <= 0:
        return
    tensors = model_state_tensors(mod, resident)
    total = sum(nbytes for _, nbytes in tensors)
    if total <= capacity:
        return
    label = str(mod.attrs.get(MODEL_NAME_ATTR, "model")) if mod.attrs is not None else "model"
    largest = ", ".join(f"{what} ({_gb(nbytes)})" for what, nbytes in tensors[:_NAMED_TENSORS])
    raise HbmCapacityError(
        f"model '{short_name(label)}' keeps {_gb(total)} of state in HBM (weights, KV caches: "
        f"{len(tensors)} tensors), "
        f"but chip '{spec.name}' has {_gb(capacity)} of HBM ({_gb(spec.hbm_bytes_per_chip)} on "
        f"each of {spec.num_chips} chip(s)); the largest: {largest}. Use a chip with more HBM "
        f"(hbm_bytes_per_chip) or more chips, a smaller batch or context, or state='host'")


def _gb(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def _first_clause(err: Exception) -> str:
    """The head of a capacity error, for the reason of the fallback it caused."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def preload_design(spec: HardwareSpec, opts: CompileOptions, place: str) -> str | None:
    """The preload design the pass applies when model state is at ``place`` (None: no
    preload schedule)."""
    if opts.preload == PRELOAD_OFF:
        return None
    applies = spec.hbm_bandwidth > 0 and opts.execution == "t10" and place == "hbm"
    if opts.preload is None:
        return DEFAULT_HBM_DESIGN if applies else None
    if not applies:
        why = ("it has no HBM" if spec.hbm_bandwidth <= 0 else
               f"the model state is not in HBM (state={place!r})" if place != "hbm" else
               f"execution={opts.execution!r} programs load through the VGM")
        raise IccaError(f"preload design {opts.preload!r} cannot apply on chip '{spec.name}': {why}")
    return opts.preload


def _read_in_every_call(order: Sequence[str], reads: Sequence[frozenset[int]]
                        ) -> dict[str, frozenset[int]]:
    """Per distinct region, the indices of the outputs the host reads after every call of it
    (-1: all of them): those leave the chip as produced in every call, so its plans need not
    hold them (``RegionOps.host_outputs``)."""
    common: dict[str, frozenset[int]] = {}
    for region, indices in zip(order, reads, strict=True):
        if region not in common or -1 in common[region]:
            common[region] = frozenset(indices)
        elif -1 not in indices:
            common[region] &= indices
    return common


def _with_host_outputs(program: DeviceProgram, indices: frozenset[int]) -> DeviceProgram:
    """``program`` naming the outputs at ``indices`` (-1: all of them) as read by the host."""
    if not indices:
        return program
    return dataclasses.replace(program, host_outputs=outputs_at(program.outputs, indices))


def _resident(mod: IRModule, opts: CompileOptions) -> Collection[str]:
    """The ``main`` parameters that are model state: the options', else the default rule
    (:func:`default_resident`); raises :class:`IccaError` for a name ``main`` does not have."""
    resident = opts.resident if opts.resident is not None else default_resident(mod)
    params = {str(p.name) for p in main_function(mod).params}
    unknown = sorted(set(resident) - params)
    if unknown:
        raise IccaError(f"resident names {unknown} are not parameters of main")
    return resident


def _decide_sources(mod: IRModule, order: Sequence[str], spec: HardwareSpec,
                    opts: CompileOptions, cache: PlanCache, place: str,
                    resident: Collection[str], host_read: dict[str, frozenset[int]]
                    ) -> tuple[list[DeviceProgram], ModelPlan | None]:
    """Per region call of ``main`` (``order``), its device program with its input sources,
    model state at ``place`` (:data:`~tvm_icca.model_pass.state_place.STATE_PLACES`) and in the
    ``resident`` parameters (:func:`_resident`); ``host_read``: per region, the outputs the
    host reads after every call (:func:`_read_in_every_call`)."""
    regions = icca_regions(mod)
    missing = sorted(set(regions) - set(order))
    if missing:
        raise IccaError(f"ICCA regions not called from main: {', '.join(missing)}")
    origins = argument_origins(mod, resident)
    label = str(mod.attrs.get(MODEL_NAME_ATTR, "model")) if mod.attrs is not None else "model"
    if place != "chip":
        state = model_state_source(place == "hbm")
        sources = [tuple(state if o == STATE else o for o in row) for row in origins]
        return _compile_each(order, regions, spec, cache, opts.execution, None, sources,
                             state, opts.progress, host_read), None
    margin = on_chip_reservation(mod, resident, spec.num_cores,
                                 include_state=opts.execution == "vgm")
    if margin >= spec.usable_sram_bytes:
        what = ("its weights and largest activations" if opts.execution == "vgm"
                else "its largest activations")
        raise PlanNotFoundError(
            f"model '{short_name(label)}' does not fit on chip '{spec.name}' ({spec.num_cores} "
            f"cores): {what} need {margin} bytes per core, {spec.usable_sram_bytes} are usable; "
            f"the largest activations are those of {largest_activations(mod, resident)}")
    if opts.execution == "vgm":
        # The VGM keeps everything in its region: weights and activations alike.
        sources = [tuple(CHIP for _ in row) for row in origins]
        return _compile_each(order, regions, spec, cache, "vgm", margin, sources, CHIP,
                             opts.progress, host_read), None
    plan_hw = spec.with_overrides(sram_bytes_per_core=spec.sram_bytes_per_core - margin)
    return _compile_reconciled(order, regions, plan_hw, cache, origins, opts.progress, label,
                               host_read)


def _compile_each(order: Sequence[str], regions, hw: HardwareSpec, cache: PlanCache,
                  execution: str, region_bytes: int | None, sources: Sequence[tuple[str, ...]],
                  constant_source: str, progress: Progress,
                  host_read: dict[str, frozenset[int]]) -> list[DeviceProgram]:
    """Every region planned on its own (operators get the SRAM the region leaves them); one
    bar over the operators of every distinct region, each counted once extracted."""
    compiled: dict[str, DeviceProgram] = {}
    programs: list[DeviceProgram] = []
    hbm: dict[str, set[int]] = {}  # parameters read from HBM in some call of the region
    for region, row in zip(order, sources):
        hbm.setdefault(region, set()).update(i for i, s in enumerate(row) if s == "hbm")
    distinct = list(dict.fromkeys(order))
    with progress.phase("planning operators", unit="op") as phase:
        for k, region in enumerate(distinct):
            if len(distinct) > 1:
                phase.note(f"region {k + 1}/{len(distinct)}")
            with _region_errors(region, hw):
                compiled[region] = compile_region(
                    regions[region], region, hw, plan_cache=cache, execution=execution,
                    vgm_region_bytes=region_bytes, hbm_params=sorted(hbm[region]),
                    hbm_constants=constant_source == "hbm", host_reads=host_read[region],
                    phase=phase)
    for region, row in zip(order, sources):
        programs.append(_with_sources(compiled[region], row, constant_source))
    return programs


def _compile_reconciled(order: Sequence[str], regions, plan_hw: HardwareSpec, cache: PlanCache,
                        origins: Sequence[tuple[str, ...]], progress: Progress,
                        label: str, host_read: dict[str, frozenset[int]]
                        ) -> tuple[list[DeviceProgram], ModelPlan]:
    """The model kept on chip: idle and active plans for all operators together (T10
    Algorithm 1). Model state is ``"resident"``, every other region input ``"chip"`` (the host
    only reshapes between regions, an on-chip re-layout)."""
    extracted = {}
    distinct = list(dict.fromkeys(order))
    with progress.phase("extracting regions", unit="region", total=len(distinct)) as phase:
        for region in distinct:
            with _region_errors(region, plan_hw):
                extracted[region] = extract_region(regions[region], region, plan_hw,
                                                   cache.exprs).with_host_reads(host_read[region])
            phase.step()
    state: dict[str, frozenset[str]] = {}
    for region, row in zip(order, origins):
        names = frozenset(d.name for d, o in zip(extracted[region].inputs, row) if o == STATE)
        state[region] = names if region not in state else state[region] & names
    with progress.phase("idle/active plans", unit="op") as phase:
        model_plan = reconcile_regions(extracted, order, state, plan_hw, cache, label,
                                       phase=phase)
    resident = model_state_source(plan_hw.hbm_bandwidth > 0, on_chip=True)
    programs = []
    for region in order:
        program = extracted[region].program(plan_hw, model_plan.ops[region])
        row = tuple(resident if d.name in state[region] else CHIP for d in program.inputs)
        programs.append(_with_sources(program, row, resident))
    return programs, model_plan


@contextlib.contextmanager
def _region_errors(region: str, hw: HardwareSpec) -> Iterator[None]:
    """Foreign failures while compiling a region (TVM's LegalizeOps, TE lowering, ...) as one
    :class:`IccaError` naming the region and the chip; TVM's C++ context stays chained."""
    try:
        yield
    except IccaError:
        raise
    except Exception as err:  # pylint: disable=broad-except
        text = str(err).strip()
        first_line = text.splitlines()[0] if text else ""
        raise IccaError(
            f"ICCA codegen failed for region '{short_name(region)}' on chip '{hw.name}': "
            f"{type(err).__name__}: {first_line}") from err


def _with_sources(program: DeviceProgram, sources: Sequence[str],
                  constant_source: str) -> DeviceProgram:
    """``program`` with its inputs' sources, and its baked-in constants' (model state)."""
    if len(program.inputs) != len(sources):
        raise IccaError(
            f"device program of region '{short_name(program.region)}' has {len(program.inputs)} input(s), "
            f"but main calls the region with {len(sources)}")
    decls = tuple(dataclasses.replace(decl, source=source)
                  for decl, source in zip(program.inputs, sources, strict=True))
    constants = {name: {**entry, "source": constant_source}
                 for name, entry in program.constants.items()}
    return dataclasses.replace(program, inputs=decls, constants=constants)


# -- the programs onto the module -----------------------------------------------------------
def _attach(mod: IRModule, order: Sequence[str], programs: Sequence[DeviceProgram],
            model_plan: ModelPlan | None) -> IRModule:
    """Write each call's program onto its region function, cloning regions called with
    different programs, and name the module and its run order in every program."""
    taken = {gvar.name_hint for gvar in mod.get_global_vars()}
    texts = [program.to_json() for program in programs]
    variants: dict[str, dict[str, str]] = {}  # region -> program JSON -> function symbol
    symbols: list[str] = []  # per call, the function it runs
    for region, text in zip(order, texts):
        named = variants.setdefault(region, {})
        if text not in named:
            named[text] = region if not named else _variant_symbol(region, len(named), taken)
        symbols.append(named[text])
    digest = hashlib.sha1()
    for symbol, text in zip(symbols, texts):
        digest.update(symbol.encode())
        digest.update(text.encode())
    module_id = digest.hexdigest()[:16]
    final: dict[str, str] = {}
    for symbol, program in zip(symbols, programs):
        if symbol not in final:
            final[symbol] = dataclasses.replace(program, region=symbol, module=module_id,
                                                run_order=tuple(symbols)).to_json()
    if symbols == order:  # no region needs a variant: only attach the programs
        mod = mod.clone()  # a pass must not change the module it was given
        for gvar, name in region_gvars(mod).items():
            mod.update_func(gvar, mod[gvar].with_attr(PROGRAM_ATTR, final[name]))
    else:
        mod = _RedirectCalls(mod, symbols, final).transform()
    if model_plan is not None:
        mod = mod.with_attr(MODEL_PLAN_ATTR, json.dumps(model_plan.to_dict(), separators=(",", ":")))
    return mod


def _variant_symbol(region: str, k: int, taken: set[str]) -> str:
    symbol = f"{region}_v{k}"
    while symbol in taken:
        symbol += "_"
    taken.add(symbol)
    return symbol


@relax.expr_functor.mutator
class _RedirectCalls(relax.PyExprMutator):
    """Calls of ``main`` to the region variant they run; every region with its program."""

    def __init__(self, mod: IRModule, symbols: Sequence[str], programs: dict[str, str]) -> None:
        super().__init__(mod)
        self._mod = mod
        self._symbols = iter(symbols)
        self._programs = programs
        self._regions = region_gvars(mod)
        self._added: dict[str, tvm.ir.GlobalVar] = {}

    def transform(self) -> IRModule:
        for gvar, name in self._regions.items():
            func = self._mod[gvar].with_attr(PROGRAM_ATTR, self._programs[name])
            self.builder_.update_func(gvar, func)
        main_gvar = self._mod.get_global_var("main")
        self.builder_.update_func(main_gvar, self.visit_expr(self._mod[main_gvar]))
        return self.builder_.get()

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        region = self._regions.get(call.op) if isinstance(call.op, tvm.ir.GlobalVar) else None
        if region is None:
            return call
        symbol = next(self._symbols)
        if symbol == region:
            return call
        target = self._added.get(symbol)
        if target is None:
            original = self._mod[call.op]
            clone = (original.with_attr("global_symbol", symbol)
                     .with_attr(PROGRAM_ATTR, self._programs[symbol]))
            target = self._added[symbol] = self.builder_.add_func(clone, symbol)
        return relax.Call(target, call.args, call.attrs, call.ty_args)
