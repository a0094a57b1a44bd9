"""Operators as tensor expressions: axes, index maps, gathered reads and the body tree.

T10 §4.1-4.2 (Table 1) describes an operator by its iteration axes, which of them are
summed, and how every tensor dimension is indexed by an affine combination of axes
(``h*stride + kh*dilation - pad``: a *compound axis*, T10 §5). :class:`TensorExpr` is that
description; its ``body`` (and ``epilogue``) is a small expression tree of plain dicts
(:data:`Expr`) that the functional device evaluates and the templates cost. A
:class:`Gather` is the one data-dependent index (an embedding lookup's rows).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError, short_name
from runtime_sim.contract.json_fields import (
    quoted,
    read_bool,
    read_int,
    read_list,
    read_map,
    read_name,
)

#: What a gather does with a row number outside ``[0, n)`` (``n`` rows on the gathered axis).
#: ``"fast"`` follows ONNX Gather (a negative id counts from the end, once: ``[-n, 0)`` wraps);
#: anything else outside the tensor is refused by the device (TVM's fast mode leaves it
#: undefined). ``"clip"`` clamps to ``[0, n - 1]`` and ``"wrap"`` takes the id modulo ``n``,
#: as topi's take does for those modes (``min(max(0, i), n - 1)``,
#: ``truncmod(truncmod(i, n) + n, n)``). :func:`gather_rows` is the one definition.
GATHER_MODES = ("fast", "clip", "wrap")

UNARY_OPS = (
    "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "not", "floor",
    "ceil", "round", "sin", "cos",
)
BINARY_OPS = (
    "add", "sub", "mul", "div", "max", "min", "pow",
    "lt", "le", "gt", "ge", "eq", "ne", "and", "or",
)
#: Combiners of a ``reduce`` node (a core-local reduction inside an expression tree).
NODE_COMBINERS = ("sum", "max", "min")
#: Combiners of an operator's top-level reduction axes (:attr:`TensorExpr.combiner`):
#: the node combiners, and ``"softmax"``, the fused attention operator's online softmax
#: over its key axis (only with kind ``"attention"`` and the :data:`ATTENTION_NODE` body).
REDUCE_COMBINERS = NODE_COMBINERS + ("softmax",)
#: The body node of a fused attention operator, ``{"op": "attention", "args": [score,
#: value]}``: ``softmax_j(score) @ value`` over the key axis (see :class:`TensorExpr`).
ATTENTION_NODE = "attention"

Expr = dict  # a JSON expression tree, see module docstring


@dataclass(frozen=True)
class Axis:
    """An iteration axis of a tensor expression."""

    name: str
    extent: int
    reduce: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "extent": self.extent, "reduce": self.reduce}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Axis":
        return cls(read_name(d["name"], "axis name"), read_int(d["extent"], "axis extent"),
                   read_bool(d.get("reduce", False), "axis 'reduce'"))


@dataclass(frozen=True)
class AffineIndex:
    """``sum(coef * axis) + offset``: how one tensor dimension is indexed."""

    terms: tuple[tuple[str, int], ...] = ()
    offset: int = 0

    @classmethod
    def of_axis(cls, axis: str) -> "AffineIndex":
        return cls(((axis, 1),), 0)

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(a for a, _ in self.terms)

    @property
    def is_simple(self) -> bool:
        """Indexed by exactly one axis, with coefficient 1 and no offset."""
        return len(self.terms) == 1 and self.terms[0][1] == 1 and self.offset == 0

    def coef(self, axis: str) -> int:
        return sum(c for a, c in self.terms if a == axis)

    def to_dict(self) -> dict[str, Any]:
        return {"terms": [[a, c] for a, c in self.terms], "offset": self.offset}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AffineIndex":
        terms = []
        for term in read_list(d.get("terms", ()), "index terms"):
            if not isinstance(term, (list, tuple)) or len(term) != 2:
                raise DeviceProgramError(f"an index term must be [axis, coefficient], not {term!r}")
            terms.append((read_name(term[0], "index axis"), read_int(term[1], "index coefficient")))
        return cls(tuple(terms), read_int(d.get("offset", 0), "index offset"))

    def __str__(self) -> str:
        parts = [a if c == 1 else f"{a}*{c}" for a, c in self.terms]
        if self.offset or not parts:
            parts.append(str(self.offset))
        return " + ".join(parts).replace("+ -", "- ")


@dataclass(frozen=True)
class Gather:
    """Dimension ``axis`` of an input is read at the row numbers held in input ``ids``.

    The access's ``indices`` then index the gathered view ``take(tensor, ids, axis)``, of
    shape :func:`gathered_shape` (``tensor.shape[:axis] + ids.shape + tensor.shape[axis+1:]``),
    and the ids input must be read at exactly the view's indices on the dimensions that stand
    for it (the core holding a block of the view holds the ids that select its rows). Out of
    range ids follow ``mode`` (:data:`GATHER_MODES`)."""

    ids: int
    axis: int
    mode: str = "fast"

    def to_dict(self) -> dict[str, Any]:
        return {"ids": self.ids, "axis": self.axis, "mode": self.mode}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Gather":
        return cls(read_int(d["ids"], "gather ids input"), read_int(d["axis"], "gather axis"),
                   read_name(d.get("mode", "fast"), "gather mode"))


def gathered_shape(shape: Sequence[int], ids_shape: Sequence[int], axis: int) -> tuple[int, ...]:
    """Shape of ``take(tensor, ids, axis)``: the ids' dimensions replace dimension ``axis``."""
    return tuple(shape[:axis]) + tuple(ids_shape) + tuple(shape[axis + 1:])


