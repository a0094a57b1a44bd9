"""Chrome trace-event output (runtime_sim.timing.trace)."""

from __future__ import annotations

import json

import pytest

from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.preset_energies import ENERGY_FIELDS
from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.timing import simulate_timing
from runtime_sim.timing.trace import (
    POWER_TRACK,
    TraceBuilder,
    timing_trace,
    trace_document,
    write_trace,
)
from tvm_icca.testing.timing_programs import producer_consumer_program, two_weight_program


def test_builder_names_tracks_with_metadata_and_uses_microseconds(tmp_path) -> None:
    tb = TraceBuilder()
    chip = tb.process("chip 0")
    assert tb.process("chip 0") == chip  # same name, same process
    cores = tb.thread(chip, "cores")
    links = tb.thread(chip, "links")
    assert cores != links and tb.thread(chip, "cores") == cores
    other = tb.process("HBM")
    assert other != chip and tb.thread(other, "controller 0") == 1  # tids count per process
    tb.complete(chip, cores, "op", 1.5e-6, 2e-6, "op", {"steps": 3})
    tb.complete(chip, cores, "neg", 0.0, -1.0)  # a negative duration is clamped
    meta = [e for e in tb.events if e["ph"] == "M"]
    assert {(e["name"], e["args"].get("name")) for e in meta} >= {
        ("process_name", "chip 0"), ("thread_name", "cores"), ("thread_name", "links"),
        ("process_name", "HBM"), ("thread_name", "controller 0")}
    assert any(e["name"] == "process_sort_index" for e in meta)
    x = [e for e in tb.events if e["ph"] == "X"]
    assert x[0]["ts"] == pytest.approx(1.5) and x[0]["dur"] == pytest.approx(2.0)
    assert x[0]["args"] == {"steps": 3} and x[0]["cat"] == "op"
    assert x[1]["dur"] == 0
    path = tmp_path / "trace.json"
    write_trace(str(path), tb.events)
    doc = json.loads(path.read_text())
    assert doc == trace_document(tb.events) == tb.to_dict()
    assert doc["traceEvents"] and doc["displayTimeUnit"] == "ns"


def _program(exprs, hw):
    mm = exprs.matmul(64, 128, 64, dtype="float16")
    ops = (
        OpProgram("mm0", mm, ExecutionPlan({"m": 4, "n": 4, "k": 2}, ({"k": 2}, {}, {})), ("X", "W0"), "H"),
        OpProgram("mm1", exprs.matmul(64, 64, 64, dtype="float16"),
                  ExecutionPlan({"m": 8, "n": 4}, ({}, {}, {})), ("H", "W1"), "Y"),
    )
    consts = {"W0": {"dtype": "float16", "shape": [128, 64]},
              "W1": {"dtype": "float16", "shape": [64, 64]}}
    decls = (TensorDecl("X", (64, 128), "float16", "host"),)
    return DeviceProgram("r", hw.to_dict(), decls, ("Y",), ops, constants=consts)


def test_timing_trace_tracks(exprs) -> None:
    hw = preset("ipu-pod4-hbm", num_cores=32, num_chips=4, hbm_controllers=8)
    report = simulate_timing([_program(exprs, hw)])
    events = timing_trace(report)
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert [n for n in procs.values() if n.startswith("chip")] == [
        "chip 0 (cores 0-7)", "chip 1 (cores 8-15)", "chip 2 (cores 16-23)", "chip 3 (cores 24-31)"]
    hbm_pid = next(p for p, n in procs.items() if n == "HBM")
    assert sorted(n for (p, _), n in threads.items() if p == hbm_pid) == sorted(
        f"controller {h} (chip {h % 4})" for h in range(8))
    ic_pid = next(p for p, n in procs.items() if n == "interconnect")
    ic_threads = {n for (p, _), n in threads.items() if p == ic_pid}
    assert {"on-chip links (exchange ports)", "inter-chip links", "HBM delivery"} <= ic_threads

    x = [e for e in events if e["ph"] == "X"]
    # every chip's core track shows both operators (each spans all 32 cores)
    for pid, name in procs.items():
        if name.startswith("chip"):
            assert {e["name"] for e in x if e["pid"] == pid} >= {"matmul [64x64]", "steps"}
            assert {e.get("args", {}).get("op") for e in x if e["pid"] == pid} >= {"mm0", "mm1"}
    # the HBM loads appear once per controller, at the times of the report
    loads = [e for e in x if e["pid"] == hbm_pid]
    assert len(loads) == 8 * 2
    op1 = report.per_op[1]
    mm1_loads = [e for e in loads if e["args"]["op"] == "mm1"]
    assert mm1_loads and all(e["name"] == "load matmul [64x64]" for e in mm1_loads)
    assert mm1_loads[0]["ts"] == pytest.approx(op1.hbm_start_s * 1e6)
    assert mm1_loads[0]["dur"] == pytest.approx(op1.hbm_s * 1e6)
    # the host input of mm0 on its host track
    host_pid = next(p for p, n in procs.items() if n == "host")
    assert any(e["pid"] == host_pid and e["name"] == "input matmul [64x64]"
               and e["args"]["op"] == "mm0" for e in x)
    # operator spans match the report
    op0 = report.per_op[0]
    span = next(e for e in x if e["cat"] == "op" and e["args"]["op"] == "mm0")
    assert span["name"] == "matmul [64x64]"
    assert span["ts"] == pytest.approx(op0.start_s * 1e6) and span["dur"] == pytest.approx(op0.duration_s * 1e6)
    # nested phases add up to the operator
    phases = [e for e in x if e["pid"] == span["pid"] and e["tid"] == span["tid"] and e["cat"] == "phase"
              and span["ts"] - 1e-9 <= e["ts"] < span["ts"] + span["dur"]]
    assert sum(e["dur"] for e in phases) == pytest.approx(span["dur"])


