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
  (:mod:`runtime_sim.layout`).
* :class:`OpProgram` -- one operator of a region: expression, plan, and which region tensors
  it reads and writes.

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
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from .errors import DeviceProgramError

PROGRAM_FORMAT = "icca-device-program"
#: Version 2 added ``run_order`` (the regions of one model invocation, in call order).
PROGRAM_VERSION = 2

UNARY_OPS = (
    "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "not", "floor",
    "ceil", "round",
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
class TensorAccess:
    """A tensor of an operator and how each of its dimensions is indexed.

    For inputs, ``indices`` is the access that defines the partitioning (the body may read
    the tensor at other sites too: those use core-local axes on dimensions the plan keeps
    whole). For the output, every index is a plain spatial axis.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    indices: tuple[AffineIndex, ...]

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
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "indices": [i.to_dict() for i in self.indices],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TensorAccess":
        return cls(
            _name(d["name"], "tensor name"),
            tuple(_int(s, "tensor dimension") for s in _list(d["shape"], "tensor shape")),
            _name(d["dtype"], "dtype"),
            tuple(AffineIndex.from_dict(_map(i, "index")) for i in _list(d["indices"], "indices")),
        )


@dataclass(frozen=True)
class TensorExpr:
    """An operator as a tensor expression (T10 §4.2 "Operator representation").

    ``body`` is evaluated over ``axes`` and ``local_axes``; when some of ``axes`` are
    reductions the output is the sum of ``body`` over them (the only combiner that can be
    split across cores), then ``epilogue`` (if any) maps that sum elementwise to the output.
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

    def flops(self) -> int:
        """Multiply-accumulate work counted as 2 FLOP per body evaluation with reductions."""
        n = 1
        for a in self.axes:
            n *= a.extent
        for a in self.local_axes:
            n *= a.extent
        return 2 * n if self.reduce_axes else n

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "axes": [a.to_dict() for a in self.axes],
            "local_axes": [a.to_dict() for a in self.local_axes],
            "inputs": [t.to_dict() for t in self.inputs],
            "output": self.output.to_dict(),
            "body": self.body,
            "epilogue": self.epilogue,
            "epilogue_inputs": list(self.epilogue_inputs),
        }

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
        )

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

        red = f" sum over {','.join(self.reduce_axes)}" if self.reduce_axes else ""
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
    """

    op_partition: Mapping[str, int]
    temporal: tuple[Mapping[str, int], ...]
    loop_order: tuple[str, ...] = ()

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
        return {
            "op_partition": {a: int(f) for a, f in self.op_partition.items()},
            "temporal": [{a: int(f) for a, f in t.items() if int(f) != 1} for t in self.temporal],
            "loop_order": list(self.loop_order),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExecutionPlan":
        return cls(
            op_partition={_name(a, "axis"): _int(f, "F_op")
                          for a, f in _map(d["op_partition"], "op_partition").items()},
            temporal=tuple({_name(a, "axis"): _int(f, "temporal factor")
                            for a, f in _map(t, "temporal factors").items()}
                           for t in _list(d["temporal"], "temporal")),
            loop_order=tuple(_name(a, "loop axis") for a in _list(d.get("loop_order", ()), "loop_order")),
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


@dataclass(frozen=True)
class DeviceProgram:
    """Everything the device needs to run one offloaded region.

    ``inputs`` are the region's parameters in call order; ``constants`` are tensors baked into
    the program as ``{"dtype", "shape", "data"}`` with ``data`` the base64 of the row-major
    little-endian bytes (:mod:`runtime_sim.constants`); a timing-only program may omit
    ``data``. ``outputs`` are the region results in order.
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
        if isinstance(version, bool) or not isinstance(version, int) or version != PROGRAM_VERSION:
            raise DeviceProgramError(
                f"device program version {_short(version)} is not supported "
                f"(this device runs version {PROGRAM_VERSION})"
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


def load_index(node: Expr) -> tuple[AffineIndex, ...]:
    return tuple(AffineIndex.from_dict(i) for i in node["index"])


def make_load(input_index: int, index: Sequence[AffineIndex]) -> Expr:
    return {"op": "load", "input": input_index, "index": [i.to_dict() for i in index]}


def axes_in(indices: Iterable[AffineIndex]) -> set[str]:
    return {a for idx in indices for a in idx.axes}
