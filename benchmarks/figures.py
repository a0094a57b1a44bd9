"""The three pictures of the README's tour, made from the code and the benchmark results.

* ``figure_plan.png``: the time/memory Pareto frontier of one operator's rTensor plans
  (T10 §4.3.1) -- BERT-large's first FFN matmul at batch 8 (1,024 tokens x 1,024 -> 4,096,
  float16) on IPU Mk2 -- with the fastest plan, the plan the compiled model picks, and a core's SRAM;
* ``figure_elk_designs.png``: the decode step time (Elk's per-token latency) of the Elk preload designs (Elk §6.1) on the
  four LLMs of ``benchmarks/elk_llm.py``'s main table (read from ``elk_llm.json``: run that
  script first), against the HBM floor;
* ``figure_timeline.png``: the simulated timeline of one Llama 2 13B decoder layer (batch 32,
  context 2,048) on IPU-POD4 with HBM under Elk-Full: what the compute array executes and
  what is preloaded from HBM meanwhile (the tracks a ``--trace`` file shows in Perfetto).

    .venv/bin/python benchmarks/figures.py

Writes the PNGs and ``figures.md`` (their provenance) to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from result_files import write_markdown  # noqa: E402  (benchmarks/, beside this script)
from tvm import relax  # noqa: E402

import tvm_icca  # noqa: E402
from runtime_sim.contract.layout import OpLayout  # noqa: E402
from tvm_icca import plan_search as plans  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
DESIGNS = ("basic", "static", "elk-dyn", "elk-full", "ideal")


def _matmul_module(m: int, k: int, n: int, dtype: str):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((m, k), dtype))
    w = relax.Var("w", relax.TensorType((k, n), dtype))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.matmul(x, w)))
        bb.emit_func_output(out)
    return bb.get()


def plan_figure(path: pathlib.Path) -> str:
    hw = tvm_icca.preset("ipu-mk2")
    mod = tvm_icca.partition_for_icca(_matmul_module(1024, 1024, 4096, "float16"), hw)
    (program,) = tvm_icca.device_programs(tvm_icca.plan_device_programs(hw)(mod))
    op = program.ops[0]
    frontier = plans.pareto_plans(op.expr, hw, filters=None)  # of the complete space
    fastest = plans.plan_operator(op.expr, hw)
    in_model = [p for p in frontier if p.plan == op.plan]
    space = plans.count_complete_space(plans.plan_structure(op.expr), hw.num_cores)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot([p.memory_bytes / 1024 for p in frontier], [p.time_s * 1e6 for p in frontier],
            "o-", label=f"Pareto frontier ({len(frontier)} plans)")
    ax.plot([fastest.memory_bytes_per_core / 1024], [fastest.time_s * 1e6], "r*",
            markersize=14, label="fastest plan that fits")
    if in_model:
        ax.plot([in_model[0].memory_bytes / 1024], [in_model[0].time_s * 1e6], "gs",
                markersize=9, label="chosen in the compiled model")
    ax.axvline(hw.sram_bytes_per_core / 1024, color="gray", linestyle="--",
               label="SRAM per core")
    ax.set_xlabel("memory per core (KiB)")
    ax.set_ylabel("estimated time (us)")
    ax.set_title(f"matmul 1024x1024 @ 1024x4096 (fp16) on {hw.name}: "
                 f"{space.complete_plans:.2g} plans", fontsize="medium")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    layout = OpLayout(op.expr, op.plan)
    chosen = (f"the compiled model (T10 Algorithm 1 with its state on chip) picks a frontier plan of "
              f"{in_model[0].memory_bytes} bytes per core, {in_model[0].time_s * 1e6:.2f} us"
              if in_model else "the compiled model's plan is not on this frontier")
    return (f"`{path.name}`: {len(frontier)} Pareto plans of {space.complete_plans:.3g} "
            f"complete plans; the fastest takes {fastest.memory_bytes_per_core} bytes per core, "
            f"{fastest.time_s * 1e6:.2f} us; {chosen} ({layout.steps} compute-shift steps).")


def elk_figure(path: pathlib.Path) -> str:
    rows = json.loads((RESULTS / "elk_llm.json").read_text())["main"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    by = {(r["model"], r["design"]): r for r in rows}
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    width = 0.8 / len(DESIGNS)
    for d, design in enumerate(DESIGNS):
        xs = [i + (d - len(DESIGNS) / 2 + 0.5) * width for i in range(len(models))]
        ax.bar(xs, [by[m, design]["total_ms"] for m in models], width, label=design)
    for i, m in enumerate(models):
        floor = by[m, "ideal"]["hbm_floor_ms"]
        ax.hlines(floor, i - 0.4, i + 0.4, colors="black", linestyles=":",
                  label="HBM floor" if i == 0 else None)
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("ms per decode step")
    ax.set_title("decode, batch 32, context 2,048, ipu-pod4-hbm")
    ax.legend(ncols=3, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    full = [by[m, "elk-full"]["total_ms"] / by[m, "ideal"]["total_ms"] for m in models]
    return (f"`{path.name}`: from `elk_llm.json` (its command and commit: `elk_llm.md`); "
            f"Elk-Full within {max(full):.3f}x of Ideal on every model.")


def timeline_figure(path: pathlib.Path) -> str:
    workload = tvm_icca.get_workload("llama2-13b", batch=32, context=2048, num_layers=1)
    compiled = tvm_icca.compile_programs(workload, "ipu-pod4-hbm", preload="elk-full",
                                         progress=False)
    report = compiled.simulate(progress=False)
    ops = report.per_op
    kinds = sorted({o.kind for o in ops})
    colors = dict(zip(kinds, plt.cm.tab10.colors))
    fig, ax = plt.subplots(figsize=(8.0, 2.6))
    for o in ops:
        ax.barh(1, (o.end_s - o.start_s) * 1e3, left=o.start_s * 1e3, color=colors[o.kind],
                height=0.6)
        if o.load_end_s > o.load_start_s:
            ax.barh(0, (o.load_end_s - o.load_start_s) * 1e3, left=o.load_start_s * 1e3,
                    color=colors[o.kind], height=0.6, alpha=0.6)
    ax.set_yticks([0, 1], ["HBM preload", "execute"])
    ax.set_xlabel("simulated time (ms)")
    ax.set_title(f"Llama 2 13B, one decoder layer, batch 32, context 2,048, ipu-pod4-hbm, "
                 f"Elk-Full: {report.total_s * 1e3:.3f} ms", fontsize="medium")
    handles = [matplotlib.patches.Patch(color=colors[k], label=k) for k in kinds]
    ax.legend(handles=handles, ncols=len(kinds), fontsize="x-small", loc="upper center",
              bbox_to_anchor=(0.5, -0.35))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return (f"`{path.name}`: {len(ops)} operators, {report.total_s * 1e3:.3f} ms simulated "
            f"(compiled in {compiled.compile_s:.0f} s).")


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    lines = ["The README's pictures.", ""]
    for make, name in ((plan_figure, "figure_plan.png"), (elk_figure, "figure_elk_designs.png"),
                       (timeline_figure, "figure_timeline.png")):
        line = make(RESULTS / name)
        print(line)
        lines.append(f"- {line}")
    write_markdown(RESULTS / "figures.md", "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
