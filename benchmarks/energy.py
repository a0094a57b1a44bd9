"""Energy per token and average power of the zoo's LLM decodes and three other models on the
IPU presets, from the action-based energy model (``runtime_sim.contract.energy``).

Every model is compiled and timed as ``zoo_timing.py`` does: the four LLM decodes of Elk's
evaluation (batch 32, 2,048-token context, Elk-Full on ``ipu-pod4-hbm``, Elk §6.1), BERT-large
at batch 1 on ``ipu-mk2`` and ``ipu-pod4-hbm``, ResNet-50 on ``ipu-mk2`` and DiT-XL/2 on
``ipu-pod4-hbm``. The timing simulator counts each run's actions (FLOPs by unit and dtype,
SRAM, link, inter-chip, HBM and host bytes), prices them with the preset's per-action energies
(each cited or marked assumed in ``runtime_sim/contract/preset_energies.py``) and adds static
power over the run's time. Writes ``benchmarks/results/energy.md`` and ``energy.json``.

    .venv/bin/python benchmarks/energy.py [--models llama2-13b,resnet50] [--hw ipu-mk2]
"""

from __future__ import annotations

import argparse
import pathlib
import time
from typing import Any

from runtime_sim.contract.energy import ENERGY_COMPONENTS
from runtime_sim.contract.presets import preset
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.workloads import get_workload, tokens_per_run
from result_files import write_json, write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent
LLMS = ("llama2-13b", "gemma2-27b", "opt-30b", "llama2-70b")
OTHERS = ("bert-large", "resnet50", "dit-xl2")
#: (model, chip, workload arguments, Elk design or None)
DEFAULT_CASES = (
    *((m, "ipu-pod4-hbm", {"batch": 32, "context": 2048}, "elk-full") for m in LLMS),
    ("bert-large", "ipu-mk2", {"batch": 1}, None),
    ("resnet50", "ipu-mk2", {"batch": 1}, None),
    ("bert-large", "ipu-pod4-hbm", {"batch": 1}, None),
    # DiT-XL/2's 675M parameters do not fit one IPU's 896 MB of SRAM with its activations
    ("dit-xl2", "ipu-pod4-hbm", {"batch": 1}, None),
)


def run_case(model: str, hw_name: str, kwargs: dict[str, Any], design: str | None) -> dict[str, Any]:
    """Compile and time one case; its energy row."""
    hw = preset(hw_name)
    start = time.perf_counter()
    compiled = compile_programs(get_workload(model, **kwargs), hw, preload=design, progress=False)
    compile_s = time.perf_counter() - start
    report = compiled.simulate()
    energy = report.energy
    tokens = tokens_per_run(model, kwargs)
    row: dict[str, Any] = {
        "model": model, "hardware": hw_name, "design": design or "", **kwargs,
        "tokens_per_run": tokens, "total_s": report.total_s, "compile_s": compile_s,
        "run_bound_by": report.run_bound_by,
    }
    if energy is None:
        row["energy_j"] = None
        return row
    row.update(energy_j=energy.energy_j, energy_per_token_j=energy.per(tokens),
               average_power_w=energy.average_power_w, board_power_w=energy.board_power_w,
               energy_breakdown_j=dict(energy.breakdown_j), warning=energy.warning())
    return row


def _line(row: dict[str, Any]) -> str:
    if row.get("energy_j") is None:
        return f"| {row['model']} | {row['hardware']} | not modelled |" + " |" * 9
    parts = row["energy_breakdown_j"]
    total = row["energy_j"]
    shares = " | ".join(f"{parts[c] / total:.0%}" for c in ENERGY_COMPONENTS)
    return (f"| {row['model']} | {row['hardware']} | {row['tokens_per_run']} | "
            f"{row['total_s'] * 1e3:.3f} | {row['energy_per_token_j'] * 1e3:.2f} | "
            f"{row['average_power_w']:.0f} | {row['board_power_w']:.0f} | {shares} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated subset of the cases' models")
    parser.add_argument("--hw", help="only the cases on this preset")
    args = parser.parse_args()
    wanted = set(args.models.split(",")) if args.models else None
    cases = [c for c in DEFAULT_CASES if (wanted is None or c[0] in wanted)
             and (args.hw is None or c[1] == args.hw)]
    rows: list[dict[str, Any]] = []
    for case in cases:
        row = run_case(*case)
        rows.append(row)
        print(_line(row), flush=True)
        write(rows)  # after every case: a long run stopped keeps what it measured


def write(rows: list[dict[str, Any]]) -> None:
    """The results page and its JSON rows."""
    header = ("| model | chip | tokens per run | ms per run | mJ per token | average W | "
              "board W | " + " | ".join(ENERGY_COMPONENTS) + " |")
    lines = [
        "Energy per token (LLM decode: per generated token of the batch; other models: per "
        "sample) and average power, from per-action energies times the actions the timing "
        "simulator counts plus static power (`runtime_sim.contract.energy`). The component "
        "columns are shares of the run's energy. Board W is the system's rated power "
        "(per-chip board power x chips): the average power must stay below it.",
        "", header, "|" + "---|" * 2 + "---:|" * (5 + len(ENERGY_COMPONENTS)),
        *(_line(r) for r in rows),
    ]
    warnings = [f"- {r['model']} on {r['hardware']}: {r['warning']}" for r in rows if r.get("warning")]
    if warnings:
        lines += ["", "Warnings:", *warnings]
    out = ROOT / "benchmarks" / "results" / "energy.md"
    write_markdown(out, "\n".join(lines))
    write_json(out.with_suffix(".json"), rows)


if __name__ == "__main__":
    main()
