"""The functional device runs Elk preload streams (runtime_sim.functional.device, Elk §2.2, §4.5):
off-chip tensors wait in an HBM store, ``preload`` puts each core's chunk in its preload
space, ``execute`` distributes chunks between peers and computes; results exact against
numpy, bytes as runtime_sim.contract.preload_chunks defines them, SRAM including preload space."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from runtime_sim import run_stats
from runtime_sim.contract.errors import DeviceProgramError, InvalidPlanError, SramOverflowError
from runtime_sim.contract.layout import OpLayout, checked_layout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.preload_chunks import (
    chunk_options,
    chunk_range,
    distribution,
    held_chunk,
    op_preload,
)
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, PreloadSchedule, TensorDecl
from runtime_sim.contract.stream import offchip_inputs, run_stream
from runtime_sim.functional.device import SimulatedDevice
from tvm_icca.testing.exprs import matmul
from tvm_icca.testing.relayout_reference import received_bytes

RNG = np.random.default_rng(7)
HW = small_chip(16, hbm_bandwidth=1e12, hbm_controllers=4)

# plans that replicate the weight B (indexed k, n) over m, so it can be chunked (S > 1)
PLANS = [
    ({"m": 4}, ({}, {}, {})),  # B on 4 replicas, A whole per core
    ({"m": 4, "n": 2}, ({}, {}, {})),  # B: 4 replicas of each of 2 partitions; A: 2 replicas
    ({"m": 6, "k": 2}, ({}, {}, {})),  # split reduction: output replicas
    ({"m": 2, "n": 2, "k": 2}, ({"k": 2}, {"k": 2}, {})),  # B rotates on k
    ({"m": 3, "n": 3}, ({"k": 3}, {"k": 3}, {})),  # Cannon: partitions rotate
]


def _rename(expr, a: str, b: str, c: str):
    ins = (dataclasses.replace(expr.inputs[0], name=a), dataclasses.replace(expr.inputs[1], name=b))
    return dataclasses.replace(expr, inputs=ins, output=dataclasses.replace(expr.output, name=c))


def _op(name, expr, F, temporal, chunks=()):
    return OpProgram(name, expr, ExecutionPlan(F, temporal, tuple(dict.fromkeys(a for t in temporal for a in t))),
                     tuple(t.name for t in expr.inputs), expr.output.name, preload_chunks=tuple(chunks))


def _program(region, ops, inputs, outputs, stream, hw=HW, design="elk-full", run_order=(),
             module="m"):
    schedule = None if stream is None else PreloadSchedule(design, tuple(tuple(e) for e in stream))
    return DeviceProgram(region, hw.to_dict(), tuple(inputs), tuple(outputs), tuple(ops),
                         module=module, run_order=tuple(run_order), preload_schedule=schedule)


def _single(F, temporal, chunks, a_source="host", stream=None, hw=HW, design="elk-full",
            shape=(12, 12, 6)):
    expr = matmul(*shape)
    op = _op("mm", expr, F, temporal, chunks)
    decls = [TensorDecl("A", expr.inputs[0].shape, "float32", a_source),
             TensorDecl("B", expr.inputs[1].shape, "float32", "hbm")]
    stream = stream if stream is not None else [("preload", 0, 0), ("execute", 0)]
    return _program("r0", [op], decls, ["C"], stream, hw=hw, design=design)


def _data(program):
    return [RNG.standard_normal(d.shape).astype(d.dtype) for d in program.inputs]


def _middle(options):
    return options[len(options) // 2]


@pytest.mark.parametrize("F, temporal", PLANS)
def test_preloaded_matmul_exact_for_every_chunking(F, temporal) -> None:
    layout = OpLayout(matmul(12, 12, 6), ExecutionPlan(F, temporal, ()))
    S = layout.replicas(1)
    options = chunk_options(layout, 1)
    a_options = chunk_options(layout, 0)
    for s in sorted({1, _middle(options), S}):
        for a_s in sorted({1, a_options[-1]}):
            program = _single(F, temporal, [(0, a_s), (1, s)])
            dev = SimulatedDevice()
            a, b = _data(program)
            (c,) = dev.run(program, [a, b])
            np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
            stats = dev.last_run_stats(timing=False)
            layout = checked_layout(program.ops[0], HW)
            full = layout.num_cores * (layout.partition_bytes(0) + layout.partition_bytes(1))
            assert stats["preloaded_bytes"] + stats["distributed_bytes"] == full
            info = op_preload(layout, [0, 1], op=program.ops[0])
            assert stats["preloaded_bytes"] == info.preloaded_bytes
            assert stats["distributed_bytes"] == info.distributed_bytes
            if s == 1 and a_s == 1:
                assert stats["distributed_bytes"] == 0
            (op_stats,) = stats["regions"][0]["ops"]
            assert op_stats["preloaded_bytes"] == info.preloaded_bytes
            assert op_stats["distributed_bytes"] == info.distributed_bytes
            assert op_stats["preload_bytes_per_core"] == info.space_bytes_per_core
            assert op_stats["host_placed_bytes"] == 0  # nothing was placed from the host copy
            assert (stats["preloads"], stats["executes"]) == (1, 1)
            # the preload space becomes part of the execution space: not counted twice
            assert stats["peak_sram_bytes_per_core"] == layout.memory_bytes_per_core() + HW.shift_buffer_bytes
            assert stats["peak_preload_bytes_per_core"] == info.space_bytes_per_core
            assert not dev.sram_used_per_core().any() or \
                (dev.sram_used_per_core() == HW.shift_buffer_bytes).all()


def test_stream_less_program_counts_no_preloads() -> None:
    program = dataclasses.replace(_single({"m": 4}, ({}, {}, {}), ()), preload_schedule=None)
    dev = SimulatedDevice()
    a, b = _data(program)
    (c,) = dev.run(program, [a, b])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    stats = dev.last_run_stats(timing=False)
    assert stats["preloads"] == stats["executes"] == 0
    assert stats["distributed_bytes"] == stats["peak_preload_bytes_per_core"] == 0
    assert stats["host_placed_bytes"] > 0
    # without a stream, preloaded_bytes are the bytes the loads delivered: A (12 x 12) in row
    # blocks of 3 on 4 cores, B (12 x 6) whole on each of them (float32)
    assert stats["preloaded_bytes"] == 4 * (3 * 12 * 4) + 4 * (12 * 6 * 4)
    assert stats["preloaded_bytes"] == run_stats.last_run_timing(dev).preloaded_bytes


def test_on_chip_input_is_placed_offchip_is_preloaded() -> None:
    program = _single({"m": 4, "n": 2}, ({}, {}, {}), [(1, 4)], a_source="chip")
    assert offchip_inputs(program, True) == [[1]]
    dev = SimulatedDevice()
    a, b = _data(program)
    (c,) = dev.run(program, [a, b])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    layout = checked_layout(program.ops[0], HW)
    (op_stats,) = dev.last_run_stats(timing=False)["regions"][0]["ops"]
    assert op_stats["host_placed_bytes"] == layout.num_cores * layout.partition_bytes(0)
    assert op_stats["preloaded_bytes"] + op_stats["distributed_bytes"] == \
        layout.num_cores * layout.partition_bytes(1)
    assert op_stats["distributed_bytes"] == distribution(layout, 1, 4).total_bytes > 0


def test_distribution_reads_the_peers_preload_space() -> None:
    """A core's partition is assembled from what its peers hold in preload space: corrupting
    one core's chunk corrupts exactly the cores that fetch from it."""
    expr = matmul(12, 12, 6)
    layout = OpLayout(expr, ExecutionPlan({"m": 4}, ({}, {}, {}), ()))
    b = RNG.standard_normal(expr.inputs[1].shape).astype("float32")
    dev = SimulatedDevice(HW)
    delivered = dev.preload_async("mm", layout, {1: b}, {1: 4})
    assert delivered == layout.num_cores * layout.partition_bytes(1) - \
        distribution(layout, 1, 4).total_bytes
    assert (dev.preload_used_per_core()[:4] == layout.partition_bytes(1) // 4).all()
    dev._preloads["mm"].chunks[1][2] += 100.0  # core 2's preload space
    dev.allocate("mm", layout)
    assert not dev.preload_used_per_core().any()  # absorbed into the execution space
    moved = dev.distribute("mm")
    assert moved == distribution(layout, 1, 4).total_bytes
    got = dev.buffers("mm")[1].reshape(4, -1)
    want = np.broadcast_to(b.reshape(-1), got.shape)
    bad = got != want
    d = distribution(layout, 1, 4)
    readers = set(d.dst[d.src == 2].tolist()) | {2}
    assert {c for c in range(4) if bad[c].any()} == readers
    lo, hi = (int(v) for v in chunk_range(layout, 1, 4, held_chunk(layout, 1, 4)[2]))
    assert hi - lo == 18
    for c in readers:
        assert bad[c, lo:hi].all() and not bad[c, :lo].any() and not bad[c, hi:].any()
    dev.free("mm")
    assert not dev.sram_used_per_core()[:4].any() or \
        (dev.sram_used_per_core() == HW.shift_buffer_bytes).all()


def test_chunk_count_not_dividing_replicas_is_refused_before_data_moves() -> None:
    program = _single({"m": 4}, ({}, {}, {}), [(1, 3)])
    dev = SimulatedDevice()
    with pytest.raises(InvalidPlanError, match="must divide"):
        dev.run(program, _data(program))
    assert not dev._preloads and dev.last_run_stats(timing=False)["regions_executed"] == 0


def _two_ops(W1_source="hbm"):
    """r: Y = X @ W1 (4 cores, W1 on 4 replicas); Z = Y @ W2 (W2 on 2 replicas)."""
    e1 = _rename(matmul(8, 12, 10), "X", "W1", "Y")
    e2 = _rename(matmul(8, 10, 6), "Y", "W2", "Z")
    op1 = _op("mm1", e1, {"m": 4}, ({}, {}, {}), [(1, 2)])
    op2 = _op("mm2", e2, {"m": 2, "n": 3}, ({}, {}, {}), [(1, 2)])
    return e1, e2, op1, op2


def test_two_operators_one_region_stream_order() -> None:
    e1, e2, op1, op2 = _two_ops()
    decls = [TensorDecl("X", e1.inputs[0].shape, "float32", "chip"),
             TensorDecl("W1", e1.inputs[1].shape, "float32", "hbm"),
             TensorDecl("W2", e2.inputs[1].shape, "float32", "hbm")]
    stream = [("preload", 0, 0), ("preload", 0, 1), ("execute", 0), ("execute", 1)]
    program = _program("r", [op1, op2], decls, ["Z"], stream)
    x, w1, w2 = _data(program)
    dev = SimulatedDevice()
    (z,) = dev.run(program, [x, w1, w2])
    np.testing.assert_allclose(z, (x.astype(np.float64) @ w1) @ w2, rtol=1e-4, atol=1e-4)
    stats = dev.last_run_stats(timing=False)
    l1, l2 = checked_layout(op1, HW), checked_layout(op2, HW)
    i1, i2 = op_preload(l1, [1], op=op1), op_preload(l2, [1], op=op2)
    assert stats["preloaded_bytes"] == i1.preloaded_bytes + i2.preloaded_bytes
    assert stats["distributed_bytes"] == i1.distributed_bytes + i2.distributed_bytes
    # op2's chunk waits in preload space while op1 executes (cores 0..5 hold it)
    exec1 = l1.memory_bytes_per_core() + i2.space_bytes_per_core + HW.shift_buffer_bytes
    assert stats["peak_sram_bytes_per_core"] == max(
        exec1, l2.memory_bytes_per_core() + l1.partition_bytes(2) + HW.shift_buffer_bytes)
    assert stats["peak_preload_bytes_per_core"] == i1.space_bytes_per_core + i2.space_bytes_per_core
    assert stats["regions"][0]["ops"][1]["relayout_bytes"] == received_bytes(l1, l2, 0)


def _two_calls(stream0, stream1, hw=HW, design="elk-full"):
    e1, e2, op1, op2 = _two_ops()
    order = ("r0", "r1")
    p0 = _program("r0", [op1], [TensorDecl("X", e1.inputs[0].shape, "float32", "host"),
                                TensorDecl("W1", e1.inputs[1].shape, "float32", "hbm")],
                  ["Y"], stream0, hw=hw, design=design, run_order=order)
    p1 = _program("r1", [op2], [TensorDecl("Y", e2.inputs[0].shape, "float32", "chip"),
                                TensorDecl("W2", e2.inputs[1].shape, "float32", "hbm")],
                  ["Z"], stream1, hw=hw, design=design, run_order=order)
    return p0, p1


def test_two_calls_preload_of_a_later_call() -> None:
    p0, p1 = _two_calls([("preload", 0, 0), ("preload", 1, 0), ("execute", 0)], [("execute", 0)])
    assert [(i.kind, i.call, i.op) for i in run_stream([p0, p1], True)] == [
        ("preload", 0, 0), ("preload", 1, 0), ("execute", 0, 0), ("execute", 1, 0)]
    x, w1 = _data(p0)
    w2 = RNG.standard_normal(p1.inputs[1].shape).astype("float32")
    dev = SimulatedDevice()
    (y,) = dev.run(p0, [x, w1])
    (z,) = dev.run(p1, [y, w2])
    np.testing.assert_allclose(z, (x.astype(np.float64) @ w1) @ w2, rtol=1e-4, atol=1e-4)
    stats = dev.last_run_stats(timing=False)
    assert stats["regions_executed"] == 2
    assert [r["preloads"] for r in stats["regions"]] == [1, 1]  # performed in its own call
    assert (stats["preloads"], stats["executes"]) == (2, 2)
    l1, l2 = checked_layout(p0.ops[0], HW), checked_layout(p1.ops[0], HW)
    assert offchip_inputs(p0, True) == [[0, 1]] and offchip_inputs(p1, True) == [[1]]
    total = sum(op_preload(l, offchip_inputs(p, True)[0], op=p.ops[0]).preloaded_bytes
                for l, p in ((l1, p0), (l2, p1)))
    assert stats["preloaded_bytes"] == total
    assert stats["regions"][1]["ops"][0]["preloaded_bytes"] == \
        op_preload(l2, [1], op=p1.ops[0]).preloaded_bytes
    # the timing simulator of the same run agrees, the later call's preload space counted
    # from its issue in call 0 on both sides (runtime_sim.contract.resting.stream_sram_peaks)
    report = run_stats.last_run_timing(dev)
    for key in ("peak_sram_bytes_per_core", "peak_preload_bytes_per_core", "preloads",
                "executes", "preloaded_bytes", "distributed_bytes", "relayout_bytes", "steps"):
        assert stats[key] == getattr(report, key), key
    assert stats["peak_preload_bytes_per_core"] == (op_preload(l1, [0, 1], op=p0.ops[0]).space_bytes_per_core
                                                    + op_preload(l2, [1], op=p1.ops[0]).space_bytes_per_core)
    # call 1 alone (a new run): nobody preloaded its weight
    with pytest.raises(DeviceProgramError, match="never preloads"):
        SimulatedDevice().run(p1, [y, w2])


def test_preload_of_a_call_the_run_does_not_have() -> None:
    p0, _ = _two_calls([("preload", 0, 0), ("preload", 2, 0), ("execute", 0)], [("execute", 0)])
    with pytest.raises(DeviceProgramError, match="does not have"):
        SimulatedDevice().run(p0, _data(p0))
    p0, p1 = _two_calls([("preload", 0, 0), ("preload", 1, 3), ("execute", 0)], [("execute", 0)])
    dev = SimulatedDevice()
    (y,) = dev.run(p0, _data(p0))
    with pytest.raises(DeviceProgramError, match="has 1 operators"):
        dev.run(p1, [y, RNG.standard_normal(p1.inputs[1].shape).astype("float32")])


@pytest.mark.parametrize("stream, match", [
    ([("execute", 0)], "never preloads"),
    ([("execute", 0), ("preload", 0, 0)], "after it ran"),
    ([("preload", 0, 0), ("preload", 0, 0), ("execute", 0)], "twice"),
])
def test_malformed_stream_refused_before_any_data_moves(stream, match, monkeypatch) -> None:
    program = _single({"m": 4}, ({}, {}, {}), [(1, 2)], stream=stream)
    dev = SimulatedDevice()
    moved = []
    for name in ("preload_async", "allocate", "place", "distribute"):
        monkeypatch.setattr(dev, name, lambda *a, _n=name, **k: moved.append(_n))
    with pytest.raises(DeviceProgramError, match=match):
        dev.run(program, _data(program))
    assert moved == []


def test_stream_only_in_some_calls_of_a_run_is_refused() -> None:
    p0, p1 = _two_calls([("preload", 0, 0), ("execute", 0)], [("preload", 0, 0), ("execute", 0)])
    p1 = dataclasses.replace(p1, preload_schedule=None)
    dev = SimulatedDevice()
    (y,) = dev.run(p0, _data(p0))
    with pytest.raises(DeviceProgramError, match="only some regions"):
        dev.run(p1, [y, RNG.standard_normal(p1.inputs[1].shape).astype("float32")])


def _sram_case(design: str, ahead: bool):
    """Two operators whose execution spaces fit alone, but not with the other's preload."""
    e1, e2, op1, op2 = _two_ops()
    l1, l2 = OpLayout(e1, op1.plan), OpLayout(e2, op2.plan)
    i2 = op_preload(l2, [1], op=op2)
    # execution of op1 fits, execution of op1 + op2's preload space does not
    sram = HW.shift_buffer_bytes + max(l1.memory_bytes_per_core() + i2.space_bytes_per_core - 4,
                                       l2.memory_bytes_per_core() + l1.partition_bytes(2))
    assert sram >= HW.shift_buffer_bytes + l1.memory_bytes_per_core()
    hw = small_chip(16, sram_bytes_per_core=sram, hbm_bandwidth=1e12, hbm_controllers=4)
    stream = ([("preload", 0, 0), ("preload", 0, 1), ("execute", 0), ("execute", 1)] if ahead else
              [("preload", 0, 0), ("execute", 0), ("preload", 0, 1), ("execute", 1)])
    decls = [TensorDecl("X", e1.inputs[0].shape, "float32", "chip"),
             TensorDecl("W1", e1.inputs[1].shape, "float32", "hbm"),
             TensorDecl("W2", e2.inputs[1].shape, "float32", "hbm")]
    return _program("r", [op1, op2], decls, ["Z"], stream, hw=hw, design=design), hw


def test_preloading_too_far_ahead_overflows_sram() -> None:
    program, hw = _sram_case("elk-full", ahead=True)
    dev = SimulatedDevice()
    with pytest.raises(SramOverflowError) as err:
        dev.run(program, _data(program))
    assert err.value.op == "mm1" and err.value.needed_bytes > hw.sram_bytes_per_core
    # the chip is left as the region found it
    assert (dev.sram_used_per_core() == hw.shift_buffer_bytes).all()
    assert not dev.preload_used_per_core().any()
    # one operator ahead less: it fits
    program, hw = _sram_case("elk-full", ahead=False)
    x, w1, w2 = _data(program)
    (z,) = dev.run(program, [x, w1, w2])
    np.testing.assert_allclose(z, (x.astype(np.float64) @ w1) @ w2, rtol=1e-4, atol=1e-4)
    assert dev.last_run_stats(timing=False)["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core


def test_ideal_design_preloads_into_its_own_sram() -> None:
    program, hw = _sram_case("ideal", ahead=True)
    dev = SimulatedDevice()
    x, w1, w2 = _data(program)
    (z,) = dev.run(program, [x, w1, w2])
    np.testing.assert_allclose(z, (x.astype(np.float64) @ w1) @ w2, rtol=1e-4, atol=1e-4)
    stats = dev.last_run_stats(timing=False)
    assert stats["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core
    assert 0 < stats["peak_preload_bytes_per_core"] <= hw.sram_bytes_per_core


def test_preload_space_alone_over_sram_overflows_at_the_preload() -> None:
    # a weight whose preload chunk alone exceeds the SRAM: refused at the preload, any design
    for design in ("elk-full", "ideal"):
        hw = small_chip(4, sram_bytes_per_core=16 * 1024, hbm_bandwidth=1e12, hbm_controllers=4)
        program = _single({"m": 4}, ({}, {}, {}), [(1, 1)], hw=hw, design=design,
                          shape=(4, 96, 64), a_source="chip")
        with pytest.raises(SramOverflowError) as err:
            SimulatedDevice().run(program, _data(program))
        assert err.value.op == "mm"


def test_functional_and_timing_count_the_same_preload_bytes() -> None:
    """Both executors of one run report the bytes runtime_sim.contract.preload_chunks defines."""
    p0, p1 = _two_calls([("preload", 0, 0), ("preload", 1, 0), ("execute", 0)], [("execute", 0)])
    x, w1 = _data(p0)
    dev = SimulatedDevice()
    (y,) = dev.run(p0, [x, w1])
    dev.run(p1, [y, RNG.standard_normal(p1.inputs[1].shape).astype("float32")])
    stats = run_stats.last_run_stats(device=dev)
    assert stats["simulated_s"] > 0
    report = run_stats.last_run_timing(dev)
    assert stats["preloaded_bytes"] > 0
    assert report.preloaded_bytes == stats["preloaded_bytes"]
    assert report.distributed_bytes == stats["distributed_bytes"]


def test_epilogue_input_and_constant_from_hbm_round_trip_json() -> None:
    """The bias of relu(A @ W + bias) is an HBM constant (no source: model state in HBM on a
    chip with HBM) read only by the epilogue; the program goes through JSON."""
    from runtime_sim.contract.constants import encode_constant
    from tvm_icca.testing.exprs import matmul_bias_relu

    expr = matmul_bias_relu(8, 12, 6)
    op = OpProgram("mmb", expr, ExecutionPlan({"m": 4, "n": 2}, ({}, {}, {}, {}), ()),
                   ("A", "B", "bias"), "C", preload_chunks=((1, 4), (2, 2)))
    bias = RNG.standard_normal(6).astype("float32")
    program = DeviceProgram(
        "r0", HW.to_dict(),
        (TensorDecl("A", (8, 12), "float32", "chip"), TensorDecl("B", (12, 6), "float32", "hbm")),
        ("C",), (op,), constants={"bias": encode_constant(bias)},
        preload_schedule=PreloadSchedule("elk-dyn", (("preload", 0, 0), ("execute", 0))))
    assert offchip_inputs(program, True) == [[1, 2]]
    a = RNG.standard_normal((8, 12)).astype("float32")
    b = RNG.standard_normal((12, 6)).astype("float32")
    dev = SimulatedDevice()
    (c,) = dev.run(program.to_json(), [a, b])
    np.testing.assert_allclose(c, np.maximum(a.astype(np.float64) @ b + bias, 0), rtol=1e-4, atol=1e-4)
    layout = checked_layout(op, HW)
    stats = dev.last_run_stats(timing=False)
    assert stats["preloaded_bytes"] + stats["distributed_bytes"] == \
        layout.num_cores * (layout.partition_bytes(1) + layout.partition_bytes(2))
    assert stats["distributed_bytes"] == sum(distribution(layout, t, s).total_bytes
                                             for t, s in ((1, 4), (2, 2)))
