"""Elk §6.4 (Fig. 19-24) and the mesh-design study, from the results of their full runs.

Reads the results files the studies of ``benchmarks/dse/`` wrote (``tvm-icca dse SPEC``, see
``docs/dse_elk.md`` for the commands) and writes to ``benchmarks/results/``:

* ``elk_dse.md``: what each study cost here (points, outcomes, the points' own seconds summed,
  the measured wall time), then
  per figure the table behind it and the numbers §6.4's observations (1)-(4) are checked with;
* ``elk_dse_fig19.png`` (decode step time, Elk's per-token latency, vs HBM bandwidth), ``elk_dse_fig20.png`` (Elk-Full's
  time breakdown), ``elk_dse_fig21.png`` (interconnect utilization), ``elk_dse_fig22.png``
  (Llama2-70B, link x HBM bandwidth), ``elk_dse_fig23.png`` (core counts, DiT-XL included),
  ``elk_dse_fig24.png`` (training forward: achieved vs available TFLOPS),
  ``elk_dse_mesh.png`` (controller placement x link bandwidth x torus).

Nothing is computed here but summaries of the rows: every number comes from a results file.

    .venv/bin/python benchmarks/elk_dse.py
    .venv/bin/python benchmarks/elk_dse.py --results-dir benchmarks/dse/results
"""

from __future__ import annotations

import argparse
import datetime
import math
import pathlib
from collections import defaultdict
from typing import Any, Iterable

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402
from tvm_icca.dse.results import read_rows, read_runs  # noqa: E402
from result_files import write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DESIGNS = ("basic", "static", "elk-dyn", "elk-full", "ideal")
LLMS = ("llama2-13b", "gemma2-27b", "opt-30b", "llama2-70b")
STUDIES = ("elk_fig19_21_hbm", "elk_fig22_noc", "elk_fig23_cores", "elk_fig23_dit",
           "elk_fig24_training", "mesh_design")
TOPOLOGIES = ("all-to-all", "mesh")
#: What the published Elk artifact says Fig. 17-24 cost (its README): more than 30 hours on a
#: 64-core machine with 200 GB of memory.
ARTIFACT_COST = "more than 30 hours on 64 cores (Elk artifact, Fig. 17-24)"


def read(path: pathlib.Path) -> list[dict[str, Any]]:
    """The current rows of a results file, as the sweep reads them (a torn last line skipped;
    a row superseded by its point's row on a changed chip left out)."""
    return read_rows(path)


