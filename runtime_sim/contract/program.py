"""The device program format: the one contract between compiler and simulated device.

A :class:`DeviceProgram` is what the ICCA codegen emits for one offloaded region and what the
device runs, either with data (functional) or with shapes only (timing). It is plain data and
round-trips through JSON (:meth:`DeviceProgram.to_json` / :meth:`DeviceProgram.from_json`).

Vocabulary (T10 §4.1-4.2, Table 1):

* :class:`TensorExpr` -- an operator as a tensor expression: iteration axes with extents (the
  top-level reduction axes are summed across cores and may be partitioned), core-local axes
  of inner reductions (softmax's row, layer-norm's statistics), and for every tensor how its
  dimensions are indexed by affine combinations of axes (``h*stride + kh*dilation - pad``:
  T10 §5 "compound axis").
* :class:`RotatingTensor` -- an rTensor: spatial factor ``f_s``, temporal factor ``f_t`` and
  rotating pace ``rp``, per tensor dimension.
* :class:`ExecutionPlan` -- ``F_op`` per axis, the per-tensor temporal factors (per axis) and
  the loop order of the temporal steps; everything else derives from these
  (:mod:`runtime_sim.contract.layout`).
* :class:`OpProgram` -- one operator of a region: expression, plan, and which region tensors
  it reads and writes.
* :class:`Gather` -- a data-dependent index: an input whose dimension ``axis`` is selected
  by the row numbers held in another (integer) input, an embedding lookup. The access then
  indexes the *gathered view* ``take(tensor, ids, axis)`` (:func:`gathered_shape`), which is
  what every core holds a partition of (:mod:`runtime_sim.contract.layout`).

Expression trees (``TensorExpr.body`` / ``TensorExpr.epilogue``) are JSON dictionaries::

    {"op": "load", "input": i, "index": [AffineIndex-as-dict, ...]}
    {"op": "const", "value": 0.5}
    {"op": "axis", "axis": "k"}                       # value of an iteration variable
    {"op": "result"}                                  # epilogue only: the reduced value
    {"op": <unary>, "args": [e]}     unary in UNARY_OPS
    {"op": <binary>, "args": [a, b]} binary in BINARY_OPS (arithmetic and comparisons)
    {"op": "select", "args": [cond, a, b]}
    {"op": "cast", "dtype": "float32", "args": [e]}
    {"op": "reduce", "combiner": "sum"|"max"|"min", "axes": [local axis names], "args": [e]}
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

# numpy has no bfloat16: importing ml_dtypes registers it, so np.dtype("bfloat16") names
# the storage of that dtype everywhere the device and the compiler hold data
import ml_dtypes  # noqa: F401  pylint: disable=unused-import
import numpy as np

from runtime_sim.contract.errors import DeviceProgramError, describe_operator, short_name
from runtime_sim.contract.hardware import (  # the hardware module does not import programs
    INDEX_DTYPES,
)

if TYPE_CHECKING:
    from runtime_sim.contract.hardware import HardwareSpec

PROGRAM_FORMAT = "icca-device-program"
#: Version 2 added ``run_order`` (the regions of one model invocation, in call order).
PROGRAM_VERSION = 4
#: Versions this device reads. Version 3 added the preload schedule (Elk §4.5:
#: :class:`PreloadSchedule`, :attr:`OpProgram.preload_chunks`); a version-2 program has none
#: and runs exactly as before. Version 4 added gathered accesses (:class:`Gather`); a
#: program that uses one must say version 4, so that an older device refuses it rather than
#: reading the view indices as the tensor's.
READABLE_VERSIONS = (2, 3, 4)
#: The first version with :class:`Gather`.
GATHER_VERSION = 4

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
REDUCE_COMBINERS = ("sum", "max", "min")

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
        return cls(_name(d["name"], "axis name"), _int(d["extent"], "axis extent"),
                   _bool(d.get("reduce", False), "axis 'reduce'"))


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
        for term in _list(d.get("terms", ()), "index terms"):
            if not isinstance(term, (list, tuple)) or len(term) != 2:
                raise DeviceProgramError(f"an index term must be [axis, coefficient], not {term!r}")
            terms.append((_name(term[0], "index axis"), _int(term[1], "index coefficient")))
        return cls(tuple(terms), _int(d.get("offset", 0), "index offset"))

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
        return cls(_int(d["ids"], "gather ids input"), _int(d["axis"], "gather axis"),
                   _name(d.get("mode", "fast"), "gather mode"))


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
        raise DeviceProgramError(f"unknown gather mode {_short(mode)} (known: {', '.join(GATHER_MODES)})")
    bad = (ids < -n) | (ids >= n)
    if bad.any():
        raise DeviceProgramError(
            f"gather id {int(ids[bad].reshape(-1)[0])} is outside [-{n}, {n}) for a tensor of "
            f"{n} rows ({int(bad.sum())} ids out of range)")
    return np.where(ids < 0, ids + n, ids)


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
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TensorAccess":
        return cls(
            _name(d["name"], "tensor name"),
            tuple(_int(s, "tensor dimension") for s in _list(d["shape"], "tensor shape")),
            _name(d["dtype"], "dtype"),
            tuple(AffineIndex.from_dict(_map(i, "index")) for i in _list(d["indices"], "indices")),
            None if d.get("gather") is None else Gather.from_dict(_map(d["gather"], "gather")),
        )


@dataclass(frozen=True)
class TensorExpr:
    """An operator as a tensor expression (T10 §4.2 "Operator representation").

    ``body`` is evaluated over ``axes`` and ``local_axes``; when some of ``axes`` are
    reductions the output is the sum of ``body`` over them (the only combiner that can be
    split across cores), then ``epilogue`` (if any) maps that sum elementwise to the output.
    ``combiner`` ``"max"``/``"min"`` reduces them with max/min instead (max pooling's window):
    such reduction axes are never partitioned (:func:`runtime_sim.contract.layout.pinned_axes`), so
    each core reduces whole windows, while the output's spatial axes (read through the
    compound window index ``h*stride + kh - pad``) split like a convolution's.
    ``kind`` names the template in :mod:`schedules` that computes a sub-task on one core.
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

    @property
    def gather_ids(self) -> set[int]:
        """Inputs that hold the row numbers of a gathered input."""
        return {t.gather.ids for t in self.inputs if t.gather is not None}

    @property
    def merged_inner_axes(self) -> tuple[str, ...]:
        """Axes written inside a merged output dimension (:func:`merged_axes`), all but the
        outermost of each. A plan keeps them whole on every core
        (:func:`runtime_sim.contract.layout.pinned_axes`): then each core's output partition is one
        contiguous run of the merged dimension, a block like any other output's."""
        inner: list[str] = []
        for ix in self.output.indices:
            if len(ix.terms) > 1:
                inner += [a for a, _ in sorted(ix.terms, key=lambda t: -t[1])[1:]]
        return tuple(inner)

    def flops(self) -> int:
        """Multiply-accumulate work counted as 2 FLOP per body evaluation with reductions."""
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
            kind=_name(d["kind"], "operator kind"),
            axes=tuple(Axis.from_dict(_map(a, "axis")) for a in _list(d["axes"], "axes")),
            local_axes=tuple(Axis.from_dict(_map(a, "axis"))
                             for a in _list(d.get("local_axes", ()), "local_axes")),
            inputs=tuple(TensorAccess.from_dict(_map(t, "input")) for t in _list(d["inputs"], "inputs")),
            output=TensorAccess.from_dict(_map(d["output"], "output")),
            body=_map(d["body"], "body"),
            epilogue=None if d.get("epilogue") is None else _map(d["epilogue"], "epilogue"),
            epilogue_inputs=tuple(_int(i, "epilogue input")
                                  for i in _list(d.get("epilogue_inputs", ()), "epilogue_inputs")),
            combiner=_name(d.get("combiner", "sum"), "combiner"),
        )

    def tensor_summary(self) -> str:
        """Its tensors and their shapes as a message names them: ``inputs 'x' [1, 64, 56, 56]
        float32, 'w' [64, 64, 3, 3] float32; output [1, 64, 56, 56] float32``."""
        ins = ", ".join(f"'{short_name(t.name)}' {list(t.shape)} {t.dtype}" for t in self.inputs)
        return f"inputs {ins}; output {list(self.output.shape)} {self.output.dtype}"

    def structure_key(self) -> str:
        """The identity of this expression up to its tensors' names: canonical JSON of
        :meth:`to_dict` with every input and output name blanked. Two operators with equal
        keys plan, compute and cost the same (the same layer repeated in a model)."""
        data = self.to_dict()
        for access in (*data["inputs"], data["output"]):
            access["name"] = ""
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def __str__(self) -> str:
        def acc(t: TensorAccess) -> str:
            return f"{t.name}[{', '.join(str(i) for i in t.indices)}]"

        red = f" {self.combiner} over {','.join(self.reduce_axes)}" if self.reduce_axes else ""
        ins = " , ".join(acc(t) for t in self.inputs)
        return f"{self.kind}: {acc(self.output)} <- {ins}{red}"


