"""One prefill attention of Llama2-13B on ``ipu-pod4-hbm``: the fused attention operator's
best plan against the three operators it replaces (issue 41, item 1).

The fused operator (kind ``attention``, :func:`tvm_icca.testing.exprs.attention_expr`: all 40
heads, head dimension 128, float16, the ``[S, S]`` additive causal mask as the zoo's models
write it, or ``--causal-select`` for the mask written on axis values) is planned with the
exact search (:func:`tvm_icca.plan_search.plan_operator`) and timed by the timing
simulator's operator cost (:func:`runtime_sim.timing.opcost.op_cost`). The unfused chain is
``Q K^T``, the softmax with the mask added, and ``P V``; their ``40 x S x S`` scores do not fit
the chips' SRAM, so each is planned on the fewest equal head groups that fit and its time is
multiplied by the number of groups. That sum leaves out what the unfused chain really pays
between its operators (re-layouts of the scores, their trips through HBM): it is a lower
bound of the unfused time. FLOPS utilization is the operator's FLOPs
(:meth:`runtime_sim.contract.expr.TensorExpr.flops`, ``4 H S^2 D``, masked scores included)
over its simulated time and the chips' float16 matrix peak. Prints a table; writes nothing.

    .venv/bin/python benchmarks/fused_attention.py [--seq 8192] [--causal-select]
"""

from __future__ import annotations

import argparse
import time

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.expr import Axis, TensorAccess, TensorExpr
from runtime_sim.contract.presets import preset
from runtime_sim.machine.topology import make_topology
from runtime_sim.timing.opcost import op_cost
from tvm_icca.plan_search import plan_operator
from tvm_icca.testing import exprs as ex

HARDWARE = "ipu-pod4-hbm"
HEADS, HEAD_DIM = 40, 128  # Llama2-13B


def masked_softmax(heads: int, seq: int, dtype: str = "float16") -> TensorExpr:
    """``softmax_j(X[h, i, j] + M[i, j])``: the unfused softmax with the additive mask."""
    ax, load, op = ex.ax, ex.load, ex.op
    x = TensorAccess("X", (heads, seq, seq), dtype, (ax("h"), ax("i"), ax("j")))
    m = TensorAccess("M", (seq, seq), dtype, (ax("i"), ax("j")))
    y = TensorAccess("Y", (heads, seq, seq), dtype, (ax("h"), ax("i"), ax("j")))

    def score(k: str) -> dict:
        return op("add", load(0, (ax("h"), ax("i"), ax(k))), load(1, (ax("i"), ax(k))))

    def row_max(k: str) -> dict:
        return {"op": "reduce", "combiner": "max", "axes": [k], "args": [score(k)]}

    num = op("exp", op("sub", score("j"), row_max("k")))
    den = {"op": "reduce", "combiner": "sum", "axes": ["l"],
           "args": [op("exp", op("sub", score("l"), row_max("k2")))]}
    return TensorExpr("softmax", (Axis("h", heads), Axis("i", seq), Axis("j", seq)), (x, m), y,
                      op("div", num, den), local_axes=(Axis("k", seq), Axis("l", seq), Axis("k2", seq)))


def timed(expr: TensorExpr, hw, topo, label: str, rows: list[str]) -> float:
    """The operator's simulated seconds under its best plan; its table row into ``rows``."""
    start = time.perf_counter()
    planned = plan_operator(expr, hw)
    cost = op_cost(planned.layout, hw, topo)
    plan = planned.layout.plan
    rot = {expr.tensors[t].name: f for t, f in enumerate(plan.temporal) if f}
    rows.append(f"| {label} | {dict(plan.op_partition)} | {rot or '-'} | {cost.steps} | "
          f"{planned.time_s * 1e3:.3f} | {cost.exec_s * 1e3:.3f} | {cost.compute_s * 1e3:.3f} | "
          f"{cost.shift.time_s * 1e3:.3f} | {planned.memory_bytes_per_core:,} | "
          f"{time.perf_counter() - start:.1f} |")
    return cost.exec_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=8192, help="prompt length S")
    parser.add_argument("--causal-select", action="store_true",
                        help="the causal mask on axis values (no mask tensor) in the fused operator")
    args = parser.parse_args()
    hw = preset(HARDWARE)
    topo = make_topology(hw)
    peak = hw.peak_flops("matrix", "float16")
    seq = args.seq
    print(f"{hw.name}: {hw.num_cores} cores, float16 matrix peak {peak / 1e12:.1f} TFLOPS; "
          f"S = {seq}, {HEADS} heads of {HEAD_DIM}\n")
    print("| operator | F_op | rotating (f_t) | steps | estimate ms | simulated ms | compute ms | "
          "shifts ms | bytes/core | search s |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    fused = ex.attention_expr(seq, seq, HEAD_DIM, batch=(1, HEADS), mask=not args.causal_select,
                              causal=args.causal_select, dtype="float16")
    rows: list[str] = []
    fused_s = timed(fused, hw, topo, "attention (fused)", rows)
    flops = fused.flops()
    unfused_s = None
    for groups in (g for g in range(1, HEADS + 1) if HEADS % g == 0):
        h = HEADS // groups
        chain = ((ex.matmul(seq, HEAD_DIM, seq, "float16", transpose_b=True, batch=h), "Q K^T"),
                 (masked_softmax(h, seq), "softmax + mask"),
                 (ex.matmul(seq, seq, HEAD_DIM, "float16", batch=h), "P V"))
        chain_rows: list[str] = []
        try:
            times = [timed(e, hw, topo, f"{label} ({h} heads, x{groups})", chain_rows)
                     for e, label in chain]
        except PlanNotFoundError:
            continue
        unfused_s = groups * sum(times)
        rows += chain_rows
        break
    print("\n".join(rows))
    print()
    print(f"fused: {fused_s * 1e3:.3f} ms, {flops / fused_s / peak * 100:.1f}% of peak")
    if unfused_s is not None:
        print(f"unfused (lower bound: no re-layouts, no HBM trips of the scores): "
              f"{unfused_s * 1e3:.3f} ms, {flops / unfused_s / peak * 100:.1f}% of peak; "
              f"fused is {unfused_s / fused_s:.2f}x faster")


if __name__ == "__main__":
    main()
