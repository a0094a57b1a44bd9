"""Every ONNX op that TVM imports runs on the chip, or stays on the host with a reason.

One representative of each op type among the ONNX project's node test cases
(``onnx.backend.test.case.node.collect_testcases()``, built in memory), chosen by
:func:`representatives`: among the single-node cases whose inputs and outputs are non-empty
tensors, the first by name whose outputs are all float32, else the first by name. Integer
inputs (axes, pads, shapes, indices) become initializers holding the case's values, as in
``tests/test_onnx_node_cases.py``, unless every input is an integer (then the op itself is
integer arithmetic and keeps its inputs).

For each representative, the model is imported with :func:`tvm_icca.load_onnx`; compiling it
for the chip (:func:`tvm_icca.partition_for_icca`, then :func:`tvm_icca.compile`) must raise
nothing and give the case's expected outputs within the tolerance, and the partition report
must name every op left on the host with a reason in words. Where the chip's answer differs,
TVM's CPU build (llvm) of the imported model says whose the difference is: if llvm is wrong
too, the op belongs in :data:`LLVM_WRONG`. What TVM itself rejects or miscomputes is listed
(:data:`IMPORT_REJECTED`, :data:`LLVM_WRONG`) and checked to fail still, so that the lists
cannot go stale in silence.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import warnings
from typing import Any, Iterable

import numpy as np
import onnx
import pytest
import tvm
from onnx import numpy_helper
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.partition.patterns import CODEGEN_NAME
from tvm_icca.testing.onnx_node_cases import inputs_as_initializers
from tvm_icca.testing.device_runs import reference_build

# onnx's collect_testcases() builds every node case once per process (~11 s of CPU): the
# tests that read it (this module's, test_onnx_node_cases' and test_padding's center-crop
# cases) are one xdist group, so that one worker builds it
pytestmark = pytest.mark.xdist_group("onnx_node_cases")

# A small chip keeps plans multi-core on the cases' tiny tensors: 16 cores of 16 KiB.
HW = small_chip(16, 16 * 1024)

#: The tolerance of both builds against the cases' expected outputs (integers and booleans
#: exactly); float32 arithmetic reordered across cores stays well inside it.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}

#: Op type -> its representative case, as :func:`representatives` chooses them
#: (``test_table_is_the_rule`` recomputes it).
REPRESENTATIVE = {
    "Abs": "test_abs", "Acos": "test_acos", "Acosh": "test_acosh", "Adagrad": "test_adagrad",
    "Adam": "test_adam", "Add": "test_add", "AffineGrid": "test_affine_grid_2d",
    "And": "test_and2d", "ArgMax": "test_argmax_default_axis_example",
    "ArgMin": "test_argmin_default_axis_example",
    "ArrayFeatureExtractor": "test_ai_onnx_ml_array_feature_extractor", "Asin": "test_asin",
    "Asinh": "test_asinh", "Atan": "test_atan", "Atanh": "test_atanh",
    "Attention": "test_attention_23_boolmask_fullymasked_row_nan_robustness",
    "AveragePool": "test_averagepool_1d_default", "BatchNormalization": "test_batchnorm_epsilon",
    "Bernoulli": "test_bernoulli_seed", "Binarizer": "test_ai_onnx_ml_binarizer",
    "BitCast": "test_bitcast_int32_to_float32", "BitShift": "test_bitshift_left_int16",
    "BitwiseAnd": "test_bitwise_and_i16_3d", "BitwiseNot": "test_bitwise_not_2d",
    "BitwiseOr": "test_bitwise_or_i16_4d", "BitwiseXor": "test_bitwise_xor_i16_3d",
    "BlackmanWindow": "test_blackmanwindow", "Cast": "test_cast_BFLOAT16_to_FLOAT",
    "CausalConvWithState": "test_causal_conv_with_state_b1_c1_degenerate", "Ceil": "test_ceil",
    "Celu": "test_celu", "CenterCropPad": "test_center_crop_pad_crop", "Clip": "test_clip",
    "Col2Im": "test_col2im", "Compress": "test_compress_0", "Concat": "test_concat_1d_axis_0",
    "Constant": "test_constant", "ConstantOfShape": "test_constantofshape_float_ones",
    "Conv": "test_basic_conv_with_padding", "ConvInteger": "test_convinteger_with_padding",
    "ConvTranspose": "test_convtranspose", "Cos": "test_cos", "Cosh": "test_cosh",
    "CumProd": "test_cumprod_1d", "CumSum": "test_cumsum_1d", "DFT": "test_dft",
    "DeformConv": "test_basic_deform_conv_with_padding",
    "DepthToSpace": "test_depthtospace_crd_mode_example",
    "DequantizeLinear": "test_dequantizelinear", "Det": "test_det_2d", "Div": "test_div",
    "Dropout": "test_dropout_default", "DynamicQuantizeLinear": "test_dynamicquantizelinear",
    "Einsum": "test_einsum_batch_diagonal", "Elu": "test_elu", "Equal": "test_equal",
    "Erf": "test_erf", "Exp": "test_exp", "Expand": "test_expand_dim_changed",
    "EyeLike": "test_eyelike_populate_off_main_diagonal", "Flatten": "test_flatten_axis0",
    "FlexAttention": "test_flexattention", "Floor": "test_floor", "GRU": "test_gru_batchwise",
    "Gather": "test_gather_0", "GatherElements": "test_gather_elements_0",
    "GatherND": "test_gathernd_example_float32", "Gelu": "test_gelu_default_1",
    "Gemm": "test_gemm_all_attributes", "GlobalAveragePool": "test_globalaveragepool",
    "GlobalMaxPool": "test_globalmaxpool", "Greater": "test_greater",
    "GreaterOrEqual": "test_greater_equal", "GridSample": "test_gridsample",
    "GroupNormalization": "test_group_normalization_epsilon", "HammingWindow": "test_hammingwindow",
    "HannWindow": "test_hannwindow", "HardSigmoid": "test_hardsigmoid",
    "HardSwish": "test_hardswish", "Hardmax": "test_hardmax_axis_0",
    "Identity": "test_clip_default_inbounds_expanded", "If": "test_if",
    "ImageDecoder": "test_image_decoder_decode_bmp_rgb",
    "InstanceNormalization": "test_instancenorm_epsilon", "IsInf": "test_isinf",
    "IsNaN": "test_isnan", "LRN": "test_lrn", "LSTM": "test_lstm_batchwise",
    "LabelEncoder": "test_ai_onnx_ml_label_encoder_string_int",
    "LayerNormalization": "test_layer_normalization_2d_axis0", "LeakyRelu": "test_leakyrelu",
    "Less": "test_less", "LessOrEqual": "test_less_equal",
    "LinearAttention": "test_linear_attention_decode_step", "Log": "test_log",
    "LogSoftmax": "test_logsoftmax_axis_0", "Loop": "test_loop11",
    "LpNormalization": "test_l1normalization_axis_0", "LpPool": "test_lppool_1d_default",
    "MatMul": "test_matmul_1d_1d", "MatMulInteger": "test_matmulinteger", "Max": "test_max_example",
    "MaxPool": "test_maxpool_1d_default", "MaxUnpool": "test_maxunpool_export_with_output_shape",
    "Mean": "test_mean_example", "MeanVarianceNormalization": "test_mvn",
    "MelWeightMatrix": "test_melweightmatrix", "Min": "test_min_example", "Mish": "test_mish",
    "Mod": "test_mod_float32_mixed_sign_fmod_0", "Momentum": "test_momentum", "Mul": "test_mul",
    "Neg": "test_neg", "NegativeLogLikelihoodLoss": "test_nllloss_NC",
    "NonMaxSuppression": "test_nonmaxsuppression_center_point_box_format",
    "NonZero": "test_nonzero_example", "Not": "test_not_2d",
    "OneHot": "test_onehot_negative_indices",
    "OptionalGetElement": "test_optional_get_element_optional_tensor",
    "OptionalHasElement": "test_optional_has_element_empty_no_input_name_optional_input",
    "Or": "test_or2d", "PRelu": "test_prelu_broadcast", "Pad": "test_constant_pad",
    "Pow": "test_pow", "QLinearConv": "test_qlinearconv",
    "QLinearMatMul": "test_qlinearmatmul_2D_int8_float16", "QuantizeLinear": "test_quantizelinear",
    "RMSNormalization": "test_rms_normalization_2d_axis0", "RNN": "test_rnn_seq_length",
    "Range": "test_range_float_type_positive_delta", "Reciprocal": "test_reciprocal",
    "ReduceL1": "test_reduce_l1_do_not_keepdims_example",
    "ReduceL2": "test_reduce_l2_do_not_keepdims_example",
    "ReduceLogSum": "test_reduce_log_sum_asc_axes",
    "ReduceLogSumExp": "test_reduce_log_sum_exp_do_not_keepdims_example",
    "ReduceMax": "test_reduce_max_default_axes_keepdim_example",
    "ReduceMean": "test_reduce_mean_do_not_keepdims_example",
    "ReduceMin": "test_reduce_min_default_axes_keepdims_example",
    "ReduceProd": "test_reduce_prod_default_axes_keepdims_example",
    "ReduceSum": "test_reduce_sum_do_not_keepdims_example",
    "ReduceSumSquare": "test_reduce_sum_square_do_not_keepdims_example",
    "RegexFullMatch": "test_regex_full_match_basic", "Relu": "test_relu",
    "Reshape": "test_reshape_extended_dims", "Resize": "test_resize_downsample_scales_cubic",
    "ReverseSequence": "test_reversesequence_batch", "RoiAlign": "test_roialign_aligned_false",
    "RotaryEmbedding": "test_rotary_embedding", "Round": "test_round", "STFT": "test_stft",
    "Scan": "test_scan9_multi_state", "Scatter": "test_scatter_with_axis",
    "ScatterElements": "test_scatter_elements_with_axis", "ScatterND": "test_scatternd",
    "Selu": "test_selu", "Shape": "test_shape", "Shrink": "test_shrink_hard",
    "Sigmoid": "test_sigmoid", "Sign": "test_sign", "Sin": "test_sin", "Sinh": "test_sinh",
    "Size": "test_size", "Slice": "test_slice", "Softmax": "test_softmax_axis_0",
    "SoftmaxCrossEntropyLoss": "test_sce_NCd1_mean_weight_negative_ii", "Softplus": "test_softplus",
    "Softsign": "test_softsign", "SpaceToDepth": "test_spacetodepth",
    "Split": "test_split_1d_uneven_split_opset18", "Sqrt": "test_sqrt", "Squeeze": "test_squeeze",
    "StringConcat": "test_string_concat",
    "StringNormalizer": "test_strnormalizer_export_monday_casesensintive_lower",
    "StringSplit": "test_string_split_basic", "Sub": "test_sub", "Sum": "test_sum_example",
    "SwiGLU": "test_swiglu", "Swish": "test_swish", "Tan": "test_tan", "Tanh": "test_tanh",
    "TensorScatter": "test_tensorscatter",
    "TfIdfVectorizer": "test_tfidfvectorizer_tf_batch_onlybigrams_skip0",
    "ThresholdedRelu": "test_thresholdedrelu", "Tile": "test_tile", "TopK": "test_top_k",
    "Transpose": "test_transpose_all_permutations_0",
    "TreeEnsemble": "test_ai_onnx_ml_tree_ensemble_set_membership", "Trilu": "test_tril",
    "Unique": "test_unique_bfloat16_sorted_without_axis", "Unsqueeze": "test_unsqueeze_axis_0",
    "Upsample": "test_upsample_nearest", "Where": "test_where_example", "Xor": "test_xor2d",
}

#: Op types TVM 0.27's ONNX importer has no converter for (LSTM, GRU and RNN have none either,
#: but tvm_icca unrolls them before the import: tvm_icca/frontend/recurrent.py).
NO_CONVERTER = (
    "Adagrad", "Adam", "Bernoulli", "Binarizer", "BitCast", "BlackmanWindow",
    "CausalConvWithState", "Celu", "CenterCropPad", "Col2Im", "ConvInteger", "CumProd", "DFT",
    "DeformConv", "Det", "FlexAttention", "HammingWindow", "HannWindow", "ImageDecoder",
    "LinearAttention", "Loop", "LpNormalization", "MelWeightMatrix", "Momentum",
    "NegativeLogLikelihoodLoss", "QLinearConv", "QLinearMatMul", "ReverseSequence",
    "RotaryEmbedding", "STFT", "Scan", "SoftmaxCrossEntropyLoss", "SwiGLU", "Swish",
    "TensorScatter", "TfIdfVectorizer", "TreeEnsemble")

#: Op types whose representative TVM's importer (or onnx's checker before it) rejects, and
#: what it says (a part of ``load_onnx``'s ``ModelImportError``). Most of these pass as a graph
#: input what the converter needs as a constant (a float pad value, Resize's scales).
IMPORT_REJECTED: dict[str, str] = {
    "ArrayFeatureExtractor": 'onnx.checker rejects it (y in initializer but not in graph input)',
    "Attention": "computing 'Y' with KeyError: 'num_heads'",
    "EyeLike": ("computing 'y' with ValueError: dtype mismatch between input (int32) and attribute "
                '(1)'),
    "LabelEncoder": 'with ValueError: unknown dtype `object`',
    "MaxUnpool": ("computing 'y' with AttributeError: 'GenericConst' object has no attribute "
                  "'tolist'"),
    "OneHot": "computing 'y' with AssertionError: Only constant depth currently supported.",
    "Pad": "computing 'y' with AttributeError: 'Var' object has no attribute 'value'",
    "RegexFullMatch": 'with ValueError: unknown dtype `object`',
    # tvm_icca.frontend.onnx_resize says so before TVM's importer fails on it
    "Resize": "computing 'Y' reads its scales from 'scales', which is not a constant",
    "StringConcat": 'with ValueError: unknown dtype `object`',
    "StringNormalizer": 'with ValueError: unknown dtype `object`',
    "StringSplit": 'with ValueError: unknown dtype `object`',
    "Upsample": "computing 'Y' with TypeError: object of type 'NoneType' has no len()",
}

#: Op types whose representative TVM's own llvm build fails to build or run, or computes
#: differently from the case; checked to fail still.
LLVM_WRONG: dict[str, str] = {
    "ConstantOfShape": "the shape is a graph input, and CodeGenVM cannot emit the resulting op",
    "LayerNormalization": "TVM's importer computes only Y; its Mean and InvStdDev are "
                          "placeholders of shape ()",
    "RMSNormalization": "its legalized TIR reads a 1-D scale with no index (InternalError)",
    "RoiAlign": "differs from the case by up to 8.4e-05, beyond the tolerance",
}


# -- the rule ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _all_cases() -> dict[str, Any]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # the cases' own numpy (inf, nan, casts) warns
        warnings.simplefilter("ignore")
        return {case.name: case for case in collect_testcases()}


def _array(value: Any) -> np.ndarray | None:
    """A case's input or output as an array (bfloat16 and float8 cases store TensorProtos);
    None for a sequence, map or optional."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    return None


