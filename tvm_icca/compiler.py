"""From one partitioned Relax region to a device program (the codegen's middle end).

A region (a function with ``Codegen == "icca"``) calls one composite function per offloaded
operator. For each call this module takes the operator's tensor expression from its TE
compute (:mod:`tvm_icca.tensor_expr`), searches an rTensor execution plan
(:mod:`tvm_icca.plans`) and records where its inputs come from: a region parameter, a
constant baked into the program, or the output of an earlier operator of the region.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from runtime_sim.constants import encode_constant
from runtime_sim.errors import IccaError, PlanNotFoundError, UnsupportedDtypeError
from runtime_sim.hardware import HardwareSpec
from runtime_sim.program import DeviceProgram, OpProgram, TensorDecl, TensorExpr

from .plans import CostModel, PlannedOp, plan_operator
from .plans.vgm import plan_vgm_operator
from .relax_types import static_shape
from .tensor_expr import ExtractedOp, extract_op

#: Execution models a region can be compiled for.
EXECUTION_MODELS = ("t10", "vgm")


class PlanCache:
    """Memo of operator plans and tensor expressions, shared by the regions of a model.

    The layers of an LLM are identical, so most operators of a 40-layer model are planned
    40 times with the same result. A plan depends on the operator's structure (axes,
    shapes, index maps, body), the chip, the SRAM budget and the cost model -- not on the
    tensor names, which embed the region name -- so plans are keyed on the expression's
    JSON with names blanked. Tensor expressions are keyed on the composite function's
    structure (``tvm_ffi.structural_hash`` / ``structural_equal``); a hit is renamed for the
    operator at hand. Failures are not cached (they raise every time).
    """

    def __init__(self) -> None:
        self._plans: dict[tuple, PlannedOp] = {}
        self._exprs: dict[int, list[tuple[relax.Function, ExtractedOp]]] = {}
        self._cost_models: list[CostModel] = []  # keeps id() keys valid
        self.hits = 0
        self.misses = 0

    def plan(self, expr: TensorExpr, hw: HardwareSpec, cost_model: CostModel | None,
             budget: int, name: str) -> PlannedOp:
        if cost_model is not None and all(m is not cost_model for m in self._cost_models):
            self._cost_models.append(cost_model)
        key = (_structure_key(expr), hw, int(budget), None if cost_model is None else id(cost_model))
        planned = self._plans.get(key)
        if planned is None:
            self.misses += 1
            planned = plan_operator(expr, hw, cost_model=cost_model, budget_bytes=budget, name=name)
            self._plans[key] = planned
        else:
            self.hits += 1
        return planned

    def extract(self, composite: relax.Function, name: str) -> ExtractedOp:
        bucket = self._exprs.setdefault(tvm_ffi.structural_hash(composite), [])
        for seen, extracted in bucket:
            if tvm_ffi.structural_equal(seen, composite):
                output = dataclasses.replace(extracted.expr.output, name=name)
                return dataclasses.replace(
                    extracted, expr=dataclasses.replace(extracted.expr, output=output))
        extracted = extract_op(composite, name=name)
        bucket.append((composite, extracted))
        return extracted


def _structure_key(expr: TensorExpr) -> str:
    data = expr.to_dict()
    for access in (*data["inputs"], data["output"]):
        access["name"] = ""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class _Value:
    """A region tensor: its program name, shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


def compile_region(
    func: relax.Function,
    name: str,
    hw: HardwareSpec,
    cost_model: CostModel | None = None,
    plan_cache: PlanCache | None = None,
    execution: str = "t10",
    vgm_region_bytes: int | None = None,
) -> DeviceProgram:
    """Plan every operator of ``func`` and return the region's device program.

    ``plan_cache`` shares plans and tensor expressions with other regions (see
    :class:`PlanCache`); without it every operator is extracted and planned afresh.
    ``execution`` selects the execution model: ``"t10"`` (compute-shift plans, the backend's
    own) or ``"vgm"`` (the load-compute-store baseline on a virtual global memory, T10 §2.2,
    with ``vgm_region_bytes`` reserved per core; timing-only).
    """
    if execution not in EXECUTION_MODELS:
        raise IccaError(f"unknown execution model '{execution}'; choose one of {EXECUTION_MODELS}")
    values: dict[relax.Var, _Value] = {}
    inputs = []
    for i, param in enumerate(func.params):
        value = _value_of(param, f"in{i}")
        _check_dtype(value, hw, name)
        values[param] = value
        inputs.append(TensorDecl(value.name, value.shape, value.dtype))

    composites: dict[relax.Var, relax.Function] = {}
    pending: list[_PendingOp] = []
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
                                             values, constants, hw, plan_cache))
                continue
            if isinstance(value, relax.Var) and value in values:
                values[binding.var] = values[value]
                continue
            raise IccaError(
                f"region '{name}': unexpected binding {type(value).__name__} "
                f"({str(value)[:80]}); regions must only call composite functions"
            )
    outputs = [values[v].name for v in _result_vars(body.body, name)]
    if execution == "vgm":
        ops = [_plan_vgm(op, hw, vgm_region_bytes) for op in pending]
    else:
        ops = _plan_region(pending, outputs, hw, cost_model, plan_cache)
    return DeviceProgram(
        region=name,
        hardware=hw.to_dict(),
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        ops=tuple(ops),
        constants=constants,
    )


