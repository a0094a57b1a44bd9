"""Why our Elk results differ from the Elk paper's: the five designs under the Elk artifact's costs.

The Elk paper (MICRO'25, §6.2-§6.3) reports, for LLM decode on 4 IPU Mk2 chips with 16 TB/s of
HBM, Elk-Full 1.87x over Basic, 1.37x over Static and 94.84% of Ideal, with HBM utilizations of
34.7% (Basic) to 64.38% (Ideal): its Ideal leaves a third of the HBM bandwidth idle, so its decode
is not HBM-bound. Ours (``benchmarks/elk_llm.py``) is: every good design sits at the HBM floor,
so the designs' differences shrink. This script measures where that comes from by re-running the
same compiler and timing simulator (:func:`elk_llm.run_case`) under settings that swap one part of
our chip model for the public Elk artifact's (its cost model, ``TensorExpression.py``; its
schedules, ``DNNProgram.py``), as :class:`runtime_sim.contract.hardware.HardwareSpec` overrides:

* ``preset``: ``ipu-pod4-hbm`` as it is. Its peaks already are the Elk emulator's (§6.3: 1000
  TFLOPS for MatMul, 31.2 TFLOPS for other operations): 128 and 4 FLOP/cycle/core, 5,888 cores.
* ``artifact-transfer``: the artifact's shift and synchronization costs (:func:`artifact_link_bandwidth`,
  :func:`artifact_sync_cycles`).
* ``artifact-matmul``: the artifact's fitted time of a decode matmul tile on an IPU core
  (:func:`artifact_decode_matmul_flops_per_cycle`), about a fifth of the peak the preset uses.
* ``artifact-both``: both.
* ``artifact-both-wide``: the transfer costs and the fitted rate of a tile 128 columns wide
  (62.9 FLOP/cycle): the artifact's rate grows with the tile's width, so the two settings
  bracket it.

The designs are not changed between settings (they plan on whatever the chip costs), so what
moves is the workload/hardware model, not a baseline. Writes ``benchmarks/results/elk_paper_gap.md``
and ``.json``::

    .venv/bin/python benchmarks/elk_paper_gap.py                           # Llama2-13B, all layers
    .venv/bin/python benchmarks/elk_paper_gap.py --models gemma2-27b,opt-30b,llama2-70b \\
        --settings preset,artifact-both --append     # the other LLMs, merged into the results
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
from dataclasses import dataclass
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from elk_llm import DESIGNS, run_case  # noqa: E402  (benchmarks/, beside this script)
from result_files import write_json, write_markdown  # noqa: E402
from runtime_sim.contract.presets import preset  # noqa: E402
from tvm_icca.elk.designs import STATIC_STEP_BYTES  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
HW = "ipu-pod4-hbm"
#: The settings that change one part of the chip model (run on ``--ladder-models``).
LADDER = ("artifact-transfer", "artifact-matmul")

# -- the public Elk artifact's cost constants (TensorExpression.py, DNNProgram.py) ------------
#: The artifact converts cycles to time at 1.325 GHz.
ARTIFACT_CLOCK_HZ = 1.325e9
#: Shifting E elements of b bytes costs E * b / 2 * 0.56 cycles: 0.56 cycles per 2 bytes.
ARTIFACT_SHIFT_CYCLES_PER_2_BYTES = 0.56
#: Shift, synchronization and shuffle cycles are multiplied by 1.25 beyond one chip (1,472 cores).
ARTIFACT_INTER_CHIP_FACTOR = 1.25
#: Synchronization cycles per shift step, paid twice per step (double-buffered shifts).
ARTIFACT_SYNC_CYCLES = 118
ARTIFACT_BUFFER_ITERS = 2
#: The fitted time of an AMP matmul tile, per 16 x 16 block of the (k, n) operand: 12 cycles per
#: 6 rows of m per byte of element, plus 514 cycles that do not depend on m (the weight block's
#: own cost), so a decode tile (m = batch = 32 rows) runs far below the unit's peak.
ARTIFACT_MM_CYCLES_PER_6_ROWS_PER_BYTE = 12
ARTIFACT_MM_CYCLES_PER_BLOCK = 514
ARTIFACT_MM_BLOCK = 16
#: Decode batch of the comparison (Elk §6.2-§6.3, Fig. 18): the m of every weight matmul tile.
DECODE_BATCH = 32
#: The matrix unit's m granule under ``artifact-matmul``: a 1-row attention tile (decode
#: attention, m = 1 query) padded to 4 rows runs at 1/4 of the rate, about what the artifact's
#: formula gives a decode attention tile (4-8 FLOP/cycle at KV length 2048, head dim 128);
#: the preset's 16 would charge it 4x the artifact's time.
ARTIFACT_MATRIX_M_GRANULE = 4

#: What the Elk paper reports (Elk §6.2 average over Fig. 17's LLM decodes; §6.3, Fig. 18 at
#: batch 32, context 2048, averaged over the four LLMs).
PAPER = {
    "over_basic": 1.87, "over_static": 1.37, "pct_ideal": 94.84,
    "hbm": {"basic": 34.7, "static": 46.42, "elk-dyn": 51.97, "elk-full": 62.40, "ideal": 64.38},
    "noc": {"basic": 57.25, "static": 76.33, "elk-dyn": 78.28, "elk-full": 89.52},
    "tflops": 81.06,
}


def artifact_link_bandwidth() -> float:
    """Bytes per second a core shifts under the artifact's shift cost, with its inter-chip factor
    (0.56 cycles per 2 bytes at 1.325 GHz, divided by 1.25 on 4 chips): 3.79 GB/s."""
    return 2.0 / ARTIFACT_SHIFT_CYCLES_PER_2_BYTES * ARTIFACT_CLOCK_HZ / ARTIFACT_INTER_CHIP_FACTOR


def artifact_sync_cycles() -> int:
    """Cycles of synchronization per shift step in the artifact on 4 chips: 118 x 2 x 1.25 = 295."""
    return round(ARTIFACT_SYNC_CYCLES * ARTIFACT_BUFFER_ITERS * ARTIFACT_INTER_CHIP_FACTOR)


def artifact_decode_matmul_flops_per_cycle(batch: int = DECODE_BATCH, columns: int = 16,
                                           elem_bytes: int = 2) -> float:
    """FLOP per cycle per core of a decode matmul tile under the artifact's fitted cost: ``batch``
    rows times a weight tile ``columns`` wide, per 16 rows of k. The formula takes the longer of
    the two output sides as its m (12 cycles per byte of element per 6 of it) and the other as
    its n, in 16-wide blocks that each cost 514 more cycles: 24.9 for a tile up to 32 columns wide
    at batch 32 (fp16), 62.9 at 128 columns, toward the peak of 128 as the tile widens.
    (The formula's per-tile constants, 113 cycles per n block and 173 per tile, are left out.)"""
    m, n = (columns, batch) if columns > batch else (batch, columns)
    if m <= ARTIFACT_MM_BLOCK:
        m, n = n, m
    n_blocks = math.ceil(n / ARTIFACT_MM_BLOCK)
    cycles = (ARTIFACT_MM_CYCLES_PER_6_ROWS_PER_BYTE * elem_bytes * math.ceil(m / 6) * n_blocks
              + ARTIFACT_MM_CYCLES_PER_BLOCK * n_blocks)
    return 2.0 * batch * ARTIFACT_MM_BLOCK * columns / cycles


#: A wide decode weight tile: 128 output columns per core (the rate the artifact's formula gives
#: a plan that keeps wide tiles; its planner's choice per operator is not reproduced here).
WIDE_COLUMNS = 128


@dataclass(frozen=True)
class Setting:
    """One chip model: its name, the HardwareSpec overrides and what they stand for."""

    name: str
    overrides: dict[str, Any]
    what: str


def settings() -> dict[str, Setting]:
    """The settings compared, by name (see the module docstring)."""
    transfer = {"link_bandwidth": artifact_link_bandwidth(), "sync_cycles": artifact_sync_cycles()}
    matmul = {"matrix_flops_per_cycle": round(artifact_decode_matmul_flops_per_cycle(), 2),
              "matrix_tile": (ARTIFACT_MATRIX_M_GRANULE, ARTIFACT_MM_BLOCK, ARTIFACT_MM_BLOCK)}
    wide = {**matmul, "matrix_flops_per_cycle":
            round(artifact_decode_matmul_flops_per_cycle(columns=WIDE_COLUMNS), 2)}
    return {s.name: s for s in (
        Setting("preset", {}, f"{HW} as it is"),
        Setting("artifact-transfer", transfer,
                "the artifact's shift (0.56 cycles / 2 B at 1.325 GHz, x1.25 across chips) and "
                "sync (118 cycles x 2 buffers x 1.25) costs"),
        Setting("artifact-matmul", matmul,
                "the artifact's fitted decode matmul tile up to 32 columns wide: 658 cycles per "
                "16x16 weight block at 32 rows (24.9 FLOP/cycle, 19% of peak); m granule 4"),
        Setting("artifact-both", {**transfer, **matmul}, "artifact-transfer and artifact-matmul"),
        Setting("artifact-both-wide", {**transfer, **wide},
                f"artifact-transfer and the fitted tile {WIDE_COLUMNS} columns wide "
                f"({artifact_decode_matmul_flops_per_cycle(columns=WIDE_COLUMNS):.1f} FLOP/cycle): "
                "the other end of the artifact's decode matmul rates"),
    )}


def _fmt_overrides(ov: dict[str, Any]) -> str:
    if not ov:
        return "none"
    out = []
    for k, v in ov.items():
        if k == "link_bandwidth":
            out.append(f"link {v / 1e9:.2f} GB/s")
        elif k == "matrix_tile":
            out.append(f"matrix tile {tuple(v)}")
        elif k == "matrix_flops_per_cycle":
            out.append(f"matrix {v:g} FLOP/cycle")
        else:
            out.append(f"{k.replace('_', ' ')} {v:g}")
    return ", ".join(out)


def case_summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per case: the ratios of Elk §6.2, utilizations and what bounds Ideal (``None`` if some
    design did not fit). ``ideal_exec_over_hbm``: Ideal's execution time (execute only plus
    overlapped) over the HBM floor; above 1, Ideal is bound by execution, not by HBM."""
    by = {r["design"]: r for r in rows}
    if any(by.get(d, {}).get("total_ms") is None for d in DESIGNS):
        return None
    t = {d: by[d]["total_ms"] for d in DESIGNS}
    ideal = by["ideal"]
    return {
        "over_basic": t["basic"] / t["elk-full"],
        "over_static": t["static"] / t["elk-full"],
        "pct_ideal": 100.0 * t["ideal"] / t["elk-full"],
        "hbm": {d: 100.0 * by[d].get("hbm_utilization", math.nan) for d in DESIGNS},
        "noc": {d: 100.0 * by[d].get("interconnect_utilization", math.nan) for d in DESIGNS},
        "tflops": by["elk-full"].get("achieved_flops", math.nan) / 1e12,
        "ideal_exec_over_hbm": (ideal["execute_only_s"] + ideal["preload_overlap_s"]) * 1e3
        / ideal["hbm_floor_ms"],
        "ideal_over_hbm_floor": t["ideal"] / ideal["hbm_floor_ms"],
        "ms": t,
    }


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def summary_table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """One row per setting (averaged over the models run), the paper's row last."""
    lines = ["| setting | models | Elk-Full over Basic | over Static | % of Ideal | HBM util Basic / "
             "Static / Dyn / Full / Ideal | NoC util Basic / Static / Dyn / Full | Elk-Full TFLOPS "
             "| Ideal exec / HBM floor | Ideal / HBM floor |",
             "|---|---:|---:|---:|---:|---|---|---:|---:|---:|"]
    for name, by_model in results.items():
        a = _averages(by_model)
        if a is None:
            lines.append(f"| {name} | {len(by_model)} | does not fit | | | | | | | |")
            continue
        n = sum(case_summary(rows) is not None for rows in by_model.values())
        hbm = " / ".join(f"{a['hbm'][d]:.1f}" for d in DESIGNS)
        noc = " / ".join(f"{a['noc'][d]:.1f}" for d in DESIGNS[:-1])
        lines.append(f"| {name} | {n} | {a['over_basic']:.2f}x | {a['over_static']:.2f}x "
                     f"| {a['pct_ideal']:.1f}% | {hbm} | {noc} | {a['tflops']:.1f} | "
                     f"{a['ideal_exec_over_hbm']:.2f} | {a['ideal_over_hbm_floor']:.2f} |")
    p = PAPER
    hbm = " / ".join(f"{p['hbm'][d]:g}" for d in DESIGNS)
    noc = " / ".join(f"{p['noc'][d]:g}" for d in DESIGNS[:-1])
    lines.append(f"| **Elk paper** | 4 | {p['over_basic']:.2f}x | {p['over_static']:.2f}x | "
                 f"{p['pct_ideal']:.2f}% | {hbm} | {noc} | {p['tflops']:g} | "
                 f"| {100 / p['hbm']['ideal']:.2f} |")
    return lines


