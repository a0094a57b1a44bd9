"""Memo of the tensor expressions of composite functions, shared by the regions of a model.

The layers of an LLM are identical, so the same composite function (``relu(matmul + bias)``
of the same shapes) is lowered once per layer. Its :class:`~tvm_icca.ops.extracted_op.ExtractedOp`
depends on the function's structure, not on the names of the operator it becomes, so it is
keyed on ``tvm_ffi.structural_hash`` / ``structural_equal`` and a hit is renamed for the
operator at hand. Owned by the compilation (:class:`tvm_icca.model_pass.plan_cache.PlanCache`
holds one) and passed down.
"""

from __future__ import annotations

import dataclasses

import tvm_ffi
from tvm import relax

from tvm_icca.lower.te_to_expr import extract_op
from tvm_icca.ops.extracted_op import ExtractedOp

__all__ = ["ExprCache"]


class ExprCache:
    """Extracted operators of composite functions, by structure."""

    def __init__(self) -> None:
        self._buckets: dict[int, list[tuple[relax.Function, ExtractedOp]]] = {}

    def extract(self, composite: relax.Function, name: str) -> ExtractedOp:
        """:func:`~tvm_icca.lower.te_to_expr.extract_op` of ``composite``, its output named
        ``name``; computed once per distinct structure."""
        bucket = self._buckets.setdefault(tvm_ffi.structural_hash(composite), [])
        for seen, extracted in bucket:
            if tvm_ffi.structural_equal(seen, composite):
                return dataclasses.replace(extracted,
                                           expr=extracted.expr.with_output_name(name))
        extracted = extract_op(composite, name=name)
        bucket.append((composite, extracted))
        return extracted
