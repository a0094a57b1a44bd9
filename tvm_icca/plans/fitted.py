"""A cost model fitted to timing-simulator profiles (T10 §4.3.1 "Cost model accuracy").

T10 fits, per operator type, a linear regression from plan-derived factors (FLOPs, shapes,
steps) to profiled sub-operator times, and another from transfer volume to communication
time. Here the profiles come from the simulated device's timing model
(:func:`runtime_sim.timing.opcost.op_cost`: every distinct shift phase routed on the
topology, replica reduction as a tree) for random shapes and random valid plans, and the
features are the compiler's closed-form quantities. The model is linear (least squares per op
kind): each feature is a time the analytic model already estimates, so a linear combination
can only recalibrate it -- and it is what T10 uses. Models are saved to and loaded from JSON.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from runtime_sim.hardware import HardwareSpec
from runtime_sim.layout import OpLayout
from runtime_sim.program import TensorExpr, dtype_bytes
from schedules import template_for

from .batch_cost import replica_reduction_array
from .cost import PlanCost, shift_seconds

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
    expr = layout.expr
    template = template_for(expr.kind)
    clock = hw.clock_hz
    shift = shift_seconds(layout, hw)
    out = len(expr.tensors) - 1
    replicas = layout.replicas(out)
    out_bytes = layout.partition_bytes(out)
    out_partition = {a: layout.xp[a] // layout.plan.ft(out, a) for a in layout.axes}
    return {
        "compute": layout.steps * template.subtask_cycles(expr, layout.rp, hw) / clock,
        "sync": layout.steps * hw.sync_cycles / clock,
        "shift": shift,
        "reduce_ring": (replicas - 1) / replicas * out_bytes / hw.link_bandwidth,
        "reduce_schedule": float(replica_reduction_array(
            np.array([float(replicas)]), np.array([out_bytes]), dtype_bytes(expr.output.dtype), hw)[0]),
        "epilogue": template.epilogue_cycles(expr, out_partition, hw) / clock,
    }


@dataclass
class FittedCostModel:
    """Per op kind, ``time = sum(coef[f] * feature[f])``; unknown kinds use ``"default"``."""

    hardware: str
    coefficients: dict[str, dict[str, float]] = field(default_factory=dict)

    def predict(self, layout: OpLayout, hw: HardwareSpec) -> float:
        return self(layout, hw).time_s

    def __call__(self, layout: OpLayout, hw: HardwareSpec) -> PlanCost:
        coef = self.coefficients.get(layout.expr.kind) or self.coefficients.get("default")
        if coef is None:
            raise KeyError(f"no fitted coefficients for op kind '{layout.expr.kind}'")
        parts = {c: 0.0 for c in set(FEATURES.values())}
        for name, value in plan_features(layout, hw).items():
            parts[FEATURES[name]] += coef.get(name, 0.0) * value
        return PlanCost(**parts)

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


@dataclass(frozen=True)
class Profile:
    """One profiled plan: its features and the simulated execution time."""

    kind: str
    features: Mapping[str, float]
    simulated_s: float
    analytic_s: float


def profile_plans(
    builders: Mapping[str, Callable[[np.random.Generator], TensorExpr]],
    hw: HardwareSpec,
    samples_per_kind: int,
    seed: int = 0,
) -> list[Profile]:
    """Simulate random valid plans of randomly shaped ops of each kind.

    ``builders[kind](rng)`` returns a random expression of that kind; plans are drawn with
    :func:`tvm_icca.testing.exprs.random_plan` within the chip's cores and kept when they fit
    a core's SRAM.
    """
    from runtime_sim.timing.opcost import op_cost
    from runtime_sim.topology import make_topology
    from tvm_icca.testing.exprs import random_plan

    from .cost import AnalyticCostModel

    rng = np.random.default_rng(seed)
    topo = make_topology(hw)
    analytic = AnalyticCostModel()
    choose = lambda options: list(options)[int(rng.integers(len(options)))]  # noqa: E731
    profiles = []
    for kind, build in builders.items():
        made = attempts = 0
        while made < samples_per_kind and attempts < 20 * samples_per_kind:
            attempts += 1
            expr = build(rng)
            layout = OpLayout(expr, random_plan(choose, expr, hw.num_cores))
            if layout.memory_bytes_per_core() > hw.usable_sram_bytes:
                continue
            simulated = op_cost(layout, hw, topo).exec_s
            profiles.append(Profile(kind, plan_features(layout, hw), simulated,
                                    analytic(layout, hw).time_s))
            made += 1
    return profiles


def fit_cost_model(profiles: Sequence[Profile], hardware: str) -> FittedCostModel:
    """Least squares per op kind (and over all profiles for ``"default"``)."""
    model = FittedCostModel(hardware)
    groups: dict[str, list[Profile]] = {"default": list(profiles)}
    for p in profiles:
        groups.setdefault(p.kind, []).append(p)
    names = list(FEATURES)
    for kind, group in groups.items():
        x = np.array([[p.features[n] for n in names] for p in group])
        y = np.array([p.simulated_s for p in group])
        # Relative error matters (times span orders of magnitude): weight rows by 1/y.
        w = 1.0 / np.maximum(y, 1e-12)
        coef, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
        model.coefficients[kind] = {n: float(c) for n, c in zip(names, coef)}
    return model


def accuracy(predicted: Sequence[float], simulated: Sequence[float]) -> dict[str, float]:
    """MAPE (percent) and R^2 of predictions against simulated times."""
    p = np.asarray(predicted, float)
    s = np.asarray(simulated, float)
    mape = float(np.mean(np.abs(p - s) / np.maximum(s, 1e-15)) * 100)
    ss_res = float(np.sum((s - p) ** 2))
    ss_tot = float(np.sum((s - s.mean()) ** 2))
    return {"mape_percent": mape, "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")}


def random_op_builders() -> dict[str, Callable[[np.random.Generator], TensorExpr]]:
    """Random shapes of every op kind the backend offloads (used for profiling)."""
    from tvm_icca.testing import exprs as ex

    def pick(rng: np.random.Generator, lo: int, hi: int) -> int:
        return int(2 ** rng.uniform(math.log2(lo), math.log2(hi)))

    return {
        "matmul": lambda r: ex.matmul(pick(r, 16, 2048), pick(r, 16, 2048), pick(r, 16, 2048), "float16"),
        "conv2d": lambda r: ex.conv2d(pick(r, 1, 8), pick(r, 8, 128), pick(r, 8, 56), pick(r, 8, 56),
                                      pick(r, 8, 128), 3, 3, int(r.integers(1, 3)), 1, 1, "float16"),
        "elementwise": lambda r: ex.bias_add(pick(r, 16, 4096), pick(r, 16, 4096), "float16"),
        "reduce": lambda r: ex.row_sum(pick(r, 16, 4096), pick(r, 16, 4096), bool(r.integers(2)), "float16"),
        "softmax": lambda r: ex.softmax(pick(r, 16, 4096), pick(r, 16, 1024), "float16"),
    }
