"""Validation of a device program: the one check every executor runs before it runs a program.

:func:`validate_program` checks what the format itself can say is wrong (the plan's fit on
the chip is the layout's own check, :func:`runtime_sim.contract.layout.checked_layout`):
the version, every tensor declared once with its shape and dtype, every operator's tensor
expression well formed for its op kind (:data:`runtime_sim.contract.op_kinds.OP_KINDS`),
its plan's factors on known axes, the preload schedule's instructions, and that every
region output is computed. The checks run in a fixed order and the first that fails
raises, so a program always gets the same error.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from runtime_sim.contract.errors import DeviceProgramError, short_name
from runtime_sim.contract.expr import (
    ATTENTION_NODE,
    BINARY_OPS,
    DTYPE_BYTES,
    GATHER_MODES,
    NODE_COMBINERS,
    REDUCE_COMBINERS,
    UNARY_OPS,
    AffineIndex,
    Axis,
    Gather,
    TensorAccess,
    TensorExpr,
    TensorView,
    gathered_shape,
    guarded_inputs,
    merged_axes,
)
from runtime_sim.contract.hardware import INDEX_DTYPES, HardwareSpec
from runtime_sim.contract.json_fields import MAX_EXTENT, quoted, read_map, read_name
from runtime_sim.contract.op_kinds import OP_KINDS
from runtime_sim.contract.plan import IDLE_SPREAD, ExecutionPlan, VgmPlan
from runtime_sim.contract.plan_rules import local_splits
from runtime_sim.contract.program import (
    EXECUTE,
    GATHER_VERSION,
    HOST_JOIN_VERSION,
    INPUT_SOURCES,
    PRELOAD,
    PROGRAM_FORMAT,
    READABLE_VERSIONS,
    VIEW_VERSION,
    DeviceProgram,
    HostJoin,
    OpProgram,
    PreloadSchedule,
    TensorDecl,
)

_ARITY = {**{op: 1 for op in UNARY_OPS}, **{op: 2 for op in BINARY_OPS},
          "select": 3, "cast": 1, "reduce": 1}

_Fail = Callable[[str], DeviceProgramError]  # why a check failed -> the error, saying where
_Tensors = dict[str, tuple[tuple[int, ...], str]]  # the region's tensors so far: (shape, dtype)


def validate_program(program: DeviceProgram, hw: HardwareSpec | None = None) -> None:
    """Check a whole device program before anything runs it; raise one clear error or nothing.

    Both ways of running a program -- the functional device
    (:meth:`runtime_sim.functional.device.SimulatedDevice.run`) and the timing simulators
    (:func:`runtime_sim.timing.simulate_timing`, :func:`runtime_sim.timing.vgm_timing.simulate_vgm_timing`)
    -- call this first, so a program one of them refuses is refused by the other, with the
    same error type. Checked here: the program's own fields (format, version, names), every
    tensor's shape (integers in [1, :data:`MAX_EXTENT`]) and dtype; per operator its kind (one
    of :data:`runtime_sim.contract.op_kinds.OP_KINDS`), axes (unique names, positive extents),
    indices (axes of the expression, one per tensor dimension), output (one plain spatial axis
    per dimension whose extent is the dimension), input reads within the tensor, expression
    trees (known ops, arity, loads of existing inputs, reductions over core-local axes,
    ``result`` only in the epilogue), plans (factors on known axes, one temporal map per
    tensor) and that every tensor it reads exists as it reads it; that every region output is
    computed; the preload schedule.

    Whether a plan is a valid T10 layout on the chip (rings, padding, core count) is the
    layout's own check, :func:`runtime_sim.contract.layout.checked_layout`, which both executors call
    per operator after this.

    Parameters
    ----------
    program
        The device program to check. A program that passed for the same ``hw`` is not checked
        again.
    hw
        The chip it is to run on: every dtype must then be one the chip computes. ``None``
        reads the program's own ``hardware`` description.

    Raises
    ------
    DeviceProgramError
        The first check that fails, naming the region and, where it applies, the operator.
    UnsupportedDtypeError
        With ``hw``: a dtype the chip does not compute (as the device says it).
    InvalidHardwareSpecError
        Without ``hw``: the program's ``hardware`` is not a valid :class:`HardwareSpec`.
    """

    if not isinstance(program, DeviceProgram):
        raise DeviceProgramError(f"expected a DeviceProgram, got {type(program).__name__}")
    if hw is None:
        hw = HardwareSpec.from_dict(read_map(program.hardware, "program hardware"))
    if getattr(program, "_validated_for", None) == hw:
        return
    _check_program(program, hw)
    object.__setattr__(program, "_validated_for", hw)


def _is_int(value: Any) -> bool:
    """Whether ``value`` is an integer of the format (a JSON ``true`` is not one)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


