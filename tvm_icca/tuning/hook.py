"""The one point where tuning reaches into the compiler: a plan hook consulted per operator.

:func:`tvm_icca.region.plan_region` asks :func:`planned_with_hook` for every compute-shift
operator it has just planned. Without an active hook (the default) the planned operator is
returned as it is. A tuning session installs an observer (:mod:`.tasks`: which operators the
compiler plans, with which budget); :func:`tvm_icca.tuning.use_database` installs a provider
that may return a tuned plan instead (:mod:`.apply`). The hook lives in a
:class:`contextvars.ContextVar`, so it is scoped to a ``with`` block and to one thread or
task, never a module-level setting.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from runtime_sim.hardware import HardwareSpec
    from runtime_sim.program import TensorExpr

    from ..plans import PlannedOp
    from ..plans.mapping import Producer

__all__ = ["PlanHook", "PlanRequest", "active_hook", "plan_hook", "planned_with_hook"]


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