def gather_rows(ids: Any, n: int, mode: str) -> Any:
    """The row numbers (in ``[0, n)``) a gather reads for ids ``ids`` under ``mode``
    (:data:`GATHER_MODES`): the one definition the device and the tests use. Raises
    :class:`DeviceProgramError` for an id that ``"fast"`` leaves undefined."""
    ids = np.asarray(ids, np.int64)
    if mode == "clip":
        return np.clip(ids, 0, n - 1)
    if mode == "wrap":
        return np.mod(ids, n)
    if mode != "fast":
        raise DeviceProgramError(f"unknown gather mode {quoted(mode)} (known: {', '.join(GATHER_MODES)})")
    bad = (ids < -n) | (ids >= n)
    if bad.any():
        raise DeviceProgramError(
            f"gather id {int(ids[bad].reshape(-1)[0])} is outside [-{n}, {n}) for a tensor of "
            f"{n} rows ({int(bad.sum())} ids out of range)")
    return np.where(ids < 0, ids + n, ids)


@dataclass(frozen=True)
class TensorView:
    """An input read as a block of a larger region tensor, in place (no copy).

    The operator sees a tensor of its access's ``shape``; it is the block
    ``[start[d], start[d] + shape[d])`` of the region tensor of shape ``base_shape``. An
    operator split into sub-operators (long context: a slice of the KV cache per piece) reads
    its share of an HBM tensor this way; the device places and counts the block's bytes only.
    """

    start: tuple[int, ...]
    base_shape: tuple[int, ...]

    def slices(self, shape: Sequence[int]) -> tuple[slice, ...]:
        """The numpy index of the block of ``shape`` in the base tensor."""
        return tuple(slice(s, s + int(n)) for s, n in zip(self.start, shape))

    def to_dict(self) -> dict[str, Any]:
        return {"start": list(self.start), "base_shape": list(self.base_shape)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TensorView":
        return cls(tuple(read_int(v, "view start") for v in read_list(d["start"], "view start")),
                   tuple(read_int(v, "view base shape")
                         for v in read_list(d["base_shape"], "view base_shape")))


@dataclass(frozen=True)
class TensorAccess:
    """A tensor of an operator and how each of its dimensions is indexed.

    For inputs, ``indices`` is the access that defines the partitioning (the body may read
    the tensor at other sites too: those use core-local axes on dimensions the plan keeps
    whole). For the output, every index is a plain spatial axis, or spatial axes merged
    row-major (:func:`merged_axes`: the output of a reshape that merges dimensions).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    indices: tuple[AffineIndex, ...]
    #: a data-dependent dimension (an embedding lookup): ``indices`` index the gathered view
    gather: Gather | None = None
    #: an input read in place as a block of a larger region tensor (:class:`TensorView`)
    view: TensorView | None = None

    @property
    def tensor_shape(self) -> tuple[int, ...]:
        """The shape of the region tensor this access names: its view's base, else its own."""
        return tuple(self.view.base_shape) if self.view is not None else tuple(self.shape)

    def block_of(self, arr: Any) -> Any:
        """What the operator reads of the region tensor ``arr``: the view's block, or ``arr``."""
        return arr if self.view is None else arr[self.view.slices(self.shape)]

    @property
    def axes(self) -> tuple[str, ...]:
        seen: list[str] = []
        for idx in self.indices:
            for a in idx.axes:
                if a not in seen:
                    seen.append(a)
        return tuple(seen)

    @property
    def nbytes(self) -> int:
        return tensor_bytes(self.shape, self.dtype)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "indices": [i.to_dict() for i in self.indices],
        }
        if self.gather is not None:  # only when set: other programs keep their bytes
            out["gather"] = self.gather.to_dict()
        if self.view is not None:
            out["view"] = self.view.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TensorAccess":
        return cls(
            read_name(d["name"], "tensor name"),
            tuple(read_int(s, "tensor dimension") for s in read_list(d["shape"], "tensor shape")),
            read_name(d["dtype"], "dtype"),
            tuple(AffineIndex.from_dict(read_map(i, "index")) for i in read_list(d["indices"], "indices")),
            None if d.get("gather") is None else Gather.from_dict(read_map(d["gather"], "gather")),
            None if d.get("view") is None else TensorView.from_dict(read_map(d["view"], "view")),
        )


