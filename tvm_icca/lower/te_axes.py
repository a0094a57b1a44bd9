"""The iteration axes of one TE conversion and the affine index maps over them (T10 §5).

T10 plans every operator from its tensor expression (T10 §4.2): the iteration axes, which of
them are summed, and how each tensor dimension is indexed by the axes -- possibly by a
*compound axis* such as ``h*stride + kh*dilation - pad`` (T10 §5). :class:`AxisSpace` holds the
axes one conversion creates (top-level spatial and reduction axes, core-local axes of inner
reductions) with their ranges in TVM's arithmetic analyzer, and turns TE index expressions into
sums of axes times constants (:meth:`AxisSpace.affine`); that is how injective producers
(transpose, broadcast, expand_dims, padding, a reshape iterated over its atoms) end up inlined
into affine index maps. Non-affine indices (a reshape that merges or splits non-unit dims,
grouped convolution's ``ff // (F/groups)`` unless its output axis is split into groups) and
data-dependent indices raise :class:`~runtime_sim.contract.errors.UnsupportedOperatorError`.

Axis names are TVM's own iteration variable names (``i0, i1, k`` for matmul, ``nn, ff, yy,
xx, rc, ry, rx`` for conv2d, ``ax0, k1`` for topi reductions), suffixed ``_1, _2`` where
they would clash.

:class:`tvm_icca.lower.te_converter.TEConverter` extends it with the walk over the TE DAG.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import tvm
from tvm import tirx
from tvm.sym import Analyzer

from runtime_sim.contract.errors import UnsupportedOperatorError
from runtime_sim.contract.expr import AffineIndex, Axis
from tvm_icca.lower.te_nodes import (
    fixed_extent,
    floordiv_divisors,
    is_index_arith,
    is_int,
    is_tensor_load,
)
from tvm_icca.ops.te_capture import ffi_key as _key


class AxisSpace:
    """The axes of one conversion and the index arithmetic over them (one per attempt)."""

    def __init__(self) -> None:
        self.analyzer = Analyzer()
        self.axes: list[Axis] = []
        self.local_axes: list[Axis] = []
        self.axis_vars: dict[str, tirx.Var] = {}
        self.order: dict[str, int] = {}
        # The output's iteration variables over our axes: an axis, or ``g*k + f`` for a
        # grouped axis split by spatial_axes; ``out_indices`` is the output access they give.
        self.spatial: list[tirx.PrimExpr] = []
        self.out_indices: list[AffineIndex] = []

    # -- axes -----------------------------------------------------------------------------
    def new_axis(self, hint: str, extent: int, reduce: bool, local: bool) -> tirx.Var:
        name, n = hint or "ax", 0
        while name in self.axis_vars:
            n += 1
            name = f"{hint}_{n}"
        var = tirx.Var(name, "int64")
        self.axis_vars[name] = var
        self.order[name] = len(self.order)
        self.analyzer.bind(
            var, tvm.ir.Range.from_min_extent(tirx.const(0, "int64"), tirx.const(extent, "int64"))
        )
        (self.local_axes if local else self.axes).append(Axis(name, int(extent), reduce))
        return var

    def spatial_axes(self, ivs: Sequence[Any], shape: Sequence[int], body: Any) -> None:
        """The top-level spatial axes of a reduction over ``ivs`` (its output iteration vars).

        An output variable ``v`` that the body divides by a constant ``k`` (grouped
        convolution reads its input channel at ``ff // (F/G) * (C/G) + rc``) is split into a
        group axis ``g`` (extent ``E/k``) and an in-group axis ``f`` (extent ``k``) with
        ``v = g*k + f``: TVM's simplifier then rewrites ``v // k`` to ``g``, so every
        index is affine (T10 §5 needs sums of axes times constants) and the output dimension
        is indexed by the digit index ``g*k + f`` (its layout rule:
        :func:`runtime_sim.contract.plan_rules.pinned_axes`).
        """
        divisors = floordiv_divisors(body)
        self.spatial, self.out_indices = [], []
        for d, extent in enumerate(shape):
            name = ivs[d].var.name if d < len(ivs) else f"i{d}"
            k = divisors.get(_key(ivs[d].var), set()) if d < len(ivs) else set()
            k = {x for x in k if 1 < x < extent and extent % x == 0}
            if len(k) == 1:
                (k,) = k
                g = self.new_axis("g", extent // k, False, False)
                f = self.new_axis("f", k, False, False)
                self.spatial.append(g * tirx.const(k, "int64") + f)
                self.out_indices.append(AffineIndex(((g.name, k), (f.name, 1)), 0))
            else:
                v = self.new_axis(name, extent, False, False)
                self.spatial.append(v)
                self.out_indices.append(AffineIndex.of_axis(v.name))

    def merged_output(self, names: Sequence[str], shape: Sequence[int],
                      out_atoms: Sequence[Sequence[int]]) -> list[tirx.PrimExpr]:
        """One axis per atom of each output dim (outermost first; ``out_atoms``: per output
        dim, the extents of the axes it merges); the output dim is written at their row-major
        merge (:func:`runtime_sim.contract.expr.merged_axes`). Returns the output's index over
        those axes, for the load of the TE result."""
        index = []
        for d, (hint, atoms) in enumerate(zip(names, out_atoms)):
            if len(atoms) == 1:
                var = self.new_axis(hint, int(shape[d]), False, False)
                self.spatial.append(var)
                self.out_indices.append(AffineIndex.of_axis(var.name))
                index.append(var)
                continue
            terms, expr = [], None
            for j, extent in enumerate(atoms):
                var = self.new_axis(f"{hint}_{j}", int(extent), False, False)
                stride = int(np.prod(atoms[j + 1:], dtype=np.int64))
                terms.append((var.name, stride))
                self.spatial.append(var)
                term = var if stride == 1 else var * tirx.const(stride, "int64")
                expr = term if expr is None else expr + term
            self.out_indices.append(AffineIndex(tuple(terms), 0))
            index.append(expr)
        return index

    def axis_extent(self, iv: Any, env: Mapping[int, Any]) -> int:
        """The extent of reduction axis ``iv``; one written over the output's axes (adaptive
        pooling's window ``end(h) - start(h)``) counts when it is the same for every output
        point (TVM's simplifier, which knows each axis's range, proves it constant)."""
        dom = iv.dom
        if isinstance(dom.extent, tirx.IntImm) or not is_index_arith(dom.extent):
            return fixed_extent(iv)
        try:
            extent = self.analyzer.simplify(self.subst(dom.extent, env))
        except UnsupportedOperatorError:
            return fixed_extent(iv)
        if isinstance(dom.min, tirx.IntImm) and int(dom.min.value) == 0 and isinstance(extent, tirx.IntImm):
            return int(extent.value)
        return fixed_extent(iv)

    # -- index arithmetic -----------------------------------------------------------------
    def subst(self, e: Any, env: Mapping[int, Any]) -> tirx.PrimExpr:
        """An integer TE expression rewritten over our axis variables (not simplified)."""
        if isinstance(e, tvm.ir.Var):
            value = env.get(_key(e))
            if value is None or isinstance(value, dict):
                raise UnsupportedOperatorError(f"index variable '{e.name}' is not an iteration axis")
            return value
        if isinstance(e, tirx.IntImm):
            return tirx.const(int(e.value), "int64")
        if isinstance(e, tirx.Cast) and is_int(e):
            return self.subst(e.value, env)
        ops = {
            tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b,
            tirx.Mul: lambda a, b: a * b, tirx.FloorDiv: tirx.floordiv,
            tirx.FloorMod: tirx.floormod, tirx.Min: tirx.min, tirx.Max: tirx.max,
        }
        build = ops.get(type(e))
        if build is not None:
            return build(self.subst(e.a, env), self.subst(e.b, env))
        if isinstance(e, tirx.Select) and isinstance(e.condition, tirx.IntImm):
            # topi's adaptive pooling writes its window end as Select(True, ...)
            return self.subst(e.true_value if int(e.condition.value) else e.false_value, env)
        if isinstance(e, tirx.Select):
            # a folded index (reflect padding's |i - b|): piecewise affine, see te_pieces
            return tirx.Select(self.subst(e.condition, env), self.subst(e.true_value, env),
                               self.subst(e.false_value, env))
        compare = (tirx.GE, tirx.GT, tirx.LE, tirx.LT)
        if isinstance(e, compare) and is_int(e.a) and is_int(e.b):
            return type(e)(self.subst(e.a, env), self.subst(e.b, env))
        if is_tensor_load(e):
            raise UnsupportedOperatorError(
                f"data-dependent index (reads tensor '{e.args[0].op.name}'): not affine"
            )
        raise UnsupportedOperatorError(f"index expression {type(e).__name__} is not supported")

    def affine(self, e: tirx.PrimExpr, what: str = "tensor index") -> AffineIndex:
        """``e`` as a sum of axes times constants (T10 §5 compound axis).

        The expression as TE wrote it is tried first, so that a batch axis of extent 1 stays
        visible in the access map; only if that is not affine do we let TVM's arithmetic
        simplifier (which knows every axis range) try, which turns e.g. the div/mod of a
        reshape that only inserts unit dimensions back into plain axes.
        """
        try:
            return self._affine_raw(e, what)
        except UnsupportedOperatorError:
            return self._affine_raw(self.analyzer.simplify(e), what)

    def _affine_raw(self, e: tirx.PrimExpr, what: str) -> AffineIndex:
        coefs: dict[str, int] = {}
        offset = 0

        def walk(x: Any, scale: int) -> None:
            nonlocal offset
            if isinstance(x, tvm.ir.Var):
                coefs[x.name] = coefs.get(x.name, 0) + scale
            elif isinstance(x, tirx.IntImm):
                offset += scale * int(x.value)
            elif isinstance(x, tirx.Add):
                walk(x.a, scale)
                walk(x.b, scale)
            elif isinstance(x, tirx.Sub):
                walk(x.a, scale)
                walk(x.b, -scale)
            elif isinstance(x, tirx.Mul) and isinstance(x.b, tirx.IntImm):
                walk(x.a, scale * int(x.b.value))
            elif isinstance(x, tirx.Mul) and isinstance(x.a, tirx.IntImm):
                walk(x.b, scale * int(x.a.value))
            elif isinstance(x, tirx.Cast) and is_int(x):
                walk(x.value, scale)
            else:
                raise UnsupportedOperatorError(
                    f"{what} '{e}' is not affine in the iteration axes (T10 §5 compound axes "
                    "must be sums of axes times constants; e.g. reshape's div/mod is not)"
                )

        walk(e, 1)
        terms = tuple(sorted(((a, c) for a, c in coefs.items() if c), key=lambda t: self.order[t[0]]))
        return AffineIndex(terms, offset)

    # -- comparisons ----------------------------------------------------------------------
    def nonneg_form(self, c: Any, env: Mapping) -> AffineIndex | str | None:
        """Rewrite an integer comparison as ``g >= 0`` with affine ``g`` (None if it is not)."""
        if isinstance(c, tirx.IntImm):
            return "true" if int(c.value) else None
        forms = {
            tirx.GE: lambda a, b: a - b, tirx.GT: lambda a, b: a - b - 1,
            tirx.LE: lambda a, b: b - a, tirx.LT: lambda a, b: b - a - 1,
        }
        build = forms.get(type(c))
        if build is None or not (is_int(c.a) and is_int(c.b)):
            return None
        try:
            a, b = self.subst(c.a, env), self.subst(c.b, env)
        except UnsupportedOperatorError:
            return None
        if self.analyzer.can_prove(type(c)(a, b)):
            return "true"  # holds everywhere in the iteration domain
        try:
            return self.affine(self.analyzer.simplify(build(a, b)))
        except UnsupportedOperatorError:
            return None
