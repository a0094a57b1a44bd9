"""Timing-only compilation: a model's device programs in call order, without the host build.

``tvm.compile(mod, target="icca")`` builds a runnable executable: host kernels through LLVM,
device programs inside LLVM stubs. To *time* a model on the simulated chip none of the host
side is needed, and for a 40-layer LLM it would dominate the compile time.
:func:`compile_programs` runs the same passes as ``tvm.compile`` up to the codegen
(:func:`~tvm_icca.partition.partitioner.partition_for_icca`, then the model-level pass
:func:`~tvm_icca.model_pass.plan_device_programs`) and reads the programs back off the module in
the order ``main`` calls them: the very programs an executable built from the same module
runs, byte for byte.

Example::

    from tvm_icca.drivers.device_programs import compile_programs
    from tvm_icca.workloads import get_workload

    model = compile_programs(get_workload("llama2-13b", batch=32, context=2048), "ipu-pod4-hbm")
    report = model.simulate()            # runtime_sim.timing.TimingReport
    print(report.table())
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Collection, Mapping

from tvm.ir import IRModule

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.program import DeviceProgram
from tvm_icca.hardware_choice import HardwareLike, HardwareSpec, resolve_hardware
from tvm_icca.partition.partitioner import (
    is_partitioned,
    nothing_on_chip,
    partition_module,
    partition_report,
)
from tvm_icca.model_pass import (
    CompileOptions,
    icca_model_passes,
    model_plan_of,
    preload_summary_of,
    device_programs,
    state_placement_of,
)
from tvm_icca.model_pass.calls import main_function, partitioned_op_counts
from tvm_icca.model_pass.elk_pass import PreloadSummary
from tvm_icca.model_pass.idle_active import ModelPlan
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.model_pass.planner import MODEL_NAME_ATTR
from tvm_icca.model_pass.state_place import StatePlacement
from tvm_icca.progress import ProgressLike, as_progress
from tvm_icca.split import is_join, original_operator

if TYPE_CHECKING:  # pragma: no cover
    from runtime_sim.timing import TimingReport
    from tvm_icca.workloads import Workload

__all__ = ["CompiledModel", "compile_programs"]

@dataclass
class CompiledModel:
    """The device programs of a model, in execution order, ready for the timing simulator.

    Made by :func:`compile_programs`; :meth:`simulate` times it.

    Attributes
    ----------
    name : str
        The model's name (a workload's, or ``name=`` of :func:`compile_programs`).
    hw : HardwareSpec
        The chip it was compiled for.
    programs : tuple of DeviceProgram
        One device program per region call, in the order ``main`` runs them.
    partition : Mapping[str, Any]
        :func:`tvm_icca.partition_report` of the partitioned module.
    op_counts : Mapping[str, Mapping[str, int]]
        Relax operator counts: offloaded per region call and left on the host.
    compile_s : float
        Wall-clock seconds :func:`compile_programs` took.
    plan_cache : Mapping[str, int]
        Plan cache ``hits`` and ``misses`` of this compilation, and its plan ``searches``
        (the misses no memo or on-disk entry answered).
    model_plan : ModelPlan or None
        T10 Algorithm 1's idle/active decisions, when the model is kept on chip.
    preload : PreloadSummary or None
        The Elk pass's decisions (design, order, preload bytes) on a chip with HBM.
    state : StatePlacement or None
        Where weights and KV caches lived, and why.
    module : tvm.IRModule or None
        The planned module.
    """

    name: str
    hw: HardwareSpec
    programs: tuple[DeviceProgram, ...]
    partition: Mapping[str, Any]
    op_counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    compile_s: float = 0.0
    plan_cache: Mapping[str, int] = field(default_factory=dict)
    model_plan: ModelPlan | None = None
    preload: PreloadSummary | None = None
    state: StatePlacement | None = None
    module: IRModule | None = field(default=None, repr=False)

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

    @property
    def tuned_ops(self) -> list[str]:
        """Operators whose plan came from tuning records (:func:`tvm_icca.use_database`, or
        meta_schedule's ``with database:``), each once, in execution order."""
        return list(dict.fromkeys(op.name for p in self.programs for op in p.ops if op.tuned))

    def split_ops(self) -> dict[str, int]:
        """Operators that run as sub-operators (:mod:`tvm_icca.split`: those too large for the
        chip and the readers of their pieces cut alike): each one's name and its number of
        pieces, once per distinct region."""
        pieces: dict[str, set[str]] = {}
        for program in {p.region: p for p in self.programs}.values():
            for op in program.ops:
                origin = original_operator(op.name)
                if origin != op.name and not is_join(op.name):
                    pieces.setdefault(origin, set()).add(op.name)
        return {origin: len(names) for origin, names in pieces.items()}

    def input_bytes(self) -> dict[str, int]:
        """Bytes of program inputs per source: ``host`` (sent every run), ``hbm`` (preloaded
        every run), ``chip`` (an earlier region's result) and ``resident`` (model state kept
        on chip, loaded once)."""
        totals: collections.Counter[str] = collections.Counter()
        for program in self.programs:
            for decl in program.inputs:
                totals[decl.source] += decl.nbytes
        return {s: totals.get(s, 0) for s in ("host", "hbm", "chip", "resident")}

    def summary(self) -> dict[str, Any]:
        """JSON-ready facts about the compilation (no timing)."""
        split = self.split_ops()
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
            "tuned_ops": self.tuned_ops,
            "split_ops": len(split),
            "split_pieces": sum(split.values()),
            "state": self.state.place if self.state is not None else None,
            "state_reason": self.state.reason if self.state is not None else None,
            **({"preload": self.preload.to_dict()} if self.preload is not None else {}),
        }

    def simulate(self, *, trace: bool = False, progress: ProgressLike = None) -> "TimingReport":
        """Time the programs with :func:`runtime_sim.timing.simulate_timing`; ``progress``
        as :func:`compile_programs` takes it (a bar over the operators costed).

        Raises :class:`~runtime_sim.contract.errors.IccaError` when nothing of the model runs
        on the chip (a 0 s result would read as a measurement), saying why."""
        reason = nothing_on_chip(self.partition)
        if reason is not None or not self.programs:
            raise IccaError(reason or f"model '{self.name}' has no device program to time")
        from runtime_sim.timing import simulate_timing  # pylint: disable=import-outside-toplevel

        with as_progress(progress).phase("timing", unit="op",
                                         total=self.num_device_ops) as phase:
            return simulate_timing(self.programs, self.hw, trace=trace, on_op=phase.step)


