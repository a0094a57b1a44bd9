"""Elk on our simulator: LLM decode with HBM preloading, the five designs side by side.

Reproduces the shape of Elk's evaluation (MICRO'25, §6.2-§6.4, Fig. 17-22) on the timing
simulator: every model is compiled once per design by the one compiler
(:func:`tvm_icca.drivers.device_programs.compile_programs` with ``preload=DESIGN``) and the resulting
programs are timed by :func:`runtime_sim.timing.simulate_timing` -- the same programs the
functional device would run.

* **main table** (Fig. 17/18): Llama2-13B, Gemma2-27B, OPT-30B, Llama2-70B decode on
  ``ipu-pod4-hbm`` for every design, the time of one decode step (``ms per step``: a token
  for every sequence of the batch; Elk's per-token latency), % of Ideal, speed-ups over Basic and
  Static, the breakdown (preload only, execute only, overlapped, interconnect stall) and
  utilizations (HBM, interconnect, FLOPS), the HBM and compute floors, compile seconds;
* ``--sweep-batch``: batch 16/32/64 and context 2,048/4,096 (Fig. 17's other bars);
* ``--sweep-hbm``: HBM bandwidth 2-32 TB/s per 4 chips, all-to-all and mesh (Fig. 19-21);
* ``--sweep-noc``: interconnect bandwidth scaled x0.5-x4 at two HBM bandwidths (Fig. 22).

    .venv/bin/python benchmarks/elk_llm.py                      # main table
    .venv/bin/python benchmarks/elk_llm.py --sweep-hbm --sweep-noc --layers 8

Sweeps default to the first ``--layers`` layers of the model (identical layers: the per-step
ratios between designs hold; the README says which runs used fewer layers). Writes
``benchmarks/results/elk_llm.md`` and ``.json`` (``elk_llm_sweeps.*`` with ``--no-main``) and
``elk_llm_*.png``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import sys
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime_sim.contract.errors import HbmCapacityError, PlanNotFoundError, SramOverflowError  # noqa: E402
from tvm_icca.drivers.device_programs import compile_programs  # noqa: E402
from tvm_icca.hardware_choice import resolve_hardware  # noqa: E402
from tvm_icca.model_pass.plan_cache import PlanCache  # noqa: E402
from tvm_icca.workloads import get_workload  # noqa: E402
from model_flops import mfu  # noqa: E402  (benchmarks/, beside this script)
from result_files import PROVENANCE_KEY, write_json, write_markdown  # noqa: E402  (benchmarks/, beside this script)

DESIGNS = ("basic", "static", "elk-dyn", "elk-full", "ideal")
MODELS = ("llama2-13b", "gemma2-27b", "opt-30b", "llama2-70b")
RESULTS = ROOT / "benchmarks" / "results"


def case_workload(model: str, batch: int, context: int, layers: int | None,
                  workload_args: dict[str, Any] | None = None) -> Any:
    """The zoo workload of one case (``workload_args``: more arguments of the zoo's builder,
    e.g. ``phase`` and ``seq_len``)."""
    extra = dict(workload_args or {})
    # a prefill or training case is sized by seq_len; context is the decode KV length
    kwargs: dict[str, Any] = {"batch": batch, **({} if "seq_len" in extra else {"context": context}),
                              **extra}
    if layers:
        kwargs["num_layers"] = layers
    return get_workload(model, **kwargs)


def run_case(model: str, hw_name: str, batch: int, context: int, layers: int | None,
             overrides: dict[str, float] | None = None,
             designs: tuple[str, ...] = DESIGNS,
             workload_args: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Compile and time one model/chip configuration under every design (``workload_args``:
    more arguments of the zoo's builder, e.g. ``phase`` and ``seq_len``)."""
    hw = resolve_hardware(hw_name)
    if overrides:
        hw = hw.with_overrides(**overrides)
    workload = case_workload(model, batch, context, layers, workload_args)
    cache = PlanCache()  # region plans shared by the designs; each design plans its own schedule
    rows = []
    for design in designs:
        case = {"model": model, "hardware": hw.name, "batch": batch, "context": context,
                "layers": layers or "all", "design": design,
                "hbm_tbps": hw.hbm_bandwidth / 1e12, "link_gbps": hw.link_bandwidth / 1e9}
        start = time.perf_counter()
        try:
            compiled = compile_programs(workload, hw, plan_cache=cache, preload=design)
        except (PlanNotFoundError, SramOverflowError, HbmCapacityError) as err:
            # a configuration the compiler cannot fit on the chip (e.g. one layer's KV cache
            # larger than all its SRAM): recorded, and the sweep goes on
            rows.append({**case, "total_ms": None, "error": f"{type(err).__name__}: {err}"})
            print(f"  {model} {hw.name} b{batch} c{context} {design}: does not fit ({type(err).__name__})",
                  file=sys.stderr)
            continue
        compile_s = time.perf_counter() - start
        report = compiled.simulate()
        data = report.to_dict(per_op=False)
        row = {
            **case,
            "total_ms": report.total_s * 1e3,
            "compile_s": compile_s,
            "elk_planning_s": compiled.preload.planning_s if compiled.preload else 0.0,
            "estimated_ms": compiled.preload.estimated_s * 1e3 if compiled.preload else 0.0,
            "hbm_bytes": float(report.hbm_bytes),
            # the floors of runtime_sim.timing.timing_report.resource_floors (one definition)
            "hbm_floor_ms": report.hbm_floor_s * 1e3,
            "compute_floor_ms": report.compute_floor_s * 1e3,
            "interconnect_floor_ms": report.interconnect_floor_s * 1e3,
        }
        if workload.config.get("phase") in ("prefill", "train"):
            # model FLOPs utilization beside the executed FLOPs' (model_flops.py)
            row["mfu"] = mfu(workload.config, report.total_s, hw.peak_matrix_flops)
        for key in ("preload_only_s", "execute_only_s", "preload_overlap_s", "stall_s",
                    "interconnect_stall_s", "hbm_utilization", "interconnect_utilization",
                    "flops_utilization", "achieved_flops", "preloaded_bytes", "distributed_bytes"):
            if key in data:
                row[key] = data[key]
        rows.append(row)
        print(f"  {model} {hw.name} b{batch} c{context} {design}: {row['total_ms']:.3f} ms "
              f"(compile {compile_s:.1f} s, Elk {row['elk_planning_s']:.1f} s)", file=sys.stderr)
    return rows


