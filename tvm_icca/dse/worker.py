"""What one worker process does for one point: compile, time, and describe it as a row.

Run in the worker processes of a local pool and in Ray tasks alike (:func:`evaluate` takes
and returns plain data, so it pickles). A worker keeps one
:class:`~tvm_icca.model_pass.plan_cache.PlanCache` across its points (:func:`plan_cache_for`):
points of one group ask for the same operator plans (:func:`tvm_icca.dse.points.plan_group`),
and every design of one chip reuses them; the plans are keyed on the chip fields they read, so
the points of a bandwidth sweep reuse every search. With a plan cache directory
(``tvm-icca dse --plan-cache DIR``, or the run's temporary one) the cache has an on-disk
layer that the other workers, later runs and other machines read too.
"""

from __future__ import annotations

import os
import time
from typing import Any

from runtime_sim.contract.errors import HbmCapacityError, IccaError, PlanNotFoundError
from tvm_icca.dse.columns import per_token
from tvm_icca.dse.gpu_points import GPU_PRELOAD, gpu_metrics
from tvm_icca.hardware_choice import HardwareSpec
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.provenance import current

__all__ = ["evaluate", "plan_cache_for", "DOES_NOT_FIT", "FAILED", "OK", "PROVENANCE_KEYS",
           "TIMING_KEYS"]

OK, DOES_NOT_FIT, FAILED = "ok", "does_not_fit", "failed"

#: Report keys a row leaves out: the chip's name and topology are inputs of the row, the
#: design is the point's, and the tables are per operator (not one value per point).
_SKIPPED = {"hardware", "topology", "design", "regions", "op_kinds", "slow_kinds", "slow_ops"}
#: Columns that measure the host, not the chip: they differ between two runs of one point.
TIMING_KEYS = ("compile_s", "simulate_s", "simulation_s", "elk_planning_s", "timestamp", "host",
               "plan_cache_hits", "plan_cache_misses", "plan_searches", "wall_s", "cpu_s")
#: Columns naming the code that computed the row (:mod:`tvm_icca.provenance`): two runs of one
#: point on different commits differ in them, not in the result.
PROVENANCE_KEYS = ("commit", "dirty", "tvm_icca_version", "tvm_version", "python_version")

# one plan cache per worker process, for the points of one group (see plan_cache_for)
_CACHE: dict[str, Any] = {"group": None, "path": None, "jobs": 1, "cache": None}
_WORKLOAD: dict[str, Any] = {"key": None, "workload": None}


def plan_cache_for(group: str, path: str | None = None, jobs: int = 1) -> PlanCache:
    """The worker's plan cache for a point of ``group``, with its on-disk layer in ``path``
    (None: in memory only).

    Kept while the worker's points stay in one group, replaced by an empty one when the group
    changes (plans of another workload or chip shape would only hold memory; what is on disk
    stays there). ``jobs``: the plan-scan processes it forks (1: the worker is itself one of
    the sweep's processes and forks none).
    """
    if (_CACHE["group"], _CACHE["path"], _CACHE["jobs"]) != (group, path, jobs) \
            or _CACHE["cache"] is None:
        _CACHE["group"], _CACHE["path"], _CACHE["jobs"] = group, path, jobs
        _CACHE["cache"] = PlanCache(jobs=jobs, path=path)
    return _CACHE["cache"]


def _workload(spec: dict[str, Any], base_dir: str) -> Any:
    """The zoo workload or the ONNX module of a point (the last one is kept: the points of a
    group share it)."""
    key = repr(sorted(spec.items())) + base_dir
    if _WORKLOAD["key"] == key:
        return _WORKLOAD["workload"]
    # pylint: disable=import-outside-toplevel
    from tvm_icca.frontend.onnx_loader import load_onnx
    from tvm_icca.workloads import get_workload

    args = {k: v for k, v in spec.items() if k != "workload"}
    name = spec["workload"]
    if name.lower().endswith(".onnx"):
        path = name if os.path.isabs(name) else os.path.join(base_dir, name)
        shapes = {k: tuple(v) for k, v in (args.get("shape") or {}).items()} or None
        model = load_onnx(path, shapes)
    else:
        model = get_workload(name, **args)
    _WORKLOAD["key"], _WORKLOAD["workload"] = key, model
    return model


