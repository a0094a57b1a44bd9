"""VGM programs on data: load-compute-store over home slices (T10 §2.2, Fig. 2a).

Operators planned with :func:`tvm_icca.plan_search.vgm.plan_vgm_operator` (and hand-picked small
tiles, for edge tiles, several waves and chunked reductions) run on the functional device and
must match numpy; whole regions compiled with ``execution="vgm"`` must match their compute-shift
twins; and corrupting where the tiles fetch from must break the result.
"""

import math

import numpy as np
import pytest

from runtime_sim.contract.constants import decode_constant
from runtime_sim.contract.errors import SramOverflowError
from runtime_sim.contract.plan import VgmPlan
from runtime_sim.contract.plan_rules import pinned_axes
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.contract.vgm_layout import VgmLayout
from runtime_sim.functional import vgm_exec
from runtime_sim.functional.device import SimulatedDevice
from runtime_sim.timing.vgm_timing import vgm_op_timing
from tvm_icca.plan_search.vgm import plan_vgm_operator
from tvm_icca.testing.exprs import attention_reference
from tvm_icca.testing.onnx_models import conv2d_reference


def _program(expr, plan, hw) -> DeviceProgram:
    op = OpProgram("op", expr, plan, tuple(a.name for a in expr.inputs), "out")
    decls = tuple(TensorDecl(a.name, a.shape, a.dtype) for a in expr.inputs)
    return DeviceProgram("region", hw.to_dict(), decls, ("out",), (op,))


def _run(expr, plan, hw, inputs):
    dev = SimulatedDevice()
    (out,) = dev.run(_program(expr, plan, hw), inputs)
    stats = dev.last_run_stats()
    return out, stats, stats["regions"][0]["ops"][0]


def _small_tiles(expr) -> VgmPlan:
    """About three tiles (or chunks) per axis, so there are edge tiles, waves and chunks."""
    pinned = pinned_axes(expr)
    return VgmPlan({a.name: a.extent if a.name in pinned else max(1, math.ceil(a.extent / 3))
                    for a in expr.axes})


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm(x, g, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps) * g + b


CASES = {
    "matmul": (lambda e: e.matmul(20, 30, 17), lambda a, b: a @ b),
    "batch_matmul_tb": (lambda e: e.matmul(9, 12, 10, transpose_b=True, batch=2),
                        lambda a, b: a @ b.transpose(0, 2, 1)),
    "conv2d": (lambda e: e.conv2d(2, 3, 9, 9, 4, 3, 3, stride=2, pad=1),
               lambda x, w: conv2d_reference(x, w, 2, 1, 1)),
    "conv2d_dilated": (lambda e: e.conv2d(1, 2, 10, 10, 3, 3, 3, pad=2, dilation=2),
                       lambda x, w: conv2d_reference(x, w, 1, 2, 2)),
    "bias_add": (lambda e: e.bias_add(13, 11), lambda x, b: x + b),
    "row_mean": (lambda e: e.row_sum(7, 25, mean=True), lambda x: x.mean(axis=1)),
    "softmax": (lambda e: e.softmax(6, 19), _softmax),
    "layer_norm": (lambda e: e.layer_norm(10, 24), lambda x, g, b: _layer_norm(x, g, b, 1e-5)),
    "matmul_bias_relu": (lambda e: e.matmul_bias_relu(11, 21, 14),
                         lambda a, b, bias: np.maximum(a @ b + bias, 0)),
    # the online softmax over key chunks (runtime_sim.functional.attention_step.online_update)
    "attention": (lambda e: e.attention_expr(6, 11, 4, batch=(2,), mask=True, softcap=3.0),
                  lambda q, k, v, m: attention_reference(q, k, v, mask=m, softcap=3.0)),
}


def _small_tiles_kept(expr) -> VgmPlan:
    """:func:`_small_tiles` assigned blocked, innermost axis first in the order, so that cores
    keep input boxes across waves (``reuse``)."""
    small = _small_tiles(expr)
    spatial = [a.name for a in expr.axes if not a.reduce]
    return VgmPlan(small.tiles, tuple(reversed(spatial)), True)