def _data(case: Any) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """The case's first data set as arrays; None unless every value is a non-empty tensor."""
    inputs, outputs = case.data_sets[0]
    arrays = [_array(v) for v in [*inputs, *outputs]]
    if any(a is None or a.size == 0 for a in arrays):
        return None
    return arrays[:len(inputs)], arrays[len(inputs):]


def representatives(cases: Iterable[Any]) -> dict[str, str]:
    """Op type -> the name of its representative case (see the module docstring)."""
    by_op: dict[str, list[Any]] = {}
    for case in sorted(cases, key=lambda c: c.name):
        nodes = case.model.graph.node
        if len(nodes) == 1 and _data(case) is not None:
            by_op.setdefault(nodes[0].op_type, []).append(case)
    chosen = {}
    for op, cases_of_op in sorted(by_op.items()):
        float32 = [c for c in cases_of_op if all(a.dtype == np.float32 for a in _data(c)[1])]
        chosen[op] = (float32 or cases_of_op)[0].name
    return chosen


def _prepared(case: Any) -> tuple[onnx.ModelProto, list[np.ndarray], list[np.ndarray]]:
    """The case's model with integer inputs as initializers (see the module docstring), the
    inputs it still takes and the expected outputs."""
    inputs, expected = _data(case)
    if all(a.dtype.kind in "iub" for a in inputs):
        return case.model, inputs, expected
    model, values = inputs_as_initializers(case.model, inputs, lambda v: v.dtype.kind in "iu")
    return model, values, expected


