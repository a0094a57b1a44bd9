"""runtime_sim.contract.op_kinds: the op kinds of the device format, owned by the contract."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.op_kinds import OP_KINDS
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import preset
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.contract.validation import validate_program
from tvm_icca.testing import exprs as builders


def test_op_kinds_are_distinct_names():
    assert isinstance(OP_KINDS, tuple) and OP_KINDS
    assert all(isinstance(k, str) and k for k in OP_KINDS)
    assert len(set(OP_KINDS)) == len(OP_KINDS)


def _one_op_program(kind: str) -> DeviceProgram:
    expr = builders.attention_expr(4, 6, 4) if kind == "attention" else \
        dataclasses.replace(builders.bias_add(4, 6), kind=kind)
    op = OpProgram("add", expr, ExecutionPlan({}, ({},) * (len(expr.inputs) + 1)),
                   tuple(t.name for t in expr.inputs), expr.output.name)
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype) for t in expr.inputs)
    return DeviceProgram("r0", preset("ipu-mk2").to_dict(), decls, (expr.output.name,), (op,))


@pytest.mark.parametrize("kind", OP_KINDS)
def test_every_op_kind_is_valid_in_a_program(kind):
    validate_program(_one_op_program(kind))


def test_a_kind_outside_op_kinds_is_refused_naming_the_known_kinds():
    with pytest.raises(DeviceProgramError) as info:
        validate_program(_one_op_program("fft"))
    assert f"unknown operator kind 'fft' (known: {', '.join(OP_KINDS)})" in str(info.value)


def test_the_contract_imports_nothing_else_of_the_project():
    # a fresh interpreter: this test session has imported schedules and tvm_icca already
    script = ("import sys, runtime_sim.contract.op_kinds, runtime_sim.contract.validation\n"
              "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('schedules', 'tvm', 'tvm_icca')\n"
              "             or m.startswith(('runtime_sim.machine', 'runtime_sim.functional',\n"
              "                              'runtime_sim.timing')))\n"
              "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