@pytest.mark.parametrize("tiles", ["planned", "small", "small_kept"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_operator_matches_numpy(exprs, case, tiles):
    build, reference = CASES[case]
    expr = build(exprs)
    hw = small_chip(8, 64 * 1024)
    plan = {"planned": lambda: plan_vgm_operator(expr, hw, name=case).plan,
            "small": lambda: _small_tiles(expr), "small_kept": lambda: _small_tiles_kept(expr)}[tiles]()
    rng = np.random.default_rng(len(case))
    inputs = [rng.standard_normal(a.shape).astype(a.dtype) for a in expr.inputs]
    out, run, op = _run(expr, plan, hw, inputs)
    want = reference(*[x.astype(np.float64) for x in inputs])
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    # the device moved exactly the boxes the VGM timing model charges
    timing = vgm_op_timing(expr, plan, hw)
    assert op["execution"] == "vgm"
    assert op["fetch_bytes"] + op["store_bytes"] == timing.bytes_moved
    assert (op["waves"], op["tiles"]) == (timing.waves, timing.tiles)
    assert op["store_bytes"] == out.nbytes and run["store_bytes"] == out.nbytes
    assert op["host_placed_bytes"] == sum(x.nbytes for x in inputs)
    assert run["shift_bytes"] == 0 and run["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core


def test_chunked_reduction_over_several_waves(exprs):
    """Edge tiles on every axis, 2 waves of 8 cores, and k summed in 4 chunks of 8 (the last
    one 6 long), accumulated in each core's output tile."""
    expr = exprs.matmul(20, 30, 17)
    plan = VgmPlan({"m": 4, "n": 8, "k": 8})
    hw = small_chip(8, 64 * 1024)
    layout = VgmLayout(expr, plan, hw.num_cores)
    assert (layout.num_tiles, layout.waves, layout.num_chunks) == (15, 2, 4)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((20, 30)).astype(np.float32), rng.standard_normal((30, 17)).astype(np.float32)
    out, run, op = _run(expr, plan, hw, [a, b])
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert op["steps"] == 8 and op["chunks"] == 4
    # SRAM: the VGM region (home slices of A, B and C) plus one chunk's tile buffers
    region = sum(math.ceil(n / 8) * 4 for n in (20 * 30, 30 * 17, 20 * 17))
    assert op["vgm_bytes_per_core"] == region
    peak = region + layout.working_bytes_per_core() + hw.shift_buffer_bytes
    assert op["sram_bytes_per_core"] == run["peak_sram_bytes_per_core"] == peak
    tight = small_chip(8, peak - 1)
    assert tight.shift_buffer_bytes == hw.shift_buffer_bytes
    with pytest.raises(SramOverflowError, match="operator 'op'"):
        _run(expr, plan, tight, [a, b])
    out, _, _ = _run(expr, plan, small_chip(8, peak), [a, b])  # exactly full is fine
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_float16_accumulates_in_float32(exprs):
    expr = exprs.matmul(16, 40, 12, "float16")
    plan = VgmPlan({"m": 8, "n": 4, "k": 16})
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((16, 40)).astype(np.float16), rng.standard_normal((40, 12)).astype(np.float16)
    out, _, _ = _run(expr, plan, small_chip(4, 64 * 1024), [a, b])
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32),
                               rtol=2e-3, atol=2e-3)


# -- the data really moves between cores --------------------------------------------------
def test_fetch_from_the_wrong_home_core_breaks_the_result(exprs, monkeypatch):
    expr = exprs.matmul(12, 16, 10)
    plan = VgmPlan({"m": 4, "n": 4, "k": 8})
    hw = small_chip(8, 64 * 1024)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(a.shape).astype(np.float32) for a in expr.inputs]
    want = inputs[0].astype(np.float64) @ inputs[1]
    out, _, _ = _run(expr, plan, hw, inputs)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)

    right = vgm_exec.home_of
    monkeypatch.setattr(vgm_exec, "home_of",
                        lambda flat, n: ((right(flat, n)[0] + 1) % hw.num_cores, right(flat, n)[1]))
    bad, _, _ = _run(expr, plan, hw, inputs)
    assert not np.allclose(bad, want, rtol=1e-3, atol=1e-3)


def test_each_core_serves_only_its_home_slice(exprs, monkeypatch):
    """Wipe core 2's home slice of X after the host writes it: exactly the output elements
    computed from that slice lose X (Y = X + b leaves b there)."""
    expr = exprs.bias_add(12, 10)
    hw = small_chip(8, 64 * 1024)
    rng = np.random.default_rng(4)
    x, b = rng.standard_normal((12, 10)).astype(np.float32), rng.standard_normal((1, 10)).astype(np.float32)
    write = vgm_exec.VgmRegion.write

    def wipe_core_2_of_x(self, name, array):
        nbytes = write(self, name, array)
        if name == "X":
            self.homes[name][2] = 0
        return nbytes

    monkeypatch.setattr(vgm_exec.VgmRegion, "write", wipe_core_2_of_x)
    out, _, _ = _run(expr, _small_tiles(expr), hw, [x, b])
    slice_elems = math.ceil(x.size / hw.num_cores)
    lost = np.zeros(x.size, bool)
    lost[2 * slice_elems: 3 * slice_elems] = True
    lost = lost.reshape(x.shape)
    np.testing.assert_array_equal(out[lost], np.broadcast_to(b, x.shape)[lost])
    np.testing.assert_allclose(out[~lost], (x + b)[~lost], rtol=1e-6)


