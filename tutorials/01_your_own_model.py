"""
Bring your own model: from ONNX to an ICCA chip
===============================================

This tutorial teaches how to take a model of your own through tvm_icca: get an ONNX file
(from PyTorch, or written by hand), import it, bind a symbolic batch dimension, partition it
for a chip and read the partition report, compile it with ``tvm.compile(mod, target="icca")``,
run it on the simulated device, check its outputs against ONNX's own reference
implementation, and read the run statistics.
"""

# %%
# Sizes
# -----
# Every tutorial has two sizes. The full one (the default, and what the documentation shows)
# compiles for the IPU Mk2 preset, 1,472 cores with 624 KiB of SRAM each. The small one
# (``TVM_ICCA_TUTORIAL_SIZE=small``, used by the test suite) compiles the same models for a
# 16-core chip with 64 KiB per core and runs the hand-written classifier at batch 8 instead
# of 64; the steps are the same.
import os

SIZE = os.environ.get("TVM_ICCA_TUTORIAL_SIZE", "full")

# %%
# Step 1: an ONNX file
# --------------------
# tvm_icca reads ONNX, the format every major framework exports. With PyTorch installed, an
# export is one call; this one produces a transformer encoder layer much like the file
# used below (PyTorch is not needed by tvm_icca, nor installed for this tutorial, so the code
# is shown but not run)::
#
#     import torch
#
#     layer = torch.nn.TransformerEncoderLayer(
#         d_model=64, nhead=4, dim_feedforward=128, activation="gelu",
#         norm_first=True, batch_first=True).eval()
#     example = torch.randn(1, 32, 64)  # (batch, sequence, features)
#     torch.onnx.export(layer, (example,), "encoder_layer.onnx",
#                       input_names=["x"], output_names=["y"],
#                       dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
#
# ``dynamic_axes`` makes the batch dimension *symbolic* in the file: a name instead of a
# number. We come back to that below.
#
# The package ships such a model, ``tvm_icca/data/encoder_layer.onnx``: a pre-norm
# encoder layer (LayerNorm, 4-head self-attention, LayerNorm, GELU feed-forward) over a
# sequence of 32 tokens of width 64. The ``onnx`` package shows what is in it.
from collections import Counter
from importlib import resources

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tvm_icca


def describe_value(value: onnx.ValueInfoProto) -> str:
    """``name: dtype [dims]``, a dimension being its size or its symbol."""
    ttype = value.type.tensor_type
    dims = [d.dim_param or d.dim_value for d in ttype.shape.dim]
    return f"{value.name}: {TensorProto.DataType.Name(ttype.elem_type).lower()} {dims}"


encoder_path = str(resources.files("tvm_icca") / "data" / "encoder_layer.onnx")
encoder = onnx.load(encoder_path)
print("opset", encoder.opset_import[0].version)
print("inputs: ", [describe_value(v) for v in encoder.graph.input])
print("outputs:", [describe_value(v) for v in encoder.graph.output])
print("nodes:  ", dict(Counter(node.op_type for node in encoder.graph.node)))
weights = sum(int(np.prod(t.dims)) for t in encoder.graph.initializer)
print(f"weights: {len(encoder.graph.initializer)} initializers, {weights} values")
assert [describe_value(v) for v in encoder.graph.input] == ["x: float [32, 64]"]

# %%
# ``tvm_icca.load_onnx`` imports it with TVM's own ONNX frontend
# (``tvm.relax.frontend.onnx.from_onnx``) and returns a Relax ``IRModule`` whose entry
# function is ``main``. The weights become constants of the module.
import tvm
from tvm import relax

encoder_mod = tvm_icca.load_onnx(encoder_path)
print(encoder_mod["main"].params)

