"""The one point where tuning reaches into the compiler: a plan hook consulted per operator.

:func:`tvm_icca.model_pass.region_plans.plan_region` asks :func:`planned_with_hook` for every compute-shift
operator it has just planned. Without an active hook (the default) the planned operator is
returned as it is. A tuning session installs an observer (:mod:`tvm_icca.tuning.tasks`: which operators the
compiler plans, with which budget); :func:`tvm_icca.use_database` installs a provider
that may return a tuned plan instead (:mod:`tvm_icca.records.apply`). The hook lives in a
:class:`contextvars.ContextVar`, so it is scoped to a ``with`` block and to one thread or
task, never a module-level setting.

On a chip with HBM the Elk pass (:mod:`tvm_icca.model_pass.tradeoff_tables`) also asks the hook for
the measured plans of an operator (:func:`measured_plans`): they become execute-state
points with their measured times. Records carry simulated seconds; the compiler reads them
and never measures.

meta_schedule's own ``with database:`` is a route too (:func:`database_scope`): when no hook
is installed and the current meta_schedule database holds ICCA records, the model-level
compiler installs :func:`tvm_icca.use_database`'s hook over it for the compilation.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Protocol, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from runtime_sim.contract.expr import TensorExpr
    from runtime_sim.contract.hardware import HardwareSpec
    from runtime_sim.contract.plan import ExecutionPlan
    from runtime_sim.contract.program import DeviceProgram
    from tvm_icca.plan_search import PlannedOp
    from tvm_icca.plan_search.mapping import Producer

__all__ = ["PlanHook", "PlanRequest", "active_hook", "compiled_with_hook", "measured_plans", "plan_hook",
           "planned_with_hook"]


@dataclass(frozen=True)
class PlanRequest:
    """What the compiler knew when it planned one operator of a region."""

    name: str  # "<region>.op<k>"
    expr: "TensorExpr"
    hw: "HardwareSpec"
    budget: int  # bytes per core the operator's plan may use
    hbm_inputs: tuple[int, ...]  # indices (in expr.inputs) read from HBM
    producers: tuple["Producer", ...]  # (input index, layout) produced earlier in the region


class PlanHook(Protocol):
    """A plan hook. It may also have ``measured_plans(expr, hw)`` (the plans it has
    measurements of, read by the Elk pass: :func:`measured_plans`) and ``compiled(programs)``
    (told the final programs: :func:`compiled_with_hook`)."""

    def plan(self, request: PlanRequest, planned: "PlannedOp") -> "PlannedOp":
        """The plan to use for ``request`` (``planned``: the compiler's own)."""


_HOOK: contextvars.ContextVar["PlanHook | None"] = contextvars.ContextVar(
    "tvm_icca_plan_hook", default=None)


def active_hook() -> "PlanHook | None":
    return _HOOK.get()


@contextlib.contextmanager
def plan_hook(hook: "PlanHook | None") -> Iterator["PlanHook | None"]:
    """Install ``hook`` for the ``with`` block (``None``: no hook inside it)."""
    token = _HOOK.set(hook)
    try:
        yield hook
    finally:
        _HOOK.reset(token)


def planned_with_hook(request: PlanRequest, planned: "PlannedOp") -> "PlannedOp":
    """``planned``, or what the active hook makes of it."""
    hook = _HOOK.get()
    return planned if hook is None else hook.plan(request, planned)


def measured_plans(expr: "TensorExpr", hw: "HardwareSpec") -> Sequence[tuple[float, "ExecutionPlan"]]:
    """(measured seconds, unmapped plan) of every plan the active hook has a record of for
    ``expr`` on ``hw``, fastest first; empty without a hook or records."""
    hook = _HOOK.get()
    lookup = getattr(hook, "measured_plans", None)
    return () if lookup is None else lookup(expr, hw)


def compiled_with_hook(programs: Sequence["DeviceProgram"], planned_jointly: bool = False) -> None:
    """Tell the active hook the final device programs of a compilation (after the Elk pass,
    which may choose other plans than the region planner did); ``planned_jointly``: the model
    is kept on chip and its plans were chosen together (T10 Algorithm 1), not requested one
    operator at a time through the hook."""
    hook = _HOOK.get()
    done = getattr(hook, "compiled", None)
    if done is not None:
        done(programs, planned_jointly)
