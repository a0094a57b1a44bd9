"""Timing of preload/execute streams (Elk §4.5) in runtime_sim.timing: closed forms on tiny
hand-built programs (two or three matmuls whose weights live in HBM)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from runtime_sim.contract.constants import encode_constant
from runtime_sim.contract.errors import DeviceProgramError, SramOverflowError
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.preload_chunks import delivered_bytes, distribution, preload_bytes
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, PreloadSchedule, TensorDecl
from runtime_sim.functional.device import SimulatedDevice
from runtime_sim.machine.topology import make_topology
from runtime_sim.timing import simulate_timing

E = dict(m=64, k=64, n=64)
PLAN = ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {}))  # W (k x n) split on n: 4 replicas each
WBYTES = 64 * 64 * 4
RNG = np.random.default_rng(0)


def P(j: int, k: int = 0) -> tuple:
    return ("preload", k, j)


def X(j: int) -> tuple:
    return ("execute", j)


def chain(exprs, hw, stream=None, n_ops=2, plan=PLAN, chunks=(), design="elk-full",
          first_input="chip") -> DeviceProgram:
    """``n_ops`` chained 64x64x64 matmuls, weight ``W<i>`` of operator ``i`` a constant (from
    HBM on a chip with HBM); ``stream`` the preload schedule (``None``: none)."""
    e = exprs.matmul(E["m"], E["k"], E["n"])
    names = ["X"] + [f"H{i}" for i in range(n_ops)]
    ops = tuple(OpProgram(f"mm{i}", e, plan, (names[i], f"W{i}"), names[i + 1], preload_chunks=chunks)
                for i in range(n_ops))
    decls = (TensorDecl("X", (64, 64), "float32", first_input),)
    consts = {f"W{i}": {"dtype": "float32", "shape": [64, 64]} for i in range(n_ops)}
    schedule = None if stream is None else PreloadSchedule(design, tuple(stream))
    return DeviceProgram("mlp", hw.to_dict(), decls, (names[-1],), ops, constants=consts,
                         preload_schedule=schedule)


SLOW_HBM = dict(hbm_bandwidth=2e9, hbm_controllers=2)  # HBM-bound: a weight takes 8.192 us


def test_preloading_ahead_overlaps_and_one_ahead_serializes(exprs) -> None:
    hw = small_chip(16, 256 * 1024, **SLOW_HBM)
    plain = simulate_timing([chain(exprs, hw)])
    ahead = simulate_timing([chain(exprs, hw, [P(0), P(1), X(0), X(1)])])
    behind = simulate_timing([chain(exprs, hw, [P(0), X(0), P(1), X(1)])])
    pre = WBYTES / hw.hbm_bandwidth  # distinct bytes over the controllers: source-bound
    d0, d1 = (o.duration_s for o in plain.per_op)
    assert d0 < pre
    for r in (ahead, behind):
        assert r.design == "elk-full" and r.preloads == 2 and r.executes == 2
        assert [o.duration_s for o in r.per_op] == [d0, d1]  # s = 1: no distribution
        assert all(o.preloaded and o.hbm_s == pytest.approx(pre, rel=1e-12) for o in r.per_op)
        assert r.hbm_bytes == 2 * WBYTES
        assert r.preloaded_bytes == 2 * 16 * WBYTES // 4 and r.distributed_bytes == 0
    a0, a1 = ahead.per_op
    # preloads run back to back; execute 0 overlaps preload 1
    assert (a0.preload_start_s, a0.preload_end_s) == (0.0, pytest.approx(pre))
    assert a1.preload_start_s == pytest.approx(pre) and a1.preload_end_s == pytest.approx(2 * pre)
    assert a0.start_s == pytest.approx(pre) and a1.start_s == pytest.approx(2 * pre)
    assert ahead.total_s == pytest.approx(2 * pre + d1, rel=1e-12)
    # preload 1 is issued after execute 0: it starts when execute 0 ends
    b0, b1 = behind.per_op
    assert b1.preload_start_s == pytest.approx(b0.end_s)
    assert behind.total_s == pytest.approx(pre + d0 + pre + d1, rel=1e-12)
    # the Elk Fig. 18 breakdown
    assert ahead.preload_s == pytest.approx(2 * pre)
    assert ahead.preload_overlap_s == pytest.approx(d0) == ahead.overlap_s
    assert ahead.preload_only_s == pytest.approx(2 * pre - d0)
    assert ahead.execute_only_s == pytest.approx(d1)
    assert behind.preload_overlap_s == 0 and behind.preload_only_s == pytest.approx(2 * pre)
    for r in (ahead, behind):
        assert r.preload_only_s + r.execute_only_s + r.preload_overlap_s == pytest.approx(r.total_s)
        assert r.hbm_utilization == pytest.approx(2 * WBYTES / (r.total_s * hw.hbm_bandwidth))
        assert r.achieved_flops == pytest.approx(r.flops / r.total_s)
        assert r.flops_utilization == pytest.approx(r.flops / (r.total_s * hw.peak_matrix_flops))
        assert r.interconnect_stall_s == 0  # HBM-bound: link sharing delays nothing
    # more SRAM is held while preloading ahead: W1's preload space beside op 0
    assert ahead.peak_sram_bytes_per_core == behind.peak_sram_bytes_per_core + WBYTES // 4
    # both preload spaces are reserved once both preloads are issued, before execute 0
    # (runtime_sim.contract.resting.stream_sram_peaks, Elk §4.2's window)
    assert ahead.peak_preload_bytes_per_core == 2 * WBYTES // 4


def test_preload_waits_for_the_execute_issued_before_it(exprs) -> None:
    """Fast HBM, slow compute: preload 2 is free to start once preload 1 ends, but it is
    issued after execute 0, which blocks it until it ends."""
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=1e12, hbm_controllers=2, clock_hz=1e6)
    r = simulate_timing([chain(exprs, hw, [P(0), P(1), X(0), P(2), X(1), X(2)], n_ops=3)])
    o0, o1, o2 = r.per_op
    assert o1.preload_end_s < o0.end_s  # the queue is free long before execute 0 ends
    assert o2.preload_start_s == pytest.approx(o0.end_s)
    assert o1.start_s == pytest.approx(o0.end_s)  # its preload was done: no wait
    assert o2.start_s == pytest.approx(max(o1.end_s, o2.preload_end_s))


def _network_bound(exprs, n1=64):
    """Two matmuls that shift every step; weights over fast HBM: preloads network-bound
    (operator 1's weight ``n1`` columns wide)."""
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=1e12, hbm_controllers=4)
    rot = ExecutionPlan({"m": 4, "n": 4}, ({"k": 4}, {"k": 4}, {}))
    ops = (OpProgram("mm0", exprs.matmul(64, 256, 64), rot, ("A", "B0"), "C0"),
           OpProgram("mm1", exprs.matmul(64, 256, n1), rot, ("A", "B1"), "C1"))
    consts = {n: {"dtype": "float32", "shape": list(s)} for n, s in
              (("A", (64, 256)), ("B0", (256, 64)), ("B1", (256, n1)))}
    consts["A"]["source"] = "resident"

    def program(design):
        return DeviceProgram("p", hw.to_dict(), (), ("C0", "C1"), ops, constants=consts,
                             preload_schedule=PreloadSchedule(design, (P(0), P(1), X(0), X(1))))
    return program


