"""A roofline estimate of device programs on a GPU: what an A100, H100 or B200 would take.

The GPU reads the same device programs the ICCA timing simulator reads
(:class:`~runtime_sim.contract.program.DeviceProgram`), but only their operators' semantics:
each operator's kind, shapes, dtypes and FLOPs, and where its inputs come from. The plans are
ignored. Each operator is one kernel, run one after another (no overlap between kernels), and
takes (Williams, Waterman & Patterson, "Roofline", CACM 2009)::

    time = max(FLOPs / (peak x efficiency), bytes / (HBM bandwidth x efficiency)) + launch

* FLOPs: what the timing simulator counts for the operator (the per-core template's
  ``flops`` over the whole operator, :func:`schedules.template_for`); the unit is the
  template's (``matrix``: tensor cores at the dense FP16/BF16 peak when the operator computes
  in a 16-bit type, :func:`schedules.base.compute_dtype`; everything else, float32 products
  included, at the FP32 CUDA-core peak: :meth:`GpuSpec.peak_flops
  <runtime_sim.contract.gpu.GpuSpec.peak_flops>`).
* bytes: the operator's compulsory HBM traffic. Every input is read once (the bytes it reads:
  :meth:`TensorExpr.read_bytes <runtime_sim.contract.expr.TensorExpr.read_bytes>`, a view's
  block, an embedding's rows; one tensor read at two sites once,
  :func:`runtime_sim.contract.hbm_reads.read_key`) and the output written once; model inputs,
  weights and KV caches all wait in HBM (T10 §6.6 warms the GPU up so that they do). The one
  reuse across kernels (the *L2 rule*): an input that is the output of the operator just
  before it in the same region, and no larger than the L2 cache, is read from L2, not HBM.
* blocked GEMM: a product (``matrix`` operator other than fused attention) whose operands and
  result together exceed L2 is computed in square output tiles of side ``b`` with
  ``3 b^2`` elements in L2 (a tile each of the two operands and of the result: the blocked
  algorithm of Lam, Rothberg & Wolf, ASPLOS 1991, whose traffic ``~2 M N K / b`` is within a
  constant of Hong & Kung's 1981 lower bound). The left operand is then read ``ceil(N/b)``
  times and the right one ``ceil(M/b)`` times (``M``, ``N``: the GEMM's output rows and
  columns, :func:`schedules.base.contraction_roles`; a batched product per batch element).
  A decode step's ``1 x K`` by ``K x N`` product therefore still reads its weights once.
* launch: :attr:`GpuSpec.launch_s <runtime_sim.contract.gpu.GpuSpec.launch_s>` per operator.

Beside the estimate, the *roofline bound*: the same sum at 100% of every peak and no launch
overhead, which no kernel sequence with this traffic beats. Energy comes from the one
formula, :func:`runtime_sim.contract.energy.run_energy`, with the GPU's table
(:meth:`GpuSpec.energy_table <runtime_sim.contract.gpu.GpuSpec.energy_table>`).

What it leaves out: kernel fusion beyond the L2 rule (TensorRT's fused layers, FlashAttention
beyond what the programs' own fused attention operators already are), TensorRT's kernel
choices and their measured efficiencies, tail effects of small grids (an operator too small to
fill the SMs runs at the same fraction of peak as a large one), caching across non-adjacent
operators, HBM capacity (a model larger than HBM is not refused), multi-GPU (one GPU), and
the host. It is an estimate, never a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from runtime_sim.contract.energy import ActionCounts, RunEnergy, run_energy
from runtime_sim.contract.expr import TensorExpr, dtype_bytes
from runtime_sim.contract.gpu import GpuSpec
from runtime_sim.contract.hbm_reads import read_key
from runtime_sim.contract.program import DeviceProgram, OpProgram
from runtime_sim.contract.stream import PRODUCED, input_sources
from runtime_sim.contract.units import format_bytes, in_unit, time_unit
from schedules import template_for
from schedules.base import compute_dtype, contraction_roles

__all__ = ["GpuOpRow", "GpuReport", "estimate_gpu", "blocked_gemm_rereads", "op_traffic"]

#: What a report says the numbers are, wherever it prints them.
NOT_MEASURED = ("a roofline estimate and bound from peak rates and HBM traffic, "
                "not a measurement")


@dataclass(frozen=True)
class GpuOpRow:
    """One operator on the GPU: its FLOPs, HBM bytes, estimated time and roofline bound."""

    name: str
    label: str
    kind: str
    flops: float
    hbm_traffic_bytes: float
    reread_bytes: float
    time_s: float
    roofline_s: float
    bound_by: str  # "flops" or "hbm": which term of the estimate is larger

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "kind": self.kind, "flops": self.flops,
                "hbm_traffic_bytes": self.hbm_traffic_bytes, "reread_bytes": self.reread_bytes,
                "time_s": self.time_s, "roofline_s": self.roofline_s, "bound_by": self.bound_by}


@dataclass
class GpuReport:
    """A model's device programs priced on one GPU (:func:`estimate_gpu`).

    ``total_s`` is the estimate (efficiencies and launch overhead included), ``roofline_s``
    the bound (every peak at 100%, no launch overhead); ``energy`` is the shared formula's
    (:func:`runtime_sim.contract.energy.run_energy`), ``None`` when the GPU has no energies.
    Both times are estimates from peak rates, never measurements.
    """

    gpu: GpuSpec
    rows: list[GpuOpRow]
    num_regions: int
    total_s: float
    roofline_s: float
    launch_overhead_s: float
    counts: ActionCounts
    energy: RunEnergy | None = None
    model: str = ""

    @property
    def flops(self) -> float:
        return sum(r.flops for r in self.rows)

    @property
    def hbm_traffic_bytes(self) -> float:
        return sum(r.hbm_traffic_bytes for r in self.rows)

    @property
    def reread_bytes(self) -> float:
        return sum(r.reread_bytes for r in self.rows)

    def to_dict(self, per_op: bool = False) -> dict[str, Any]:
        """Run-level numbers under the glossary's names (:mod:`runtime_sim.contract.metrics`);
        ``per_op`` adds one row per operator."""
        out: dict[str, Any] = {
            "hardware": self.gpu.name, "estimate_kind": NOT_MEASURED,
            "total_s": self.total_s, "roofline_s": self.roofline_s,
            "launch_overhead_s": self.launch_overhead_s, "num_ops": len(self.rows),
            "num_regions": self.num_regions, "flops": self.flops,
            "hbm_traffic_bytes": self.hbm_traffic_bytes, "reread_bytes": self.reread_bytes,
            "hbm_bound_ops": sum(r.bound_by == "hbm" for r in self.rows),
            "assumed_fields": self.gpu.assumed_fields,
            "matrix_flops": self.counts.total_matrix_flops, "vector_flops": self.counts.vector_flops,
            **(self.energy.to_dict() if self.energy is not None
               else {"energy_j": None, "average_power_w": None}),
        }
        if self.model:
            out["model"] = self.model
        if per_op:
            out["per_op"] = [r.to_dict() for r in self.rows]
        return out

    def table(self, max_ops: int | None = 20) -> str:
        """A readable summary: the estimate beside the roofline bound, the bytes, the energy,
        then the slowest operators; it says that these are estimates, not measurements."""
        unit = time_unit(self.total_s)
        _t = lambda s: f"{in_unit(s, unit)} {unit[0]}"  # noqa: E731
        g = self.gpu
        lines = [
            f"GPU reference on {g.name} ({g.notes}): {len(self.rows)} operators in "
            f"{self.num_regions} region call(s); {NOT_MEASURED}",
            f"  estimate  {_t(self.total_s)}   (tensor {g.tensor_efficiency:.0%}, fp32 "
            f"{g.fp32_efficiency:.0%}, hbm {g.hbm_efficiency:.0%} of peak; launch "
            f"{_t(self.launch_overhead_s)})",
            f"  roofline  {_t(self.roofline_s)}   (every peak at 100%, no launch overhead: a "
            f"bound)",
            f"  traffic   hbm {format_bytes(self.hbm_traffic_bytes)} (blocked-GEMM re-reads "
            f"{format_bytes(self.reread_bytes)}), {self.flops / 1e9:.3f} GFLOP, "
            f"{sum(r.bound_by == 'hbm' for r in self.rows)}/{len(self.rows)} operators "
            f"HBM-bound",
        ]
        if self.energy is not None:
            e = self.energy
            lines.append(f"  energy    {e.energy_j:.4g} J, average {e.average_power_w:.1f} W "
                         f"(board {e.board_power_w:.0f} W)")
            if e.warning():
                lines.append(f"  warning: {e.warning()}")
        if g.assumed:
            lines.append("  assumed (not sourced): " + ", ".join(n for n, _ in g.assumed))
        rows = sorted(self.rows, key=lambda r: -r.time_s)[:max_ops or None]
        if rows:
            lines.append(f"  {'operator':<40} {'time ' + unit[0]:>10} {'roofline':>10} {'GFLOP':>9} "
                         f"{'hbm':>10}  bound")
            for r in rows:
                lines.append(f"  {r.label[:40]:<40} {in_unit(r.time_s, unit, 10)} "
                             f"{in_unit(r.roofline_s, unit, 10)} {r.flops / 1e9:9.3f} "
                             f"{format_bytes(r.hbm_traffic_bytes):>10}  {r.bound_by}")
        return "\n".join(lines)


def _unit(expr: TensorExpr) -> str:
    return getattr(template_for(expr.kind), "unit", "vector")


def blocked_gemm_rereads(expr: TensorExpr, l2_bytes: float) -> float:
    """Bytes a product re-reads from HBM beyond one read of each operand when its operands
    and result exceed the L2 cache (the module's blocked-GEMM rule; 0 otherwise, and for
    anything but a non-attention ``matrix`` operator with two operands). A re-read is of the
    whole operand, also when its first read came from L2 (the L2 rule).
    """
    if _unit(expr) != "matrix" or expr.kind == "attention":
        return 0.0
    main = [t for t in range(len(expr.inputs)) if t not in expr.epilogue_inputs]
    if len(main) < 2:
        return 0.0
    a, b = main[0], main[1]
    a_bytes, b_bytes = float(expr.read_bytes(a)), float(expr.read_bytes(b))
    out_bytes = float(expr.read_bytes(len(expr.inputs)))
    if a_bytes + b_bytes + out_bytes <= l2_bytes:
        return 0.0
    roles = contraction_roles(expr)
    m = math.prod(expr.extent(x) for x in roles.m)
    n = math.prod(expr.extent(x) for x in roles.n)
    side = max(1, math.isqrt(int(l2_bytes // (3 * dtype_bytes(compute_dtype(expr))))))
    return a_bytes * (math.ceil(n / side) - 1) + b_bytes * (math.ceil(m / side) - 1)


def op_traffic(op: OpProgram, sources: Sequence[str], l2_input: str | None,
               l2_bytes: float) -> tuple[float, float]:
    """(HBM bytes, of which blocked-GEMM re-reads) of one operator: each input once (by
    :func:`~runtime_sim.contract.hbm_reads.read_key`), none for ``l2_input`` (the previous
    operator's output still in L2), the output once, plus :func:`blocked_gemm_rereads`."""
    expr = op.expr
    reads: dict[str, float] = {}
    for t in range(len(expr.inputs)):
        if sources[t] == PRODUCED and op.input_names[t] == l2_input:
            nbytes = 0.0
        else:
            nbytes = float(expr.read_bytes(t))
        key = read_key(expr, t, op.input_names)
        reads[key] = max(reads.get(key, 0.0), nbytes)
    rereads = blocked_gemm_rereads(expr, l2_bytes)
    written = float(expr.read_bytes(len(expr.inputs)))
    return sum(reads.values()) + written + rereads, rereads


def estimate_gpu(programs: Sequence[DeviceProgram], gpu: GpuSpec, *, model: str = "") -> GpuReport:
    """Price a model's device programs (one per region call, in run order) on ``gpu``.

    Parameters
    ----------
    programs : sequence of DeviceProgram
        The programs the ICCA compiler emitted for the model (any ICCA chip: only the
        operators' semantics are read).
    gpu : GpuSpec
        The GPU (:func:`runtime_sim.contract.gpu.gpu_preset`).
    model : str
        The model's name, for the report.

    Returns
    -------
    GpuReport
        The estimate, the roofline bound, per-operator rows and the energy. An estimate from
        peak rates and traffic (module docstring), never a measurement.
    """
    rows: list[GpuOpRow] = []
    matrix: dict[str | None, float] = {}
    vector = hbm = 0.0
    for program in programs:
        sources = input_sources(program, has_hbm=True)
        previous: OpProgram | None = None
        for op, srcs in zip(program.ops, sources):
            expr = op.expr
            l2_input = None
            if previous is not None and expr_out_bytes(previous.expr) <= gpu.l2_bytes:
                l2_input = previous.output_name
            nbytes, rereads = op_traffic(op, srcs, l2_input, gpu.l2_bytes)
            unit, dtype = _unit(expr), compute_dtype(expr)
            flops = float(template_for(expr.kind).flops(expr, {}))
            peak = gpu.peak_flops(unit, dtype)
            compute_s = flops / (peak * gpu.efficiency(unit, dtype))
            hbm_s = nbytes / (gpu.hbm_bandwidth * gpu.hbm_efficiency)
            roofline = max(flops / peak, nbytes / gpu.hbm_bandwidth)
            rows.append(GpuOpRow(
                name=op.name, label=op.display_label(), kind=expr.kind, flops=flops,
                hbm_traffic_bytes=nbytes, reread_bytes=rereads,
                time_s=max(compute_s, hbm_s) + gpu.launch_s, roofline_s=roofline,
                bound_by="flops" if compute_s >= hbm_s else "hbm"))
            if unit == "matrix":
                matrix[dtype] = matrix.get(dtype, 0.0) + flops
            else:
                vector += flops
            hbm += nbytes
            previous = op
    total = sum(r.time_s for r in rows)
    counts = ActionCounts.of(matrix, vector_flops=vector, hbm_bytes=hbm)
    return GpuReport(
        gpu=gpu, rows=rows, num_regions=len(programs), total_s=total,
        roofline_s=sum(r.roofline_s for r in rows), launch_overhead_s=gpu.launch_s * len(rows),
        counts=counts, energy=run_energy(counts, gpu.energy_table(), total, cores=0, chips=1),
        model=model)


def expr_out_bytes(expr: TensorExpr) -> float:
    """Bytes of an operator's output (what the L2 rule compares with the L2 size)."""
    return float(expr.read_bytes(len(expr.inputs)))
