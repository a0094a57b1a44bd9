"""A model run's preload/execute instruction stream (Elk §4.5), assembled from its programs.

Each program of a run carries the segment of the stream issued while it runs
(:class:`~runtime_sim.contract.program.PreloadSchedule`); a preload may name an operator of a later
region call. :func:`run_stream` resolves the segments of the programs of one run, in call
order, into one list of :class:`Instruction` on global operator ids ``(call, op)`` and checks
the whole-run rules both executors rely on:

* every operator executes exactly once, in program order (each segment executes its own
  operators);
* every operator that reads off-chip data (:func:`offchip_inputs`: inputs from HBM or the
  host) is preloaded exactly once, before it executes; an operator reading nothing off chip
  may still be preloaded (an empty preload);
* a preload names an operator of this or a later call of the run, not yet executed;
* either every program of the run has a segment or none has (then operators fetch their
  inputs with the default next-operator prefetch, the pre-Elk behaviour).

The functional device (:mod:`runtime_sim.functional.device`) and the timing simulator
(:mod:`runtime_sim.timing`) both execute this stream; :mod:`runtime_sim.contract.preload_chunks` says what a
preload leaves on the cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from runtime_sim.contract.errors import DeviceProgramError, short_name
from runtime_sim.contract.program import (
    EXECUTE,
    PRELOAD,
    DeviceProgram,
    OpProgram,
    model_state_source,
)

#: Input sources an operator preloads (Elk §2.2: data that lives off chip).
OFFCHIP_SOURCES = ("hbm", "host")
#: An input produced by an earlier operator of the same region.
PRODUCED = "produced"


@dataclass(frozen=True)
class Instruction:
    kind: str  # PRELOAD or EXECUTE
    call: int  # index of the region call in the run
    op: int  # operator index in that call's program


def input_sources(program: DeviceProgram, has_hbm: bool) -> list[list[str]]:
    """Per operator, per input: where the input comes from (:data:`PRODUCED`, or a
    :data:`~runtime_sim.contract.program.INPUT_SOURCES` entry). A constant without a source is model
    state (:func:`~runtime_sim.contract.program.model_state_source`). The one reading of sources for
    the device, the timing simulator and the compiler."""
    decls = {d.name: d.source for d in program.inputs}
    produced: set[str] = set()
    out = []
    for op in program.ops:
        row = []
        for name in op.input_names:
            if name in produced:
                row.append(PRODUCED)
            elif name in decls:
                row.append(decls[name])
            elif name in program.constants:
                entry = program.constants[name]
                source = entry.get("source") if isinstance(entry, dict) else None
                row.append(source if source is not None else model_state_source(has_hbm))
            else:
                raise DeviceProgramError(f"operator '{short_name(op.name)}' reads unknown "
                                         f"tensor '{short_name(name)}'")
        out.append(row)
        produced.add(op.output_name)
    return out


def offchip_inputs(program: DeviceProgram, has_hbm: bool) -> list[list[int]]:
    """Per operator, the indices of its inputs that live off chip (HBM or host)."""
    return [[t for t, s in enumerate(row) if s in OFFCHIP_SOURCES]
            for row in input_sources(program, has_hbm)]


def has_stream(programs: Sequence[DeviceProgram]) -> bool:
    """Whether the run executes a preload stream; raises if only some programs carry one."""
    flags = {p.preload_schedule is not None for p in programs}
    if len(flags) > 1:
        missing = [p.region for p in programs if p.preload_schedule is None]
        raise DeviceProgramError(
            f"only some regions of the run carry a preload schedule (none in {missing[:3]}): "
            "compile every region of the model with the same preload design"
        )
    return flags == {True}


def run_stream(programs: Sequence[DeviceProgram], has_hbm: bool) -> list[Instruction]:
    """The run's instructions in issue order, checked (see the module docstring)."""
    if not has_stream(programs):
        return []
    preloaded: set[tuple[int, int]] = set()
    executed: set[tuple[int, int]] = set()
    out: list[Instruction] = []
    for call, program in enumerate(programs):
        for entry in program.preload_schedule.stream:
            if entry[0] == EXECUTE:
                out.append(Instruction(EXECUTE, call, int(entry[1])))
                executed.add((call, int(entry[1])))
                continue
            target = (call + int(entry[1]), int(entry[2]))
            where = f"region '{short_name(program.region)}' (call {call})"
            if target[0] >= len(programs) or not 0 <= target[1] < len(programs[target[0]].ops):
                raise DeviceProgramError(f"{where} preloads operator {target[1]} of call "
                                         f"{target[0]}, which the run does not have")
            if target in preloaded:
                raise DeviceProgramError(f"{where} preloads {_op_name(programs, target)} twice")
            if target in executed:
                raise DeviceProgramError(f"{where} preloads {_op_name(programs, target)} after it ran")
            preloaded.add(target)
            out.append(Instruction(PRELOAD, *target))
    for call, program in enumerate(programs):
        for j, inputs in enumerate(offchip_inputs(program, has_hbm)):
            if inputs and (call, j) not in preloaded:
                raise DeviceProgramError(
                    f"{_op_name(programs, (call, j))} reads off-chip data but the stream never "
                    "preloads it")
    # executes come in program order per segment (validate_program); a preload must precede
    # the execute of its operator
    seen: set[tuple[int, int]] = set()
    for ins in out:
        key = (ins.call, ins.op)
        if ins.kind == PRELOAD:
            seen.add(key)
        elif key in preloaded and key not in seen:
            raise DeviceProgramError(f"{_op_name(programs, key)} executes before its preload")
    return out


