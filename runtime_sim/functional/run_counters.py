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

from runtime_sim.contract.program import DeviceProgram


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

    def record(self, program: DeviceProgram, stats: dict[str, Any], continuing: bool) -> None:
        """Add a region's statistics to the run it continues, or start a new run with it."""
        if continuing:
            self.run.failed = False
        else:
            self.run = Run(module=program.module)
        self.run.region_names.add(program.region)
        self.run.regions.append(stats)
        self.run.programs.append(program)

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
        total = lambda key: int(sum(r[key] for r in regions))  # noqa: E731
        peak = lambda key: int(max((r[key] for r in regions), default=0))  # noqa: E731
        return {
            "regions_executed": len(regions),
            "cores_used": peak("cores_used"),
            "peak_sram_bytes_per_core": peak("peak_sram_bytes_per_core"),
            "shift_bytes": total("shift_bytes"),
            "rotation_bytes": total("rotation_bytes"),
            "reduction_bytes": total("reduction_bytes"),
            "relayout_bytes": total("relayout_bytes"),
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
            "peak_preload_bytes_per_core": peak("peak_preload_bytes_per_core"),
            # operators whose plan came from tuning records (OpProgram.tuned), once each
            "tuned_ops": list(dict.fromkeys(op.name for p in self.run.programs for op in p.ops
                                            if op.tuned)),
            "regions": regions,
        }
