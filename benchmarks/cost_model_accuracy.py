"""Accuracy of the analytic and fitted cost models against the timing simulator (T10 Fig. 8).

Profiles random shapes of every offloaded op kind under random valid plans on IPU Mk2,
fits the linear model on half, reports MAPE and R^2 on the other half per op kind, writes the
fitted model to ``benchmarks/results/cost_model_ipu-mk2.json`` and a predicted-vs-simulated scatter
plot to ``benchmarks/results/cost_model_accuracy.png``.

    .venv/bin/python benchmarks/cost_model_accuracy.py [--samples 200]
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from runtime_sim.contract.presets import preset  # noqa: E402
from tvm_icca.cli.fit_cost_model_command import (  # noqa: E402
    accuracy,
    fit_cost_model,
    profile_plans,
    random_op_builders,
)

from result_files import write_json, write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200, help="profiled plans per op kind")
    args = parser.parse_args()
    hw = preset("ipu-mk2")
    profiles = profile_plans(random_op_builders(), hw, args.samples, seed=0)
    train, test = profiles[::2], profiles[1::2]
    model = fit_cost_model(train, hw.name)
    saved = ROOT / "benchmarks" / "results" / f"cost_model_{hw.name}.json"
    model.save(saved)
    write_json(saved, json.loads(saved.read_text()))  # the model's file, with its provenance

    by_kind = collections.defaultdict(list)
    for p in test:
        by_kind[p.kind].append(p)
    fig, axes = plt.subplots(1, len(by_kind), figsize=(4 * len(by_kind), 4))
    lines = [f"Predicted vs simulated time of random plans on `{hw.name}`, {args.samples} profiled "
             "plans per op kind, the fitted model trained on one half and tested on the other.", "",
             "| op kind | test plans | fitted MAPE % | fitted R^2 | analytic MAPE % | analytic R^2 |",
             "|---|---:|---:|---:|---:|---:|"]
    for axis, (kind, group) in zip(axes, sorted(by_kind.items())):
        simulated = [p.simulated_s for p in group]
        fitted = [model.predict_features(kind, p.features) for p in group]
        analytic = [p.analytic_s for p in group]
        fa, aa = accuracy(fitted, simulated), accuracy(analytic, simulated)
        lines.append(f"| {kind} | {len(group)} | {fa['mape_percent']:.2f} | {fa['r2']:.4f} | "
                     f"{aa['mape_percent']:.2f} | {aa['r2']:.4f} |")
        axis.loglog(simulated, analytic, "x", label="analytic", alpha=0.6)
        axis.loglog(simulated, fitted, ".", label="fitted", alpha=0.8)
        lo, hi = min(simulated), max(simulated)
        axis.plot([lo, hi], [lo, hi], "k--", linewidth=0.8)
        axis.set_title(kind)
        axis.set_xlabel("simulated (s)")
    axes[0].set_ylabel("predicted (s)")
    axes[0].legend()
    fig.tight_layout()
    out = ROOT / "benchmarks" / "results" / "cost_model_accuracy.png"
    fig.savefig(out, dpi=110)
    print("\n".join(lines))
    write_markdown(ROOT / "benchmarks" / "results" / "cost_model_accuracy.md", "\n".join(lines))
    print(f"plot: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
