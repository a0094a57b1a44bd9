"""runtime_sim.contract.core_layout: the per-core layout of one plan or many, on arrays.

The ring rule read from it is checked in tests/test_layout_checks.py; here, the layout itself:
one plan against the batch it belongs to, and the edge of a scalar operator (no axes, one
core), which ONNX node test cases such as ``Clip`` with scalar bounds reach.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.contract.core_layout import CoreLayout, ring_counts, temporal_steps
from runtime_sim.contract.expr import Axis, TensorAccess, TensorExpr
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from tvm_icca.testing.exprs import load, matmul, op


def test_a_scalar_operator_has_one_core_and_no_grid() -> None:
    x = TensorAccess("X", (), "float32", ())
    y = TensorAccess("Y", (), "float32", ())
    expr = TensorExpr("elementwise", (), (x,), y, op("exp", load(0, ())))
    layout = OpLayout(expr, ExecutionPlan({}, ({}, {})))
    layout.validate()
    assert layout.num_cores == 1 and layout.grid == {}
    cores = CoreLayout(np.zeros((2, 0), bool), np.ones((1, 0), np.int64), np.ones((1, 2, 0), np.int64))
    assert cores.grid.shape == (0, 1) and cores.offset.shape == (0, 1)
    assert cores.partition_key(0).tolist() == [0]


def test_a_batch_lays_out_each_plan_as_it_alone() -> None:
    """Every per-core array of a batch of plans is the concatenation of the plans' own."""
    expr = matmul(8, 6, 4)
    own = np.array([[a in {i.terms[0][0] for i in t.indices if i.terms} for a in expr.axis_names]
                    for t in expr.tensors])
    F = np.array([[2, 3, 1], [4, 1, 2], [1, 2, 2]])
    ft = np.ones((3, len(expr.tensors), 3), np.int64)
    ft[0, 0, 1] = 3          # A rotates along its reduction axis (a ring of the 3 cores sharing it)
    ft[2, 1, 1] = 2          # B rotates along it in the third plan
    batch = CoreLayout(own, F, ft)
    assert batch.S.tolist() == temporal_steps(ft).tolist()
    assert batch.sharing.tolist() == ring_counts(own, F, ft)[0].tolist()
    start = 0
    for i in range(3):
        alone = CoreLayout(own, F[i:i + 1], ft[i:i + 1])
        n = int(np.prod(F[i]))
        assert np.array_equal(batch.grid[:, start:start + n], alone.grid)
        assert np.array_equal(batch.offset[:, start:start + n], alone.offset)
        for t in range(len(expr.tensors)):
            assert np.array_equal(batch.partition_key(t)[start:start + n], alone.partition_key(t))
            assert np.array_equal(batch.group_key(t)[start:start + n], alone.group_key(t))
        start += n
    assert start == len(batch.plan)
