"""The local process pool of a design-space sweep: one spawned worker per job, each fed one
point at a time through its own pipe, started with SIGINT blocked (the driver decides) and
dying with the driver (:mod:`tvm_icca.processes`); :class:`Schedule` starts the first point of
every plan group before any group's second (the module docstring of :mod:`tvm_icca.dse.run`
says why).
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import warnings
from multiprocessing import resource_tracker
from typing import Any, Callable, Sequence

from runtime_sim.contract.errors import IccaError
from tvm_icca.dse.stopping import SweepStop
from tvm_icca.dse.worker import evaluate
from tvm_icca.processes import serve_parent, signals_blocked
from tvm_icca.progress import bars_of_this_process_only

__all__ = ["Schedule", "available_cpus", "run_local"]


def available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover  (not Linux)
        return max(1, os.cpu_count() or 1)


# -- scheduling: a group's plans searched once ------------------------------------------------
class Schedule:
    """The pending tasks by group (:func:`tvm_icca.dse.points.plan_group`), handed to free
    workers so that a group's plans are searched once.

    A free worker is given, in this order: the first task of a group not started (the longest
    tasks, started early); a task of the group it ran last, once that group's first task has
    finished (:meth:`finished`; the worker's in-memory caches hold the group's workload and
    trade-off tables); a task of the searched group with the most left; with ``follow``, a
    task of a group whose first task still runs (the workers share a locking plan cache on
    disk, so this one waits for each search the first is running and reads it); else nothing.
    """

    def __init__(self, tasks: Sequence[dict[str, Any]], follow: bool = False) -> None:
        self.queues: dict[str, collections.deque] = {}
        for task in tasks:
            self.queues.setdefault(task["group"], collections.deque()).append(task)
        self.follow = follow
        self.searching: dict[str, int] = {}  # group -> id() of its first task, while it runs
        self.searched: set[str] = set()

    def next_for(self, last_group: str | None = None) -> dict[str, Any] | None:
        """The task a free worker runs next (``last_group``: of its previous task), or None."""
        for group, queue in self.queues.items():
            if queue and group not in self.searched and group not in self.searching:
                task = queue.popleft()
                self.searching[group] = id(task)
                return task
        if last_group in self.searched and self.queues.get(last_group):
            return self.queues[last_group].popleft()
        ready = [g for g, q in self.queues.items() if q and (g in self.searched or self.follow)]
        if not ready:
            return None
        # searched groups first, then the one with the most left
        best = max(ready, key=lambda g: (g in self.searched, len(self.queues[g])))
        return self.queues[best].popleft()

    def finished(self, task: dict[str, Any]) -> None:
        """``task`` is done, with a row or without (its worker died): if it was its group's
        first, the group's other tasks may run (a group whose first task failed has its
        failure on record, or is retried by the next run)."""
        group = task["group"]
        if self.searching.get(group) == id(task):
            del self.searching[group]
            self.searched.add(group)

    def __bool__(self) -> bool:
        """Whether tasks are left to hand out."""
        return any(self.queues.values())


def _start_worker() -> None:
    """Import what a point needs, so that a worker's start overlaps the first points."""
    # pylint: disable=import-outside-toplevel,unused-import
    from tvm_icca.drivers.device_programs import compile_programs  # noqa: F401


def _died_early() -> IccaError:
    return IccaError(
        "a DSE worker process died before finishing its first point. From a script, call "
        "tvm_icca.dse.run under `if __name__ == \"__main__\":` (workers start by importing the "
        "script); otherwise the point may need more memory than this machine has (try fewer "
        "--jobs). Rows written so far are kept; run again to resume.")


# -- local: one worker process per job --------------------------------------------------------
#: Seconds a worker told to exit after a finished sweep may take before it is killed (it is
#: idle then, and exits at once: this only bounds a worker that cannot).
_EXIT_GRACE_S = 10.0


def _serve(conn: multiprocessing.connection.Connection, driver: int) -> None:
    """A worker process: evaluate the points its pipe brings, one at a time, until ``None``
    or until the driver closes the pipe; stopped by the driver, never by a Ctrl-C meant for it,
    and ended with it (:func:`tvm_icca.processes.serve_parent`)."""
    serve_parent(driver)
    bars_of_this_process_only()  # it is killed: no semaphore left for the resource tracker
    _start_worker()
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the driver is gone
            return
        if task is None:
            return
        conn.send(evaluate(task))