@dataclass(frozen=True)
class TensorExpr:
    """An operator as a tensor expression (T10 §4.2 "Operator representation").

    ``body`` is evaluated over ``axes`` and ``local_axes``; when some of ``axes`` are
    reductions the output is the sum of ``body`` over them (the only combiner that can be
    split across cores), then ``epilogue`` (if any) maps that sum elementwise to the output.
    ``combiner`` ``"max"``/``"min"`` reduces them with max/min instead (max pooling's window):
    such reduction axes are never partitioned (:func:`runtime_sim.contract.plan_rules.pinned_axes`), so
    each core reduces whole windows, while the output's spatial axes (read through the
    compound window index ``h*stride + kh - pad``) split like a convolution's.
    ``kind`` names the template in :mod:`schedules` that computes a sub-task on one core.

    Kind ``"attention"`` (combiner ``"softmax"``) is the fused attention operator: its body
    is ``{"op": "attention", "args": [score, value]}``, one top-level reduction axis ``j``
    (the keys), and the output is ``epilogue(sum_j exp(s_j - m) value_j / sum_j exp(s_j - m))``
    with ``s = score``, ``m = max_j s``: ``softmax_j(score) @ value``. ``score`` reads no
    axis only ``value`` reads (the value features ``d``), ``value`` reads no core-local axis
    (the head dimension ``k`` that ``score`` contracts). Cores run the online-softmax
    recurrence over blocks of keys (Milakov & Gimelshein 2018; FlashAttention, Dao et al.
    2022): :mod:`runtime_sim.contract.plan_rules` (:func:`~runtime_sim.contract.plan_rules.attention_roles`)
    says what a plan may split.
    """

    kind: str
    axes: tuple[Axis, ...]
    inputs: tuple[TensorAccess, ...]
    output: TensorAccess
    body: Expr
    local_axes: tuple[Axis, ...] = ()
    epilogue: Expr | None = None
    epilogue_inputs: tuple[int, ...] = ()  # indices into ``inputs`` read only by the epilogue
    combiner: str = "sum"  # of the top-level reduction axes (REDUCE_COMBINERS)

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def reduce_axes(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes if a.reduce)

    def extent(self, axis: str) -> int:
        for a in self.axes + self.local_axes:
            if a.name == axis:
                return a.extent
        raise KeyError(axis)

    @property
    def tensors(self) -> tuple[TensorAccess, ...]:
        """Inputs then the output: the order plans index tensors by."""
        return self.inputs + (self.output,)

    def access_shape(self, t: int) -> tuple[int, ...]:
        """The shape tensor ``t``'s indices address: its own, or for a gathered input the
        gathered view's (:func:`gathered_shape`). Partitions are blocks of this shape."""
        access = self.tensors[t]
        g = access.gather
        if g is None:
            return tuple(access.shape)
        return gathered_shape(access.shape, self.inputs[g.ids].shape, g.axis)

    def read_bytes(self, t: int) -> int:
        """Bytes of tensor ``t`` the operator reads (or writes): its :meth:`access_shape`. A
        viewed input counts its block; a gathered input the rows its ids pick (one row per
        id position, a repeated id read again), never its whole table: an embedding table in
        HBM is read row by row (:func:`runtime_sim.contract.relayout.input_boxes`, the boxes
        both executors load). The one count of what an operator takes from where a tensor
        waits, which the compiler's capacity checks and HBM estimates use."""
        return tensor_bytes(self.access_shape(t), self.tensors[t].dtype)

    @property
    def gather_ids(self) -> set[int]:
        """Inputs that hold the row numbers of a gathered input."""
        return {t.gather.ids for t in self.inputs if t.gather is not None}

    @property
    def merged_inner_axes(self) -> tuple[str, ...]:
        """Axes written inside a merged output dimension (:func:`merged_axes`), all but the
        outermost of each. A plan keeps them whole on every core
        (:func:`runtime_sim.contract.plan_rules.pinned_axes`): then each core's output partition is one
        contiguous run of the merged dimension, a block like any other output's."""
        inner: list[str] = []
        for ix in self.output.indices:
            if len(ix.terms) > 1:
                inner += [a for a, _ in sorted(ix.terms, key=lambda t: -t[1])[1:]]
        return tuple(inner)

    def flops(self) -> int:
        """Multiply-accumulate work counted as 2 FLOP per body evaluation with reductions.

        Attention counts its two products, ``2 |batch| |i| |j| (|k| + |d|)``: the scores'
        ``2 |k|`` and the weighted sum's ``2 |d|`` per (row, key) pair (the exponentials are
        not matrix-unit FLOPs)."""
        if self.kind == "attention":
            return _attention_flops(self)
        n = 1
        for a in self.axes:
            n *= a.extent
        for a in self.local_axes:
            n *= a.extent
        return 2 * n if self.reduce_axes else n

    def to_dict(self) -> dict[str, Any]:
        d = {
            "kind": self.kind,
            "axes": [a.to_dict() for a in self.axes],
            "local_axes": [a.to_dict() for a in self.local_axes],
            "inputs": [t.to_dict() for t in self.inputs],
            "output": self.output.to_dict(),
            "body": self.body,
            "epilogue": self.epilogue,
            "epilogue_inputs": list(self.epilogue_inputs),
        }
        if self.combiner != "sum":  # only when not the default, so existing programs keep their bytes
            d["combiner"] = self.combiner
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TensorExpr":
        return cls(
            kind=read_name(d["kind"], "operator kind"),
            axes=tuple(Axis.from_dict(read_map(a, "axis")) for a in read_list(d["axes"], "axes")),
            local_axes=tuple(Axis.from_dict(read_map(a, "axis"))
                             for a in read_list(d.get("local_axes", ()), "local_axes")),
            inputs=tuple(TensorAccess.from_dict(read_map(t, "input")) for t in read_list(d["inputs"], "inputs")),
            output=TensorAccess.from_dict(read_map(d["output"], "output")),
            body=read_map(d["body"], "body"),
            epilogue=None if d.get("epilogue") is None else read_map(d["epilogue"], "epilogue"),
            epilogue_inputs=tuple(read_int(i, "epilogue input")
                                  for i in read_list(d.get("epilogue_inputs", ()), "epilogue_inputs")),
            combiner=read_name(d.get("combiner", "sum"), "combiner"),
        )

    def tensor_summary(self) -> str:
        """Its tensors and their shapes as a message names them: ``inputs 'x' [1, 64, 56, 56]
        float32, 'w' [64, 64, 3, 3] float32; output [1, 64, 56, 56] float32``."""
        ins = ", ".join(f"'{short_name(t.name)}' {list(t.shape)} {t.dtype}" for t in self.inputs)
        return f"inputs {ins}; output {list(self.output.shape)} {self.output.dtype}"

    def structure_key(self, views: bool = True) -> str:
        """The identity of this expression up to its tensors' names: canonical JSON of
        :meth:`to_dict` with every input and output name blanked. Two operators with equal
        keys plan, compute and cost the same (the same layer repeated in a model).

        ``views=False`` also blanks where viewed inputs sit in their region tensors
        (:class:`TensorView`): the sub-operators of one split read equal blocks at different
        places, and plan alike (the compiler's key); where a block sits changes only which
        cores hold its bytes before it is read (the device's key keeps it).

        Kept on the expression once computed (it is frozen): the compiler asks for it several
        times per operator call, thousands of times for an 80-layer LLM."""
        known = self._key_memo()
        key = known.get(views)
        if key is None:
            data = self.to_dict()
            for access in (*data["inputs"], data["output"]):
                access["name"] = ""
                if not views:
                    access.pop("view", None)
            key = known[views] = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return key

    def with_output_name(self, name: str) -> "TensorExpr":
        """This expression with its output named ``name``, sharing its memo of
        :meth:`structure_key` (which blanks the names, so the keys are equal): the compiler
        renames one extracted expression per operator call of the identical layers, and the
        key is then computed once for them all, not once per layer."""
        renamed = replace(self, output=replace(self.output, name=name))
        object.__setattr__(renamed, "_structure_keys", self._key_memo())
        return renamed

    def _key_memo(self) -> dict[bool, str]:
        """The memo of :meth:`structure_key` (``views`` -> key); not a field: eq, hash, repr."""
        known = self.__dict__.get("_structure_keys")
        if known is None:
            known = {}
            object.__setattr__(self, "_structure_keys", known)
        return known

    def __str__(self) -> str:
        def acc(t: TensorAccess) -> str:
            return f"{t.name}[{', '.join(str(i) for i in t.indices)}]"

        red = f" {self.combiner} over {','.join(self.reduce_axes)}" if self.reduce_axes else ""
        ins = " , ".join(acc(t) for t in self.inputs)
        return f"{self.kind}: {acc(self.output)} <- {ins}{red}"