def _ok(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok"]


def _ts(row: dict[str, Any]) -> datetime.datetime:
    return datetime.datetime.fromisoformat(row["timestamp"])


def _point_s(row: dict[str, Any]) -> float:
    """Wall seconds the point took on its worker: ``wall_s``, or (rows older than it) its
    compile and simulation seconds."""
    if row.get("wall_s") is not None:
        return row["wall_s"]
    return row.get("compile_s", 0.0) + row.get("simulate_s", 0.0)


def _spans(rows: list[dict[str, Any]]) -> list[tuple[datetime.datetime, datetime.datetime]]:
    """When each row's point ran: its timestamp (its end) minus its own seconds."""
    return [(_ts(r) - datetime.timedelta(seconds=_point_s(r)), _ts(r))
            for r in rows if r.get("timestamp")]


def _run_spans(runs: list[dict[str, Any]]) -> list[tuple[datetime.datetime, datetime.datetime]]:
    """When each recorded run of a sweep ran: its start (``timestamp``) plus its measured
    ``wall_s`` (:func:`tvm_icca.dse.results.read_runs`)."""
    return [(_ts(r), _ts(r) + datetime.timedelta(seconds=r["wall_s"])) for r in runs
            if r.get("timestamp") and r.get("wall_s") is not None]


def busy_seconds(spans: list[tuple[datetime.datetime, datetime.datetime]]) -> float:
    """Seconds covered by the union of ``spans`` (gaps under 5 s, a row's bookkeeping, bridged)."""
    total, hi = 0.0, None
    for lo, end in sorted(spans):
        if hi is not None and lo <= hi + datetime.timedelta(seconds=5):
            if end > hi:
                total += (end - hi).total_seconds()
                hi = end
        else:
            total += (end - lo).total_seconds()
            hi = end
    return total


def cost_table(studies: dict[str, list[dict[str, Any]]],
               runs: dict[str, list[dict[str, Any]]] | None = None) -> list[str]:
    """What each study cost: the points' own seconds summed, and the measured wall time.

    The wall time is measured, never derived from the points' sum: the runs' own clock where
    the results' provenance file records the runs (``runs``), else the union of the points'
    running intervals from the rows' timestamps (each row's end, minus its own seconds).
    """
    runs = runs or {}
    lines = ["## What each study cost here", "",
             "Point s: the wall seconds each point took on its worker, summed (`wall_s`; for rows "
             "older than it, compile plus simulation seconds): what one worker alone would "
             "spend. CPU s: the worker's CPU seconds, summed, where the rows record them. Wall "
             "time: measured, by the runs' own clock where the results record their runs, and for "
             "points no recorded run covers (a run interrupted before it recorded itself) the "
             "time they were running, from the rows' timestamps. On this 2-core machine, shared with other "
             "work.", "",
             "| study | points | ok | does not fit | failed | point s | CPU s | mean s per point "
             "| wall time | wall time from |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    all_spans: list[tuple[datetime.datetime, datetime.datetime]] = []
    total_points = 0.0
    for name, rows in studies.items():
        if not rows:
            lines.append(f"| `{name}` | 0 | | | | | | | not run | |")
            continue
        points = sum(_point_s(r) for r in rows)
        total_points += points
        cpu = [r["cpu_s"] for r in rows if r.get("cpu_s") is not None]
        run_spans = _run_spans(runs.get(name, []))
        # a run stopped before it recorded itself (interrupted, then resumed) left only rows
        outside = [span for span in _spans(rows)
                   if not any(span[0] < hi and lo < span[1] for lo, hi in run_spans)]
        spans = run_spans + outside
        source = " and ".join(([] if not run_spans else ["runs' clock"])
                              + ([] if not outside else ["rows' timestamps"]))
        all_spans += spans
        wall = busy_seconds(spans)
        counts = [sum(r.get("status") == s for r in rows) for s in ("ok", "does_not_fit", "failed")]
        cpu_text = (f"{sum(cpu):,.0f}" + ("" if len(cpu) == len(rows) else f" ({len(cpu)} rows)")
                    if cpu else "not recorded")
        lines.append(f"| `{name}` | {len(rows)} | {counts[0]} | {counts[1]} | {counts[2]} "
                     f"| {points:,.0f} | {cpu_text} | {points / len(rows):.1f} "
                     f"| {wall / 3600:.2f} h | {source} |")
    lines += ["", f"All studies: {total_points / 3600:.2f} hours of the points' own time, summed; "
              f"measured wall time while any study ran: {busy_seconds(all_spans) / 3600:.2f} h. "
              f"The published artifact: {ARTIFACT_COST}.", ""]
    return lines


def _by(rows: Iterable[dict[str, Any]], *keys: str) -> dict[tuple, dict[str, Any]]:
    return {tuple(r.get(k) for k in keys): r for r in rows}


def _ms(value: float | None) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value * 1e3:.3f}"


def _tb_axis(ax: Any, values: list[float]) -> None:
    """A log2 x axis of HBM bandwidths in TB/s, labelled with the swept values."""
    ax.set_xscale("log", base=2)
    ax.set_xticks([v / 1e12 for v in values], [f"{v / 1e12:g}" for v in values])
    ax.minorticks_off()


def _label(ax: Any, title: str, xlabel: str, ylabel: str) -> None:
    """A panel's title and axis labels, its y axis from 0, a light grid."""
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def _design_grid(at: dict[tuple, dict[str, Any]], hbms: list[float], value: Any, ylabel: str,
                 title: str, path: pathlib.Path, extra: Any = None, log_y: bool = False,
                 designs: tuple[str, ...] = DESIGNS) -> None:
    """One panel per (topology, LLM) of Fig. 19-21: ``value(row)`` against HBM bandwidth, one
    line per design; ``extra(ax, workload, topology)`` adds to a panel."""
    fig = Figure(figsize=(16, 7), layout="constrained")
    axes = fig.subplots(2, 4, squeeze=False)
    for row, topo in enumerate(TOPOLOGIES):
        for col, w in enumerate(LLMS):
            ax = axes[row][col]
            for d in designs:
                pts = [(b / 1e12, value(at[(w, topo, b, d)])) for b in hbms if (w, topo, b, d) in at]
                if pts:
                    ax.plot(*zip(*pts), marker="o", markersize=3, label=d)
            _tb_axis(ax, hbms)
            if log_y:
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(ScalarFormatter())
                ax.yaxis.set_minor_formatter(NullFormatter())
            else:
                ax.set_ylim(bottom=0)
            if extra is not None:
                extra(ax, w, topo)
            ax.set_title(f"{w}, {topo}", fontsize=10)
            ax.set_xlabel("HBM bandwidth (TB/s)")
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3, which="both")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.savefig(path, dpi=100)