class _Worker:
    """One worker process of a local sweep (:func:`_serve`) and the point it runs.

    Spawned with SIGINT and SIGTERM blocked (:func:`tvm_icca.processes.signals_blocked`), so
    the driver alone takes a signal that comes while it starts. The driver ends it with
    SIGKILL when the sweep stops (its plan scans die with it): a worker holds nothing a kill
    could tear, rows being the driver's to write and plan cache entries renamed into place
    whole (:mod:`tvm_icca.model_pass.plan_store`).
    """

    def __init__(self, context: Any, workers: list["_Worker"]) -> None:
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs, os.getpid()),
                                       name="tvm_icca-dse-worker")
        self.task: dict[str, Any] | None = None
        self.last_group: str | None = None
        self.rows = 0  # rows it returned
        # the first spawn starts multiprocessing's resource tracker, and that start unblocks
        # SIGINT and SIGTERM in this thread when done (SIG_UNBLOCK, not the mask it found):
        # started first, it leaves the block below in place for the worker
        resource_tracker.ensure_running()
        with signals_blocked():  # a signal meanwhile stops the sweep once the worker is known
            self.process.start()
            workers.append(self)
        theirs.close()  # the worker's end: a worker that dies closes the pipe

    def give(self, task: dict[str, Any]) -> None:
        """Run ``task`` next."""
        self.task, self.last_group = task, task["group"]
        try:
            self.conn.send(task)
        except OSError:  # it died: its sentinel says so to the driver's wait
            pass

    def waitables(self) -> list[Any]:
        """What :func:`multiprocessing.connection.wait` watches for its row or its death."""
        return [self.conn, self.process.sentinel]

    def take(self) -> tuple[bool, dict[str, Any] | None]:
        """(whether it finished its point, the row: None when it died without one)."""
        try:
            if self.conn.poll():
                row = self.conn.recv()
                self.rows += 1
                return True, row
        except (EOFError, OSError):
            return True, None
        if self.process.exitcode is not None:
            return True, None
        return False, None

    def close(self, wait: bool) -> None:
        """End the process: told to exit once idle (``wait``), else killed at once."""
        if wait and self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(_EXIT_GRACE_S)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


def run_local(tasks: Sequence[dict[str, Any]], jobs: int,
               on_row: Callable[[dict[str, Any] | None, int], None], stop: SweepStop) -> None:
    context = multiprocessing.get_context("spawn")
    slots = max(1, min(jobs, len(tasks)))
    schedule = Schedule(tasks, follow=all(t.get("plan_cache") for t in tasks))
    workers: list[_Worker] = []

    def fill() -> None:
        for worker in workers:
            if worker.task is None:
                task = schedule.next_for(worker.last_group)
                if task is None:
                    return  # nothing to run until a group's first point finishes
                worker.give(task)

    clean = False
    try:
        for _ in range(slots):  # every worker starts now, importing while the first points run
            _Worker(context, workers)
        fill()
        while any(w.task is not None for w in workers):
            busy = [w for w in workers if w.task is not None]
            multiprocessing.connection.wait([x for w in busy for x in w.waitables()])
            stop.check()
            done = []
            for worker in busy:
                finished, row = worker.take()
                if not finished:
                    continue
                schedule.finished(worker.task)
                worker.task = None
                if row is None:
                    if not worker.rows:
                        # died before its first row: usually a script without a __main__
                        # guard (spawned workers import it again and run the sweep in turn)
                        raise _died_early()
                    # the worker died (killed, out of memory): no row, the next run retries
                    warnings.warn("a DSE worker process died; its point has no row (run the "
                                  "sweep again to retry it)", RuntimeWarning, stacklevel=2)
                    workers.remove(worker)
                    worker.close(wait=False)
                    _Worker(context, workers)
                done.append(row)
            fill()
            for row in done:
                on_row(row, sum(w.task is not None for w in workers))
        clean = True
    finally:
        # stopped (a signal, an error): no running point is waited for, it has no row; a
        # first signal while they are closed stops the sweep once all are
        with stop.held():
            for worker in workers:
                worker.close(wait=clean)


# -- Ray ------------------------------------------------------------------------------------
