"""T10 compute-shift plans vs the virtual-global-memory baseline on one IPU Mk2 (T10 §6.2).

For BERT-large, ViT-Base/16, ResNet-18 and NeRF from the workload zoo, at batch sizes
1, 2, 4, ... until the T10 plan no longer fits one IPU Mk2 (the model on chip, T10 §4.3.2),
both execution models are compiled from the same Relax module
(``compile_programs(..., execution="t10" | "vgm", state="chip")``) and timed on the
simulated device: T10 programs by the event-driven timing simulator, VGM programs by the
load-compute-store simulator with per-wave hot spots. Prints a table and writes
``benchmarks/results/t10_vs_vgm.{md,json,png}``.

    .venv/bin/python benchmarks/t10_vs_vgm.py [--models bert-large,vit-b16,resnet18,nerf] [--max-batch 64] [--append]
        [--ablation-models resnet18,nerf,bert-large] [--ablation-max-batch 4]

The VGM is the strongest an expert user of Roller or Ansor would run on an IPU
(:mod:`tvm_icca.plan_search.vgm`): aligned tiles searched exhaustively on the estimate, tiles kept
in a core while they are reused, and the exchange's multicast of a box several cores read.
The ablation re-plans and re-times the VGM of a subset of configurations (the models and
batches given, where the VGM fits) with each of these switched off, and all of them off
(the VGM of this benchmark before issue 38).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from runtime_sim.contract.errors import IccaError  # noqa: E402
from runtime_sim.contract.presets import preset  # noqa: E402
from runtime_sim.contract.plan import VgmPlan  # noqa: E402
from runtime_sim.timing.vgm_timing import simulate_vgm_timing  # noqa: E402
from tvm_icca.partition.partitioner import partition_for_icca  # noqa: E402
from tvm_icca.model_pass.calls import on_chip_reservation  # noqa: E402
from tvm_icca.plan_search.vgm import plan_vgm_operator  # noqa: E402
from tvm_icca.drivers.device_programs import compile_programs  # noqa: E402
from tvm_icca.model_pass.plan_cache import PlanCache  # noqa: E402
from tvm_icca.workloads import get_workload  # noqa: E402
from result_files import write_json, write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
# Sequence lengths as in T10's evaluation setting for the encoders (BERT: 128 tokens).
WORKLOAD_ARGS = {"bert-large": {"seq_len": 128}, "vit-b16": {}, "resnet18": {}, "nerf": {}}
# T10 §6.2 on a real IPU Mk2 against Roller and Ansor (Fig. 12, Fig. 13).
PAPER = {"mean": 1.69, "max": 3.3, "vgm_transfer": (0.50, 0.74), "t10_transfer": (0.08, 0.43)}
# The VGM variants of the ablation: (plan search, reuse, multicast).
VARIANTS = {
    "full": ("exhaustive", True, True),
    "no reuse": ("exhaustive", False, True),
    "greedy search": ("greedy", True, True),
    "no multicast": ("exhaustive", True, False),
    "all off (before)": ("greedy", False, False),
}


def vgm_variants(workload, vgm_programs, hw) -> dict[str, float]:
    """The VGM time of every :data:`VARIANTS` entry: each operator re-planned with the same
    VGM region as the compiler's (:func:`on_chip_reservation`, weights and largest live
    activations) and the whole model re-timed."""
    resident = [p.name for p in workload.params if p.kind != "input"]
    region = on_chip_reservation(partition_for_icca(workload.mod, hw=hw), resident, hw.num_cores,
                                 include_state=True)
    out = {}
    for label, (search, reuse, multicast) in VARIANTS.items():
        programs = []
        for program in vgm_programs.programs:
            ops = tuple(dataclasses.replace(op, plan=plan_vgm_operator(
                op.expr, hw, region, search=search, reuse=reuse).plan) for op in program.ops)
            programs.append(dataclasses.replace(program, ops=ops))
        out[label] = simulate_vgm_timing(programs, hw, multicast=multicast).total_s
    return out


def run_model(name: str, max_batch: int, ablation_batch: int = 0) -> list[dict]:
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
                       vgm_transfer_s=vgm.transfer_s, vgm_stall_s=vgm.stall_s, vgm_fits=vgm.fits,
                       vgm_compile_s=time.perf_counter() - start)
            if vgm.fits and batch <= ablation_batch:
                row["vgm_variants_s"] = vgm_variants(workload, vgm_programs, hw)
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
    lines += ablation(rows) + explanation(both)
    return "\n".join(lines)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def ablation(rows: list[dict]) -> list[str]:
    """What each VGM improvement is worth: T10's speed-up over each variant (:data:`VARIANTS`)."""
    rows = [r for r in rows if "vgm_variants_s" in r and "t10_total_s" in r]
    if not rows:
        return []
    lines = ["", "## Ablation: T10's speed-up over the VGM with one improvement switched off", "",
             f"Over the {len(rows)} configurations re-planned here ("
             + ", ".join(f"{m} b{min(r['batch'] for r in rows if r['model'] == m)}-"
                         f"{max(r['batch'] for r in rows if r['model'] == m)}"
                         for m in dict.fromkeys(r["model"] for r in rows))
             + "; a subset, to keep the run short: `--ablation-models`, `--ablation-max-batch`). "
             "Each variant re-plans every operator with the compiler's VGM region and re-times the model.",
             "", "| VGM variant | mean speed-up | max | VGM time vs full |", "|---|---:|---:|---:|"]
    for label in VARIANTS:
        speedups = [r["vgm_variants_s"][label] / r["t10_total_s"] for r in rows]
        slower = _mean(r["vgm_variants_s"][label] / r["vgm_variants_s"]["full"] for r in rows)
        lines.append(f"| {label} | {_mean(speedups):.2f}x | {max(speedups):.2f}x | {slower:.2f}x |")
    drift = max(abs(r["vgm_variants_s"]["full"] / r["vgm_total_s"] - 1) for r in rows)
    lines += ["", f"(The re-planned full VGM is within {100 * drift:.1f}% of the compiled one in the main table.)"]
    return lines