def fig19(rows: list[dict[str, Any]], out: pathlib.Path) -> list[str]:
    rows = _ok(rows)
    if not rows:
        return ["## Fig. 19-21: HBM bandwidth", "", "No rows yet.", ""]
    hbms = sorted({r["hbm_bandwidth"] for r in rows})
    at = _by(rows, "workload", "topology", "hbm_bandwidth", "design")
    lines = ["## Fig. 19: decode step time (Elk's per-token latency) vs HBM bandwidth", "",
             "Milliseconds per decode step (batch 32, context 2,048, all layers); HBM floor = "
             "distinct HBM bytes over the bandwidth.", ""]
    for topo in TOPOLOGIES:
        lines += [f"### {topo}", "", "| model | HBM TB/s | " + " | ".join(DESIGNS)
                  + " | HBM floor | Elk-Full / floor |", "|---|---:|" + "---:|" * (len(DESIGNS) + 2)]
        for w in LLMS:
            for b in hbms:
                got = [at.get((w, topo, b, d)) for d in DESIGNS]
                if not any(got):
                    continue
                floor = next(g["hbm_floor_s"] for g in got if g)
                full = at.get((w, topo, b, "elk-full"))
                ratio = f"{full['total_s'] / floor:.2f}x" if full and floor else ""
                lines.append(f"| {w} | {b / 1e12:g} | " + " | ".join(
                    _ms(g["total_s"]) if g else "" for g in got) + f" | {_ms(floor)} | {ratio} |")
        lines.append("")
    # observation (1): the gain of each doubling of HBM bandwidth, Elk-Full, and mesh vs all-to-all
    lines += ["### Observation (1) in numbers", "",
              "Elk-Full's speedup from each step of HBM bandwidth (geometric mean over the LLMs), "
              "and the mesh's latency over all-to-all's at the same bandwidth:", "",
              "| HBM TB/s step | all-to-all speedup | mesh speedup | mesh / all-to-all (at the upper value) |",
              "|---|---:|---:|---:|"]
    for lo, hi in zip(hbms, hbms[1:]):
        cells = []
        for topo in TOPOLOGIES:
            sp = [at[(w, topo, lo, "elk-full")]["total_s"] / at[(w, topo, hi, "elk-full")]["total_s"]
                  for w in LLMS if (w, topo, lo, "elk-full") in at and (w, topo, hi, "elk-full") in at]
            cells.append(f"{_geomean(sp):.2f}x" if sp else "")
        rel = [at[(w, "mesh", hi, "elk-full")]["total_s"] / at[(w, "all-to-all", hi, "elk-full")]["total_s"]
               for w in LLMS if (w, "mesh", hi, "elk-full") in at and (w, "all-to-all", hi, "elk-full") in at]
        cells.append(f"{_geomean(rel):.2f}x" if rel else "")
        lines.append(f"| {lo / 1e12:g} -> {hi / 1e12:g} | " + " | ".join(cells) + " |")
    lines += ["", "The designs against each other (geometric means over the LLMs and HBM bandwidths):", "",
              "| topology | Elk-Full over Basic | over Static | over Elk-Dyn | Elk-Full % of Ideal |",
              "|---|---:|---:|---:|---:|"]
    for topo in TOPOLOGIES:
        def ratio(d: str, topo: str = topo) -> float:
            return _geomean([at[(w, topo, b, d)]["total_s"] / at[(w, topo, b, "elk-full")]["total_s"]
                             for w in LLMS for b in hbms
                             if (w, topo, b, d) in at and (w, topo, b, "elk-full") in at])
        lines.append(f"| {topo} | {ratio('basic'):.2f}x | {ratio('static'):.2f}x | "
                     f"{ratio('elk-dyn'):.3f}x | {ratio('ideal'):.1%} |")
    lines.append("")

    def floor_line(ax: Any, w: str, topo: str) -> None:
        floor = [(b / 1e12, min(r["hbm_floor_s"] for r in rows if r["workload"] == w
                                and r["topology"] == topo and r["hbm_bandwidth"] == b) * 1e3)
                 for b in hbms if any(r["workload"] == w and r["topology"] == topo
                                      and r["hbm_bandwidth"] == b for r in rows)]
        if floor:
            ax.plot(*zip(*floor), "k--", linewidth=1, label="HBM floor")

    _design_grid(at, hbms, lambda r: r["total_s"] * 1e3, "ms per decode step",
                 "Elk Fig. 19 on tvm_icca: decode latency vs HBM bandwidth (IPU-POD4 with HBM)",
                 out / "elk_dse_fig19.png", floor_line, log_y=True)
    _design_grid(at, hbms, lambda r: r["interconnect_stall_s"] * 1e3,
                 "interconnect stall (ms per decode step)",
                 "Elk Fig. 20 on tvm_icca: time lost to interconnect contention "
                 "(executions waiting for links that preloads hold)", out / "elk_dse_fig20.png")
    _design_grid(at, hbms, lambda r: r["link_bandwidth_utilization"] * 100,
                 "link bandwidth utilization (%)",
                 "Elk Fig. 21 on tvm_icca: interconnect utilization (bytes the cores received "
                 "over their links / their aggregate receive bandwidth; Ideal, with an "
                 "interconnect of its own for preloads, left out)", out / "elk_dse_fig21.png",
                 lambda ax, w, topo: ax.set_ylim(0, 100), designs=DESIGNS[:-1])

    lines += ["## Fig. 20-21: contention, Elk-Full's breakdown and interconnect utilization", "",
              "Interconnect stall per design (the time executions wait for links held by "
              "preloads, `interconnect_stall_s`), milliseconds per decode step:", "",
              "| model | topology | HBM TB/s | " + " | ".join(DESIGNS) + " |",
              "|---|---|---:|" + "---:|" * len(DESIGNS)]
    for w in LLMS:
        for topo in TOPOLOGIES:
            for b in hbms:
                got = [at.get((w, topo, b, d)) for d in DESIGNS]
                if any(got):
                    lines.append(f"| {w} | {topo} | {b / 1e12:g} | " + " | ".join(
                        _ms(g["interconnect_stall_s"]) if g else "" for g in got) + " |")
    lines += ["", "Elk-Full's time by what runs:", "",
              "Link bandwidth utilization: the bytes the cores received over their links, preload "
              "deliveries included, over every core receiving at its link bandwidth for the whole "
              "run (`link_bandwidth_utilization`).", "",
              "| model | topology | HBM TB/s | preload only ms | preload + execute ms | execute only ms "
              "| link bandwidth util | HBM util |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for w in LLMS:
        for topo in TOPOLOGIES:
            for b in hbms:
                r = at.get((w, topo, b, "elk-full"))
                if r:
                    lines.append(f"| {w} | {topo} | {b / 1e12:g} | {_ms(r['preload_only_s'])} "
                                 f"| {_ms(r['preload_overlap_s'])} | {_ms(r['execute_only_s'])} "
                                 f"| {r['link_bandwidth_utilization']:.1%} | {r['hbm_utilization']:.1%} |")
    lines.append("")
    return lines


def fig22(rows: list[dict[str, Any]], out: pathlib.Path) -> list[str]:
    rows = _ok(rows)
    head = ["## Fig. 22: Llama2-70B, interconnect x HBM bandwidth", ""]
    if not rows:
        return head + ["No rows yet.", ""]
    links = sorted({r["link_bandwidth"] for r in rows})
    hbms = sorted({r["hbm_bandwidth"] for r in rows})
    at = _by(rows, "topology", "link_bandwidth", "hbm_bandwidth", "design")
    lines = head + ["Milliseconds per decode step, Elk-Full (Ideal in brackets); columns: link bandwidth per "
                    "core.", ""]
    for topo in TOPOLOGIES:
        lines += [f"### {topo}", "", "| HBM TB/s | " + " | ".join(f"{l / 1e9:g} GB/s" for l in links)
                  + " | x1.5 link speedup |", "|---:|" + "---:|" * (len(links) + 1)]
        for b in hbms:
            cells = []
            for l in links:
                f, i = at.get((topo, l, b, "elk-full")), at.get((topo, l, b, "ideal"))
                cells.append(f"{_ms(f['total_s']) if f else ''}" + (f" ({_ms(i['total_s'])})" if i else ""))
            lo, hi = at.get((topo, links[0], b, "elk-full")), at.get((topo, links[-1], b, "elk-full"))
            gain = f"{lo['total_s'] / hi['total_s']:.2f}x" if lo and hi else ""
            lines.append(f"| {b / 1e12:g} | " + " | ".join(cells) + f" | {gain} |")
        lines.append("")
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, squeeze=False)[0]
    for ax, topo in zip(axes, TOPOLOGIES):
        for b in hbms:
            pts = [(l / 1e9, at[(topo, l, b, "elk-full")]["total_s"] * 1e3) for l in links
                   if (topo, l, b, "elk-full") in at]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=f"HBM {b / 1e12:g} TB/s")
        _label(ax, f"Llama2-70B, {topo}, Elk-Full", "link bandwidth per core (GB/s)", "ms per decode step")
        ax.legend(fontsize=7)
    fig.suptitle("Elk Fig. 22 on tvm_icca: interconnect and HBM bandwidth together")
    fig.savefig(out / "elk_dse_fig22.png", dpi=100)
    return lines


