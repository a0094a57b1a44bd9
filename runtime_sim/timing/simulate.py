"""Event-driven timing of device programs: operators, transfers and HBM loads on a timeline.

Elk §5 ("Simulation framework") describes an event-driven ICCA simulator with per-core
compute, per-link transfers and HBM fetches. This one is event-driven at operator and
transfer granularity: each operator's homogeneous steps are costed in closed form
(:mod:`runtime_sim.timing.opcost`), each transfer phase on the topology
(:mod:`runtime_sim.machine.topology`), and a small event queue (``heapq``,
:mod:`runtime_sim.timing.events`) orders operator executions on the compute array and loads on
the HBM controllers and host links.

:func:`simulate_timing` is the entry point; it runs one model invocation in three steps, a
module each:

* :mod:`runtime_sim.timing.work` costs every operator instance once per distinct thing (data
  sources of its inputs, loads, re-layouts, SRAM accounting);
* a scheduler puts them on the timeline: :mod:`runtime_sim.timing.prefetch_scheduler` (the prefetch
  policy, runs without a preload stream) or :mod:`runtime_sim.timing.preload_stream_scheduler` (Elk's
  preload/execute stream, §4.5, when the programs carry one);
* :mod:`runtime_sim.timing.report_builder` assembles the
  :class:`~runtime_sim.timing.timing_report.TimingReport` (stall, utilization, lower bounds).
"""

from __future__ import annotations

import time as _time
from typing import Callable, Sequence

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.program import DeviceProgram
from runtime_sim.contract.stream import run_stream
from runtime_sim.contract.validation import validate_program
from runtime_sim.machine.topology import make_topology
from runtime_sim.timing.timing_report import TimingReport
from runtime_sim.timing.prefetch_scheduler import PrefetchSchedule
from runtime_sim.timing.preload_stream_scheduler import StreamSchedule
from runtime_sim.timing.report_builder import build_timing_report
from runtime_sim.timing.trace import timing_trace
from runtime_sim.timing.work import Work, WorkBuilder


def simulate_timing(
    programs: Sequence[DeviceProgram] | DeviceProgram,
    hw: HardwareSpec | None = None,
    *,
    trace: bool = False,
    on_op: Callable[[], None] | None = None,
) -> TimingReport:
    """Time one model invocation of device programs on the event-driven simulator (Elk §5).

    Shapes only: constants need no ``data``. Every program is validated first, as the
    functional device does (:func:`runtime_sim.contract.validation.validate_program`).

    Parameters
    ----------
    programs : sequence of DeviceProgram (or their dicts), or one DeviceProgram
        The regions of one invocation, in execution order.
    hw : HardwareSpec, optional
        The chip; defaults to the hardware of the first program.
    trace : bool
        Fill :attr:`TimingReport.trace_events` with Chrome trace events now;
        :meth:`TimingReport.write_trace` builds them on demand otherwise.
    on_op : callable, optional
        Called without arguments after each operator costed, ``sum(len(p.ops) for p in
        programs)`` times, the bulk of the time (a caller's progress bar: the device side has
        no policy of its own about showing one).

    Returns
    -------
    TimingReport
        The run's makespan, its breakdown, traffic, SRAM peaks and per-operator rows.

    Raises
    ------
    DeviceProgramError
        No programs and no ``hw``, or a program that is malformed or does not run on ``hw``
        (e.g. its plan needs more cores than the chip has).
    """
    wall = _time.perf_counter()
    if isinstance(programs, DeviceProgram):
        programs = [programs]
    programs = [p if isinstance(p, DeviceProgram) else DeviceProgram.from_dict(p) for p in programs]
    if hw is None:
        if not programs:
            raise DeviceProgramError("simulate_timing needs at least one program or a HardwareSpec")
        hw = HardwareSpec.from_dict(programs[0].hardware)
    for program in programs:  # the program check the functional device makes too
        validate_program(program, hw)
    stream = run_stream(programs, hw.hbm_bandwidth > 0)
    design = _design(programs) if stream else None
    topo = make_topology(hw)
    builder = WorkBuilder(hw, topo)
    works: list[Work] = []
    peak = 0
    idle = builder.idle_state(programs)
    for index, program in enumerate(programs):
        region_works, region_peak = builder.program_work(program, index, idle, design, on_op)
        works.extend(region_works)
        peak = max(peak, region_peak)

    if stream:
        offsets = np.concatenate([[0], np.cumsum([len(p.ops) for p in programs])]).astype(int).tolist()
        schedule: PrefetchSchedule | StreamSchedule = StreamSchedule(
            works, hw, stream, offsets, design, idle + hw.shift_buffer_bytes)
    else:
        schedule = PrefetchSchedule(works, hw)
    schedule.run()
    report = build_timing_report(works, schedule, hw, topo, peak, len(programs), design)
    report.simulation_s = _time.perf_counter() - wall
    if trace:
        report.trace_events = timing_trace(report)
    return report


def _design(programs: Sequence[DeviceProgram]) -> str:
    """The preload design of a stream run: one for every program of the run."""
    designs = {p.preload_schedule.design for p in programs}
    if len(designs) > 1:
        raise DeviceProgramError(f"the regions of one run carry different preload designs "
                                 f"{sorted(designs)}: compile the model with one design")
    return designs.pop()
