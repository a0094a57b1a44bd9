"""The ONNX project's own node test cases, compiled for target "icca" and run on the
simulated device, with the operator really offloaded.

``onnx.backend.test.case.node.collect_testcases()`` builds the cases in memory (the onnx
wheel does not ship their files). Inputs that TVM's importer needs as constants (reduction
axes, Pad's widths and its scalar value) are turned into initializers holding the same values,
which keeps each case's meaning.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.testing.onnx_node_cases import inputs_as_initializers

# onnx's collect_testcases() builds every node case once per process (~11 s of CPU): the
# tests that read it (this module's, test_onnx_fallback's and test_padding's center-crop
# cases) are one xdist group, so that one worker builds it
pytestmark = pytest.mark.xdist_group("onnx_node_cases")

# Op kind (issue list) -> ONNX node cases of that kind (float32 cases TVM's importer accepts).
CASES = {
    "matmul": ["test_matmul_2d", "test_matmul_3d", "test_matmul_4d", "test_matmul_bcast"],
    "gemm": ["test_gemm_default_no_bias", "test_gemm_default_vector_bias", "test_gemm_default_matrix_bias",
             "test_gemm_transposeA", "test_gemm_transposeB", "test_gemm_alpha", "test_gemm_all_attributes"],
    "conv2d": ["test_basic_conv_with_padding", "test_basic_conv_without_padding",
               "test_conv_with_strides_padding", "test_conv_with_strides_no_padding",
               "test_conv_with_strides_and_asymmetric_padding", "test_conv_with_autopad_same"],
    "add": ["test_add", "test_add_bcast"],
    "sub": ["test_sub", "test_sub_bcast", "test_sub_example"],
    "mul": ["test_mul", "test_mul_bcast", "test_mul_example"],
    "div": ["test_div", "test_div_bcast", "test_div_example"],
    "relu": ["test_relu"],
    "gelu": ["test_gelu_default_1", "test_gelu_default_2", "test_gelu_tanh_1", "test_gelu_tanh_2"],
    "tanh": ["test_tanh", "test_tanh_example"],
    "sigmoid": ["test_sigmoid", "test_sigmoid_example"],
    "exp": ["test_exp", "test_exp_example"],
    "softmax": ["test_softmax_axis_0", "test_softmax_axis_1", "test_softmax_axis_2",
                "test_softmax_default_axis", "test_softmax_example", "test_softmax_large_number",
                "test_softmax_negative_axis"],
    "layer_norm": ["test_layer_normalization_2d_axis1", "test_layer_normalization_2d_axis_negative_1",
                   "test_layer_normalization_3d_axis2_epsilon", "test_layer_normalization_4d_axis3",
                   "test_layer_normalization_default_axis"],
    "sum": ["test_reduce_sum_keepdims_random", "test_reduce_sum_do_not_keepdims_random",
            "test_reduce_sum_negative_axes_keepdims_random"],
    "concat": ["test_concat_2d_axis_negative_1", "test_concat_3d_axis_1"],
    "slice": ["test_slice_end_out_of_bounds", "test_slice_neg_steps"],
    "split": ["test_split_variable_parts_2d_opset13"],
    "mean": ["test_reduce_mean_keepdims_random", "test_reduce_mean_do_not_keepdims_random",
             "test_reduce_mean_negative_axes_keepdims_random", "test_reduce_mean_default_axes_keepdims_random"],
    "max_pool": ["test_maxpool_2d_default", "test_maxpool_2d_pads", "test_maxpool_2d_strides",
                 "test_maxpool_2d_ceil", "test_maxpool_2d_precomputed_same_upper"],
    "avg_pool": ["test_averagepool_2d_pads", "test_averagepool_2d_pads_count_include_pad",
                 "test_averagepool_2d_dilations"],
    "global_avg_pool": ["test_globalaveragepool"],
    "batch_norm": ["test_batchnorm_example", "test_batchnorm_epsilon"],
    "gather": ["test_gather_0", "test_gather_1", "test_gather_2d_indices", "test_gather_negative_indices"],
    # (test_edge_pad and test_reflect_pad pad int32 data; float edge and reflect pads are
    # in tests/test_padding.py)
    "pad": ["test_constant_pad", "test_constant_pad_axes", "test_constant_pad_negative_axes"],
    "group_norm": ["test_group_normalization_epsilon", "test_group_normalization_example"],
    "instance_norm": ["test_instancenorm_epsilon", "test_instancenorm_example"],
    # every ConvTranspose case, 3-D and group included, is in tests/test_conv_transpose.py
    "conv_transpose": ["test_convtranspose", "test_convtranspose_1d"],
}

# Relax ops whose presence inside an ICCA region proves the case's op was offloaded.
OFFLOADED_OP = {
    "matmul": "relax.matmul", "gemm": "relax.matmul", "conv2d": "relax.nn.conv2d",
    "add": "relax.add", "sub": "relax.subtract", "mul": "relax.multiply", "div": "relax.divide",
    "relu": "relax.nn.relu", "gelu": ("relax.nn.gelu", "relax.nn.gelu_tanh"), "tanh": "relax.tanh",
    "sigmoid": "relax.sigmoid", "exp": "relax.exp", "softmax": "relax.nn.softmax",
    "layer_norm": "relax.nn.layer_norm", "sum": "relax.sum", "mean": "relax.mean",
    # a split runs as one slice per output (tvm_icca.ops.data_movement.split_to_slices)
    "concat": "relax.concat", "slice": "relax.strided_slice", "split": "relax.strided_slice",
    "max_pool": "relax.nn.max_pool2d", "avg_pool": "relax.nn.avg_pool2d", "global_avg_pool": "relax.mean",
    # inference batch norm with constant statistics becomes a per-channel x * s + t
    "batch_norm": "relax.multiply",
    # an embedding lookup: the float table gathered by integer ids (tvm_icca.ops.gather)
    "gather": "relax.take",
    # ONNX Pad is TVM's call_tir until tvm_icca.frontend.pad_rewrites gives it its Relax op
    "pad": "relax.nn.pad",
    # the statistics of the normalized view (tvm_icca.ops.normalization)
    "group_norm": "relax.variance", "instance_norm": "relax.variance",
    # the convolutions of its output phases (tvm_icca.ops.conv_transpose)
    "conv_transpose": ("relax.nn.conv2d", "relax.nn.conv1d"),
}

# A small chip keeps plans multi-core on these tiny tensors: 16 cores of 16 KiB.
HW = small_chip(16, 16 * 1024)


@functools.lru_cache(maxsize=1)
def _all_cases() -> dict:
    from onnx.backend.test.case.node import collect_testcases

    return {c.name: c for c in collect_testcases()}


def _constant_int_inputs(model: onnx.ModelProto, inputs: list[np.ndarray]):
    """Turn integer and scalar graph inputs (axes, shapes, a pad value) into initializers
    with the case's values."""
    return inputs_as_initializers(model, inputs, lambda v: v.dtype.kind in "iu" or v.ndim == 0)


