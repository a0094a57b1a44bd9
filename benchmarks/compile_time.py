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

**Layer sweep** (``--layers``): compile time per operator of one LLM at several layer counts,
with HBM preloading (Elk), the way ``benchmarks/elk_llm.py`` compiles it: each count cold
(a fresh plan cache, one process, ``--jobs`` workers), timing-only. Each row gives the CPU and
wall seconds of the whole compile and the Elk pass's wall seconds (its trade-off tables and its
design's search), each per device operator, and the simulated time of one run. The Elk pass
searches one period of the identical layers and expands it
(:mod:`tvm_icca.elk.period_reuse`); ``--whole-run`` compiles every count a second time with
that off (``reuse_layers=False``) and adds its times and simulated time beside.

    PYTHONPATH=. .venv/bin/python benchmarks/compile_time.py --layers 1,2,4,10,20,40 \
        [--llm llama2-13b] [--design elk-full] [--hw ipu-pod4-hbm] [--batch 32] [--context 2048] \
        [--whole-run] [--out benchmarks/results/compile_time_layers]

**Prefill sweep** (``--prefill``): compile time of the LLM's prefill (batch 1, all layers)
against the prompt's length, each length cold as above, with the CPU seconds per layer.

    PYTHONPATH=. .venv/bin/python benchmarks/compile_time.py --prefill 2048,4096,8192,16384,32768 \
        [--llm llama2-13b] [--design elk-full] [--prefill-layers N] \
        [--out benchmarks/results/compile_time_prefill]
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


def measure_layers(model: str, layers: int, hw: str, batch: int, context: int, design: str,
                   jobs: int, reuse: bool = True) -> dict[str, Any]:
    """Compile the first ``layers`` layers of ``model`` cold with ``design`` and simulate it."""
    row = {"model": model, "layers": layers, "hw": hw, "batch": batch, "context": context}
    return row | _compile_cold(get_workload(model, batch=batch, context=context, num_layers=layers),
                               hw, design, jobs, reuse)


def measure_prefill(model: str, seq_len: int, layers: int | None, hw: str, design: str,
                    jobs: int) -> dict[str, Any]:
    """Compile the prefill of a ``seq_len``-token prompt (batch 1; ``layers``: the first N,
    None: all) cold with ``design`` and simulate it."""
    workload = get_workload(model, phase="prefill", seq_len=seq_len, num_layers=layers)
    row = {"model": model, "seq_len": seq_len, "layers": workload.config["layers"], "hw": hw}
    return row | _compile_cold(workload, hw, design, jobs, True)