def cold_compile(model: str, hw_name: str, batch: int, context: int) -> dict[str, Any]:
    """Wall time of compiling ``model`` with Elk-Full from nothing (a fresh plan cache), as
    ``tvm-icca simulate --design elk-full`` does: partitioning, region plans, Elk's tables and
    schedule (Elk's goal: 13B under 60 s, 70B under 3 minutes on this machine)."""
    workload = get_workload(model, batch=batch, context=context)
    start = time.perf_counter()
    compiled = compile_programs(workload, hw_name, plan_cache=PlanCache(), preload="elk-full")
    pre = compiled.preload
    row = {"model": model, "hardware": hw_name, "compile_s": time.perf_counter() - start,
           "elk_pass_s": pre.planning_s, "schedule_s": pre.stats["planning_s"],
           "orders_tried": pre.stats["orders_tried"], "ops": pre.num_ops}
    print(f"  {model} cold compile {row['compile_s']:.1f} s (Elk pass {row['elk_pass_s']:.1f} s)",
          file=sys.stderr)
    return row


def _compile_table(rows: list[dict[str, Any]]) -> list[str]:
    return (["| model | operators | compile s | Elk pass s | scheduling s | orders tried |",
             "|---|---:|---:|---:|---:|---:|"] +
            [f"| {r['model']} | {r['ops']} | {r['compile_s']:.1f} | {r['elk_pass_s']:.1f} | "
             f"{r['schedule_s']:.1f} | {r['orders_tried']} |" for r in rows])


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| model | hardware | HBM TB/s | link GB/s | batch | context | design | ms per step | "
             "% of Ideal | preload only ms | execute only ms | overlap ms | stall ms | HBM util | "
             "NoC util | FLOPS util | HBM floor ms | compile s | Elk s |",
             "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ideal = {(r["model"], r["batch"], r["context"], r["hardware"], r["hbm_tbps"], r["link_gbps"]):
             r["total_ms"] for r in rows if r["design"] == "ideal"}
    for r in rows:
        if r["total_ms"] is None:
            lines.append(f"| {r['model']} | {r['hardware']} | {r['hbm_tbps']:g} | {r['link_gbps']:g} | "
                         f"{r['batch']} | {r['context']} | {r['design']} | does not fit |"
                         + " |" * 11)
            continue
        key = (r["model"], r["batch"], r["context"], r["hardware"], r["hbm_tbps"], r["link_gbps"])
        pct = 100.0 * ideal[key] / r["total_ms"] if ideal.get(key) else float("nan")
        ms = lambda k: r.get(k, float("nan")) * 1e3  # noqa: E731
        pc = lambda k: 100.0 * r.get(k, float("nan"))  # noqa: E731
        lines.append(
            f"| {r['model']} | {r['hardware']} | {r['hbm_tbps']:g} | {r['link_gbps']:g} | "
            f"{r['batch']} | {r['context']} | {r['design']} | {r['total_ms']:.3f} | "
            f"{pct:.1f}% | {ms('preload_only_s'):.3f} | {ms('execute_only_s'):.3f} | "
            f"{ms('preload_overlap_s'):.3f} | {ms('interconnect_stall_s' if 'interconnect_stall_s' in r else 'stall_s'):.3f} | "
            f"{pc('hbm_utilization'):.1f}% | {pc('interconnect_utilization'):.1f}% | "
            f"{pc('flops_utilization'):.1f}% | {r['hbm_floor_ms']:.3f} | {r['compile_s']:.1f} | "
            f"{r['elk_planning_s']:.1f} |")
    return lines