def test_trace_opens_as_chrome_trace(tmp_path) -> None:
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=2e9, hbm_controllers=2, num_chips=2,
                    inter_chip_bandwidth=50e9)
    prog, _ = two_weight_program(hw)
    r = simulate_timing([prog], trace=True)
    assert r.trace_events
    path = tmp_path / "t.json"
    r.write_trace(str(path))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"chip 0 (cores 0-7)", "chip 1 (cores 8-15)", "interconnect", "HBM", "host"} <= names
    threads = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"controller 0 (chip 0)", "controller 1 (chip 1)", "inter-chip links"} <= threads
    complete = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and "pid" in e and "tid" in e for e in complete)
    assert {"mm0", "mm1"} <= {e.get("args", {}).get("op") for e in complete}
    assert all(e["name"].startswith("matmul [") for e in complete if e["cat"] == "op")
    # complete events on one track nest or follow each other (what Perfetto needs)
    by_track: dict = {}
    for e in complete:
        by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list = []
        for s, t in spans:
            while stack and stack[-1] <= s + 1e-9:
                stack.pop()
            assert not stack or t <= stack[-1] + 1e-9
            stack.append(t)
    # without trace=True the events are built on demand
    r2 = simulate_timing([prog])
    assert not r2.trace_events
    r2.write_trace(str(tmp_path / "t2.json"))
    assert json.loads((tmp_path / "t2.json").read_text())["traceEvents"]


def test_trace_draws_a_spread_operator_on_every_chip_it_uses() -> None:
    hw = small_chip(16, 256 * 1024, num_chips=4, inter_chip_bandwidth=1e9)
    for chips, expected in ((1, [(0,)]), (4, [(0, 1, 2, 3)])):
        report = simulate_timing([producer_consumer_program(hw, chips)])
        consumer = report.per_op[1]
        assert [consumer.chips] == expected
        drawn = {e["pid"] for e in timing_trace(report)
                 if e.get("ph") == "X" and e.get("cat") == "op"
                 and e["args"]["op"] == consumer.name and e["name"] == consumer.label}
        assert len(drawn) == len(expected[0])  # one "cores" span per chip it runs on


def test_power_track_integrates_to_the_energy() -> None:
    """The ``power (W)`` counter track: each operator's dynamic energy over its duration plus
    the static power, the static power between operators; its area is ``energy_j``. A chip
    without per-action energies has no such track."""
    hw = small_chip(16, matrix_pj_per_flop=2.0, sram_read_pj_per_byte=1.0,
                    link_pj_per_byte=3.0, static_w_per_core=0.05, static_w_per_chip=1.0)
    report = simulate_timing([producer_consumer_program(small_chip(16), 1)], hw)
    counters = [e for e in timing_trace(report) if e["ph"] == "C"]
    assert counters and {e["name"] for e in counters} == {POWER_TRACK}
    points = [(e["ts"] * 1e-6, e["args"]["W"]) for e in counters]
    assert points[0] == (0.0, 16 * 0.05 + 1.0)
    ends = [t for t, _ in points[1:]] + [report.total_s]
    assert sum(w * (end - t) for (t, w), end in zip(points, ends)) == pytest.approx(report.energy.energy_j)
    assert all(w >= 16 * 0.05 + 1.0 for _, w in points)
    # small_chip has the IPU's energies: every energy field 0 is a chip without them
    unpriced = small_chip(16, **{**{name: 0.0 for name in ENERGY_FIELDS},
                                 "matrix_pj_per_flop_by_dtype": {}})
    plain = simulate_timing([producer_consumer_program(small_chip(16), 1)], unpriced)
    assert not [e for e in timing_trace(plain) if e["ph"] == "C"]
