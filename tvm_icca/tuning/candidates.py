"""Candidate plans of a tuning task, drawn from the operator's complete plan space.

Three sources (T10 §4.3.1 defines the space; a tuner explores it beyond the model's optimum):

* **analytic top-k** -- the fastest plans under the analytic cost model
  (:mod:`tvm_icca.plan_search.search`'s scan of the space, within the task's SRAM budget): the
  complete space when it is small enough to score whole, else T10's filtered space;
* **Pareto points** -- the time/memory frontier (:func:`tvm_icca.plan_search.pareto_plans`): plans
  the analytic model ranks slower but which use less memory, often shift less and so fare
  differently on the simulated network;
* **mutations** of the best measured plans: one local move in the complete space (move a
  prime factor of F_op between two axes, grow or shrink the plan by one prime factor, change
  one temporal factor, swap two loops), kept when the layout is valid
  (:meth:`runtime_sim.contract.layout.OpLayout.validate`, the device's own rule) and fits the budget.

Every candidate is an *unmapped* plan (no core order or chip spread): the placement is
chosen per context by :func:`tvm_icca.plan_search.mapping.choose_core_order`.
"""

from __future__ import annotations

import random
from typing import Iterable, Iterator, Sequence

import numpy as np

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.plan import ExecutionPlan
from tvm_icca.plan_search import SearchMemo, plan_structure
from tvm_icca.plan_search.batch_cost import AnalyticBatchModel
from tvm_icca.plan_search.bounds import memory_lower_bound
from tvm_icca.plan_search.fit import fits
from tvm_icca.plan_search.intmath import factorize
from tvm_icca.plan_search.plan_space import plans_for
from tvm_icca.plan_search.scoring import (
    CHUNK_PLANS,
    candidate_partitions,
    pareto_front,
    score,
    unrotated,
)
from tvm_icca.records.keys import plan_signature, unmapped
from tvm_icca.tuning.tasks import Task

__all__ = ["analytic_candidates", "mutations"]

#: F_op rows whose every plan is scored for the analytic top-k: the rows with the fastest
#: unrotated plans and the rows with the lowest time bounds, this many of each. The complete
#: space of a BERT-large matmul on 1,472 cores holds 43 million plans (six minutes to score
#: on this machine); these rows hold the analytic optimum's neighbourhood in about a second.
ROWS_PER_CRITERION = 48


def analytic_candidates(task: Task, top_k: int, cache: SearchMemo | None = None
                        ) -> list[ExecutionPlan]:
    """The analytic optimum, the analytic top-k and the time/memory Pareto points of the
    promising F_op rows of the complete space (:data:`ROWS_PER_CRITERION`), without
    duplicates, fastest (analytically) first."""
    cache = cache if cache is not None else SearchMemo()
    structure = plan_structure(task.expr, cache)
    model = AnalyticBatchModel(task.hw)
    F = candidate_partitions(structure, task.hw.num_cores, None)
    F = F[memory_lower_bound(structure, F) <= task.budget]
    plans = list(task.analytic_plans) or [task.analytic_plan]
    if len(F):
        unrot = np.concatenate([_unrotated_times(structure, F[i:i + CHUNK_PLANS], model, task.budget)
                                for i in range(0, len(F), CHUNK_PLANS)])
        bound = model.time_lower_bound(structure, F)
        rows = np.unique(np.concatenate([np.argsort(unrot, kind="stable")[:ROWS_PER_CRITERION],
                                         np.argsort(bound, kind="stable")[:ROWS_PER_CRITERION]]))
        scored = score(plans_for(structure, F[rows], cache=cache), model, task.budget, None)
        if len(scored):
            fastest = scored.take(np.argsort(scored.time, kind="stable")[:top_k])
            front = scored.take(pareto_front(scored.time, scored.memory))
            plans += [fastest.plan(i) for i in range(len(fastest))]
            plans += [front.plan(i) for i in range(len(front))]
    return list(_unique(unmapped(p) for p in plans))


