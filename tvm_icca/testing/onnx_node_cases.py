"""The ONNX project's node test cases, prepared for a compiler that needs some inputs as
constants (reduction axes, shapes, pad values): those inputs become initializers holding the
case's own values, which keeps each case's meaning."""

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


def node_cases(op_type: str) -> list[Any]:
    """The single-node test cases of ``op_type`` that the onnx package exports, by name order.

    ``onnx.backend.test.case.node.collect_testcases()`` builds every operator's cases (about
    10 s); importing the one module of ``op_type`` (``onnx/backend/test/case/node/<op>.py``)
    builds only its own, which its export functions add to the package's list of cases (the
    list ``collect_testcases`` returns) when the module is first imported.
    """
    import onnx.backend.test.case.node as cases  # pylint: disable=import-outside-toplevel

    importlib.import_module(f"{cases.__name__}.{op_type.lower()}")
    found = {c.name: c for c in cases._NodeTestCases  # pylint: disable=protected-access
             if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type == op_type}
    return [found[name] for name in sorted(found)]