def _summary(rows: list[dict[str, Any]]) -> list[str]:
    """Elk-Full vs Ideal, Basic and Static, per case and averaged (Elk §6.2's headline)."""
    cases: dict[tuple, dict[str, float]] = {}
    floors: dict[tuple, bool] = {}
    for r in rows:
        key = (r["model"], r["batch"], r["context"], r["hardware"], r["hbm_tbps"], r["link_gbps"])
        cases.setdefault(key, {})[r["design"]] = r["total_ms"]
        if r["total_ms"] is not None:  # no design beats the HBM floor or the compute floor
            above = (r["total_ms"] >= r["hbm_floor_ms"] * (1 - 1e-9)
                     and r.get("flops_utilization", 0.0) <= 1.0 + 1e-9)
            floors[key] = floors.get(key, True) and above
    lines = ["| model | hardware | HBM TB/s | link GB/s | batch | context | Elk-Full % of Ideal | "
             "over Basic | over Static | ordering Ideal <= Full <= Dyn <= Static <= Basic | "
             "above HBM and compute floors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    pct, basic, static = [], [], []
    for key, t in cases.items():
        if any(t.get(d) is None for d in DESIGNS):
            if any(d in t and t[d] is None for d in DESIGNS):
                lines.append(f"| {key[0]} | {key[3]} | {key[4]:g} | {key[5]:g} | {key[1]} | {key[2]} | "
                             "does not fit | | | | |")
            continue
        order = [t[d] for d in ("ideal", "elk-full", "elk-dyn", "static", "basic")]
        ok = all(a <= b * (1 + 1e-9) for a, b in zip(order, order[1:]))
        pct.append(100 * t["ideal"] / t["elk-full"])
        basic.append(t["basic"] / t["elk-full"])
        static.append(t["static"] / t["elk-full"])
        lines.append(f"| {key[0]} | {key[3]} | {key[4]:g} | {key[5]:g} | {key[1]} | {key[2]} | "
                     f"{pct[-1]:.1f}% | {basic[-1]:.2f}x | "
                     f"{static[-1]:.2f}x | {'yes' if ok else 'NO'} | {'yes' if floors[key] else 'NO'} |")
    if pct:
        lines.append(f"| **average** | | | | | | **{sum(pct) / len(pct):.1f}%** | "
                     f"**{sum(basic) / len(basic):.2f}x** | **{sum(static) / len(static):.2f}x** | | |")
    return lines


#: Per plotted sweep (a key of the results JSON): the x axis's row key and label, the file, and
#: what the title says is swept.
_SWEEP_PLOTS = {"hbm": ("hbm_tbps", "HBM bandwidth per 4 chips (TB/s)", "elk_llm_hbm.png",
                        "HBM bandwidth"),
                "noc": ("link_gbps", "link bandwidth per core (GB/s)", "elk_llm_noc.png",
                        "interconnect bandwidth")}


def _sweep_plot(key: str, rows: list[dict[str, Any]]) -> None:
    xkey, xlabel, name, swept = _SWEEP_PLOTS[key]
    _plot(rows, xkey, xlabel, RESULTS / name, f"{rows[0]['model']}: decode step time vs {swept}")


def _plot(rows: list[dict[str, Any]], xkey: str, xlabel: str, path: pathlib.Path, title: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["total_ms"] is not None:
            groups.setdefault((r["hardware"], r["design"]), []).append(r)
    fig, ax = plt.subplots(figsize=(7, 4))
    for (hw, design), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r[xkey])
        style = "-" if "mesh" not in hw else "--"
        ax.plot([r[xkey] for r in rs], [r["total_ms"] for r in rs], style, marker="o",
                label=f"{design} ({'mesh' if 'mesh' in hw else 'all-to-all'})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("ms per decode step")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _render(path: pathlib.Path) -> int:
    """The markdown of an earlier run's JSON, written next to it (same stem)."""
    out = json.loads(path.read_text())
    titles = {"main": "Decode", "batch": "Batch and context", "hbm": "HBM bandwidth sweep",
              "noc": "Interconnect bandwidth sweep"}
    lines = ["Elk designs on the timing simulator (`benchmarks/elk_llm.py`)."]
    made = sorted({(r[PROVENANCE_KEY]["command"], r[PROVENANCE_KEY]["commit"][:10])
                   for rows in out.values() for r in rows if r.get(PROVENANCE_KEY)})
    # the provenance line above names this rendering; the numbers are the rows' runs
    lines += ["", "Rows made by " + "; ".join(f"`{cmd}` on commit {commit}" for cmd, commit in made)
              + "."] if made else []
    for key, rows in out.items():
        if key == "compile":
            lines += ["", f"## Elk-Full compile from a cold start, {rows[0]['hardware']}", ""]
            lines += _compile_table(rows)
            continue
        layers = sorted({str(r["layers"]) for r in rows})
        lines += ["", f"## {titles.get(key, key)} (layers: {', '.join(layers)})", ""]
        lines += _summary(rows) + [""] + _table(rows)
    text = "\n".join(lines) + "\n"
    write_markdown(path.with_suffix(".md"), text)
    for key, rows in out.items():
        if key in _SWEEP_PLOTS and importlib.util.find_spec("matplotlib") is not None:
            _sweep_plot(key, rows)
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--hw", default="ipu-pod4-hbm")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=None,
                        help="keep only the first N layers (default: all for the main table, "
                        "8 for the sweeps)")
    parser.add_argument("--no-main", action="store_true", help="skip the main table")
    parser.add_argument("--sweep-batch", action="store_true")
    parser.add_argument("--sweep-hbm", action="store_true")
    parser.add_argument("--sweep-noc", action="store_true")
    parser.add_argument("--sweep-model", default="llama2-13b")
    parser.add_argument("--cold-compile", metavar="MODELS",
                        help="comma-separated models: time an Elk-Full compile from nothing")
    parser.add_argument("--append", action="store_true",
                        help="merge into the results file's earlier rows (a case run again "
                        "replaces its rows) instead of overwriting it")
    parser.add_argument("--profile", action="store_true",
                        help="instead of the tables: one layer of each model's decode under "
                             "Elk-Full, operator by operator (elk_llm_profile.md)")
    parser.add_argument("--render", metavar="JSON",
                        help="only rewrite the tables of an earlier run's JSON (no compiling)")
    args = parser.parse_args(argv)
    if (args.sweep_hbm or args.sweep_noc) and importlib.util.find_spec("matplotlib") is None:
        # checked before compiling: a sweep takes minutes, its plot comes last
        parser.error("the HBM and interconnect sweeps plot with matplotlib: "
                     "pip install -e '.[bench]'")
    if args.render:
        return _render(pathlib.Path(args.render))
    models = args.models.split(",")
    if args.profile:
        from layer_profile import ProfileCase, write_profiles  # benchmarks/, beside this script

        write_profiles([ProfileCase(m, args.hw, args.batch, "decode", args.context) for m in models],
                       RESULTS / "elk_llm_profile", "Elk on LLM decode: one layer, operator by operator")
        return 0
    out: dict[str, list[dict[str, Any]]] = {}
    lines = ["Elk designs on the timing simulator (`benchmarks/elk_llm.py`)."]
    if not args.no_main:
        rows = [r for m in models for r in run_case(m, args.hw, args.batch, args.context, args.layers)]
        out["main"] = rows
        lines += ["", f"## Decode, batch {args.batch}, context {args.context}, {args.hw}", ""]
        lines += _summary(rows) + [""] + _table(rows)
    sweep_layers = args.layers or 8
    if args.sweep_batch:
        rows = [r for m in models for b in (16, 32, 64) for c in (2048, 4096)
                for r in run_case(m, args.hw, b, c, sweep_layers)]
        out["batch"] = rows
        lines += ["", f"## Batch and context ({sweep_layers} layers)", ""] + _summary(rows)
    if args.sweep_hbm:
        rows = [r for hw in ("ipu-pod4-hbm", "ipu-pod4-hbm-mesh") for tb in (2, 4, 8, 16, 32)
                for r in run_case(args.sweep_model, hw, args.batch, args.context, sweep_layers,
                                  {"hbm_bandwidth": tb * 1e12})]
        out["hbm"] = rows
        lines += ["", f"## HBM bandwidth sweep, {args.sweep_model} ({sweep_layers} layers)", ""]
        lines += _table(rows)
        _sweep_plot("hbm", rows)
    if args.sweep_noc:
        base = resolve_hardware(args.hw).link_bandwidth
        rows = [r for tb in (8, 32) for scale in (0.5, 1, 2, 4)
                for r in run_case("llama2-70b", args.hw, args.batch, args.context, sweep_layers,
                                  {"hbm_bandwidth": tb * 1e12, "link_bandwidth": base * scale})]
        out["noc"] = rows
        lines += ["", f"## Interconnect bandwidth sweep, llama2-70b ({sweep_layers} layers)", ""]
        lines += _table(rows)
        _sweep_plot("noc", rows)
    if args.cold_compile:
        rows = [cold_compile(m, args.hw, args.batch, args.context) for m in args.cold_compile.split(",")]
        out["compile"] = rows
        lines += ["", f"## Elk-Full compile from a cold start, {args.hw}", ""] + _compile_table(rows)
    text = "\n".join(lines) + "\n"
    # a run without the main table keeps it: sweeps and compile timings go to their own files
    stem = ("elk_llm" if not args.no_main else
            "elk_llm_sweeps" if args.sweep_batch or args.sweep_hbm or args.sweep_noc else
            "elk_llm_compile")
    path = RESULTS / f"{stem}.json"
    if args.append and path.exists():
        out = _merged(json.loads(path.read_text()), out)
        write_json(path, out)
        return _render(path)
    write_markdown(RESULTS / f"{stem}.md", text)
    write_json(path, out)
    print(text)
    return 0


def _merged(old: dict[str, list[dict[str, Any]]],
            new: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """``old``'s rows with ``new``'s added; a row of ``new`` replaces the ``old`` row of the
    same case and design."""
    def ident(r: dict[str, Any]) -> tuple:
        return tuple(r.get(k) for k in ("model", "hardware", "batch", "context", "layers",
                                         "design", "hbm_tbps", "link_gbps"))
    out = {key: list(rows) for key, rows in old.items()}
    for key, rows in new.items():
        fresh = {ident(r) for r in rows}
        out[key] = [r for r in out.get(key, []) if ident(r) not in fresh] + rows
    return out


if __name__ == "__main__":
    sys.exit(main())