@dataclass(frozen=True)
class AttentionRoles:
    """The axes of an attention expression by role (see :class:`TensorExpr`).

    ``key``: the top-level reduction axis ``j``; ``rows``: the spatial axes that are not
    features (batch axes and query rows: one online-softmax state per position of them);
    ``features``: the spatial axes only ``value`` reads (``d``); ``dot``: the core-local
    axes (the head dimension ``k`` the score contracts)."""

    key: str
    rows: tuple[str, ...]
    features: tuple[str, ...]
    dot: tuple[str, ...]


def attention_roles(expr: TensorExpr) -> AttentionRoles:
    """:class:`AttentionRoles` of an attention expression (kind ``"attention"``, body
    ``{"op": "attention", "args": [score, value]}``, one reduction axis): the one place
    its roles are read off the expression."""
    score, value = expr.body["args"]
    score_axes = _expr_axes(score)
    value_only = _expr_axes(value) - score_axes
    spatial = [a.name for a in expr.axes if not a.reduce]
    (key,) = expr.reduce_axes
    return AttentionRoles(key, tuple(a for a in spatial if a not in value_only),
                          tuple(a for a in spatial if a in value_only),
                          tuple(a.name for a in expr.local_axes))


def _attention_flops(expr: TensorExpr) -> int:
    """``2 * |batch| * |i| * |j| * (|k| + |d|)`` of an attention expression: the score's
    ``2 |k|`` and the weighted sum's ``2 |d|`` per (row, key) pair."""
    roles = attention_roles(expr)
    size = {a.name: a.extent for a in expr.axes + expr.local_axes}
    rows = math.prod(size[a] for a in roles.rows) * size[roles.key]
    return 2 * rows * (math.prod(size[a] for a in roles.dot)
                       + math.prod(size[a] for a in roles.features))


