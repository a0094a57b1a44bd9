"""Measuring candidate plans on the simulated device, in worker processes.

A tuner measures on the device; here the device is the timing simulator
(:func:`runtime_sim.timing.simulate_timing`), which costs what the analytic model
approximates: routed shift phases, replica-reduction schedules, link contention. This module
is the only place in ``tvm_icca`` that imports it: the compiler proper (``tvm_icca.model_pass``,
``tvm_icca.plan_search``) never does.

What is measured: one operator under one plan, alone on the chip, as a one-operator device
program whose inputs already rest in the plan's placement (source ``"resident"`` without an
idle plan: no setup phase). Its time is the operator's execution on the compute array
(``end_s - start_s`` of its :class:`~runtime_sim.timing.OpTiming`): steps, shifts, replica
reduction and epilogue -- the quantity the analytic cost model estimates for a plan
(:class:`tvm_icca.plan_search.PlanCost`). Loads from HBM or the host and re-layouts between
operators depend on the operator's neighbours, not on its plan alone, and stay out.

Workers receive plain dicts and import only :mod:`runtime_sim` (no TVM), so a pool of
``spawn`` processes starts in about a second. With ``jobs <= 1`` everything runs in the
calling process.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
from dataclasses import dataclass
from typing import Any, Sequence

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl

__all__ = ["MeasureResult", "Measurer", "measure_program", "time_plan"]

#: Name of the measured operator's output in its one-operator program.
_OUT = "out"


@dataclass(frozen=True)
class MeasureResult:
    """The simulated seconds of one plan, or why it could not run."""

    seconds: float | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.seconds is not None


def measure_program(expr: TensorExpr, plan: ExecutionPlan, hw: HardwareSpec):
    """The one-operator device program a plan is measured with (module docstring)."""
    decls = tuple(TensorDecl(f"in{i}", tuple(a.shape), a.dtype, "resident")
                  for i, a in enumerate(expr.inputs))
    op = OpProgram("tune.op0", expr, plan, tuple(d.name for d in decls), _OUT)
    return DeviceProgram(region="tune", hardware=hw.to_dict(), inputs=decls, outputs=(_OUT,),
                         ops=(op,))


def time_plan(expr: TensorExpr, plan: ExecutionPlan, hw: HardwareSpec) -> MeasureResult:
    """Simulated execution time of ``expr`` under ``plan`` on ``hw``."""
    # Loaded on first use: `import tvm` imports tvm_icca, whose API names tvm_icca.tune, and a
    # session that never tunes should not pay for loading the timing simulator.
    from runtime_sim.timing import simulate_timing  # pylint: disable=import-outside-toplevel

    try:
        report = simulate_timing([measure_program(expr, plan, hw)], hw)
    except IccaError as err:  # the device refuses the plan (SRAM, validation): a failed trial
        return MeasureResult(None, f"{type(err).__name__}: {err}")
    op = report.per_op[0]
    return MeasureResult(float(op.end_s - op.start_s))


def _time_batch(hw: dict, expr: dict, plans: list[dict]) -> list[tuple[float | None, str | None]]:
    """Worker entry: plain data in, plain data out."""
    spec = HardwareSpec.from_dict(hw)
    parsed = TensorExpr.from_dict(expr)
    out = []
    for plan in plans:
        result = time_plan(parsed, ExecutionPlan.from_dict(plan), spec)
        out.append((result.seconds, result.error))
    return out


class Measurer:
    """Times batches of plans, in ``jobs`` worker processes (a context manager)."""

    def __init__(self, jobs: int = 1) -> None:
        self.jobs = max(1, int(jobs))
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def __enter__(self) -> "Measurer":
        if self.jobs > 1:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.jobs, mp_context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def measure(self, expr: TensorExpr, plans: Sequence[ExecutionPlan],
                hw: HardwareSpec) -> list[MeasureResult]:
        """Simulated time of every plan (in order)."""
        if not plans:
            return []
        if self._pool is None:
            return [time_plan(expr, p, hw) for p in plans]
        hw_d, expr_d = hw.to_dict(), expr.to_dict()
        size = -(-len(plans) // self.jobs)
        chunks = [list(plans[i:i + size]) for i in range(0, len(plans), size)]
        futures = [self._pool.submit(_time_batch, hw_d, expr_d, [p.to_dict() for p in chunk])
                   for chunk in chunks]
        results: list[MeasureResult] = []
        try:
            for future in futures:
                results.extend(MeasureResult(s, e) for s, e in future.result())
        except concurrent.futures.process.BrokenProcessPool as err:
            # the usual cause: workers are spawned, so they import the caller's __main__ again,
            # and a script that tunes at top level then tunes again inside every worker
            raise IccaError(
                f"the {self.jobs} worker processes measuring plans stopped before finishing. "
                "When tuning with jobs > 1 from a script, call tvm_icca.tune under "
                "`if __name__ == \"__main__\":` (workers start by importing the script), or "
                "pass jobs=1") from err
        return results
