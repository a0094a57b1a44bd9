"""Run a design-space exploration: every point not yet in the results file, on a local process
pool or as Ray tasks, one row appended per point as it completes.

Resuming is the normal case: :func:`run` reads the results file first and skips every point
whose key (:func:`tvm_icca.dse.points.point_key`) has a row, whatever its status. Only this
process (the driver) appends, one whole line at a time (:func:`tvm_icca.dse.results.append_row`),
so a sweep killed at any moment leaves only whole rows (at most a torn last line, cut off by the
next append), and the same command run again computes exactly the missing points.

Local runs start one worker process per job (spawned: TVM does not survive ``fork``), each
fed one point at a time through its own pipe (:mod:`tvm_icca.dse.local_pool`). On Ray (``ray=``), points are
``ray.remote`` tasks with a bounded number in flight (``ray.wait``); the driver appends their
rows.

Stopping (issue 43): the first SIGINT or SIGTERM stops the sweep within a second or so
(:func:`tvm_icca.dse.stopping.stopping_signals`): the row being appended is finished, every local worker (with the
plan scans it forked) is killed, the Ray tasks in flight are cancelled and a Ray instance this
run started is shut down, and :class:`SweepInterrupted` is raised (``tvm-icca dse`` exits with
128 + the signal's number, saying how many rows are kept). The workers ignore SIGINT (a
terminal's Ctrl-C reaches the whole process group; the driver decides) and die with the driver
if it dies without stopping them (:mod:`tvm_icca.processes`), so a second signal, which ends the
driver at once (the signals' default action again), leaves no worker behind either.

Workers share their plan searches. The points of one group ask for the same operator plans
(:func:`tvm_icca.dse.points.plan_group`), so :class:`Schedule` starts the first point of every
group before any group's second, and a free worker takes a point of a group already searched
before one of a group whose first point still runs. Through the plan cache on disk (without
``plan_cache=``, a temporary directory for the run's duration) a worker reads what another has
searched, and a worker about to search an operator holds that search's lock
(:meth:`tvm_icca.model_pass.plan_store.PlanStore.lock`): a second worker asking for it meanwhile
waits and reads the first's result. So no plan is searched twice, and a second worker on a
group still being searched follows the first, doing its point's own work (the Elk schedule, the
simulation) beside it. Without a shared directory (a Ray cluster of several machines and no
``plan_cache=``) a group's other points wait until its first is done.

What a row was computed from is recorded with it (issue 38): the driver writes each resolved
chip once to the results' provenance file before its points run, and one record of every run
(provenance, the run's measured wall time, the points' summed wall and CPU seconds, counts)
when it ends, interrupted or not. A point of the study whose newest row was computed on a
different chip (a preset or a fixed field changed since) is computed again, after a
:class:`ChipChangedWarning` naming the points and the fields that changed
(:func:`describe_changes`); its old row stays in the file, superseded
(:func:`tvm_icca.dse.results.read_rows`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from runtime_sim.contract.errors import IccaError, InvalidSpecError
from tvm_icca.dse.columns import POINT_COLUMNS as _POINT_COLUMNS
from tvm_icca.dse.columns import row_workload as _row_workload
from tvm_icca.dse.local_pool import Schedule, available_cpus, run_local
from tvm_icca.dse.points import DsePoint, chip_changes, chip_digest, expand
from tvm_icca.dse.results import append_chip, append_row, append_run, read_chips, read_rows
from tvm_icca.dse.spec import DseSpec, load_spec
from tvm_icca.dse.stopping import SweepInterrupted, SweepStop, stopping_signals
from tvm_icca.dse.worker import DOES_NOT_FIT, FAILED, OK, evaluate
from tvm_icca.model_pass.plan_store import default_plan_cache_dir
from tvm_icca.progress import ProgressLike, as_progress
from tvm_icca.provenance import UNKNOWN, current

__all__ = ["ChipChange", "ChipChangedWarning", "DseRun", "OtherCommitsWarning", "other_commits_note", "SweepInterrupted", "describe_changes",
           "run", "stopping_signals", "RAY_EXTRA_HINT"]

#: What to install for Ray (setup.py's ``dse`` extra).
RAY_EXTRA_HINT = "pip install 'tvm-icca[dse]'"


class OtherCommitsWarning(UserWarning):
    """A resumed sweep keeps rows of its points computed by other commits of tvm_icca: they
    are not computed again (a row is the result of the code that made it); ``tvm-icca dse
    rerun`` recomputes a sample and reports what changed."""


def other_commits_note(rows: Sequence[dict], commit: str, results: str) -> str | None:
    """The note a resumed sweep gives when ``rows`` (the newest row of each point it keeps)
    were made by commits other than ``commit``: how many, by which (shortened), and the
    command that checks them; None when all are ``commit``'s or either side is unknown."""
    if commit == UNKNOWN:
        return None
    by: dict[str, int] = {}
    for row in rows:
        made = str(row.get("commit", UNKNOWN))
        if made not in (commit, UNKNOWN):
            by[made[:10]] = by.get(made[:10], 0) + 1
    if not by:
        return None
    listed = ", ".join(f"{n} by {c}" for c, n in sorted(by.items(), key=lambda kv: -kv[1]))
    return (f"{sum(by.values())} of the {len(rows)} rows kept were computed by other commits "
            f"({listed}; now {commit[:10]}): they are not computed again; "
            f"`tvm-icca dse rerun {results}` recomputes a sample and reports differences, "
            f"or start a new results file")


