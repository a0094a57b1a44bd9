"""ICCA designs beside the GPUs they must beat: time and energy per token, Pareto fronts.

Runs the study ``benchmarks/dse/architect_review.toml`` (resuming: points already in its
results file are not computed again) -- the IPU-POD4 with Elk's HBM at 8 and 16 TB/s and a
two-chip system, under Elk's Static and Elk-Full designs (Elk §6.1), and A100, H100 and B200
priced by the GPU roofline -- then writes its ``tvm-icca dse report`` (tables, plots, Pareto
fronts) to ``benchmarks/dse/results/architect_review/`` and, to
``benchmarks/results/``, ``architect_review.md`` (one table per workload, its Pareto front
named, the fastest ICCA design against the fastest GPU) and the two Pareto plots.

Every time and energy is an estimate: the ICCA rows from the timing simulator and the cited or
assumed per-action energies, the GPU rows from peak rates (their bound, ``roofline_s``, beside).

    .venv/bin/python benchmarks/architect_review.py [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
from typing import Any

from tvm_icca.dse import read_chips, read_rows, run, write_report
from tvm_icca.dse.columns import derived_rows
from tvm_icca.dse.gpu_points import GPU_DESIGN
from tvm_icca.dse.report_plots import per_item
from result_files import command_line, write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent
SPEC = ROOT / "benchmarks" / "dse" / "architect_review.toml"
RESULTS = ROOT / "benchmarks" / "dse" / "results" / "architect_review.jsonl"
REPORT = ROOT / "benchmarks" / "dse" / "results" / "architect_review"
OUT = ROOT / "benchmarks" / "results"
PLOTS = ("pareto_energy.png", "pareto_sram.png")


def system(row: dict[str, Any]) -> str:
    """The row's system in words: a GPU's name, or the chip with what the study changed."""
    if row.get("design") == GPU_DESIGN:
        return f"{row['hardware']} (GPU estimate)"
    return f"{row['num_chips']}-chip IPU, {row['hbm_bandwidth'] / 1e12:g} TB/s HBM"


def _ratio(gpu: float, icca: float, better: str, worse: str) -> str:
    """``2.51x faster`` when the ICCA design's value is the smaller, else ``1.27x slower``."""
    return f"{gpu / icca:.2f}x {better}" if icca <= gpu else f"{icca / gpu:.2f}x {worse}"


def heading(instance: str) -> str:
    """``llama2-13b (batch 32, context 2048)`` from a workload instance's JSON key."""
    args = json.loads(instance)
    name = args.pop("workload")
    return f"{name} ({', '.join(f'{k} {v}' for k, v in args.items())})"


def workload_table(rows: list[dict[str, Any]]) -> list[str]:
    """One workload instance's table, fastest first, and its comparison line."""
    ok = sorted((r for r in rows if r.get("status") == "ok"), key=lambda r: r["time_per_token_s"])
    per = per_item(ok)
    lines = [f"| system | design | ms per {per} | mJ per {per} | average W | board W | bound | "
             "Pareto (energy) |", "|---|---|---:|---:|---:|---:|---|---|"]
    for r in ok:
        energy = r.get("energy_per_token_j")
        bound = (f"roofline {r['roofline_s'] / r['tokens_per_run'] * 1e3:.3f} ms/token"
                 if r.get("design") == GPU_DESIGN else r.get("run_bound_by", ""))
        lines.append(
            f"| {system(r)} | {r['design']} | {r['time_per_token_s'] * 1e3:.3f} | "
            f"{'' if energy is None else f'{energy * 1e3:.2f}'} | "
            f"{r.get('average_power_w') or 0:.0f} | {r.get('board_power_w') or 0:.0f} | {bound} | "
            f"{'**yes**' if r.get('pareto') else ''} |")
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"| {system(r)} | {r['design']} | {r['status']}: "
                         f"{str(r.get('reason', ''))[:80]} | | | | | |")
    icca = [r for r in ok if r.get("design") != GPU_DESIGN]
    gpus = [r for r in ok if r.get("design") == GPU_DESIGN]
    if icca and gpus:
        a, g = icca[0], gpus[0]
        lines += ["", f"The fastest ICCA design ({system(a)}, {a['design']}) against the "
                  f"fastest GPU estimate ({g['hardware']}): "
                  + _ratio(g["time_per_token_s"], a["time_per_token_s"], "faster", "slower")
                  + (", " + _ratio(g["energy_per_token_j"], a["energy_per_token_j"],
                                   "less energy", "more energy")
                     if a.get("energy_per_token_j") and g.get("energy_per_token_j") else "")
                  + f" per {per}."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--plan-cache", default=str(ROOT / "benchmarks" / "dse" / ".plan_cache"))
    args = parser.parse_args()
    run(str(SPEC), jobs=args.jobs, plan_cache=args.plan_cache)
    written = write_report(RESULTS, REPORT, formats=("md", "csv"), command=command_line())
    rows = derived_rows(read_rows(RESULTS), read_chips(RESULTS))
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_workload.setdefault(r["workload_instance"], []).append(r)
    lines = [
        "Time and energy per token of ICCA designs and GPUs on the same workloads "
        "(`benchmarks/dse/architect_review.toml`). ICCA rows: the timing simulator with the "
        "preset's per-action energies (cited or marked assumed, see the energy model page); "
        "GPU rows: the roofline estimate from peak rates and its bound (see the GPU reference "
        "page), never measurements. **yes** marks the Pareto front of time against energy per "
        "token within a workload.", ""]
    for instance, here in by_workload.items():
        lines += [f"## {heading(instance)}", "", *workload_table(here), ""]
    lines += ["Plots: time per token against energy per token "
              "([architect_review_pareto_energy.png](architect_review_pareto_energy.png)) and "
              "against the system's on-chip SRAM (GPU: its L2) "
              "([architect_review_pareto_sram.png](architect_review_pareto_sram.png)).", "",
              "The full report (every column, CSV): `benchmarks/dse/results/architect_review/`."]
    write_markdown(OUT / "architect_review.md", "\n".join(lines))
    for name in PLOTS:
        source = REPORT / name
        if source.exists():
            shutil.copyfile(source, OUT / f"architect_review_{name}")
    print("\n".join(lines))
    print(f"written {len(written)} report files and benchmarks/results/architect_review.md")


if __name__ == "__main__":
    main()