@dataclass(frozen=True)
class _PendingOp:
    name: str
    expr: TensorExpr
    input_names: tuple[str, ...]
    output_name: str


def _extract_call(op_name, composite, call, out_var, values, constants, hw,
                  plan_cache: PlanCache | None = None) -> _PendingOp:
    if plan_cache is not None:
        extracted = plan_cache.extract(composite, op_name)
    else:
        extracted = extract_op(composite, name=op_name)
    input_names = []
    for position, param_index in enumerate(extracted.param_of_input):
        arg = extracted.constants[position] if param_index is None else call.args[param_index]
        if isinstance(arg, (np.ndarray, tvm.ir.GenericConst)):
            array = arg if isinstance(arg, np.ndarray) else arg.value.numpy()
            cname = f"{op_name}.const{position}"
            _check_dtype(_Value(cname, tuple(array.shape), str(array.dtype)), hw, op_name)
            constants[cname] = encode_constant(array)
            input_names.append(cname)
        elif isinstance(arg, relax.Var) and arg in values:
            input_names.append(values[arg].name)
        else:
            raise IccaError(f"operator '{op_name}': unsupported argument {type(arg).__name__}")
    out = _value_of(out_var, f"{op_name}.out")
    _check_dtype(out, hw, op_name)
    values[out_var] = out
    return _PendingOp(op_name, extracted.expr, tuple(input_names), out.name)


def _plan_vgm(op: _PendingOp, hw: HardwareSpec, region_bytes: int | None) -> OpProgram:
    planned = plan_vgm_operator(op.expr, hw, vgm_region_bytes=region_bytes, name=op.name)
    return OpProgram(op.name, op.expr, planned.plan, op.input_names, op.output_name,
                     planned.estimated_time_s)


def _plan_region(
    pending: list[_PendingOp], outputs: list[str], hw: HardwareSpec, cost_model: CostModel | None,
    plan_cache: PlanCache | None = None,
) -> list[OpProgram]:
    """Plan the operators in order, leaving room for intermediates that stay on chip.

    The device keeps an operator's output on the cores that own it until its last reader has
    run (region outputs until the region ends), so while operator ``i`` runs, every earlier
    output still needed after ``i`` occupies up to one partition per core. Its plan gets the
    SRAM that remains.
    """
    last_read = {}
    for i, op in enumerate(pending):
        for tensor in op.input_names:
            last_read[tensor] = i
    for tensor in outputs:
        last_read[tensor] = len(pending)
    resident: dict[str, int] = {}  # tensor -> bytes per owner core of its producer's layout
    ops = []
    for i, op in enumerate(pending):
        held = sum(b for t, b in resident.items() if last_read.get(t, -1) > i)
        budget = hw.usable_sram_bytes - held
        if budget <= 0:
            raise PlanNotFoundError(
                f"operator '{op.name}': intermediates of its region already fill the "
                f"{hw.usable_sram_bytes} bytes per core of '{hw.name}'"
            )
        if plan_cache is not None:
            planned = plan_cache.plan(op.expr, hw, cost_model, budget, op.name)
        else:
            planned = plan_operator(op.expr, hw, cost_model=cost_model, budget_bytes=budget,
                                    name=op.name)
        resident[op.output_name] = planned.layout.partition_bytes(len(op.expr.tensors) - 1)
        ops.append(OpProgram(op.name, op.expr, planned.plan, op.input_names, op.output_name,
                             planned.time_s))
    return ops


def _value_of(var: relax.Var, name: str) -> _Value:
    shape = static_shape(var.ty)
    if shape is None:
        raise IccaError(f"'{name}' is not a tensor of static shape ({var.ty}); ICCA regions need static shapes")
    return _Value(name, shape, str(var.ty.dtype))


def _check_dtype(value: _Value, hw: HardwareSpec, where: str) -> None:
    if not hw.supports_dtype(value.dtype):
        raise UnsupportedDtypeError(
            f"'{where}': tensor '{value.name}' has dtype {value.dtype}; the simulated ICCA device "
            f"'{hw.name}' supports {', '.join(hw.dtypes)}"
        )


def _result_vars(expr: relax.Expr, name: str) -> list[relax.Var]:
    if isinstance(expr, relax.Tuple):
        return [v for field in expr.fields for v in _result_vars(field, name)]
    if isinstance(expr, relax.Var):
        return [expr]
    raise IccaError(f"region '{name}' returns {type(expr).__name__}; expected tensors")


def constant_array(program: DeviceProgram, name: str) -> np.ndarray:
    """Decode a constant of a program (for inspection and tests)."""
    from runtime_sim.constants import decode_constant

    return decode_constant(name, program.constants[name])
