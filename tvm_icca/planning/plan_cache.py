"""The compilation-wide memo of operator plans, shared by the regions of a model.

Owned by its caller (the model-level pass, :func:`tvm_icca.drivers.timing_only.compile_programs`)
and passed down; never a module global.
"""

from __future__ import annotations

from typing import Sequence

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from tvm_icca.lower.expr_cache import ExprCache
from tvm_icca.plans import CostModel, PlannedOp, SearchMemo, plan_operator
from tvm_icca.plans.mapping import Producer, producer_key
from tvm_icca.plans.option_pool import available_jobs, map_in_workers, options_of_many
from tvm_icca.plans.reconcile import PlanOption, operator_options
from tvm_icca.plans.search import optimum_within

#: One rung of an operator's budget ladder (:meth:`PlanCache.prefetch_ladders`): its
#: expression, the SRAM budget, its name (for errors) and its inputs read from HBM.
LadderStep = tuple[TensorExpr, int, str, tuple[int, ...]]


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

    Every compilation makes its own cache unless it is given one. Pass one cache to several
    :func:`tvm_icca.compile_programs` calls (``plan_cache=``) to plan what they share once:
    the same model under each preload design, or at several batch sizes. The chip is part of
    every key, so a cache shared by different chips is correct, and only what is planned for
    the same chip is reused.

    Parameters
    ----------
    jobs : int or None
        Worker processes for the operators' candidate scans (:mod:`tvm_icca.plans.option_pool`);
        ``None``: every CPU this process may use, ``1``: no workers (nothing is forked).

    Attributes
    ----------
    hits, misses : int
        Plans answered from the cache, and plans searched, since it was made.

    Examples
    --------
    ::

        cache = tvm_icca.PlanCache()
        workload = tvm_icca.get_workload("llama2-13b", num_layers=2)
        for design in tvm_icca.PRELOAD_DESIGNS:
            compiled = tvm_icca.compile_programs(workload, "ipu-pod4-hbm", preload=design,
                                                 plan_cache=cache)
    """

    def __init__(self, jobs: int | None = None) -> None:
        #: worker processes for the operators' candidate scans (None: every available CPU)
        self.jobs = available_jobs() if jobs is None else max(1, int(jobs))
        self._plans: dict[tuple, PlannedOp] = {}
        self.exprs = ExprCache()  # tensor expressions of composite functions, by structure
        self._cost_models: list[CostModel] = []  # keeps id() keys valid
        self._options: dict[tuple, tuple[PlanOption, ...]] = {}
        # key -> (the operator's description, the message of its PlanNotFoundError)
        self._failures: dict[tuple, tuple[str, str]] = {}
        self._budgets: dict[tuple, list[tuple[int, PlannedOp]]] = {}  # key but budget -> plans
        self.search = SearchMemo()  # plan structures and f_t assignments, shared
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
