"""IPU Mk2 + T10 against the GPU reference: the direction of T10 §6.6-6.7, at small scale.

T10 (SOSP'24) measured an IPU Mk2 running T10's programs against an A100 running TensorRT:
the IPU is up to 2.44x faster at small batch sizes on BERT, ViT, ResNet and NeRF (§6.6,
Fig. 21) and 3.10x faster on average (up to 16.38x) on LLM layers (§6.7, Fig. 22), because
the A100 reads the weights from HBM while the IPU keeps them in its cores' SRAM; at large
batch both become compute-bound and the A100's higher peak wins.

Here both sides are models, not measurements: the IPU side is the timing simulator on the
programs compiled for ``ipu-mk2`` with the model kept on chip (``state="chip"``, T10 §4.3.2);
the GPU side prices the same programs' operators on the A100 (and H100, B200) roofline of
:mod:`runtime_sim.gpu`: an estimate (tensor 80%, HBM 90% of peak, a launch per operator) and
its bound (100% of every peak, no launch). TensorRT's fusion is not modelled, so the GPU
estimate is the unfused one and the bound the best any kernel sequence with that traffic
could do. Writes ``benchmarks/results/gpu_reference.{md,json}``::

    .venv/bin/python benchmarks/gpu_reference.py [--models resnet18,nerf,vit-b16,bert-large]
        [--batches 1,16] [--llms opt-1.3b,llama2-7b] [--llm-batches 1,16] [--layers 1]
"""

from __future__ import annotations

import argparse
import pathlib
import time

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.gpu import gpu_preset
from runtime_sim.gpu import estimate_gpu
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.workloads import get_workload
from result_files import command_line, write_json, write_markdown  # benchmarks/, beside this script

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
#: T10's own figures (measured: IPU Mk2 + T10 vs A100 + TensorRT, FP16).
PAPER = {"dnn_max": 2.44, "llm_mean": 3.10, "llm_max": 16.38}
#: Sequence lengths as T10's evaluation uses them for the encoders (BERT: 128 tokens).
DNN_ARGS = {"bert-large": {"seq_len": 128}}
#: The LLM layers: one decode step against a short KV cache (the weights dominate the bytes).
LLM_CONTEXT = 256
GPUS = ("a100", "h100", "b200")