def _slower_than_basic(points: list[tuple[str, str, int, dict[str, Any], dict[str, Any]]]) -> list[str]:
    """The ``(model, topology, cores, Elk-Full row, Basic row)`` points where Elk-Full is slower
    than Basic, with what the rows say it spent more on: the execute phases' link transfer
    (``remainder``) against the link bytes moved."""
    if not points:
        return []
    found = []
    for w, topo, n, full, basic in points:
        link = [r.get("remainder", {}).get("link transfer") for r in (full, basic)]
        moved = [r.get("link_bytes") for r in (full, basic)]
        found.append(f"- {w}, {topo}, {n} cores: Elk-Full {_ms(full['total_s'])} ms against Basic's "
                     f"{_ms(basic['total_s'])} ms ({full['total_s'] / basic['total_s']:.2f}x); "
                     + (f"link transfer {_ms(link[0])} against {_ms(link[1])} ms for "
                        f"{moved[0] / 1e9:,.1f} against {moved[1] / 1e9:,.1f} GB over the links"
                        if None not in link and None not in moved else "no breakdown in the rows"))
    return ["Elk-Full is slower than Basic at these points. The rows show where the time went: "
            "about the same bytes cross the links, but they take longer. Elk leaves execution "
            "less SRAM so that preloads can run beside it, and the smaller plans it then picks "
            "move their bytes over routes that cost more on a routed mesh (more hops, more "
            "shared links). The plan search prices a shift by its bytes at one link's "
            "bandwidth, so it does not see the route:", ""] + found + [""]