@dataclass(frozen=True, eq=False)
class _ProgramScope:
    """What every check of one program shares: how to word an error, which dtypes the chip has."""

    region: Any
    hw: HardwareSpec | None

    def fail(self, why: str) -> DeviceProgramError:
        return DeviceProgramError(f"invalid device program (region {quoted(self.region)}): {why}")

    def shape(self, shape: Any, what: str) -> tuple[int, ...]:
        """``shape`` as a tuple, once every dimension is an integer in [1, MAX_EXTENT]."""
        if not isinstance(shape, (tuple, list)):
            raise self.fail(f"{what} has shape {quoted(shape)}, not a list of dimensions")
        for s in shape:
            if not _is_int(s) or not 1 <= s <= MAX_EXTENT:
                raise self.fail(f"{what} has shape {quoted(list(shape))}: every dimension must be an "
                                f"integer in [1, {MAX_EXTENT}]")
        return tuple(int(s) for s in shape)

    def dtype(self, dtype: Any, what: str, mask: bool = False, index: bool = False) -> str:
        """``dtype``, once it is a known dtype (and, with a chip, one the chip computes)."""
        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
            raise self.fail(f"{what} has unknown dtype {quoted(dtype)}")
        if self.hw is not None:
            # UnsupportedDtypeError, as the device raises it; read-only tensors may be masks,
            # and region tensors or gather ids may hold row numbers
            self.hw.check_dtype(dtype, what, mask=mask, index=index)
        return dtype


def _check_program(program: DeviceProgram, hw: HardwareSpec | None) -> None:
    """Every check of :func:`validate_program`, in order: the first that fails raises."""
    scope = _ProgramScope(program.region, hw)
    _check_header(program, scope.fail)
    tensors = _declared_tensors(program, scope)
    for i, op in enumerate(program.ops):
        if not isinstance(op, OpProgram):
            raise scope.fail(f"operator {i} is not an OpProgram")
        _check_op(op, tensors, scope)
        tensors[op.output_name] = (tuple(op.expr.output.shape), op.expr.output.dtype)
    _check_outputs(program, tensors, scope.fail)
    _check_preload_schedule(program, scope.fail)


def _check_header(program: DeviceProgram, fail: _Fail) -> None:
    """The program's own fields: format and version (and what needs which), its names."""
    if program.format != PROGRAM_FORMAT or program.version not in READABLE_VERSIONS:
        raise fail(f"format {program.format!r} version {program.version!r} is not "
                   f"{PROGRAM_FORMAT!r} version {'/'.join(map(str, READABLE_VERSIONS))}")
    if program.preload_schedule is not None and program.version < 3:
        raise fail("a preload schedule needs program version 3")
    if program.version < GATHER_VERSION and any(
            getattr(acc, "gather", None) is not None for op in program.ops
            for acc in getattr(getattr(op, "expr", None), "inputs", ())):
        raise fail(f"a gathered access needs program version {GATHER_VERSION}")
    if program.version < HOST_JOIN_VERSION and getattr(program, "host_joins", None):
        raise fail(f"host outputs joined by the host need program version {HOST_JOIN_VERSION}")
    if program.version < VIEW_VERSION and any(
            getattr(acc, "view", None) is not None for op in program.ops
            for acc in getattr(getattr(op, "expr", None), "inputs", ())):
        raise fail(f"an input read as a view needs program version {VIEW_VERSION}")
    try:
        read_name(program.region, "region name")
        read_name(program.module, "module", empty=True)
        for r in program.run_order:
            read_name(r, "run_order entry")
    except DeviceProgramError as err:
        raise fail(str(err)) from None


def _declared_tensors(program: DeviceProgram, scope: _ProgramScope) -> _Tensors:
    """The region's inputs and constants, each declared once with a valid shape and dtype."""
    fail = scope.fail
    tensors: _Tensors = {}
    for decl in program.inputs:
        if not isinstance(decl, TensorDecl):
            raise fail(f"input {quoted(decl)} is not a TensorDecl")
        what = f"input '{decl.name}'"
        if not isinstance(decl.name, str) or not decl.name or decl.name in tensors:
            raise fail(f"{what}: input names must be unique non-empty strings")
        if decl.source not in INPUT_SOURCES:
            raise fail(f"{what}: source {quoted(decl.source)} is not one of {INPUT_SOURCES}")
        tensors[decl.name] = (scope.shape(decl.shape, what), scope.dtype(decl.dtype, what, True, True))
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
            raise fail(f"{what} has unknown source {quoted(source)}")
        if "data" in entry and not isinstance(entry["data"], str):
            raise fail(f"{what}: 'data' must be base64 text")
        # a scalar constant has shape []
        tensors[name] = (scope.shape(entry["shape"], what), scope.dtype(entry["dtype"], what, True, True))
    return tensors


