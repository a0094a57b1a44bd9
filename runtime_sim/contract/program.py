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
    {"op": "attention", "args": [score, value]}     # the whole body of kind "attention" only

An ``attention`` body (kind ``"attention"``, combiner ``"softmax"``, one reduction axis: the
keys ``j``) is ``softmax_j(score) @ value``: ``score`` reads the batch axes, the rows ``i``, the
keys and the core-local head dimension it contracts; ``value`` reads the batch axes, the keys
and the features ``d``, no core-local axis (:class:`~runtime_sim.contract.expr.TensorExpr`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from runtime_sim.contract.errors import DeviceProgramError, describe_operator
from runtime_sim.contract.expr import TensorExpr, tensor_bytes
from runtime_sim.contract.json_fields import (
    quoted,
    read_bool,
    read_float,
    read_int,
    read_list,
    read_map,
    read_name,
)
from runtime_sim.contract.labels import operator_label
from runtime_sim.contract.lifetimes import staying_outputs
from runtime_sim.contract.plan import IDLE_SPREAD, ExecutionPlan, VgmPlan, plan_from_dict

PROGRAM_FORMAT = "icca-device-program"
#: Version 2 added ``run_order`` (the regions of one model invocation, in call order).
PROGRAM_VERSION = 6
#: Versions this device reads. Version 3 added the preload schedule (Elk §4.5:
#: :class:`PreloadSchedule`, :attr:`OpProgram.preload_chunks`); a version-2 program has none
#: and runs exactly as before. Version 4 added gathered accesses (:class:`Gather`); a
#: program that uses one must say version 4, so that an older device refuses it rather than
#: reading the view indices as the tensor's. Version 5 added inputs read as blocks of larger
#: tensors (:class:`~runtime_sim.contract.expr.TensorView`, split operators), on the same rule.
#: Version 6 added host outputs the host joins from pieces (:attr:`DeviceProgram.host_joins`).
READABLE_VERSIONS = (2, 3, 4, 5, 6)
#: The first version with :class:`Gather`.
GATHER_VERSION = 4
#: The first version with :class:`~runtime_sim.contract.expr.TensorView`.
VIEW_VERSION = 5
#: The first version with :attr:`DeviceProgram.host_joins`.
HOST_JOIN_VERSION = 6


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

    def display_label(self) -> str:
        """The operator as reports, tables and traces show it: its kind in the user's words
        and output shape, e.g. ``conv2d+bias+relu [1x64x56x56]``
        (:func:`runtime_sim.contract.labels.operator_label`); :attr:`name` stays its key."""
        return operator_label(self.label or self.expr.kind, self.expr.output.shape)

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
            name=read_name(d["name"], "operator name"),
            expr=TensorExpr.from_dict(read_map(d["expr"], "expr")),
            plan=plan_from_dict(d["plan"]),
            input_names=tuple(read_name(n, "input name") for n in read_list(d["input_names"], "input_names")),
            output_name=read_name(d["output_name"], "output name"),
            estimated_time_s=read_float(d.get("estimated_time_s", 0.0), "estimated_time_s"),
            idle_plan=_idle_from_dict(d.get("idle_plan")),
            preload_chunks=tuple(
                (read_int(pair[0], "preload_chunks input"), read_int(pair[1], "preload_chunks count"))
                for pair in (read_list(p, "preload_chunks entry") for p in
                             read_list(d.get("preload_chunks", ()), "preload_chunks"))
            ),
            label=read_name(d.get("label", ""), "operator label", empty=True),
            tuned=read_bool(d.get("tuned", False), "tuned"),
        )


def _idle_from_dict(value: Any) -> "ExecutionPlan | str | None":
    if not value:
        return None
    if value == IDLE_SPREAD:
        return IDLE_SPREAD
    if isinstance(value, str):
        raise DeviceProgramError(f"unknown idle placement {value!r}; use '{IDLE_SPREAD}' or a plan")
    return ExecutionPlan.from_dict(read_map(value, "idle_plan"))


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
        return cls(read_name(d["name"], "input name"),
                   tuple(read_int(s, "tensor dimension") for s in read_list(d["shape"], "input shape")),
                   read_name(d["dtype"], "dtype"), read_name(d.get("source", "host"), "input source"))


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
        for entry in read_list(d.get("stream", ()), "preload stream"):
            entry = read_list(entry, "preload stream entry")
            if not entry or entry[0] not in (PRELOAD, EXECUTE):
                raise DeviceProgramError(f"preload stream entry {quoted(entry)} is neither "
                                         f"'{PRELOAD}' nor '{EXECUTE}'")
            arity = 3 if entry[0] == PRELOAD else 2
            if len(entry) != arity:
                raise DeviceProgramError(f"preload stream entry {quoted(entry)} needs {arity - 1} "
                                         "integer argument(s)")
            stream.append((entry[0], *(read_int(v, "preload stream index") for v in entry[1:])))
        return cls(read_name(d.get("design", ""), "preload design", empty=True), tuple(stream))


