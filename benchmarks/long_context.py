"""Long context on ``ipu-pod4-hbm``: decode latency against context length, prefill time
against prompt length, with operators larger than the chip split (``tvm_icca.split``).

Every decode case is compiled by the one compiler under each preload design (prompts under
``--prompt-designs``) and timed by the timing simulator (:func:`elk_llm.run_case`, the same runner as the Elk tables). A case whose model
state exceeds the chips' HBM (``HbmCapacityError``) is listed as not fitting; no case may fail
for lack of SRAM, which is what splitting is for. Columns: per-step (decode: a token for every
sequence of the batch) or per-prompt (prefill) time, its ratio to the HBM floor (distinct bytes / HBM bandwidth) and to the compute
floor, the FLOPS utilization, and the compile time.

    .venv/bin/python benchmarks/long_context.py                       # the full matrix
    .venv/bin/python benchmarks/long_context.py --models llama2-13b --contexts 8192 16384 \\
        --designs elk-full --prefill 8192 --layers 4
    .venv/bin/python benchmarks/long_context.py --profile --prefill 8192 --contexts --phases prefill

``--profile`` writes ``long_context_profile.{md,json}`` instead: one layer of each case,
operator by operator (:mod:`layer_profile`).

Writes ``benchmarks/results/long_context.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from elk_llm import DESIGNS, MODELS, RESULTS, run_case  # noqa: E402
from layer_profile import ProfileCase, write_profiles  # noqa: E402
from result_files import PROVENANCE_KEY, provenance_line, write_json, write_markdown  # noqa: E402

HARDWARE = "ipu-pod4-hbm"
#: Decode contexts (the issue's 8K-128K) and the batch of the table.
CONTEXTS = (8192, 16384, 32768, 65536, 131072)
DECODE_BATCH = 16
#: Prompt lengths of the prefill and training-forward rows (Llama2-13B, batch 1). A prefill
#: returns every layer's keys and values; they leave the chip as they are produced
#: (``runtime_sim.contract.lifetimes.staying_outputs``), so both run whole unless
#: ``--prefill-layers`` says otherwise.
PREFILL = (8192, 16384, 32768)
#: The cases the long-context work set out to run, beside the matrix. The first two keep
#: more state than the 384 GiB of HBM of ``ipu-pod4-hbm`` (392 and 424 GiB), so they run at
#: ``--goal-layers`` layers (their layers' operators are the full-size ones); the third
#: runs whole.
GOAL_CASES = (("opt-30b", 64, 4096, "goal"), ("llama2-13b", 16, 32768, "goal"),
              ("llama2-13b", 8, 32768, None))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--contexts", nargs="*", type=int, default=list(CONTEXTS))
    parser.add_argument("--batch", type=int, default=DECODE_BATCH)
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS))
    parser.add_argument("--prefill", nargs="*", type=int, default=list(PREFILL))
    parser.add_argument("--no-goals", action="store_true", help="skip the goal cases")
    parser.add_argument("--layers", type=int, default=None,
                        help="only the first LAYERS layers (default: all)")
    parser.add_argument("--goal-layers", type=int, default=8,
                        help="layers of the goal cases whose state exceeds the HBM")
    parser.add_argument("--prefill-layers", type=int, default=None,
                        help="only the first N layers in the prefill rows (default: all)")
    parser.add_argument("--phases", nargs="+", default=["prefill", "train"],
                        choices=["prefill", "train"], help="phases of the prompt rows")
    parser.add_argument("--prompt-designs", nargs="+", default=["elk-full", "ideal"],
                        help="designs of the prefill and training rows")
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of the committed results this run does not remake "
                             "(each row names the commit it was made on)")
    parser.add_argument("--profile", action="store_true",
                        help="instead of the tables: one layer of each prompt row (and of each "
                             "decode model at the first context), operator by operator "
                             "(long_context_profile.md)")
    parser.add_argument("--render", metavar="JSONL",
                        help="write the table and plot from the rows a run kept as its cases "
                             "ended (long_context.partial.jsonl) instead of running")
    args = parser.parse_args(argv)
    designs = tuple(args.designs)
    rows: list[dict[str, Any]] = []
    if args.render:
        rows = [json.loads(line) for line in pathlib.Path(args.render).read_text().splitlines() if line]
        _write(rows, args)
        return 0
    if args.profile:
        write_profiles(_profile_cases(args, designs), RESULTS / "long_context_profile",
                       "Long context: one layer, operator by operator")
        return 0
    for model in args.models:
        for context in args.contexts:
            rows += _tagged(run_case(model, HARDWARE, args.batch, context, args.layers,
                                     designs=designs), "decode", context)
    if not args.no_goals:
        for model, batch, context, short in GOAL_CASES:
            if model in args.models:
                layers = args.goal_layers if short else args.layers
                rows += _tagged(run_case(model, HARDWARE, batch, context, layers,
                                         designs=designs), "decode", context)
    long_prompt = tuple(d for d in args.prompt_designs if d in designs) or designs
    for seq in args.prefill:
        for phase, layers in (("prefill", args.prefill_layers), ("train", args.layers)):
            if phase not in args.phases:
                continue
            rows += _tagged(run_case("llama2-13b", HARDWARE, 1, seq, layers, designs=long_prompt,
                                     workload_args={"phase": phase, "seq_len": seq}), phase, seq)
    (RESULTS / "long_context.partial.jsonl").unlink(missing_ok=True)
    if args.merge:
        rows = _merged(_committed_rows(), rows)
    _write(rows, args)
    return 0


def _profile_cases(args: argparse.Namespace, designs: tuple[str, ...]) -> list[ProfileCase]:
    prompt_design = next((d for d in args.prompt_designs if d in designs), designs[0])
    cases = [ProfileCase("llama2-13b", HARDWARE, 1, phase, seq, prompt_design)
             for seq in args.prefill for phase in args.phases]
    if args.contexts:
        decode_design = "elk-full" if "elk-full" in designs else designs[0]
        cases += [ProfileCase(m, HARDWARE, args.batch, "decode", args.contexts[0], decode_design)
                  for m in args.models]
    return cases


def _case(r: dict[str, Any]) -> tuple:
    return tuple(r.get(k) for k in ("model", "phase", "batch", "length", "design"))


def _committed_rows() -> list[dict[str, Any]]:
    """The rows of the committed results, each with the commit it was made on (rows written
    before rows named their commit take the one of the file's provenance line)."""
    path = RESULTS / "long_context.json"
    if not path.exists():
        return []
    md = RESULTS / "long_context.md"
    first = md.read_text().splitlines()[0] if md.exists() else ""
    made_on = first.split(" on commit ")[1].split(" ")[0] if " on commit " in first else "unknown"
    # a row from before rows had records gets None: write_json then leaves it without one
    return [{"commit": made_on, PROVENANCE_KEY: None, **r} for r in json.loads(path.read_text())]


def _merged(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old``'s rows in order, each replaced by the ``new`` row of the same case if there is
    one (a case with a different number of layers is the same case remade); then the new
    cases."""
    fresh = {_case(r): r for r in new}
    out = [fresh.pop(_case(r), r) for r in old]
    return out + [r for r in new if _case(r) in fresh]


def _write(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS / "long_context.json", rows)
    write_markdown(RESULTS / "long_context.md", "\n".join(
        ["# Long context: split operators streamed from HBM", "",
         f"`{HARDWARE}`; decode at batch {args.batch} unless the row says otherwise; the "
         "layers column says how many layers ran. FLOPS util: the FLOPs the chip executed "
         "over its peak for the time; MFU (prefill and training): the model's FLOPs as "
         "written, every attention score counted whether the causal mask hides it or not "
         "(PaLM's model FLOPs utilization, `model_flops.py`), over the same; they differ "
         "where the compiler skips the scores the mask hides.", ""] + _made_on(rows) + _table(rows)))
    _plot(rows)


def _tagged(rows: list[dict[str, Any]], phase: str, length: int) -> list[dict[str, Any]]:
    commit = provenance_line().split(" on commit ")[1].split(" ")[0]
    for r in rows:
        r["phase"], r["length"], r["commit"] = phase, length, commit
    # each case as it ends: a long run that stops keeps what it measured
    partial = RESULTS / "long_context.partial.jsonl"
    with partial.open("a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows


def _made_on(rows: list[dict[str, Any]]) -> list[str]:
    """A line saying that the rows come from several runs, when a merged run mixes them (the
    table then names each row's commit)."""
    if len({r.get("commit") for r in rows}) < 2:
        return []
    return ["Merged from runs on several commits (`--merge`): the last column names the "
            "commit each row was made on.", ""]


def _table(rows: list[dict[str, Any]]) -> list[str]:
    merged = len({r.get("commit") for r in rows}) > 1
    lines = ["| model | phase | batch | tokens | layers | design | ms | x HBM floor | "
             "x compute floor | FLOPS util | MFU | HBM util | compile s |" + (" commit |" if merged else ""),
             "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|" + ("---|" if merged else "")]
    for r in rows:
        head = (f"| {r['model']} | {r['phase']} | {r['batch']} | {r['length']} | {r['layers']} | "
                f"{r['design']} |")
        tail = f" {r.get('commit', '')} |" if merged else ""
        if r["total_ms"] is None:
            why = "does not fit in HBM" if "HbmCapacityError" in r["error"] else r["error"].split(":")[0]
            lines.append(f"{head} {why} | | | | | | |{tail}")
            continue
        lines.append(
            f"{head} {r['total_ms']:.3f} | {r['total_ms'] / r['hbm_floor_ms']:.3f} | "
            f"{r['total_ms'] / r['compute_floor_ms']:.2f} | {r.get('flops_utilization', 0):.1%} | "
            f"{_percent(r.get('mfu'))} | {r.get('hbm_utilization', 0):.1%} | {r['compile_s']:.1f} |{tail}")
    return lines


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def _plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    decode = [r for r in rows if r["phase"] == "decode" and r["total_ms"] is not None
              and r["batch"] == DECODE_BATCH and r["layers"] == "all"]
    if not decode:
        return
    models = sorted({r["model"] for r in decode})
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in decode if r["model"] == model]
        for design in DESIGNS:
            pts = sorted((r["length"], r["total_ms"]) for r in mine if r["design"] == design)
            if pts:
                ax.plot(*zip(*pts), marker="o", label=design)
        floor = sorted({(r["length"], r["hbm_floor_ms"]) for r in mine})
        ax.plot(*zip(*floor), "k--", label="HBM floor")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{model}, batch {DECODE_BATCH}")
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("ms per decode step")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "long_context.png", dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
