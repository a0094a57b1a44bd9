"""One partitioned Relax region: its operators as tensor expressions, and their plans.

A region (a function with ``Codegen == "icca"``) calls one composite function per offloaded
operator. :func:`extract_region` takes each operator's tensor expression from its TE compute
(:mod:`tvm_icca.lower.te_to_expr`) and records where its inputs come from: a region parameter, a
constant baked into the program, or the output of an earlier operator of the region.
:func:`plan_region` searches each operator's rTensor execution plan (:mod:`tvm_icca.plans`)
within the SRAM its region leaves it. The model-level pass
(:mod:`tvm_icca.planning.planner`) calls these for every region of a model; nothing else
compiles regions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from runtime_sim.contract.constants import encode_constant
from runtime_sim.contract.errors import IccaError, PlanNotFoundError, describe_operator, short_name
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl, TensorExpr

from runtime_sim.contract.lifetimes import held_bytes as lifetime_held_bytes

from runtime_sim.contract.layout import OpLayout

from tvm_icca.plans import CostModel, PlannedOp, PlanSearchCache, plan_operator
from tvm_icca.plans.mapping import Producer, producer_key
from tvm_icca.plans.search import optimum_within
from tvm_icca.plans.option_pool import available_jobs, map_in_workers, options_of_many
from tvm_icca.plans.reconcile import PlanOption, operator_options
from tvm_icca.plans.vgm import plan_vgm_operator
from tvm_icca.partition.patterns import composite_label
from tvm_icca.ops.relax_types import static_shape
from tvm_icca.lower.te_to_expr import ExtractedOp, extract_op
from tvm_icca.plans.plan_hook import PlanRequest, planned_with_hook

#: One rung of an operator's budget ladder (:meth:`PlanCache.prefetch_ladders`): its
#: expression, the SRAM budget, its name (for errors) and its inputs read from HBM.
LadderStep = tuple[TensorExpr, int, str, tuple[int, ...]]

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
    operator at hand. A plan that does not exist within a budget is remembered too (its
    search proves the smallest footprint, which costs more than a successful search): asking
    again raises the same :class:`PlanNotFoundError` at once.
    """

    def __init__(self, jobs: int | None = None) -> None:
        #: worker processes for the operators' candidate scans (None: every available CPU)
        self.jobs = available_jobs() if jobs is None else max(1, int(jobs))
        self._plans: dict[tuple, PlannedOp] = {}
        self._exprs: dict[int, list[tuple[relax.Function, ExtractedOp]]] = {}
        self._cost_models: list[CostModel] = []  # keeps id() keys valid
        self._options: dict[tuple, tuple[PlanOption, ...]] = {}
        # key -> (the operator's description, the message of its PlanNotFoundError)
        self._failures: dict[tuple, tuple[str, str]] = {}
        self._budgets: dict[tuple, list[tuple[int, PlannedOp]]] = {}  # key but budget -> plans
        self.search = PlanSearchCache()  # plan structures and f_t assignments, shared
        self.hits = 0
        self.misses = 0

    def plan(self, expr: TensorExpr, hw: HardwareSpec, cost_model: CostModel | None,
             budget: int, name: str, hbm_inputs: tuple[int, ...] = (),
             producers: tuple[Producer, ...] = ()) -> PlannedOp:
        if cost_model is not None and all(m is not cost_model for m in self._cost_models):
            self._cost_models.append(cost_model)
        key = self._key(expr, hw, cost_model, budget, hbm_inputs, producers)
        planned = self._plans.get(key)
        if planned is None and key in self._failures:
            self.hits += 1
            first, message = self._failures[key]
            raise PlanNotFoundError(message.replace(first, name))  # same structure, this name
        if planned is None and cost_model is None:
            # identical layers of one region differ in budget (plans.search.optimum_within)
            planned = optimum_within(self._budgets.get(self._but_budget(key), ()), budget)
        if planned is None:
            self.misses += 1
            try:
                planned = plan_operator(expr, hw, cost_model=cost_model, budget_bytes=budget,
                                        name=name, cache=self.search, hbm_inputs=hbm_inputs,
                                        producers=producers)
            except PlanNotFoundError as err:
                self._failures[key] = (name, str(err))
                raise
            self._remember(key, planned)
        else:
            self.hits += 1
        return planned

    @staticmethod
    def _key(expr: TensorExpr, hw: HardwareSpec, cost_model: CostModel | None, budget: int,
             hbm_inputs: Sequence[int], producers: Sequence[Producer]) -> tuple:
        # the placement depends on where the producers left the inputs
        return (expr.structure_key(), hw, int(budget), None if cost_model is None else id(cost_model),
                tuple(hbm_inputs), producer_key(tuple(producers)))

    @staticmethod
    def _but_budget(key: tuple) -> tuple:
        """A :meth:`_key` without its budget: the searches :func:`optimum_within` compares."""
        return key[:2] + key[3:]

    def _remember(self, key: tuple, planned: PlannedOp) -> None:
        self._plans[key] = planned
        self._budgets.setdefault(self._but_budget(key), []).append((key[2], planned))

    def prefetch_ladders(self, ladders: Sequence[Sequence[LadderStep]], hw: HardwareSpec) -> None:
        """Search the default-model plans of every ladder, so that asking :meth:`plan` for
        them afterwards is a hit.

        The ladders of one operator structure (the identical projections of a transformer
        layer, planned with different fastest footprints) are merged into one climb, largest
        budget first: a plan found within a larger budget answers a smaller one it fits
        (:func:`.plans.search.optimum_within`), and the climb stops at the first budget
        without a plan (none exists within a smaller one). Climbs run side by side on up to
        :attr:`jobs` worker processes, forked with this cache as it is, which send back what
        they searched; a climb a worker did not finish runs here."""
        climbs: dict[tuple, dict[int, LadderStep]] = {}
        for ladder in ladders:
            for step in ladder:
                expr, budget, _, hbm = step
                climbs.setdefault((expr.structure_key(), tuple(hbm)), {}).setdefault(int(budget), step)
        chains = [[steps[b] for b in sorted(steps, reverse=True)] for steps in climbs.values()]

        def climb(chain: Sequence[LadderStep]) -> list[tuple[tuple, PlannedOp | None, tuple]]:
            found = []
            for expr, budget, name, hbm in chain:
                key = self._key(expr, hw, None, budget, hbm, ())
                misses = self.misses
                try:
                    planned = self.plan(expr, hw, None, budget, name, hbm)
                except PlanNotFoundError:
                    found.append((key, None, self._failures[key]))
                    break
                if self.misses > misses:
                    found.append((key, planned, ()))
            return found

        for chain, searched in zip(chains, map_in_workers(climb, chains, self.jobs)):
            if searched is None:
                climb(chain)
                continue
            for key, planned, failure in searched:
                if key in self._plans or key in self._failures:
                    continue
                if planned is None:
                    self._failures[key] = failure
                else:
                    self._remember(key, planned)

    def options(self, expr: TensorExpr, hw: HardwareSpec, resident: list[int]) -> tuple[PlanOption, ...]:
        """Idle/active candidates of an operator (:func:`.plans.reconcile.operator_options`)
        within the whole SRAM, once per operator structure: the time/memory frontier within a
        smaller budget is the part of it that fits, so operators differing only in what their
        region holds around them share it (the caller keeps what fits its budget)."""
        key = ("options", expr.structure_key(), hw, tuple(resident))
        found = self._options.get(key)
        if found is None:
            found = self._options[key] = operator_options(expr, hw, resident, hw.usable_sram_bytes,
                                                          cache=self.search)
        return found

    def prefetch_options(self, requests: Sequence[tuple[TensorExpr, Sequence[int]]],
                         hw: HardwareSpec) -> None:
        """Compute the :meth:`options` of every ``(expr, resident)`` request not memoized yet,
        on up to :attr:`jobs` worker processes (:mod:`.plans.option_pool`)."""
        missing: dict[tuple, tuple[TensorExpr, tuple[int, ...]]] = {}
        for expr, resident in requests:
            key = ("options", expr.structure_key(), hw, tuple(resident))
            if key not in self._options and key not in missing:
                missing[key] = (expr, tuple(resident))
        found = options_of_many(list(missing.values()), hw, self.jobs, cache=self.search)
        self._options.update(zip(missing, found))

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


