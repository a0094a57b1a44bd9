"""The ONNX project's node test cases, prepared for a compiler that needs some inputs as
constants (reduction axes, shapes, pad values): those inputs become initializers holding the
case's own values, which keeps each case's meaning.

:func:`node_cases` builds the cases of a few op types only: ``collect_testcases()`` builds all
of them (about 11 s of CPU), while the cases of one op type are built by importing its module
of ``onnx.backend.test.case.node`` alone (each module builds its cases when imported).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["inputs_as_initializers", "node_cases"]


def inputs_as_initializers(model: onnx.ModelProto, inputs: list[np.ndarray],
                           constant: Callable[[np.ndarray], bool]
                           ) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """A copy of ``model`` whose graph inputs for which ``constant(value)`` holds are
    initializers with those values, and the values of the inputs it still takes."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    kept, values = [], []
    for info, value in zip(list(graph.input), inputs):
        if constant(value):
            graph.initializer.append(numpy_helper.from_array(value, info.name))
        else:
            kept.append(info)
            values.append(value)
    del graph.input[:]
    graph.input.extend(kept)
    return model, values


def node_cases(*op_types: str) -> dict[str, Any]:
    """Name -> test case, in name order, for the single-node ONNX test cases of ``op_types``
    (``"LSTM"``, ``"GRU"``) that the onnx package exports.

    ``onnx.backend.test.case.node.collect_testcases()`` builds every operator's cases (about
    10 s); importing the one module of each op type (``onnx/backend/test/case/node/lstm.py``)
    builds only its own, into the package's list of cases (the list ``collect_testcases``
    returns too), once per process: this reads them from there whichever came first.
    """
    node = importlib.import_module("onnx.backend.test.case.node")
    for op_type in op_types:
        importlib.import_module(f"onnx.backend.test.case.node.{op_type.lower()}")
    cases = node._NodeTestCases  # pylint: disable=protected-access  (the one list of cases)
    found = {c.name: c for c in cases
             if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type in op_types}
    return dict(sorted(found.items()))