def fig23(llm_rows: list[dict[str, Any]], dit_rows: list[dict[str, Any]], out: pathlib.Path) -> list[str]:
    rows = _ok(llm_rows) + _ok(dit_rows)
    head = ["## Fig. 23: core count at 2.7 GB/s of HBM per core", ""]
    if not rows:
        return head + ["No rows yet.", ""]
    models = [w for w in LLMS + ("dit-xl2",) if any(r["workload"] == w for r in rows)]
    at = _by(rows, "workload", "topology", "num_cores", "design")
    lines = head + ["Milliseconds per run; Elk-Full's speedup over Basic and Static.", "",
                    "| model | topology | cores | " + " | ".join(DESIGNS)
                    + " | Elk-Full vs Basic | vs Static |", "|---|---|---:|" + "---:|" * (len(DESIGNS) + 2)]
    over_basic: dict[str, list[float]] = defaultdict(list)
    over_static: dict[str, list[float]] = defaultdict(list)
    slower = []  # (model, topology, cores, Elk-Full row, Basic row) where Elk-Full is slower
    for w in models:
        for topo in TOPOLOGIES:
            for n in sorted({r["num_cores"] for r in rows if r["workload"] == w}):
                got = [at.get((w, topo, n, d)) for d in DESIGNS]
                if not any(got):
                    continue
                full, basic, static = (at.get((w, topo, n, d)) for d in ("elk-full", "basic", "static"))
                vb = basic["total_s"] / full["total_s"] if full and basic else None
                vs = static["total_s"] / full["total_s"] if full and static else None
                group = ("dit " if w == "dit-xl2" else "LLMs ") + topo
                if vb:
                    over_basic[group].append(vb)
                if vb is not None and vb < 1:
                    slower.append((w, topo, n, full, basic))
                if vs:
                    over_static[group].append(vs)
                lines.append(f"| {w} | {topo} | {n} | " + " | ".join(_ms(g["total_s"]) if g else "" for g in got)
                             + f" | {f'{vb:.2f}x' if vb else ''} | {f'{vs:.2f}x' if vs else ''} |")
    lines += ["", "Elk-Full over Basic / Static, geometric mean over core counts (and models): "
              + "; ".join(f"{g.replace('dit', 'DiT-XL')} {_geomean(over_basic[g]):.2f}x / "
                          f"{_geomean(over_static[g]):.2f}x" for g in sorted(over_basic)), ""]
    lines += _slower_than_basic(slower)
    fig = Figure(figsize=(4 * len(models), 7), layout="constrained")
    axes = fig.subplots(2, len(models), squeeze=False)
    for row, topo in enumerate(TOPOLOGIES):
        for col, w in enumerate(models):
            ax = axes[row][col]
            cores = sorted({r["num_cores"] for r in rows if r["workload"] == w})
            for d in DESIGNS:
                pts = [(n, at[(w, topo, n, d)]["total_s"] * 1e3) for n in cores if (w, topo, n, d) in at]
                if pts:
                    ax.plot(*zip(*pts), marker="o", markersize=3, label=d)
            _label(ax, f"{w}, {topo}", "cores", "ms per run")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Elk Fig. 23 on tvm_icca: scaling the core count (and HBM with it)")
    fig.savefig(out / "elk_dse_fig23.png", dpi=100)
    return lines


