"""One prefill attention of Llama2-13B on ``ipu-pod4-hbm``: the fused attention operator's
best plan against the three operators it replaces (issue 41, item 1).

The fused operator (kind ``attention``, :func:`tvm_icca.testing.exprs.attention_expr`: all 40
heads, head dimension 128, float16, causal) is planned with the
exact search (:func:`tvm_icca.plan_search.plan_operator`) and timed by the timing
simulator's operator cost (:func:`runtime_sim.timing.opcost.op_cost`). The unfused chain is
``Q K^T``, the softmax with the mask added, and ``P V``; their ``40 x S x S`` scores do not fit
the chips' SRAM, so each is planned on the fewest equal head groups that fit and its time is
multiplied by the number of groups. That sum leaves out what the unfused chain really pays
between its operators (re-layouts of the scores, their trips through HBM): it is a lower
bound of the unfused time. FLOPS utilization is the operator's FLOPs
(:meth:`runtime_sim.contract.expr.TensorExpr.flops`, ``4 H S^2 D``, masked scores included)
over its simulated time and the chips' float16 matrix peak. Three forms of the fused operator
are compared: the zoo's ``[S, S]`` mask tensor, the mask on axis values (what the partitioner
makes of a causal mask), and that cut into query pieces each over only the keys its rows see
(the split rewrite's causal cut), whose executed FLOPs are about half the written ones.

    .venv/bin/python benchmarks/fused_attention.py [--seq 8192 16384] [--pieces 8] [--unfused]

Writes ``benchmarks/results/fused_attention.md``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.expr import Axis, TensorAccess, TensorExpr
from runtime_sim.contract.presets import preset
from runtime_sim.machine.topology import make_topology
from runtime_sim.timing.opcost import op_cost
from tvm_icca.plan_search import plan_operator
from tvm_icca.split.pieces import split_blocks, sub_expression
from tvm_icca.split.visible_keys import trim_to_visible_keys
from tvm_icca.testing import exprs as ex

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from result_files import write_markdown  # noqa: E402  (benchmarks/, beside this script)

RESULTS = pathlib.Path(__file__).resolve().parent / "results"

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


def causal_pieces(seq: int, pieces: int) -> list[TensorExpr]:
    """The fused attention with its causal mask on axis values, cut into ``pieces`` query
    blocks each over the keys its rows see, as the split rewrite cuts it
    (:func:`tvm_icca.split.split_choice.causal_split`, :mod:`tvm_icca.split.visible_keys`)."""
    whole = ex.attention_expr(seq, seq, HEAD_DIM, batch=(1, HEADS), causal=True, dtype="float16")
    return [trim_to_visible_keys(sub_expression(whole, "i", start, length, whole.output.name))
            for start, length in split_blocks(seq, pieces)]


def variants(seq: int, pieces: int) -> list[tuple[str, list[TensorExpr]]]:
    """The fused attention of one prompt length in the three forms the table compares."""
    def fused(**mask) -> TensorExpr:
        return ex.attention_expr(seq, seq, HEAD_DIM, batch=(1, HEADS), dtype="float16", **mask)

    return [("[S, S] mask tensor", [fused(mask=True)]),
            ("mask on axis values", [fused(causal=True)]),
            (f"mask on axis values, {pieces} query pieces over their visible keys",
             causal_pieces(seq, pieces))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="+", default=[8192, 16384], help="prompt lengths S")
    parser.add_argument("--pieces", type=int, default=8, help="query pieces of the causal cut")
    parser.add_argument("--unfused", action="store_true",
                        help="also the unfused chain's lower bound (minutes per length)")
    args = parser.parse_args(argv)
    hw = preset(HARDWARE)
    topo = make_topology(hw)
    peak = hw.peak_flops("matrix", "float16")
    plans = ["| S | operator | F_op | rotating (f_t) | steps | estimate ms | simulated ms | "
             "compute ms | shifts ms | bytes/core | search s |",
             "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    summary = ["| S | form | simulated ms | executed TFLOP | FLOPS util | written TFLOP | "
               "written FLOPs / time / peak |", "|---:|---|---:|---:|---:|---:|---:|"]
    for seq in args.seq:
        written = ex.attention_expr(seq, seq, HEAD_DIM, batch=(1, HEADS), causal=True,
                                    dtype="float16").flops()
        for form, exprs in variants(seq, args.pieces):
            rows: list[str] = []
            seconds = sum(timed(e, hw, topo, f"{form}" + (f", part {k + 1}" if len(exprs) > 1 else ""),
                                rows) for k, e in enumerate(exprs))
            plans += [f"| {seq} {r}" for r in rows]
            executed = sum(e.flops() for e in exprs)
            summary.append(f"| {seq} | {form} | {seconds * 1e3:.3f} | {executed / 1e12:.3f} | "
                           f"{executed / seconds / peak:.1%} | {written / 1e12:.3f} | "
                           f"{written / seconds / peak:.1%} |")
            print(summary[-1], flush=True)
        if args.unfused:
            unfused = unfused_lower_bound(seq, hw, topo, plans)
            if unfused is not None:
                summary.append(f"| {seq} | unfused chain, lower bound (no re-layouts, no HBM "
                               f"trips of the scores) | {unfused * 1e3:.3f} | {written / 1e12:.3f} | "
                               f"{written / unfused / peak:.1%} | {written / 1e12:.3f} | "
                               f"{written / unfused / peak:.1%} |")
    write_markdown(RESULTS / "fused_attention.md", "\n".join(
        ["# Fused attention: one prefill attention of Llama2-13B", "",
         f"`{HARDWARE}`: {hw.num_cores} cores, float16 matrix peak {peak / 1e12:.1f} TFLOPS; "
         f"{HEADS} heads of {HEAD_DIM}, float16, causal. Executed: the FLOPs the operators "
         "run (`TensorExpr.flops`); written: every score of the `S x S` matrix, as the model "
         "writes it (the numerator of model FLOPs utilization). The query pieces skip the "
         "scores the causal mask hides, about half, so their written FLOPs over time can "
         "exceed the peak: that column compares the forms' times, not the chip's use. Each form's operators are planned by the exact search and timed by the "
         "timing simulator's operator cost, one after another (no re-layouts between the "
         "query pieces are counted: the split rewrite's pieces read views of Q, K and V).", ""]
        + summary + ["", "## Plans", ""] + plans))


def unfused_lower_bound(seq: int, hw, topo, rows: list[str]) -> float | None:
    """``Q K^T``, the masked softmax and ``P V`` on the fewest equal head groups that fit,
    times the groups (see the module docstring), or ``None`` if no grouping fits."""
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
        rows += [f"| {seq} {r}" for r in chain_rows]
        return groups * sum(times)
    return None


if __name__ == "__main__":
    main()