@dataclass(frozen=True)
class RegionOps:
    """A region's operators extracted from Relax, not yet planned."""

    name: str
    inputs: tuple[TensorDecl, ...]
    ops: tuple[PendingOp, ...]
    outputs: tuple[str, ...]
    constants: dict

    def program(self, hw: HardwareSpec, ops: list[OpProgram]) -> DeviceProgram:
        """The device program of the region with these planned operators."""
        return DeviceProgram(region=self.name, hardware=hw.to_dict(), inputs=self.inputs,
                             outputs=self.outputs, ops=tuple(ops), constants=self.constants)


def compile_region(
    func: relax.Function,
    name: str,
    hw: HardwareSpec,
    cost_model: CostModel | None = None,
    plan_cache: PlanCache | None = None,
    execution: str = "t10",
    vgm_region_bytes: int | None = None,
    hbm_params: Sequence[int] = (),
    hbm_constants: bool = False,
) -> DeviceProgram:
    """Plan every operator of ``func`` and return the region's device program.

    ``plan_cache`` shares plans and tensor expressions with other regions (see
    :class:`PlanCache`); without it every operator is extracted and planned afresh.
    ``execution`` selects the execution model: ``"t10"`` (compute-shift plans, the backend's
    own) or ``"vgm"`` (the load-compute-store baseline on a virtual global memory, T10 §2.2,
    with ``vgm_region_bytes`` reserved per core). ``hbm_params``: positions of the parameters
    the region reads from HBM (model state on a chip with HBM), and ``hbm_constants`` whether
    its constants come from there too: the mapping of plans to chips keeps them from being
    read once per chip (:mod:`.plans.mapping`).
    """
    if execution not in EXECUTION_MODELS:
        raise IccaError(f"unknown execution model '{execution}'; choose one of {EXECUTION_MODELS}")
    region = extract_region(func, name, hw, plan_cache)
    if execution == "vgm":
        ops = [_plan_vgm(op, hw, vgm_region_bytes) for op in region.ops]
    else:
        hbm = {region.inputs[i].name for i in hbm_params} | (set(region.constants) if hbm_constants else set())
        ops = plan_region(region, hw, cost_model, plan_cache, frozenset(hbm))[0]
    return region.program(hw, ops)


