"""One partitioned Relax region: its operators as tensor expressions, and their plans.

A region (a function with ``Codegen == "icca"``) calls one composite function per offloaded
operator. :func:`extract_region` takes each operator's tensor expression from its TE compute
(:mod:`tvm_icca.lower.te_to_expr`) and records where its inputs come from: a region parameter, a
constant baked into the program, or the output of an earlier operator of the region.
:func:`plan_region` searches each operator's rTensor execution plan (:mod:`tvm_icca.plan_search`)
within the SRAM its region leaves it. The model-level pass
(:mod:`tvm_icca.model_pass.planner`) calls these for every region of a model; nothing else
compiles regions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Collection, Mapping, Sequence

import numpy as np
import tvm
from tvm import relax

from runtime_sim.contract.constants import encode_constant
from runtime_sim.contract.errors import IccaError, describe_operator, short_name
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.lifetimes import staying_outputs
from runtime_sim.contract.program import DeviceProgram, HostJoin, OpProgram, TensorDecl
from tvm_icca.lower.expr_cache import ExprCache
from tvm_icca.lower.te_to_expr import extract_op
from tvm_icca.ops.relax_types import static_shape
from tvm_icca.partition.patterns import composite_label


@dataclass(frozen=True)
class _Value:
    """A region tensor: its program name, shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class PendingOp:
    """An operator of a region before planning: its expression and the tensors it names."""

    name: str
    expr: TensorExpr
    input_names: tuple[str, ...]
    output_name: str
    label: str = ""  # its kind in the user's words (OpProgram.label)

    def describe(self) -> str:
        """The operator as messages name it (:func:`runtime_sim.contract.errors.describe_operator`)."""
        return describe_operator(self.name, self.label or self.expr.kind)


def outputs_at(outputs: Sequence[str], indices: Collection[int]) -> tuple[str, ...]:
    """The distinct names of ``outputs`` at ``indices`` (-1: all of them), in order."""
    return tuple(dict.fromkeys(o for k, o in enumerate(outputs) if -1 in indices or k in indices))


@dataclass(frozen=True)
class RegionOps:
    """A region's operators extracted from Relax, not yet planned.

    ``host_outputs``: the outputs the host reads after every call of the region; they leave
    the chip as they are produced (``DeviceProgram.host_outputs``), so planning does not hold
    them to the region's end. ``host_joins``: those of them a split left in pieces, which
    the host concatenates (``DeviceProgram.host_joins``)."""

    name: str
    inputs: tuple[TensorDecl, ...]
    ops: tuple[PendingOp, ...]
    outputs: tuple[str, ...]
    constants: dict
    host_outputs: tuple[str, ...] = ()
    host_joins: Mapping[str, HostJoin] = field(default_factory=dict)

    @property
    def staying_outputs(self) -> tuple[str, ...]:
        """The outputs held on chip until the region ends (:func:`staying_outputs`)."""
        return staying_outputs(self.outputs, self.host_outputs)

    def with_host_reads(self, indices: Collection[int]) -> "RegionOps":
        """This region with its outputs at ``indices`` (-1: all of them) read by the host."""
        return replace(self, host_outputs=outputs_at(self.outputs, indices))

    def program(self, hw: HardwareSpec, ops: list[OpProgram]) -> DeviceProgram:
        """The device program of the region with these planned operators."""
        return DeviceProgram(region=self.name, hardware=hw.to_dict(), inputs=self.inputs,
                             outputs=self.outputs, ops=tuple(ops), constants=self.constants,
                             host_outputs=self.host_outputs, host_joins=dict(self.host_joins))


def extract_region(func: relax.Function, name: str, hw: HardwareSpec,
                   exprs: ExprCache | None = None) -> RegionOps:
    """The operators of region ``func`` as tensor expressions, in call order."""
    values: dict[relax.Var, _Value] = {}
    inputs = []
    for i, param in enumerate(func.params):
        value = _value_of(param, f"in{i}")
        _check_dtype(value, hw, name, mask=True, index=True)
        values[param] = value
        inputs.append(TensorDecl(value.name, value.shape, value.dtype))

    composites: dict[relax.Var, relax.Function] = {}
    pending: list[PendingOp] = []
    constants: dict[str, dict] = {}
    body = func.body
    for block in body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                composites[binding.var] = value
                continue
            if isinstance(value, relax.Call) and value.op in composites:
                op_name = f"{name}.op{len(pending)}"
                pending.append(_extract_call(op_name, composites[value.op], value, binding.var,
                                             values, constants, hw, exprs))
                continue
            if isinstance(value, relax.Var) and value in values:
                values[binding.var] = values[value]
                continue
            raise IccaError(
                f"region '{short_name(name)}': unexpected binding {type(value).__name__} "
                f"({str(value)[:80]}); regions must only call composite functions"
            )
    outputs = tuple(values[v].name for v in _result_vars(body.body, name))
    return RegionOps(name, tuple(inputs), tuple(pending), outputs, constants)


def _extract_call(op_name, composite, call, out_var, values, constants, hw,
                  exprs: ExprCache | None = None) -> PendingOp:
    if exprs is not None:
        extracted = exprs.extract(composite, op_name)
    else:
        extracted = extract_op(composite, name=op_name)
    input_names = []
    for position, param_index in enumerate(extracted.param_of_input):
        arg = extracted.constants[position] if param_index is None else call.args[param_index]
        if isinstance(arg, (np.ndarray, tvm.ir.GenericConst)):
            array = arg if isinstance(arg, np.ndarray) else arg.value.numpy()
            cname = f"{op_name}.const{position}"
            _check_dtype(_Value(cname, tuple(array.shape), str(array.dtype)), hw, op_name, mask=True,
                         index=True)
            constants[cname] = encode_constant(array)
            input_names.append(cname)
        elif isinstance(arg, relax.Var) and arg in values:
            input_names.append(values[arg].name)
        else:
            raise IccaError(f"operator '{short_name(op_name)}': unsupported argument {type(arg).__name__}")
    out = _value_of(out_var, f"{op_name}.out")
    _check_dtype(out, hw, op_name)
    values[out_var] = out
    label = composite_label(str((composite.attrs or {}).get("Composite", "")))
    return PendingOp(op_name, extracted.expr, tuple(input_names), out.name, label)


def _value_of(var: relax.Var, name: str) -> _Value:
    shape = static_shape(var.ty)
    if shape is None:
        raise IccaError(f"'{short_name(name)}' is not a tensor of static shape ({var.ty}); ICCA regions "
                        "need static shapes")
    return _Value(name, shape, str(var.ty.dtype))


def _check_dtype(value: _Value, hw: HardwareSpec, where: str, mask: bool = False,
                 index: bool = False) -> None:
    """``mask``: a tensor operators only read (region input, constant) may be a bool mask;
    ``index``: it may hold gather ids (each operator's own check says whether it does)."""
    hw.check_dtype(value.dtype, f"tensor '{short_name(value.name)}' {list(value.shape)} of "
                                f"'{short_name(where)}'", mask=mask, index=index)


def _result_vars(expr: relax.Expr, name: str) -> list[relax.Var]:
    if isinstance(expr, relax.Tuple):
        return [v for field in expr.fields for v in _result_vars(field, name)]
    if isinstance(expr, relax.Var):
        return [expr]
    raise IccaError(f"region '{short_name(name)}' returns {type(expr).__name__}; expected tensors")