def _op_name(programs: Sequence[DeviceProgram], key: tuple[int, int]) -> str:
    op: OpProgram = programs[key[0]].ops[key[1]]
    return f"operator '{short_name(op.name)}' (call {key[0]})"


def call_segment(program: DeviceProgram, call: int, run_length: int | None,
                 carried: Sequence[int], has_hbm: bool
                 ) -> tuple[list[Instruction], list[Instruction]]:
    """One region call's part of the run's stream, checked before anything of it runs: for an
    executor that sees the run one call at a time (the functional device, driven call by call
    by the VM), the rules of :func:`run_stream` that concern this call.

    ``carried`` are the operators of this call that earlier calls of the run preloaded, in
    issue order; ``run_length`` is the number of calls of the run (``None``: unknown, then
    the stream may not name a later call). Returns this call's instructions (first a
    ``PRELOAD`` for each carried operator, then the segment's own instructions on this call)
    and the preloads the segment issues for later calls (``Instruction.call`` absolute).
    """
    where = f"region '{short_name(program.region)}' (call {call})"
    ops = program.ops
    if program.preload_schedule is None:
        raise DeviceProgramError(f"{where} carries no preload schedule")
    out: list[Instruction] = []
    later: list[Instruction] = []
    preloaded: set[int] = set()
    executed: set[int] = set()
    for j in carried:
        if not 0 <= j < len(ops):
            raise DeviceProgramError(f"an earlier call of the run preloads operator {j} of {where}, "
                                     f"which has {len(ops)} operators")
        if j in preloaded:
            raise DeviceProgramError(f"operator '{ops[j].name}' of {where} is preloaded twice")
        preloaded.add(j)
        out.append(Instruction(PRELOAD, call, j))
    seen_later: set[tuple[int, int]] = set()
    for entry in program.preload_schedule.stream:
        if entry[0] == EXECUTE:
            j = int(entry[1])
            executed.add(j)
            out.append(Instruction(EXECUTE, call, j))
            continue
        offset, j = int(entry[1]), int(entry[2])
        if offset > 0:
            target = call + offset
            if run_length is None:
                raise DeviceProgramError(f"{where} preloads an operator of call {target}, but the "
                                         "program names no run_order: the run's calls are unknown")
            if target >= run_length:
                raise DeviceProgramError(f"{where} preloads operator {j} of call {target}, which "
                                         f"the run ({run_length} calls) does not have")
            if (target, j) in seen_later:
                raise DeviceProgramError(f"{where} preloads operator {j} of call {target} twice")
            seen_later.add((target, j))
            later.append(Instruction(PRELOAD, target, j))
            continue
        if not 0 <= j < len(ops):
            raise DeviceProgramError(f"{where} preloads operator {j}, which the region does not have")
        if j in preloaded:
            raise DeviceProgramError(f"operator '{ops[j].name}' of {where} is preloaded twice")
        if j in executed:
            raise DeviceProgramError(f"operator '{ops[j].name}' of {where} is preloaded after it ran")
        preloaded.add(j)
        out.append(Instruction(PRELOAD, call, j))
    offchip = offchip_inputs(program, has_hbm)
    ready: set[int] = set()
    for ins in out:
        if ins.kind == PRELOAD:
            ready.add(ins.op)
        elif offchip[ins.op] and ins.op not in ready:
            why = "before its preload" if ins.op in preloaded else "but the stream never preloads it"
            raise DeviceProgramError(f"operator '{ops[ins.op].name}' of {where} reads off-chip "
                                     f"data and executes {why}")
    return out, later
