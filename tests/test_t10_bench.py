"""The T10 benchmark model (tvm_icca.plan_search.t10_bench): exact optimum, semantics, CLI.

The reference optimum is the problem statement written as plain nested loops, sharing no
code with the vectorized search.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import time
from contextlib import redirect_stdout

import numpy as np
import pytest

from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from tvm_icca.cli.main import main as cli_main
from tvm_icca.plan_search.plan_space import op_partitions, plans_for
from tvm_icca.plan_search.search_memo import plan_structure
from tvm_icca.plan_search.t10_bench import (
    T10BenchModel,
    T10BenchSpec,
    bench_cost,
    bench_expr,
    bench_pareto,
    solve,
)


def reference_optimum(M: int, K: int, N: int, spec: T10BenchSpec) -> float:
    """Min time of the benchmark model over every valid, fitting plan and loop order."""
    ext = {"m": M, "k": K, "n": N}
    s = spec.systolic
    best = math.inf

    def aligned(x: int, y: int) -> bool:
        return x % y == 0 or y % x == 0

    for Fm in range(1, M + 1):
        for Fk in range(1, K + 1):
            for Fn in range(1, N + 1):
                if Fm * Fk * Fn > spec.cores:
                    continue
                F = {"m": Fm, "k": Fk, "n": Fn}
                for am, ak, bk, bn, cm, cn in itertools.product(
                        range(1, Fn + 1), range(1, Fn + 1), range(1, Fm + 1), range(1, Fm + 1),
                        range(1, Fk + 1), range(1, Fk + 1)):
                    if Fn % (am * ak) or Fm % (bk * bn) or Fk % (cm * cn):
                        continue
                    if not (aligned(am, cm) and aligned(ak, bk) and aligned(bn, cn)):
                        continue
                    ft = {"A": {"m": am, "k": ak}, "B": {"k": bk, "n": bn}, "C": {"m": cm, "n": cn}}
                    S = {x: max(ft[T].get(x, 1) for T in ft) for x in "mkn"}
                    xp = {x: S[x] * math.ceil(math.ceil(ext[x] / F[x]) / S[x]) for x in "mkn"}
                    size = {T: math.prod(xp[x] // f for x, f in ft[T].items()) for T in ft}
                    memory = 2 * sum(size.values()) + spec.shift_buffer_bytes
                    if memory > spec.sram_bytes:
                        continue
                    rp = {x: xp[x] // S[x] for x in "mkn"}
                    per_step = math.prod(s * math.ceil(rp[x] / s) for x in "mkn") / (s * s)
                    compute = S["m"] * S["k"] * S["n"] * per_step / spec.clock_hz
                    R = Fk // (cm * cn)
                    reduction = (R - 1) / R * size["C"] * 2 / spec.link_bandwidth if R > 1 else 0.0
                    for order in itertools.permutations("mkn"):
                        moved = 0
                        for i, x in enumerate(order):
                            outer = math.prod(S[y] for y in order[:i])
                            for T in ft:
                                if ft[T].get(x, 1) > 1:
                                    moved += ft[T][x] * outer * size[T] * 2
                        best = min(best, compute + moved / spec.link_bandwidth + reduction)
    return best


SMALL = [
    # (M, K, N, cores, SRAM bytes, systolic): the smallest SRAMs sit just above the least
    # footprint, so the optimum rotates (on one or two axes); odd extents pad.
    (6, 20, 12, 16, 126, 4),
    (6, 20, 12, 16, 174, 4),
    (5, 12, 9, 12, 106, 2),
    (8, 16, 8, 16, 120, 16),
    (4, 18, 10, 24, 92, 4),
    (8, 40, 24, 32, 156, 4),
    (8, 40, 24, 32, 276, 4),
    (12, 30, 20, 48, 138, 4),
    (12, 30, 20, 48, 242, 4),
]


@pytest.mark.parametrize("M,K,N,cores,sram,systolic", SMALL)
def test_solve_is_the_exhaustive_optimum(M, K, N, cores, sram, systolic) -> None:
    spec = T10BenchSpec(cores=cores, sram_bytes=sram, shift_buffer_bytes=64, systolic=systolic)
    expected = reference_optimum(M, K, N, spec)
    assert math.isfinite(expected)
    answer = solve(M, K, N, spec)
    assert answer.time_s == pytest.approx(expected, rel=1e-12)
    terms = bench_cost(M, K, N, answer.F_op, answer.f_t, spec)
    assert terms["valid"] and terms["fits"]
    assert terms["time_s"] == pytest.approx(expected, rel=1e-12)


def test_tight_memory_optima_rotate() -> None:
    """The small cases above exercise rotation on one and on two axes."""
    loops = set()
    for M, K, N, cores, sram, systolic in SMALL:
        spec = T10BenchSpec(cores=cores, sram_bytes=sram, shift_buffer_bytes=64, systolic=systolic)
        loops.add(len(solve(M, K, N, spec).loop_order))
    assert {1, 2} <= loops


def test_vectorized_model_matches_the_written_out_model() -> None:
    spec = T10BenchSpec(cores=32, sram_bytes=10**6, systolic=4)
    M, K, N = 12, 30, 20
    structure = plan_structure(bench_expr(M, K, N))
    batch = plans_for(structure, op_partitions(structure, spec.cores))
    times, _ = T10BenchModel(spec).times(batch)
    memory = batch.memory()
    rng = np.random.default_rng(3)
    for i in rng.choice(len(batch), 200, replace=False):
        plan = batch.plan(int(i))
        f_t = {"f_t_A_m": plan.ft(0, "m"), "f_t_A_k": plan.ft(0, "k"), "f_t_B_k": plan.ft(1, "k"),
               "f_t_B_n": plan.ft(1, "n"), "f_t_C_m": plan.ft(2, "m"), "f_t_C_n": plan.ft(2, "n")}
        terms = bench_cost(M, K, N, (plan.F("m"), plan.F("k"), plan.F("n")), f_t, spec)
        assert terms["valid"]
        assert times[i] == pytest.approx(terms["time_s"], rel=1e-12)
        assert memory[i] + spec.shift_buffer_bytes == terms["memory_bytes"]


def test_layout_semantics_are_the_benchmark_semantics() -> None:
    """OpLayout's padded extents, shift counts, replicas and memory are the model's."""
    M, K, N = 10, 24, 18
    structure = plan_structure(bench_expr(M, K, N))
    batch = plans_for(structure, op_partitions(structure, 36))
    rng = np.random.default_rng(4)
    ext = {"m": M, "k": K, "n": N}
    for i in rng.choice(len(batch), 150, replace=False):
        for order in itertools.permutations("mkn"):
            base = batch.plan(int(i))
            plan = ExecutionPlan(base.op_partition, base.temporal, tuple(x for x in order if x in base.loop_order))
            layout = OpLayout(bench_expr(M, K, N), plan)
            layout.validate()
            S = {x: max(plan.ft(t, x) for t in range(3)) for x in "mkn"}
            for x in "mkn":
                assert layout.xp[x] == S[x] * math.ceil(math.ceil(ext[x] / plan.F(x)) / S[x])
            loops = layout.loop_axes
            for t in range(3):
                for x in "mkn":
                    f = plan.ft(t, x)
                    outer = math.prod(S[y] for y in loops[: loops.index(x)]) if x in loops else 1
                    assert layout.shift_count_per_core(t, x) == (f * outer if f > 1 else 0)
            assert layout.replicas(2) == plan.F("k") // (plan.ft(2, "m") * plan.ft(2, "n"))
            sizes = [(layout.xp[a] // plan.ft(t, a)) * (layout.xp[b] // plan.ft(t, b))
                     for t, (a, b) in enumerate([("m", "k"), ("k", "n"), ("m", "n")])]
            assert layout.memory_bytes_per_core() == 2 * sum(sizes)


def test_benchmark_answer() -> None:
    """M=32, K=5120, N=15360 on the IPU Mk2 model: found in well under 10 s."""
    start = time.perf_counter()
    answer = solve(32, 5120, 15360)
    assert time.perf_counter() - start < 10
    terms = bench_cost(32, 5120, 15360, answer.F_op, answer.f_t)
    assert terms["valid"] and terms["fits"] and answer.cores <= 1472
    assert answer.time_s == pytest.approx(terms["time_s"])
    ideal = 32 * 5120 * 15360 / (1472 * 256) / 1.33e9  # every MAC of every core busy
    assert ideal < answer.time_s < 1.2 * ideal
    data = answer.to_json_dict()
    assert list(data) == ["F_op", "f_t_A_m", "f_t_A_k", "f_t_B_k", "f_t_B_n", "f_t_C_m",
                          "f_t_C_n", "time_s", "cores"]


def test_pareto_plans_trade_memory_for_time() -> None:
    front = bench_pareto(32, 5120, 15360)
    assert 1 < len(front) < 50
    memory = [p.memory_bytes for p in front]
    times = [p.time_s for p in front]
    assert memory == sorted(memory) and times == sorted(times, reverse=True)
    assert len(set(memory)) == len(memory)


def _cli(*argv: str) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli_main([*argv, "--json"]) == 0
    return json.loads(out.getvalue())


def test_cli_plan_matmul() -> None:
    keys = ["F_op", "f_t_A_m", "f_t_A_k", "f_t_B_k", "f_t_B_n", "f_t_C_m", "f_t_C_n", "time_s", "cores"]
    bench = _cli("plan", "matmul", "--m", "32", "--k", "5120", "--n", "15360", "--dtype", "float16",
                 "--hw", "ipu-mk2", "--cost-model", "t10-bench")
    assert list(bench) == keys
    assert bench == solve(32, 5120, 15360).to_json_dict()
    analytic = _cli("plan", "matmul", "--m", "64", "--k", "256", "--n", "512", "--pareto")
    assert list(analytic) == ["axes"] + keys + ["pareto"] and analytic["axes"] == ["m", "k", "n"]
    assert len(analytic["F_op"]) == 3 and analytic["cores"] == math.prod(analytic["F_op"])
    assert all(set(p) == set(keys) | {"memory_bytes"} for p in analytic["pareto"])
    conv = _cli("plan", "conv2d", "--channels", "8", "--height", "12", "--width", "12", "--filters", "8")
    assert conv["axes"] == ["b", "o", "y", "x", "c", "kh", "kw"] and len(conv["F_op"]) == 7
