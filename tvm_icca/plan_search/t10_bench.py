"""The T10 benchmark problem, modelled exactly (the matmul problem posed with T10 SOSP'24's artifact).

``C[m, n] += A[m, k] * B[k, n]`` in fp16 on an IPU Mk2 with a 16x16 systolic array per core.
The plan is ``F_op = [F_m, F_k, F_n]`` and the six temporal factors ``f_t_A_m``, ``f_t_A_k``,
``f_t_B_k``, ``f_t_B_n``, ``f_t_C_m``, ``f_t_C_n``; the model:

* ``F_m * F_k * F_n <= cores``, ``1 <= F_x <= extent``; ``f_t_A_m * f_t_A_k | F_n``,
  ``f_t_B_k * f_t_B_n | F_m``, ``f_t_C_m * f_t_C_n | F_k`` (T10 §4.2: ``prod f_t`` divides the
  sharing count); on each axis the temporal factors are pairwise factor/multiple.
* ``S_x`` = largest temporal factor on ``x``; ``x_p = S_x * ceil(ceil(X / F_x) / S_x)``; a
  tensor's partition on ``x`` is ``x_p / f_t``; ``rp_x = x_p / S_x``.
* Memory: ``2 * (|A| + |B| + |C|) + 8192 <= 624 KiB`` (partitions, 8 KiB shift buffer).
* Compute per step: ``ceil16(rp_m) * ceil16(rp_k) * ceil16(rp_n) / 256`` cycles, for
  ``S_m * S_k * S_n`` steps at 1.33 GHz.
* Shifts under the best of the six loop orders: a tensor with ``f_t = t > 1`` on ``x`` moves
  its whole partition ``t * prod(S of the loops outside x)`` times at 5.5 GB/s.
* ``R = F_k / (f_t_C_m * f_t_C_n) > 1`` output replicas add ``(R - 1) / R * |C| * 2 B``
  at 5.5 GB/s for the final reduction.

These are exactly the plan semantics of :class:`runtime_sim.contract.layout.OpLayout` for a matmul
(padded extents, ``shift_count_per_core``, replicas), so the plan space is the one of
:mod:`.plan_space` and the search is the exact branch and bound of :mod:`.search`, with
:class:`T10BenchModel` as its cost model. :func:`bench_cost` evaluates one plan in plain
Python, term by term, for reporting.
"""

from __future__ import annotations

import itertools
import math
import time as _time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.expr import (
    AffineIndex,
    Axis,
    TensorAccess,
    TensorExpr,
    dtype_bytes,
    make_load,
)
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.plan import ExecutionPlan
from tvm_icca.plan_search.batch_cost import best_loop_order, rotation_shift_bound
from tvm_icca.plan_search.filters import PlanFilters
from tvm_icca.plan_search.intmath import ceil_div
from tvm_icca.plan_search.pareto import pareto_scored
from tvm_icca.plan_search.plan_space import PlanBatch, sharing_counts
from tvm_icca.plan_search.scoring import ScoredPlans
from tvm_icca.plan_search.search import best_plan
from tvm_icca.plan_search.search_memo import plan_structure
from tvm_icca.plan_search.structure import PlanStructure

#: Keys of a benchmark answer, in the problem statement's order (plus time and cores).
PLAN_KEYS = ("F_op", "f_t_A_m", "f_t_A_k", "f_t_B_k", "f_t_B_n", "f_t_C_m", "f_t_C_n")


@dataclass(frozen=True)
class T10BenchSpec:
    """The benchmark's hardware figures (IPU Mk2 with a systolic array, T10 §2.1, §5)."""

    cores: int = 1472
    sram_bytes: int = 624 * 1024
    shift_buffer_bytes: int = 8 * 1024
    link_bandwidth: float = 5.5e9
    clock_hz: float = 1.33e9
    systolic: int = 16  # a systolic x systolic array: systolic**2 MAC per cycle
    elem_bytes: int = 2  # fp16

    @property
    def budget_bytes(self) -> int:
        """Bytes per core for the three partitions (the shift buffer is reserved)."""
        return self.sram_bytes - self.shift_buffer_bytes

    @classmethod
    def from_hardware(cls, hw: HardwareSpec, dtype: str = "float16") -> "T10BenchSpec":
        """The benchmark model on another chip: its cores, SRAM, links and clock.

        The per-core unit stays a square systolic array of the chip's matrix tile width.
        """
        return cls(cores=hw.num_cores, sram_bytes=hw.sram_bytes_per_core,
                   shift_buffer_bytes=hw.shift_buffer_bytes, link_bandwidth=hw.link_bandwidth,
                   clock_hz=hw.clock_hz, systolic=int(hw.matrix_tile[0]),
                   elem_bytes=dtype_bytes(dtype))


