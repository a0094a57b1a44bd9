"""ONNX Pad on the chip in the modes TVM lowers to ``call_tir`` (constant, reflect, edge).

Checks: ONNX models built with ``onnx.helper`` compiled for target "icca", nothing left on
the host, bit-equal to ``onnx.reference.ReferenceEvaluator`` (padding copies, it computes
nothing); ``relax.nn.pad`` alone under random valid plans on the functional device against
``numpy.pad``; the recognition of the importer's PrimFuncs and the piecewise reads.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tvm import relax, te, tirx, topi
from tvm.sym import Analyzer

import tvm_icca
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.functional.device import SimulatedDevice
from tvm_icca.frontend.pad_rewrites import RecognizePad, recognize_pad
from tvm_icca.lower.te_axes import AxisSpace
from tvm_icca.lower.te_pieces import affine_pieces
from tvm_icca.lower.te_to_expr import extract_op
from tvm_icca.ops.padding import pad_reason
from tvm_icca.testing.exprs import random_plan
from tvm_icca.testing.onnx_node_cases import inputs_as_initializers
from tvm_icca.testing.relax_functions import relax_function

HW = small_chip(16, 16 * 1024)


def _pad_model(shape: tuple[int, ...], pads: list[int], mode: str, value: float | None = None,
               axes: list[int] | None = None) -> onnx.ModelProto:
    ndim = len(shape)
    full = [0] * (2 * ndim)
    for i, axis in enumerate(axes if axes is not None else range(ndim)):
        full[axis], full[axis + ndim] = pads[i], pads[i + len(pads) // 2]
    out = [n + full[d] + full[d + ndim] for d, n in enumerate(shape)]
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    inputs = ["x", "pads"]
    if value is not None or axes is not None:
        inits.append(numpy_helper.from_array(np.array(value or 0.0, np.float32), "value"))
        inputs.append("value")
    if axes is not None:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        inputs.append("axes")
    graph = helper.make_graph(
        [helper.make_node("Pad", inputs, ["y"], mode=mode)], "pad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


PAD_CASES = {  # name: (shape, pads (ONNX order: begins then ends), mode, value, axes)
    "zero_1d_asymmetric": ((2, 4, 10), [0, 0, 1, 0, 0, 3], "constant", None, None),
    "nonzero_value": ((2, 4, 10), [0, 0, 2, 0, 0, 1], "constant", 0.1, None),
    "constant_2d_axes": ((1, 3, 5, 6), [1, 2, 2, 0], "constant", -1.5, [2, 3]),
    "reflect_1d": ((2, 4, 10), [0, 0, 3, 0, 0, 2], "reflect", None, None),
    "reflect_2d": ((1, 3, 5, 6), [0, 0, 1, 2, 0, 0, 2, 1], "reflect", None, None),
    "edge_1d": ((2, 4, 10), [0, 0, 2, 0, 0, 4], "edge", None, None),
    "edge_2d_channels": ((1, 3, 5, 6), [0, 1, 0, 2, 0, 2, 0, 1], "edge", None, None),
}


@pytest.mark.parametrize("name", list(PAD_CASES))
def test_onnx_pad_runs_on_the_chip_exactly(name: str) -> None:
    shape, pads, mode, value, axes = PAD_CASES[name]
    model = _pad_model(shape, pads, mode, value, axes)
    onnx.checker.check_model(model)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]

    mod = tvm_icca.load_onnx(model)
    part = tvm_icca.partition_for_icca(mod, HW)
    report = tvm_icca.partition_report(part)
    assert report["host_ops"] == {}, report["host_reasons"]
    assert "relax.nn.pad" in report["offloaded_ops"] and len(report["regions"]) == 1
    with tvm_icca.use_hardware(HW):
        ex = tvm.compile(mod, target="icca")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(got, want)  # a copy: bit-equal, the pad value too
    assert tvm_icca.last_run_stats()["regions_executed"] == 1


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_pad_under_random_plans_matches_numpy(mode: str) -> None:
    """The piecewise reads of each mode under plans that split the padded axis."""
    x = np.random.default_rng(1).standard_normal((2, 3, 11)).astype("float32")
    widths = [0, 0, 0, 0, 3, 2]
    func = relax_function([x.shape], lambda v: relax.op.nn.pad(v, widths, mode, 0.75))
    ext = extract_op(func)
    expr = ext.expr
    numpy_mode = {"replicate": "edge"}.get(mode, mode)
    kwargs = {"constant_values": 0.75} if mode == "constant" else {}
    want = np.pad(x, ((0, 0), (0, 0), (3, 2)), mode=numpy_mode, **kwargs)
    hw = small_chip(16)
    names = sorted({t.name for t in expr.inputs})
    decls = tuple(TensorDecl(n, x.shape, "float32") for n in names)
    splits = set()
    for seed in range(8):
        rng = np.random.default_rng(seed)
        plan = random_plan(lambda options: list(options)[rng.integers(len(list(options)))], expr, 16)
        splits.add(plan.op_partition.get("i2", 1))
        op = OpProgram("op0", expr, plan, tuple(t.name for t in expr.inputs), expr.output.name)
        program = DeviceProgram("r0", hw.to_dict(), decls, (expr.output.name,), (op,))
        (got,) = SimulatedDevice().run(program, [x] * len(names))
        np.testing.assert_array_equal(got, want)
    # reflect and edge read three pieces of the input: the borders and the interior
    assert len(expr.inputs) == (1 if mode == "constant" else 3)


def test_recognize_pad_reads_the_importer_primfunc() -> None:
    """Widths, mode and the value bit for bit; a PrimFunc that is no pad is left alone."""
    data_ty = relax.TensorType((1, 4, 10), "float32")

    def primfunc(te_func, *args):
        v = relax.Var("x", data_ty)
        bb = relax.BlockBuilder()
        with bb.function("f", [v]):
            bb.emit_func_output(bb.emit_te(te_func, v, *args))
        return next(f for _, f in bb.get().functions_items() if isinstance(f, tirx.PrimFunc))

    value = float(np.float32(0.1))
    assert recognize_pad(primfunc(topi.nn.pad, [0, 0, 2], [0, 0, 1], value), data_ty) == \
        ([0, 0, 0, 0, 2, 1], "constant", value)
    assert recognize_pad(primfunc(topi.nn.mirror_pad, [0, 1, 3], [0, 2, 0], "REFLECT"), data_ty) == \
        ([0, 0, 1, 2, 3, 0], "reflect", 0.0)
    assert recognize_pad(primfunc(topi.nn.replicate_pad, [0, 0, 4], [0, 0, 4]), data_ty) == \
        ([0, 0, 0, 0, 4, 4], "replicate", 0.0)
    # symmetric mirroring (not ONNX's reflect) and a flip read x at other places
    assert recognize_pad(primfunc(topi.nn.mirror_pad, [0, 0, 2], [0, 0, 2], "SYMMETRIC"), data_ty) is None
    assert recognize_pad(primfunc(lambda t: topi.flip(t, 2)), data_ty) is None


def test_wide_reflect_pad_stays_on_the_host_with_its_reason() -> None:
    """Reflecting further than the dimension is no single fold (numpy reflects again): the
    importer's call_tir is kept and stays on the host."""
    model = _pad_model((1, 2, 3), [0, 0, 3, 0, 0, 0], "reflect")
    mod = RecognizePad()(tvm_icca.load_onnx(model))
    ops = set()
    relax.analysis.post_order_visit(mod["main"], lambda e: ops.add(e.op.name) if isinstance(e, relax.Call)
                                    and isinstance(e.op, tvm.ir.Op) else None)
    assert "relax.call_tir" in ops and "relax.nn.pad" not in ops
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(tvm_icca.load_onnx(model), HW))
    assert report["regions"] == []


