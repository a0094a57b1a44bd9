"""The ONNX project's node test cases, prepared for a compiler that needs some inputs as
constants (reduction axes, shapes, pad values): those inputs become initializers holding the
case's own values, which keeps each case's meaning."""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["inputs_as_initializers"]


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
