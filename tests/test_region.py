"""End to end through the compiler: random matmul and conv2d shapes on small chips.

Each example is a Relax module compiled with ``tvm.compile(..., target="icca")`` on a chip of
4 to 64 cores with a tight SRAM budget, run on the simulated device and compared with numpy;
the device's peak SRAM must stay inside the budget and the planned footprint must match.
"""

import numpy as np
import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import relax

import tvm_icca
from runtime_sim.contract.errors import IccaError, UnsupportedDtypeError
from runtime_sim.contract.presets import small_chip
from tvm_icca.model_pass.region_plans import compile_region
from tvm_icca.testing.onnx_models import conv2d_reference

CHIPS = st.sampled_from([4, 8, 16, 32, 64])
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _matmul_module(b, m, k, n, transpose_b):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((b, m, k), "float32"))
    wshape = (n, k) if transpose_b else (k, n)
    w = relax.Var("w", relax.TensorType(wshape, "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            rhs = bb.emit(relax.op.permute_dims(w)) if transpose_b else w
            y = bb.emit_output(relax.op.matmul(x, rhs))
        bb.emit_func_output(y)
    return bb.get()


def _conv_module(n, c, h, f, k, stride, pad, dilation):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, c, h, h), "float32"))
    w = relax.Var("w", relax.TensorType((f, c, k, k), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w, strides=stride, padding=pad, dilation=dilation))
            z = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(z)
    return bb.get()


def _run(mod, hw, *arrays):
    with tvm_icca.use_hardware(hw):
        ex = tvm.compile(mod, target="icca")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in arrays])
    return out.numpy(), tvm_icca.last_run_stats()


@SETTINGS
@given(cores=CHIPS, b=st.integers(1, 3), m=st.integers(1, 40), k=st.integers(1, 48),
       n=st.integers(1, 40), transpose_b=st.booleans(), seed=st.integers(0, 2**16))
def test_random_matmul(cores, b, m, k, n, transpose_b, seed):
    hw = small_chip(cores, 8 * 1024 + 4 * 1024)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    try:
        got, stats = _run(_matmul_module(b, m, k, n, transpose_b), hw, x, w)
    except IccaError as err:  # only acceptable when the problem cannot fit this chip at all
        assert "fit" in str(err) or "exceeds" in str(err), err
        return
    want = x @ (w.T if transpose_b else w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert stats["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core


@SETTINGS
@given(cores=CHIPS, n=st.integers(1, 2), c=st.integers(1, 6), h=st.integers(5, 12),
       f=st.integers(1, 8), k=st.sampled_from([1, 3]), stride=st.integers(1, 2),
       pad=st.integers(0, 1), dilation=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_random_conv2d(cores, n, c, h, f, k, stride, pad, dilation, seed):
    if h + 2 * pad < dilation * (k - 1) + 1:
        return
    hw = small_chip(cores, 8 * 1024 + 8 * 1024)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    w = rng.standard_normal((f, c, k, k)).astype(np.float32)
    got, stats = _run(_conv_module(n, c, h, f, k, stride, pad, dilation), hw, x, w)
    want = np.maximum(conv2d_reference(x, w, stride, pad, dilation), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert stats["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core


def test_region_program_round_trips_and_plans_fit():
    hw = small_chip(16, 16 * 1024)
    part = tvm_icca.partition_for_icca(_matmul_module(2, 24, 32, 16, True), hw=hw)
    (name, func), = tvm_icca.partition.partitioner.icca_regions(part).items()
    program = compile_region(func, name, hw)
    from runtime_sim.contract.layout import OpLayout
    from runtime_sim.contract.program import DeviceProgram

    again = DeviceProgram.from_json(program.to_json())
    assert again == program
    for op in program.ops:
        layout = OpLayout(op.expr, op.plan)
        layout.validate()
        assert layout.memory_bytes_per_core() <= hw.usable_sram_bytes
        assert layout.num_cores <= hw.num_cores


def test_float64_model_stays_on_host_and_device_refuses_it():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 4), "float64"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(y)
    mod = bb.get()
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, hw=small_chip(4)))
    assert report["host_ops"] == {"relax.nn.relu": 1}
    assert "float64" in " ".join(report["host_reasons"]["relax.nn.relu"])
    # Asking the device itself to hold float64 is one clear error.
    from runtime_sim.contract.program import DeviceProgram, TensorDecl
    from runtime_sim.functional.device import SimulatedDevice

    program = DeviceProgram("r", small_chip(4).to_dict(), (TensorDecl("in0", (4,), "float64"),), (), ())
    try:
        SimulatedDevice().run(program, [np.zeros(4)])
    except UnsupportedDtypeError as err:
        assert "float64" in str(err)
    else:
        raise AssertionError("float64 input accepted")


def test_tensor_larger_than_chip_fails_with_one_clear_error():
    from runtime_sim.contract.errors import PlanNotFoundError

    hw = small_chip(4, 16 * 1024)
    mod = _matmul_module(1, 256, 256, 256, False)  # 256 KiB per operand, 64 KiB of chip
    try:
        with tvm_icca.use_hardware(hw):
            tvm.compile(mod, target="icca")
    except PlanNotFoundError as err:
        assert "exceeds the on-chip memory" in str(err) and "icca-4" in str(err)
    else:
        raise AssertionError("an operand larger than the chip compiled")