def detail_table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """Per setting and model: every design's ms per decode step."""
    lines = ["| setting | model | layers | " + " | ".join(f"{d} ms" for d in DESIGNS) +
             " | HBM floor ms | compute floor ms | over Basic | over Static | % of Ideal |",
             "|---|---|---|" + "---:|" * (len(DESIGNS) + 5)]
    for name, by_model in results.items():
        for model, rows in by_model.items():
            by = {r["design"]: r for r in rows}
            ms = " | ".join("does not fit" if by.get(d, {}).get("total_ms") is None
                            else f"{by[d]['total_ms']:.3f}" for d in DESIGNS)
            c = case_summary(rows)
            any_row = next((r for r in rows if r.get("total_ms") is not None), rows[0])
            tail = (f"{c['over_basic']:.2f}x | {c['over_static']:.2f}x | {c['pct_ideal']:.1f}%" if c
                    else " | | ")
            lines.append(f"| {name} | {model} | {any_row['layers']} | {ms} | "
                         f"{any_row.get('hbm_floor_ms', math.nan):.3f} | "
                         f"{any_row.get('compute_floor_ms', math.nan):.3f} | {tail} |")
    return lines


def _averages(by_model: dict[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """The setting's :func:`case_summary` averaged over its models (None if none fits)."""
    cases = [c for c in (case_summary(rows) for rows in by_model.values()) if c]
    if not cases:
        return None
    out: dict[str, Any] = {k: _mean([c[k] for c in cases]) for k in
                           ("over_basic", "over_static", "pct_ideal", "tflops",
                            "ideal_exec_over_hbm", "ideal_over_hbm_floor")}
    for k in ("hbm", "noc"):
        out[k] = {d: _mean([c[k][d] for c in cases]) for d in DESIGNS}
    return out


def _headline(name: str, a: dict[str, Any] | None) -> str:
    if a is None:
        return f"`{name}`: not run"
    return (f"`{name}`: {a['over_basic']:.2f}x over Basic, {a['over_static']:.2f}x over Static, "
            f"{a['pct_ideal']:.1f}% of Ideal; HBM utilization Basic {a['hbm']['basic']:.1f}%, "
            f"Static {a['hbm']['static']:.1f}%, Elk-Full {a['hbm']['elk-full']:.1f}%, Ideal "
            f"{a['hbm']['ideal']:.1f}%; Ideal's execution {a['ideal_exec_over_hbm']:.2f}x the "
            f"HBM floor")


def explanation(results: dict[str, dict[str, list[dict[str, Any]]]], batch: int = DECODE_BATCH,
                context: int = 2048) -> list[str]:
    """The causes, each with the numbers this run measured (settings not run say so)."""
    common = sorted(set.intersection(*(set(by) for by in results.values()))) if results else []
    avg = {name: _averages({m: by[m] for m in common}) for name, by in results.items()}
    wide = {name: (len(by), _averages(by)) for name, by in results.items() if len(by) > len(common)}
    hw = preset(HW)
    p = PAPER
    paper = (f"the paper: {p['over_basic']}x, {p['over_static']}x, {p['pct_ideal']}%; HBM "
             f"{p['hbm']['basic']}%, {p['hbm']['static']}%, {p['hbm']['elk-full']}%, "
             f"{p['hbm']['ideal']}%; Ideal at {100 / p['hbm']['ideal']:.2f}x the HBM floor")
    return [
        "## What the measurements say",
        "",
        "Same compiler, same designs, same timing simulator; only the chip model changes. "
        f"Numbers below are on {', '.join(common) or 'no model'} (the models every setting ran)"
        + "".join(f"; {_headline(name, a)} over its {n} models" for name, (n, a) in wide.items())
        + ".",
        "",
        "1. **Basic, Static and Ideal follow Elk §6.1** (`tvm_icca/elk/designs.py`). Basic: the "
        "fastest execute plan that fits, only the next loading operator preloaded beside it. "
        "Static: one execution/preload split for the whole model, the best of a sweep every "
        f"{STATIC_STEP_BYTES // 1024} KiB of SRAM (the artifact's step), each operator at its "
        "fastest plan in the execution space, preloads in order while they fit, all MaxPreload or "
        "all MinPreload, whichever is faster. Ideal: its own interconnect for preloads, zero "
        "distribution time, every operator at its smallest preload space, and a second whole SRAM "
        "for preloads: more than the artifact gives its Ideal (the one SRAM less the operator's "
        "smallest execution space, at most one layer ahead), so our Ideal is the stronger bound "
        "and cannot be what lifts Elk-Full's share of it.",
        f"2. **The peaks are the same.** `{HW}` has {hw.peak_flops('matrix') / 1e12:.0f} TFLOPS of "
        f"matrix and {hw.peak_flops('vector') / 1e12:.1f} TFLOPS of vector work, the Elk emulator's "
        "1000 and 31.2 (§6.3).",
        "3. **What differs is the time of a decode matmul tile.** Our cores run a matmul tile at "
        "the matrix unit's peak once padded to the unit's shape; a decode weight tile has "
        f"{DECODE_BATCH} rows (the batch), so it runs at peak and executing the weights takes less "
        "time than loading them: the decode is HBM-bound. The artifact's cost model, fitted to an "
        f"IPU (§4.3, Fig. 12), charges {ARTIFACT_MM_CYCLES_PER_BLOCK} cycles per 16x16 block of "
        "the weight whatever the rows: "
        f"{artifact_decode_matmul_flops_per_cycle():.1f} FLOP/cycle at {DECODE_BATCH} rows, "
        f"{artifact_decode_matmul_flops_per_cycle() / hw.matrix_flops_per_cycle:.0%} of peak, "
        "for a weight tile up to 32 columns wide; a wider tile amortizes the blocks better "
        f"({artifact_decode_matmul_flops_per_cycle(columns=WIDE_COLUMNS):.1f} at "
        f"{WIDE_COLUMNS} columns), so the artifact's rate depends on the plans its search keeps, "
        "which are not reproduced here: `artifact-both` and `artifact-both-wide` bracket it. "
        "Elk §6.3 says as much: its decode is limited by on-chip execution and transfer, not HBM. "
        f"Measured: {_headline('preset', avg.get('preset'))}; "
        f"{_headline('artifact-matmul', avg.get('artifact-matmul'))}; {paper}.",
        "4. **The artifact's transfer costs add contention.** Its shifts "
        f"({artifact_link_bandwidth() / 1e9:.2f} GB/s per core across chips) and synchronizations "
        f"({artifact_sync_cycles()} cycles per shift step) are slower than the preset's "
        f"({hw.link_bandwidth / 1e9:g} GB/s, {hw.sync_cycles} cycles). Measured: "
        f"{_headline('artifact-transfer', avg.get('artifact-transfer'))}; "
        f"{_headline('artifact-both', avg.get('artifact-both'))}; "
        f"{_headline('artifact-both-wide', avg.get('artifact-both-wide'))}.",
        "5. **Interconnect utilization is defined differently.** Ours is bytes over link bandwidth "
        "(the time links move data); the artifact's (Fig. 18(c)) adds each operator's whole "
        "shift, synchronization and shuffle time to the preload delivery time, so "
        "synchronization counts as interconnect-busy. The two are not comparable figure for "
        "figure.",
        "6. **The paper's averages cover more cases.** Its 1.87x, 1.37x and 94.84% (§6.2) average "
        f"Fig. 17: batch 16/32/64 and context 2,048/4,096; these rows are batch {batch}, "
        f"context {context:,} (Fig. 18's case is batch 32, context 2,048).",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama2-13b",
                        help="models of the preset and artifact-both settings")
    parser.add_argument("--ladder-models", default=None,
                        help="models of the one-change settings (artifact-transfer, "
                        "artifact-matmul); default: --models")
    parser.add_argument("--settings", default=",".join(settings()),
                        help=f"comma-separated, of {', '.join(settings())}")
    parser.add_argument("--batch", type=int, default=DECODE_BATCH)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=None, help="first N layers only (default: all)")
    parser.add_argument("--append", action="store_true",
                        help="merge into the results file's earlier rows (a setting and model run "
                        "again replaces its rows) instead of overwriting it")
    args = parser.parse_args(argv)
    table = settings()
    chosen = args.settings.split(",")
    unknown = [s for s in chosen if s not in table]
    if unknown:
        parser.error(f"unknown settings {unknown}; choose from {', '.join(table)}")
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name in chosen:
        s = table[name]
        results[name] = {}
        models = (args.ladder_models or args.models) if name in LADDER else args.models
        for model in models.split(","):
            print(f"{name}: {model}", file=sys.stderr)
            rows = run_case(model, HW, args.batch, args.context, args.layers, s.overrides or None)
            for r in rows:
                r["setting"] = name
                r["overrides"] = {k: list(v) if isinstance(v, tuple) else v
                                  for k, v in s.overrides.items()}
            results[name][model] = rows
    path = RESULTS / "elk_paper_gap.json"
    if args.append and path.exists():
        results = merged(json.loads(path.read_text()), results)
    text = render(results, args.batch, args.context)
    write_markdown(RESULTS / "elk_paper_gap.md", text)
    write_json(path, {n: [r for rows in by.values() for r in rows] for n, by in results.items()})
    print(text)
    return 0


def merged(old: dict[str, list[dict[str, Any]]],
           new: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """An earlier run's rows (its JSON: setting -> rows) with ``new``'s cases added; a (setting,
    model) run again replaces its rows. Settings keep :func:`settings`' order."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name, rows in old.items():
        for r in rows:
            out.setdefault(name, {}).setdefault(r["model"], []).append(r)
    for name, by_model in new.items():
        out.setdefault(name, {}).update(by_model)
    order = list(settings())
    return {n: out[n] for n in sorted(out, key=lambda n: order.index(n) if n in order else len(order))}


def render(results: dict[str, dict[str, list[dict[str, Any]]]], batch: int, context: int) -> str:
    """The markdown of a run (:func:`summary_table`, :func:`detail_table`, :func:`explanation`)."""
    base = preset(HW)
    table = settings()
    lines = [
        "Elk's designs under the Elk artifact's cost constants (`benchmarks/elk_paper_gap.py`): "
        f"decode, batch {batch}, context {context}, {HW} ({base.num_cores} cores, "
        f"{base.peak_flops('matrix') / 1e12:.0f} TFLOPS matrix, {base.peak_flops('vector') / 1e12:.1f} "
        f"TFLOPS vector, {base.hbm_bandwidth / 1e12:g} TB/s HBM).",
        "",
        "| setting | overrides | what it stands for |",
        "|---|---|---|",
        *(f"| {n} | {_fmt_overrides(table[n].overrides)} | {table[n].what} |"
          for n in results if n in table),
        "",
        "## Summary (averaged over the models each setting ran)",
        "",
        *summary_table(results),
        "",
        "TFLOPS is Elk-Full's achieved rate; HBM and NoC utilizations in %. The paper's row: Elk "
        "§6.2 (ratios, averaged over Fig. 17) and §6.3, Fig. 18 (utilizations, TFLOPS); its "
        "Ideal / HBM floor is 1 / 64.38%.",
        "",
        "## Per model",
        "",
        *detail_table(results),
        "",
        *explanation(results, batch, context),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