def test_pad_reason_refuses_what_has_no_affine_pieces() -> None:
    x = relax.Var("x", relax.TensorType((2, 3, 4), "float32"))
    bb = relax.BlockBuilder()

    def reason(*args):
        return pad_reason(bb.normalize(relax.op.nn.pad(x, *args)))

    assert reason([0, 0, 0, 0, 1, 1], "circular") is not None
    assert "negative" in reason([0, 0, 0, 0, -1, 1], "constant")
    assert "smaller than its dimension" in reason([0, 0, 0, 0, 4, 0], "reflect")
    assert "2 axes" in reason([0, 0, 1, 1, 1, 1], "replicate")
    assert reason([0, 0, 1, 1, 1, 1], "constant") is None
    assert reason([0, 0, 0, 0, 3, 3], "reflect") is None


def test_clamped_index_splits_into_three_affine_pieces() -> None:
    """``max(0, min(W-1, i - b))``: left border, interior, right border; an axis the
    analyzer proves in range stays one piece."""
    space = AxisSpace()
    i = space.new_axis("i", 9, False, False)
    j = space.new_axis("j", 4, False, False)
    zero, last = tirx.const(0, "int64"), tirx.const(5, "int64")
    clamp = tirx.max(zero, tirx.min(last, i - tirx.const(1, "int64")))
    pieces = affine_pieces(space, [tirx.max(zero, tirx.min(tirx.const(3, "int64"), j)), clamp])
    assert pieces is not None and len(pieces) == 3
    reads = sorted(str(space.affine(p.index[1])) for p in pieces)
    assert reads == sorted(["5", "0", "i - 1"])
    assert all(str(space.affine(p.index[0])) == "j" for p in pieces)
    # exactly one piece holds at every point, and reads what the clamp reads there
    for v in range(9):
        at = Analyzer()
        at.bind(i, tirx.const(v, "int64"))  # evaluates the guards and indices at i = v
        holding = [p for p in pieces if all(int(at.simplify(g)) >= 0 for g in p.guards)]
        assert len(holding) == 1
        assert int(at.simplify(holding[0].index[1])) == max(0, min(5, v - 1))


