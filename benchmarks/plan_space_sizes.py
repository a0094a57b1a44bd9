"""Intra-operator plan-space sizes and search times (T10 Fig. 17) and the T10 benchmark answer.

For representative operators of BERT-large and ResNet (fp16, IPU Mk2, 1,472 cores) prints
the complete space (every valid F_op, f_t and loop order, counted combinatorially), the
filtered space (T10's search constraints with the Elk artifact thresholds, 0.9 core
utilization and 0.9 padding, plus fitting SRAM), the Pareto plans among them, and the wall
time of the exact search (``plan_operator``). Then answers the T10 benchmark problem
(M=32, K=5120, N=15360). Writes ``benchmarks/results/plan_space_sizes.md``.

    .venv/bin/python benchmarks/plan_space_sizes.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

from runtime_sim.contract.presets import preset
from tvm_icca.cli.plan_command import conv2d_expr
from tvm_icca.plan_search import SearchMemo, plan_operator, space_sizes
from tvm_icca.plan_search.filters import PlanFilters
from tvm_icca.plan_search.t10_bench import bench_expr, solve
from tvm_icca.testing.exprs import matmul
from result_files import write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def operators(quick: bool) -> dict[str, object]:
    ops = {
        # BERT-large, batch 8, sequence 512: 4096 tokens x hidden 1024, 16 heads of 64.
        "BERT-L QKV proj (BS8)": matmul(4096, 1024, 3072, "float16"),
        "BERT-L FFN1 (BS8)": matmul(4096, 1024, 4096, "float16"),
        "BERT-L FFN2 (BS8)": matmul(4096, 4096, 1024, "float16"),
        "BERT-L QK^T (BS8)": matmul(512, 64, 512, "float16", batch=128),
        "T10 bench matmul": bench_expr(32, 5120, 15360),
        # ResNet-18 at batch 32: the 3x3 convolutions of the first and last stages.
        "ResNet-18 conv2_x 3x3 (BS32)": conv2d_expr(32, 64, 56, 56, 64, 3, 1, 1),
        "ResNet-18 conv5_x 3x3 (BS32)": conv2d_expr(32, 512, 7, 7, 512, 3, 1, 1),
        "ResNet stem 7x7/2 (BS32)": conv2d_expr(32, 3, 224, 224, 64, 7, 2, 3),
    }
    if quick:
        ops = {k: v for k, v in ops.items() if "conv2_x" not in k and "stem" not in k}
    return ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the two largest convolutions")
    args = parser.parse_args()
    hw = preset("ipu-mk2")
    lines = ["| operator | complete (with loop orders) | complete plans | F_op tuples | filtered | Pareto "
             "| exact search s | best time s |", "|---|---|---|---|---|---|---|---|"]
    for name, expr in operators(args.quick).items():
        # One search cache for both: the search reuses the structure and assignments the
        # size count built (it holds no planned result, so the search itself runs).
        cache = SearchMemo()
        start = time.perf_counter()
        sizes = space_sizes(expr, hw, PlanFilters.t10(), cache=cache)
        sized = time.perf_counter() - start
        start = time.perf_counter()
        planned = plan_operator(expr, hw, cache=cache)
        searched = time.perf_counter() - start
        row = (f"| {name} | {sizes.complete:.3g} | {sizes.complete_plans:.3g} | {sizes.op_partitions} | "
               f"{sizes.filtered} | {sizes.pareto} | {searched:.2f} | {planned.time_s:.3e} |")
        print(row, f"(sizes in {sized:.1f} s)", flush=True)
        lines.append(row)

    start = time.perf_counter()
    answer = solve(32, 5120, 15360)
    wall = time.perf_counter() - start
    bench = json.dumps(answer.to_json_dict())
    detail = (f"compute {answer.compute_s:.4e} s + shifts {answer.shift_s:.4e} s + reduction "
              f"{answer.reduction_s:.4e} s; {answer.memory_bytes} bytes per core; search {wall:.2f} s")
    print(bench)
    print(detail)
    out = ROOT / "benchmarks" / "results" / "plan_space_sizes.md"
    write_markdown(out, "# Plan-space sizes on IPU Mk2 (fp16, 1,472 cores)\n\n" + "\n".join(lines)
                   + "\n\n## T10 benchmark: C[32,15360] += A[32,5120] * B[5120,15360]\n\n"
                   + f"    {bench}\n\n{detail}\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