def fig24(rows: list[dict[str, Any]], out: pathlib.Path) -> list[str]:
    rows = _ok(rows)
    head = ["## Fig. 24: Llama2-13B training forward, achieved vs available TFLOPS", ""]
    if not rows:
        return head + ["No rows yet.", ""]
    for r in rows:   # the chip's peak: the pass's FLOPs at the compute floor
        r["peak_tflops"] = r["flops"] / r["compute_floor_s"] / 1e12
    panels = sorted({(r["hbm_bandwidth"], r["link_bandwidth"]) for r in rows})
    lines = head + ["Achieved TFLOPS = the pass's FLOPs over its simulated time.", "",
                    "| topology | HBM GB/s | link GB/s | available TFLOPS | " + " | ".join(
                        d for d in DESIGNS if any(r["design"] == d for r in rows))
                    + " | Elk-Full % of peak | Elk-Full's floors: compute / HBM / interconnect ms | time ms |",
                    "|---|---:|---:|---:|" + "---:|" * (3 + sum(any(r["design"] == d for r in rows)
                                                                for d in DESIGNS))]
    designs = [d for d in DESIGNS if any(r["design"] == d for r in rows)]
    at = _by(rows, "topology", "hbm_bandwidth", "link_bandwidth", "matrix_flops_per_cycle", "design")
    for topo in TOPOLOGIES:
        for hbm, link in panels:
            for f in sorted({r["matrix_flops_per_cycle"] for r in rows}):
                got = [at.get((topo, hbm, link, f, d)) for d in designs]
                if not any(got):
                    continue
                peak = next(g for g in got if g)["peak_tflops"]
                full = at.get((topo, hbm, link, f, "elk-full"))
                floors = (" / ".join(_ms(full[k]) for k in ("compute_floor_s", "hbm_floor_s",
                                                             "interconnect_floor_s"))
                          if full else "")
                share = f"{full['flops_utilization']:.0%}" if full else ""
                lines.append(f"| {topo} | {hbm / 1e9:g} | {link / 1e9:g} | {peak:,.0f} | " + " | ".join(
                    f"{g['achieved_flops'] / 1e12:,.0f}" if g else "" for g in got)
                    + f" | {share} | {floors} | {_ms(full['total_s']) if full else ''} |")
    lines.append("")
    fig = Figure(figsize=(4 * len(panels), 4), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (hbm, link) in zip(axes, panels):
        for topo, style in zip(TOPOLOGIES, ("-", "--")):
            for d in designs:
                pts = sorted((r["peak_tflops"], r["achieved_flops"] / 1e12) for r in rows
                             if r["topology"] == topo and r["design"] == d
                             and r["hbm_bandwidth"] == hbm and r["link_bandwidth"] == link)
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", markersize=3, label=f"{d} ({topo})",
                            color=f"C{DESIGNS.index(d)}")
        _label(ax, f"HBM {hbm / 1e9:g} GB/s, link {link / 1e9:g} GB/s", "available TFLOPS",
               "achieved TFLOPS")
    axes[0].legend(fontsize=6)
    fig.suptitle("Elk Fig. 24 on tvm_icca: Llama2-13B training forward pass")
    fig.savefig(out / "elk_dse_fig24.png", dpi=100)
    return lines


