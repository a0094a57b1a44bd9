"""Applying tuning records: the compiler uses the best measured plan of every operator.

``with tvm_icca.use_database(work_dir) as tuned:`` installs a plan hook (:mod:`tvm_icca.plan_search.plan_hook`) for the
block: the one model-level compiler (:func:`tvm_icca.model_pass.plan_device_programs`, reached
by ``tvm.compile(mod, target="icca")`` and by the timing-only path alike) asks it about
every compute-shift operator it plans. A record replaces the compiler's plan only when

* it was measured on the same chip (every field of the spec: a record from another chip, or
  from the same chip with another SRAM size, is ignored with a note);
* its plan is valid on the chip and fits the SRAM budget the operator has here
  (:func:`tvm_icca.plan_search.fit.fits`: the device's layout rules, its cores, the budget);
* it is faster than the compiler's own plan *as measured* in the same records: a tuned plan
  is never applied without the untuned plan's measurement to beat, so tuning never makes an
  operator slower than its untuned plan.

The placement on chips is chosen again for the context (:func:`choose_core_order`), and the
operator's estimate stays the analytic model's. ``tuned.applied`` lists the operators that
used tuned plans, ``tuned.notes`` the records that were ignored and why.

On a chip with HBM the Elk pass (:mod:`tvm_icca.model_pass.elk_pass`) chooses each operator's
execute-state plan after this hook, among points from the operator's plan (the tuned one when
applied) down a ladder of smaller plans. With records it also asks :meth:`TunedPlans.measured_plans`:
a point whose plan has a record takes its measured time, measured plans smaller than the
operator's plan join the points, and the Elk schedule is computed from these
(:func:`tvm_icca.model_pass.tradeoff_tables.operator_tables`).

Inside meta_schedule's own ``with database:`` block the compiler does the same with that
database's records (:func:`hook_for_database`, installed by :func:`database_scope`).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import Iterator

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.units import format_seconds
from tvm_icca.plan_search import AnalyticCostModel, PlannedOp
from tvm_icca.plan_search.fit import fits
from tvm_icca.plan_search.mapping import choose_core_order
from tvm_icca.plan_search.plan_hook import PlanRequest, active_hook, plan_hook
from tvm_icca.records.database import RecordStore, StoredRecord, plan_annotation
from tvm_icca.records.keys import expr_digest, hardware_digest, plan_signature, unmapped

__all__ = ["AppliedPlan", "TunedPlans", "database_scope", "hook_for_database", "optional_database",
           "use_database"]


@dataclass(frozen=True)
class AppliedPlan:
    """An operator compiled with a tuned plan.

    Attributes
    ----------
    op : str
        The operator's name (``"<region>.op<k>"``, as in :func:`tvm_icca.device_programs`).
    kind : str
        Its kind (``"matmul"``, ``"softmax"``, ...).
    untuned_s : float
        Measured time of the compiler's own plan, in seconds.
    tuned_s : float
        Measured time of the applied plan, in seconds.
    """

    op: str
    kind: str
    untuned_s: float  # measured time of the compiler's own plan
    tuned_s: float  # measured time of the applied plan

    @property
    def gain(self) -> float:
        """``untuned_s / tuned_s``."""
        return self.untuned_s / self.tuned_s if self.tuned_s > 0 else 1.0


@dataclass
class TunedPlans:
    """The plan hook of :func:`use_database` and what it did.

    Attributes
    ----------
    applied : list of AppliedPlan
        The operators the compilations in the ``with`` block planned with a tuned plan.
    notes : list of str
        Records that were not applied, and why (another chip, a plan that no longer fits,
        a model planned jointly).
    tuned_ops : list of str
        Operators of the compiled programs whose final plan came from the records.
    """

    store: "RecordStore | _DatabaseRecords"
    applied: list[AppliedPlan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: operators of the compiled models whose final plan came from the records, after the
    #: Elk pass on a chip with HBM (:attr:`runtime_sim.contract.program.OpProgram.tuned`)
    tuned_ops: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # (expr digest, hardware digest) -> plan signature -> (seconds, plan)
        self._best: dict[tuple[str, str], dict[str, tuple[float, ExecutionPlan]]] = {}
        self._chips: dict[str, set[str]] = {}  # expr digest -> chips it has records for
        for rec in self.store.records:
            info = rec.info
            if not info.get("plan") or "expr" not in info or "hw" not in info:
                continue
            plans = self._best.setdefault((info["expr"], info["hw"]), {})
            plan = ExecutionPlan.from_dict(info["plan"])
            sig = plan_signature(plan)
            if sig not in plans or rec.seconds < plans[sig][0]:
                plans[sig] = (rec.seconds, plan)
            self._chips.setdefault(info["expr"], set()).add(rec.chip or "?")
        self._cost = AnalyticCostModel()
        self._noted: set[str] = set()
        self._compiled = False

    def _note(self, text: str) -> None:
        if text not in self._noted:
            self._noted.add(text)
            self.notes.append(text)

    def plan(self, request: PlanRequest, planned: PlannedOp) -> PlannedOp:
        expr, hw = request.expr, request.hw
        key = (expr_digest(expr), hardware_digest(hw))
        measured = self._best.get(key)
        if not measured:
            chips = self._chips.get(key[0])
            if chips:
                self._note(f"{request.name}: records exist for chip(s) {sorted(chips)} but not for "
                           f"this '{hw.name}' spec: ignored")
            return planned
        base = measured.get(plan_signature(unmapped(planned.plan)))
        if base is None:
            self._note(f"{request.name}: the compiler's own plan here has no measurement to "
                       "beat (tuned within another budget?): records not applied")
            return planned
        for seconds, plan in sorted(measured.values(), key=lambda x: x[0]):
            if seconds >= base[0]:
                break
            why = fits(expr, plan, hw, request.budget)
            if why is not None:
                self._note(f"{request.name}: a record ({seconds:.3e} s) ignored: {why}")
                continue
            mapped = choose_core_order(expr, plan, hw, request.hbm_inputs, request.producers)
            layout = OpLayout(expr, mapped, hw.cores_per_chip)
            self.applied.append(AppliedPlan(request.name, expr.kind, base[0], seconds))
            return PlannedOp(expr, mapped, layout, self._cost(layout, hw), layout.memory_bytes_per_core())
        return planned

    def measured_plans(self, expr: TensorExpr, hw: HardwareSpec) -> list[tuple[float, ExecutionPlan]]:
        """(measured seconds, unmapped plan) of every recorded plan of ``expr`` on ``hw``
        (this exact spec), fastest first (:func:`.hook.measured_plans`)."""
        measured = self._best.get((expr_digest(expr), hardware_digest(hw)), {})
        return sorted(measured.values(), key=lambda x: x[0])

    def compiled(self, programs, planned_jointly: bool = False) -> None:
        """The final programs of a compilation (:func:`.hook.compiled_with_hook`)."""
        self._compiled = True
        if planned_jointly:
            # plans of a model kept on chip are chosen together, not one request at a time
            self._note("the model is kept on chip (state 'chip'): T10 Algorithm 1 chooses its "
                       "operators' plans jointly and tuning records do not apply; compile "
                       "with state 'host' (--state host) or on a chip with HBM to use them")
        seen = set(self.tuned_ops)
        for program in programs:
            for op in program.ops:
                if op.tuned and op.name not in seen:
                    seen.add(op.name)
                    self.tuned_ops.append(op.name)

    def report(self) -> str:
        """Which operators used tuned plans (one line each), then the notes."""
        lines = [f"tuned plans applied to {len(self.applied)} operator(s)"]
        extra = [n for n in self.tuned_ops if n not in {a.op for a in self.applied}]
        if extra:  # the Elk pass chose measured points of operators the planner kept
            lines[0] += f"; the HBM preload schedule runs measured plans of {len(extra)} more"
        dropped = [a.op for a in self.applied if a.op not in set(self.tuned_ops)]
        if self._compiled and dropped:
            lines[0] += f"; {len(dropped)} replaced by the HBM preload schedule"
        lines += [f"  {_short(a.op)} ({a.kind}): {format_seconds(a.untuned_s)} -> "
                  f"{format_seconds(a.tuned_s)} "
                  f"({a.gain:.2f}x)" for a in self.applied]
        if self._compiled:
            lines.append(f"operators compiled with tuned plans: {len(self.tuned_ops)}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _short(name: str, width: int = 48) -> str:
    """An operator name cut in the middle (fused region names run to hundreds of characters)."""
    return name if len(name) <= width else f"{name[:width - 20]}...{name[-17:]}"


@contextlib.contextmanager
def use_database(work_dir: str) -> Iterator[TunedPlans]:
    """Compile with the best tuning records of ``work_dir`` inside the ``with`` block.

    Example::

        with tvm_icca.use_database("tuning/") as tuned:
            ex = tvm.compile(mod, target="icca")
        print(tuned.report())

    Each operator with records gets its fastest measured plan, and never one slower than
    the compiler's own plan measured in the same session (the module docstring). A model
    kept on chip is planned jointly (T10 §4.3.2, Algorithm 1), so per-operator records do
    not apply to it; ``report()`` says so.

    Parameters
    ----------
    work_dir : str
        A directory written by :func:`tvm_icca.tune` (or ``tvm-icca tune``).

    Yields
    ------
    TunedPlans
        What the compilations inside the block took from the records
        (:class:`~tvm_icca.records.apply.TunedPlans`); ``report()`` says which operators
        used a tuned plan.
    """
    tuned = TunedPlans(RecordStore(work_dir))
    with plan_hook(tuned):
        yield tuned


@contextlib.contextmanager
def optional_database(work_dir: str | None) -> Iterator[TunedPlans | None]:
    """:func:`use_database` when ``work_dir`` is given, else nothing (yields None)."""
    if work_dir is None:
        yield None
        return
    with use_database(work_dir) as tuned:
        yield tuned


@dataclass
class _DatabaseRecords:
    """The ICCA records of any meta_schedule database, as :class:`TunedPlans` reads them."""

    records: list[StoredRecord]


def hook_for_database(database: object) -> TunedPlans:
    """:func:`use_database`'s hook over a meta_schedule database: an ``IccaDatabase`` (its
    record files, read robustly), or any other (``JSONDatabase``, ``MemoryDatabase``...)
    through ``get_all_tuning_records``; records without an ``icca.plan`` annotation are not
    ICCA records and are passed over."""
    store = getattr(database, "store", None)
    if isinstance(store, RecordStore):
        return TunedPlans(store)
    records = []
    for rec in database.get_all_tuning_records():  # type: ignore[attr-defined]
        info = plan_annotation(rec.trace.as_json())
        if not info or not rec.run_secs:
            continue
        seconds = [float(x) for x in rec.run_secs]
        chip = str(rec.target.attrs.get("model", "")) if rec.target is not None else ""
        records.append(StoredRecord(-1, sum(seconds) / len(seconds), chip, info, []))
    return TunedPlans(_DatabaseRecords(records))


#: The meta_schedule module whose ``Database.current()`` is consulted; when it was never
#: imported no database can be current, and compiling does not import meta_schedule.
_MS_DATABASE = "tvm.s_tir.meta_schedule.database"


@contextlib.contextmanager
def database_scope() -> Iterator[None]:
    """Inside a meta_schedule ``with database:`` block (and no hook installed), install the
    :func:`tvm_icca.use_database` hook over that database's records for the ``with`` block
    (the model-level compiler wraps a compilation in it); otherwise do nothing."""
    database = None
    if active_hook() is None and _MS_DATABASE in sys.modules:
        database = sys.modules[_MS_DATABASE].Database.current()
    if database is None:
        yield
        return
    with plan_hook(hook_for_database(database)):
        yield