@dataclass(frozen=True)
class RotatingTensor:
    """T10's rTensor (§4.1, Fig. 5): per tensor dimension, f_s, f_t and rp."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    spatial_partition_factor: tuple[int, ...]
    temporal_partition_factor: tuple[int, ...]
    rotating_pace: tuple[int, ...]


@dataclass(frozen=True)
class ExecutionPlan:
    """A compute-shift execution plan of one operator (T10 §4.2).

    ``op_partition[a]`` is F_op on axis ``a``; ``temporal[t][a]`` is the temporal factor of the
    ``t``-th tensor (inputs then output, as in :attr:`TensorExpr.tensors`) on axis ``a``
    (missing means 1); ``loop_order`` lists the axes that take temporal steps, outermost
    first.

    ``core_order`` maps sub-operators to physical cores (T10 §4.4, Elk §5): the axes of the
    operator, outermost first, in which the core grid is numbered row-major
    (:attr:`runtime_sim.contract.layout.OpLayout.grid`). Empty means the expression's own axis order.
    On a multi-chip system it decides which sub-operators share a chip: with the axes a
    tensor lacks innermost, the replicas of each of its sub-tensors sit on neighbouring cores.

    ``chips`` spreads the numbered cores over that many chips (:attr:`OpLayout.physical
    <runtime_sim.contract.layout.OpLayout.physical>`): core ``i`` of the grid is physical core
    ``(i // g) * cores_per_chip + i % g`` with ``g = num_cores / chips``, one equal contiguous
    group at the start of each chip. 1 (the default) places the cores contiguously from
    core 0.
    """

    op_partition: Mapping[str, int]
    temporal: tuple[Mapping[str, int], ...]
    loop_order: tuple[str, ...] = ()
    core_order: tuple[str, ...] = ()
    chips: int = 1

    def F(self, axis: str) -> int:
        return int(self.op_partition.get(axis, 1))

    def ft(self, tensor: int, axis: str) -> int:
        return int(self.temporal[tensor].get(axis, 1))

    @property
    def num_cores(self) -> int:
        n = 1
        for f in self.op_partition.values():
            n *= int(f)
        return n

    def to_dict(self) -> dict[str, Any]:
        d = {
            "op_partition": {a: int(f) for a, f in self.op_partition.items()},
            "temporal": [{a: int(f) for a, f in t.items() if int(f) != 1} for t in self.temporal],
            "loop_order": list(self.loop_order),
        }
        if self.core_order:  # only when not the default, so existing programs keep their bytes
            d["core_order"] = list(self.core_order)
        if self.chips != 1:  # likewise
            d["chips"] = int(self.chips)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExecutionPlan":
        return cls(
            op_partition={_name(a, "axis"): _int(f, "F_op")
                          for a, f in _map(d["op_partition"], "op_partition").items()},
            temporal=tuple({_name(a, "axis"): _int(f, "temporal factor")
                            for a, f in _map(t, "temporal factors").items()}
                           for t in _list(d["temporal"], "temporal")),
            loop_order=tuple(_name(a, "loop axis") for a in _list(d.get("loop_order", ()), "loop_order")),
            core_order=tuple(_name(a, "core order axis") for a in _list(d.get("core_order", ()), "core_order")),
            chips=_int(d.get("chips", 1), "chips"),
        )


@dataclass(frozen=True)
class VgmPlan:
    """A load-compute-store plan on a virtual global memory (the baseline T10 §2.2 measures).

    Every tensor has a home slice spread linearly over all cores; the operator is cut into
    output tiles of ``tiles[a]`` elements per spatial axis and processes reduction axes in
    chunks of ``tiles[a]``; tiles go round-robin to cores, each core fetching its input
    pieces from their home cores, computing, and storing its output tile home (Roller-style
    rTiles aligned to the matrix unit).
    """

    tiles: Mapping[str, int]

    def tile(self, axis: str, extent: int) -> int:
        return min(int(self.tiles.get(axis, extent)), extent)

    def to_dict(self) -> dict[str, Any]:
        return {"execution": "vgm", "tiles": {a: int(t) for a, t in self.tiles.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VgmPlan":
        return cls({_name(a, "axis"): _int(t, "tile") for a, t in _map(d["tiles"], "tiles").items()})


def plan_from_dict(d: Mapping[str, Any]) -> "ExecutionPlan | VgmPlan":
    """Either execution model of an operator, as stored in a program."""
    d = _map(d, "plan")
    if d.get("execution", "compute-shift") not in ("vgm", "compute-shift"):
        raise DeviceProgramError(f"unknown execution model {d.get('execution')!r} (use 'vgm' or a compute-shift plan)")
    if d.get("execution") == "vgm":
        return VgmPlan.from_dict(d)
    return ExecutionPlan.from_dict(d)


@dataclass(frozen=True)
class OpProgram:
    """One operator of a region: what it computes, how it is laid out, where data comes from.

    ``input_names``/``output_name`` name region tensors (region parameters, constants or
    outputs of earlier operators).

    ``idle_plan`` is where the operator's ``"resident"`` inputs (model state kept on chip,
    :data:`INPUT_SOURCES`) wait between runs: their placement under that plan of the same
    expression (T10 §4.3.2, the *idle state*), or :data:`IDLE_SPREAD`, each tensor cut into
    near-even blocks over all cores. Before running, a setup phase moves them into ``plan``
    (the *active state*). ``None`` means they rest in ``plan`` itself: no setup.
    """

    name: str
    expr: TensorExpr
    plan: "ExecutionPlan | VgmPlan"
    input_names: tuple[str, ...]
    output_name: str
    estimated_time_s: float = 0.0
    idle_plan: "ExecutionPlan | str | None" = None
    #: Preload state of its off-chip inputs (Elk §4.3): ``(input index, s)`` pairs; each
    #: partition shared by ``S`` replica cores is cut into ``s`` chunks (``s`` divides ``S``),
    #: see :mod:`runtime_sim.contract.preload_chunks`. Inputs not listed are preloaded whole (``s = 1``).
    preload_chunks: tuple[tuple[int, int], ...] = ()
    #: The operator in the user's words, from its composite (``"conv2d + bias + relu"``):
    #: what messages call it (its name is generated from TVM's region symbol).
    label: str = ""
    #: Whether ``plan`` came from tuning records (``tvm_icca.use_database``) rather than the
    #: compiler's own search: provenance for reports (run statistics count such operators),
    #: never read by execution or timing.
    tuned: bool = False

    def describe(self) -> str:
        """The operator as a message names it (:func:`runtime_sim.contract.errors.describe_operator`)."""
        return describe_operator(self.name, self.label or self.expr.kind)

    def chunks_of(self, t: int) -> int:
        """Chunks input ``t``'s partitions are cut into in the preload state (1: whole)."""
        for index, s in self.preload_chunks:
            if index == t:
                return int(s)
        return 1

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "expr": self.expr.to_dict(),
            "plan": self.plan.to_dict(),
            "input_names": list(self.input_names),
            "output_name": self.output_name,
            "estimated_time_s": self.estimated_time_s,
        }
        if self.idle_plan is not None:
            out["idle_plan"] = (self.idle_plan if isinstance(self.idle_plan, str)
                                else self.idle_plan.to_dict())
        if self.preload_chunks:
            out["preload_chunks"] = [[int(t), int(s)] for t, s in self.preload_chunks]
        if self.label:
            out["label"] = self.label
        if self.tuned:
            out["tuned"] = True
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OpProgram":
        return cls(
            name=_name(d["name"], "operator name"),
            expr=TensorExpr.from_dict(_map(d["expr"], "expr")),
            plan=plan_from_dict(d["plan"]),
            input_names=tuple(_name(n, "input name") for n in _list(d["input_names"], "input_names")),
            output_name=_name(d["output_name"], "output name"),
            estimated_time_s=_float(d.get("estimated_time_s", 0.0), "estimated_time_s"),
            idle_plan=_idle_from_dict(d.get("idle_plan")),
            preload_chunks=tuple(
                (_int(pair[0], "preload_chunks input"), _int(pair[1], "preload_chunks count"))
                for pair in (_list(p, "preload_chunks entry") for p in
                             _list(d.get("preload_chunks", ()), "preload_chunks"))
            ),
            label=_name(d.get("label", ""), "operator label", empty=True),
            tuned=_bool(d.get("tuned", False), "tuned"),
        )


