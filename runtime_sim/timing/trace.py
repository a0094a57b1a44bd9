"""Chrome trace-event files of simulated runs, for Perfetto (https://ui.perfetto.dev).

The format is the JSON object ``{"traceEvents": [...]}`` of the Trace Event Format: complete
events (``"ph": "X"``, ``ts``/``dur`` in microseconds) on ``(pid, tid)`` tracks, and metadata
events (``"ph": "M"``, ``process_name`` / ``thread_name`` / ``*_sort_index``) naming them.

:func:`timing_trace` lays a :class:`~runtime_sim.timing.TimingReport` out on tracks:

* one process per chip, with a ``cores`` track of the operators that run on its cores (and,
  nested inside each operator, its re-layout, steps, reduction and epilogue);
* ``interconnect``: one track per link class -- on-chip links (the exchange ports on an
  all-to-all chip, the mesh links on a mesh), inter-chip links, and the delivery of HBM/host
  loads (one track each) -- with the time the class is in use per operator phase;
* ``HBM``: one track per HBM controller; ``host``: one track per chip's host link;
* ``regions``: the device programs (regions) in execution order;
* ``stream`` (runs with a preload stream, Elk §4.5): a ``preload`` track with each
  ``preload_async`` from its start to its done tag (preloads run one after another) and an
  ``execute`` track with each ``execute`` (its distribution phase nested first);
* ``energy`` (a chip with an energy model, :mod:`runtime_sim.contract.energy`): the counter
  track ``power (W)``: over each operator's execution, its dynamic energy (its actions, loads
  and returns to the host included, :attr:`OpTiming.actions
  <runtime_sim.timing.timing_report.OpTiming.actions>`) over its duration plus the system's
  static power; the static power alone between operators. Its area is the run's energy
  (``energy_j``).

Events are named by what a person reads: an operator's label (``matmul+bias [64x64]``,
:func:`runtime_sim.contract.labels.operator_label`) and a region's
(:func:`runtime_sim.contract.labels.region_label`); the generated operator and region names
(TVM's region symbols, hundreds of characters) are in the arguments, ``op`` and ``symbol``.

Shift phases interleave with compute steps, so an operator's shifts are drawn as one span over
its steps, with the actual busy time (``busy_ms``) and bytes in the event's arguments.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from runtime_sim.contract.energy import ActionCounts, run_energy
from runtime_sim.contract.labels import display_name, operator_label, region_label

#: microseconds per second: the trace format's time unit
_US = 1e6


class TraceBuilder:
    """Collects trace events; processes and threads get small integer ids in creation order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._pids: dict[str, int] = {}
        self._tids: dict[tuple[int, str], int] = {}

    def process(self, name: str, sort_index: int | None = None) -> int:
        if name in self._pids:
            return self._pids[name]
        pid = len(self._pids) + 1
        self._pids[name] = pid
        self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                            "args": {"name": name}})
        self.events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                            "args": {"sort_index": pid if sort_index is None else sort_index}})
        return pid

    def thread(self, pid: int, name: str, sort_index: int | None = None) -> int:
        key = (pid, name)
        if key in self._tids:
            return self._tids[key]
        tid = sum(1 for p, _ in self._tids if p == pid) + 1
        self._tids[key] = tid
        self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                            "args": {"name": name}})
        self.events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                            "args": {"sort_index": tid if sort_index is None else sort_index}})
        return tid

    def complete(self, pid: int, tid: int, name: str, start_s: float, dur_s: float,
                 cat: str = "", args: dict[str, Any] | None = None) -> None:
        """A complete ("X") event from ``start_s`` lasting ``dur_s`` seconds."""
        event = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": start_s * _US,
                 "dur": max(0.0, dur_s) * _US}
        if cat:
            event["cat"] = cat
        if args:
            event["args"] = args
        self.events.append(event)

    def counter(self, pid: int, name: str, at_s: float, values: dict[str, float]) -> None:
        """A counter ("C") event: the track ``name`` of process ``pid`` takes ``values``
        from ``at_s`` seconds on."""
        self.events.append({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": at_s * _US,
                            "args": dict(values)})

    def to_dict(self) -> dict[str, Any]:
        return trace_document(self.events)