def _check_outputs(program: DeviceProgram, tensors: _Tensors, fail: _Fail) -> None:
    """Every region output is computed, or joined by the host from computed pieces that
    line up along one dimension; every host output is a region output."""
    if not isinstance(program.outputs, (tuple, list)):
        raise fail("outputs must be a list of tensor names")
    host_outputs = getattr(program, "host_outputs", ())
    if not isinstance(host_outputs, (tuple, list)):
        raise fail("host_outputs must be a list of tensor names")
    joins = getattr(program, "host_joins", {})
    if not isinstance(joins, Mapping):
        raise fail("host_joins must map output names to joins")
    for name, join in joins.items():
        _check_host_join(name, join, program, tensors, fail)
    for name in program.outputs:
        if name not in tensors and name not in joins:
            raise fail(f"output {quoted(name)} is never computed (no operator writes it and it is "
                       "no input or constant)")
    for name in host_outputs:
        if name not in program.outputs:
            raise fail(f"host output {quoted(name)} is not an output of the region")


def _check_host_join(name: str, join: HostJoin, program: DeviceProgram, tensors: _Tensors,
                     fail: _Fail) -> None:
    """A host join names a host output no operator writes, and computed pieces of one dtype
    whose shapes agree but along ``dim``."""
    what = f"host join {quoted(name)}"
    if not isinstance(join, HostJoin) or not join.pieces:
        raise fail(f"{what} must list the pieces it joins")
    if name not in program.host_outputs:
        raise fail(f"{what} is not a host output of the region")
    if name in tensors:
        raise fail(f"{what}: an operator or input already writes {quoted(name)}")
    if len(set(join.pieces)) != len(join.pieces):
        raise fail(f"{what} lists a piece twice")
    produced = {op.output_name for op in program.ops}
    shapes = []
    for piece in join.pieces:
        if piece not in produced:
            raise fail(f"{what}: piece {quoted(piece)} is not an operator's output")
        shapes.append(tensors[piece])
    rank = len(shapes[0][0])
    if not 0 <= join.dim < rank:
        raise fail(f"{what}: dimension {join.dim} is out of range for rank {rank}")
    for shape, dtype in shapes:
        same = len(shape) == rank and all(a == b for d, (a, b) in enumerate(zip(shape, shapes[0][0]))
                                          if d != join.dim)
        if not same or dtype != shapes[0][1]:
            raise fail(f"{what}: the pieces' shapes or dtypes do not line up along dimension {join.dim}")


def _check_preload_schedule(program: DeviceProgram, fail: _Fail) -> None:
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
                   f"in order; it executes {quoted(executed)}")
    for entry in schedule.stream:
        if entry[0] == PRELOAD:
            _, offset, j = entry
            if offset < 0 or j < 0 or (offset == 0 and j >= len(program.ops)):
                raise fail(f"preload stream entry {quoted(list(entry))} names no operator of "
                           "this or a later region call")


@dataclass(eq=False)
class _OpScope:
    """One operator under check: what its checks share, and how to word an error about it."""

    op: OpProgram
    expr: TensorExpr
    n_in: int  # inputs of the expression
    program: _ProgramScope
    where: str
    extents: dict[str, int]  # every axis, top-level and core-local -> its extent
    top: dict[str, Axis]  # the top-level axes by name
    local: set[str]  # the core-local axes
    _follow: dict[str, str] | None = None

    def bad(self, why: str) -> DeviceProgramError:
        return self.program.fail(f"{self.where}: {why}")

    def follows(self) -> dict[str, str]:
        """The core-local axes the plan splits with a placing axis (``local_splits``), once."""
        if self._follow is None:
            try:
                self._follow = local_splits(self.expr) if isinstance(self.op.plan, ExecutionPlan) else {}
            except (TypeError, KeyError, ValueError, AttributeError, DeviceProgramError):
                self._follow = {}  # a malformed tree: refused by the checks that follow
        return self._follow


def _check_op(op: OpProgram, tensors: _Tensors, scope: _ProgramScope) -> None:
    """One operator: axes, accesses, result, plans, expression trees, then what it reads."""
    s = _open_op(op, scope)
    _check_accesses(s)
    out_axes = _check_result(s)
    _check_plan(s, op.plan, "plan")
    if op.idle_plan is not None and op.idle_plan != IDLE_SPREAD:
        _check_plan(s, op.idle_plan, "idle_plan")
    for root, what in _body_trees(s):
        _check_tree(s, root, what, s.extents, epilogue=False)
    if s.expr.epilogue is not None:
        # the epilogue runs once per output point: it reads the output's axes, not the reduced ones
        _check_tree(s, s.expr.epilogue, "epilogue", set(out_axes) | s.local, epilogue=True)
    if not isinstance(op.estimated_time_s, numbers.Real) or not math.isfinite(op.estimated_time_s):
        raise s.bad(f"estimated_time_s {quoted(op.estimated_time_s)} is not a finite number")
    _check_reads(s, tensors)


