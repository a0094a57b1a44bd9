"""The compilation-wide memo of operator plans, shared by the regions of a model.

Owned by its caller (the model-level pass, :func:`tvm_icca.drivers.device_programs.compile_programs`)
and passed down; never a module global.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Hashable, Sequence

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from tvm_icca.lower.expr_cache import ExprCache
from tvm_icca.model_pass.plan_store import PlanStore, default_plan_cache_dir
from tvm_icca.plan_search import CostModel, PlannedOp, SearchMemo, plan_operator
from tvm_icca.plan_search.hw_fields import SEARCH_FIELDS, plan_key, search_key
from tvm_icca.plan_search.mapping import Producer, producer_key
from tvm_icca.plan_search.option_pool import available_jobs, map_in_workers, options_of_many
from tvm_icca.plan_search.reconcile import PlanOption, operator_options
from tvm_icca.plan_search.search import optimum_within

#: One rung of an operator's budget ladder (:meth:`PlanCache.prefetch_ladders`): its
#: expression, the SRAM budget, its name (for errors), its inputs read from HBM and the most
#: bytes per core its output partition may take (``None``: any).
LadderStep = tuple[TensorExpr, int, str, tuple[int, ...], "int | None"]


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
    the same model under each preload design, at several batch sizes, or on chips that
    differ in a few fields. Each result is keyed on exactly the chip's fields it depends on
    (:mod:`tvm_icca.plan_search.hw_fields`): a plan search reads the cores, SRAM, compute rates and
    links but no HBM or topology field, the choice of its placement on the chips reads the
    HBM bandwidth only for an operator with HBM inputs. So a chip differing only in HBM
    bandwidth reuses every search, and one differing in link bandwidth searches again. The
    partitioned module is kept too (for the same module and element types), so a sweep over
    chips partitions a model once.

    With ``path`` (or :meth:`persistent`) searched plans, placements, failures and options
    are also kept on disk (:class:`~tvm_icca.model_pass.plan_store.PlanStore`), under a
    version: a new process, another worker of a sweep or a later run reads them instead of
    searching. Safe with concurrent writers.

    Parameters
    ----------
    jobs : int or None
        Worker processes for the operators' candidate scans (:mod:`tvm_icca.plan_search.option_pool`);
        ``None``: every CPU this process may use, ``1``: no workers (nothing is forked).
    path : str or os.PathLike, optional
        A directory for the on-disk layer; ``None``: memory only.

    Attributes
    ----------
    hits, misses : int
        Plans answered from the cache, and plans searched, since it was made.
    store : PlanStore or None
        The on-disk layer, when there is one.

    Examples
    --------
    ::

        cache = tvm_icca.PlanCache()
        workload = tvm_icca.get_workload("llama2-13b", num_layers=2)
        for design in tvm_icca.PRELOAD_DESIGNS:
            compiled = tvm_icca.compile_programs(workload, "ipu-pod4-hbm", preload=design,
                                                 plan_cache=cache)
    """

    def __init__(self, jobs: int | None = None, path: "str | os.PathLike[str] | None" = None) -> None:
        #: worker processes for the operators' candidate scans (None: every available CPU)
        self.jobs = available_jobs() if jobs is None else max(1, int(jobs))
        self.store = PlanStore(path) if path is not None else None
        self._plans: dict[tuple, PlannedOp] = {}
        self.exprs = ExprCache()  # tensor expressions of composite functions, by structure
        self._cost_models: list[CostModel] = []  # keeps id() keys valid
        self._options: dict[tuple, tuple[PlanOption, ...]] = {}
        # key -> (the operator's description, the chip's name, its PlanNotFoundError's message)
        self._failures: dict[tuple, tuple[str, str, str]] = {}
        self._budgets: dict[tuple, list[tuple[int, PlannedOp]]] = {}  # key but budget -> plans
        # partitioned modules: (structural hash, what partitioning reads) -> [(module, result)]
        self._partitioned: dict[tuple, list[tuple[Any, Any]]] = {}
        self.search = SearchMemo(store=self.store)  # plan structures and f_t assignments, shared
        self._tables: dict[tuple[Hashable, HardwareSpec], Any] = {}   # Elk trade-off tables
        self.hits = 0
        self.misses = 0

    @classmethod
    def persistent(cls, path: "str | os.PathLike[str] | None" = None,
                   jobs: int | None = None) -> "PlanCache":
        """A cache with an on-disk layer in ``path``.

        Parameters
        ----------
        path : str or os.PathLike, optional
            The directory; by default :func:`~tvm_icca.model_pass.plan_store.default_plan_cache_dir`
            (``$TVM_ICCA_PLAN_CACHE``, else ``$XDG_CACHE_HOME/tvm_icca/plan_search``).
        jobs : int or None
            As for :class:`PlanCache`.

        Returns
        -------
        PlanCache
            The cache, reading and writing entries under ``path``.
        """
        return cls(jobs=jobs, path=path if path is not None else default_plan_cache_dir())

    def partitioned(self, mod: Any, hw: HardwareSpec, partition: Callable[[Any, HardwareSpec], Any]) -> Any:
        """``partition(mod, hw)``, kept for the next chip whose partitioning reads the same:
        the element types it may compute (the built-in patterns' only question), or the whole
        chip when a user's pattern is registered (its check may read any field). The result
        is stamped for ``hw`` (:func:`~tvm_icca.partition.partitioner.stamp_hardware`)."""
        # pylint: disable=import-outside-toplevel
        import tvm_ffi

        from tvm_icca.partition.partitioner import partition_key, stamp_hardware

        key = (tvm_ffi.structural_hash(mod), partition_key(hw))
        bucket = self._partitioned.setdefault(key, [])
        for seen, result in bucket:
            if seen.same_as(mod) or tvm_ffi.structural_equal(seen, mod):
                return stamp_hardware(result, hw)
        result = partition(mod, hw)
        bucket.append((mod, result))
        return result

    def tradeoff_table(self, key: Hashable, hw: HardwareSpec, build: Callable[[], Any]) -> Any:
        """An operator's Elk trade-off table (:mod:`tvm_icca.model_pass.tradeoff_tables`;
        ``key`` names its operator, plan and input sources), ``build()`` once per chip: the
        preload designs of one chip (a sweep point's five) read the same tables. Keyed on
        the whole chip, since a table reads its bandwidths and topology as well as what plans
        read; in memory only."""
        full = (key, hw)
        table = self._tables.get(full)
        if table is None:
            table = self._tables[full] = build()
        return table

    def plan(self, expr: TensorExpr, hw: HardwareSpec, cost_model: CostModel | None,
             budget: int, name: str, hbm_inputs: tuple[int, ...] = (),
             producers: tuple[Producer, ...] = (), arriving: tuple[int, ...] = (),
             output_cap: int | None = None) -> PlannedOp:
        if cost_model is not None and all(m is not cost_model for m in self._cost_models):
            self._cost_models.append(cost_model)
        key = self._key(expr, hw, cost_model, budget, hbm_inputs, producers, arriving, output_cap)
        planned = self._plans.get(key)
        failed = self._failed(key)
        if planned is None and cost_model is None and failed not in self._failures and self.store is not None:
            failure = self.store.get(("failure",) + failed)
            if failure is not None:
                self._failures[failed] = failure
        if planned is None and failed in self._failures:
            self.hits += 1
            first, chip, message = self._failures[failed]
            # same structure on a chip its search cannot tell apart: this operator, this chip
            message = message.replace(first, name).replace(f"chip '{chip}'", f"chip '{hw.name}'")
            raise PlanNotFoundError(message)
        if planned is None and cost_model is None:
            # identical layers of one region differ in budget (plan_search.search.optimum_within)
            planned = optimum_within(self._budgets.get(self._but_budget(key), ()), budget)
        if planned is None:
            self.misses += 1
            try:
                planned = plan_operator(expr, hw, cost_model=cost_model, budget_bytes=budget,
                                        name=name, cache=self.search, hbm_inputs=hbm_inputs,
                                        producers=producers, arriving=arriving,
                                        output_cap=output_cap)
            except PlanNotFoundError as err:
                self._remember_failure(key, (name, hw.name, str(err)), cost_model is None)
                raise
            self._remember(key, planned)
        else:
            self.hits += 1
        return planned

    @staticmethod
    def _key(expr: TensorExpr, hw: HardwareSpec, cost_model: CostModel | None, budget: int,
             hbm_inputs: Sequence[int], producers: Sequence[Producer],
             arriving: Sequence[int] = (), output_cap: int | None = None) -> tuple:
        # the placement depends on where the producers left the inputs; the default model's
        # plans on the chip's fields they read (plans.hw_fields), another model's on all
        chip = plan_key(hw, tuple(hbm_inputs)) if cost_model is None else hw
        return (expr.structure_key(views=False), chip, int(budget), None if cost_model is None else id(cost_model),
                tuple(hbm_inputs), producer_key(tuple(producers)), tuple(arriving),
                None if output_cap is None else int(output_cap))

    @staticmethod
    def _failed(key: tuple) -> tuple:
        """Where a :meth:`_key`'s failure is kept: a default-model key's chip cut to the fields
        the search reads (:func:`~tvm_icca.plan_search.hw_fields.search_key`, the head of
        :func:`~tvm_icca.plan_search.hw_fields.plan_key`). The proof that no plan fits, and its
        message, read no placement rate: chips differing in HBM bandwidth share it."""
        if key[3] is not None:
            return key
        return (key[0], key[1][:len(SEARCH_FIELDS)]) + key[2:]

    def _remember_failure(self, key: tuple, failure: tuple[str, str, str], keep: bool) -> None:
        """A search that proved no plan fits; ``keep``: also on disk (default model only)."""
        self._failures[self._failed(key)] = failure
        if keep and self.store is not None:
            self.store.put(("failure",) + self._failed(key), failure)

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
        (:func:`tvm_icca.plan_search.search.optimum_within`), and the climb stops at the first budget
        without a plan (none exists within a smaller one). Climbs run side by side on up to
        :attr:`jobs` worker processes, forked with this cache as it is, which send back what
        they searched; a climb a worker did not finish runs here."""
        climbs: dict[tuple, dict[int, LadderStep]] = {}
        for ladder in ladders:
            for step in ladder:
                expr, budget, _, hbm, cap = step
                climbs.setdefault((expr.structure_key(views=False), tuple(hbm), cap), {}
                                  ).setdefault(int(budget), step)
        chains = [[steps[b] for b in sorted(steps, reverse=True)] for steps in climbs.values()]

        def climb(chain: Sequence[LadderStep]) -> list[tuple[tuple, PlannedOp | None, tuple]]:
            found = []
            for expr, budget, name, hbm, cap in chain:
                key = self._key(expr, hw, None, budget, hbm, (), output_cap=cap)
                misses = self.misses
                try:
                    planned = self.plan(expr, hw, None, budget, name, hbm, output_cap=cap)
                except PlanNotFoundError:
                    found.append((key, None, self._failures[self._failed(key)]))
                    break
                if self.misses > misses:
                    found.append((key, planned, ()))
            return found

        for chain, searched in zip(chains, map_in_workers(climb, chains, self.jobs)):
            if searched is None:
                climb(chain)
                continue
            for key, planned, failure in searched:
                if key in self._plans or self._failed(key) in self._failures:
                    continue
                if planned is None:
                    self._remember_failure(key, failure, True)
                else:
                    self._remember(key, planned)

    def options(self, expr: TensorExpr, hw: HardwareSpec, resident: list[int]) -> tuple[PlanOption, ...]:
        """Idle/active candidates of an operator (:func:`.plans.reconcile.operator_options`)
        within the whole SRAM, once per operator structure: the time/memory frontier within a
        smaller budget is the part of it that fits, so operators differing only in what their
        region holds around them share it (the caller keeps what fits its budget)."""
        key = ("options", expr.structure_key(views=False), search_key(hw), tuple(resident))
        found = self._options.get(key)
        if found is None and self.store is not None:
            found = self.store.get(key)
        if found is None:
            found = operator_options(expr, hw, resident, hw.usable_sram_bytes, cache=self.search)
            if self.store is not None:
                self.store.put(key, found)
        self._options[key] = found
        return found

    def prefetch_options(self, requests: Sequence[tuple[TensorExpr, Sequence[int]]],
                         hw: HardwareSpec) -> None:
        """Compute the :meth:`options` of every ``(expr, resident)`` request not memoized yet,
        on up to :attr:`jobs` worker processes (:mod:`.plans.option_pool`)."""
        missing: dict[tuple, tuple[TensorExpr, tuple[int, ...]]] = {}
        for expr, resident in requests:
            key = ("options", expr.structure_key(views=False), search_key(hw), tuple(resident))
            if key in self._options or key in missing:
                continue
            stored = self.store.get(key) if self.store is not None else None
            if stored is not None:
                self._options[key] = stored
            else:
                missing[key] = (expr, tuple(resident))
        found = options_of_many(list(missing.values()), hw, self.jobs, cache=self.search)
        self._options.update(zip(missing, found))
        if self.store is not None:
            for key, options in zip(missing, found):
                self.store.put(key, options)
