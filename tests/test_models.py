"""Whole ONNX models compiled for target "icca" against independent numpy references."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import preset, small_chip
from tvm_icca.testing import mlp, residual_cnn, transformer_encoder_layer

MODELS = {
    "mlp": lambda: mlp(batch=8, sizes=(64, 128, 64, 10)),
    "residual_cnn": lambda: residual_cnn(batch=2, channels=8, size=12),
    "encoder_layer": lambda: transformer_encoder_layer(seq=16, d_model=32, heads=2, d_ff=64),
}
CHIPS = {"icca-16": small_chip(16, 32 * 1024), "icca-64": small_chip(64, 16 * 1024),
         "ipu-mk2": preset("ipu-mk2")}


@pytest.mark.parametrize("chip", list(CHIPS))
@pytest.mark.parametrize("model", list(MODELS))
def test_model_matches_numpy(model, chip):
    case = MODELS[model]()
    hw = CHIPS[chip]
    mod = tvm_icca.load_onnx(case.model)
    with tvm_icca.use_hardware(hw):
        ex = tvm.compile(mod, target="icca")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(v) for v in case.inputs.values()]).numpy()
    want = case.reference(case.inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    stats = tvm_icca.last_run_stats()
    assert stats["regions_executed"] >= 1
    assert 1 < stats["cores_used"] <= hw.num_cores
    assert stats["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core


def test_offloaded_ops_of_each_model():
    expected = {
        "mlp": {"relax.matmul", "relax.add", "relax.nn.relu", "relax.nn.softmax"},
        "residual_cnn": {"relax.nn.conv2d", "relax.add", "relax.nn.relu", "relax.mean", "relax.matmul"},
        "encoder_layer": {"relax.nn.layer_norm", "relax.matmul", "relax.nn.softmax", "relax.nn.gelu",
                          "relax.multiply", "relax.add"},
    }
    for name, build in MODELS.items():
        report = tvm_icca.partition_report(tvm_icca.partition_for_icca(tvm_icca.load_onnx(build().model)))
        assert expected[name] <= set(report["offloaded_ops"]), name
        # Only layout shuffles (reshape/transpose of attention heads) stay on the host.
        assert set(report["host_ops"]) <= {"relax.reshape", "relax.permute_dims"}, name


def test_unsupported_op_runs_on_host_and_is_reported():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])
    axis = helper.make_tensor("axis", TensorProto.INT64, [], [3])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("CumSum", ["r", "axis"], ["p"]),
             helper.make_node("Sigmoid", ["p"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=[axis]),
                              opset_imports=[helper.make_opsetid("", 17)])
    mod = tvm_icca.load_onnx(model)
    part = tvm_icca.partition_for_icca(mod, hw=small_chip(16))
    report = tvm_icca.partition_report(part)
    assert "relax.cumsum" in report["host_ops"]
    assert {"relax.nn.relu", "relax.sigmoid"} <= set(report["offloaded_ops"])
    ex = tvm.compile(part, target="icca")
    data = np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
    pooled = np.cumsum(np.maximum(data, 0), axis=3)
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-pooled)), rtol=1e-5, atol=1e-6)
    assert tvm_icca.last_run_stats()["regions_executed"] == 2