def explanation(both: list[dict]) -> list[str]:
    """The measured differences from T10 §6.2 (the docs page 'Reproducing T10 and Elk' links it)."""
    if not both:
        return []
    speedups = [r["vgm_total_s"] / r["t10_total_s"] for r in both]
    vgm_share = [r["vgm_transfer_s"] / r["vgm_total_s"] for r in both]
    t10_share = [r["t10_transfer_s"] / r["t10_total_s"] for r in both]
    compute_ratio = _mean(r["vgm_compute_s"] / r["t10_compute_s"] for r in both)
    transfer_ratio = _mean(r["vgm_transfer_s"] / r["t10_transfer_s"] for r in both)
    stall = _mean(r.get("vgm_stall_s", 0.0) / r["vgm_transfer_s"] for r in both)
    low = min(both, key=lambda r: r["vgm_transfer_s"] / r["vgm_total_s"])
    lo, hi = PAPER["mean"] * 0.75, PAPER["mean"] * 1.25
    mean = _mean(speedups)
    verdict = ("within" if lo <= mean <= hi else "outside")
    lines = ["", "## Against T10 §6.2", "",
             "| | T10 paper (real IPU Mk2, vs Roller/Ansor) | ours (simulated IPU Mk2, vs this VGM) |",
             "|---|---:|---:|",
             f"| mean speed-up | {PAPER['mean']:.2f}x | {mean:.2f}x |",
             f"| max speed-up | {PAPER['max']:.1f}x | {max(speedups):.2f}x |",
             f"| VGM transfer share | {100 * PAPER['vgm_transfer'][0]:.0f}-{100 * PAPER['vgm_transfer'][1]:.0f}% "
             f"| {100 * min(vgm_share):.0f}-{100 * max(vgm_share):.0f}% |",
             f"| T10 transfer share | {100 * PAPER['t10_transfer'][0]:.0f}-{100 * PAPER['t10_transfer'][1]:.0f}% "
             f"| {100 * min(t10_share):.0f}-{100 * max(t10_share):.0f}% |", "",
             f"Our mean is {verdict} the issue's band of 1.69x +-25% ({lo:.2f}-{hi:.2f}x). Per model:", ""]
    lines += ["| model | configurations | mean speed-up | VGM compute / T10 compute | VGM transfer / T10 transfer |",
              "|---|---:|---:|---:|---:|"]
    for model in dict.fromkeys(r["model"] for r in both):
        mine = [r for r in both if r["model"] == model]
        lines.append(f"| {model} | {len(mine)} | {_mean(r['vgm_total_s'] / r['t10_total_s'] for r in mine):.2f}x | "
                     f"{_mean(r['vgm_compute_s'] / r['t10_compute_s'] for r in mine):.2f} | "
                     f"{_mean(r['vgm_transfer_s'] / r['t10_transfer_s'] for r in mine):.2f} |")
    lines += [
        "",
        "What the measurements say about the difference:",
        "",
        f"- **Where the VGM loses time.** On average its transfer time is {transfer_ratio:.1f}x T10's and its "
        f"compute time {compute_ratio:.1f}x T10's. Hot spots (home cores serving more than a core fetches) are "
        f"{100 * stall:.1f}% of the VGM's transfer time once shared boxes are multicast: what remains is the "
        "load-compute-store traffic itself, every core fetching the boxes of its tiles from the VGM each time "
        "they are used (T10 §2.2: redundant inter-core communication), and on compute the matrix unit's "
        "padding of small tiles plus one synchronization per load-compute step.",
        "- **Transfer shares.** The paper's VGM spends 50-74% of its time on transfers and T10 8-43% (Fig. 13); "
        f"ours spend {100 * min(vgm_share):.0f}-{100 * max(vgm_share):.0f}% and "
        f"{100 * min(t10_share):.0f}-{100 * max(t10_share):.0f}%. "
        + ("Our T10's transfer share reaches above the paper's, so the gap does not come from a T10 that moves "
           "less than the real one. " if max(t10_share) > PAPER["t10_transfer"][1] else "")
        + (f"Our VGM's share starts below the paper's on {low['model']} (batch {low['batch']}: "
           f"{100 * low['vgm_transfer_s'] / low['vgm_total_s']:.0f}%), whose VGM computes "
           f"{low['vgm_compute_s'] / low['t10_compute_s']:.1f}x as long as T10 (compute time here includes "
           "the matrix unit's padding of small tiles and a synchronization per load-compute step): small "
           "operators whose tiles cannot be large." if min(vgm_share) < PAPER["vgm_transfer"][0] else ""),
        "- **The small batches.** Most of the 20 configurations are batch 1-8, where an operator has fewer "
        "output tiles than the IPU has cores (one wave): a VGM core then fetches a whole row of A and column "
        "of B per tile however the tile is chosen, while T10 keeps the weights in place and shifts the "
        "activations (mean speed-up at batch <= 8: "
        f"{_mean(x for r, x in zip(both, speedups) if r['batch'] <= 8):.2f}x, above: "
        f"{_mean(x for r, x in zip(both, speedups) if r['batch'] > 8):.2f}x).",
        "- **What the simulator does not charge the real Roller/Ansor.** The paper's baselines ran as Poplar "
        "programs on hardware: their compute phases include vertex and exchange-code overheads that the "
        "simulator's op templates do not charge to either side. Since T10 spends a larger share of its time "
        "computing, such a per-step overhead shrinks the ratio on hardware; it is not measured here.",
        "- **The ablation above** shows what each expert choice is worth on the subset it re-plans; none of "
        "them was tuned towards the paper's figure.",
        "- **Choices audited and left as they are.** Loads are not overlapped with compute on either side: the "
        "IPU is bulk-synchronous (a core's exchange and compute phases alternate), and T10's compute-shift "
        "steps are timed the same way. Home slices are not striped further: with multicast the hot spots "
        f"left are the {100 * stall:.1f}% of transfer time above, all that striping could remove. The VGM "
        "region the planner reserves is the model's weights plus the largest live input/output pair, spread "
        "over every core (`on_chip_reservation`), the least a compiler keeping the model on chip can. Not "
        "modelled: splitting a reduction over several cores (Ansor's rfactor) for operators with fewer "
        "output tiles than cores; it would add a cross-core reduction to the load-compute-store model.",
    ]
    return lines


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
    parser.add_argument("--ablation-models", default="resnet18,nerf,bert-large",
                        help="models whose VGM is re-planned with each improvement switched off")
    parser.add_argument("--ablation-max-batch", type=int, default=4,
                        help="largest batch of the ablation (keeps the run short)")
    parser.add_argument("--report-only", action="store_true",
                        help="render the table and plot again from the saved JSON rows (each keeps "
                             "the provenance of the run that measured it)")
    parser.add_argument("--append", action="store_true",
                        help="keep the saved rows of other models (re-run some models only)")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    saved = OUT / "t10_vs_vgm.json"
    if args.report_only:
        rows = [r for r in json.loads(saved.read_text()) if isinstance(r, dict) and "model" in r]
        args.models = ""
    elif args.append and saved.exists():
        rows = [r for r in json.loads(saved.read_text()) if r["model"] not in args.models.split(",")]
    for name in filter(None, args.models.split(",")):
        start = time.perf_counter()
        ablate = args.ablation_max_batch if name in args.ablation_models.split(",") else 0
        rows.extend(run_model(name, args.max_batch, ablate))
        print(f"{name}: {time.perf_counter() - start:.0f} s for all batch sizes", flush=True)
    if not args.report_only:
        write_json(OUT / "t10_vs_vgm.json", rows)
    table = summarize(rows)
    measured = sorted({(r["provenance"]["commit"][:10], r["provenance"]["dirty"])
                       for r in rows if isinstance(r.get("provenance"), dict)})
    if args.report_only and measured:
        table = ("Rows measured by `.venv/bin/python benchmarks/t10_vs_vgm.py` on commit "
                 + ", ".join(f"{c}{' (with uncommitted changes)' if d else ''}" for c, d in measured)
                 + " (each JSON row keeps its provenance); this page re-rendered from them.\n\n" + table)
    write_markdown(OUT / "t10_vs_vgm.md", table)
    plot(rows)
    print(table)


if __name__ == "__main__":
    main()
