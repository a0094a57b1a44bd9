"""Compile time of the zoo kept on chip: T10 planning (idle/active plans, Algorithm 1) per
model and batch size, timing-only (:func:`tvm_icca.drivers.device_programs.compile_programs`, no LLVM build).

Every (model, batch) pair is compiled cold, with a fresh plan cache, the way
``tvm-icca plan model --model resnet50 --batch 8 --hw ipu-mk2`` compiles it. The machine is
shared, so besides wall time the script reports the process's CPU time (``time.process_time``
plus any child processes), the figure that does not depend on other load. Each row also
gives the simulated time per inference and a digest of the chosen plans (every operator's
active and idle plan, in call order), so two versions of the planner can be compared: equal
digests mean identical plans.

    PYTHONPATH=. .venv/bin/python benchmarks/compile_time.py [--hw ipu-mk2]
        [--models resnet18,resnet50,bert-large,vit-b16] [--batches 1,4,8]
        [--out benchmarks/results/compile_time] [--before before.json]

``--out`` names the ``.md`` and ``.json`` files written; ``--before`` is the JSON an earlier
run (e.g. the main branch through ``PYTHONPATH``) wrote, and adds before/after columns;
``--render RUN.json`` writes the tables of an earlier run without measuring again.
The zoo has no MobileNet; a name the zoo does not know is reported and skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import sys
import time
from typing import Any

from runtime_sim.contract.errors import IccaError
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.workloads import get_workload, list_workloads
from result_files import write_json, write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_MODELS = ("resnet18", "resnet50", "mobilenet-v2", "bert-large", "vit-b16")


def cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children (user + system)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def plan_digest(model) -> str:
    """A digest of every operator's active and idle plan, in call order."""
    digest = hashlib.sha1()
    for program in model.programs:
        for op in program.ops:
            idle = op.idle_plan
            idle = idle if idle is None or isinstance(idle, str) else idle.to_dict()
            digest.update(json.dumps([op.name, op.plan.to_dict(), idle], sort_keys=True).encode())
    return digest.hexdigest()[:12]


def measure(name: str, batch: int, hw: str) -> dict[str, Any]:
    """Compile ``name`` at ``batch`` kept on chip (cold cache) and simulate it."""
    workload = get_workload(name, batch=batch)
    wall, cpu = time.perf_counter(), cpu_seconds()
    model = compile_programs(workload, hw, state="chip", plan_cache=PlanCache())
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    report = model.simulate()
    plan = model.model_plan
    return {"model": name, "batch": batch, "hw": hw, "wall_s": wall, "cpu_s": cpu,
            "simulated_ms": report.total_s * 1e3,
            "estimated_ms": plan.estimated_time_s * 1e3 if plan is not None else None,
            "operators": len(plan.decisions) if plan is not None else None,
            "plans": plan_digest(model)}


def _row(r: dict[str, Any], before: dict[tuple, dict[str, Any]]) -> str:
    if "error" in r:
        return f"| {r['model']} | {r['batch']} | error: {r['error'][:80]} |"
    b = before.get((r["model"], r["batch"], r["hw"]))
    cells = [r["model"], str(r["batch"])]
    if b is not None and "error" not in b:
        same = "same" if b["plans"] == r["plans"] else "differ"
        cells += [f"{b['cpu_s']:.1f}", f"{r['cpu_s']:.1f}", f"{b['wall_s']:.1f}", f"{r['wall_s']:.1f}",
                  f"{b['simulated_ms']:.4f}", f"{r['simulated_ms']:.4f}", f"{r['plans']} ({same})"]
    elif before:
        cells += ["-", f"{r['cpu_s']:.1f}", "-", f"{r['wall_s']:.1f}", "-", f"{r['simulated_ms']:.4f}",
                  r["plans"]]
    else:
        cells += [f"{r['cpu_s']:.1f}", f"{r['wall_s']:.1f}", f"{r['simulated_ms']:.4f}", r["plans"]]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hw", default="ipu-mk2")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--batches", default="1,4,8")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "compile_time"))
    parser.add_argument("--before", default=None, help="JSON of an earlier run to compare with")
    parser.add_argument("--render", default=None, help="JSON of a run to tabulate (no measuring)")
    args = parser.parse_args()
    before = {}
    if args.before:
        for r in json.loads(pathlib.Path(args.before).read_text())["rows"]:
            before[(r["model"], r["batch"], r["hw"])] = r
    known = set(list_workloads())
    rows = []
    if args.render:
        run = json.loads(pathlib.Path(args.render).read_text())
        args.hw, rows = run["hw"], run["rows"]
    for name in ([] if args.render else args.models.split(",")):
        if name not in known:
            print(f"{name}: not in the zoo, skipped", flush=True)
            continue
        for batch in (int(b) for b in args.batches.split(",")):
            try:
                r = measure(name, batch, args.hw)
            except IccaError as err:
                r = {"model": name, "batch": batch, "hw": args.hw, "error": str(err)}
            rows.append(r)
            print(json.dumps(r), flush=True)
    if before:
        head = ("| model | batch | CPU s before | CPU s after | wall s before | wall s after | "
                "simulated ms before | simulated ms after | plans |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---|")
    else:
        head = ("| model | batch | CPU s | wall s | simulated ms | plans |",
                "|---|---:|---:|---:|---:|---|")
    lines = [f"Planning the zoo kept on chip on `{args.hw}` (`benchmarks/compile_time.py`): cold plan "
             "cache per row, timing-only compile; CPU s is the process's CPU time (the machine is "
             "shared), plans a digest of every operator's active and idle plan.", "", *head]
    lines += [_row(r, before) for r in rows]
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_markdown(out.with_suffix(".md"), "\n".join(lines))
    write_json(out.with_suffix(".json"), {"hw": args.hw, "python": sys.version.split()[0],
                                          "rows": rows})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