#: Idle placement of resident tensors that is no plan of their operator: every tensor cut
#: into near-even blocks, one per core (the smallest footprint any operator can idle in).
IDLE_SPREAD = "spread"


def _idle_from_dict(value: Any) -> "ExecutionPlan | str | None":
    if not value:
        return None
    if value == IDLE_SPREAD:
        return IDLE_SPREAD
    if isinstance(value, str):
        raise DeviceProgramError(f"unknown idle placement {value!r}; use '{IDLE_SPREAD}' or a plan")
    return ExecutionPlan.from_dict(_map(value, "idle_plan"))


#: Where a region input lives before the region runs: sent by the host, resident in off-chip
#: HBM (weights, KV caches), already on chip (produced by the previous region), or model state
#: kept on chip between runs in the idle placement of the operator that reads it
#: (:attr:`OpProgram.idle_plan`, T10 §4.3.2).
INPUT_SOURCES = ("host", "hbm", "chip", "resident")


def model_state_source(has_hbm: bool, on_chip: bool = False) -> str:
    """Where model state (weights, KV caches, constants baked into a program) waits before a
    region runs: kept on chip (``"resident"``) when the whole model is, else in HBM on a chip
    that has it, else the host sends it with every run. The one rule the compiler writes into
    programs and the timing simulator assumes for a constant that names no source."""
    if on_chip:
        return "resident"
    return "hbm" if has_hbm else "host"


@dataclass(frozen=True)
class TensorDecl:
    name: str
    shape: tuple[int, ...]
    dtype: str
    source: str = "host"

    def __post_init__(self) -> None:
        if self.source not in INPUT_SOURCES:
            raise DeviceProgramError(f"tensor '{self.name}': source must be one of {INPUT_SOURCES}")

    @property
    def nbytes(self) -> int:
        return tensor_bytes(self.shape, self.dtype)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "source": self.source}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TensorDecl":
        return cls(_name(d["name"], "input name"),
                   tuple(_int(s, "tensor dimension") for s in _list(d["shape"], "input shape")),
                   _name(d["dtype"], "dtype"), _name(d.get("source", "host"), "input source"))


#: Instructions of a preload stream (Elk §4.5, Fig. 15).
PRELOAD, EXECUTE = "preload", "execute"


