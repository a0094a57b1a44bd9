"""``tvm-icca fit-cost-model``: fit the linear cost model to timing-simulator profiles.

A tool, not compiler code (the compiler never imports this module, nor the timing
simulator): random shapes of every offloaded op kind (:func:`random_op_builders`) under
random valid plans are timed with :func:`runtime_sim.timing.opcost.op_cost` (every distinct
shift phase routed on the topology, replica reduction as the device schedules it)
(:func:`profile_plans`), and :func:`fit_cost_model` solves least squares per op kind over
the features of :func:`tvm_icca.plan_search.fitted.plan_features`. The result is a
:class:`~tvm_icca.plan_search.fitted.FittedCostModel` saved as JSON, which the compiler can load
and use as a cost model. ``benchmarks/cost_model_accuracy.py`` reports its accuracy.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from tvm_icca.cli.args import add_hardware_argument, positive_int, writable_path
from tvm_icca.plan_search.fitted import FEATURES, FittedCostModel, plan_features


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
    from runtime_sim.machine.topology import (  # pylint: disable=import-outside-toplevel
        make_topology,
    )
    from runtime_sim.timing.opcost import op_cost  # pylint: disable=import-outside-toplevel
    from tvm_icca.plan_search.cost import AnalyticCostModel  # pylint: disable=import-outside-toplevel
    from tvm_icca.testing.exprs import random_plan  # pylint: disable=import-outside-toplevel

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
    from tvm_icca.testing import exprs as ex  # pylint: disable=import-outside-toplevel

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


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "fit-cost-model", help="fit the linear cost model to timing-simulator profiles (JSON)")
    parser.add_argument("-o", "--output", type=writable_path, required=True,
                        help="where to write the fitted model (JSON)")
    add_hardware_argument(parser, "chip to profile")
    parser.add_argument("--samples", type=positive_int, default=200,
                        help="profiled plans per op kind (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    from tvm_icca.hardware_choice import resolve_hardware  # pylint: disable=import-outside-toplevel

    hw = resolve_hardware(args.hw)
    profiles = profile_plans(random_op_builders(), hw, args.samples, seed=args.seed)
    model = fit_cost_model(profiles, hw.name)
    model.save(args.output)
    fitted = [model.predict_features(p.kind, p.features) for p in profiles]
    score = accuracy(fitted, [p.simulated_s for p in profiles])
    print(f"{len(profiles)} profiles, in-sample MAPE {score['mape_percent']:.2f}%, "
          f"R2 {score['r2']:.4f}: {args.output}")
    return 0