# -- one operator: axes and indices
def _open_op(op: OpProgram, scope: _ProgramScope) -> _OpScope:
    """The operator's name, expression type, kind and axes, checked; its scope for the rest."""
    name = op.name if isinstance(op.name, str) else quoted(op.name)
    where = f"operator '{short_name(name)}'"

    def bad(why: str) -> DeviceProgramError:
        return scope.fail(f"{where}: {why}")

    if not isinstance(op.name, str) or not op.name:
        raise bad("the operator name must be a non-empty string")
    expr = op.expr
    if not isinstance(expr, TensorExpr):
        raise bad("expr is not a TensorExpr")
    if expr.kind not in OP_KINDS:
        raise bad(f"unknown operator kind {quoted(expr.kind)} (known: {', '.join(OP_KINDS)})")
    extents: dict[str, int] = {}
    for group in (expr.axes, expr.local_axes):
        for a in group:
            if not isinstance(a, Axis) or not isinstance(a.name, str) or not a.name:
                raise bad(f"axis {quoted(a)} is not a named axis")
            if a.name in extents:
                raise bad(f"axis '{a.name}' is declared twice")
            if not _is_int(a.extent) or not 1 <= a.extent <= MAX_EXTENT:
                raise bad(f"axis '{a.name}' has extent {quoted(a.extent)}, not an integer in [1, {MAX_EXTENT}]")
            if not isinstance(a.reduce, bool):
                raise bad(f"axis '{a.name}': reduce must be true or false")
            extents[a.name] = int(a.extent)
    return _OpScope(op, expr, len(expr.inputs), scope, where, extents, {a.name: a for a in expr.axes},
                    {a.name for a in expr.local_axes})


def _check_index(s: _OpScope, ix: Any, what: str, allowed: Mapping[str, Any] | set) -> AffineIndex:
    """An affine index over ``allowed`` axes with bounded integer coefficients and offset."""
    if not isinstance(ix, AffineIndex):
        raise s.bad(f"{what} is not an affine index")
    for a, c in ix.terms:
        if a not in allowed:
            raise s.bad(f"{what} uses unknown axis {quoted(a)}")
        if not _is_int(c) or abs(c) > MAX_EXTENT:
            raise s.bad(f"{what} has coefficient {quoted(c)}, not an integer of magnitude <= {MAX_EXTENT}")
    if not _is_int(ix.offset) or abs(ix.offset) > MAX_EXTENT:
        raise s.bad(f"{what} has offset {quoted(ix.offset)}, not an integer of magnitude <= {MAX_EXTENT}")
    return ix


# -- one operator: tensor accesses
def _check_accesses(s: _OpScope) -> None:
    """Every input access, then the output access."""
    expr = s.expr
    try:
        guarded = guarded_inputs(expr)  # a piecewise read (concat) may index past its input
    except (TypeError, AttributeError):
        guarded = set()  # a malformed tree: refused by _check_tree
    try:
        ids_inputs = {a.gather.ids for a in expr.inputs
                      if isinstance(a, TensorAccess) and isinstance(a.gather, Gather)}
    except AttributeError:
        ids_inputs = set()
    for t, acc in enumerate(expr.inputs):
        _check_access(s, acc, f"input {t}", True, piecewise=t in guarded, index=t in ids_inputs)
    _check_access(s, expr.output, "output", False)


def _check_access(s: _OpScope, acc: Any, what: str, mask: bool, piecewise: bool = False,
                  index: bool = False) -> None:
    """A tensor access: shape, dtype, gather, one index per dimension, plain reads in range."""
    if not isinstance(acc, TensorAccess):
        raise s.bad(f"{what} is not a tensor access")
    shape = s.program.shape(acc.shape, f"{s.where}, {what} '{acc.name}'")
    s.program.dtype(acc.dtype, f"{s.where}, {what} '{acc.name}'", mask, index)
    if acc.gather is not None:
        shape = _check_gather(s, acc, what, shape)
    if acc.view is not None:
        _check_view(s, acc, what, mask, shape)
    if len(acc.indices) != len(shape):
        raise s.bad(f"{what} '{acc.name}' has {len(shape)} dimensions but {len(acc.indices)} indices")
    for d, ix in enumerate(acc.indices):
        _check_index(s, ix, f"index {d} of {what} '{acc.name}'", s.extents)
        if ix.is_simple and s.extents[ix.terms[0][0]] > shape[d] and not piecewise:
            raise s.bad(f"axis '{ix.terms[0][0]}' (extent {s.extents[ix.terms[0][0]]}) indexes "
                        f"dimension {d} of {what} '{acc.name}', which has {shape[d]} elements")