def _offloaded_ops(mod: tvm.IRModule) -> set[str]:
    found: set[str] = set()

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            found.add(expr.op.name)

    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function) and func.attrs and func.attrs.get("Codegen") == "icca":
            relax.analysis.post_order_visit(func, visit)
    return found


PARAMS = [(kind, name) for kind, names in CASES.items() for name in names]


@pytest.mark.parametrize("kind,name", PARAMS, ids=[n for _, n in PARAMS])
def test_onnx_node_case_on_icca(kind, name):
    case = _all_cases()[name]
    inputs, expected = case.data_sets[0]
    model, inputs = _constant_int_inputs(case.model, list(inputs))
    mod = tvm_icca.load_onnx(model)
    partitioned = tvm_icca.partition_for_icca(mod, hw=HW)
    wanted = OFFLOADED_OP[kind]
    wanted = (wanted,) if isinstance(wanted, str) else wanted
    assert _offloaded_ops(partitioned) & set(wanted), f"{kind} was not offloaded"

    ex = tvm.compile(partitioned, target="icca")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs])
    results = [result] if hasattr(result, "numpy") else list(result)
    # LayerNormalization cases also list the Mean and InvStdDev outputs; TVM's importer
    # computes only Y (it returns zero placeholders for the other two), so Y is compared.
    if kind == "layer_norm":
        results, expected = results[:1], expected[:1]
    for got, want in zip(results, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)
    stats = tvm_icca.last_run_stats()
    assert stats["regions_executed"] >= 1
    assert stats["peak_sram_bytes_per_core"] <= HW.sram_bytes_per_core