def one(name: str, kwargs: dict, group: str, cache: PlanCache) -> dict:
    """One configuration: the IPU's simulated time and each GPU's estimate and bound."""
    row = {"group": group, "model": name, **{k: v for k, v in kwargs.items() if k != "dtype"}}
    start = time.perf_counter()
    try:
        compiled = compile_programs(get_workload(name, **kwargs), "ipu-mk2", state="chip",
                                    plan_cache=cache, progress=False)
        row["ipu_s"] = compiled.simulate(progress=False).total_s
    except IccaError as err:
        row["ipu_error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
        return row
    for gpu in GPUS:
        report = estimate_gpu(compiled.programs, gpu_preset(gpu), model=name)
        row[f"{gpu}_s"], row[f"{gpu}_roofline_s"] = report.total_s, report.roofline_s
        if gpu == "a100":
            row["a100_hbm_bound_ops"] = sum(r.bound_by == "hbm" for r in report.rows)
            row["num_ops"] = len(report.rows)
            row["a100_reread_bytes"] = report.reread_bytes
    row["seconds"] = time.perf_counter() - start
    return row


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


def render(rows: list[dict], command: str) -> str:
    lines = [
        "# IPU Mk2 + T10 vs the GPU reference (T10 §6.6-6.7, direction only)", "",
        f"Command: `{command}`", "",
        "Both columns are models, **not measurements**: *IPU* is the timing simulator on the "
        "programs compiled for `ipu-mk2` with the model on chip; *A100 est.* is the GPU "
        "roofline estimate of the same operators (runtime_sim/gpu/roofline.py: 80% of the "
        "dense FP16 tensor peak, 90% of HBM bandwidth, 2 us per kernel launch, no fusion "
        "beyond the L2 rule) and *A100 bound* its roofline bound (100% of every peak, no "
        "launch overhead). T10's numbers are measurements of IPU Mk2 + T10 against A100 + "
        "TensorRT.", "",
        "| group | model | batch | ops | IPU (ms) | A100 est. (ms) | A100 bound (ms) | "
        "H100 est. (ms) | B200 est. (ms) | A100 est. / IPU | A100 bound / IPU | A100 HBM-bound ops |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "ipu_s" not in r:
            lines.append(f"| {r['group']} | {r['model']} | {r.get('batch', '')} | - | "
                         f"{r['ipu_error']} | | | | | | | |")
            continue
        lines.append(
            f"| {r['group']} | {r['model']} | {r.get('batch', '')} | {r['num_ops']} | "
            f"{_ms(r['ipu_s'])} | {_ms(r['a100_s'])} | {_ms(r['a100_roofline_s'])} | "
            f"{_ms(r['h100_s'])} | {_ms(r['b200_s'])} | {r['a100_s'] / r['ipu_s']:.2f}x | "
            f"{r['a100_roofline_s'] / r['ipu_s']:.2f}x | {r['a100_hbm_bound_ops']}/{r['num_ops']} |")
    lines += ["", "## Beside the paper", ""]
    for group, paper in (("dnn", f"up to {PAPER['dnn_max']}x at small batch (Fig. 21)"),
                         ("llm", f"{PAPER['llm_mean']}x on average, up to {PAPER['llm_max']}x "
                                 "(Fig. 22)")):
        done = [r for r in rows if r["group"] == group and "ipu_s" in r]
        if not done:
            continue
        est = [r["a100_s"] / r["ipu_s"] for r in done]
        bound = [r["a100_roofline_s"] / r["ipu_s"] for r in done]
        small = [r["a100_s"] / r["ipu_s"] for r in done if r.get("batch") == min(
            x.get("batch", 0) for x in done)]
        lines.append(
            f"- {group.upper()}: T10 measured IPU faster than A100 by {paper}. Here the A100 "
            f"estimate over the IPU's simulated time is {sum(est) / len(est):.2f}x on average "
            f"(max {max(est):.2f}x, {min(small):.2f}-{max(small):.2f}x at the smallest batch); "
            f"against the A100's roofline bound {sum(bound) / len(bound):.2f}x on average "
            f"(max {max(bound):.2f}x).")
    bound_wins = [r for r in rows if "ipu_s" in r and r["a100_roofline_s"] < r["ipu_s"]]
    est_loses = [r for r in bound_wins if r["a100_s"] > r["ipu_s"]]
    if est_loses:
        lines += ["", "Where the A100's bound beats the IPU but its estimate does not ("
                  + ", ".join(f"{r['model']} batch {r.get('batch')}" for r in est_loses)
                  + "), the IPU's lead comes from what the estimate adds to the bound: the "
                  "assumed 2 us launch per operator and the efficiencies. There the direction "
                  "rests on those assumptions; where the bound itself is slower than the IPU, "
                  "HBM traffic alone decides it."]
    lines += [
        "",
        "Direction: at small batch the A100's operators are HBM-bound (each reads its weights "
        "from HBM once per run, the column *A100 HBM-bound ops*) while the IPU keeps them in "
        "SRAM; as the batch grows the GPU becomes compute-bound and its larger peak (312 vs "
        "250 TFLOPS) narrows or reverses the gap, as T10 reports. The launch overhead is a "
        "large part of the A100 estimate for small models (its bound leaves it out), and "
        "TensorRT's fusion, which the reference does not model, would cut both launches and "
        "traffic: the paper's larger LLM factors (16.38x) come from the A100 re-reading weights "
        "of operators larger than its 40 MB L2, which the blocked-GEMM rule charges only for "
        "operands re-read across tiles (a decode step reads its weights once).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,nerf,vit-b16,bert-large")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--llms", default="opt-1.3b,llama2-7b")
    parser.add_argument("--llm-batches", default="1,16")
    parser.add_argument("--layers", type=int, default=1, help="LLM layers kept")
    args = parser.parse_args()
    cache = PlanCache()
    rows = []
    for name in filter(None, args.models.split(",")):
        for batch in map(int, args.batches.split(",")):
            rows.append(one(name, {"batch": batch, **DNN_ARGS.get(name, {})}, "dnn", cache))
            print(rows[-1], flush=True)
    for name in filter(None, args.llms.split(",")):
        for batch in map(int, args.llm_batches.split(",")):
            rows.append(one(name, {"batch": batch, "context": LLM_CONTEXT,
                                   "num_layers": args.layers}, "llm", cache))
            print(rows[-1], flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    write_json(OUT / "gpu_reference.json", rows)
    text = render(rows, command_line())
    write_markdown(OUT / "gpu_reference.md", text)
    print(text)


if __name__ == "__main__":
    main()