def compile_programs(
    model: "IRModule | Workload",
    hw: HardwareLike | None = None,
    *,
    resident: Collection[str] | None = None,
    progress: ProgressLike = None,
    plan_cache: PlanCache | None = None,
    name: str | None = None,
    execution: str = "t10",
    state: str | None = None,
    preload: str | None = None,
    jobs: int | None = None,
    reuse_layers: bool = True,
    group_pieces: bool = True,
) -> CompiledModel:
    """Partition ``model`` and plan its ICCA regions' device programs (no LLVM build).

    Parameters
    ----------
    model : tvm.IRModule or tvm_icca.workloads.Workload
        A Relax module whose entry is ``main`` (before or after ``partition_for_icca``), or a
        workload of the zoo (which knows its weights and KV caches).
    hw : HardwareSpec, preset name or dict, optional
        The chip; defaults to :func:`tvm_icca.use_hardware`'s choice.
    resident : names of ``main`` parameters, optional
        The parameters that are model state (weights, KV caches). By default: a workload's
        weights and caches; for a module, :func:`tvm_icca.model_pass.calls.default_resident`.
    progress : tvm_icca.progress.Progress, bool or None
        How the long phases report (:attr:`tvm_icca.model_pass.CompileOptions.progress`): by
        default (``None`` or ``True``) a bar on a terminal once a phase has run two seconds;
        ``False``: none.
    plan_cache : tvm_icca.PlanCache, optional
        Share plans across calls (the same model under several preload designs, or at
        several batch sizes); by default each call plans with a cache of its own.
    name : str, optional
        The model's name in reports (default: the workload's, else ``"model"``).
    execution : str
        ``"t10"`` (compute-shift plans, the default) or ``"vgm"`` (the virtual global memory
        baseline); see :class:`tvm_icca.CompileOptions`.
    state : str, optional
        Where weights and KV caches live: ``"chip"``, ``"hbm"``, ``"host"`` or ``"auto"``
        (the default); see :class:`tvm_icca.CompileOptions`. With ``state="chip"`` and
        compute-shift plans, T10 Algorithm 1's decisions are in :attr:`CompiledModel.model_plan`.
    preload : str, optional
        The HBM preload design (Elk §6.1): ``"basic"``, ``"static"``, ``"elk-dyn"``,
        ``"elk-full"`` (the default on a chip with HBM), ``"ideal"`` (the roofline), or
        ``"off"``; the Elk pass's summary is :attr:`CompiledModel.preload`.
    jobs : int or None
        Worker processes for the operators' plan searches when no ``plan_cache`` is given;
        ``None``: every CPU this process may use, ``1``: none (nothing is forked).
    reuse_layers : bool
        Whether the Elk pass searches one period of identical layers and expands it
        (:attr:`tvm_icca.CompileOptions.reuse_layers`); ``False``: the whole run.
    group_pieces : bool
        Whether the Elk pass's refinement moves the identical pieces of split operators
        together (:attr:`tvm_icca.CompileOptions.group_pieces`).

    Returns
    -------
    CompiledModel
        The device programs in call order, the partition report and the planner's decisions;
        ``.simulate()`` times them.

    Raises
    ------
    IccaError
        A bad chip, option or model, or an operator no plan fits (its subclasses name which).
    """
    start = time.perf_counter()
    spec = resolve_hardware(hw)
    mod, resident_names, label = _unpack(model, resident)
    options = CompileOptions(execution=execution, state=state,
                             resident=resident_names, preload=preload, jobs=jobs,
                             progress=progress, reuse_layers=reuse_layers,
                             group_pieces=group_pieces)
    model_name = name or label or "model"
    cache = plan_cache if plan_cache is not None else PlanCache(jobs=jobs)
    hits, misses, searches = cache.hits, cache.misses, cache.search.searches
    mod = mod.with_attr(MODEL_NAME_ATTR, model_name)
    if not is_partitioned(mod):
        main_function(mod)  # a model is a module with a Relax "main"
        # kept in the cache: a sweep over chips partitions each model once
        mod = cache.partitioned(mod, spec, partition_module)
    planned = icca_model_passes(spec, options, plan_cache=cache)(mod)
    report = partition_report(planned, spec)
    return CompiledModel(
        name=model_name,
        hw=spec,
        programs=tuple(device_programs(planned)),
        partition=report,
        op_counts=partitioned_op_counts(planned, report),
        compile_s=time.perf_counter() - start,
        plan_cache={"hits": cache.hits - hits, "misses": cache.misses - misses,
                    "searches": cache.search.searches - searches},
        model_plan=model_plan_of(planned),
        preload=preload_summary_of(planned),
        state=state_placement_of(planned),
        module=planned,
    )


def _unpack(model: Any, resident: Collection[str] | None) -> tuple[IRModule, Any, str | None]:
    """The module, the resident names as given (CompileOptions checks them) and a label."""
    if isinstance(model, IRModule):
        return model, resident, None
    mod = getattr(model, "mod", None)
    if not isinstance(mod, IRModule):
        raise IccaError(f"compile_programs needs a tvm.IRModule or a Workload, got {type(model).__name__}")
    names = model.resident_names if resident is None else resident
    return mod, names, str(getattr(model, "name", "")) or None
