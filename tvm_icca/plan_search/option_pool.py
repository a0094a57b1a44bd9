"""Plan searches of many operators at once, in worker processes.

The time/memory frontiers of :func:`.reconcile.operator_options` are the bulk of compiling a
model kept on chip (T10 §4.3.1: one Pareto scan per distinct operator), and the searches of
Elk's execute-state ladders (Elk §4.3) the bulk of its trade-off tables; the searches of
different operators are independent, so they run side by side on the machine's cores.
Results do not depend on the number of workers: each search is the same computation in
another process (whose :class:`.search_memo.SearchMemo` memoizes only what is the same for
every search).

Workers are forked from the compiling process, so they start at once with everything
imported; where ``fork`` is not available, or with one job, the searches run in process.
They are the compiling process's to stop (:mod:`tvm_icca.processes`): a Ctrl-C is its to
handle (the workers ignore SIGINT), it ends them at once when it is interrupted, and they end
with it if it dies.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
from typing import Callable, Sequence, TypeVar

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from tvm_icca.plan_search.reconcile import PlanOption, operator_options
from tvm_icca.plan_search.search_memo import SearchMemo
from tvm_icca.processes import serve_parent, signals_blocked

__all__ = ["OptionRequest", "available_jobs", "map_in_workers", "options_of_many"]

#: One operator's candidates to compute: its expression and its resident input indices.
OptionRequest = tuple[TensorExpr, tuple[int, ...]]

T = TypeVar("T")
R = TypeVar("R")


def available_jobs() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def options_of_many(requests: Sequence[OptionRequest], hw: HardwareSpec, jobs: int,
                    cache: SearchMemo | None = None) -> list[tuple[PlanOption, ...]]:
    """:func:`.reconcile.operator_options` of every request within ``hw``'s whole SRAM, in
    request order, on up to ``jobs`` worker processes. A scan that fails in a worker (or
    that a worker that died never returned) is run again here, so its exception is raised
    as the sequential compile would raise it."""
    # one cache per worker (a copy of this empty one): operators share structures and
    # assignment counts, which a cache per scan would compute again
    worker_cache = SearchMemo()

    def scan(request: OptionRequest, into: SearchMemo | None) -> tuple[PlanOption, ...]:
        expr, resident = request
        return operator_options(expr, hw, list(resident), hw.usable_sram_bytes, cache=into)

    results = map_in_workers(lambda request: scan(request, worker_cache), requests, jobs)
    return [scan(request, cache) if found is None else found
            for request, found in zip(requests, results)]


def map_in_workers(work: Callable[[T], R], items: Sequence[T], jobs: int) -> list[R | None]:
    """``work`` of every item, in item order, on up to ``jobs`` processes forked from this one
    (they start at once with everything imported, and each keeps what ``work`` memoizes
    across the items it takes). Workers take items one at a time (the costs differ by orders
    of magnitude). An item whose ``work`` failed in a worker, or that a worker that died
    never returned, is ``None``: the caller runs it again in process, where its exception
    keeps its type and context. With one job, or without ``fork``, every item is ``None``."""
    results: list[R | None] = [None] * len(items)
    jobs = min(jobs, len(items))
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return results
    context = multiprocessing.get_context("fork")
    tasks, answers = context.Queue(), context.Queue()
    workers = [context.Process(target=_serve, args=(tasks, answers, work, os.getpid()),
                               daemon=True) for _ in range(jobs)]
    pending = len(items)
    finished = False
    try:
        for worker in workers:
            with signals_blocked():  # a Ctrl-C meanwhile is this process's, after the start
                worker.start()
        for i, item in enumerate(items):
            tasks.put((i, item))
        for _ in workers:
            tasks.put(None)
        while pending:
            try:
                i, result = answers.get(timeout=1.0)
            except queue.Empty:
                if any(worker.is_alive() for worker in workers) or not answers.empty():
                    continue
                break  # every worker is gone: what is left runs in process
            results[i] = result
            pending -= 1
        finished = True
    finally:
        for worker in workers:
            if not finished and worker.pid is not None:  # interrupted: no scan is waited for
                worker.terminate()
        for worker in workers:
            if worker.pid is not None:
                worker.join(timeout=5.0)
                if worker.is_alive():
                    worker.kill()
                    worker.join()
    return results


def _serve(tasks, answers, work: Callable, parent: int) -> None:
    serve_parent(parent)
    while True:
        task = tasks.get()
        if task is None:
            return
        i, item = task
        try:
            result = work(item)
        except Exception:  # pylint: disable=broad-except
            result = None  # run again in the parent, where its type and context survive
        answers.put((i, result))