# -- whole regions through the compiler ---------------------------------------------------
def _regions(case, hw):
    import tvm_icca

    part = tvm_icca.partition_for_icca(tvm_icca.load_onnx(case.model), hw=hw)
    return part, tvm_icca.icca_regions(part)


def _region_arguments(part, region, inputs):
    """The arrays ``main`` passes to ``region``: model inputs by name, weights as constants."""
    import tvm

    for block in part["main"].body.blocks:
        for binding in block.bindings:
            call = binding.value
            if getattr(getattr(call, "op", None), "name_hint", None) == region:
                return [arg.value.numpy() if isinstance(arg, tvm.ir.GenericConst) else inputs[str(arg.name)]
                        for arg in call.args]
    raise AssertionError(f"main never calls {region}")


def _both_ways(func, name, hw):
    from tvm_icca.model_pass.region_plans import compile_region

    t10 = compile_region(func, name, hw)
    region = vgm_exec.region_bytes_per_core(t10, hw.num_cores)
    vgm = compile_region(func, name, hw, execution="vgm", vgm_region_bytes=region)
    assert all(isinstance(op.plan, VgmPlan) for op in vgm.ops)
    return t10, vgm


def test_compiled_mlp_region_matches_t10_and_numpy():
    from tvm_icca.testing import onnx_models

    hw = small_chip(16, 64 * 1024)
    case = onnx_models.mlp()
    part, regions = _regions(case, hw)
    (name, func), = regions.items()  # the whole model is one region
    t10, vgm = _both_ways(func, name, hw)
    args = _region_arguments(part, name, case.inputs)
    dev = SimulatedDevice()
    (got,) = dev.run(vgm, args)
    stats = dev.last_run_stats()
    (want,) = SimulatedDevice().run(t10, args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, case.reference(case.inputs)[0], rtol=1e-3, atol=1e-4)
    # intermediates stay in their home slices: only the input and the weights come in
    assert stats["relayout_bytes"] == 0 and stats["fetch_bytes"] > 0
    constants = sum(decode_constant(n, e).nbytes for n, e in vgm.constants.items())
    assert stats["host_placed_bytes"] == sum(a.nbytes for a in args) + constants
    assert [op["execution"] for op in stats["regions"][0]["ops"]] == ["vgm"] * len(vgm.ops)
    assert stats["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core


def test_compiled_encoder_regions_match_t10():
    """Layer norm, attention (fused: a scalar scale input, softmax) and the FFN, region by region."""
    from tvm_icca.testing import onnx_models

    hw = small_chip(16, 64 * 1024)
    kinds = set()
    _, regions = _regions(onnx_models.transformer_encoder_layer(), hw)
    for name, func in regions.items():
        t10, vgm = _both_ways(func, name, hw)
        kinds.update(op.expr.kind for op in vgm.ops)
        rng = np.random.default_rng(5)
        inputs = [rng.standard_normal(d.shape).astype(d.dtype) for d in t10.inputs]
        got = SimulatedDevice().run(vgm, inputs)
        want = SimulatedDevice().run(t10, inputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    assert {"matmul", "attention", "layer_norm", "elementwise"} <= kinds


def test_timing_simulator_still_refuses_vgm(exprs):
    from runtime_sim.contract.errors import DeviceProgramError
    from runtime_sim.timing import simulate_timing

    expr = exprs.matmul(8, 8, 8)
    with pytest.raises(DeviceProgramError, match="simulate_vgm_timing"):
        simulate_timing([_program(expr, VgmPlan({"m": 4}), small_chip(4, 64 * 1024))])


def test_kept_boxes_are_not_fetched_again_and_the_result_is_exact(exprs):
    """Blocked tiles along n: each core fetches its row block of A once and reuses its own
    buffer for the next 3 tiles; the device moves exactly what the timing model charges."""
    expr = exprs.matmul(8, 8, 8)
    hw = small_chip(4, 64 * 1024)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    cyclic = VgmPlan({"m": 2, "n": 2, "k": 8})
    kept = VgmPlan({"m": 2, "n": 2, "k": 8}, reuse=True)
    moved = {}
    for plan in (cyclic, kept):
        out, _, op = _run(expr, plan, hw, [a, b])
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
        assert op["fetch_bytes"] + op["store_bytes"] == vgm_op_timing(expr, plan, hw).bytes_moved
        moved[plan.reuse] = op["fetch_bytes"]
    assert moved[False] - moved[True] == 4 * 3 * (2 * 8 * 4)