def evaluate(task: dict[str, Any]) -> dict[str, Any]:
    """Compile and time one point; its row, whatever happens to it.

    Parameters
    ----------
    task : dict
        ``key``, ``group``, ``inputs`` (the row's input columns), ``hw``
        (:meth:`HardwareSpec.to_dict`), ``workload``, ``design``, ``state``, ``execution``,
        ``base_dir`` (where relative ONNX paths are), ``gpu`` (a GPU preset: the point is
        priced on that GPU, :mod:`tvm_icca.dse.gpu_points`) and optionally ``plan_cache`` (the plan
        cache's directory, :func:`plan_cache_for`), ``scan_jobs`` (the processes its plan
        scans may fork; default 1) and ``trace`` (columns naming the point
        and its chip: ``point_id``, ``chip_digest``, ``workload_args``).

    Returns
    -------
    dict
        The row: the key, the inputs, ``status`` (``ok``, ``does_not_fit``: no plan fits the
        chip or its HBM, ``failed``: another error) and ``reason``; for ``ok`` the timing report's
        summary (:meth:`runtime_sim.timing.TimingReport.to_dict`, floors included) and its
        per-token columns (:func:`tvm_icca.dse.columns.per_token`); compile
        and simulation seconds; the point's wall and CPU seconds in this process; the code
        (:mod:`tvm_icca.provenance`: commit, uncommitted changes, versions), host and time.
    """
    # pylint: disable=import-outside-toplevel
    from tvm_icca.drivers.device_programs import compile_programs

    wall_start, cpu_start = time.perf_counter(), time.process_time()
    row: dict[str, Any] = {"key": task["key"], **task.get("trace", {}),
                           "inputs": list(task["inputs"]), **task["inputs"]}
    status, reason, metrics = OK, "", {}
    compile_s = simulate_s = elk_s = 0.0
    hits = misses = searches = 0
    cache = None
    start = time.perf_counter()
    try:
        hw = HardwareSpec.from_dict(task["hw"])
        model = _workload(task["workload"], task["base_dir"])
        jobs = task.get("scan_jobs", 1)
        cache = plan_cache_for(task["group"], task.get("plan_cache"), jobs)
        searches = -cache.search.searches  # a point that does not fit searched too
        gpu = task.get("gpu", "")
        design = GPU_PRELOAD if gpu else task["design"]
        compiled = compile_programs(model, hw, plan_cache=cache, preload=design,
                                    state=task["state"], execution=task["execution"],
                                    progress=False, jobs=jobs)
        compile_s = time.perf_counter() - start
        hits, misses = compiled.plan_cache.get("hits", 0), compiled.plan_cache.get("misses", 0)
        elk_s = compiled.preload.planning_s if compiled.preload is not None else 0.0
        start = time.perf_counter()
        if gpu:  # a GPU reference point (tvm_icca.dse.gpu_points)
            metrics = {k: v for k, v in gpu_metrics(compiled.programs, gpu).items()
                       if k not in _SKIPPED}
        else:
            report = compiled.simulate(progress=False)
            metrics = {k: v for k, v in report.to_dict(per_op=False).items() if k not in _SKIPPED}
        simulate_s = time.perf_counter() - start
        # per token (or sample) of the workload: tokens_per_run, time and energy per token
        metrics.update(per_token({**row, **metrics}))
    except (PlanNotFoundError, HbmCapacityError) as err:
        # the compiler proved the model cannot fit this chip; a device-side SramOverflowError
        # is not such a proof but a program the compiler got wrong: a failed row, below
        status, reason = DOES_NOT_FIT, f"{type(err).__name__}: {err}"
    except IccaError as err:
        status, reason = FAILED, f"{type(err).__name__}: {err}"
    except Exception as err:  # pylint: disable=broad-except
        # a bug is recorded like any failure (the sweep goes on); its type says it is one
        status, reason = FAILED, f"unexpected {type(err).__name__}: {err}"
    if not compile_s:
        compile_s = time.perf_counter() - start
    searches = searches + cache.search.searches if cache is not None else 0
    row.update(status=status, reason=reason, **metrics)
    origin = current()
    row.update(compile_s=compile_s, simulate_s=simulate_s, elk_planning_s=elk_s,
               plan_cache_hits=hits, plan_cache_misses=misses, plan_searches=searches,
               wall_s=time.perf_counter() - wall_start, cpu_s=time.process_time() - cpu_start,
               commit=origin.commit, dirty=origin.dirty,
               tvm_icca_version=origin.tvm_icca_version, tvm_version=origin.tvm_version,
               python_version=origin.python_version, host=origin.host,
               timestamp=origin.timestamp)
    return row