def mesh(rows: list[dict[str, Any]], out: pathlib.Path) -> list[str]:
    rows = _ok(rows)
    head = ["## Mesh design: HBM controller placement x link bandwidth x torus", ""]
    if not rows:
        return head + ["No rows yet.", ""]
    lines = head + ["Llama2-13B decode, Elk-Full (Ideal in brackets), milliseconds per decode step, and the "
                    "cut that bounds the loads.", "",
                    "| placement | torus | link GB/s | Elk-Full ms | Ideal ms | HBM floor ms | bound by |",
                    "|---|---|---:|---:|---:|---:|---|"]
    at = _by(rows, "hbm_placement", "mesh_torus", "link_bandwidth", "design")
    placements = list(dict.fromkeys(r["hbm_placement"] for r in rows))
    links = sorted({r["link_bandwidth"] for r in rows})
    for p in placements:
        for torus in (False, True):
            for l in links:
                f, i = at.get((p, torus, l, "elk-full")), at.get((p, torus, l, "ideal"))
                if not (f or i):
                    continue
                ref = f or i
                lines.append(f"| {p} | {'yes' if torus else 'no'} | {l / 1e9:g} | "
                             f"{_ms(f['total_s']) if f else ''} | {_ms(i['total_s']) if i else ''} "
                             f"| {_ms(ref['hbm_floor_s'])} | {ref.get('load_bound_by', '')} |")
    lines.append("")
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, squeeze=False)[0]
    for ax, torus in zip(axes, (False, True)):
        for p in placements:
            pts = [(l / 1e9, at[(p, torus, l, "elk-full")]["total_s"] * 1e3) for l in links
                   if (p, torus, l, "elk-full") in at]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=p)
        ax.set_xscale("log", base=2)
        _label(ax, f"Llama2-13B, Elk-Full, {'torus' if torus else 'mesh'}",
               "link bandwidth per core (GB/s)", "ms per decode step")
        ax.legend(fontsize=7, title="HBM controllers")
    fig.suptitle("Mesh chip design: where the HBM controllers sit, and how fast the links are")
    fig.savefig(out / "elk_dse_mesh.png", dpi=100)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results-dir", default=str(ROOT / "benchmarks" / "dse" / "results"),
                        help="where the studies' .jsonl files are")
    args = parser.parse_args()
    src = pathlib.Path(args.results_dir)
    studies = {name: read(src / f"{name}.jsonl") for name in STUDIES}
    runs = {name: read_runs(src / f"{name}.jsonl") for name in STUDIES}
    RESULTS.mkdir(parents=True, exist_ok=True)
    lines = ["# Elk §6.4 on tvm_icca: the full-size design-space studies", "",
             "From the results files of `benchmarks/dse/*.toml` (one `tvm-icca dse` run each, all "
             "layers of every model); the figures beside this table are drawn from the same rows.",
             ""]
    lines += cost_table(studies, runs)
    lines += fig19(studies["elk_fig19_21_hbm"], RESULTS)
    lines += fig22(studies["elk_fig22_noc"], RESULTS)
    lines += fig23(studies["elk_fig23_cores"], studies["elk_fig23_dit"], RESULTS)
    lines += fig24(studies["elk_fig24_training"], RESULTS)
    lines += mesh(studies["mesh_design"], RESULTS)
    not_ok = [r for rows in studies.values() for r in rows if r.get("status") != "ok"]
    if not_ok:
        lines += ["## Points that did not run", "", "| study | workload | point | status | reason |",
                  "|---|---|---|---|---|"]
        for r in not_ok:
            point = ", ".join(f"{k}={r.get(k)}" for k in r.get("inputs", ())
                              if k not in ("spec", "hardware", "workload", "state", "execution"))
            reason = str(r.get("reason", "")).replace("|", "/").splitlines()
            lines.append(f"| {r.get('spec')} | {r.get('workload')} | {point} | {r.get('status')} "
                         f"| {(reason[0] if reason else '')[:160]} |")
        lines.append("")
    write_markdown(RESULTS / "elk_dse.md", "\n".join(lines))
    print("\n".join(lines[:40]))


if __name__ == "__main__":
    main()
