"""A cost model fitted to timing-simulator profiles (T10 §4.3.1 "Cost model accuracy").

T10 fits, per operator type, a linear regression from plan-derived factors (FLOPs, shapes,
steps) to profiled sub-operator times, and another from transfer volume to communication
time. The features are the analytic model's own terms (:class:`.batch_cost.AnalyticBatchModel`
on the plan) plus the device's replica-reduction schedule; the model is linear (least squares
per op kind): each feature is a time the analytic model already estimates, so a linear
combination can only recalibrate it -- and it is what T10 uses.

Here only prediction lives, from coefficients saved as JSON. Fitting them from timing-simulator
profiles is a tool, :mod:`tvm_icca.cli.fit_cost_model_command` (``tvm-icca fit-cost-model``),
which the compiler never imports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from runtime_sim.contract.expr import dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.machine.links import replica_reduction_seconds
from tvm_icca.plan_search.batch_cost import AnalyticBatchModel
from tvm_icca.plan_search.cost import PlanCost

#: Feature name -> PlanCost component it contributes to.
FEATURES: dict[str, str] = {
    "compute": "compute_s",          # steps * sub-task cycles / clock
    "sync": "sync_s",                # steps * synchronization cycles / clock
    "shift": "shift_s",              # per-core shifted bytes over the link, chunked
    "reduce_ring": "reduction_s",    # (R-1)/R of an output partition over the link
    "reduce_schedule": "reduction_s",  # the device's tree-or-chain replica reduction
    "epilogue": "epilogue_s",
}


def plan_features(layout: OpLayout, hw: HardwareSpec) -> dict[str, float]:
    """The closed-form time terms of a plan, in seconds (inputs of the regression)."""
    terms = AnalyticBatchModel(hw, reduction="ring").layout_terms(layout)
    out = len(layout.expr.tensors) - 1
    out_bytes = layout.replica_bytes()  # an attention replica sends its running max and sum too
    elements = out_bytes / dtype_bytes(layout.expr.output.dtype)
    return {
        "compute": terms["compute_s"],
        "sync": terms["sync_s"],
        "shift": terms["shift_s"],
        "reduce_ring": terms["reduction_s"],
        "reduce_schedule": replica_reduction_seconds(layout.replicas(out), out_bytes, elements, hw),
        "epilogue": terms["epilogue_s"],
    }


@dataclass
class FittedCostModel:
    """Per op kind, ``time = sum(coef[f] * feature[f])``; unknown kinds use ``"default"``."""

    hardware: str
    coefficients: dict[str, dict[str, float]] = field(default_factory=dict)

    def predict(self, layout: OpLayout, hw: HardwareSpec) -> float:
        return self(layout, hw).time_s

    def predict_features(self, kind: str, features: dict[str, float]) -> float:
        """Time predicted from already computed :func:`plan_features` of an op of ``kind``."""
        coef = self._coefficients(kind)
        return sum(coef.get(name, 0.0) * features[name] for name in FEATURES)

    def __call__(self, layout: OpLayout, hw: HardwareSpec) -> PlanCost:
        coef = self._coefficients(layout.expr.kind)
        parts = {c: 0.0 for c in set(FEATURES.values())}
        for name, value in plan_features(layout, hw).items():
            parts[FEATURES[name]] += coef.get(name, 0.0) * value
        return PlanCost(**parts)

    def _coefficients(self, kind: str) -> dict[str, float]:
        coef = self.coefficients.get(kind) or self.coefficients.get("default")
        if coef is None:
            raise KeyError(f"no fitted coefficients for op kind '{kind}'")
        return coef

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"format": "icca-fitted-cost-model", "version": 1,
                                          "hardware": self.hardware,
                                          "coefficients": self.coefficients}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "FittedCostModel":
        data = json.loads(Path(path).read_text())
        if data.get("format") != "icca-fitted-cost-model":
            raise ValueError(f"{path} is not a fitted ICCA cost model")
        return cls(data["hardware"], {k: dict(v) for k, v in data["coefficients"].items()})
