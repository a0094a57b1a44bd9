"""One-operator Relax functions for tests: parameters of given shapes and one output."""

from __future__ import annotations

from typing import Callable, Sequence

from tvm import relax

__all__ = ["relax_function"]


def relax_function(shapes: Sequence[tuple[int, ...]], body: Callable[..., relax.Expr],
                   dtype: str | Sequence[str] = "float32",
                   names: Sequence[str] | None = None) -> relax.Function:
    """A Relax function ``f`` of parameters with ``shapes`` (``dtype``: one for all or one per
    parameter; ``names`` default ``p0, p1, ...``) whose result is ``body(*params)``."""
    bb = relax.BlockBuilder()
    dtypes = [dtype] * len(shapes) if isinstance(dtype, str) else list(dtype)
    names = list(names) if names is not None else [f"p{i}" for i in range(len(shapes))]
    params = [relax.Var(n, relax.TensorType(s, d)) for n, s, d in zip(names, shapes, dtypes)]
    with bb.function("f", params):
        with bb.dataflow():
            out = bb.emit_output(body(*params))
        bb.emit_func_output(out)
    return bb.get()["f"]