class ChipChangedWarning(UserWarning):
    """A resumed sweep found points computed on a chip that differs from what the spec
    resolves to now; they are computed again (:func:`describe_changes` says how)."""


@dataclass(frozen=True)
class ChipChange:
    """A point of the study whose newest row was computed on a different chip.

    Parameters
    ----------
    point : DsePoint
        The point, as the spec resolves it now.
    old_key : str
        The key of its newest row.
    fields : tuple of str
        How the chip changed, ``"num_cores 80 -> 72"`` (:func:`tvm_icca.dse.points.chip_changes`).
    """

    point: DsePoint
    old_key: str
    fields: tuple[str, ...]


def describe_changes(changes: Sequence[ChipChange], shown: int = 3) -> str:
    """Lines naming the changed points, grouped by how their chip changed (``shown`` points
    of each group listed)."""
    groups: dict[tuple[str, ...], list[ChipChange]] = {}
    for change in changes:
        groups.setdefault(change.fields, []).append(change)
    lines = [f"{len(changes)} point(s) have rows computed on a different chip than the spec "
             "resolves to now; they are computed again (their old rows stay in the file, "
             "superseded):"]
    for fields, members in groups.items():
        what = ", ".join(fields) or "same chip fields (the key's format changed)"
        names = "; ".join(f"{c.point.label()} (was {c.old_key[:12]})" for c in members[:shown])
        more = f"; and {len(members) - shown} more" if len(members) > shown else ""
        lines.append(f"  {len(members)} point(s): {what}")
        lines.append(f"    {names}{more}")
    return "\n".join(lines)


@dataclass
class DseRun:
    """What :func:`run` did: the study's points, which were done before, what this run added.

    Parameters
    ----------
    spec : DseSpec
        The study.
    results : str
        The results file.
    points : list of DsePoint
        Every point of the study, in run order.
    done_before : set of str
        Keys of the points the results file held when the run started.
    counts : dict
        Rows this run appended per status (``ok``, ``does_not_fit``, ``failed``) and ``lost``:
        points whose worker died (no row; the next run retries them).
    wall_s : float
        Seconds the run took.
    dry_run : bool
        Nothing was computed (:func:`run` with ``dry_run=True``).
    changed : list of ChipChange
        Pending points whose newest row was computed on a different chip.
    other_commits : str or None
        :func:`other_commits_note` of the rows kept (None: all made by this commit).
    """

    spec: DseSpec
    results: str
    points: list[DsePoint]
    done_before: set[str]
    counts: dict[str, int] = field(default_factory=lambda: collections.Counter())
    wall_s: float = 0.0
    dry_run: bool = False
    changed: list[ChipChange] = field(default_factory=list)
    other_commits: str | None = None

    @property
    def pending(self) -> list[DsePoint]:
        """The points that had no row when the run started."""
        return [p for p in self.points if p.key not in self.done_before]

    def describe(self) -> str:
        """One line: points, done before, computed now by status, the results file."""
        c = self.counts
        now = (f"{c.get(OK, 0)} ok, {c.get(DOES_NOT_FIT, 0)} do not fit, {c.get(FAILED, 0)} failed"
               + (f", {c['lost']} lost with their worker (run again to retry)" if c.get("lost") else ""))
        done = sum(p.key in self.done_before for p in self.points)
        action = ("would compute" if self.dry_run else
                  f"computed in {self.wall_s:.1f} s of measured wall time:")
        todo = len(self.pending)
        changed = f" ({len(self.changed)} pending on a changed chip)" if self.changed else ""
        return (f"{self.spec.name}: {len(self.points)} points, {done} done before; {action} "
                f"{todo if self.dry_run else now}{changed} -> {self.results}")