@dataclass(frozen=True)
class PreloadSchedule:
    """The part of a model's preload/execute instruction stream issued while this region runs
    (Elk §4.5): ``("execute", j)`` runs operator ``j`` of this program;
    ``("preload", k, j)`` is ``preload_async`` of operator ``j`` of the region call ``k``
    positions later in :attr:`DeviceProgram.run_order` (``k = 0``: this call).

    Semantics (one-way synchronization, Elk §4.5): ``execute`` blocks every later instruction
    until it ends; preloads run one after another; ``preload(i)`` blocks only
    ``execute(i)``. The whole-run stream, its checks and the SRAM it implies are
    :mod:`runtime_sim.contract.stream`; what a preload leaves on the cores is :mod:`runtime_sim.contract.preload_chunks`.
    ``design`` names the compiler design that produced it (``"ideal"`` is the roofline that
    gives preloading its own interconnect and its own SRAM and distributes for free).
    """

    design: str
    stream: tuple[tuple, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"design": self.design, "stream": [list(i) for i in self.stream]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PreloadSchedule":
        stream = []
        for entry in _list(d.get("stream", ()), "preload stream"):
            entry = _list(entry, "preload stream entry")
            if not entry or entry[0] not in (PRELOAD, EXECUTE):
                raise DeviceProgramError(f"preload stream entry {_short(entry)} is neither "
                                         f"'{PRELOAD}' nor '{EXECUTE}'")
            arity = 3 if entry[0] == PRELOAD else 2
            if len(entry) != arity:
                raise DeviceProgramError(f"preload stream entry {_short(entry)} needs {arity - 1} "
                                         "integer argument(s)")
            stream.append((entry[0], *(_int(v, "preload stream index") for v in entry[1:])))
        return cls(_name(d.get("design", ""), "preload design", empty=True), tuple(stream))


@dataclass(frozen=True)
class DeviceProgram:
    """Everything the device needs to run one offloaded region.

    ``inputs`` are the region's parameters in call order; ``constants`` are tensors baked into
    the program as ``{"dtype", "shape", "data"}`` with ``data`` the base64 of the row-major
    little-endian bytes (:mod:`runtime_sim.contract.constants`); a timing-only program may omit
    ``data``. ``outputs`` are the region results in order; ``host_outputs`` names those the
    host reads after the region (a host operator or ``main``'s result consumes them), which
    travel chip -> host over the host link; the others stay on chip for later regions.
    """

    region: str
    hardware: Mapping[str, Any]
    inputs: tuple[TensorDecl, ...]
    outputs: tuple[str, ...]
    ops: tuple[OpProgram, ...]
    constants: Mapping[str, Any] = field(default_factory=dict)
    module: str = ""  # identifies the compiled module the region belongs to (run grouping)
    #: The regions one invocation of the module runs, in call order (this one among them):
    #: tells the device where a model run ends, even when a region runs several times.
    run_order: tuple[str, ...] = ()
    host_outputs: tuple[str, ...] = ()
    #: Elk's preload/execute stream segment of this call (``None``: operators fetch their
    #: off-chip inputs with the default next-operator prefetch).
    preload_schedule: PreloadSchedule | None = None
    format: str = PROGRAM_FORMAT
    version: int = PROGRAM_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "version": self.version,
            "region": self.region,
            "hardware": dict(self.hardware),
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": list(self.outputs),
            "ops": [op.to_dict() for op in self.ops],
            "constants": dict(self.constants),
            "module": self.module,
            "run_order": list(self.run_order),
            # written only when set: programs without host reads keep their JSON
            **({"host_outputs": list(self.host_outputs)} if self.host_outputs else {}),
            **({"preload_schedule": self.preload_schedule.to_dict()}
               if self.preload_schedule is not None else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DeviceProgram":
        # guard the top-level type, the format and the version before reading anything else
        if not isinstance(d, Mapping):
            raise DeviceProgramError(
                f"a device program must be a JSON object, not {type(d).__name__}"
            )
        if d.get("format") != PROGRAM_FORMAT:
            raise DeviceProgramError(f"not an ICCA device program (format={_short(d.get('format'))})")
        version = d.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_VERSIONS:
            raise DeviceProgramError(
                f"device program version {_short(version)} is not supported "
                f"(this device runs versions {', '.join(map(str, READABLE_VERSIONS))})"
            )
        missing = [k for k in ("region", "hardware", "inputs", "outputs", "ops") if k not in d]
        if missing:
            raise DeviceProgramError(f"malformed device program: missing {', '.join(missing)}")
        region = _short(d.get("region"))
        try:
            return cls(
                region=_name(d["region"], "region name"),
                hardware=dict(_map(d["hardware"], "hardware")),
                inputs=tuple(TensorDecl.from_dict(_map(t, "input")) for t in _list(d["inputs"], "inputs")),
                outputs=tuple(_name(o, "output name") for o in _list(d["outputs"], "outputs")),
                ops=tuple(OpProgram.from_dict(_map(op, "operator")) for op in _list(d["ops"], "ops")),
                constants=dict(_map(d.get("constants", {}), "constants")),
                module=_name(d.get("module", ""), "module", empty=True),
                run_order=tuple(_name(r, "region name") for r in _list(d.get("run_order", ()), "run_order")),
                host_outputs=tuple(_name(o, "host output name")
                                   for o in _list(d.get("host_outputs", ()), "host_outputs")),
                preload_schedule=(PreloadSchedule.from_dict(_map(d["preload_schedule"], "preload_schedule"))
                                  if d.get("preload_schedule") is not None else None),
                version=version,
            )
        except DeviceProgramError as err:
            raise DeviceProgramError(f"malformed device program (region {region}): {err}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            what = f"missing field {err}" if isinstance(err, KeyError) else str(err)
            raise DeviceProgramError(f"malformed device program (region {region}): {what}") from None

    @classmethod
    def from_json(cls, text: str) -> "DeviceProgram":
        if not isinstance(text, (str, bytes, bytearray)):
            raise DeviceProgramError(f"a device program is JSON text, not {type(text).__name__}")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as err:  # JSONDecodeError, bad UTF-8, nesting
            raise DeviceProgramError(f"device program is not valid JSON: {err}") from None
        return cls.from_dict(data)

    def validate(self, hw: "HardwareSpec | None" = None) -> None:
        """:func:`validate_program` of this program (remembered: a program is checked once
        per chip)."""
        validate_program(self, hw)


_DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8,
                "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def tensor_bytes(shape: Sequence[int], dtype: str) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n * dtype_bytes(dtype)


def dtype_bytes(dtype: str) -> int:
    try:
        return _DTYPE_BYTES[str(dtype)]
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


# -- reading and checking programs --------------------------------------------------------------
#: Largest extent of an axis or tensor dimension a program may carry (int32 indexing of one
#: dimension; a 70B-parameter model's largest dimension, its vocabulary or context, is < 2**18).
MAX_EXTENT = 2**31 - 1


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:30] + "..." + text[-6:]


def _name(value: Any, what: str, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise DeviceProgramError(f"{what} must be a{'' if empty else ' non-empty'} string, not {_short(value)}")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    raise DeviceProgramError(f"{what} must be an integer, not {_short(value)}")


def _float(value: Any, what: str) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value)):
        return float(value)
    raise DeviceProgramError(f"{what} must be a finite number, not {_short(value)}")


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise DeviceProgramError(f"{what} must be true or false, not {_short(value)}")
    return value


def _list(value: Any, what: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise DeviceProgramError(f"{what} must be a list, not {type(value).__name__}")
    return list(value)


def _map(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DeviceProgramError(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


_ARITY = {**{op: 1 for op in UNARY_OPS}, **{op: 2 for op in BINARY_OPS},
          "select": 3, "cast": 1, "reduce": 1}


def validate_program(program: "DeviceProgram", hw: "HardwareSpec | None" = None) -> None:
    """Check a whole device program before anything runs it; raise one clear error or nothing.

    Both ways of running a program -- the functional device
    (:meth:`runtime_sim.functional.device.SimulatedDevice.run`) and the timing simulators
    (:func:`runtime_sim.timing.simulate_timing`, :func:`runtime_sim.timing.vgm_timing.simulate_vgm_timing`)
    -- call this first, so a program one of them refuses is refused by the other, with the
    same error type. Checked here, for every operator: the program's own fields (format,
    version, names, hardware description), every tensor's shape (positive integers up to
    :data:`MAX_EXTENT`) and dtype, the operator kind (a template of :mod:`schedules`), every
    axis (unique names, positive extents), every index (axes of the expression, one per tensor
    dimension), the output (one plain spatial axis per dimension whose extent is the
    dimension), simple input reads within the tensor, the expression tree (known ops, arity,
    loads of existing inputs, reductions over core-local axes, ``result`` only in the
    epilogue), the plan (factors on known axes, one temporal map per tensor), that every
    tensor an operator reads exists with the shape and dtype it reads it as, and that every
    region output is computed. With ``hw``: every dtype is one the chip computes
    (:class:`UnsupportedDtypeError`, as the device says it). Without ``hw`` the program's
    ``hardware`` must be a valid :class:`HardwareSpec` (:class:`InvalidHardwareSpecError`).

    Whether a plan is a valid T10 layout on the chip (rings, padding, core count) is the
    layout's own check, :func:`runtime_sim.contract.layout.checked_layout`, which both executors call
    per operator after this.
    """
    from runtime_sim.contract.hardware import (  # the hardware module does not import programs
        HardwareSpec,
    )

    if not isinstance(program, DeviceProgram):
        raise DeviceProgramError(f"expected a DeviceProgram, got {type(program).__name__}")
    if hw is None:
        hw = HardwareSpec.from_dict(_map(program.hardware, "program hardware"))
    if getattr(program, "_validated_for", None) == hw:
        return
    _check_program(program, hw)
    object.__setattr__(program, "_validated_for", hw)


def _check_program(program: "DeviceProgram", hw: Any) -> None:
    from schedules import template_kinds  # schedules imports this module: import on use

    def fail(why: str) -> DeviceProgramError:
        return DeviceProgramError(f"invalid device program (region {_short(program.region)}): {why}")

    if program.format != PROGRAM_FORMAT or program.version not in READABLE_VERSIONS:
        raise fail(f"format {program.format!r} version {program.version!r} is not "
                   f"{PROGRAM_FORMAT!r} version {'/'.join(map(str, READABLE_VERSIONS))}")
    if program.preload_schedule is not None and program.version < 3:
        raise fail("a preload schedule needs program version 3")
    if program.version < GATHER_VERSION and any(
            getattr(acc, "gather", None) is not None for op in program.ops
            for acc in getattr(getattr(op, "expr", None), "inputs", ())):
        raise fail(f"a gathered access needs program version {GATHER_VERSION}")
    try:
        _name(program.region, "region name")
        _name(program.module, "module", empty=True)
        for r in program.run_order:
            _name(r, "run_order entry")
    except DeviceProgramError as err:
        raise fail(str(err)) from None

    def check_shape(shape: Any, what: str) -> tuple[int, ...]:
        if not isinstance(shape, (tuple, list)):
            raise fail(f"{what} has shape {_short(shape)}, not a list of dimensions")
        for s in shape:
            if isinstance(s, bool) or not isinstance(s, numbers.Integral) or not 1 <= s <= MAX_EXTENT:
                raise fail(f"{what} has shape {_short(list(shape))}: every dimension must be an "
                           f"integer in [1, {MAX_EXTENT}]")
        return tuple(int(s) for s in shape)

    def check_dtype(dtype: Any, what: str, mask: bool = False, index: bool = False) -> str:
        if not isinstance(dtype, str) or dtype not in _DTYPE_BYTES:
            raise fail(f"{what} has unknown dtype {_short(dtype)}")
        if hw is not None:
            # UnsupportedDtypeError, as the device raises it; read-only tensors may be masks,
            # and region tensors or gather ids may hold row numbers
            hw.check_dtype(dtype, what, mask=mask, index=index)
        return dtype

    tensors: dict[str, tuple[tuple[int, ...], str]] = {}
    for decl in program.inputs:
        if not isinstance(decl, TensorDecl):
            raise fail(f"input {_short(decl)} is not a TensorDecl")
        what = f"input '{decl.name}'"
        if not isinstance(decl.name, str) or not decl.name or decl.name in tensors:
            raise fail(f"{what}: input names must be unique non-empty strings")
        if decl.source not in INPUT_SOURCES:
            raise fail(f"{what}: source {_short(decl.source)} is not one of {INPUT_SOURCES}")
        tensors[decl.name] = (check_shape(decl.shape, what), check_dtype(decl.dtype, what, True, True))
    if not isinstance(program.constants, Mapping):
        raise fail("constants must be a JSON object")
    for name, entry in program.constants.items():
        what = f"constant '{short_name(name)}'"
        if not isinstance(name, str) or not name or name in tensors:
            raise fail(f"{what}: constant names must be unique non-empty strings, distinct from inputs")
        if not isinstance(entry, Mapping) or "shape" not in entry or "dtype" not in entry:
            raise fail(f"{what} must be an object with 'shape' and 'dtype'")
        source = entry.get("source")
        if source is not None and source not in INPUT_SOURCES:
            raise fail(f"{what} has unknown source {_short(source)}")
        if "data" in entry and not isinstance(entry["data"], str):
            raise fail(f"{what}: 'data' must be base64 text")
        shape = entry["shape"]
        # a scalar constant has shape []
        tensors[name] = (check_shape(shape, what), check_dtype(entry["dtype"], what, True, True))

    kinds = template_kinds()
    for i, op in enumerate(program.ops):
        if not isinstance(op, OpProgram):
            raise fail(f"operator {i} is not an OpProgram")
        _check_op(op, kinds, tensors, check_shape, check_dtype, fail)
        tensors[op.output_name] = (tuple(op.expr.output.shape), op.expr.output.dtype)
    if not isinstance(program.outputs, (tuple, list)):
        raise fail("outputs must be a list of tensor names")
    for name in program.outputs:
        if name not in tensors:
            raise fail(f"output {_short(name)} is never computed (no operator writes it and it is "
                       "no input or constant)")
    host_outputs = getattr(program, "host_outputs", ())
    if not isinstance(host_outputs, (tuple, list)):
        raise fail("host_outputs must be a list of tensor names")
    for name in host_outputs:
        if name not in program.outputs:
            raise fail(f"host output {_short(name)} is not an output of the region")
    _check_preload_schedule(program, fail)


def _check_preload_schedule(program: "DeviceProgram", fail: Any) -> None:
    """The parts of a preload stream one program can check alone: every operator executed
    once, in order; local preload targets exist; chunk counts positive on existing inputs.
    Cross-call references are checked over the whole run (:mod:`runtime_sim.contract.stream`)."""
    for op in program.ops:
        for t, s in op.preload_chunks:
            if not 0 <= t < len(op.expr.inputs) or s < 1:
                raise fail(f"operator '{short_name(op.name)}': preload_chunks ({t}, {s}) needs an input "
                           f"index below {len(op.expr.inputs)} and at least one chunk")
    schedule = program.preload_schedule
    if schedule is None:
        return
    if not isinstance(schedule, PreloadSchedule):
        raise fail("preload_schedule must be a PreloadSchedule")
    executed = [entry[1] for entry in schedule.stream if entry[0] == EXECUTE]
    if executed != list(range(len(program.ops))):
        raise fail(f"the preload stream must execute operators 0..{len(program.ops) - 1} once each, "
                   f"in order; it executes {_short(executed)}")
    for entry in schedule.stream:
        if entry[0] == PRELOAD:
            _, offset, j = entry
            if offset < 0 or j < 0 or (offset == 0 and j >= len(program.ops)):
                raise fail(f"preload stream entry {_short(list(entry))} names no operator of "
                           "this or a later region call")


def _check_op(op: "OpProgram", kinds: Sequence[str], tensors: dict, check_shape: Any,
              check_dtype: Any, fail: Any) -> None:
    name = op.name if isinstance(op.name, str) else _short(op.name)
    where = f"operator '{short_name(name)}'"

    def bad(why: str) -> DeviceProgramError:
        return fail(f"{where}: {why}")

    if not isinstance(op.name, str) or not op.name:
        raise bad("the operator name must be a non-empty string")
    expr = op.expr
    if not isinstance(expr, TensorExpr):
        raise bad("expr is not a TensorExpr")
    if expr.kind not in kinds:
        raise bad(f"unknown operator kind {_short(expr.kind)} (known: {', '.join(kinds)})")
    extents: dict[str, int] = {}
    for group in (expr.axes, expr.local_axes):
        for a in group:
            if not isinstance(a, Axis) or not isinstance(a.name, str) or not a.name:
                raise bad(f"axis {_short(a)} is not a named axis")
            if a.name in extents:
                raise bad(f"axis '{a.name}' is declared twice")
            if isinstance(a.extent, bool) or not isinstance(a.extent, numbers.Integral) \
                    or not 1 <= a.extent <= MAX_EXTENT:
                raise bad(f"axis '{a.name}' has extent {_short(a.extent)}, not an integer in [1, {MAX_EXTENT}]")
            if not isinstance(a.reduce, bool):
                raise bad(f"axis '{a.name}': reduce must be true or false")
            extents[a.name] = int(a.extent)
    top = {a.name: a for a in expr.axes}
    local = {a.name for a in expr.local_axes}

    def check_index(ix: Any, what: str, allowed: Mapping[str, Any] | set) -> AffineIndex:
        if not isinstance(ix, AffineIndex):
            raise bad(f"{what} is not an affine index")
        for a, c in ix.terms:
            if a not in allowed:
                raise bad(f"{what} uses unknown axis {_short(a)}")
            if isinstance(c, bool) or not isinstance(c, numbers.Integral) or abs(c) > MAX_EXTENT:
                raise bad(f"{what} has coefficient {_short(c)}, not an integer of magnitude <= {MAX_EXTENT}")
        if isinstance(ix.offset, bool) or not isinstance(ix.offset, numbers.Integral) \
                or abs(ix.offset) > MAX_EXTENT:
            raise bad(f"{what} has offset {_short(ix.offset)}, not an integer of magnitude <= {MAX_EXTENT}")
        return ix

    def check_access(acc: Any, what: str, mask: bool, piecewise: bool = False,
                     index: bool = False) -> None:
        if not isinstance(acc, TensorAccess):
            raise bad(f"{what} is not a tensor access")
        shape = check_shape(acc.shape, f"{where}, {what} '{acc.name}'")
        check_dtype(acc.dtype, f"{where}, {what} '{acc.name}'", mask, index)
        if acc.gather is not None:
            shape = check_gather(acc, what, shape)
        if len(acc.indices) != len(shape):
            raise bad(f"{what} '{acc.name}' has {len(shape)} dimensions but {len(acc.indices)} indices")
        for d, ix in enumerate(acc.indices):
            check_index(ix, f"index {d} of {what} '{acc.name}'", extents)
            if ix.is_simple and extents[ix.terms[0][0]] > shape[d] and not piecewise:
                raise bad(f"axis '{ix.terms[0][0]}' (extent {extents[ix.terms[0][0]]}) indexes "
                          f"dimension {d} of {what} '{acc.name}', which has {shape[d]} elements")

    n_in = len(expr.inputs)

    def check_gather(acc: TensorAccess, what: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The gathered view's shape, once the gather itself is sound (see :class:`Gather`)."""
        g = acc.gather
        if not isinstance(g, Gather):
            raise bad(f"{what} '{acc.name}': gather is not a Gather")
        ids = g.ids
        if isinstance(ids, bool) or not isinstance(ids, numbers.Integral) or not 0 <= ids < n_in:
            raise bad(f"{what} '{acc.name}': gather ids {_short(ids)} is not an input index in [0, {n_in})")
        src = expr.inputs[ids]
        if not isinstance(src, TensorAccess) or src is acc or src.gather is not None:
            raise bad(f"{what} '{acc.name}': gather ids must be another, plain input")
        if src.dtype not in INDEX_DTYPES:
            raise bad(f"{what} '{acc.name}': gather ids '{src.name}' are {_short(src.dtype)}, "
                      f"not one of {', '.join(INDEX_DTYPES)}")
        if isinstance(g.axis, bool) or not isinstance(g.axis, numbers.Integral) \
                or not 0 <= g.axis < len(shape):
            raise bad(f"{what} '{acc.name}': gather axis {_short(g.axis)} is not a dimension "
                      f"of its {len(shape)}")
        if g.mode not in GATHER_MODES:
            raise bad(f"{what} '{acc.name}': unknown gather mode {_short(g.mode)} "
                      f"(known: {', '.join(GATHER_MODES)})")
        view = gathered_shape(shape, check_shape(src.shape, f"{where}, gather ids"), g.axis)
        span = tuple(acc.indices[g.axis:g.axis + len(src.shape)]) \
            if len(acc.indices) == len(view) else None
        if span != tuple(src.indices):
            raise bad(f"{what} '{acc.name}': gather ids '{src.name}' must be read at the view's "
                      f"indices of dimensions {g.axis}..{g.axis + len(src.shape) - 1}")
        if t_of(acc) in expr.epilogue_inputs:
            raise bad(f"{what} '{acc.name}': a gathered input cannot be an epilogue input")
        return view

    def t_of(acc: TensorAccess) -> int:
        return next(i for i, a in enumerate(expr.inputs) if a is acc)

    try:
        guarded = guarded_inputs(expr)  # a piecewise read (concat) may index past its input
    except (TypeError, AttributeError):
        guarded = set()  # a malformed tree: refused by check_tree below
    try:
        ids_inputs = {a.gather.ids for a in expr.inputs
                      if isinstance(a, TensorAccess) and isinstance(a.gather, Gather)}
    except AttributeError:
        ids_inputs = set()
    for t, acc in enumerate(expr.inputs):
        check_access(acc, f"input {t}", True, piecewise=t in guarded, index=t in ids_inputs)
    check_access(expr.output, "output", False)
    out_axes = []
    for d, ix in enumerate(expr.output.indices):
        merged = merged_axes(ix, extents)
        if merged is None or any(a not in top or top[a].reduce or a in out_axes for a in merged):
            raise bad(f"output index {d} ({ix}) must be one plain spatial axis (or spatial axes "
                      "merged row-major), each used once")
        size = math.prod(extents[a] for a in merged)
        if size != expr.output.shape[d]:
            raise bad(f"output axes {list(merged)} span {size} positions, the output dimension {d} "
                      f"has {expr.output.shape[d]}")
        out_axes.extend(merged)
    if expr.combiner not in REDUCE_COMBINERS:
        raise bad(f"unknown combiner {_short(expr.combiner)} of the reduction axes "
                  f"(known: {', '.join(REDUCE_COMBINERS)})")
    for i in expr.epilogue_inputs:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < n_in:
            raise bad(f"epilogue input {_short(i)} is not an input index in [0, {n_in})")

    plan = op.plan

    def whole(t: int, d: int) -> bool:
        """Whether every core holds all of dimension ``d`` of input ``t`` (the plan neither
        splits nor rotates it), so the body may read it at any position."""
        acc = expr.inputs[t]
        ix = acc.indices[d]
        if not ix.is_simple or extents[ix.terms[0][0]] != acc.shape[d]:
            return False
        if isinstance(plan, ExecutionPlan):
            a = ix.terms[0][0]
            return plan.F(a) == 1 and all(plan.ft(s, a) == 1 for s in range(len(plan.temporal)))
        return plan.tile(ix.terms[0][0], extents[ix.terms[0][0]]) >= extents[ix.terms[0][0]]

    def follows() -> dict[str, str]:
        # pylint: disable=import-outside-toplevel
        from runtime_sim.contract.layout import (  # the layout contract builds on this module
            local_splits,
        )

        if "follow" not in memo:
            try:
                memo["follow"] = local_splits(expr) if isinstance(plan, ExecutionPlan) else {}
            except (TypeError, KeyError, ValueError, AttributeError, DeviceProgramError):
                memo["follow"] = {}  # a malformed tree: refused by the checks that follow
        return memo["follow"]

    memo: dict[str, dict[str, str]] = {}

    def check_load(node: Mapping[str, Any], what: str, axes: Mapping[str, Any] | set,
                   bound: frozenset, epilogue: bool) -> None:
        t = node.get("input")
        if isinstance(t, bool) or not isinstance(t, numbers.Integral) or not 0 <= t < n_in:
            raise bad(f"{what}: load of input {_short(t)}, the operator has {n_in} inputs")
        acc = expr.inputs[t]
        index = node.get("index")
        rank = len(acc.indices)
        if not isinstance(index, (list, tuple)) or len(index) != rank:
            raise bad(f"{what}: load of input {t} needs {rank} indices, got {_short(index)}")
        if epilogue and t not in expr.epilogue_inputs:
            raise bad(f"{what}: reads input {t} ('{acc.name}'), which is not among the "
                      f"epilogue_inputs {list(expr.epilogue_inputs)}")
        if epilogue and isinstance(plan, ExecutionPlan) and t < len(plan.temporal) and \
                any(plan.ft(t, a) > 1 for a in top):
            raise bad(f"{what}: reads input '{acc.name}', which rotates (epilogue inputs stay in place)")
        for d, ix in enumerate(index):
            where_ = f"{what}: load of input {t} ('{acc.name}'), index {d}"
            try:
                parsed = AffineIndex.from_dict(_map(ix, "index"))
            except (DeviceProgramError, KeyError) as err:
                raise bad(f"{where_}: {err}") from None
            check_index(parsed, where_, axes)
            if acc.gather is not None and parsed != acc.indices[d]:
                raise bad(f"{where_} ({parsed}): a gathered input is read only at its access "
                          f"({acc.indices[d]})")
            unbound = [a for a in parsed.axes if a in local and a not in bound]
            if unbound:
                raise bad(f"{where_}: core-local axis '{unbound[0]}' is used outside a reduce over it")
            if parsed == acc.indices[d]:
                continue
            if parsed.is_simple and acc.indices[d].is_simple and \
                    follows().get(parsed.terms[0][0]) == acc.indices[d].terms[0][0]:
                continue  # a core-local axis split with the placing axis: this core's share
            # any other read: core-local axes only, inside the tensor, on a dimension every
            # core holds whole (what the device can serve from its own buffer)
            if any(a not in local for a in parsed.axes) or not whole(t, d):
                raise bad(f"{where_} ({parsed}) differs from the access that places the tensor "
                          f"({acc.indices[d]}): other reads must use core-local axes on a "
                          "dimension the plan keeps whole on every core")
            lo = parsed.offset + sum(min(0, c * (extents[a] - 1)) for a, c in parsed.terms)
            hi = parsed.offset + sum(max(0, c * (extents[a] - 1)) for a, c in parsed.terms)
            if lo < 0 or hi >= acc.shape[d]:
                raise bad(f"{where_} ({parsed}) reads [{lo}, {hi}], outside the dimension of {acc.shape[d]}")

    def check_tree(root: Any, what: str, axes: Mapping[str, Any] | set, epilogue: bool) -> None:
        stack = [(root, frozenset())]
        while stack:
            node, bound = stack.pop()
            if not isinstance(node, Mapping) or not isinstance(node.get("op"), str):
                raise bad(f"{what}: node {_short(node)} is not an expression")
            kind = node["op"]
            if kind == "load":
                check_load(node, what, axes, bound, epilogue)
            elif kind == "const":
                value = node.get("value")
                if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
                    raise bad(f"{what}: constant {_short(value)} is not a number")
            elif kind == "axis":
                a = node.get("axis")
                if not isinstance(a, str) or a not in axes:
                    raise bad(f"{what}: reads unknown axis {_short(a)}")
                if a in local and a not in bound:
                    raise bad(f"{what}: core-local axis '{a}' is used outside a reduce over it")
            elif kind == "result":
                if not epilogue:
                    raise bad(f"{what}: 'result' is only valid in an epilogue")
            elif kind in _ARITY:
                args = node.get("args")
                if not isinstance(args, (list, tuple)) or len(args) != _ARITY[kind]:
                    raise bad(f"{what}: '{kind}' takes {_ARITY[kind]} argument(s), got {_short(args)}")
                if kind == "cast" and node.get("dtype") not in _DTYPE_BYTES:
                    raise bad(f"{what}: cast to unknown dtype {_short(node.get('dtype'))}")
                if kind == "reduce":
                    if node.get("combiner", "sum") not in REDUCE_COMBINERS:
                        raise bad(f"{what}: unknown reduce combiner {_short(node.get('combiner'))}")
                    raxes = node.get("axes")
                    if not isinstance(raxes, (list, tuple)) or not raxes or \
                            any(not isinstance(a, str) or a not in local or a in bound for a in raxes) \
                            or len(set(raxes)) != len(raxes):
                        raise bad(f"{what}: reduce over {_short(raxes)}, not distinct unbound core-local "
                                  f"axes of {sorted(local)}")
                    bound = bound | frozenset(raxes)
                stack.extend((arg, bound) for arg in args)
            else:
                raise bad(f"{what}: unknown expression op {_short(kind)}")


    def check_plan(plan: Any, what: str) -> None:
        if isinstance(plan, VgmPlan):
            if not isinstance(plan.tiles, Mapping):
                raise bad(f"{what}: tiles must be a JSON object")
            for a, size in plan.tiles.items():
                if a not in top:
                    raise bad(f"{what}: tile on unknown axis {_short(a)}")
                if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
                    raise bad(f"{what}: tile {_short(size)} on '{a}' is not a positive integer")
            return
        if not isinstance(plan, ExecutionPlan):
            raise bad(f"{what} is not an execution plan")
        if not isinstance(plan.op_partition, Mapping):
            raise bad(f"{what}: op_partition must be a JSON object")
        for a, f in plan.op_partition.items():
            if a not in top:
                raise bad(f"{what}: F_op on unknown axis {_short(a)}")
            if isinstance(f, bool) or not isinstance(f, numbers.Integral) or not 1 <= f <= extents[a]:
                raise bad(f"{what}: F_op {_short(f)} on '{a}' is not an integer in [1, {extents[a]}]")
        if not isinstance(plan.temporal, (tuple, list)) or len(plan.temporal) != n_in + 1:
            raise bad(f"{what}: needs one temporal map per tensor ({n_in + 1}), got "
                      f"{len(plan.temporal) if isinstance(plan.temporal, (tuple, list)) else 'none'}")
        for t, factors in enumerate(plan.temporal):
            if not isinstance(factors, Mapping):
                raise bad(f"{what}: temporal factors of tensor {t} must be a JSON object")
            for a, f in factors.items():
                if a not in top:
                    raise bad(f"{what}: temporal factor of tensor {t} on unknown axis {_short(a)}")
                if isinstance(f, bool) or not isinstance(f, numbers.Integral) or f < 1:
                    raise bad(f"{what}: temporal factor {_short(f)} of tensor {t} on '{a}' is not a positive integer")
        if len(set(plan.loop_order)) != len(plan.loop_order) or any(a not in top for a in plan.loop_order):
            raise bad(f"{what}: loop_order {_short(list(plan.loop_order))} must name distinct axes of the operator")

    check_plan(op.plan, "plan")
    if op.idle_plan is not None and op.idle_plan != IDLE_SPREAD:
        check_plan(op.idle_plan, "idle_plan")
    check_tree(expr.body, "body", extents, epilogue=False)
    if expr.epilogue is not None:
        check_tree(expr.epilogue, "epilogue", set(out_axes) | local, epilogue=True)
    if not isinstance(op.estimated_time_s, numbers.Real) or not math.isfinite(op.estimated_time_s):
        raise bad(f"estimated_time_s {_short(op.estimated_time_s)} is not a finite number")
    if len(op.input_names) != n_in:
        raise bad(f"names {len(op.input_names)} inputs, its expression has {n_in}")
    for t, tname in enumerate(op.input_names):
        if tname not in tensors:
            raise bad(f"reads unknown tensor {_short(tname)} (not an input, constant or earlier output)")
        shape, dtype = tensors[tname]
        acc = expr.inputs[t]
        if tuple(shape) != tuple(acc.shape) or dtype != acc.dtype:
            raise bad(f"reads '{tname}' as {acc.dtype}{list(acc.shape)}, it is {dtype}{list(shape)}")
    if not isinstance(op.output_name, str) or not op.output_name:
        raise bad("the output name must be a non-empty string")
    if op.output_name in tensors:
        raise bad(f"writes '{op.output_name}', which already exists in the region")
