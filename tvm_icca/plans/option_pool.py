"""Idle/active candidates of many operators at once, in worker processes.

The time/memory frontiers of :func:`.reconcile.operator_options` are the bulk of compiling a
model kept on chip (T10 §4.3.1: one Pareto scan per distinct operator), and the scans of
different operators share nothing, so they run side by side on the machine's cores. Results
do not depend on the number of workers: each scan is the same computation in another
process (with its own :class:`.cache.PlanSearchCache`).

Workers are forked from the compiling process, so they start at once with everything
imported; where ``fork`` is not available, or with one job, the scans run in process.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from typing import Sequence

from runtime_sim.hardware import HardwareSpec
from runtime_sim.program import TensorExpr

from .cache import PlanSearchCache
from .reconcile import PlanOption, operator_options

__all__ = ["OptionRequest", "available_jobs", "options_of_many"]

#: One operator's candidates to compute: its expression and its resident input indices.
OptionRequest = tuple[TensorExpr, tuple[int, ...]]


def available_jobs() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def options_of_many(requests: Sequence[OptionRequest], hw: HardwareSpec, jobs: int,
                    cache: PlanSearchCache | None = None) -> list[tuple[PlanOption, ...]]:
    """:func:`.reconcile.operator_options` of every request within ``hw``'s whole SRAM, in
    request order, on up to ``jobs`` worker processes. A scan that fails in a worker is
    run again here, so its exception is raised as the sequential compile would raise it."""
    results: list[tuple[PlanOption, ...] | None] = [None] * len(requests)
    jobs = min(jobs, len(requests))
    if jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            futures = [pool.submit(_scan, expr, hw, resident) for expr, resident in requests]
            for i, future in enumerate(futures):
                results[i] = future.result()
    for i, (expr, resident) in enumerate(requests):
        if results[i] is None:
            results[i] = operator_options(expr, hw, list(resident), hw.usable_sram_bytes, cache=cache)
    return results  # type: ignore[return-value]


def _scan(expr: TensorExpr, hw: HardwareSpec,
          resident: tuple[int, ...]) -> tuple[PlanOption, ...] | None:
    try:
        return operator_options(expr, hw, list(resident), hw.usable_sram_bytes)
    except Exception:  # pylint: disable=broad-except
        return None  # raised again in the parent, where its type and context survive