def extract_region(func: relax.Function, name: str, hw: HardwareSpec,
                   plan_cache: PlanCache | None = None) -> RegionOps:
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
                                             values, constants, hw, plan_cache))
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
                  plan_cache: PlanCache | None = None) -> PendingOp:
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


def _plan_vgm(op: PendingOp, hw: HardwareSpec, region_bytes: int | None) -> OpProgram:
    planned = plan_vgm_operator(op.expr, hw, vgm_region_bytes=region_bytes, name=op.describe())
    return OpProgram(op.name, op.expr, planned.plan, op.input_names, op.output_name,
                     planned.estimated_time_s, label=op.label)


def plan_region(
    region: RegionOps, hw: HardwareSpec, cost_model: CostModel | None = None,
    plan_cache: PlanCache | None = None, hbm_names: frozenset[str] = frozenset(),
) -> tuple[list[OpProgram], list[int]]:
    """Plan the operators in order, leaving room for intermediates that stay on chip.

    The device keeps an operator's output on the cores that own it until its last reader has
    run (region outputs until the region ends), so while operator ``i`` runs, every earlier
    output still needed after ``i`` occupies up to one partition per core (see
    :func:`held_bytes`). Its plan gets the SRAM that remains: that budget is returned per
    operator, with the planned operators. ``hbm_names``: the region tensors read from HBM.
    Each operator's placement on the chips sees the layouts of the earlier operators whose
    outputs it reads (:func:`.plans.mapping.choose_core_order`).
    """
    ops: list[OpProgram] = []
    layouts: dict[str, OpLayout] = {}  # output name -> its producer's layout

    def plan_one(op: PendingOp, budget: int) -> int:
        hbm = tuple(t for t, n in enumerate(op.input_names) if n in hbm_names)
        producers = tuple((t, layouts[n]) for t, n in enumerate(op.input_names)
                          if n in layouts and t not in hbm)
        if plan_cache is not None:
            planned = plan_cache.plan(op.expr, hw, cost_model, budget, op.describe(), hbm, producers)
        else:
            planned = plan_operator(op.expr, hw, cost_model=cost_model, budget_bytes=budget,
                                    name=op.describe(), hbm_inputs=hbm, producers=producers)
        # tuning records (tvm_icca.use_database) may replace the plan; no-op otherwise
        own = planned
        planned = planned_with_hook(PlanRequest(op.name, op.expr, hw, budget, hbm, producers), planned)
        layouts[op.output_name] = OpLayout(op.expr, planned.plan, hw.cores_per_chip)
        ops.append(OpProgram(op.name, op.expr, planned.plan, op.input_names, op.output_name,
                             planned.time_s, label=op.label, tuned=planned is not own))
        return planned.layout.partition_bytes(len(op.expr.tensors) - 1)

    budgets = region_budgets(region, hw, plan_one)
    return ops, budgets


def region_budgets(region: RegionOps, hw: HardwareSpec,
                   plan_one: Callable[[PendingOp, int], int]) -> list[int]:
    """Per operator of ``region``, in order, the SRAM per core its plan may use: what the
    earlier outputs still held while it runs (:func:`held_bytes`) leave. ``plan_one(op,
    budget)`` plans an operator within its budget and returns its output's partition bytes
    per core, which the later budgets then account for."""
    budgets: list[int] = []
    out_bytes: list[int] = []
    for i, op in enumerate(region.ops):
        budget = hw.usable_sram_bytes - held_bytes(region, out_bytes)[i]
        if budget <= 0:
            raise PlanNotFoundError(
                f"{op.describe()} ({op.expr.tensor_summary()}): the intermediates its region "
                f"holds already fill the {hw.usable_sram_bytes} usable bytes per core of chip "
                f"'{hw.name}' ({hw.num_cores} cores)"
            )
        out_bytes.append(plan_one(op, budget))
        budgets.append(budget)
    return budgets


def held_bytes(region: RegionOps, output_bytes: list[int]) -> list[int]:
    """Per operator of ``region``, the bytes per core of earlier outputs still held on chip
    while it runs, given the output partition bytes of the operators planned so far
    (:func:`runtime_sim.contract.lifetimes.held_bytes`, the device's own lifetime rule)."""
    return lifetime_held_bytes([op.input_names for op in region.ops],
                               [op.output_name for op in region.ops], region.outputs, output_bytes)


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