def _compile_cold(workload, hw: str, design: str, jobs: int, reuse: bool) -> dict[str, Any]:
    """The timings of one cold compile (fresh plan cache, timing-only) and its simulated time."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    compiled = compile_programs(workload, hw, plan_cache=PlanCache(jobs=jobs), preload=design,
                                jobs=jobs, progress=False, reuse_layers=reuse)
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    pre = compiled.preload
    return {"design": design, "reuse_layers": reuse, "operators": compiled.num_device_ops,
            "cpu_s": cpu, "wall_s": wall,
            "elk_pass_s": pre.planning_s if pre else 0.0,
            "elk_search_s": pre.stats["planning_s"] if pre else 0.0,
            "elk_source": pre.stats["source"] if pre else "",
            "simulated_ms": compiled.simulate().total_s * 1e3, "plans": plan_digest(compiled)}


def _layer_lines(rows: list[dict[str, Any]], whole: dict[int, dict[str, Any]]) -> list[str]:
    head = ["| layers | operators | CPU s | wall s | CPU ms/op | Elk pass s | Elk search s | "
            "Elk ms/op | simulated ms |"]
    rule = "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    if whole:
        head[0] += " whole run: CPU s | Elk search s | simulated ms | same plans |"
        rule += "---:|---:|---:|---|"
    lines = head + [rule]
    for r in rows:
        ops = r["operators"]
        cells = [str(r["layers"]), str(ops), f"{r['cpu_s']:.1f}", f"{r['wall_s']:.1f}",
                 f"{r['cpu_s'] / ops * 1e3:.1f}", f"{r['elk_pass_s']:.1f}",
                 f"{r['elk_search_s']:.2f}", f"{r['elk_pass_s'] / ops * 1e3:.1f}",
                 f"{r['simulated_ms']:.4f}"]
        w = whole.get(r["layers"])
        if w is not None:
            cells += [f"{w['cpu_s']:.1f}", f"{w['elk_search_s']:.2f}", f"{w['simulated_ms']:.4f}",
                      "same" if w["plans"] == r["plans"] else "differ"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def layer_sweep(args: argparse.Namespace) -> None:
    """The ``--layers`` section: compile time per operator against the layer count."""
    hw = args.hw or "ipu-pod4-hbm"
    rows, whole = [], {}
    for layers in (int(n) for n in args.layers.split(",")):
        for reuse in (True, False) if args.whole_run else (True,):
            r = measure_layers(args.llm, layers, hw, args.batch, args.context, args.design,
                               args.jobs, reuse)
            print(json.dumps(r), flush=True)
            if reuse:
                rows.append(r)
            else:
                whole[layers] = r
    lines = [f"Compile time of `{args.llm}` decode (batch {args.batch}, context {args.context}) "
             f"on `{hw}` with `{args.design}` against its layer count "
             "(`benchmarks/compile_time.py --layers`): each row cold, one process, "
             f"{args.jobs} plan-search worker(s), timing-only. CPU s is the process's CPU time "
             "(the machine is shared); the Elk pass (trade-off tables and the design's search) "
             "and its search are wall seconds; per operator = over the device operators. The "
             "Elk pass searches one period of the identical layers and expands it"
             + ("; *whole run*: the same compile with that off (`reuse_layers=False`)."
                if whole else "."), "", *_layer_lines(rows, whole)]
    _write(args.out or ROOT / "benchmarks" / "results" / "compile_time_layers", lines,
           {"hw": hw, "rows": rows, "whole_run": list(whole.values())})


def prefill_sweep(args: argparse.Namespace) -> None:
    """The ``--prefill`` section: compile time of a long prompt's prefill against its length."""
    hw = args.hw or "ipu-pod4-hbm"
    rows = []
    for seq_len in (int(n) for n in args.prefill.split(",")):
        r = measure_prefill(args.llm, seq_len, args.prefill_layers, hw, args.design, args.jobs)
        print(json.dumps(r), flush=True)
        rows.append(r)
    lines = [f"Compile time of `{args.llm}` prefill (batch 1) on `{hw}` with `{args.design}` "
             "against the prompt's length (`benchmarks/compile_time.py --prefill`): each row "
             f"cold, one process, {args.jobs} plan-search worker(s), timing-only. CPU s is the "
             "process's CPU time (the machine is shared); the Elk pass (trade-off tables, whose "
             "ladders search plans, and the design's search) and its search are wall seconds. "
             "Operators larger than the chip run as pieces, so the operators grow with the "
             "prompt.", "",
             "| tokens | layers | operators | CPU s | wall s | CPU s per layer | Elk pass s | "
             "Elk search s | simulated ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| " + " | ".join([
            str(r["seq_len"]), str(r["layers"]), str(r["operators"]), f"{r['cpu_s']:.1f}",
            f"{r['wall_s']:.1f}", f"{r['cpu_s'] / r['layers']:.1f}", f"{r['elk_pass_s']:.1f}",
            f"{r['elk_search_s']:.1f}", f"{r['simulated_ms']:.3f}"]) + " |")
    _write(args.out or ROOT / "benchmarks" / "results" / "compile_time_prefill", lines,
           {"hw": hw, "rows": rows})


def _write(out: pathlib.Path | str, lines: list[str], data: dict[str, Any]) -> None:
    """The tables as ``out``.md, ``data`` (with the Python version) as ``out``.json; the
    tables printed too."""
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_markdown(out.with_suffix(".md"), "\n".join(lines))
    write_json(out.with_suffix(".json"), {"hw": data["hw"], "python": sys.version.split()[0], **data})
    print("\n".join(lines))


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
    parser.add_argument("--hw", default=None,
                        help="the chip (default: ipu-mk2; ipu-pod4-hbm with --layers)")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--batches", default="1,4,8")
    parser.add_argument("--out", default=None,
                        help="default benchmarks/results/compile_time (_layers with --layers, "
                        "_prefill with --prefill)")
    parser.add_argument("--before", default=None, help="JSON of an earlier run to compare with")
    parser.add_argument("--render", default=None, help="JSON of a run to tabulate (no measuring)")
    sweep = parser.add_argument_group("layer sweep (--layers)")
    sweep.add_argument("--layers", default=None, help="layer counts, e.g. 1,2,4,10,20,40")
    sweep.add_argument("--llm", default="llama2-13b")
    sweep.add_argument("--design", default="elk-full")
    sweep.add_argument("--batch", type=int, default=32)
    sweep.add_argument("--context", type=int, default=2048)
    sweep.add_argument("--jobs", type=int, default=1)
    sweep.add_argument("--whole-run", action="store_true",
                       help="also compile each count with the Elk pass searching the whole run")
    prompt = parser.add_argument_group("prefill sweep (--prefill; --llm, --design, --jobs "
                                       "as for --layers)")
    prompt.add_argument("--prefill", default=None,
                        help="prompt lengths, e.g. 2048,4096,8192,16384,32768")
    prompt.add_argument("--prefill-layers", type=int, default=None,
                        help="only the first N layers (default: all)")
    args = parser.parse_args()
    if args.layers:
        layer_sweep(args)
        return
    if args.prefill:
        prefill_sweep(args)
        return
    args.hw = args.hw or "ipu-mk2"
    args.out = args.out or str(ROOT / "benchmarks" / "results" / "compile_time")
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
    _write(args.out, lines, {"hw": args.hw, "rows": rows})


if __name__ == "__main__":
    main()