def bench_expr(M: int, K: int, N: int, dtype: str = "float16") -> TensorExpr:
    """``C[m, n] += A[m, k] * B[k, n]`` with axes in the benchmark's order ``m, k, n``."""
    ax = AffineIndex.of_axis
    a = TensorAccess("A", (M, K), dtype, (ax("m"), ax("k")))
    b = TensorAccess("B", (K, N), dtype, (ax("k"), ax("n")))
    c = TensorAccess("C", (M, N), dtype, (ax("m"), ax("n")))
    body = {"op": "mul", "args": [make_load(0, a.indices), make_load(1, b.indices)]}
    return TensorExpr("matmul", (Axis("m", M), Axis("k", K, True), Axis("n", N)), (a, b), c, body)


class T10BenchModel:
    """The benchmark's time model as a batch cost model (exact, vectorized)."""

    def __init__(self, spec: T10BenchSpec = T10BenchSpec()):
        self.spec = spec

    def _axes(self, structure: PlanStructure) -> tuple[int, int, int]:
        idx = {a: i for i, a in enumerate(structure.axes)}
        return idx["m"], idx["k"], idx["n"]

    def _step_cycles(self, structure: PlanStructure, chunk: np.ndarray) -> np.ndarray:
        s = self.spec.systolic
        m, k, n = self._axes(structure)
        c16 = [ceil_div(chunk[:, a], s) * s for a in (m, k, n)]
        return (c16[0] * c16[1] * c16[2]).astype(float) / (s * s)

    def components(self, batch: PlanBatch):
        spec = self.spec
        structure = batch.structure
        S = batch.S
        xp = batch.xp
        steps = np.prod(S, axis=1).astype(float)
        compute = steps * self._step_cycles(structure, xp // S) / spec.clock_hz
        parts = batch.partition_bytes(xp)
        ft = batch.ft
        w = (np.where(ft > 1, ft, 0) * (parts / spec.link_bandwidth)[:, :, None]).sum(axis=1)
        order, shift = best_loop_order(S, w)
        out = structure.num_tensors - 1
        R = (sharing_counts(structure, batch.F)[:, out] // np.prod(ft[:, out], axis=1)).astype(float)
        reduction = np.where(R > 1, (R - 1) / R * parts[:, out] / spec.link_bandwidth, 0.0)
        time = compute + shift + reduction
        return (time, order), {"compute_s": compute, "shift_s": shift, "reduction_s": reduction}

    def times(self, batch: PlanBatch) -> tuple[np.ndarray, np.ndarray]:
        return self.components(batch)[0]

    def time_lower_bound(self, structure: PlanStructure, F: np.ndarray) -> np.ndarray:
        # steps * ceil16(rp) >= ceil16(xp) >= ceil16(ceil(X / F)) on every axis.
        c = ceil_div(structure.extents[None, :], F)
        return self._step_cycles(structure, c) / self.spec.clock_hz

    def rotating_lower_bound(self, structure: PlanStructure, F: np.ndarray,
                             budget: float = math.inf) -> np.ndarray:
        shift = rotation_shift_bound(structure, F, 1.0 / self.spec.link_bandwidth, budget)
        return self.time_lower_bound(structure, F) + shift


@dataclass(frozen=True)
class BenchPlan:
    """An answer to the benchmark: the plan, its time by term, and the search statistics."""

    M: int
    K: int
    N: int
    F_op: tuple[int, int, int]
    f_t: Mapping[str, int]  # keys f_t_A_m ... f_t_C_n
    loop_order: tuple[str, ...]
    time_s: float
    compute_s: float
    shift_s: float
    reduction_s: float
    memory_bytes: int  # 2 * (|A| + |B| + |C|) + shift buffer
    search_s: float = field(default=0.0, compare=False)

    @property
    def cores(self) -> int:
        return math.prod(self.F_op)

    def to_json_dict(self) -> dict[str, Any]:
        """The answer format of the benchmark, plus ``time_s`` and ``cores``."""
        out: dict[str, Any] = {"F_op": list(self.F_op)}
        out.update({k: int(self.f_t[k]) for k in PLAN_KEYS[1:]})
        out["time_s"] = self.time_s
        out["cores"] = self.cores
        return out


def bench_cost(M: int, K: int, N: int, F_op: tuple[int, int, int], f_t: Mapping[str, int],
               spec: T10BenchSpec = T10BenchSpec()) -> dict[str, Any]:
    """The benchmark model for one plan, written out term by term (best of six orders).

    Returns the validity, memory and time terms; used to report a plan and to cross-check
    the vectorized model.
    """
    ext = {"m": M, "k": K, "n": N}
    F = dict(zip("mkn", F_op))
    ft = {("A", "m"): f_t["f_t_A_m"], ("A", "k"): f_t["f_t_A_k"], ("B", "k"): f_t["f_t_B_k"],
          ("B", "n"): f_t["f_t_B_n"], ("C", "m"): f_t["f_t_C_m"], ("C", "n"): f_t["f_t_C_n"]}
    dims = {"A": ("m", "k"), "B": ("k", "n"), "C": ("m", "n")}
    share = {"A": F["n"], "B": F["m"], "C": F["k"]}
    valid = math.prod(F_op) <= spec.cores and all(1 <= F[x] <= ext[x] for x in "mkn")
    for T, (x, y) in dims.items():
        valid &= share[T] % (ft[T, x] * ft[T, y]) == 0
    for x in "mkn":
        fs = [ft[T, x] for T in dims if x in dims[T]]
        valid &= fs[0] % fs[1] == 0 or fs[1] % fs[0] == 0
    S = {x: max(ft[T, x] for T in dims if x in dims[T]) for x in "mkn"}
    xp = {x: S[x] * math.ceil(math.ceil(ext[x] / F[x]) / S[x]) for x in "mkn"}
    rp = {x: xp[x] // S[x] for x in "mkn"}
    elems = {T: (xp[x] // ft[T, x]) * (xp[y] // ft[T, y]) for T, (x, y) in dims.items()}
    memory = spec.elem_bytes * sum(elems.values()) + spec.shift_buffer_bytes
    s = spec.systolic
    c = {x: s * math.ceil(rp[x] / s) for x in "mkn"}
    steps = S["m"] * S["k"] * S["n"]
    compute = steps * c["m"] * c["k"] * c["n"] / (s * s) / spec.clock_hz
    best = None
    for order in itertools.permutations("mkn"):
        moved = 0
        for i, x in enumerate(order):
            outer = math.prod(S[y] for y in order[:i])
            for T in dims:
                if x in dims[T] and ft[T, x] > 1:
                    moved += ft[T, x] * outer * elems[T] * spec.elem_bytes
        if best is None or moved < best[0]:
            best = (moved, order)
    shift = best[0] / spec.link_bandwidth
    R = F["k"] // (ft["C", "m"] * ft["C", "n"])
    reduction = (R - 1) / R * elems["C"] * spec.elem_bytes / spec.link_bandwidth if R > 1 else 0.0
    return {
        "valid": bool(valid), "fits": memory <= spec.sram_bytes, "memory_bytes": memory,
        "compute_s": compute, "shift_s": shift, "reduction_s": reduction,
        "time_s": compute + shift + reduction, "loop_order": tuple(x for x in best[1] if S[x] > 1),
    }


def _answer(M: int, K: int, N: int, scored: ScoredPlans, i: int, spec: T10BenchSpec,
            search_s: float = 0.0) -> BenchPlan:
    plan: ExecutionPlan = scored.plan(i)
    F_op = (plan.F("m"), plan.F("k"), plan.F("n"))
    f_t = {"f_t_A_m": plan.ft(0, "m"), "f_t_A_k": plan.ft(0, "k"), "f_t_B_k": plan.ft(1, "k"),
           "f_t_B_n": plan.ft(1, "n"), "f_t_C_m": plan.ft(2, "m"), "f_t_C_n": plan.ft(2, "n")}
    terms = bench_cost(M, K, N, F_op, f_t, spec)
    return BenchPlan(M, K, N, F_op, f_t, plan.loop_order, terms["time_s"], terms["compute_s"],
                     terms["shift_s"], terms["reduction_s"], terms["memory_bytes"], search_s)


def solve(M: int, K: int, N: int, spec: T10BenchSpec = T10BenchSpec(),
          filters: PlanFilters | None = None) -> BenchPlan:
    """The optimal plan of the benchmark model (exact; optional T10 search constraints)."""
    start = _time.perf_counter()
    structure = plan_structure(bench_expr(M, K, N, _dtype_of(spec)))
    best = best_plan(structure, T10BenchModel(spec), spec.budget_bytes, spec.cores, filters)
    if best is None:
        raise PlanNotFoundError(
            f"T10 benchmark matmul {M}x{K}x{N}: no plan fits {spec.budget_bytes} bytes per core "
            f"on {spec.cores} cores")
    return _answer(M, K, N, best, 0, spec, _time.perf_counter() - start)


def bench_pareto(M: int, K: int, N: int, spec: T10BenchSpec = T10BenchSpec(),
                 filters: PlanFilters | None = None) -> list[BenchPlan]:
    """Time/memory Pareto plans of the benchmark model (T10 §4.3.1), fewest bytes first."""
    structure = plan_structure(bench_expr(M, K, N, _dtype_of(spec)))
    front = pareto_scored(structure, T10BenchModel(spec), spec.cores,
                          PlanFilters.t10() if filters is None else filters, spec.budget_bytes)
    return [_answer(M, K, N, front, i, spec) for i in range(len(front))]


def _dtype_of(spec: T10BenchSpec) -> str:
    return {1: "int8", 2: "float16", 4: "float32", 8: "float64"}[spec.elem_bytes]
