"""T10 compute-shift plans vs the virtual-global-memory baseline on one IPU Mk2 (T10 §6.2).

For BERT-large, ViT-Base/16, ResNet-18 and NeRF from the workload zoo, at batch sizes
1, 2, 4, ... until the T10 plan no longer fits one IPU Mk2 (the model on chip, T10 §4.3.2),
both execution models are compiled from the same Relax module
(``compile_programs(..., execution="t10" | "vgm", state="chip")``) and timed on the
simulated device: T10 programs by the event-driven timing simulator, VGM programs by the
load-compute-store simulator with per-wave hot spots. Prints a table and writes
``benchmarks/results/t10_vs_vgm.{md,json,png}``.

    .venv/bin/python benchmarks/t10_vs_vgm.py [--models bert-large,vit-b16,resnet18,nerf] [--max-batch 64] [--append]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from runtime_sim.contract.errors import IccaError  # noqa: E402
from runtime_sim.contract.hardware import preset  # noqa: E402
from runtime_sim.timing.vgm_timing import simulate_vgm_timing  # noqa: E402
from tvm_icca.drivers.timing_only import compile_programs  # noqa: E402
from tvm_icca.planning.plan_cache import PlanCache  # noqa: E402
from tvm_icca.workloads import get_workload  # noqa: E402
from result_files import write_json, write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
# Sequence lengths as in T10's evaluation setting for the encoders (BERT: 128 tokens).
WORKLOAD_ARGS = {"bert-large": {"seq_len": 128}, "vit-b16": {}, "resnet18": {}, "nerf": {}}


def run_model(name: str, max_batch: int) -> list[dict]:
    hw = preset("ipu-mk2")
    rows = []
    cache = PlanCache()
    batch = 1
    while batch <= max_batch:
        workload = get_workload(name, batch=batch, **WORKLOAD_ARGS[name])
        row = {"model": name, "batch": batch}
        start = time.perf_counter()
        try:
            t10 = compile_programs(workload, hw, state="chip", plan_cache=cache)
            report = t10.simulate()
        except IccaError as err:
            row["t10_error"] = str(err).splitlines()[0][:160]
            rows.append(row)
            print(f"{name:<11} batch {batch:>4}: T10 does not fit ({row['t10_error'][:80]}...)")
            break
        row["t10_compile_s"] = time.perf_counter() - start
        row.update(t10_total_s=report.total_s, t10_compute_s=report.compute_s,
                   t10_transfer_s=report.transfer_s)
        start = time.perf_counter()
        try:
            vgm_programs = compile_programs(workload, hw, state="chip", execution="vgm")
            vgm = simulate_vgm_timing(vgm_programs.programs, hw)
            row.update(vgm_total_s=vgm.total_s, vgm_compute_s=vgm.compute_s,
                       vgm_transfer_s=vgm.transfer_s, vgm_fits=vgm.fits,
                       vgm_compile_s=time.perf_counter() - start)
        except IccaError as err:
            row.update(vgm_fits=False, vgm_error=str(err).splitlines()[0][:160])
        rows.append(row)
        speedup = row["vgm_total_s"] / row["t10_total_s"] if "vgm_total_s" in row else float("nan")
        print(f"{name:<11} batch {batch:>4}: T10 {row['t10_total_s'] * 1e3:9.3f} ms "
              f"(transfer {100 * row['t10_transfer_s'] / row['t10_total_s']:4.1f}%)  "
              f"VGM {row.get('vgm_total_s', float('nan')) * 1e3:9.3f} ms "
              f"(transfer {100 * row.get('vgm_transfer_s', float('nan')) / row.get('vgm_total_s', 1):4.1f}%, "
              f"fits {row['vgm_fits']})  speed-up {speedup:5.2f}x  "
              f"compile {row['t10_compile_s']:.0f} s", flush=True)
        batch *= 2
    return rows


def summarize(rows: list[dict]) -> str:
    lines = ["| model | batch | T10 (ms) | T10 transfer | VGM (ms) | VGM transfer | VGM fits | speed-up | T10 compile (s) |",
             "|---|---:|---:|---:|---:|---:|:-:|---:|---:|"]
    for r in rows:
        if "t10_total_s" not in r:
            lines.append(f"| {r['model']} | {r['batch']} | does not fit | | | | | | |")
            continue
        vgm = r.get("vgm_total_s")
        both = vgm is not None and r.get("vgm_fits")
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['t10_total_s'] * 1e3:.3f} | "
            f"{100 * r['t10_transfer_s'] / r['t10_total_s']:.0f}% | "
            + (f"{vgm * 1e3:.3f} | {100 * r['vgm_transfer_s'] / vgm:.0f}% | " if vgm else "- | - | ")
            + f"{'yes' if r.get('vgm_fits') else 'no'} | "
            + (f"{vgm / r['t10_total_s']:.2f}x" if both else "-")
            + f" | {r['t10_compile_s']:.0f} |")
    both = [r for r in rows if r.get("vgm_fits") and "t10_total_s" in r]
    if both:
        speedups = [r["vgm_total_s"] / r["t10_total_s"] for r in both]
        mean = sum(speedups) / len(speedups)
        t10_share = [r["t10_transfer_s"] / r["t10_total_s"] for r in both]
        vgm_share = [r["vgm_transfer_s"] / r["vgm_total_s"] for r in both]
        lines.append("")
        lines.append(f"Average speed-up where both fit: {mean:.2f}x (max {max(speedups):.2f}x) over "
                     f"{len(both)} configurations; transfer share T10 {100 * min(t10_share):.0f}-"
                     f"{100 * max(t10_share):.0f}%, VGM {100 * min(vgm_share):.0f}-{100 * max(vgm_share):.0f}%.")
    for model in dict.fromkeys(r["model"] for r in rows):
        t10_max = max((r["batch"] for r in rows if r["model"] == model and "t10_total_s" in r), default=0)
        vgm_max = max((r["batch"] for r in rows if r["model"] == model and r.get("vgm_fits")), default=0)
        lines.append(f"- {model}: largest batch that fits: T10 {t10_max}, VGM {vgm_max}")
    return "\n".join(lines)


def plot(rows: list[dict]) -> None:
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(4 * len(models), 3.6), squeeze=False)
    axes = axes[0]
    for axis, model in zip(axes, models):
        mine = [r for r in rows if r["model"] == model and "t10_total_s" in r]
        batches = [r["batch"] for r in mine]
        axis.plot(batches, [r["t10_total_s"] * 1e3 for r in mine], "o-", label="T10 (compute-shift)")
        fit = [r for r in mine if r.get("vgm_fits")]
        axis.plot([r["batch"] for r in fit], [r["vgm_total_s"] * 1e3 for r in fit], "s--", label="VGM")
        over = [r for r in mine if "vgm_total_s" in r and not r.get("vgm_fits")]
        axis.plot([r["batch"] for r in over], [r["vgm_total_s"] * 1e3 for r in over], "x", color="C1",
                  label="VGM (does not fit)")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_title(model)
        axis.set_xlabel("batch size")
    axes[0].set_ylabel("simulated latency (ms)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "t10_vs_vgm.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-large,vit-b16,resnet18,nerf")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--append", action="store_true",
                        help="keep the saved rows of other models (re-run some models only)")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    saved = OUT / "t10_vs_vgm.json"
    if args.append and saved.exists():
        rows = [r for r in json.loads(saved.read_text()) if r["model"] not in args.models.split(",")]
    for name in args.models.split(","):
        start = time.perf_counter()
        rows.extend(run_model(name, args.max_batch))
        print(f"{name}: {time.perf_counter() - start:.0f} s for all batch sizes", flush=True)
    write_json(OUT / "t10_vs_vgm.json", rows)
    table = summarize(rows)
    write_markdown(OUT / "t10_vs_vgm.md", table)
    plot(rows)
    print(table)


if __name__ == "__main__":
    main()