# %%
# A model with a symbolic batch dimension
# ---------------------------------------
# Exports usually leave the batch dimension symbolic. The chip runs static shapes only (each
# operator's plan divides known extents over known cores), so ``load_onnx`` refuses such a
# model and says which binding to pass. To see it, here is a small classifier written with
# ``onnx.helper``: two dense layers, a softmax for the class probabilities and an ``ArgMax``
# for the predicted label, with the input's first dimension named ``batch``.
rng = np.random.default_rng(0)
FEATURES, HIDDEN, CLASSES = 64, 128, 10
initializers = [
    numpy_helper.from_array((rng.standard_normal((FEATURES, HIDDEN)) / 8).astype("float32"), "w1"),
    numpy_helper.from_array(rng.standard_normal(HIDDEN).astype("float32"), "b1"),
    numpy_helper.from_array((rng.standard_normal((HIDDEN, CLASSES)) / 11).astype("float32"), "w2"),
    numpy_helper.from_array((rng.standard_normal(CLASSES) / 10).astype("float32"), "b2"),
]
nodes = [
    helper.make_node("MatMul", ["x", "w1"], ["h0"]),
    helper.make_node("Add", ["h0", "b1"], ["h1"]),
    helper.make_node("Relu", ["h1"], ["h"]),
    helper.make_node("MatMul", ["h", "w2"], ["l0"]),
    helper.make_node("Add", ["l0", "b2"], ["logits"]),
    helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    helper.make_node("ArgMax", ["logits"], ["label"], axis=-1, keepdims=0),
]
graph = helper.make_graph(
    nodes, "classifier",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", FEATURES])],
    [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", CLASSES]),
     helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"])],
    initializers)
classifier = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(classifier)
onnx.save(classifier, "classifier.onnx")  # a file, as an exporter would leave it
print("inputs:", [describe_value(v) for v in classifier.graph.input])

# %%
# Importing it as it is fails with a :class:`tvm_icca.ModelImportError` (every tvm_icca
# error is a subclass of :class:`tvm_icca.IccaError`) whose message names the symbolic input
# and the binding to pass:
try:
    tvm_icca.load_onnx("classifier.onnx")
    raise AssertionError("a symbolic batch dimension must be refused")
except tvm_icca.ModelImportError as err:
    print(err)
    assert "shape_dict" in str(err) and "'x'" in str(err)

# %%
# ``shape_dict`` binds each symbolic input to a concrete shape. The fixed dimensions must
# agree with the file (here 64 features), and every name must be a graph input; otherwise
# ``load_onnx`` raises ``ModelImportError`` too.
BATCH = 8 if SIZE == "small" else 64
classifier_mod = tvm_icca.load_onnx("classifier.onnx", shape_dict={"x": [BATCH, FEATURES]})
print(classifier_mod["main"].params[0].ty)

# %%
# Step 2: partition for a chip
# ----------------------------
# A chip is a :class:`tvm_icca.HardwareSpec`: a preset by name, or a variant from
# :func:`tvm_icca.small_chip`. Partitioning follows TVM's BYOC flow: the ``icca.*`` patterns
# match operators the chip implements (fusing epilogues such as a bias add and an
# activation into the matmul before them), and connected matches are merged into *regions*.
# A region is one Relax function marked ``Codegen="icca"``: the host calls it once, it
# becomes one device program, and the tensors passed between its operators never leave the
# chip. Everything else stays in ``main`` and runs on the host CPU.
hw = tvm_icca.small_chip(16, 64 * 1024) if SIZE == "small" else tvm_icca.preset("ipu-mk2")
print(f"{hw.name}: {hw.num_cores} cores, {hw.sram_bytes_per_core} bytes of SRAM per core")

encoder_parts = tvm_icca.partition_for_icca(encoder_mod, hw=hw)
report = tvm_icca.partition_report(encoder_parts)
print(tvm_icca.format_report(report))

# %%
# The headline counts regions, and Relax operators on each side of the boundary. Each region
# line is the region's label: its *fused* operators, the units the device runs and the
# planner plans (a matmul with its bias add and GELU is one of them), so there are fewer of
# them than Relax operators. The whole encoder layer is one region: every operator in it has
# an ICCA implementation, so nothing separates them. The report is a plain dict too;
# ``composites`` names the pattern that matched each fused operator:
region = report["regions"][0]
print(sum(report["offloaded_ops"].values()), "Relax operators offloaded as",
      len(region["composites"]), "fused operators")
print(sorted(set(region["composites"])))
assert len(report["regions"]) == 1 and tvm_icca.host_ops(encoder_parts) == {}
assert len(region["composites"]) < sum(report["offloaded_ops"].values())

# %%
# The classifier is different. Its ``ArgMax`` computes integer indices, and the chip
# computes in floating point only, so ``ArgMax`` stays on the host. The report says which
# operators stayed and why (``host_reasons``); :func:`tvm_icca.host_ops` gives just the
# counts.
classifier_parts = tvm_icca.partition_for_icca(classifier_mod, hw=hw)
classifier_report = tvm_icca.partition_report(classifier_parts)
print(tvm_icca.format_report(classifier_report))
print(tvm_icca.host_ops(classifier_parts))
assert tvm_icca.host_ops(classifier_parts) == {"relax.argmax": 1}

# %%
# ``allow_symbolic=True`` imports the model without a binding, for the host only: with the
# batch size unknown, no operator can be planned for the chip, and the report says why for
# each of them. This is the model the refusal above protects you from compiling by accident.
symbolic_mod = tvm_icca.load_onnx("classifier.onnx", allow_symbolic=True)
symbolic_report = tvm_icca.partition_report(tvm_icca.partition_for_icca(symbolic_mod, hw=hw))
print(tvm_icca.format_report(symbolic_report))
assert not symbolic_report["regions"]

# %%
# Step 3: compile, run and check
# ------------------------------
# ``tvm.compile(mod, target="icca")`` compiles for the chip chosen by
# :func:`tvm_icca.use_hardware` (the default is ``ipu-mk2``). It partitions the module if
# it is not partitioned yet, plans every region's operators (T10's compute-shift execution
# plans), and builds the host part with LLVM. The result runs in Relax's ordinary virtual
# machine; calls of regions go to the simulated device, which computes the results
# numerically and counts what the chip would do.
with tvm_icca.use_hardware(hw):
    encoder_exe = tvm.compile(encoder_parts, target="icca")
vm = relax.VirtualMachine(encoder_exe, tvm.cpu())

x = rng.standard_normal((32, 64)).astype("float32")
y = vm["main"](tvm.runtime.tensor(x)).numpy()

# %%
# ``onnx.reference.ReferenceEvaluator`` runs the same ONNX file with numpy, independently of
# TVM, so it is a fair check of the whole path: import, partition, plans and device. The
# tolerance allows for float32 sums taken in a different order.
(expected,) = ReferenceEvaluator(encoder).run(None, {"x": x})
np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
print("encoder layer: max abs difference from the ONNX reference",
      float(np.abs(y - expected).max()))

# %%
# Step 4: read the run statistics
# -------------------------------
# :func:`tvm_icca.last_run_stats` describes the last call of a compiled function: what the
# functional device counted, and ``simulated_s``, the time the timing simulator gives the
# same device programs. Every key is defined, with its unit, in the metric glossary
# (:doc:`../glossary`); :func:`runtime_sim.contract.metrics.metric` reads a definition.
from runtime_sim.contract.metrics import metric

stats = tvm_icca.last_run_stats()
for key in ("regions_executed", "cores_used", "steps", "peak_sram_bytes_per_core",
            "shift_bytes", "simulated_s"):
    value = f"{stats[key]:,}" if isinstance(stats[key], int) else f"{stats[key]:.3e}"
    print(f"{key:<25} {value:>10}  {metric(key).unit}: {metric(key).meaning}")
assert stats["regions_executed"] == 1
assert stats["steps"] >= len(region["composites"])
assert stats["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core
assert 0 < stats["cores_used"] <= hw.num_cores and stats["simulated_s"] > 0

# %%
# One region call ran. ``cores_used`` is the most cores one operator spread over;
# ``peak_sram_bytes_per_core`` stays within the chip's SRAM (the planner's constraint);
# ``steps`` counts compute-shift rounds, at least one per operator; ``shift_bytes`` is the
# data moved between cores by rotations and partial-sum reductions. ``stats["regions"]``
# breaks these down per region and per operator.
#
# A shorter path: compile_onnx
# ----------------------------
# :func:`tvm_icca.compile_onnx` is ``load_onnx`` followed by :func:`tvm_icca.compile` in
# one call, with the same ``shape_dict``. The classifier returns a tuple, the probabilities
# from the chip and the labels from the host's ``ArgMax``; both are compared with the
# reference.
classifier_exe = tvm_icca.compile_onnx("classifier.onnx", {"x": [BATCH, FEATURES]}, hw=hw)
vm = relax.VirtualMachine(classifier_exe, tvm.cpu())
inputs = rng.standard_normal((BATCH, FEATURES)).astype("float32")
probs, label = (t.numpy() for t in vm["main"](tvm.runtime.tensor(inputs)))
ref_probs, ref_label = ReferenceEvaluator(classifier).run(None, {"x": inputs})
np.testing.assert_allclose(probs, ref_probs, rtol=1e-4, atol=1e-6)
np.testing.assert_array_equal(label, ref_label)
print("labels:", label[:8], "...")

stats = tvm_icca.last_run_stats()
print(f"regions executed {stats['regions_executed']}, simulated {stats['simulated_s'] * 1e6:.2f} us")
assert stats["regions_executed"] == 1

# %%
# What next
# ---------
# The other tutorials look inside these steps: the execution plans the compiler chose for
# each operator, the chip's parameters, the timing simulator's breakdown, and tuning the
# plans by measurement.