@dataclass(frozen=True)
class HostJoin:
    """A host output the host puts together: the operator outputs ``pieces``, in order,
    concatenated along dimension ``dim``.

    A split operator's output that only the host reads (a training forward's logits of
    every position) need not be joined on chip, where the joined tensor would have to fit
    beside the concat's inputs: each piece leaves the chip as its producer ends, like any
    host output, and the host concatenates them."""

    dim: int
    pieces: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"dim": self.dim, "pieces": list(self.pieces)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HostJoin":
        return cls(read_int(d["dim"], "host join dim"),
                   tuple(read_name(p, "host join piece") for p in read_list(d["pieces"], "host join pieces")))


@dataclass(frozen=True)
class DeviceProgram:
    """Everything the device needs to run one offloaded region.

    ``inputs`` are the region's parameters in call order; ``constants`` are tensors baked into
    the program as ``{"dtype", "shape", "data"}`` with ``data`` the base64 of the row-major
    little-endian bytes (:mod:`runtime_sim.contract.constants`); a timing-only program may omit
    ``data``. ``outputs`` are the region results in order; ``host_outputs`` names those the
    host reads after the region (a host operator or ``main``'s result consumes them), which
    travel chip -> host over the host link; the others stay on chip for later regions.
    ``host_joins``: the host outputs no operator computes whole, which the host concatenates
    from pieces (:class:`HostJoin`); each piece leaves the chip as a host output does.
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
    host_joins: Mapping[str, HostJoin] = field(default_factory=dict)
    #: Elk's preload/execute stream segment of this call (``None``: operators fetch their
    #: off-chip inputs with the default next-operator prefetch).
    preload_schedule: PreloadSchedule | None = None
    format: str = PROGRAM_FORMAT
    version: int = PROGRAM_VERSION

    @property
    def staying_outputs(self) -> tuple[str, ...]:
        """The outputs held on chip until the region ends (the host's leave as produced,
        :func:`runtime_sim.contract.lifetimes.staying_outputs`)."""
        return staying_outputs(self.outputs, self.host_outputs)

    @property
    def leaving_tensors(self) -> tuple[str, ...]:
        """The tensors that travel chip -> host as their producer ends: the host outputs an
        operator computes, and the pieces of those the host joins (:attr:`host_joins`)."""
        joined = [p for join in self.host_joins.values() for p in join.pieces]
        return tuple(n for n in self.host_outputs if n not in self.host_joins) + tuple(joined)

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
            **({"host_joins": {n: j.to_dict() for n, j in self.host_joins.items()}}
               if self.host_joins else {}),
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
            raise DeviceProgramError(f"not an ICCA device program (format={quoted(d.get('format'))})")
        version = d.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_VERSIONS:
            raise DeviceProgramError(
                f"device program version {quoted(version)} is not supported "
                f"(this device runs versions {', '.join(map(str, READABLE_VERSIONS))})"
            )
        missing = [k for k in ("region", "hardware", "inputs", "outputs", "ops") if k not in d]
        if missing:
            raise DeviceProgramError(f"malformed device program: missing {', '.join(missing)}")
        region = quoted(d.get("region"))
        try:
            return cls(
                region=read_name(d["region"], "region name"),
                hardware=dict(read_map(d["hardware"], "hardware")),
                inputs=tuple(TensorDecl.from_dict(read_map(t, "input")) for t in read_list(d["inputs"], "inputs")),
                outputs=tuple(read_name(o, "output name") for o in read_list(d["outputs"], "outputs")),
                ops=tuple(OpProgram.from_dict(read_map(op, "operator")) for op in read_list(d["ops"], "ops")),
                constants=dict(read_map(d.get("constants", {}), "constants")),
                module=read_name(d.get("module", ""), "module", empty=True),
                run_order=tuple(read_name(r, "region name") for r in read_list(d.get("run_order", ()), "run_order")),
                host_outputs=tuple(read_name(o, "host output name")
                                   for o in read_list(d.get("host_outputs", ()), "host_outputs")),
                host_joins={read_name(n, "host join"): HostJoin.from_dict(read_map(j, "host join"))
                            for n, j in read_map(d.get("host_joins", {}), "host_joins").items()},
                preload_schedule=(PreloadSchedule.from_dict(read_map(d["preload_schedule"], "preload_schedule"))
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


@functools.lru_cache(maxsize=128)
def parse_program(program_json: str) -> DeviceProgram:
    """:meth:`DeviceProgram.from_json`, once per program text (a program is immutable data).
    The same text is read by the compiler's codegen and program listing and by every device
    call of the stub that carries it (128: a compiled model's regions, several models of a
    session)."""
    return DeviceProgram.from_json(program_json)
