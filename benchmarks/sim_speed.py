"""How fast the timing-only path is: Llama 2 13B decode (batch 32, context 2048) on IPU-POD4+HBM.

Elk's evaluation setting (Elk §6.1, Table 2). Two runs, each in a fresh plan cache:

* one decoder layer (``num_layers=1``: embedding, 1 layer, final norm and LM head);
* the full 40-layer model.

For each: wall time to build the Relax module (``tvm_icca.workloads``), to compile it to device
programs (:func:`tvm_icca.drivers.device_programs.compile_programs`: partition, tensor expressions, plan
search; no LLVM) and to simulate it (:func:`runtime_sim.timing.simulate_timing`). Targets:
simulation under 2 s for a layer and under 30 s for the model.

Run: ``.venv/bin/python benchmarks/sim_speed.py [--hw ipu-pod4-hbm] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tvm_icca.drivers.device_programs import compile_programs  # noqa: E402
from tvm_icca.workloads import get_workload  # noqa: E402
from result_files import write_markdown  # noqa: E402  (benchmarks/, beside this script)

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TARGETS_S = {1: 2.0, 40: 30.0}  # simulation wall-time targets


def measure(layers: int, hw: str, batch: int, context: int, progress: bool) -> dict:
    start = time.perf_counter()
    workload = get_workload("llama2-13b", batch=batch, context=context, num_layers=layers)
    build_s = time.perf_counter() - start
    model = compile_programs(workload, hw, progress=progress)
    start = time.perf_counter()
    report = model.simulate(progress=progress)
    simulate_s = time.perf_counter() - start
    return {
        "layers": layers,
        "build_s": build_s,
        "compile_s": model.compile_s,
        "simulate_s": simulate_s,
        "simulate_target_s": TARGETS_S.get(layers),
        "regions": model.num_regions,
        "device_ops": model.num_device_ops,
        "plan_cache": dict(model.plan_cache),
        "simulated_total_ms": report.total_s * 1e3,
        "hbm_gb": report.hbm_bytes / 1e9,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hw", default="ipu-pod4-hbm")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--layers", default="1,40",
                        help="comma-separated layer counts (default 1,40; later runs in the same "
                        "process reuse plan_operator's own memo, run one per process for cold numbers)")
    args = parser.parse_args(argv)
    layer_counts = [int(n) for n in args.layers.split(",")]
    rows = [measure(n, args.hw, args.batch, args.context, not args.no_progress) for n in layer_counts]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    lines = [f"Llama 2 13B decode, batch {args.batch}, context {args.context}, on `{args.hw}`: "
             "wall seconds on this 2-core machine, timing-only (no LLVM build).", "",
             "| layers | build s | compile s | simulate s | simulate target s | regions | device ops "
             "| simulated ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        target = "-" if r["simulate_target_s"] is None else f"{r['simulate_target_s']:.0f}"
        lines.append(f"| {r['layers']} | {r['build_s']:.2f} | {r['compile_s']:.2f} | "
                     f"{r['simulate_s']:.2f} | {target} | {r['regions']} | {r['device_ops']} | "
                     f"{r['simulated_total_ms']:.3f} |")
    print("\n".join(lines))
    write_markdown(os.path.join(RESULTS, "sim_speed.md"), "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
