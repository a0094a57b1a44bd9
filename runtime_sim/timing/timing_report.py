"""The result of a timing simulation: totals, utilization, per-operator breakdown, trace."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from runtime_sim.contract.energy import ActionCounts, RunEnergy
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.labels import display_name
from runtime_sim.contract.units import format_bytes, in_unit, time_unit
from runtime_sim.timing.floors import FLOOR_KEYS, bound_name, shares
from runtime_sim.timing.trace import timing_trace, write_trace
from schedules.actions import action_metrics

def energy_fields(energy: RunEnergy | None) -> dict[str, Any]:
    """``energy_j``, ``energy_breakdown_j``, ``average_power_w`` and ``board_power_w`` of a
    report: ``None`` and ``{}`` (0 W rated) when the chip has no energy model."""
    if energy is None:
        return {"energy_j": None, "energy_breakdown_j": {}, "average_power_w": None,
                "board_power_w": 0.0}
    return energy.to_dict()


def format_energy(joules: float) -> str:
    """Joules in the SI unit they read best in: ``3.20 mJ``, ``41.0 uJ``, ``1.25 J``."""
    for unit, scale in (("J", 1.0), ("mJ", 1e-3), ("uJ", 1e-6), ("nJ", 1e-9)):
        if abs(joules) >= scale:
            return f"{joules / scale:.3g} {unit}"
    return f"{joules / 1e-12:.3g} pJ"


def energy_lines(energy: RunEnergy | None, shown: int = 3) -> list[str]:
    """The report's energy line: total energy, average power and the ``shown`` biggest
    components (their share), or that the chip has no energy model; and the warning when the
    average power exceeds the rated board power (:meth:`RunEnergy.warning`)."""
    if energy is None:
        return ["  energy    not modelled (chip gives no per-action energies)"]
    top = sorted(((k, v) for k, v in energy.breakdown_j.items() if v > 0), key=lambda kv: -kv[1])
    parts = "  ".join(f"{k} {v / energy.energy_j:.0%}" for k, v in top[:shown]) if energy.energy_j > 0 else ""
    lines = [f"  energy    {format_energy(energy.energy_j)}  average power "
             f"{energy.average_power_w:.3g} W" + (f"  ({parts})" if parts else "")]
    if energy.warning():
        lines.append(f"  warning   {energy.warning()}")
    return lines


#: An operator (or operator kind, summed over the run) is reported as slow when its time is
#: more than this many times its lower bound (issue 9: "a distorted plan is visible").
SLOW_FACTOR = 10.0


@dataclass
class OpTiming:
    """One operator of one region on the simulated timeline (times in seconds).

    ``start_s``/``end_s`` bound its execution on the compute array (distribution of its
    preloaded inputs, re-layout of its inputs, steps with their shifts, replica reduction,
    epilogue); its off-chip loads run before or, prefetched, during the previous operator
    (``load_start_s``/``load_end_s``). In a preload stream run (Elk §4.5) the loads are its
    ``preload_async`` (``preload_start_s``/``preload_end_s``, equal to the load bounds).
    """

    name: str
    region: str
    kind: str
    cores: int
    start_s: float
    end_s: float
    compute_s: float  # sub-tasks + per-step sync + reduction adds + epilogue
    transfer_s: float  # re-layout + shifts + replica reduction over the interconnect
    hbm_s: float  # duration of this operator's HBM load (0 without HBM inputs)
    stall_s: float  # interconnect contention beyond the uncontended time
    host_s: float = 0.0  # duration of its load over the host link
    wait_s: float = 0.0  # compute array idle before it, waiting for its loads
    steps: int = 0
    flops: int = 0
    shift_bytes: int = 0  # rotation + replica reduction (as the functional device counts)
    rotation_bytes: int = 0
    reduction_bytes: int = 0
    relayout_bytes: float = 0.0
    inter_chip_bytes: float = 0.0
    hbm_bytes: float = 0.0  # distinct bytes of the HBM tensors it reads (one copy each)
    hbm_delivered_bytes: float = 0.0  # bytes read from HBM, a copy per chip that needs them
    host_in_bytes: float = 0.0
    host_out_bytes: float = 0.0  # its output bytes returned chip -> host (the host reads them)
    host_out_s: float = 0.0  # duration of that return on the host links
    host_out_start_s: float = 0.0
    load_start_s: float = 0.0
    load_end_s: float = 0.0
    hbm_start_s: float = 0.0
    host_start_s: float = 0.0
    prefetched: bool = False  # its load started while the previous operator executed
    chips: tuple[int, ...] = ()  # the chips its cores are on (a plan may be spread over chips)
    sram_bytes_per_core: int = 0  # peak on a core while it runs, shift buffer included
    relayout_s: float = 0.0
    #: how long its transfers hold link bandwidth (``transfer_s`` without hop latencies):
    #: what a preload streaming beside it cannot use (:mod:`runtime_sim.machine.stream_timing`)
    link_busy_s: float = 0.0
    steps_s: float = 0.0  # all steps: sub-tasks, syncs and shifts
    shift_s: float = 0.0
    reduction_s: float = 0.0  # reduction transfers and adds
    epilogue_s: float = 0.0
    distinct_shift_phases: int = 0
    estimated: bool = False  # a sampled estimate entered its shift or re-layout cost
    #: what no plan can avoid on this system (``runtime_sim.timing.report_builder.lower_bounds``)
    lower_bound_s: float = 0.0
    bound_by: str = ""  # "flops", "hbm", "host" or "sync"
    #: the cut that bounds its longest off-chip load (``Load.bound_by``); "" without loads
    load_bound_by: str = ""
    # -- preload stream runs (Elk §4.5); zero / False otherwise --
    preloaded: bool = False  # the stream preloads it
    preload_start_s: float = 0.0
    preload_end_s: float = 0.0
    #: its preload's delay from sharing links with executions (Elk §6.2 "interconnect")
    preload_stall_s: float = 0.0
    #: compute-array wait before it caused by that contention (its own or inherited from
    #: earlier preloads of the queue); also counted in ``stall_s`` (every run)
    interconnect_stall_s: float = 0.0
    distribute_s: float = 0.0  # distribution phase: preload state -> execute state
    distributed_bytes: float = 0.0  # bytes its distribution moves (summed over receivers)
    preloaded_bytes: float = 0.0  # bytes its preload writes (delivered_bytes, all cores)
    preload_space_bytes_per_core: int = 0  # preload space it holds on its busiest core
    #: what tables and traces show (``OpProgram.display_label``: kind in the user's words and
    #: output shape); ``name`` stays the generated key (a region symbol plus ``.opN``)
    label: str = ""
    #: its actions that cost energy (:mod:`schedules.actions`); :meth:`to_dict` gives them as
    #: the metrics :data:`~schedules.actions.ACTION_METRICS`
    actions: ActionCounts = field(default_factory=ActionCounts, repr=False)

    @property
    def display(self) -> str:
        """Its displayed name: :attr:`label`, or a readable cut of :attr:`name` without one."""
        return self.label or display_name(self.name)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("actions")
        data.update(action_metrics(self.actions))
        return data


@dataclass
class TimingReport:
    """Timing of a sequence of device programs (one model invocation) on one chip or system.

    :func:`~runtime_sim.timing.simulate_timing` builds it; :meth:`to_dict` is what
    ``tvm-icca simulate --json`` prints and :meth:`write_trace` writes the Perfetto trace.

    Every field except the four below is the metric of the same name, defined once with its
    unit in the glossary :mod:`runtime_sim.contract.metrics` (the documentation's glossary
    page): the times (``total_s``, ``compute_s``, ``transfer_s``, ``idle_s``, ``stall_s``,
    ...), the bytes (``hbm_bytes``, ``shift_bytes``, ``preloaded_bytes``, ...), the SRAM
    peaks, the utilizations, Elk's breakdown (``preload_s``, ``preload_only_s``,
    ``execute_only_s``, ``preload_overlap_s``; Elk Fig. 18/20) and the row tables
    (``per_op``, whose entries are :class:`OpTiming`; ``regions``, ``op_kinds``,
    ``slow_kinds`` and ``slow_ops``, the last two over :data:`SLOW_FACTOR` times their lower
    bound).

    Attributes
    ----------
    trace_events : list of dict
        Chrome trace events of the timeline when simulated with ``trace=True``, else empty
        (:meth:`write_trace` builds them on demand).
    hw : HardwareSpec or None
        The chip timed (for the trace's tracks); not part of :meth:`to_dict`.
    actions : ActionCounts
        The run's actions that cost energy (:mod:`schedules.actions`); :meth:`to_dict` gives
        them as the metrics ``matrix_flops``, ``vector_flops``, ``sram_read_bytes``,
        ``sram_write_bytes`` and ``link_byte_hops``.
    energy : RunEnergy or None
        Their energy with static power over ``total_s``
        (:func:`runtime_sim.contract.energy.run_energy`); ``None`` when the chip has no
        energy model. :meth:`to_dict` gives ``energy_j``, ``energy_breakdown_j``,
        ``average_power_w`` and ``board_power_w``; :meth:`table` an energy line.

    Notes
    -----
    How the times relate: compute and transfer never overlap (steps are bulk-synchronous),
    so ``total_s = compute_s + transfer_s + idle_s``; ``preload_only_s + execute_only_s +
    preload_overlap_s <= total_s`` (the rest: nothing runs, e.g. returns to the host);
    ``interconnect_stall_s`` is part of ``stall_s``.
    """

    hardware: str
    topology: str
    total_s: float
    compute_s: float
    transfer_s: float
    hbm_s: float
    overlap_s: float
    stall_s: float
    host_s: float
    idle_s: float
    num_ops: int
    num_regions: int
    hbm_bytes: float
    host_in_bytes: float
    shift_bytes: int
    rotation_bytes: int
    reduction_bytes: int
    relayout_bytes: float
    inter_chip_bytes: float
    steps: int
    peak_sram_bytes_per_core: int
    peak_sram_with_prefetch_bytes_per_core: int
    flops: int
    per_op: list[OpTiming]
    regions: list[dict[str, Any]]
    host_out_bytes: float = 0.0
    hbm_delivered_bytes: float = 0.0
    op_kinds: list[dict[str, Any]] = field(default_factory=list)
    slow_kinds: list[dict[str, Any]] = field(default_factory=list)
    slow_ops: list[dict[str, Any]] = field(default_factory=list)
    simulation_s: float = 0.0  # wall-clock seconds the simulation took
    design: str = ""  # the preload stream's design (Elk §6.1), "" without a stream
    preload_s: float = 0.0
    preload_only_s: float = 0.0
    execute_only_s: float = 0.0
    preload_overlap_s: float = 0.0
    interconnect_stall_s: float = 0.0
    preload_stall_s: float = 0.0
    hbm_utilization: float = 0.0
    interconnect_utilization: float = 0.0
    link_bandwidth_utilization: float = 0.0
    flops_utilization: float = 0.0
    achieved_flops: float = 0.0
    preloaded_bytes: float = 0.0
    distributed_bytes: float = 0.0
    preloads: int = 0
    executes: int = 0
    peak_preload_bytes_per_core: int = 0
    load_bound_by: str = ""
    load_bound_s: dict[str, float] = field(default_factory=dict)
    link_bytes: float = 0.0
    hbm_floor_s: float = 0.0
    compute_floor_s: float = 0.0
    interconnect_floor_s: float = 0.0
    compute_units_floor_s: float = 0.0
    host_floor_s: float = 0.0
    edge_ports_floor_s: float = 0.0
    controller_ports_floor_s: float = 0.0
    injection_floor_s: float = 0.0
    bisection_floor_s: float = 0.0
    inter_chip_floor_s: float = 0.0
    run_bound_by: str = ""
    floor_s: float = 0.0
    remainder: dict[str, float] = field(default_factory=dict)
    #: the run's actions that cost energy, summed over its operators (:mod:`schedules.actions`)
    actions: ActionCounts = field(default_factory=ActionCounts)
    #: its energy (:func:`runtime_sim.contract.energy.run_energy`); ``None``: the chip has no
    #: energy model
    energy: RunEnergy | None = None
    trace_events: list[dict[str, Any]] = field(default_factory=list)
    hw: HardwareSpec | None = field(default=None, repr=False)

    _SUMMARY = (
        "hardware", "topology", "total_s", "compute_s", "transfer_s", "hbm_s", "overlap_s",
        "stall_s", "host_s", "idle_s", "num_ops", "num_regions", "hbm_bytes",
        "hbm_delivered_bytes", "host_in_bytes", "host_out_bytes",
        "shift_bytes", "rotation_bytes", "reduction_bytes", "relayout_bytes",
        "inter_chip_bytes", "steps", "peak_sram_bytes_per_core",
        "peak_sram_with_prefetch_bytes_per_core", "flops", "simulation_s",
        "design", "preload_s", "preload_only_s", "execute_only_s", "preload_overlap_s",
        "interconnect_stall_s", "preload_stall_s", "hbm_utilization", "interconnect_utilization",
        "link_bandwidth_utilization", "flops_utilization", "achieved_flops", "preloaded_bytes", "distributed_bytes",
        "preloads", "executes", "peak_preload_bytes_per_core", "load_bound_by", "load_bound_s",
        "link_bytes", *FLOOR_KEYS, "run_bound_by", "floor_s", "remainder",
    )

    def to_dict(self, per_op: bool = True) -> dict[str, Any]:
        """JSON-ready summary (and per-operator rows unless ``per_op=False``)."""
        data: dict[str, Any] = {k: getattr(self, k) for k in self._SUMMARY}
        data["load_bound_s"] = dict(self.load_bound_s)
        data["remainder"] = dict(self.remainder)
        data["regions"] = [dict(r) for r in self.regions]
        data["op_kinds"] = [dict(r) for r in self.op_kinds]
        data["slow_kinds"] = [dict(r) for r in self.slow_kinds]
        data["slow_ops"] = [dict(r) for r in self.slow_ops]
        data.update(action_metrics(self.actions))
        data.update(energy_fields(self.energy))
        if per_op:
            data["per_op"] = [op.to_dict() for op in self.per_op]
        return data

    def to_json(self, per_op: bool = True) -> str:
        return json.dumps(self.to_dict(per_op), indent=1)

    def table(self, max_ops: int | None = 40) -> str:
        """A readable breakdown: totals, utilization, then the slowest operators. Every time
        is in one unit, the one the total reads best in (:mod:`runtime_sim.contract.units`),
        so that the rows line up and compare."""
        unit = time_unit(self.total_s)
        _t = self._time_text
        _b = format_bytes
        lines = [
            f"ICCA timing on {self.hardware} ({self.topology}): {_count(self.num_ops, 'op')} in "
            f"{_count(self.num_regions, 'region')}, {_count(self.steps, 'step')}",
            f"  total     {_t(self.total_s, unit)}",
            f"  compute   {_t(self.compute_s, unit)}   transfer {_t(self.transfer_s, unit)}   "
            f"idle {_t(self.idle_s, unit)}",
            f"  hbm       {_t(self.hbm_s, unit)}   overlap  {_t(self.overlap_s, unit)}   "
            f"host {_t(self.host_s, unit)}   stall {_t(self.stall_s, unit)}",
            f"  bytes     shift {_b(self.shift_bytes)}  relayout {_b(self.relayout_bytes)}  "
            f"hbm {_b(self.hbm_bytes)} distinct, {_b(self.hbm_delivered_bytes)} delivered  "
            f"host {_b(self.host_in_bytes)} in, {_b(self.host_out_bytes)} out  "
            f"inter-chip {_b(self.inter_chip_bytes)}",
            f"  peak SRAM {_b(self.peak_sram_bytes_per_core)}/core "
            f"({_b(self.peak_sram_with_prefetch_bytes_per_core)} with prefetch)",
            *([f"  stream    design {self.design}: {self.preloads} preloads, "
               f"{self.executes} executes  preload-only {_t(self.preload_only_s, unit)}  "
               f"execute-only {_t(self.execute_only_s, unit)}  overlapped "
               f"{_t(self.preload_overlap_s, unit)}  "
               f"interconnect stall {_t(self.interconnect_stall_s, unit)}",
               f"            preloaded {_b(self.preloaded_bytes)}  distributed "
               f"{_b(self.distributed_bytes)}  peak preload space "
               f"{_b(self.peak_preload_bytes_per_core)}/core"] if self.design or self.preloads else []),
            f"  utilization flops {self.flops_utilization:.1%}  interconnect busy "
            f"{self.interconnect_utilization:.1%}  link bandwidth "
            f"{self.link_bandwidth_utilization:.1%}  hbm {self.hbm_utilization:.1%}",
            *([f"  loads     bound by {self.load_bound_by} ("
               + ", ".join(f"{cut} {_t(seconds, unit, 0)}" for cut, seconds in sorted(
                   self.load_bound_s.items(), key=lambda kv: -kv[1])) + ")"]
              if self.load_bound_s else []),
            *self.floor_lines(),
            *energy_lines(self.energy),
            "",
        ]
        # the operator's label goes last: it is up to 80 characters and would push the
        # number columns out of line anywhere else
        name = unit[0]
        header = (f"  {'cores':>5} {'start ' + name:>10} {'dur ' + name:>9} "
                  f"{'compute':>9} {'transfer':>9} {'hbm':>9} {'stall':>9} {'steps':>6}  op")
        lines.append(header)
        ops = sorted(self.per_op, key=lambda o: -o.duration_s)
        shown = ops if max_ops is None else ops[:max_ops]
        for op in sorted(shown, key=lambda o: o.start_s):
            lines.append(
                f"  {op.cores:>5} {in_unit(op.start_s, unit, 10)} "
                f"{in_unit(op.duration_s, unit, 9)} {in_unit(op.compute_s, unit, 9)} "
                f"{in_unit(op.transfer_s, unit, 9)} {in_unit(op.hbm_s, unit, 9)} "
                f"{in_unit(op.stall_s, unit, 9)} {op.steps:>6}  {op.display}"
            )
        if len(shown) < len(ops):
            lines.append(f"  ... {len(ops) - len(shown)} faster ops not shown")
        lines.extend(self.slow_table())
        return "\n".join(lines)

    @staticmethod
    def _time_text(seconds: float, unit: tuple[str, float], width: int = 10) -> str:
        return f"{in_unit(seconds, unit, width)} {unit[0]}"

    def floor_lines(self) -> list[str]:
        """Lines naming the floors (every one over 0), the resource the run is bound by and,
        when the run takes more than 1.5x its largest floor, where its time goes
        (:mod:`runtime_sim.timing.floors`); in the unit of the total."""
        floors = [(bound_name(k), getattr(self, k)) for k in FLOOR_KEYS if getattr(self, k) > 0]
        if not floors:
            return []
        unit = time_unit(self.total_s)
        lines = ["  floors    " + "  ".join(f"{name} {self._time_text(seconds, unit, 0)}"
                                            for name, seconds in
                                            sorted(floors, key=lambda kv: -kv[1]))]
        ratio = self.total_s / self.floor_s if self.floor_s > 0 else 0.0
        lines.append(f"  bound by  {self.run_bound_by}: floor "
                     f"{self._time_text(self.floor_s, unit, 0)}, time {ratio:.2f}x the floor")
        if self.remainder:
            lines.append("  remainder " + "  ".join(
                f"{part} {self._time_text(seconds, unit, 0)} ({share:.1%})"
                for part, seconds, share in shares(self.remainder, self.total_s)))
        return lines

    def slow_table(self, max_ops: int = 10) -> list[str]:
        """Lines naming the operator kinds and operators more than :data:`SLOW_FACTOR` times
        their lower bound (empty when there are none); in the unit of the total."""
        if not self.slow_kinds and not self.slow_ops:
            return []
        unit = time_unit(self.total_s)
        _t = self._time_text
        lines = ["", f"  more than {SLOW_FACTOR:g}x their lower bound (time = wait + execution; "
                     "bound = max of FLOPs at peak, distinct HBM bytes, host bytes, one sync):"]
        for r in self.slow_kinds:
            lines.append(f"    kind {r['kind']:<14} {r['num_ops']:>5} ops  {_t(r['time_s'], unit, 9)}  "
                         f"bound {_t(r['lower_bound_s'], unit, 9)}  {r['ratio']:8.1f}x")
        for r in self.slow_ops[:max_ops]:
            lines.append(f"    op   {_t(r['time_s'], unit, 9)}  bound {_t(r['lower_bound_s'], unit, 9)} "
                         f"({r['bound_by']})  {r['ratio']:8.1f}x  "
                         f"{r.get('label') or display_name(r['name'])}")
        if len(self.slow_ops) > max_ops:
            lines.append(f"    ... {len(self.slow_ops) - max_ops} more slow ops (to_dict()['slow_ops'])")
        return lines

    def write_trace(self, path: str) -> None:
        """Write a Chrome trace-event JSON file (open it in https://ui.perfetto.dev)."""
        events = self.trace_events or timing_trace(self)
        write_trace(path, events)


def _count(n: int, noun: str) -> str:
    """``1 region``, ``22 regions``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
