"""What one design-space sweep point costs after the first (issue 27, "fast sweeps").

Llama2-13B decode (all layers unless ``--layers``), batch 32, context 2,048, Elk-Full, on
``ipu-pod4-hbm``, compiled and timed the way a ``tvm-icca dse`` worker does it (one plan
cache with an on-disk layer, ``jobs=1``):

1. the first point, cold (an empty cache directory);
2. a second point differing only in HBM bandwidth (x2), same cache;
3. a point differing only in link bandwidth (x2), same cache;
4. the first point again in a fresh process, with the cache directory warm (another worker,
   a restarted sweep).

Wall and CPU seconds of the compilation (partitioning, region plans, Elk's tables and
schedule) and of the timing simulation; the Elk pass's own seconds; plan cache hits and
searches. Writes ``benchmarks/results/dse_point_cost.md``.

    .venv/bin/python benchmarks/dse_point_cost.py            # about 2 minutes here
    .venv/bin/python benchmarks/dse_point_cost.py --layers 2
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from result_files import write_markdown  # noqa: E402  (benchmarks/, beside this script)

RESULTS = ROOT / "benchmarks" / "results"
MODEL, HW, DESIGN = "llama2-13b", "ipu-pod4-hbm", "elk-full"


def point(workload: Any, hw: Any, cache: Any, label: str) -> dict[str, Any]:
    """Compile and time one point; its costs."""
    # pylint: disable=import-outside-toplevel
    from tvm_icca.drivers.device_programs import compile_programs

    wall, cpu = time.perf_counter(), time.process_time()
    compiled = compile_programs(workload, hw, plan_cache=cache, preload=DESIGN, progress=False, jobs=1)
    compile_wall, compile_cpu = time.perf_counter() - wall, time.process_time() - cpu
    wall, cpu = time.perf_counter(), time.process_time()
    report = compiled.simulate(progress=False)
    sim_wall, sim_cpu = time.perf_counter() - wall, time.process_time() - cpu
    row = {"point": label, "hbm_tbps": hw.hbm_bandwidth / 1e12, "link_gbps": hw.link_bandwidth / 1e9,
           "compile_wall_s": compile_wall, "compile_cpu_s": compile_cpu,
           "elk_s": compiled.preload.planning_s, "simulate_wall_s": sim_wall, "simulate_cpu_s": sim_cpu,
           "point_wall_s": compile_wall + sim_wall, "point_cpu_s": compile_cpu + sim_cpu,
           "hits": compiled.plan_cache["hits"], "searched": compiled.plan_cache["misses"],
           "disk_reads": cache.store.reads if cache.store is not None else 0,
           "step_ms": report.total_s * 1e3}
    print(f"  {label}: compile {compile_wall:.1f} s wall / {compile_cpu:.1f} s CPU (Elk "
          f"{row['elk_s']:.1f} s), simulate {sim_wall:.1f} s, {row['step_ms']:.3f} ms per decode step",
          file=sys.stderr)
    return row


def run_points(layers: int | None, cache_dir: str, which: str) -> list[dict[str, Any]]:
    """``which``: ``sweep`` (points 1-3 in this process) or ``warm`` (point 1 again)."""
    # pylint: disable=import-outside-toplevel
    from tvm_icca.hardware_choice import resolve_hardware
    from tvm_icca.model_pass.plan_cache import PlanCache
    from tvm_icca.workloads import get_workload

    kwargs: dict[str, Any] = {"batch": 32, "context": 2048}
    if layers:
        kwargs["num_layers"] = layers
    workload = get_workload(MODEL, **kwargs)
    base = resolve_hardware(HW)
    cache = PlanCache(jobs=1, path=cache_dir)
    if which == "warm":
        return [point(workload, base, cache, "same point, fresh process, warm disk cache")]
    return [point(workload, base, cache, "first point, cold"),
            point(workload, base.with_overrides(hbm_bandwidth=2 * base.hbm_bandwidth), cache,
                  "HBM bandwidth x2, after the first"),
            point(workload, base.with_overrides(link_bandwidth=2 * base.link_bandwidth), cache,
                  "link bandwidth x2, after those")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=None, help="first N layers (default: all)")
    parser.add_argument("--child", nargs=2, metavar=("CACHE_DIR", "WHICH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_points(args.layers, *args.child)))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="tvm_icca_plans_") as cache_dir:
        # each phase in its own process: a sweep worker's memory, then a new worker's
        for which in ("sweep", "warm"):
            cmd = [sys.executable, __file__, "--child", cache_dir, which]
            if args.layers:
                cmd += ["--layers", str(args.layers)]
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            rows += json.loads(out.strip().splitlines()[-1])
    layers = args.layers or "all 40"
    lines = [
        f"# Cost of a design-space sweep point: {MODEL}, {layers} layers, batch 32, context 2048, "
        f"{DESIGN}, {HW}",
        "",
        "A `tvm-icca dse` worker's view: one plan cache with an on-disk layer, `jobs=1`. Seconds "
        "of wall time and of this process's CPU (the machine is shared: CPU is the steadier "
        "figure). Compile = partitioning, region plans, Elk's trade-off tables and schedule; "
        "Elk = the Elk pass alone (tables and schedule).",
        "",
        "| point | HBM TB/s | link GB/s | compile wall s | compile CPU s | Elk s | simulate s "
        "| point wall s | point CPU s | plans from cache | plans searched | disk reads | ms per step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['point']} | {r['hbm_tbps']:.0f} | {r['link_gbps']:.1f} | {r['compile_wall_s']:.1f} "
            f"| {r['compile_cpu_s']:.1f} | {r['elk_s']:.1f} | {r['simulate_wall_s']:.1f} "
            f"| {r['point_wall_s']:.1f} | {r['point_cpu_s']:.1f} | {r['hits']} | {r['searched']} "
            f"| {r['disk_reads']} | {r['step_ms']:.3f} |")
    lines += ["", "Plans searched counts the operators the plan cache did not answer from memory; "
              "with a warm disk their searches are read back (disk reads), not run."]
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_markdown(RESULTS / "dse_point_cost.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