def trace_document(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {"traceEvents": list(events), "displayTimeUnit": "ns"}


def write_trace(path: str, events: Iterable[dict[str, Any]]) -> None:
    """Write ``events`` as a Chrome trace-event JSON file."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(trace_document(events), f, separators=(",", ":"))


def timing_trace(report: Any) -> list[dict[str, Any]]:
    """Trace events of a :class:`~runtime_sim.timing.TimingReport` (see the module docstring)."""
    hw = report.hw
    tb = TraceBuilder()
    chips = hw.num_chips if hw is not None else 1
    cpc = hw.cores_per_chip if hw is not None else max((o.cores for o in report.per_op), default=1)
    mesh = hw is not None and hw.topology == "mesh"

    regions_pid = tb.process("regions", 0)
    regions_tid = tb.thread(regions_pid, "device programs")
    streamed = bool(getattr(report, "preloads", 0))
    if streamed:
        stream_pid = tb.process(f"stream ({report.design})" if report.design else "stream", 0)
        preload_tid = tb.thread(stream_pid, "preload")
        execute_tid = tb.thread(stream_pid, "execute")
    chip_tracks = []
    for k in range(chips):
        pid = tb.process(f"chip {k} (cores {k * cpc}-{(k + 1) * cpc - 1})", 1 + k)
        chip_tracks.append((pid, tb.thread(pid, "cores")))
    ic = tb.process("interconnect", 1 + chips)
    intra = tb.thread(ic, "mesh links" if mesh else "on-chip links (exchange ports)")
    inter = tb.thread(ic, "inter-chip links") if chips > 1 else None
    hbm_delivery = tb.thread(ic, "HBM delivery")
    host_delivery = tb.thread(ic, "host delivery")
    hbm_tracks = []
    if hw is not None and hw.hbm_controllers:
        pid = tb.process("HBM", 2 + chips)
        hbm_tracks = [tb.thread(pid, f"controller {h} (chip {h % chips})")
                      for h in range(hw.hbm_controllers)]
        hbm_pid = pid
    host_pid = tb.process("host", 3 + chips)
    host_tracks = [tb.thread(host_pid, f"host link chip {k}") for k in range(chips)]

    for index, region in enumerate(report.regions):
        # the event shows the readable label; the generated region symbol is for machines
        tb.complete(regions_pid, regions_tid,
                    region.get("label") or region_label([], index), region["start_s"],
                    region["end_s"] - region["start_s"], "region",
                    {"num_ops": region["num_ops"], "symbol": region["name"]})
    for op in report.per_op:
        # event names show the operator's label; its generated name stays in args["op"]
        shown = _op_label(op)
        key = {"op": op.name}
        args = {"op": op.name, "kind": op.kind, "cores": op.cores, "steps": op.steps,
                "compute_ms": op.compute_s * 1e3, "transfer_ms": op.transfer_s * 1e3,
                "stall_ms": op.stall_s * 1e3, "shift_bytes": op.shift_bytes,
                "relayout_bytes": op.relayout_bytes, "flops": op.flops}
        phases = []
        t = op.start_s
        if streamed:
            if op.preloaded:
                tb.complete(stream_pid, preload_tid, _named("preload", shown), op.preload_start_s,
                            op.preload_end_s - op.preload_start_s, "preload",
                            {**key, "preloaded_bytes": op.preloaded_bytes, "hbm_bytes": op.hbm_bytes,
                             "stall_ms": op.preload_stall_s * 1e3,
                             "preload_space_bytes_per_core": op.preload_space_bytes_per_core})
            tb.complete(stream_pid, execute_tid, _named("execute", shown), op.start_s, op.duration_s,
                        "execute", {**key, "distributed_bytes": op.distributed_bytes,
                                    "wait_ms": op.wait_s * 1e3})
            if op.distribute_s > 0:
                tb.complete(stream_pid, execute_tid, "distribute", op.start_s, op.distribute_s,
                            "phase")
        for label, dur in (("distribute", getattr(op, "distribute_s", 0.0)),
                           ("relayout", op.relayout_s), ("steps", op.steps_s),
                           ("reduce", op.reduction_s), ("epilogue", op.epilogue_s)):
            if dur > 0:
                phases.append((label, t, dur))
            t += dur
        for k in _chips_of(op, chips, cpc):
            pid, tid = chip_tracks[k]
            tb.complete(pid, tid, shown, op.start_s, op.duration_s, "op", args)
            for label, start, dur in phases:
                tb.complete(pid, tid, label, start, dur, "phase")
        for label, start, dur in phases:
            if label == "distribute":
                tb.complete(ic, intra, _named("distribute", shown), start, dur, "link",
                            {**key, "bytes": op.distributed_bytes})
            elif label == "relayout":
                tb.complete(ic, intra, _named("relayout", shown), start, dur, "link",
                            {**key, "bytes": op.relayout_bytes})
            elif label == "steps" and op.shift_s > 0:
                tb.complete(ic, intra, _named("shifts", shown), start, dur, "link",
                            {**key, "busy_ms": op.shift_s * 1e3, "bytes": op.rotation_bytes})
            elif label == "reduce" and op.reduction_bytes:
                tb.complete(ic, intra, _named("reduce", shown), start, dur, "link",
                            {**key, "bytes": op.reduction_bytes})
        if inter is not None and op.inter_chip_bytes > 0:
            tb.complete(ic, inter, _named("inter-chip", shown), op.start_s, op.duration_s, "link",
                        {**key, "bytes": op.inter_chip_bytes})
        if op.hbm_s > 0:
            for tid in hbm_tracks:
                tb.complete(hbm_pid, tid, _named("load", shown), op.hbm_start_s, op.hbm_s, "hbm",
                            {**key, "unique_bytes": op.hbm_bytes, "prefetched": op.prefetched})
            tb.complete(ic, hbm_delivery, _named("hbm ->", shown), op.hbm_start_s, op.hbm_s, "link",
                        dict(key))
        if op.host_s > 0:
            tb.complete(ic, host_delivery, _named("host ->", shown), op.host_start_s, op.host_s, "link",
                        dict(key))
            for k in _chips_of(op, chips, cpc):
                tb.complete(host_pid, host_tracks[k], _named("input", shown), op.host_start_s,
                            op.host_s, "host", {**key, "bytes": op.host_in_bytes})
    _power_track(tb, report, 4 + chips)
    return tb.events


#: The name of the power counter track (watts)
POWER_TRACK = "power (W)"


def _power_track(tb: TraceBuilder, report: Any, sort_index: int) -> None:
    """The ``power (W)`` counter track (see the module docstring); nothing without an energy
    model. Each operator's dynamic energy is priced by the one formula
    (:func:`runtime_sim.contract.energy.run_energy` over no time: no static part)."""
    hw = report.hw
    if hw is None or getattr(report, "energy", None) is None:
        return
    table = hw.energy_table()
    cores, chips = hw.num_cores, hw.num_chips
    static = run_energy(ActionCounts(), table, 1.0, cores=cores, chips=chips).energy_j
    steps: dict[float, float] = {0.0: static}  # time -> power from then on
    for op in sorted(report.per_op, key=lambda o: o.start_s):
        if op.duration_s <= 0:
            continue
        dynamic = run_energy(op.actions, table, 0.0, cores=cores, chips=chips).energy_j
        steps[op.start_s] = dynamic / op.duration_s + static  # replaces the previous end
        steps[op.end_s] = static
    pid = tb.process("energy", sort_index)
    for at_s in sorted(steps):
        tb.counter(pid, POWER_TRACK, at_s, {"W": steps[at_s]})


def _named(what: str, label: str) -> str:
    """An event of an operator's phase or load, e.g. ``load matmul+bias [1x16x64]``, cut to
    :data:`~runtime_sim.contract.labels.MAX_LABEL_CHARS` like every displayed name."""
    return display_name(f"{what} {label}")


def _op_label(op: Any) -> str:
    """What an operator's events show: its label (``OpTiming.label``, set by the simulator
    from ``OpProgram.display_label``), else its kind -- never the generated region symbol."""
    return getattr(op, "label", "") or operator_label(getattr(op, "kind", "") or "op")


def _chips_of(op: Any, chips: int, cores_per_chip: int) -> list[int]:
    """The chips an operator's cores are on: as the simulator placed them (a plan may be
    spread over chips), else the chips its core count fills from chip 0."""
    placed = [k for k in getattr(op, "chips", ()) if k < chips]
    return placed or list(range(min(chips, -(-op.cores // cores_per_chip))))


__all__ = ["POWER_TRACK", "TraceBuilder", "timing_trace", "trace_document", "write_trace"]
