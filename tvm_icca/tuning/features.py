"""Features of an execution plan for the learned cost model (:mod:`.cost_model`).

meta_schedule's XGBoost model learns from features of a schedule (its per-store features);
here the schedule is a compute-shift plan, so the features are what decides its time on an
ICCA chip (T10 §4.3.1): the analytic cost model's terms (compute, synchronization, shifts,
replica reduction, epilogue), how much of the chip and of the SRAM budget it uses, its
temporal steps and rotation rings, the bytes it moves, and the operator's size. They are
task-independent (ratios and logarithms), so one model learns across operators and can rank
plans of operators it has not measured.

:class:`PlanFeatureExtractor` offers them through meta_schedule's feature-extractor interface
(``PyFeatureExtractor``, ``tvm.ir.utils.derived_object``): a candidate is a
``MeasureCandidate`` whose schedule trace carries the plan (:mod:`tvm_icca.records.database`).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from tvm_icca.plan_search import AnalyticCostModel
from tvm_icca.records.database import plan_of_trace

if TYPE_CHECKING:  # pragma: no cover
    from tvm_icca.tuning.tasks import Task

__all__ = ["FEATURE_NAMES", "plan_features"]

FEATURE_NAMES = (
    "log_compute_s", "log_sync_s", "log_shift_s", "log_reduction_s", "log_epilogue_s",
    "log_analytic_s", "shift_fraction", "core_fraction", "log_cores", "log_steps",
    "memory_fraction", "log_max_ring", "log_out_replicas", "log_shift_bytes",
    "log_reduction_bytes", "num_axes", "num_reduce_axes", "log_flops", "padding",
)


def _log(x: float) -> float:
    return math.log10(max(float(x), 0.0) + 1e-15)


def plan_features(task: "Task", plan: ExecutionPlan,
                  cost_model: AnalyticCostModel | None = None) -> np.ndarray:
    """The :data:`FEATURE_NAMES` of ``plan`` for ``task``, as float32."""
    expr, hw = task.expr, task.hw
    layout = OpLayout(expr, plan, hw.cores_per_chip)
    cost = (cost_model or AnalyticCostModel())(layout, hw)
    out = len(expr.tensors) - 1
    padded = math.prod(layout.xp[a] for a in layout.axes)
    exact = math.prod(layout.extent[a] for a in layout.axes)
    values = (
        _log(cost.compute_s), _log(cost.sync_s), _log(cost.shift_s), _log(cost.reduction_s),
        _log(cost.epilogue_s), _log(cost.time_s),
        cost.shift_s / cost.time_s if cost.time_s > 0 else 0.0,
        layout.num_cores / hw.num_cores, math.log2(layout.num_cores), math.log2(max(layout.steps, 1)),
        layout.memory_bytes_per_core() / max(task.budget, 1),
        math.log2(max(layout.ring_size(t) for t in range(len(expr.tensors)))),
        math.log2(max(layout.replicas(out), 1)),
        _log(layout.shift_bytes()), _log(layout.reduction_bytes()),
        len(expr.axes), len(expr.reduce_axes), _log(expr.flops()), padded / max(exact, 1),
    )
    return np.asarray(values, dtype=np.float32)


def feature_matrix(rows: Sequence[tuple["Task", ExecutionPlan]]) -> np.ndarray:
    """Features of many (task, plan) pairs, one row each."""
    model = AnalyticCostModel()
    if not rows:
        return np.zeros((0, len(FEATURE_NAMES)), np.float32)
    return np.stack([plan_features(task, plan, model) for task, plan in rows])


@functools.lru_cache(maxsize=None)
def _extractor_class():
    """:class:`PlanFeatureExtractor`, built on first use (meta_schedule loads lazily)."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm.ir.utils import derived_object  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.feature_extractor import PyFeatureExtractor  # pylint: disable=import-outside-toplevel

    @derived_object
    class PlanFeatureExtractor(PyFeatureExtractor):
        """meta_schedule feature extractor over ICCA plans: the tuning context's
        ``task_name`` is the task key, the candidate's trace carries the plan."""

        def __init__(self, tasks: Mapping[str, "Task"]) -> None:
            super().__init__()
            self.tasks = dict(tasks)

        def extract_from(self, context, candidates):  # pylint: disable=arguments-renamed
            task = self.tasks[str(context.task_name)]
            rows = [(task, plan_of_trace(c.sch.trace)) for c in candidates]
            return [tvm.runtime.tensor(row[None, :]) for row in feature_matrix(rows)]

    return PlanFeatureExtractor


def __getattr__(name: str):
    if name == "PlanFeatureExtractor":
        return _extractor_class()
    raise AttributeError(name)