@pytest.mark.parametrize("n1", [64, 512])
def test_preload_gets_the_link_share_the_execution_leaves(exprs, n1) -> None:
    """A preload overlapping an execution progresses at the link share it leaves, full rate
    after it; with a wide weight the delay runs past execute 0 and stalls execute 1."""
    program = _network_bound(exprs, n1)
    r = simulate_timing([program("elk-full")])
    o0, o1 = r.per_op
    # alone: the same preload with nothing executing (the ideal design's interconnect)
    ideal = simulate_timing([program("ideal")])
    i0, i1 = ideal.per_op
    alone = i1.preload_end_s - i1.preload_start_s
    assert i1.preload_start_s == o1.preload_start_s == o0.preload_end_s
    assert o0.preload_stall_s == 0 and o1.preload_start_s == pytest.approx(o0.preload_end_s)
    # share of the links execute 0 leaves: its transfers' bandwidth, not their hop latency
    assert 0 < o0.link_busy_s < o0.transfer_s
    free = 1.0 - o0.link_busy_s / o0.duration_s
    window = o0.duration_s * free
    expected = (o0.start_s + alone / free if alone <= window
                else o0.end_s + (alone - window))
    assert o1.preload_end_s == pytest.approx(expected, rel=1e-9)
    assert o1.preload_stall_s == pytest.approx(expected - (o1.preload_start_s + alone), rel=1e-9)
    assert o1.preload_stall_s > 0
    exposed = max(0.0, o1.preload_end_s - o0.end_s)
    assert o1.interconnect_stall_s == pytest.approx(min(o1.preload_stall_s, exposed), abs=1e-15)
    assert r.interconnect_stall_s == pytest.approx(o1.interconnect_stall_s)
    assert r.preload_stall_s == pytest.approx(o1.preload_stall_s)
    assert ideal.preload_stall_s == 0 and ideal.interconnect_stall_s == 0
    if n1 == 64:  # the delay hides under execute 0
        assert r.interconnect_stall_s == 0 and ideal.total_s == r.total_s
    else:
        assert r.interconnect_stall_s > 0
        assert r.total_s == pytest.approx(ideal.total_s + r.interconnect_stall_s, rel=1e-9)
        assert r.stall_s > ideal.stall_s


