"""What the functional device counted: the current run (one model invocation) and its totals.

A *run* is the sequence of regions one call of ``main`` executes; :class:`RunCounters`
records every region's statistics (from :mod:`runtime_sim.functional.interpreter`) and the
programs that ran, and sums them per run (:meth:`RunCounters.counters`). The programs are
handed out as plain data (:class:`LastRun`) so that a layer above both executors
(:mod:`runtime_sim.run_stats`) can put the timing simulator's time of the same run beside the
counts; the functional device itself never times anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.program import DeviceProgram
from runtime_sim.contract.resting import stream_sram_peaks
from runtime_sim.contract.sram_budget import separate_preload_sram
from runtime_sim.contract.stream import run_stream
from schedules.actions import ACTION_METRICS


def count_value(value: float) -> int | float:
    """A run total of per-operator counts: an integer when it is one. An embedding lookup's
    ``relayout_bytes`` is an expectation under uniformly random ids (its rows are data, see
    :func:`runtime_sim.contract.relayout.gather_relayout`), so a total may be fractional; the
    timing simulator reports the same sum, and truncating it would give the metric two values."""
    return int(value) if float(value).is_integer() else float(value)


@dataclass
class RegionSram:
    """What one region call needed of every core's SRAM, without the run's resident state
    (known once the run's last region ran): the elementwise peak over its checks, each
    operator's execution side (:class:`~runtime_sim.functional.sram.SramLedger`), its own
    resident state (:func:`runtime_sim.contract.resting.resident_state`) and the peak of its
    load-compute-store (VGM) operators, whose VGM region spans every core."""

    peak_need: np.ndarray
    op_need: dict[str, np.ndarray]
    peak_preload: int = 0
    resting: np.ndarray | None = None
    vgm_peak: int = 0
    #: per operator executed, SRAM per core it leaves until the next one starts
    rest_after: dict[str, np.ndarray] = field(default_factory=dict)
    #: per preloaded operator, its preload space per core
    preload_space: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Run:
    """One model invocation: the programs executed, in order, and their statistics.

    Programs that name their module's ``run_order`` are grouped exactly: the run is the
    sequence of regions one call of ``main`` runs (a region may run several times in it).
    Programs without one (hand-written) fall back to "a region seen again starts a new run".
    A call that fails ends its run: the next call starts a new one, whatever its region (a
    failed call of a layer's shared region must not let the next invocation continue the
    broken one).
    """

    module: str = ""
    region_names: set[str] = field(default_factory=set)
    regions: list[dict[str, Any]] = field(default_factory=list)
    programs: list[DeviceProgram] = field(default_factory=list)
    #: preloads issued by earlier calls of the run for the operators of a later call:
    #: call index -> operator indices, in issue order (performed when that call starts)
    pending: dict[int, list[int]] = field(default_factory=dict)
    failed: bool = False  # a call of this run raised: the run is over
    #: per region call, its SRAM needs (:class:`RegionSram`)
    sram: list[RegionSram] = field(default_factory=list)

    def resting(self) -> np.ndarray:
        """The resident state per core of the regions recorded so far (their ``"resident"``
        inputs in their idle placements, T10 §4.3.2), held all run long."""
        parts = [r.resting for r in self.sram if r.resting is not None]
        return np.sum(parts, axis=0, dtype=np.int64) if parts else np.zeros(0, np.int64)

    def continues_with(self, program: DeviceProgram) -> bool:
        """Whether ``program`` is the next region of this run (else it starts a new one)."""
        if not self.programs or self.failed:
            return False
        if program.module != self.module:
            return False
        order = program.run_order
        if order:
            position = len(self.programs)
            return position < len(order) and order[position] == program.region
        return program.region not in self.region_names


@dataclass(frozen=True)
class LastRun:
    """The latest run as plain data: the programs that executed, in call order, and the
    device's counters of it (:meth:`RunCounters.counters`)."""

    programs: tuple[DeviceProgram, ...]
    counters: dict[str, Any]


class RunCounters:
    """The current (latest) run of the device and its statistics.

    Attributes
    ----------
    run
        The run being recorded; the interpreter reads ``continues_with``, ``programs``,
        ``pending`` and sets ``failed`` on it.
    """

    def __init__(self) -> None:
        self.run = Run()

    def record(self, program: DeviceProgram, stats: dict[str, Any], continuing: bool,
               sram: RegionSram | None = None) -> None:
        """Add a region's statistics (and its SRAM needs) to the run it continues, or start a
        new run with it."""
        if continuing:
            self.run.failed = False
        else:
            self.run = Run(module=program.module)
        self.run.region_names.add(program.region)
        self.run.regions.append(stats)
        self.run.programs.append(program)
        if sram is not None:
            self.run.sram.append(sram)

    def reset(self) -> None:
        """Start a new run: the next region executed is the first of a fresh run."""
        self.run = Run()

    def last_run(self) -> LastRun:
        """The programs and counters of the current run (copies: the run goes on)."""
        return LastRun(tuple(self.run.programs), self.counters())

    def counters(self) -> dict[str, Any]:
        """Statistics of the current (latest) run, one model invocation.

        ``shift_bytes`` counts rotations and replica reductions; ``relayout_bytes`` the
        placing of on-chip intermediates; ``fetch_bytes`` and ``store_bytes`` the traffic of
        VGM operators (tile loads from home slices, epilogue inputs included, and output
        tiles stored home); ``peak_sram_bytes_per_core`` includes the shift buffer (and the
        VGM region) and the preload space; ``regions`` has the per-region (and per-operator)
        details.

        Runs of programs with a preload schedule (Elk §4.5) also count ``preloads`` and
        ``executes`` (stream instructions performed), ``preloaded_bytes`` (what preloads
        wrote into preload space, :func:`runtime_sim.contract.preload_chunks.delivered_bytes` summed) and
        ``distributed_bytes`` (what distribution moved between cores,
        :attr:`~runtime_sim.contract.preload_chunks.Distribution.total_bytes`), per operator too:
        :func:`runtime_sim.contract.preload_chunks.op_preload`, the count the timing simulator reports.
        ``peak_preload_bytes_per_core`` is the most preload space a core held.
        ``tuned_ops`` names the operators of the run whose plan came from tuning records
        (:attr:`~runtime_sim.contract.program.OpProgram.tuned`), each once. Under design
        ``"ideal"`` preloading has its own SRAM: ``peak_sram_bytes_per_core`` is then the
        execution side alone. All are 0 without a stream.
        """
        regions = [dict(r) for r in self.run.regions]
        self._sram_peaks(regions)
        total = lambda key: count_value(sum(r[key] for r in regions))  # noqa: E731
        peak = lambda key: int(max((r[key] for r in regions), default=0))  # noqa: E731
        stream_peaks = self._stream_peaks()
        if stream_peaks is not None:
            for row in regions:  # the run's peaks below; a region's own are not defined
                row.pop("peak_sram_bytes_per_core", None)
                row.pop("peak_preload_bytes_per_core", None)
        return {
            "regions_executed": len(regions),
            "cores_used": peak("cores_used"),
            "peak_sram_bytes_per_core": (stream_peaks[0] if stream_peaks is not None
                                         else peak("peak_sram_bytes_per_core")),
            "shift_bytes": total("shift_bytes"),
            "rotation_bytes": total("rotation_bytes"),
            "reduction_bytes": total("reduction_bytes"),
            "relayout_bytes": total("relayout_bytes"),
            # the HBM reads of each region call, summed (runtime_sim.contract.hbm_reads)
            "hbm_bytes": count_value(sum(r.get("hbm_bytes", 0) for r in regions)),
            "host_placed_bytes": total("host_placed_bytes"),
            "fetch_bytes": total("fetch_bytes"),
            "store_bytes": total("store_bytes"),
            "input_bytes": total("input_bytes"),
            "output_bytes": total("output_bytes"),
            "steps": total("steps"),
            "preloaded_bytes": total("preloaded_bytes"),
            "distributed_bytes": total("distributed_bytes"),
            "preloads": total("preloads"),
            "executes": total("executes"),
            "peak_preload_bytes_per_core": (stream_peaks[1] if stream_peaks is not None
                                            else peak("peak_preload_bytes_per_core")),
            # the actions that cost energy (schedules.actions; the energy itself needs the
            # run's time: runtime_sim.run_stats)
            **{k: count_value(sum(r.get(k, 0) for r in regions)) for k in ACTION_METRICS},
            # operators whose plan came from tuning records (OpProgram.tuned), once each
            "tuned_ops": list(dict.fromkeys(op.name for p in self.run.programs for op in p.ops
                                            if op.tuned)),
            "regions": regions,
        }

    def _sram_peaks(self, regions: list[dict[str, Any]]) -> None:
        """Fill the SRAM peaks of the region rows (copies) and their operator rows with the
        whole run's resident state, which every core holds all run long: a region's peak is
        its elementwise peak need plus that state (the timing simulator's accounting)."""
        records = self.run.sram
        if len(records) != len(regions):
            return  # regions recorded without their SRAM needs (hand-made statistics)
        resting = self.run.resting()
        for row, rec in zip(regions, records):
            base = resting if resting.size == rec.peak_need.size else 0
            checked = bool(rec.op_need) or bool(rec.peak_need.any())
            row["peak_sram_bytes_per_core"] = max(int((rec.peak_need + base).max()) if checked else 0,
                                                  rec.vgm_peak)
            row["ops"] = [dict(op) for op in row["ops"]]
            for op in row["ops"]:
                need = rec.op_need.get(op.get("op", ""))
                if need is not None and op.get("execution") != "vgm":
                    op["sram_bytes_per_core"] = int((need + base).max())

    def _stream_peaks(self) -> tuple[int, int] | None:
        """Peak SRAM and preload space per core of a preload stream run, in the stream's
        memory model (:func:`runtime_sim.contract.resting.stream_sram_peaks`: a preload's
        space held from its issue, as the timing simulator reports it), with the whole run's
        resident state; ``None`` without a stream or without every operator's needs.

        The device performs the preloads an earlier call issued for a later call's operators
        when that call starts (it has their data only then), but they were issued, and their
        space reserved, where the stream says."""
        run = self.run
        if not run.programs or run.programs[0].preload_schedule is None:
            return None
        if len(run.sram) != len(run.programs):
            return None
        hw = HardwareSpec.from_dict(run.programs[0].hardware)
        stream = run_stream(run.programs, hw.hbm_bandwidth > 0)
        resting = run.resting()
        if resting.size != hw.num_cores:
            resting = np.zeros(hw.num_cores, np.int64)
        executing, after, space, index = [], [], {}, {}
        for call, (program, rec) in enumerate(zip(run.programs, run.sram)):
            for i, op in enumerate(program.ops):
                if op.name not in rec.op_need or op.name not in rec.rest_after:
                    return None  # the call failed before it
                index[(call, i)] = len(executing)
                executing.append(rec.op_need[op.name] + resting)
                after.append(rec.rest_after[op.name] + resting)
                if op.name in rec.preload_space:
                    space[len(executing) - 1] = rec.preload_space[op.name]
        order = [(ins.kind, index[(ins.call, ins.op)]) for ins in stream]
        ideal = separate_preload_sram(run.programs[0].preload_schedule.design)
        return stream_sram_peaks(order, executing, after, space,
                                 resting + hw.shift_buffer_bytes, ideal)