# -- running ----------------------------------------------------------------------------------
def _import(model: onnx.ModelProto) -> tvm.IRModule:
    with contextlib.redirect_stderr(io.StringIO()):  # TVM's importer prints its warnings
        return tvm_icca.load_onnx(model)


def _run(executable: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    vm = relax.VirtualMachine(executable, tvm.cpu())
    # np.asarray keeps a 0-d input 0-d (np.ascontiguousarray would make it 1-d)
    result = vm["main"](*[tvm.runtime.tensor(np.asarray(a, order="C")) for a in inputs])

    def flat(value: Any) -> list[np.ndarray]:
        return [value.numpy()] if hasattr(value, "numpy") else [a for v in value for a in flat(v)]

    return flat(result)


def _mismatch(got: list[np.ndarray], expected: list[np.ndarray]) -> str | None:
    """Why ``got`` is not the expected outputs (None: it is)."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, the case has {len(expected)}"
    for i, (g, w) in enumerate(zip(got, expected)):
        if g.shape != w.shape:
            return f"output {i} has shape {g.shape}, the case {w.shape}"
        if w.dtype.kind in "fc":
            if not np.allclose(g.astype(np.float64), w.astype(np.float64), equal_nan=True,
                               **TOLERANCE):
                error = np.nanmax(np.abs(g.astype(np.float64) - w.astype(np.float64)))
                return f"output {i} differs (max abs error {error:.3g})"
        elif not np.array_equal(g, w):
            return f"output {i} differs"
    return None


def _llvm_problem(mod: tvm.IRModule, inputs: list[np.ndarray],
                  expected: list[np.ndarray]) -> str | None:
    """Why TVM's own CPU build does not give the case's outputs (None: it does)."""
    try:
        got = _run(reference_build(mod), inputs)
    except Exception as err:  # noqa: BLE001  (TVM failing is the finding here)
        return f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}"
    return _mismatch(got, expected)


def _host_op_names(mod: tvm.IRModule) -> set[str]:
    """The Relax ops of every function that is neither an ICCA region nor a composite."""
    names: set[str] = set()
    for _, func in mod.functions_items():
        attrs = func.attrs or {}
        if not isinstance(func, relax.Function) or "Composite" in attrs \
                or str(attrs.get("Codegen", "")) == CODEGEN_NAME:
            continue
        relax.analysis.post_order_visit(
            func, lambda n: names.add(n.op.name)
            if isinstance(n, relax.Call) and isinstance(n.op, tvm.ir.Op) else None)
    return names


#: A word of a reason (a reason in words has a few; the report's "cannot be analysed" is the
#: text of an exception raised while explaining the op, not a reason).
_WORD = re.compile(r"[A-Za-z]{2,}")


# -- the table --------------------------------------------------------------------------------
@pytest.mark.slow
def test_table_is_the_rule():
    """REPRESENTATIVE is what the rule picks from the installed onnx's cases, and every op
    type listed as failing in TVM is one of them, in one list."""
    assert REPRESENTATIVE == representatives(_all_cases().values())
    listed = [*NO_CONVERTER, *IMPORT_REJECTED, *LLVM_WRONG]
    assert len(listed) == len(set(listed)) and set(listed) <= set(REPRESENTATIVE)


@pytest.mark.parametrize("op", sorted(REPRESENTATIVE))
def test_op_runs_on_the_chip_or_on_the_host_with_a_reason(op):
    model, inputs, expected = _prepared(_all_cases()[REPRESENTATIVE[op]])
    if op in NO_CONVERTER or op in IMPORT_REJECTED:
        said = IMPORT_REJECTED.get(op, f"does not support: {op}")
        with pytest.raises(tvm_icca.ModelImportError, match=re.escape(said)):
            _import(model)
        pytest.xfail(f"TVM's importer rejects it: {said}")
    mod = _import(model)
    if op in LLVM_WRONG:
        assert _llvm_problem(mod, inputs, expected) is not None, \
            f"{op} is right on llvm now: take it off LLVM_WRONG"
        pytest.xfail(f"TVM's llvm build is wrong: {LLVM_WRONG[op]}")

    partitioned = tvm_icca.partition_for_icca(mod, hw=HW)
    report = tvm_icca.partition_report(partitioned)
    assert set(report["host_ops"]) == _host_op_names(partitioned)
    for name, reasons in report["host_reasons"].items():
        assert reasons, name
        for reason in reasons:
            assert len(_WORD.findall(reason)) >= 3 and "cannot be analysed" not in reason, \
                (name, reason)

    # TVM's own CPU build is made only when the chip's answer is wrong, to say whose the
    # difference is (building it for every case cost the suite ~12 s): a host op TVM
    # miscomputes belongs in LLVM_WRONG
    def not_llvm() -> None:
        llvm = _llvm_problem(mod, inputs, expected)
        assert llvm is None, f"TVM's llvm build: {llvm} (list {op} in LLVM_WRONG?)"

    try:
        got = _run(tvm_icca.compile(partitioned, HW), inputs)
    except Exception:
        not_llvm()
        raise
    problem = _mismatch(got, expected)
    if problem is not None:
        not_llvm()
    assert problem is None, f"on the chip: {problem}"
    if report["regions"]:
        assert tvm_icca.last_run_stats()["regions_executed"] >= 1
