"""The prefetch scheduler (runtime_sim.timing.prefetch_scheduler): loads overlap compute when SRAM allows,
share links with a running operator, and returns to the host end the run."""

from __future__ import annotations

import time

import pytest

from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram
from runtime_sim.contract.validation import validate_program
from runtime_sim.timing import simulate_timing
from tvm_icca.testing.timing_programs import one_op_program, two_weight_program

LAT = 1e-7  # link latency used where the closed forms should show it


def test_prefetch_overlaps_loads_with_compute_when_sram_allows() -> None:
    base = dict(hbm_bandwidth=2e9, hbm_controllers=2)  # slow HBM: loads matter
    roomy = small_chip(16, 256 * 1024, **base)
    prog, layout = two_weight_program(roomy)
    r = simulate_timing([prog])
    op0, op1 = r.per_op
    assert op1.prefetched and op1.load_start_s == pytest.approx(op0.start_s)
    assert r.overlap_s == pytest.approx(min(op1.hbm_s, op0.duration_s), rel=1e-6)
    assert r.total_s == pytest.approx(op0.hbm_s + max(op0.duration_s, op1.hbm_s) + op1.duration_s, rel=1e-6)
    # op 1's W1 partition fits beside op 0 only with room to spare: shrink SRAM until it does not
    footprint = layout.memory_bytes_per_core()
    tight_sram = footprint + roomy.shift_buffer_bytes + layout.partition_bytes(1) - 1
    tight = small_chip(16, tight_sram, **base)
    prog_t, _ = two_weight_program(tight)
    t = simulate_timing([prog_t])
    t0, t1 = t.per_op
    assert not t1.prefetched and t1.load_start_s == pytest.approx(t0.end_s)
    assert t.overlap_s == 0
    assert t.total_s == pytest.approx(t0.hbm_s + t0.duration_s + t1.hbm_s + t1.duration_s, rel=1e-9)
    assert t.total_s > r.total_s
    assert r.peak_sram_with_prefetch_bytes_per_core > r.peak_sram_bytes_per_core
    assert t.peak_sram_with_prefetch_bytes_per_core == t.peak_sram_bytes_per_core


def test_shared_links_slow_an_overlapping_load(exprs) -> None:
    """A load that overlaps an operator busy shifting gets only the link time it leaves."""
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=1e12, hbm_controllers=4)
    e = exprs.matmul(64, 256, 64)
    rot = ExecutionPlan({"m": 4, "n": 4}, ({"k": 4}, {"k": 4}, {}))  # shifts every step
    ops = (OpProgram("mm0", e, rot, ("A", "B0"), "C0"), OpProgram("mm1", e, rot, ("A", "B1"), "C1"))
    consts = {n: {"dtype": "float32", "shape": list(s)} for n, s in
              (("A", (64, 256)), ("B0", (256, 64)), ("B1", (256, 64)))}
    consts["A"]["source"] = "resident"
    r = simulate_timing([DeviceProgram("p", hw.to_dict(), (), ("C0", "C1"), ops, constants=consts)])
    op0, op1 = r.per_op
    assert op1.prefetched
    alone = op0.hbm_s  # the same load with nothing running
    assert op1.hbm_s > alone  # delayed by op 0's shifts on the same ports


def test_host_round_trip_times_the_return_leg(exprs) -> None:
    """A region output the host reads goes back chip -> host over the host link when its
    producer ends: its bytes at ``host_bandwidth`` (the network leg is shorter here), and the
    run ends when it has arrived."""
    import dataclasses

    from runtime_sim.contract.errors import DeviceProgramError

    hw = small_chip(16, 256 * 1024, link_latency_s=LAT)
    e = exprs.bias_add(256, 256)
    plan = ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {}))
    prog = one_op_program(e, plan, hw, constants=("b",))
    out_bytes = 256 * 256 * 4
    stays = simulate_timing([prog])
    back = simulate_timing([dataclasses.replace(prog, host_outputs=prog.outputs)])
    assert stays.host_out_bytes == 0 and back.host_out_bytes == out_bytes
    op = back.per_op[0]
    assert op.host_out_start_s == pytest.approx(op.end_s)
    assert op.host_out_s == pytest.approx(out_bytes / hw.host_bandwidth, rel=1e-9)
    assert back.total_s == pytest.approx(stays.total_s + out_bytes / hw.host_bandwidth, rel=1e-9)
    assert back.host_s == pytest.approx(stays.host_s + out_bytes / hw.host_bandwidth, rel=1e-9)
    # a region output nobody on the host reads is refused as a host output
    with pytest.raises(DeviceProgramError):
        validate_program(dataclasses.replace(prog, host_outputs=("nope",)), hw)