def test_te_of_reflect_pad_is_numpy_reflect() -> None:
    """The TE the chip runs for reflect (``topi.nn.reflect_pad``) and the importer's
    (``mirror_pad`` REFLECT) agree on every valid width: built with TVM's llvm."""
    x = te.placeholder((7,), "float32", name="x")
    data = np.arange(7, dtype="float32")
    for before in range(7):
        after = 6 - before
        outs = []
        for fn in (lambda t: topi.nn.reflect_pad(t, [before], [after]),
                   lambda t: topi.nn.mirror_pad(t, [before], [after], "REFLECT")):
            y = fn(x)
            lib = tvm.compile(te.create_prim_func([x, y]), target="llvm")
            out = tvm.runtime.tensor(np.zeros(13, "float32"))
            lib(tvm.runtime.tensor(data), out)
            outs.append(out.numpy())
        np.testing.assert_array_equal(outs[0], np.pad(data, (before, after), mode="reflect"))
        np.testing.assert_array_equal(outs[1], outs[0])


@pytest.mark.parametrize("pad_width", [[0, 0, 0, 0, 0, 1], [0, 0, 0, 2, 0, 0], [0, 0, 1, 1, 0, 3]])
def test_a_constant_pad_after_the_end_only_keeps_its_guard(pad_width) -> None:
    """``i < n ? x[i] : 0`` read by a plain axis: exact, not an invalid program (the
    expanded ONNX CenterCropPad cases pad one side only)."""
    import tvm
    from tvm import relax

    import tvm_icca
    from tvm_icca.testing.relax_functions import relax_function

    func = relax_function([(3, 4, 8)], lambda x: relax.op.nn.pad(x, pad_width, pad_value=0.0))
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    x = np.random.default_rng(3).standard_normal((3, 4, 8)).astype("float32")
    ex = tvm_icca.compile(mod, tvm_icca.small_chip(16))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = np.pad(x, [(pad_width[2 * i], pad_width[2 * i + 1]) for i in range(3)])
    np.testing.assert_array_equal(got, want)


