"""Audit of LLM decode on multi-chip systems: HBM bytes, operator lower bounds, topologies.

Measures the goals of the chip/topology issue on Llama 2 decode (batch 32, context 2,048):

* **HBM bytes read per decode step** against the distinct bytes of the model's HBM tensors (its
  weights and KV caches): a plan that places replicas of a weight block on two chips reads it
  twice (``hbm_delivered_bytes`` of the timing report, every copy counted);
* **operator kinds against their lower bounds** (the report's per-operator lower bound:
  FLOPs at peak, distinct HBM bytes at the HBM bandwidth), summed per kind over the run;
* **mesh vs all-to-all**: the same model on ``ipu-pod4-hbm-mesh`` and ``ipu-pod4-hbm``
  (Elk §6.4 reports similar latencies on GQA models and the mesh somewhat behind on others).

    .venv/bin/python benchmarks/llm_audit.py [--models llama2-13b,llama2-70b] [--json]

Writes ``benchmarks/results/llm_audit.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tvm_icca.drivers.device_programs import compile_programs  # noqa: E402
from tvm_icca.model_pass.calls import state_read_by_regions  # noqa: E402
from tvm_icca.workloads import get_workload  # noqa: E402
from result_files import write_json, write_markdown  # noqa: E402  (benchmarks/, beside this script)

TOPOLOGIES = ("ipu-pod4-hbm", "ipu-pod4-hbm-mesh")


def audit(name: str, hw: str, batch: int, context: int) -> dict:
    workload = get_workload(name, batch=batch, context=context)
    start = time.perf_counter()
    model = compile_programs(workload, hw)
    # the weights and KV caches the chip reads (the embedding table is gathered on the host)
    read = state_read_by_regions(model.module, workload.resident_names)
    distinct = sum(p.nbytes for p in workload.params if p.name in read)
    compile_s = time.perf_counter() - start
    report = model.simulate()
    delivered = float(getattr(report, "hbm_delivered_bytes", report.hbm_bytes))
    return {
        "model": name, "hardware": hw, "batch": batch, "context": context,
        "total_ms": report.total_s * 1e3, "compile_s": compile_s,
        "distinct_hbm_bytes": distinct, "hbm_unique_bytes": float(report.hbm_bytes),
        "hbm_delivered_bytes": delivered, "hbm_read_ratio": delivered / distinct if distinct else 0.0,
        "hbm_s": report.hbm_s, "host_s": report.host_s, "idle_s": report.idle_s,
        "inter_chip_bytes": float(report.inter_chip_bytes),
        # per kind: time (waiting for its loads + executing) and the report's lower bound
        "kinds": {row["kind"]: dict(row) for row in report.op_kinds},
        "slow_kinds": [row["kind"] for row in report.slow_kinds],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama2-13b,llama2-70b")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [audit(m, hw, args.batch, args.context)
            for m in args.models.split(",") for hw in TOPOLOGIES]
    lines = [f"LLM decode audit, batch {args.batch}, context {args.context} "
             "(`benchmarks/llm_audit.py`).", "",
             "| model | hardware | ms per step | HBM read GB | distinct HBM GB | read / distinct | HBM busy ms | idle ms | inter-chip GB | compile s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['hardware']} | {r['total_ms']:.3f} | "
                     f"{r['hbm_delivered_bytes'] / 1e9:.2f} | {r['distinct_hbm_bytes'] / 1e9:.2f} | "
                     f"{r['hbm_read_ratio']:.3f} | {r['hbm_s'] * 1e3:.2f} | {r['idle_s'] * 1e3:.2f} | "
                     f"{r['inter_chip_bytes'] / 1e9:.2f} | {r['compile_s']:.1f} |")
    by_model = collections.defaultdict(dict)
    for r in rows:
        by_model[r["model"]][r["hardware"]] = r["total_ms"]
    lines += ["", "| model | mesh / all-to-all |", "|---|---:|"]
    for model, times in by_model.items():
        lines.append(f"| {model} | {times[TOPOLOGIES[1]] / times[TOPOLOGIES[0]]:.2f}x |")
    for r in rows:
        lines += ["", f"Operator kinds, {r['model']} on {r['hardware']}: time (waiting for loads + "
                  "executing) against the sum of the operators' lower bounds (the largest of FLOPs "
                  "at peak, distinct HBM bytes at the HBM bandwidth, host bytes at the host links, "
                  "one synchronization):", "",
                  "| kind | ops | time ms | lower bound ms | ratio |", "|---|---:|---:|---:|---:|"]
        for kind, v in r["kinds"].items():
            lines.append(f"| {kind} | {v['num_ops']} | {v['time_s'] * 1e3:.3f} | "
                         f"{v['lower_bound_s'] * 1e3:.4f} | {v['ratio']:.1f}x |")
    text = "\n".join(lines) + "\n"
    out = ROOT / "benchmarks" / "results"
    write_markdown(out / "llm_audit.md", text)
    write_json(out / "llm_audit.json", rows)
    print(json.dumps(rows, indent=1) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
