"""Idle/active candidates of many operators at once, in worker processes.

The time/memory frontiers of :func:`.reconcile.operator_options` are the bulk of compiling a
model kept on chip (T10 §4.3.1: one Pareto scan per distinct operator), and the scans of
different operators are independent, so they run side by side on the machine's cores. Results
do not depend on the number of workers: each scan is the same computation in another
process (whose :class:`.cache.PlanSearchCache` memoizes only what is the same for every
scan).

Workers are forked from the compiling process, so they start at once with everything
imported; where ``fork`` is not available, or with one job, the scans run in process.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
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
    request order, on up to ``jobs`` worker processes. A scan that fails in a worker (or
    that a worker that died never returned) is run again here, so its exception is raised
    as the sequential compile would raise it."""
    results: list[tuple[PlanOption, ...] | None] = [None] * len(requests)
    jobs = min(jobs, len(requests))
    if jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
        _scan_in_workers(requests, hw, jobs, results)
    for i, (expr, resident) in enumerate(requests):
        if results[i] is None:
            results[i] = operator_options(expr, hw, list(resident), hw.usable_sram_bytes, cache=cache)
    return results  # type: ignore[return-value]


def _scan_in_workers(requests: Sequence[OptionRequest], hw: HardwareSpec, jobs: int,
                     results: list) -> None:
    """Fill ``results`` from ``jobs`` forked workers that take the requests one at a time
    (the scans' costs differ by orders of magnitude) and keep one
    :class:`.cache.PlanSearchCache` each: operators share structures and assignment counts,
    which a cache per scan would compute again."""
    context = multiprocessing.get_context("fork")
    tasks, answers = context.Queue(), context.Queue()
    workers = [context.Process(target=_serve, args=(tasks, answers, hw), daemon=True)
               for _ in range(jobs)]
    for worker in workers:
        worker.start()
    for i, (expr, resident) in enumerate(requests):
        tasks.put((i, expr, resident))
    for _ in workers:
        tasks.put(None)
    pending = len(requests)
    try:
        while pending:
            try:
                i, options = answers.get(timeout=1.0)
            except queue.Empty:
                if any(worker.is_alive() for worker in workers) or not answers.empty():
                    continue
                break  # every worker is gone: what is left runs in process
            results[i] = options
            pending -= 1
    finally:
        for worker in workers:
            worker.join(timeout=5.0)
            if worker.is_alive():
                worker.terminate()


def _serve(tasks, answers, hw: HardwareSpec) -> None:
    cache = PlanSearchCache()
    while True:
        item = tasks.get()
        if item is None:
            return
        i, expr, resident = item
        try:
            options = operator_options(expr, hw, list(resident), hw.usable_sram_bytes, cache=cache)
        except Exception:  # pylint: disable=broad-except
            options = None  # raised again in the parent, where its type and context survive
        answers.put((i, options))