@pytest.mark.parametrize("s", [2, 4])
def test_distribution_completes_chunked_preloads(exprs, s) -> None:
    hw = small_chip(16, 256 * 1024, **SLOW_HBM)
    one = simulate_timing([chain(exprs, hw, [P(0), P(1), X(0), X(1)])])
    cut = simulate_timing([chain(exprs, hw, [P(0), P(1), X(0), X(1)], chunks=((1, s),))])
    layout = OpLayout(exprs.matmul(64, 64, 64), PLAN)
    d = distribution(layout, 1, s)
    topo = make_topology(hw)
    phase = topo.phase(layout.physical[d.src], layout.physical[d.dst], d.nbytes.astype(float),
                       multicast=d.src)
    for a, b in zip(one.per_op, cut.per_op):
        assert b.distribute_s == pytest.approx(phase.time_s, rel=1e-12) and b.distribute_s > 0
        assert b.duration_s == pytest.approx(a.duration_s + phase.time_s, rel=1e-12)
        assert b.transfer_s == pytest.approx(a.transfer_s + phase.time_s, rel=1e-12)
        assert b.distributed_bytes == d.total_bytes
        assert b.preloaded_bytes == delivered_bytes(layout, 1, s).sum()
        assert b.preloaded_bytes + b.distributed_bytes == 16 * layout.partition_bytes(1)
        assert b.preload_space_bytes_per_core == preload_bytes(layout, 1, s) == WBYTES // 4 // s
        assert b.hbm_s == pytest.approx(a.hbm_s)  # HBM still reads every distinct byte once
    assert cut.distributed_bytes == 2 * d.total_bytes
    assert cut.peak_preload_bytes_per_core == 2 * WBYTES // 4 // s  # both issued before X(0)
    # the ideal design distributes in no time, bytes still counted
    ideal = simulate_timing([chain(exprs, hw, [P(0), P(1), X(0), X(1)], chunks=((1, s),),
                                   design="ideal")])
    assert all(o.distribute_s == 0 for o in ideal.per_op)
    assert ideal.distributed_bytes == cut.distributed_bytes
    assert [o.duration_s for o in ideal.per_op] == [o.duration_s for o in one.per_op]


def test_chunks_split_over_chips_are_read_once_per_system(exprs) -> None:
    """W's 4 replicas sit 2 per chip: with s = 2 each chip holds both chunks and reads its own
    copy from its HBM; with s = 4 each chip holds 2 of the 4 chunks, reads half, and the
    distribution fetches the rest across the chips."""
    hw = small_chip(16, 256 * 1024, num_chips=2, inter_chip_bandwidth=50e9, **SLOW_HBM)
    r = {s: simulate_timing([chain(exprs, hw, [P(0), P(1), X(0), X(1)], chunks=((1, s),))])
         for s in (1, 2, 4)}
    assert all(x.hbm_bytes == 2 * WBYTES for x in r.values())
    assert r[1].hbm_delivered_bytes == r[2].hbm_delivered_bytes == 4 * WBYTES
    assert r[4].hbm_delivered_bytes == 2 * WBYTES
    assert r[4].per_op[0].hbm_s == pytest.approx(r[1].per_op[0].hbm_s / 2)
    assert r[2].per_op[0].inter_chip_bytes == 0 and r[4].per_op[0].inter_chip_bytes > 0


