"""Small device programs the timing simulator's tests share.

Each builder returns a hand-written :class:`~runtime_sim.contract.program.DeviceProgram` whose
costs have a closed form (``tests/test_timing*.py``, ``tests/test_trace.py``).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from tvm_icca.testing import exprs as builders


def one_op_program(expr: TensorExpr, plan: ExecutionPlan, hw: HardwareSpec,
                   sources: Mapping[str, str] | None = None, constants: Iterable[str] = (),
                   name: str = "op0", region: str = "r0") -> DeviceProgram:
    """A program of one operator; its inputs come from ``sources`` (name -> source, default
    ``"host"``) or are ``constants`` (shape only).

    Constants are model state kept on chip (``"resident"``) on a chip without HBM, and read
    from HBM on a chip with it (the source a constant without one gets there)."""
    sources = sources or {}
    state = {} if hw.hbm_bandwidth > 0 else {"source": "resident"}
    consts = {t.name: {"dtype": t.dtype, "shape": list(t.shape), **state}
              for t in expr.inputs if t.name in constants}
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype, sources.get(t.name, "host"))
                  for t in expr.inputs if t.name not in constants)
    op = OpProgram(name, expr, plan, tuple(t.name for t in expr.inputs), expr.output.name)
    return DeviceProgram(region, hw.to_dict(), decls, (expr.output.name,), (op,), constants=consts)


def chain_program(hw: HardwareSpec) -> DeviceProgram:
    """A region of three operators: C = A @ B, then D = C + b and E = row sums of C, each in a
    plan of its own (so C is re-laid out twice)."""
    mm = builders.matmul(6, 8, 10)
    ba = builders.bias_add(6, 10)
    rs = builders.row_sum(6, 10)
    ops = (
        OpProgram("mm", mm, ExecutionPlan({"m": 2, "n": 2, "k": 2}, ({"k": 2}, {}, {})), ("A", "B"), "C"),
        OpProgram("add", ba, ExecutionPlan({"i": 3, "j": 2}, ({}, {"j": 3}, {})), ("C", "b"), "D"),
        OpProgram("sum", rs, ExecutionPlan({"i": 2, "k": 2}, ({}, {})), ("C",), "E"),
    )
    decls = (TensorDecl("A", (6, 8), "float32"), TensorDecl("B", (8, 10), "float32"),
             TensorDecl("b", (1, 10), "float32"))
    return DeviceProgram("chain", hw.to_dict(), decls, ("D", "E"), ops)


def two_weight_program(hw: HardwareSpec) -> tuple[DeviceProgram, OpLayout]:
    """Two matmuls in a row (H = X @ W0, Y = H @ W1), their weights constants without data
    (timing only, read from HBM on a chip with it); with the layout both run in."""
    e = builders.matmul(64, 64, 64)
    plan = ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {}))
    ops = (OpProgram("mm0", e, plan, ("X", "W0"), "H"), OpProgram("mm1", e, plan, ("H", "W1"), "Y"))
    decls = (TensorDecl("X", (64, 64), "float32", "chip"),)
    consts = {w: {"dtype": "float32", "shape": [64, 64]} for w in ("W0", "W1")}
    return DeviceProgram("mlp", hw.to_dict(), decls, ("Y",), ops, constants=consts), OpLayout(e, plan)


def producer_consumer_program(hw: HardwareSpec, chips: int) -> DeviceProgram:
    """Y = X + b on all 16 cores of 4 chips (one row per core: chip k holds rows 4k..4k+3),
    then S = row sums of Y on 4 cores (4 rows each), on one chip (``chips=1``) or spread one
    core per chip (``chips=4``)."""
    prod = builders.bias_add(16, 64)
    cons = builders.row_sum(16, 64)
    p_plan = ExecutionPlan({"i": 16}, ({}, {}, {}))
    c_plan = ExecutionPlan({"i": 4}, ({}, {}), chips=chips)
    decls = (TensorDecl("X", (16, 64), "float32", "host"), TensorDecl("b", (1, 64), "float32", "host"))
    ops = (OpProgram("op0", prod, p_plan, ("X", "b"), "Y"), OpProgram("op1", cons, c_plan, ("Y",), "S"))
    return DeviceProgram("r0", hw.to_dict(), decls, ("S",), ops)