def _expr_axes(expr: Expr) -> set[str]:
    """Every axis an expression tree reads (through loads and axis nodes)."""
    found: set[str] = set()
    for node in walk_expr(expr):
        if node["op"] == "load":
            found.update(a for i in node["index"] for a, _ in i.get("terms", ()))
        elif node["op"] == "axis":
            found.add(node["axis"])
    return found


DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8,
                "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def tensor_bytes(shape: Sequence[int], dtype: str) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n * dtype_bytes(dtype)


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[str(dtype)]
    except KeyError:
        raise DeviceProgramError(f"unknown dtype '{dtype}'") from None


def walk_expr(expr: Expr) -> Iterator[Expr]:
    """Pre-order traversal of an expression tree."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.get("args", ())))


def expr_loads(expr: Expr | None) -> list[Expr]:
    return [] if expr is None else [n for n in walk_expr(expr) if n["op"] == "load"]


def guarded_inputs(expr: "TensorExpr") -> set[int]:
    """Inputs the expression reads only inside a branch of a ``select``: a piecewise read
    such as concat's (``select(ax < n0, a[ax], b[ax - n0])``). Such an input may be indexed
    beyond its bounds where the guard does not take its branch; reads outside a tensor are
    zero on the device (the same rule as convolution padding), and no value of the output
    comes from them."""
    inside: set[int] = set()
    outside: set[int] = set()
    for root in (expr.body, expr.epilogue):
        if root is None:
            continue
        stack = [(root, False)]
        while stack:
            node, guarded = stack.pop()
            if not isinstance(node, Mapping):
                continue
            if node.get("op") == "load" and isinstance(node.get("input"), int):
                (inside if guarded else outside).add(int(node["input"]))
            args = node.get("args", ())
            if not isinstance(args, (list, tuple)):
                continue
            for k, arg in enumerate(args):
                stack.append((arg, guarded or (node.get("op") == "select" and k > 0)))
    return inside - outside


def load_index(node: Expr) -> tuple[AffineIndex, ...]:
    return tuple(AffineIndex.from_dict(i) for i in node["index"])


def make_load(input_index: int, index: Sequence[AffineIndex]) -> Expr:
    return {"op": "load", "input": input_index, "index": [i.to_dict() for i in index]}


def renumber_loads(node: Expr, new_of: Mapping[int, int]) -> Expr:
    """``node`` with every load of input ``t`` reading input ``new_of[t]`` instead (the inputs
    of an operator re-ordered or dropped)."""
    node = dict(node)
    if node.get("op") == "load":
        node["input"] = new_of[node["input"]]
    if "args" in node:
        node["args"] = [renumber_loads(a, new_of) for a in node["args"]]
    return node


def merged_axes(index: AffineIndex, extents: Mapping[str, int]) -> tuple[str, ...] | None:
    """The axes an output index merges row-major, outermost first; ``None`` if it does not.

    An output dimension is written either by one plain axis or, for a reshape that merges
    dimensions (:mod:`tvm_icca.ops.views`), by ``a_0 * (E_1 ... E_n) + ... + a_{n-1} * E_n + a_n``:
    distinct axes, no offset, the innermost with coefficient 1 and each other with the
    product of the extents inside it, so that the axes enumerate the dimension exactly once.
    """
    if index.offset != 0 or not index.terms:
        return None
    names = [a for a, _ in index.terms]
    if len(set(names)) != len(names) or any(a not in extents for a in names):
        return None
    stride = 1
    for a, c in sorted(index.terms, key=lambda t: t[1]):
        if c != stride:
            return None
        stride *= int(extents[a])
    return tuple(a for a, _ in sorted(index.terms, key=lambda t: -t[1]))


def axes_in(indices: Iterable[AffineIndex]) -> set[str]:
    return {a for idx in indices for a in idx.axes}
