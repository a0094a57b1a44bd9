"""Tuning sessions: ``tvm_icca.tune(mod, work_dir=..., hw=..., max_trials=...)``.

Per task (:mod:`.tasks`, heaviest first), a session

1. reads what the work directory already holds for it (a session resumes: earlier
   measurements count as trials, train the cost model and are never measured again);
2. measures the compiler's own plan first (the baseline a tuned plan must beat,
   :mod:`tvm_icca.records.apply`) and, on a chip with HBM, the smaller execute-state plans the Elk pass
   trades off against it (:func:`tvm_icca.model_pass.tradeoff_tables.ladder_budgets`), so the Elk
   schedule of a tuned compile runs on measured points;
3. then, batch by batch, ranks unmeasured candidates (:mod:`.candidates`: the analytic
   top-k and Pareto points, then mutations of the best measured plans) with the learned cost
   model (:mod:`.cost_model`; the analytic ranking until it has data), measures the best
   ranked -- plus a few random picks, so the model also sees what it ranks low -- on the
   simulated device in worker processes (:mod:`.measure`), and appends every measurement to
   the records (:mod:`tvm_icca.records.database`);
4. stops at ``max_trials`` trials (counting earlier sessions'), when no candidate is left, or
   when the best time has not improved for ``patience`` batches.

A progress bar per task (:mod:`tvm_icca.progress`: on a terminal, once the task has run two
seconds) shows the best time so far; :meth:`TuneSummary.table` is the
summary (task, trials, the compiler's plan's time, the best measured, the gain).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.units import format_seconds, in_unit, time_unit
from tvm_icca.hardware_choice import HardwareLike, resolve_hardware
from tvm_icca.model_pass.tradeoff_tables import ladder_budgets
from tvm_icca.plan_search import SearchMemo, plan_operator
from tvm_icca.plan_search.mapping import choose_core_order
from tvm_icca.progress import Progress, ProgressLike, as_progress
from tvm_icca.records.database import (
    PLAN_ANNOTATION,
    RecordStore,
    database_class,
    icca_target,
    plan_record,
)
from tvm_icca.records.keys import expr_digest, hardware_digest, plan_signature, unmapped
from tvm_icca.tuning.candidates import analytic_candidates, mutations
from tvm_icca.tuning.cost_model import cost_model_class, tuning_context
from tvm_icca.tuning.features import PlanFeatureExtractor
from tvm_icca.tuning.measure import Measurer
from tvm_icca.tuning.tasks import Task, extract_tasks, output_block

__all__ = ["TaskResult", "TuneSummary", "tune"]

#: Fraction of each batch picked at random among the unmeasured candidates (exploration, as
#: meta_schedule's evolutionary search keeps an epsilon-greedy share).
EXPLORE_FRACTION = 0.25
#: Relative improvement of the best time that counts as progress for early stopping.
MIN_IMPROVEMENT = 1e-3


@dataclass
class TaskResult:
    """What a session found for one task (a row of :meth:`TuneSummary.table`).

    Attributes
    ----------
    task : str
        The operator's kind and iteration extents, then the first operator of the model with
        this structure, e.g. ``"matmul[32x64x128] op20"``.
    weight : int
        How often one call of the model runs the operator.
    trials : int
        Plans measured for the task, earlier sessions' included.
    new_trials : int
        Plans this session measured.
    untuned_s : float or None
        Measured time of the compiler's own plan, in seconds.
    best_s : float or None
        Measured time of the fastest plan, in seconds.
    """

    task: str
    weight: int
    trials: int  # measurements in the records (this session's and earlier ones)
    new_trials: int  # measured by this session
    untuned_s: float | None  # measured time of the compiler's own plan
    best_s: float | None

    @property
    def gain(self) -> float:
        """``untuned_s / best_s`` (1.0 when either is unknown)."""
        if not self.untuned_s or not self.best_s:
            return 1.0
        return self.untuned_s / self.best_s


@dataclass
class TuneSummary:
    """The outcome of :func:`tune`: one :class:`TaskResult` per task, heaviest first.

    Attributes
    ----------
    work_dir : str
        The directory holding the records.
    hw : str
        The name of the chip tuned for.
    results : list of TaskResult
        Per task, what the session found.
    committed : int
        Records this session appended.
    wall_s : float
        Wall-clock seconds the session took.
    """

    work_dir: str
    hw: str
    results: list[TaskResult] = field(default_factory=list)
    committed: int = 0  # records appended by this session
    wall_s: float = 0.0

    def weighted(self) -> tuple[float, float]:
        """Operator time of one model run: (untuned, best), summed over tasks by weight."""
        untuned = sum(r.weight * (r.untuned_s or 0.0) for r in self.results)
        best = sum(r.weight * (r.best_s or r.untuned_s or 0.0) for r in self.results)
        return untuned, best

    def table(self) -> str:
        """The results as a text table: a row per task, the weighted total, the records. Every
        time is in one unit, the one the table's largest time reads best in
        (:mod:`runtime_sim.contract.units`, as every command prints times)."""
        untuned, best = self.weighted()
        times = [t for r in self.results for t in (r.untuned_s, r.best_s) if t] + [untuned]
        unit = time_unit(max(times))
        head = (f"{'task':<34} {'runs':>4} {'trials':>6} {'untuned ' + unit[0]:>11} "
                f"{'best ' + unit[0]:>10} {'gain':>6}")
        lines = [head, "-" * len(head)]
        for r in self.results:
            u = in_unit(r.untuned_s, unit) if r.untuned_s else "-"
            b = in_unit(r.best_s, unit) if r.best_s else "-"
            lines.append(f"{r.task[:34]:<34} {r.weight:>4} {r.trials:>6} {u:>11} {b:>10} {r.gain:>5.2f}x")
        if best > 0:
            lines.append(f"{'all operators, one run (weighted)':<34} {'':>4} "
                         f"{sum(r.trials for r in self.results):>6} {in_unit(untuned, unit, 11)} "
                         f"{in_unit(best, unit, 10)} {untuned / best:>5.2f}x")
        lines.append(f"{self.committed} new records in {self.work_dir} ({self.wall_s:.1f} s, chip {self.hw})")
        return "\n".join(lines)


def tune(
    mod: Any,
    work_dir: str,
    hw: HardwareLike | None = None,
    max_trials: int = 32,
    *,
    jobs: int = 1,
    batch_size: int = 8,
    top_k: int = 16,
    patience: int = 3,
    max_tasks: int | None = None,
    seed: int = 0,
    progress: ProgressLike = True,
    preload: str | None = None,
) -> TuneSummary:
    """Tune the execution plans of a model's ICCA operators on a chip, keeping every measurement.

    Each distinct operator is a task, heaviest first; per task, candidates from the operator's
    complete T10 plan space (T10 §4.2) are ranked by a learned cost model and measured on the
    timing simulator (the module docstring gives the loop). Compile with the records through
    :func:`tvm_icca.use_database`.

    Example::

        summary = tvm_icca.tune(mod, "tuning/", hw="ipu-mk2", max_trials=64)
        print(summary.table())

    Parameters
    ----------
    mod : tvm.IRModule or tvm_icca.workloads.Workload
        A Relax module whose entry is ``main``, or a workload of the zoo (which knows its
        weights and KV caches).
    work_dir : str
        Where the records are kept (created if missing; shared safely with concurrent
        sessions, which append under a file lock).
    hw : HardwareSpec, preset name or dict, optional
        The chip; defaults to the current choice (:func:`tvm_icca.use_hardware`).
    max_trials : int
        Measurements per task, earlier sessions' included (a session resumes).
    jobs : int
        Worker processes measuring candidates.
    batch_size : int
        Plans measured between two fits of the cost model.
    top_k : int
        Candidates taken from the analytic cost model's ranking (plus its Pareto points).
    patience : int
        Batches without improvement of the best time before a task stops.
    max_tasks : int or None
        Tune only this many of the heaviest tasks; ``None``: every task.
    seed : int
        Seed of the session's random choices (exploration picks, the cost model), so a
        session is repeatable.
    preload : str or None
        The HBM preload design the tasks are extracted under (``preload`` of
        :class:`~tvm_icca.model_pass.CompileOptions`); compile with the same design.
    progress : Progress, bool or None
        The compile's bars and one per task (:class:`tvm_icca.progress.Progress`); ``True``
        or ``None``: on a terminal, after two seconds; ``False``: none.

    Returns
    -------
    TuneSummary
        Per task (:class:`~tvm_icca.tuning.session.TaskResult`): trials, the compiler's own
        plan's measured time, the best time and the gain; :meth:`TuneSummary.table` prints
        them.

    Raises
    ------
    IccaError
        A bad chip, model or preload design (as :func:`tvm_icca.compile` would raise).
    """
    start = time.perf_counter()
    spec = resolve_hardware(hw)
    progress = as_progress(progress)
    tasks = extract_tasks(mod, spec, preload=preload, progress=progress)
    if max_tasks is not None:
        tasks = tasks[:max_tasks]
    database = database_class()(work_dir)
    store: RecordStore = database.store
    session = _Session(database, store, tasks, seed)
    summary = TuneSummary(store.work_dir, spec.name)
    with Measurer(jobs) as measurer:
        for task in tasks:
            summary.results.append(session.tune_task(task, measurer, max_trials, batch_size, top_k,
                                                     patience, progress))
    summary.committed = session.committed
    summary.wall_s = time.perf_counter() - start
    return summary


class _Session:
    """State shared by the tasks of one session: records, cost model, random state."""

    def __init__(self, database: Any, store: RecordStore, tasks: Sequence[Task], seed: int) -> None:
        self.database = database
        self.store = store
        self.rng = random.Random(seed)
        self.cache = SearchMemo()
        self.extractor = PlanFeatureExtractor({t.key: t for t in tasks})
        self.model = cost_model_class()(self.extractor, seed)
        self.contexts = {t.key: tuning_context(t.workload, icca_target(t.hw), t.key)
                         for t in tasks}
        self.committed = 0
        self._blocks: dict[str, str] = {}
        # earlier sessions' measurements train the model before anything is measured
        for task in tasks:
            measured = self.measured(task)
            if measured:
                self._learn(task, [p for _, p in measured.values()], [s for s, _ in measured.values()])

    def measured(self, task: Task) -> dict[str, tuple[float, ExecutionPlan]]:
        """Plan signature -> (seconds, plan) of the task's records (best per plan)."""
        out: dict[str, tuple[float, ExecutionPlan]] = {}
        ekey, hkey = expr_digest(task.expr), hardware_digest(task.hw)
        for rec in self.store.records:
            info = rec.info
            if info.get("expr") != ekey or info.get("hw") != hkey or "plan" not in info:
                continue
            plan = ExecutionPlan.from_dict(info["plan"])
            sig = plan_signature(plan)
            if sig not in out or rec.seconds < out[sig][0]:
                out[sig] = (rec.seconds, plan)
        return out

    def _candidates(self, task: Task, plans: Sequence[ExecutionPlan]):
        from tvm import s_tir  # pylint: disable=import-outside-toplevel
        from tvm.s_tir.meta_schedule import MeasureCandidate  # pylint: disable=import-outside-toplevel
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo  # pylint: disable=import-outside-toplevel

        block = self._block(task)
        args = ArgInfo.from_prim_func(task.workload["main"])
        out = []
        for plan in plans:
            sch = s_tir.Schedule(task.workload)
            sch.annotate(sch.get_sblock(block), PLAN_ANNOTATION, json.dumps({"plan": plan.to_dict()}))
            out.append(MeasureCandidate(sch, args))
        return out

    def _block(self, task: Task) -> str:
        if task.key not in self._blocks:
            self._blocks[task.key] = output_block(task.workload)
        return self._blocks[task.key]

    def _learn(self, task: Task, plans: Sequence[ExecutionPlan], seconds: Sequence[float]) -> None:
        from tvm.s_tir.meta_schedule.runner import RunnerResult  # pylint: disable=import-outside-toplevel

        self.model.update(self.contexts[task.key], self._candidates(task, plans),
                          [RunnerResult([float(s)], None) for s in seconds])

    def _rank(self, task: Task, plans: list[ExecutionPlan]) -> list[ExecutionPlan]:
        """``plans`` best first by the cost model (higher predicted throughput first)."""
        if not plans or not self.model.booster.fitted:
            return plans
        scores = self.model.predict(self.contexts[task.key], self._candidates(task, plans))
        order = sorted(range(len(plans)), key=lambda i: -float(scores[i]))
        return [plans[i] for i in order]

    def _commit(self, task: Task, plans: Sequence[ExecutionPlan], seconds: Sequence[float]) -> None:
        index = self.store.commit_workload(_workload_json(task.workload))
        block = self._block(task)
        info = {"expr": expr_digest(task.expr), "hw": hardware_digest(task.hw), "chip": task.hw.name,
                "budget": task.budget, "task": task.key, "kind": task.expr.kind}
        records = [plan_record(task.workload, block, {**info, "plan": p.to_dict()}, s, task.hw).as_json()
                   for p, s in zip(plans, seconds)]
        self.store.commit_records(index, records)
        self.committed += len(records)

    def tune_task(self, task: Task, measurer: Measurer, max_trials: int, batch_size: int,
                  top_k: int, patience: int, progress: Progress) -> TaskResult:
        self.store.refresh()  # another session may have measured some of it meanwhile
        measured = self.measured(task)
        seen = set(measured)
        pool = analytic_candidates(task, top_k, self.cache)
        seen.update(plan_signature(p) for p in pool)
        baseline = [plan_signature(p) for p in (task.analytic_plans or [task.analytic_plan])]
        # on a chip with HBM the Elk pass also trades off smaller plans: measure those first too
        ladder = self._ladder(task)
        pool.extend(p for p in ladder if plan_signature(p) not in seen)
        seen.update(plan_signature(p) for p in ladder)
        priority = baseline + [plan_signature(p) for p in ladder]
        start_trials, new = len(measured), 0
        best = min((s for s, _ in measured.values()), default=None)
        stale = 0
        with progress.phase(task.label[:32], unit="trial", total=max_trials, leave=True) as bar:
            if start_trials:
                bar.step(units=min(start_trials, max_trials))
            while len(measured) < max_trials and stale < patience:
                room = min(batch_size, max_trials - len(measured))
                first = [p for p in pool if plan_signature(p) in priority
                         and plan_signature(p) not in measured]
                batch = first[:room] if first else self._next_batch(task, pool, measured, room, seen)
                if not batch:
                    break
                mapped = [choose_core_order(task.expr, p, task.hw, task.hbm_inputs) for p in batch]
                results = measurer.measure(task.expr, mapped, task.hw)
                ok = [(p, r.seconds) for p, r in zip(batch, results) if r.ok]
                for plan, result in zip(batch, results):
                    # a failed plan is a trial too (not recorded: it has no time)
                    measured[plan_signature(plan)] = (result.seconds if result.ok else float("inf"), plan)
                new += len(batch)
                if ok:
                    self._commit(task, [p for p, _ in ok], [s for _, s in ok])
                    self._learn(task, [p for p, _ in ok], [s for _, s in ok])
                    batch_best = min(s for _, s in ok)
                    improved = best is None or batch_best < best * (1 - MIN_IMPROVEMENT)
                    best = batch_best if best is None else min(best, batch_best)
                    stale = 0 if improved or first else stale + 1
                else:
                    stale += 1
                bar.step(None if best is None else f"best {format_seconds(best)}", units=len(batch))
        times = {sig: s for sig, (s, _) in measured.items() if s != float("inf")}
        untuned = min((times[b] for b in baseline if b in times), default=None)
        return TaskResult(f"{task.label} {task.name.rsplit('.', 1)[-1]}", task.weight,
                          start_trials + new, new, untuned, min(times.values(), default=None))

    def _ladder(self, task: Task) -> list[ExecutionPlan]:
        """On a chip with HBM, the smaller execute-state plans the Elk pass builds for the
        compiler's plan (:func:`tvm_icca.model_pass.tradeoff_tables.ladder_budgets`), unmapped."""
        if task.hw.hbm_bandwidth <= 0:
            return []
        fastest = OpLayout(task.expr, task.analytic_plan, task.hw.cores_per_chip).memory_bytes_per_core()
        plans = []
        for budget in ladder_budgets(fastest, task.hw):
            try:
                planned = plan_operator(task.expr, task.hw, budget_bytes=budget, name=task.name,
                                        cache=self.cache, hbm_inputs=task.elk_hbm_inputs)
            except PlanNotFoundError:
                break
            plans.append(unmapped(planned.plan))
        return plans

    def _next_batch(self, task: Task, pool: list[ExecutionPlan],
                    measured: dict[str, tuple[float, ExecutionPlan]], room: int,
                    seen: set[str]) -> list[ExecutionPlan]:
        parents = [p for s, p in sorted(measured.values(), key=lambda x: x[0]) if s != float("inf")][:8]
        pool.extend(mutations(task, parents, 4 * room, self.rng, seen))
        fresh = [p for p in pool if plan_signature(p) not in measured]
        ranked = self._rank(task, fresh)
        explore = int(room * EXPLORE_FRACTION) if self.model.booster.fitted else 0
        batch = ranked[:room - explore]
        rest = ranked[room - explore:]
        batch += self.rng.sample(rest, min(explore, len(rest)))
        return batch


def _workload_json(workload: Any) -> list:
    from tvm.s_tir.meta_schedule.database import Workload  # pylint: disable=import-outside-toplevel

    return Workload(workload).as_json()