def _check_view(s: _OpScope, acc: TensorAccess, what: str, is_input: bool,
                shape: tuple[int, ...]) -> None:
    """A viewed input is a block inside its region tensor (see :class:`TensorView`)."""
    view = acc.view
    if not isinstance(view, TensorView):
        raise s.bad(f"{what} '{acc.name}': view is not a TensorView")
    if not is_input:
        raise s.bad(f"{what} '{acc.name}': only inputs are read through a view")
    if acc.gather is not None:
        raise s.bad(f"{what} '{acc.name}': a gathered input cannot also be a view")
    if not isinstance(s.op.plan, ExecutionPlan):
        raise s.bad(f"{what} '{acc.name}': views are read by compute-shift plans only")
    base = s.program.shape(view.base_shape, f"{s.where}, {what} '{acc.name}' view base")
    if len(view.start) != len(shape) or len(base) != len(shape):
        raise s.bad(f"{what} '{acc.name}': a view needs one start and one base dimension per "
                    f"dimension of its {len(shape)}")
    for d, (lo, n, full) in enumerate(zip(view.start, shape, base)):
        if not _is_int(lo) or lo < 0 or lo + n > full:
            raise s.bad(f"{what} '{acc.name}': view [{lo}, {lo} + {n}) of dimension {d} is "
                        f"outside the tensor's {full} elements")


