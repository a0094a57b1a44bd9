"""Statistics of the last model run: the functional device's counters beside the simulated time.

This module sits above both executors, which never import each other: it reads what the
functional device (:mod:`runtime_sim.functional.device`) counted and which programs ran
(:attr:`~runtime_sim.functional.device.SimulatedDevice.last_run`), and runs the timing
simulator (:mod:`runtime_sim.timing`, Elk §5 "Simulation framework") over exactly those
programs, in call order, with their input sources. Both report the bytes the contract
defines, so the two halves of one run can be compared line by line.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.plan import VgmPlan
from runtime_sim.contract.program import DeviceProgram
from runtime_sim.functional.device import SimulatedDevice, get_device
from runtime_sim.timing import TimingReport, simulate_timing
from runtime_sim.timing.timing_report import energy_fields
from runtime_sim.timing.vgm_timing import VgmReport, simulate_vgm_timing

__all__ = ["last_run_stats", "last_run_timing", "reset_stats"]

#: A cache, not configuration: per device, the programs last timed and their report, so that
#: asking for the statistics and then the trace of one run simulates it once. Keyed by the
#: device (weakly) and checked by the identity of every program: a report depends on the
#: (immutable) programs only, so the same programs give the same report.
_TIMED: weakref.WeakKeyDictionary[SimulatedDevice, tuple[tuple[DeviceProgram, ...], Any]] = \
    weakref.WeakKeyDictionary()
_TIMED_LOCK = threading.Lock()


def last_run_stats(*, timing: bool = True, device: SimulatedDevice | None = None) -> dict[str, Any]:
    """Statistics of the latest run (one model invocation) of a simulated device.

    Parameters
    ----------
    timing : bool
        Also run the timing simulator (Elk §5) over exactly the programs that executed, in
        call order, with their input sources (:func:`last_run_timing`), and add its time.
    device : SimulatedDevice, optional
        The device; defaults to the process-wide
        :func:`~runtime_sim.functional.device.get_device`.

    Returns
    -------
    dict
        The device's counters
        (:meth:`RunCounters.counters <runtime_sim.functional.run_counters.RunCounters.counters>`:
        traffic, cores, SRAM and preload peaks, preload-stream counts, tuned operators and
        the per-region details) and, with ``timing``, ``simulated_s`` (the time the run takes
        on the chip; ``None`` when no region ran on the chip), ``simulated_ops`` (its
        per-operator rows) and the run's energy (``energy_j``, ``energy_breakdown_j``,
        ``average_power_w``, ``board_power_w``: :mod:`runtime_sim.contract.energy` over the
        simulated time; ``None`` and ``{}`` when the chip has no energy model). Every key is defined once, with its unit, in the metric glossary
        :mod:`runtime_sim.contract.metrics` (the documentation's glossary page).
    """
    device = get_device() if device is None else device
    last = device.last_run
    stats = dict(last.counters)
    if timing and last.programs:
        report = _timing(device, last.programs)
        stats["simulated_s"] = float(report.total_s)
        stats["simulated_ops"] = _per_op_timing(report)
        # the run's energy needs its time: the timing report's (its action counts are the
        # device's, checked equal where both count them)
        stats.update(energy_fields(report.energy))
    elif timing:
        # no region ran on the chip (nothing of the model was offloaded): no chip time, said
        # as such rather than as 0 s or a missing key
        stats["simulated_s"] = None
        stats["simulated_ops"] = []
        stats.update(energy_fields(None))
    return stats


def last_run_timing(device: SimulatedDevice | None = None) -> TimingReport | VgmReport:
    """The timing report of the latest run of ``device`` (default: the process-wide device):
    :func:`runtime_sim.timing.simulate_timing`, or
    :func:`runtime_sim.timing.vgm_timing.simulate_vgm_timing` for load-compute-store programs;
    ``write_trace(path)`` on a :class:`~runtime_sim.timing.TimingReport` writes the run's
    Chrome/Perfetto trace."""
    device = get_device() if device is None else device
    programs = device.last_run.programs
    if not programs:
        raise DeviceProgramError("no device program has run yet: nothing to time")
    return _timing(device, programs)


def reset_stats(device: SimulatedDevice | None = None) -> None:
    """Start a new run on ``device`` (default: the process-wide device): the next region
    executed is the first of a fresh run."""
    (get_device() if device is None else device).reset_stats()


def _timing(device: SimulatedDevice, programs: tuple[DeviceProgram, ...]) -> TimingReport | VgmReport:
    """The timing report of ``programs``, simulated once per run of ``device``."""
    with _TIMED_LOCK:
        cached = _TIMED.get(device)
    if cached is not None and len(cached[0]) == len(programs) and \
            all(a is b for a, b in zip(cached[0], programs)):
        return cached[1]
    report = _simulate(programs)
    with _TIMED_LOCK:
        _TIMED[device] = (programs, report)
    return report


def _simulate(programs: Sequence[DeviceProgram]) -> TimingReport | VgmReport:
    """The timing simulator for the run: VGM timing when any operator is load-compute-store."""
    if any(isinstance(op.plan, VgmPlan) for p in programs for op in p.ops):
        return simulate_vgm_timing(programs)
    return simulate_timing(programs)


def _per_op_timing(report: TimingReport | VgmReport) -> list[dict[str, Any]]:
    """Per operator of a timing report: the report's row (names of
    :mod:`runtime_sim.contract.metrics`) and ``time_s``, its time on the compute array."""
    rows = []
    for entry in report.per_op:
        if isinstance(entry, tuple):  # VGM: (name, VgmTiming); operators never wait
            name, timing = entry
            rows.append({"name": name, "time_s": timing.time_s, **dataclasses.asdict(timing)})
        else:
            rows.append({**entry.to_dict(), "time_s": entry.wait_s + entry.duration_s})
    return rows