def _unrotated_times(structure, F: np.ndarray, model: AnalyticBatchModel, budget: int) -> np.ndarray:
    """Per F_op row the analytic time of its unrotated plan (inf when it does not fit)."""
    batch = unrotated(structure, F)
    time, _ = model.times(batch)
    return np.where(batch.memory() <= budget, time, np.inf)


def _unique(plans: Iterable[ExecutionPlan]) -> Iterator[ExecutionPlan]:
    seen = set()
    for plan in plans:
        sig = plan_signature(plan)
        if sig not in seen:
            seen.add(sig)
            yield plan


def _primes(n: int) -> list[int]:
    return [p for p, _ in factorize(n)]


def _mutate(plan: ExecutionPlan, expr: TensorExpr, hw: HardwareSpec, rng: random.Random) -> ExecutionPlan:
    """One random local move of ``plan`` (validity is checked by the caller)."""
    F = {a.name: int(plan.op_partition.get(a.name, 1)) for a in expr.axes}
    temporal = [dict(t) for t in plan.temporal]
    order = list(plan.loop_order)
    axes = [a.name for a in expr.axes]
    extent = {a.name: a.extent for a in expr.axes}
    move = rng.choice(("shift_factor", "resize", "temporal", "temporal", "swap_loops"))
    if move == "shift_factor":
        src = [a for a in axes if F[a] > 1]
        if src:
            a = rng.choice(src)
            p = rng.choice(_primes(F[a]))
            b = rng.choice([x for x in axes if x != a] or [a])
            if F[b] * p <= extent[b]:
                F[a] //= p
                F[b] *= p
    elif move == "resize":
        a = rng.choice(axes)
        cores = int(np.prod(list(F.values())))
        if rng.random() < 0.5 and cores * 2 <= hw.num_cores and F[a] * 2 <= extent[a]:
            F[a] *= 2
        elif F[a] > 1:
            F[a] //= rng.choice(_primes(F[a]))
    elif move == "temporal":
        t = rng.randrange(len(temporal))
        a = rng.choice(axes)
        f = int(temporal[t].get(a, 1))
        if rng.random() < 0.5:
            temporal[t][a] = f * rng.choice((2, 3))
        elif f > 1:
            temporal[t][a] = f // rng.choice(_primes(f))
    elif len(order) >= 2:
        i = rng.randrange(len(order) - 1)
        order[i], order[i + 1] = order[i + 1], order[i]
    temporal = [{a: f for a, f in t.items() if int(f) > 1} for t in temporal]
    # the loop order lists exactly the axes that take temporal steps (OpLayout's rule)
    stepping = [a for a in axes if any(int(t.get(a, 1)) > 1 for t in temporal)]
    order = [a for a in order if a in stepping] + [a for a in stepping if a not in order]
    return ExecutionPlan({a: f for a, f in F.items()}, tuple(temporal), tuple(order))


def mutations(task: Task, parents: Sequence[ExecutionPlan], count: int, rng: random.Random,
              exclude: set[str], tries_per_plan: int = 20) -> list[ExecutionPlan]:
    """Up to ``count`` valid, fitting plans one or two moves away from ``parents`` (best
    first) whose signatures are not in ``exclude`` (which is updated)."""
    out: list[ExecutionPlan] = []
    if not parents:
        return out
    for attempt in range(count * tries_per_plan):
        if len(out) >= count:
            break
        # favour the best parents: the first ones come up more often
        parent = parents[min(int(rng.expovariate(1.0 / max(1, len(parents) / 3))), len(parents) - 1)]
        child = _mutate(parent, task.expr, task.hw, rng)
        if attempt % 2:
            child = _mutate(child, task.expr, task.hw, rng)
        sig = plan_signature(child)
        if sig in exclude:
            continue
        exclude.add(sig)
        if fits(task.expr, child, task.hw, task.budget) is None:
            out.append(child)
    return out
