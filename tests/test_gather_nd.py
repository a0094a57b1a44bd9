"""GatherND by a constant outer-product table as takes (tvm_icca.frontend.gather_nd).

The dynamo exporter's ``F.interpolate(mode="nearest-exact")`` -- Transpose, GatherND by a
constant ``[H_out, W_out, 2]`` table, Transpose back -- built with ``onnx.helper``, compiled
for target "icca" with no float op on the host, against ``onnx.reference.ReferenceEvaluator``;
tables that are not outer products stay on the host with their reason.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.frontend.gather_nd import outer_product_tables
from tvm_icca.testing.export_corpus import float_host_ops

HW = small_chip(16, 16 * 1024)
RNG = np.random.default_rng(0)


def test_outer_product_tables_read_one_vector_per_axis() -> None:
    ih, iw = np.array([0, 0, 1, 2]), np.array([2, 1, 0])
    table = np.stack(np.meshgrid(ih, iw, indexing="ij"), axis=-1)  # [4, 3, 2]
    tables = outer_product_tables(table)
    assert [t.tolist() for t in tables] == [ih.tolist(), iw.tolist()]
    assert [t.tolist() for t in outer_product_tables(np.array([[3], [1]]))] == [[3, 1]]
    mixed = table.copy()
    mixed[1, 2] = [2, 2]  # one row breaks the product
    assert outer_product_tables(mixed) is None
    assert outer_product_tables(np.array([[0, 1], [1, 0]])) is None  # points, not a grid: [2] + K=2


def _nearest_exact(side: int, out: int, indices: np.ndarray | None = None) -> onnx.ModelProto:
    """``F.interpolate(conv(x), size=(out, out), mode="nearest-exact")`` as the dynamo exporter
    writes it (opset 20): the spatial axes transposed to the front, a GatherND by the
    constant table of ``floor((i + 0.5) * side / out)`` per axis, transposed back."""
    if indices is None:
        ids = np.minimum(np.floor((np.arange(out) + 0.5) * side / out), side - 1).astype(np.int64)
        indices = np.stack(np.meshgrid(ids, ids, indexing="ij"), axis=-1)
    inits = [numpy_helper.from_array((RNG.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(indices.astype(np.int64), "idx")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[2, 3, 0, 1]),
             helper.make_node("GatherND", ["t", "idx"], ["g"], batch_dims=0),
             helper.make_node("Transpose", ["g"], ["y"], perm=[2, 3, 0, 1])]
    rows, cols = indices.shape[:2]
    graph = helper.make_graph(
        nodes, "nearest_exact", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, rows, cols])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _import(model: onnx.ModelProto) -> tvm.IRModule:
    with contextlib.redirect_stderr(io.StringIO()):  # TVM's importer prints its warnings
        return tvm_icca.load_onnx(model)


@pytest.mark.parametrize("side, out, negative", [(5, 8, False), (6, 4, True)])
def test_dynamo_nearest_exact_runs_on_the_chip(side, out, negative) -> None:
    """Upsampling 5 -> 8 and downsampling 6 -> 4; with the table's indices written negative
    (``i - side``, which GatherND reads as ``i``)."""
    model = _nearest_exact(side, out)
    if negative:
        idx = numpy_helper.to_array(model.graph.initializer[1]) - side
        model.graph.initializer[1].CopyFrom(numpy_helper.from_array(idx, "idx"))
    part = tvm_icca.partition_for_icca(_import(model), hw=HW)
    report = tvm_icca.partition_report(part)
    assert float_host_ops(part) == [] and len(report["regions"]) == 1, report["host_reasons"]
    assert report["offloaded_ops"]["relax.take"] == 2
    x = RNG.standard_normal((1, 3, side, side)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    with tvm_icca.use_hardware(HW):
        executable = tvm.compile(_import(model), target="icca")
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert got.shape == want.shape == (1, 4, out, out)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # the conv's sums reorder


def test_a_table_that_is_no_outer_product_stays_on_the_host_with_its_reason() -> None:
    table = np.stack(np.meshgrid(np.arange(3), np.arange(3), indexing="ij"), axis=-1)
    table[0, 0] = [2, 1]
    model = _nearest_exact(3, 3, table)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(_import(model), hw=HW))
    assert report["host_ops"]["relax.gather_nd"] == 1
    (reason,) = report["host_reasons"]["relax.gather_nd"]
    assert "not an outer product" in reason
