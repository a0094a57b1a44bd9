"""What an "operator" is, here and in Elk Table 2: operators per decoder layer of the zoo's
LLMs before and after fusion, beside Elk's operator counts (issue 38).

Elk Table 2 gives N, the operators of each LLM's decode (Llama2-13B 1,928; Gemma2-27B 2,216;
OPT-30B 2,269; Llama2-70B 3,808). Our device programs have fewer. This script measures where
the count comes from: for each model it builds the decode step with one and with two decoder
layers, counts the Relax operators of ``main`` before partitioning (TVM's graph, before any
fusion) and the device operators after partitioning and fusion (``FuseOpsByPattern`` and the
epilogue fusion of the compiler), and takes the difference of the two builds as the count per
layer. It writes ``benchmarks/results/op_granularity.{md,json}``.

    .venv/bin/python benchmarks/op_granularity.py [--models llama2-13b,...]
"""

from __future__ import annotations

import argparse
import collections
import pathlib

import tvm
from tvm import relax

from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.workloads import get_workload
from result_files import write_json, write_markdown  # benchmarks/, beside this script

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
#: Elk Table 2: (N operators, decoder layers of the model).
ELK_TABLE2 = {"llama2-13b": (1928, 40), "gemma2-27b": (2216, 46), "opt-30b": (2269, 48),
              "llama2-70b": (3808, 80)}
HW = "ipu-pod4-hbm"


def relax_ops(mod: tvm.IRModule) -> collections.Counter:
    """Relax operator calls of ``main`` by operator name (the graph before fusion)."""
    counts: collections.Counter = collections.Counter()

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            counts[expr.op.name.removeprefix("relax.")] += 1

    relax.analysis.post_order_visit(mod["main"], visit)
    return counts


def measure(model: str) -> dict:
    """Per-layer operator counts of ``model``'s decode (batch 32, context 2,048)."""
    cache = PlanCache()
    got = {}
    for layers in (1, 2):
        workload = get_workload(model, batch=32, context=2048, num_layers=layers)
        compiled = compile_programs(workload, HW, state="hbm", plan_cache=cache, progress=False)
        got[layers] = (relax_ops(workload.mod), compiled.num_device_ops)
    (relax1, dev1), (relax2, dev2) = got[1], got[2]
    per_layer = relax2 - relax1
    n, layers = ELK_TABLE2[model]
    return {"model": model, "layers": layers, "relax_ops_per_layer": sum(per_layer.values()),
            "relax_ops_by_kind": dict(sorted(per_layer.items())),
            "device_ops_per_layer": dev2 - dev1, "device_ops_outside_layers": dev1 - (dev2 - dev1),
            "elk_ops": n, "elk_ops_per_layer": n / layers}


def render(rows: list[dict]) -> str:
    lines = ["# Operators per decoder layer: TVM's graph, our device programs, Elk Table 2", "",
             "Decode at batch 32, context 2,048 on `ipu-pod4-hbm`; per layer = the two-layer build "
             "minus the one-layer build.", "",
             "| model | Relax operators per layer (before fusion) | device operators per layer "
             "(after fusion) | Elk Table 2 per layer (N / layers) | Elk N | ours x layers |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        total = r["device_ops_per_layer"] * r["layers"] + r["device_ops_outside_layers"]
        lines.append(f"| {r['model']} | {r['relax_ops_per_layer']} | {r['device_ops_per_layer']} | "
                     f"{r['elk_ops_per_layer']:.1f} | {r['elk_ops']:,} | {total:,} |")
    lines += ["", "Relax operators per layer, by kind:", ""]
    for r in rows:
        kinds = ", ".join(f"{k} {v}" for k, v in r["relax_ops_by_kind"].items())
        lines.append(f"- {r['model']}: {kinds}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(ELK_TABLE2))
    args = parser.parse_args()
    rows = [measure(m) for m in args.models.split(",")]
    text = render(rows)
    print(text)
    write_markdown(OUT / "op_granularity.md", text)
    write_json(OUT / "op_granularity.json", {"rows": rows})


if __name__ == "__main__":
    main()