def run(spec: "DseSpec | str | os.PathLike[str]", *, jobs: int | None = None,
        ray: str | None = None, dry_run: bool = False, progress: ProgressLike = True,
        results: "str | os.PathLike[str] | None" = None, limit: int | None = None,
        plan_cache: "str | os.PathLike[str] | bool | None" = None) -> DseRun:
    """Compile and time every point of a study not yet in its results file.

    Every point is compiled by the model-level compiler
    (:func:`tvm_icca.compile_programs`, the passes of ``tvm.compile``) and timed by the timing
    simulator; its row is appended to the results file as soon as it completes. A point no
    plan fits is a ``does_not_fit`` row with the reason, another error a ``failed`` row, and
    the sweep goes on. Run it again after an interruption: finished points are skipped.

    Parameters
    ----------
    spec : DseSpec, str or os.PathLike
        The study, or its TOML/YAML file (:func:`load_spec`).
    jobs : int, optional
        Without Ray, the CPUs the run may use (default: all this process may use): one
        worker process per plan group at most (points whose plans are the same searches),
        and each point's plan scans forked over the CPUs left to its worker. With one worker
        (``jobs=1``, or a study of one plan group) the points run one after another in this
        process (no worker imports the calling script, so a notebook or a script without an
        ``if __name__ == "__main__":`` guard can sweep). On Ray: the tasks in flight
        (default: the cluster's CPUs).
    ray : str, optional
        Run on Ray: ``"auto"`` (the cluster this machine is part of, ``ray start``), a
        cluster address (``"10.0.0.1:6379"``, ``"ray://..."``) or ``"local"`` (start Ray here).
        An already initialized Ray is used as it is. ``None``: a local process pool.
    dry_run : bool
        Compute nothing: the returned :class:`DseRun` lists the points and which are done.
    progress : Progress, bool or None
        A bar of points done, running and failed with an ETA on standard error
        (:mod:`tvm_icca.progress`; ``True``: on a terminal).
    results : str or os.PathLike, optional
        The results file (default: the spec's ``results``).
    limit : int, optional
        Compute at most this many pending points in this run (the rest stay pending).
    plan_cache : str, os.PathLike or bool, optional
        A directory where the workers keep searched plans on disk
        (:meth:`tvm_icca.PlanCache.persistent`; ``True``: the default directory,
        ``$TVM_ICCA_PLAN_CACHE`` or ``$XDG_CACHE_HOME/tvm_icca/plan_search``). Every worker, later
        runs and, on a shared file system, other machines read them instead of searching
        again. ``None``: a parallel run on this machine keeps them in a temporary directory
        deleted when it ends (the workers share them, later runs do not); on a Ray cluster
        of several machines, or ``jobs=1``, each worker keeps its plans in memory only.

    Returns
    -------
    DseRun
        The points, what was done before and what this run added.

    Raises
    ------
    InvalidSpecError
        The spec cannot be used, or ``jobs`` / ``limit`` are not positive.
    IccaError
        Ray was asked for but is not installed or cannot be reached (a cluster that wants a
        token the driver does not send: ``RAY_AUTH_MODE=token``), or the results file is not one.
    SweepInterrupted
        A SIGINT or SIGTERM stopped the sweep (:func:`stopping_signals`): the rows finished
        before it are in the file, no worker is left; its ``summary`` is what the run did.
    """
    if not isinstance(spec, DseSpec):
        spec = load_spec(spec)
    for name, value in (("jobs", jobs), ("limit", limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidSpecError(f"{name} must be a positive integer, got {value!r}")
    path = os.fspath(results) if results is not None else spec.results
    points = expand(spec)
    newest = read_rows(path)  # a point's superseded rows (an earlier chip) are not done
    done = {str(r["key"]) for r in newest if "key" in r}
    summary = DseRun(spec=spec, results=path, points=points, done_before=done, dry_run=dry_run)
    summary.changed = _chip_changes(spec, summary.pending, newest, path)
    if summary.changed:
        warnings.warn(describe_changes(summary.changed), ChipChangedWarning, stacklevel=2)
    ours = {p.key for p in points}
    summary.other_commits = other_commits_note(
        [r for r in newest if r.get("key") in ours],
        current().commit, path)
    if summary.other_commits is not None:
        warnings.warn(summary.other_commits, OtherCommitsWarning, stacklevel=2)
    todo = summary.pending[:limit] if limit else summary.pending
    if dry_run or not todo:
        return summary
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    base_dir = os.path.dirname(os.path.abspath(spec.source)) if os.path.exists(spec.source) else os.getcwd()
    cache_dir = None
    if plan_cache is True:
        cache_dir = default_plan_cache_dir()
    elif plan_cache not in (None, False):
        cache_dir = os.path.abspath(os.fspath(plan_cache))
    scratch = None  # the run's own plan cache directory, shared by its workers
    # without Ray, jobs counts CPUs: worker processes, and plan-scan processes per point
    workers, scan_jobs = _local_workers(jobs, todo) if ray is None else (jobs, 1)
    if cache_dir is None and plan_cache is None and _parallel(ray, workers, len(todo)):
        scratch = cache_dir = tempfile.mkdtemp(prefix="tvm_icca-dse-plans-")
    tasks = [dict(_task(spec, p, base_dir), plan_cache=cache_dir, scan_jobs=scan_jobs)
             for p in todo]
    replaced = {c.point.key: c.old_key for c in summary.changed}
    for task in tasks:  # the row says which it replaces (a row older than point_id has none)
        if task["key"] in replaced:
            task["trace"]["supersedes"] = replaced[task["key"]]
    recorded = read_chips(path)
    for point in todo:  # each chip once, before any row names it
        digest = chip_digest(point.hw)
        if digest not in recorded:
            append_chip(path, digest, point.hw.to_dict())
            recorded[digest] = point.hw.to_dict()
    origin = current(shlex.join(sys.argv))
    points_s = {"wall_s": 0.0, "cpu_s": 0.0}
    start = time.perf_counter()
    try:
        with stopping_signals() as stop:
            try:
                _compute(spec, tasks, path, summary, points_s, progress, ray, workers,
                         scratch, stop)
            except KeyboardInterrupt as err:
                if stop.signum is None or isinstance(err, SweepInterrupted):
                    raise
                # a library that took it (ray.wait) raised a plain KeyboardInterrupt of its own
                raise SweepInterrupted(stop.signum) from None
            finally:  # an interrupted run is recorded too: its rows are in the file
                with stop.held():
                    summary.wall_s = time.perf_counter() - start
                    if scratch is not None:
                        shutil.rmtree(scratch, ignore_errors=True)
                    append_run(path, {**origin.to_dict(), "spec": spec.name,
                                      "wall_s": summary.wall_s,
                                      "points_wall_s": points_s["wall_s"],
                                      "points_cpu_s": points_s["cpu_s"],
                                      "counts": dict(summary.counts), "pending": len(tasks),
                                      "jobs": jobs, "ray": ray})
    except SweepInterrupted as stopped:
        stopped.summary = summary
        raise
    return summary


def _local_workers(jobs: int | None, todo: Sequence[DsePoint]) -> tuple[int, int]:
    """How a local run spends its ``jobs`` CPUs (default: all this process may use): worker
    processes, one per plan group at most, and each point's plan-scan processes
    (:func:`tvm_icca.plan_search.option_pool.map_in_workers`) with what is left.

    The points of one plan group wait for its first point's searches (:class:`Schedule`),
    so a second worker on it only adds its start-up and a cold workload, partition and Elk
    tables; the CPU spent on the first point's scans shortens what every point waits for.
    With one worker the points run in this process (:func:`_compute`)."""
    cpus = jobs or available_cpus()
    workers = max(1, min(cpus, len({p.group for p in todo})))
    return workers, max(1, cpus // workers)


def _parallel(ray: str | None, workers: int | None, pending: int) -> bool:
    """Whether a run's points may run in several processes: ``workers`` local ones (on Ray:
    whether the cluster is one machine is known once connected, :func:`_run_ray`)."""
    return pending > 1 and (ray is not None or workers > 1)


def _compute(spec: DseSpec, tasks: list[dict[str, Any]], path: str, summary: DseRun,
             points_s: dict[str, float], progress: ProgressLike, ray: str | None,
             workers: int | None, scratch: str | None, stop: SweepStop) -> None:
    """Compute ``tasks`` and append their rows to ``path`` as they complete, on ``workers``
    local processes (:func:`_local_workers`; one: in this process) or, on Ray, with that
    many tasks in flight (None: the cluster's CPUs); ``stop`` says when a signal stops it."""
    with as_progress(progress).phase(f"dse {spec.name}", unit="point", total=len(tasks),
                                     leave=True) as bar:
        def on_row(row: dict[str, Any] | None, running: int) -> None:
            with stop.held():  # a row and its counts, whole, before a signal stops the sweep
                if row is None:
                    summary.counts["lost"] += 1
                else:
                    append_row(path, row)
                    summary.counts[row["status"]] += 1
                    points_s["wall_s"] += row.get("wall_s") or 0.0
                    points_s["cpu_s"] += row.get("cpu_s") or 0.0
            c = summary.counts
            bar.step(note=f"{running} running, {c.get(DOES_NOT_FIT, 0)} do not fit, "
                     f"{c.get(FAILED, 0) + c.get('lost', 0)} failed")

        if ray is None and workers == 1:
            # one point at a time in this process: no worker imports the caller's script, so
            # a notebook or an unguarded script can sweep (a crash, though, ends the caller)
            for task in tasks:
                row = evaluate(task)
                stop.check()  # a point a signal cut short gives no row, whatever it returned
                on_row(row, 0)
        elif ray is None:
            run_local(tasks, workers, on_row, stop)
        else:
            _run_ray(tasks, ray, workers, on_row, scratch, stop)




def _chip_changes(spec: DseSpec, pending: Sequence[DsePoint], newest: Sequence[dict[str, Any]],
                  path: str) -> list[ChipChange]:
    """The pending points of the study that have a row computed on another chip.

    A row with a ``point_id`` is the point's when the ids match; its chip is in the provenance
    file, so every changed field is named. A row written before rows named their point and
    chip is matched on what it recorded (the spec's name, the workload and its arguments, the
    design, state and execution, the point's own chip overrides) and compared on the chip
    fields it recorded (the spec's fixed and swept ones).
    """
    by_point = {r["point_id"]: r for r in newest if r.get("point_id")}
    legacy: dict[str, list[dict[str, Any]]] = {}
    for row in newest:
        if not row.get("point_id") and isinstance(row.get("inputs"), list) and "key" in row:
            legacy.setdefault(_case(row.get("spec"), _row_workload(row), row.get("design"),
                                    row.get("state"), row.get("execution")), []).append(row)
    chips = read_chips(path) if by_point else {}
    claimed: set[str] = set()
    changes = []
    for point in pending:
        row = by_point.get(point.point_id)
        if row is not None:
            fields = chip_changes(chips.get(str(row.get("chip_digest"))), point.hw.to_dict())
        else:
            row = _legacy_row(spec, point, legacy, claimed)
            if row is None:
                continue
            fields = _recorded_changes(row, point)
        claimed.add(str(row["key"]))
        changes.append(ChipChange(point=point, old_key=str(row["key"]), fields=tuple(fields)))
    return changes


def _case(spec_name: Any, workload: dict[str, Any], design: Any, state: Any, execution: Any) -> str:
    return json.dumps([spec_name, workload, design, state or "auto", execution], sort_keys=True,
                      default=str)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _legacy_row(spec: DseSpec, point: DsePoint, legacy: dict[str, list[dict[str, Any]]],
                claimed: set[str]) -> dict[str, Any] | None:
    """The older row of the same point: same case and the point's own overrides; among several,
    the one agreeing on the most swept columns."""
    rows = legacy.get(_case(spec.name, point.workload, point.design, point.state,
                            point.execution), [])
    rows = [r for r in rows if str(r["key"]) not in claimed
            and all(_same(r.get(f), v) for f, v in point.hardware.items())]
    if not rows:
        return None
    inputs = point.inputs(spec)
    return max(rows, key=lambda r: sum(_same(r.get(a), inputs.get(a)) for a in spec.axes))


def _recorded_changes(row: dict[str, Any], point: DsePoint) -> list[str]:
    """How the chip fields an older row recorded differ from the point's chip, and a note that
    the rest was not recorded."""
    chip = json.loads(json.dumps(point.hw.to_dict(), default=str))
    out = [] if _same(row.get("hardware"), point.hw.name) else [
        f"name {row.get('hardware')!r} -> {point.hw.name!r}"]
    for name in row["inputs"]:
        if name in chip and name not in _POINT_COLUMNS and not _same(row.get(name), chip[name]):
            out.append(f"{name} {row.get(name)} -> {chip[name]}")
    out.append(f"{'the' if not out else 'the other'} chip fields the row did not record (it "
               "was written before rows stored their chip)")
    return out


def task_for(point: DsePoint, inputs: dict[str, Any], base_dir: str) -> dict[str, Any]:
    """A point as the plain data a worker process receives (:func:`tvm_icca.dse.worker.evaluate`)."""
    return {"key": point.key, "group": point.group, "inputs": inputs, "gpu": point.gpu,
            "hw": point.hw.to_dict(), "workload": point.workload, "design": point.design,
            "state": point.state, "execution": point.execution, "base_dir": base_dir,
            "trace": {"point_id": point.point_id, "chip_digest": chip_digest(point.hw),
                      "workload_args": {k: v for k, v in point.workload.items()
                                        if k != "workload"}}}


def _task(spec: DseSpec, point: DsePoint, base_dir: str) -> dict[str, Any]:
    return task_for(point, point.inputs(spec), base_dir)


def _import_ray() -> Any:
    try:
        import ray  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise IccaError(f"running a sweep on Ray needs Ray: {RAY_EXTRA_HINT}") from None
    return ray


#: Seconds to wait for a TCP connection to a given Ray address before saying nothing answers
#: there (a head on the same network answers in milliseconds; Ray itself would retry for
#: minutes, printing a warning a second).
_RAY_PROBE_S = 5.0


def _connect_ray(ray: Any, address: str) -> None:
    """``ray.init`` for a sweep: ``"local"`` a new instance here, ``"auto"`` the cluster this
    machine is part of, else the cluster at ``address``; one :class:`IccaError` saying what to
    do when that cannot be done.

    ``"local"`` is passed on as ``address="local"``, which ``ray.init`` documents as starting a
    new local instance "even if there is already an existing local Ray instance"; its source
    (``services.canonicalize_bootstrap_address``) reads neither ``RAY_ADDRESS`` nor the record
    ``ray start`` leaves (``<temp dir>/ray/ray_current_cluster``) for it, where
    ``address=None`` follows both, to a cluster that may be dead.

    A head started by ``ray start --head`` uses token authentication when a token exists
    (``~/.ray/auth_token``, which a first ``ray.init`` writes). ``ray.init`` sends the token to
    a cluster it finds itself (``"auto"`` without ``RAY_ADDRESS``), but to an explicit address
    only under ``RAY_AUTH_MODE=token`` (its comment: "an explicit address (argument or
    RAY_ADDRESS) never does" auto-enable it); the cluster then refuses the driver
    (``InvalidAuthToken``) and ``ray.init`` gives up with a bare ``ConnectionError`` after
    about 20 s, which is said here in words. Where nothing listens at an explicit address,
    ``ray.init`` retries for minutes: a TCP connection is tried first
    (:func:`_probe_ray_address`).
    """
    if address == "local":
        ray.init(address="local", log_to_driver=False)
        return
    target = _explicit_ray_address(address)
    if target:
        _probe_ray_address(target)
    try:
        ray.init(address=address, log_to_driver=False)
    except ray.exceptions.AuthenticationError as err:  # RAY_AUTH_MODE=token, no token here
        raise IccaError(f"the Ray cluster at {address} wants a token and none was found: "
                        f"{_first_line(err)}") from None
    except ConnectionError as err:
        raise IccaError(_unreachable(address, err)) from None
    except ValueError as err:  # an address Ray cannot read
        raise IccaError(f"--ray {address!r}: {_first_line(err)}") from None


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _explicit_ray_address(address: str) -> str | None:
    """The address ``ray.init(address=address)`` is given explicitly: ``address``, or for
    ``"auto"`` a ``RAY_ADDRESS`` set in the environment (None: Ray looks for the cluster)."""
    if address != "auto":
        return address
    return os.environ.get("RAY_ADDRESS") or None


def _unreachable(address: str, err: BaseException) -> str:
    """Why ``ray.init(address=address)`` could not connect, and what to do."""
    said = _first_line(err)
    target = _explicit_ray_address(address)
    if not target:
        return (f"--ray auto found no Ray cluster to join ({said}): start one with "
                "`ray start --head`, give its address, or run with --ray local")
    where = target if target == address else f"{target} (RAY_ADDRESS)"
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        return (f"could not connect to the Ray cluster at {where} ({said}) with "
                "RAY_AUTH_MODE=token: check that the token (RAY_AUTH_TOKEN, the file "
                "RAY_AUTH_TOKEN_PATH names, or ~/.ray/auth_token) is the cluster's "
                "(`ray get-auth-token` on its head prints it) and that the head runs there")
    return (f"could not connect to the Ray cluster at {where} ({said}). A head started with "
            "`ray start --head` wants a token when one exists on its machine (InvalidAuthToken "
            "above), and Ray sends one to an explicit address only when told: set "
            "RAY_AUTH_MODE=token here, with the cluster's token in RAY_AUTH_TOKEN, in the file "
            "RAY_AUTH_TOKEN_PATH names, or in ~/.ray/auth_token (`ray get-auth-token` on the head "
            "prints it); on a node of the cluster, --ray auto without RAY_ADDRESS does this by "
            "itself")


def _probe_ray_address(address: str) -> None:
    """An :class:`IccaError` at once when nothing accepts a TCP connection at ``address``
    (``host:port`` or ``ray://host:port``), where ``ray.init`` would retry for minutes."""
    import socket  # pylint: disable=import-outside-toplevel

    where = address.split("://", 1)[-1]
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        return  # Ray says what it makes of it
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_RAY_PROBE_S):
            pass
    except OSError as err:
        raise IccaError(f"nothing answers at {where} ({err.strerror or err}): is the Ray head "
                        "running there (`ray start --head --port=PORT`), and is this its "
                        "address?") from None


def _run_ray(tasks: Sequence[dict[str, Any]], address: str, jobs: int | None,
             on_row: Callable[[dict[str, Any] | None, int], None],
             scratch: str | None, stop: SweepStop) -> None:
    ray = _import_ray()
    started = False
    in_flight: dict[Any, dict[str, Any]] = {}
    clean = False
    try:
        if not ray.is_initialized():
            if not isinstance(address, str) or not address.strip():
                raise IccaError(f"ray must be 'auto', 'local' or a cluster address, not "
                                f"{address!r}")
            started = True  # shut down below, also after an error of ray.init
            # a local instance cut short while it starts (its processes share the driver's
            # process group, but Ray starts them with SIGINT blocked) crashed the driver at
            # its exit (SIGSEGV): a signal meanwhile stops the sweep once it has started, a
            # few seconds later; a second one ends the driver at once, and Ray's reaper the
            # instance
            local = address.strip() == "local"
            with stop.held() if local else contextlib.nullcontext():
                _connect_ray(ray, address.strip())
            stop.install()  # ray.init put its own SIGTERM handler, which exits at once
        if scratch is not None and sum(1 for n in ray.nodes() if n.get("Alive")) > 1:
            # the run's temporary directory is on this machine only: no shared plan cache
            for task in tasks:
                task["plan_cache"] = None
        bound = jobs or max(1, int(ray.cluster_resources().get("CPU", 1)))
        remote = ray.remote(num_cpus=1, max_retries=0)(evaluate)
        schedule = Schedule(tasks, follow=all(t.get("plan_cache") for t in tasks))
        while True:
            while len(in_flight) < bound:
                task = schedule.next_for()
                if task is None:
                    break
                in_flight[remote.remote(task)] = task
            if not in_flight:
                break
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            stop.check()
            for ref in ready:
                schedule.finished(in_flight.pop(ref))
                try:
                    row = ray.get(ref)
                except ray.exceptions.RayError as err:  # the worker or its node died
                    warnings.warn(f"a Ray task of the sweep died ({type(err).__name__}); its "
                                  "point has no row (run the sweep again to retry it)",
                                  RuntimeWarning, stacklevel=2)
                    row = None
                on_row(row, len(in_flight))
        clean = True
    finally:
        with stop.held():
            if not clean:  # stopped: the points in flight stop on the cluster too (no row)
                for ref in in_flight:
                    with contextlib.suppress(Exception):
                        ray.cancel(ref, force=True)
            if started:
                ray.shutdown()