CENTER_CROP_PAD_CASES = ["test_center_crop_pad_crop_axes_chw_expanded",
                         "test_center_crop_pad_crop_axes_hwc_expanded",
                         "test_center_crop_pad_crop_negative_axes_hwc_expanded"]


# with test_onnx_fallback and test_onnx_node_cases on one worker: onnx's collect_testcases()
# builds every node case once per process (~11 s of CPU)
@pytest.mark.xdist_group("onnx_node_cases")
@pytest.mark.parametrize("name", CENTER_CROP_PAD_CASES)
def test_expanded_center_crop_pad_runs_on_the_chip_exactly(name: str) -> None:
    """The ONNX node cases whose pad (after the end of an axis only) and crop share one
    region: exact on the chip, not a program the validation refuses."""
    from onnx.backend.test.case.node import collect_testcases

    # every case, built in memory; unfiltered: the collection is process-wide, and a filter
    # would hide cases from the other tests of the session
    case = next(c for c in collect_testcases() if c.name == name)
    inputs, expected = case.data_sets[0]
    model, values = inputs_as_initializers(case.model, list(inputs), lambda v: v.dtype.kind in "iu")
    mod = tvm_icca.load_onnx(model)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, HW))
    assert report["host_ops"] == {}, report["host_reasons"]
    assert set(report["offloaded_ops"]) == {"relax.nn.pad", "relax.strided_slice"}
    assert len(report["regions"]) == 1
    ex = tvm_icca.compile(mod, HW)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(v) for v in values])
    np.testing.assert_array_equal(got.numpy(), expected[0])


def _random_pad_then_slice(rng: np.random.Generator):
    """A pad of a random mode and widths, then a strided slice of the padded tensor."""
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(rng.integers(2, 7)) for _ in range(ndim))
    mode = str(rng.choice(["constant", "reflect", "replicate"]))
    widths = [0] * (2 * ndim)
    # reflect and replicate pad one axis (pad_reason), reflect by less than the dimension
    for d in range(ndim) if mode == "constant" else [int(rng.integers(ndim))]:
        top = shape[d] - 1 if mode == "reflect" else 3
        widths[2 * d: 2 * d + 2] = [int(w) for w in rng.integers(0, top + 1, size=2)]
    padded = [n + widths[2 * d] + widths[2 * d + 1] for d, n in enumerate(shape)]
    begin = [int(rng.integers(0, n)) for n in padded]
    end = [int(rng.integers(b + 1, n + 1)) for b, n in zip(begin, padded)]
    strides = [int(rng.choice([1, 2, 3])) for _ in padded]
    return shape, mode, widths, float(rng.choice([0.0, 0.5])), begin, end, strides


@pytest.mark.parametrize("seed", range(8))
def test_pad_then_slice_runs_on_the_chip_exactly(seed: int) -> None:
    """``strided_slice(pad(x))`` in one region against numpy, for random shapes, modes,
    widths and slices (a crop inside the input, across a border, or of the pad only)."""
    rng = np.random.default_rng(seed)
    shape, mode, widths, value, begin, end, strides = _random_pad_then_slice(rng)
    ndim = len(shape)
    func = relax_function([shape], lambda v: relax.op.strided_slice(
        relax.op.nn.pad(v, widths, mode, value), list(range(ndim)), begin, end, strides))
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, HW))
    assert report["host_ops"] == {} and len(report["regions"]) == 1, report
    x = rng.standard_normal(shape).astype("float32")
    got = relax.VirtualMachine(tvm_icca.compile(mod, HW), tvm.cpu())["main"](tvm.runtime.tensor(x))
    kwargs = {"constant_values": value} if mode == "constant" else {}
    want = np.pad(x, [(widths[2 * d], widths[2 * d + 1]) for d in range(ndim)],
                  mode={"replicate": "edge"}.get(mode, mode), **kwargs)
    want = want[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))]
    np.testing.assert_array_equal(got.numpy(), want)
