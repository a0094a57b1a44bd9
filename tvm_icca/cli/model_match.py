"""Whether an ONNX model takes the inputs a compiled library takes (``tvm-icca run --check``).

``--check model.onnx`` runs the model on TVM's CPU target with the library's inputs. A model
other than the one the library was compiled from used to run the whole library first and then
fail inside TVM's VM (``Check failed: (ptr->ndim == ndim)``); its inputs are compared here,
before anything runs, with the signature ``tvm-icca compile`` stores in the library
(:mod:`tvm_icca.cli.compile_command`): their count, names, dtypes, ranks and fixed dimensions
(the rules of :func:`tvm_icca.frontend.onnx_inputs.shape_problem`).
"""

from __future__ import annotations

from typing import Any, Sequence

from tvm_icca.cli.args import UsageError

__all__ = ["check_model_matches_library"]


def check_model_matches_library(model: str, library: str, specs: Sequence[dict[str, Any]]) -> None:
    """Raise :class:`UsageError` naming the first input in which ``model`` differs from the
    library's inputs ``specs`` (name, onnx_name, shape, dtype per input, as
    ``tvm_icca.cli.run_command`` reads them). A library without a stored signature records
    only its input count, so only the count is compared then."""
    # pylint: disable=import-outside-toplevel
    import onnx

    from tvm_icca.frontend.onnx_inputs import (
        format_dims,
        graph_input_dtypes,
        graph_inputs,
        listed_inputs,
        shape_problem,
    )

    try:
        graph = onnx.load(model, load_external_data=False).graph
    except Exception:  # pylint: disable=broad-except  (any parse failure means the same)
        raise UsageError(f"--check: '{model}' is not a readable ONNX model (no ONNX protobuf "
                         "could be parsed from it)") from None
    inputs, dtypes = graph_inputs(graph), graph_input_dtypes(graph)
    which = f"--check model '{model}' is not the model '{library}' was compiled from"
    if len(inputs) != len(specs):
        taken = ", ".join(f"'{s.get('onnx_name') or s['name']}'" for s in specs) or "none"
        raise UsageError(f"{which}: it takes {len(inputs)} input(s) "
                         f"({listed_inputs(inputs) or 'none'}), the library {len(specs)} ({taken})")
    for position, (spec, name) in enumerate(zip(specs, inputs)):
        if spec["shape"] is None:
            continue  # no signature: the library's names are Relax's, its shapes unknown
        wanted = spec.get("onnx_name") or spec["name"]
        if name != wanted:
            raise UsageError(f"{which}: its input {position} is '{name}', the library's is "
                             f"'{wanted}'")
        if spec["dtype"] and dtypes.get(name) and dtypes[name] != spec["dtype"]:
            raise UsageError(f"{which}: input '{name}' is {dtypes[name]} in the model, "
                             f"{spec['dtype']} in the library")
        problem = shape_problem(inputs, name, spec["shape"])
        if problem is not None:
            raise UsageError(f"{which}: input '{name}' has shape {format_dims(spec['shape'])} in "
                             f"the library: {problem}")