def _check_gather(s: _OpScope, acc: TensorAccess, what: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The gathered view's shape, once the gather itself is sound (see :class:`Gather`)."""
    g, n_in = acc.gather, s.n_in
    if not isinstance(g, Gather):
        raise s.bad(f"{what} '{acc.name}': gather is not a Gather")
    ids = g.ids
    if not _is_int(ids) or not 0 <= ids < n_in:
        raise s.bad(f"{what} '{acc.name}': gather ids {quoted(ids)} is not an input index in [0, {n_in})")
    src = s.expr.inputs[ids]
    if not isinstance(src, TensorAccess) or src is acc or src.gather is not None:
        raise s.bad(f"{what} '{acc.name}': gather ids must be another, plain input")
    if src.dtype not in INDEX_DTYPES:
        raise s.bad(f"{what} '{acc.name}': gather ids '{src.name}' are {quoted(src.dtype)}, "
                    f"not one of {', '.join(INDEX_DTYPES)}")
    if not _is_int(g.axis) or not 0 <= g.axis < len(shape):
        raise s.bad(f"{what} '{acc.name}': gather axis {quoted(g.axis)} is not a dimension "
                    f"of its {len(shape)}")
    if g.mode not in GATHER_MODES:
        raise s.bad(f"{what} '{acc.name}': unknown gather mode {quoted(g.mode)} "
                    f"(known: {', '.join(GATHER_MODES)})")
    view = gathered_shape(shape, s.program.shape(src.shape, f"{s.where}, gather ids"), g.axis)
    span = tuple(acc.indices[g.axis:g.axis + len(src.shape)]) \
        if len(acc.indices) == len(view) else None
    if span != tuple(src.indices):
        raise s.bad(f"{what} '{acc.name}': gather ids '{src.name}' must be read at the view's "
                    f"indices of dimensions {g.axis}..{g.axis + len(src.shape) - 1}")
    t = next(i for i, a in enumerate(s.expr.inputs) if a is acc)
    if t in s.expr.epilogue_inputs:
        raise s.bad(f"{what} '{acc.name}': a gathered input cannot be an epilogue input")
    return view


# -- one operator: how the result is formed
def _check_result(s: _OpScope) -> list[str]:
    """The output's axes (returned), the reduction's combiner and the epilogue's inputs."""
    expr, extents = s.expr, s.extents
    out_axes: list[str] = []
    for d, ix in enumerate(expr.output.indices):
        merged = merged_axes(ix, extents)
        if merged is None or any(a not in s.top or s.top[a].reduce or a in out_axes for a in merged):
            raise s.bad(f"output index {d} ({ix}) must be one plain spatial axis (or spatial axes "
                        "merged row-major), each used once")
        size = math.prod(extents[a] for a in merged)
        if size != expr.output.shape[d]:
            raise s.bad(f"output axes {list(merged)} span {size} positions, the output dimension {d} "
                        f"has {expr.output.shape[d]}")
        out_axes.extend(merged)
    # a spatial axis outside the output would be summed by nobody: the executors have no
    # meaning for it (found by tests/test_bad_input.py's program mutations)
    stray = [a for a, axis in s.top.items() if not axis.reduce and a not in out_axes]
    if stray:
        raise s.bad(f"spatial axis {quoted(stray[0])} indexes no output dimension (an axis that "
                    "is not an output dimension must be a reduction axis)")
    if expr.combiner not in REDUCE_COMBINERS:
        raise s.bad(f"unknown combiner {quoted(expr.combiner)} of the reduction axes "
                    f"(known: {', '.join(REDUCE_COMBINERS)})")
    for i in expr.epilogue_inputs:
        if not _is_int(i) or not 0 <= i < s.n_in:
            raise s.bad(f"epilogue input {quoted(i)} is not an input index in [0, {s.n_in})")
    return out_axes


def _body_trees(s: _OpScope) -> list[tuple[Any, str]]:
    """The body's trees to check node by node: the body itself, or an attention operator's
    score and value, once the attention operator is well formed (kind ``"attention"``,
    combiner ``"softmax"`` and the ``"attention"`` body node only together; one reduction
    axis, the keys; a value that reads no core-local axis)."""
    expr = s.expr
    body = expr.body
    node = body.get("op") if isinstance(body, Mapping) else None
    uses = (expr.kind == "attention", expr.combiner == "softmax", node == ATTENTION_NODE)
    if not any(uses):
        return [(body, "body")]
    if not all(uses):
        raise s.bad(f"kind {quoted(expr.kind)}, combiner {quoted(expr.combiner)} and body op "
                    f"{quoted(node)}: the fused attention operator needs kind 'attention', combiner "
                    f"'softmax' and the '{ATTENTION_NODE}' body node together, and no other "
                    "operator may use any of them")
    args = body.get("args")
    if not isinstance(args, (list, tuple)) or len(args) != 2:
        raise s.bad(f"body: '{ATTENTION_NODE}' takes 2 arguments (score, value), got {quoted(args)}")
    if len(expr.reduce_axes) != 1:
        raise s.bad(f"an attention operator has one reduction axis (its keys), not "
                    f"{list(expr.reduce_axes)}")
    _check_tree(s, args[1], "attention value", s.extents, epilogue=False)
    read = _tree_axes(args[1])
    if read & s.local:
        raise s.bad(f"attention value reads core-local axis {quoted(sorted(read & s.local)[0])}: "
                    "only the score contracts the head dimension")
    return [(args[0], "attention score")]


def _tree_axes(root: Any) -> set[str]:
    """Every axis a checked expression tree reads, through loads, axis nodes and reduces."""
    found: set[str] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node["op"] == "load":
            found.update(a for i in node["index"] for a, _ in i.get("terms", ()))
        elif node["op"] == "axis":
            found.add(node["axis"])
        elif node["op"] == "reduce":
            found.update(node["axes"])
        stack.extend(node.get("args", ()))
    return found


# -- one operator: plans
def _check_plan(s: _OpScope, plan: Any, what: str) -> None:
    """A VGM plan's tiles, or an execution plan's factors, on the operator's own axes."""
    if isinstance(plan, VgmPlan):
        if not isinstance(plan.tiles, Mapping):
            raise s.bad(f"{what}: tiles must be a JSON object")
        for a, size in plan.tiles.items():
            if a not in s.top:
                raise s.bad(f"{what}: tile on unknown axis {quoted(a)}")
            if not _is_int(size) or size < 1:
                raise s.bad(f"{what}: tile {quoted(size)} on '{a}' is not a positive integer")
        return
    if not isinstance(plan, ExecutionPlan):
        raise s.bad(f"{what} is not an execution plan")
    _check_execution_plan(s, plan, what)


def _check_execution_plan(s: _OpScope, plan: ExecutionPlan, what: str) -> None:
    """F_op per axis, one temporal map per tensor (inputs, then output), a loop order."""
    top, n_in = s.top, s.n_in
    if not isinstance(plan.op_partition, Mapping):
        raise s.bad(f"{what}: op_partition must be a JSON object")
    for a, f in plan.op_partition.items():
        if a not in top:
            raise s.bad(f"{what}: F_op on unknown axis {quoted(a)}")
        if not _is_int(f) or not 1 <= f <= s.extents[a]:
            raise s.bad(f"{what}: F_op {quoted(f)} on '{a}' is not an integer in [1, {s.extents[a]}]")
    if not isinstance(plan.temporal, (tuple, list)) or len(plan.temporal) != n_in + 1:
        raise s.bad(f"{what}: needs one temporal map per tensor ({n_in + 1}), got "
                    f"{len(plan.temporal) if isinstance(plan.temporal, (tuple, list)) else 'none'}")
    for t, factors in enumerate(plan.temporal):
        if not isinstance(factors, Mapping):
            raise s.bad(f"{what}: temporal factors of tensor {t} must be a JSON object")
        for a, f in factors.items():
            if a not in top:
                raise s.bad(f"{what}: temporal factor of tensor {t} on unknown axis {quoted(a)}")
            if not _is_int(f) or f < 1:
                raise s.bad(f"{what}: temporal factor {quoted(f)} of tensor {t} on '{a}' is not a positive integer")
    if len(set(plan.loop_order)) != len(plan.loop_order) or any(a not in top for a in plan.loop_order):
        raise s.bad(f"{what}: loop_order {quoted(list(plan.loop_order))} must name distinct axes of the operator")


# -- one operator: expression trees (body and epilogue)
def _check_tree(s: _OpScope, root: Any, what: str, axes: Mapping[str, Any] | set, epilogue: bool) -> None:
    """Every node of the body or epilogue; ``axes`` are the axes it may read."""
    # depth first with an explicit stack: deep trees do not hit the recursion limit
    stack: list[tuple[Any, frozenset]] = [(root, frozenset())]
    while stack:
        node, bound = stack.pop()
        stack.extend(_check_node(s, node, what, axes, bound, epilogue))


def _check_node(s: _OpScope, node: Any, what: str, axes: Mapping[str, Any] | set,
                bound: frozenset, epilogue: bool) -> list[tuple[Any, frozenset]]:
    """One node (``bound``: the core-local axes reduced above it); its arguments to check next."""
    if not isinstance(node, Mapping) or not isinstance(node.get("op"), str):
        raise s.bad(f"{what}: node {quoted(node)} is not an expression")
    kind = node["op"]
    if kind == "load":
        _check_load(s, node, what, axes, bound, epilogue)
    elif kind == "const":
        value = node.get("value")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
            raise s.bad(f"{what}: constant {quoted(value)} is not a number")
    elif kind == "axis":
        a = node.get("axis")
        if not isinstance(a, str) or a not in axes:
            raise s.bad(f"{what}: reads unknown axis {quoted(a)}")
        if a in s.local and a not in bound:
            raise s.bad(f"{what}: core-local axis '{a}' is used outside a reduce over it")
    elif kind == "result":
        if not epilogue:
            raise s.bad(f"{what}: 'result' is only valid in an epilogue")
    elif kind in _ARITY:
        return _check_call(s, node, what, bound)
    elif kind == ATTENTION_NODE:
        raise s.bad(f"{what}: '{ATTENTION_NODE}' is only valid as the whole body of an attention "
                    "operator")
    else:
        raise s.bad(f"{what}: unknown expression op {quoted(kind)}")
    return []


def _check_call(s: _OpScope, node: Mapping[str, Any], what: str,
                bound: frozenset) -> list[tuple[Any, frozenset]]:
    """An operation node: its arity, a cast's dtype, a reduction's combiner and axes."""
    kind = node["op"]
    args = node.get("args")
    if not isinstance(args, (list, tuple)) or len(args) != _ARITY[kind]:
        raise s.bad(f"{what}: '{kind}' takes {_ARITY[kind]} argument(s), got {quoted(args)}")
    if kind == "cast" and node.get("dtype") not in DTYPE_BYTES:
        raise s.bad(f"{what}: cast to unknown dtype {quoted(node.get('dtype'))}")
    if kind == "reduce":
        if node.get("combiner", "sum") not in NODE_COMBINERS:
            raise s.bad(f"{what}: unknown reduce combiner {quoted(node.get('combiner'))} "
                        f"(known: {', '.join(NODE_COMBINERS)})")
        raxes = node.get("axes")
        if not isinstance(raxes, (list, tuple)) or not raxes or \
                any(not isinstance(a, str) or a not in s.local or a in bound for a in raxes) \
                or len(set(raxes)) != len(raxes):
            raise s.bad(f"{what}: reduce over {quoted(raxes)}, not distinct unbound core-local "
                        f"axes of {sorted(s.local)}")
        bound = bound | frozenset(raxes)
    return [(arg, bound) for arg in args]


def _check_load(s: _OpScope, node: Mapping[str, Any], what: str, axes: Mapping[str, Any] | set,
                bound: frozenset, epilogue: bool) -> None:
    """A load: of an existing input, one index per dimension; in an epilogue, of an input
    kept in place for it."""
    n_in, plan = s.n_in, s.op.plan
    t = node.get("input")
    if not _is_int(t) or not 0 <= t < n_in:
        raise s.bad(f"{what}: load of input {quoted(t)}, the operator has {n_in} inputs")
    acc = s.expr.inputs[t]
    index = node.get("index")
    rank = len(acc.indices)
    if not isinstance(index, (list, tuple)) or len(index) != rank:
        raise s.bad(f"{what}: load of input {t} needs {rank} indices, got {quoted(index)}")
    if epilogue and t not in s.expr.epilogue_inputs:
        raise s.bad(f"{what}: reads input {t} ('{acc.name}'), which is not among the "
                    f"epilogue_inputs {list(s.expr.epilogue_inputs)}")
    if epilogue and isinstance(plan, ExecutionPlan) and t < len(plan.temporal) and \
            any(plan.ft(t, a) > 1 for a in s.top):
        raise s.bad(f"{what}: reads input '{acc.name}', which rotates (epilogue inputs stay in place)")
    for d, ix in enumerate(index):
        _check_load_index(s, t, d, ix, f"{what}: load of input {t} ('{acc.name}'), index {d}",
                          axes, bound)


def _check_load_index(s: _OpScope, t: int, d: int, ix: Any, what: str,
                      axes: Mapping[str, Any] | set, bound: frozenset) -> None:
    """Index ``d`` of a load of input ``t``: the access's own index, or a read the core can
    serve from its own buffer."""
    acc = s.expr.inputs[t]
    try:
        parsed = AffineIndex.from_dict(read_map(ix, "index"))
    except (DeviceProgramError, KeyError) as err:
        raise s.bad(f"{what}: {err}") from None
    _check_index(s, parsed, what, axes)
    if acc.gather is not None and parsed != acc.indices[d]:
        raise s.bad(f"{what} ({parsed}): a gathered input is read only at its access "
                    f"({acc.indices[d]})")
    unbound = [a for a in parsed.axes if a in s.local and a not in bound]
    if unbound:
        raise s.bad(f"{what}: core-local axis '{unbound[0]}' is used outside a reduce over it")
    if parsed == acc.indices[d]:
        return
    if parsed.is_simple and acc.indices[d].is_simple and \
            s.follows().get(parsed.terms[0][0]) == acc.indices[d].terms[0][0]:
        return  # a core-local axis split with the placing axis: this core's share
    # any other read: core-local axes only, inside the tensor, on a dimension every
    # core holds whole (what the device can serve from its own buffer)
    if any(a not in s.local for a in parsed.axes) or not _whole(s, t, d):
        raise s.bad(f"{what} ({parsed}) differs from the access that places the tensor "
                    f"({acc.indices[d]}): other reads must use core-local axes on a "
                    "dimension the plan keeps whole on every core")
    extents = s.extents
    lo = parsed.offset + sum(min(0, c * (extents[a] - 1)) for a, c in parsed.terms)
    hi = parsed.offset + sum(max(0, c * (extents[a] - 1)) for a, c in parsed.terms)
    if lo < 0 or hi >= acc.shape[d]:
        raise s.bad(f"{what} ({parsed}) reads [{lo}, {hi}], outside the dimension of {acc.shape[d]}")


def _whole(s: _OpScope, t: int, d: int) -> bool:
    """Whether every core holds all of dimension ``d`` of input ``t`` (the plan neither
    splits nor rotates it), so the body may read it at any position."""
    acc, plan, extents = s.expr.inputs[t], s.op.plan, s.extents
    ix = acc.indices[d]
    if not ix.is_simple or extents[ix.terms[0][0]] != acc.shape[d]:
        return False
    a = ix.terms[0][0]
    if isinstance(plan, ExecutionPlan):
        return plan.F(a) == 1 and all(plan.ft(s_, a) == 1 for s_ in range(len(plan.temporal)))
    return plan.tile(a, extents[a]) >= extents[a]


# -- one operator: the tensors it reads and writes
def _check_reads(s: _OpScope, tensors: _Tensors) -> None:
    """Every tensor the operator reads exists as it reads it; its output is new and named."""
    op, n_in = s.op, s.n_in
    if len(op.input_names) != n_in:
        raise s.bad(f"names {len(op.input_names)} inputs, its expression has {n_in}")
    for t, tname in enumerate(op.input_names):
        if tname not in tensors:
            raise s.bad(f"reads unknown tensor {quoted(tname)} (not an input, constant or earlier output)")
        shape, dtype = tensors[tname]
        acc = s.expr.inputs[t]
        if tuple(shape) != acc.tensor_shape or dtype != acc.dtype:
            raise s.bad(f"reads '{tname}' as {acc.dtype}{list(acc.tensor_shape)}, it is {dtype}{list(shape)}")
    if not isinstance(op.output_name, str) or not op.output_name:
        raise s.bad("the output name must be a non-empty string")
    if op.output_name in tensors:
        raise s.bad(f"writes '{op.output_name}', which already exists in the region")