def test_preloading_too_far_ahead_overflows_sram(exprs) -> None:
    """SRAM for the running operator plus one preload: preloading two ahead overflows when
    operator 0 starts beside the preloads of 1 and 2, both issued before it (the stream's
    memory model, :mod:`runtime_sim.contract.sram_budget`), and the functional device refuses
    the same instruction on the same core; the ideal design checks preload space and
    execution space separately and runs."""
    fast = dict(hbm_bandwidth=1e12, hbm_controllers=2, clock_hz=1e6)  # long executions
    roomy = small_chip(16, 256 * 1024, **fast)
    plain = simulate_timing([chain(exprs, roomy, n_ops=3)])
    space = WBYTES // 4
    budget = max(o.sram_bytes_per_core for o in plain.per_op) + space
    hw = small_chip(16, budget, **fast)
    one_ahead = [P(0), P(1), X(0), P(2), X(1), X(2)]
    two_ahead = [P(0), P(1), P(2), X(0), X(1), X(2)]
    ok = simulate_timing([chain(exprs, hw, one_ahead, n_ops=3)])
    assert ok.peak_sram_bytes_per_core == budget  # exactly full, from the timeline
    with pytest.raises(SramOverflowError) as err:
        simulate_timing([chain(exprs, hw, two_ahead, n_ops=3)])
    assert err.value.op == "mm0" and err.value.budget_bytes == budget
    assert err.value.needed_bytes == budget + space
    program = chain(exprs, hw, two_ahead, n_ops=3)
    weights = {k: {**v, **encode_constant(RNG.standard_normal(v["shape"]).astype(v["dtype"]))}
               for k, v in program.constants.items()}
    program = dataclasses.replace(program, constants=weights)
    with pytest.raises(SramOverflowError) as functional:
        SimulatedDevice().run(program, [RNG.standard_normal(d.shape).astype(d.dtype)
                                        for d in program.inputs])
    assert (functional.value.op, functional.value.core, functional.value.needed_bytes) == \
        (err.value.op, err.value.core, err.value.needed_bytes)
    ideal = simulate_timing([chain(exprs, hw, two_ahead, n_ops=3, design="ideal")])
    assert ideal.peak_preload_bytes_per_core == 3 * space  # all three issued before X(0)
    assert ideal.peak_sram_bytes_per_core == budget - space  # execution space alone
    # preload space alone beyond the SRAM overflows even there: seven operators ahead
    all_ahead = [P(j) for j in range(8)] + [X(j) for j in range(8)]
    assert 7 * space > budget
    with pytest.raises(SramOverflowError) as err:
        simulate_timing([chain(exprs, hw, all_ahead, n_ops=8, design="ideal")])
    assert err.value.needed_bytes == (budget // space + 1) * space


def test_run_without_stream_keeps_todays_schedule(exprs) -> None:
    hw = small_chip(16, 256 * 1024, **SLOW_HBM)
    r = simulate_timing([chain(exprs, hw)])
    op0, op1 = r.per_op
    # no stream: no stream instructions (executes count the stream's, not the operators)
    assert r.design == "" and r.preloads == r.executes == 0 and r.num_ops == 2
    assert r.distributed_bytes == 0
    assert not op0.preloaded and op1.prefetched  # next-operator prefetch
    assert r.total_s == pytest.approx(op0.hbm_s + max(op0.duration_s, op1.hbm_s) + op1.duration_s,
                                      rel=1e-12)
    assert r.preload_only_s + r.execute_only_s + r.preload_overlap_s == pytest.approx(r.total_s)
    assert r.preloaded_bytes == 2 * 16 * WBYTES // 4  # what loads delivered to cores


def test_invalid_streams_are_refused(exprs) -> None:
    hw = small_chip(16, 256 * 1024, **SLOW_HBM)
    with pytest.raises(DeviceProgramError, match="never preloads"):
        simulate_timing([chain(exprs, hw, [P(0), X(0), X(1)])])
    with pytest.raises(DeviceProgramError, match="after it ran"):
        simulate_timing([chain(exprs, hw, [P(0), X(0), X(1), P(1, 0)])])
    with pytest.raises(DeviceProgramError, match="only some regions"):
        simulate_timing([chain(exprs, hw, [P(0), P(1), X(0), X(1)]), chain(exprs, hw)])
    with pytest.raises(DeviceProgramError, match="different preload designs"):
        simulate_timing([chain(exprs, hw, [P(0), P(1), X(0), X(1)]),
                         chain(exprs, hw, [P(0), P(1), X(0), X(1)], design="ideal")])


def test_preload_across_region_calls(exprs) -> None:
    """A preload issued in call 0 for an operator of call 1 runs during call 0."""
    hw = small_chip(16, 256 * 1024, **SLOW_HBM)
    first = chain(exprs, hw, [P(0), P(1), X(0), P(0, 1), X(1)])
    second = chain(exprs, hw, [X(0), P(1), X(1)])
    r = simulate_timing([first, second])
    assert r.preloads == 4 and r.executes == 4
    pre = WBYTES / hw.hbm_bandwidth
    c0_0, c0_1, c1_0, c1_1 = r.per_op
    d = c0_0.duration_s
    assert (c1_0.region, c1_0.name) == ("mlp", "mm0")
    # queued behind call 0's preload of mm1, it runs while call 0's mm1 executes
    assert c1_0.preload_start_s == pytest.approx(2 * pre) == c0_1.start_s
    assert c1_0.start_s == pytest.approx(3 * pre)
    # call 1 preloads its mm1 after executing its mm0
    assert c1_1.preload_start_s == pytest.approx(c1_0.end_s)
    assert r.total_s == pytest.approx(4 * pre + 2 * d, rel=1e-12)


def test_host_inputs_preload_over_the_host_link(exprs) -> None:
    hw = small_chip(16, 256 * 1024, **SLOW_HBM)
    r = simulate_timing([chain(exprs, hw, [P(0), P(1), X(0), X(1)], first_input="host")])
    o0 = r.per_op[0]
    assert o0.host_s == pytest.approx(WBYTES / hw.host_bandwidth, rel=1e-12)
    assert o0.preload_end_s == pytest.approx(max(o0.host_s, o0.hbm_s))
    assert r.host_in_bytes == WBYTES


def test_stream_report_dict_table_and_trace(exprs, tmp_path) -> None:
    hw = small_chip(16, 256 * 1024, **SLOW_HBM)
    r = simulate_timing([chain(exprs, hw, [P(0), P(1), X(0), X(1)], chunks=((1, 2),))], trace=True)
    d = json.loads(r.to_json())
    for key in ("design", "preload_s", "preload_only_s", "execute_only_s", "preload_overlap_s",
                "interconnect_stall_s", "preload_stall_s", "hbm_utilization",
                "interconnect_utilization", "flops_utilization", "achieved_flops",
                "preloaded_bytes", "distributed_bytes", "preloads", "executes",
                "peak_preload_bytes_per_core"):
        assert key in d
    assert 0 < d["interconnect_utilization"] <= 1
    assert {"preload_start_s", "preload_end_s", "distribute_s", "distributed_bytes"} <= set(d["per_op"][0])
    assert "stream" in r.table() and "elk-full" in r.table()
    events = r.trace_events
    threads = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"preload", "execute"} <= threads
    names = {e["name"] for e in events if e["ph"] == "X"}
    assert {"preload matmul [64x64]", "execute matmul [64x64]", "distribute"} <= names
    # events show labels; the generated operator names stay in the arguments
    by_op = {(e["name"].split()[0], e["args"]["op"]) for e in events
             if e["ph"] == "X" and e.get("cat") in ("preload", "execute")}
    assert {("preload", "mm0"), ("preload", "mm1"), ("execute", "mm0")} <= by_op
    by_track: dict = {}  # complete events on one track nest or follow each other
    for e in events:
        if e["ph"] == "X":
            by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list = []
        for lo, hi in spans:
            while stack and stack[-1] <= lo + 1e-9:
                stack.pop()
            assert not stack or hi <= stack[-1] + 1e-9
            stack.append(hi)
    r.write_trace(str(tmp_path / "t.json"))
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert np.isfinite(r.total_s)
