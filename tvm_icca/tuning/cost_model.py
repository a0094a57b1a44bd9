"""The learned cost model: XGBoost over plan features, behind meta_schedule's interface.

meta_schedule ranks candidates with an XGBoost model over schedule features
(``tvm.s_tir.meta_schedule.cost_model.XGBModel``). Its own model cannot be reused as it is:
it extracts TIR per-store features from the candidate's schedule, and an ICCA plan lives
in an annotation, not in the loop nest. So :class:`PlanCostModel` is a ``PyCostModel``
subclass (``tvm.ir.utils.derived_object``, meta_schedule's extension point for Python cost
models) that takes its features from :class:`.features.PlanFeatureExtractor` and fits
``xgboost`` itself.

What it learns is the analytic model's error: the target is
``log(measured seconds / analytic seconds)`` of a plan, and a prediction is the analytic
time times ``exp`` of the predicted error. With no data it ranks exactly as the analytic
model (T10 §4.3.1), and a few measurements correct it where the simulated device departs
from the closed form (routed shifts, reduction schedules). ``predict`` returns scores where
higher is better, as meta_schedule's cost models do: the predicted throughput
``1 / seconds``.

``xgboost`` is imported when the first model is fitted, so ``import tvm`` stays fast.
"""

from __future__ import annotations

import functools
import pickle
from typing import Any, Sequence

import numpy as np

from tvm_icca.tuning.features import FEATURE_NAMES

__all__ = ["MIN_TRAINING_SAMPLES", "ResidualBooster", "cost_model_class"]

#: Measurements before the first fit (fewer than this and the analytic ranking stands).
MIN_TRAINING_SAMPLES = 8
#: Index of the analytic time's log10 in the features (the model's baseline).
_ANALYTIC = FEATURE_NAMES.index("log_analytic_s")


class ResidualBooster:
    """XGBoost regression of ``log(measured / analytic)`` on plan features."""

    def __init__(self, seed: int = 0, rounds: int = 60) -> None:
        self.seed = seed
        self.rounds = rounds
        self.features: list[np.ndarray] = []
        self.targets: list[float] = []
        self._booster: Any = None

    @property
    def fitted(self) -> bool:
        return self._booster is not None

    def add(self, features: np.ndarray, seconds: Sequence[float]) -> None:
        """Add measured plans (rows of ``features``) and refit."""
        for row, secs in zip(features, seconds):
            analytic = 10.0 ** float(row[_ANALYTIC])
            self.features.append(np.asarray(row, np.float32))
            self.targets.append(float(np.log(max(secs, 1e-15) / max(analytic, 1e-15))))
        if len(self.targets) >= MIN_TRAINING_SAMPLES:
            import xgboost  # pylint: disable=import-outside-toplevel

            data = xgboost.DMatrix(np.stack(self.features), label=np.asarray(self.targets),
                                   feature_names=list(FEATURE_NAMES))
            params = {"max_depth": 4, "eta": 0.2, "objective": "reg:squarederror",
                      "seed": self.seed, "nthread": 1, "verbosity": 0}
            self._booster = xgboost.train(params, data, num_boost_round=self.rounds)

    def predict_seconds(self, features: np.ndarray) -> np.ndarray:
        """Predicted seconds per row (the analytic time until the model is fitted)."""
        features = np.asarray(features, np.float32).reshape(-1, len(FEATURE_NAMES))
        analytic = 10.0 ** features[:, _ANALYTIC].astype(np.float64)
        if self._booster is None or not len(features):
            return analytic
        import xgboost  # pylint: disable=import-outside-toplevel

        error = self._booster.predict(xgboost.DMatrix(features, feature_names=list(FEATURE_NAMES)))
        return analytic * np.exp(np.asarray(error, np.float64))

    def state(self) -> bytes:
        return pickle.dumps({"features": self.features, "targets": self.targets,
                             "booster": None if self._booster is None else self._booster.save_raw()})

    def load_state(self, blob: bytes) -> None:
        data = pickle.loads(blob)
        self.features, self.targets = data["features"], data["targets"]
        self._booster = None
        if data["booster"] is not None:
            import xgboost  # pylint: disable=import-outside-toplevel

            self._booster = xgboost.Booster()
            self._booster.load_model(bytearray(data["booster"]))


@functools.lru_cache(maxsize=None)
def cost_model_class():
    """:class:`PlanCostModel` (built on first use: meta_schedule loads lazily)."""
    from tvm.ir.utils import derived_object  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.cost_model import PyCostModel  # pylint: disable=import-outside-toplevel

    @derived_object
    class PlanCostModel(PyCostModel):
        """meta_schedule cost model over ICCA plans (module docstring)."""

        def __init__(self, extractor: Any, seed: int = 0) -> None:
            super().__init__()
            self.extractor = extractor
            self.booster = ResidualBooster(seed)

        def load(self, path: str) -> None:
            with open(path, "rb") as f:
                self.booster.load_state(f.read())

        def save(self, path: str) -> None:
            with open(path, "wb") as f:
                f.write(self.booster.state())

        def _features(self, context, candidates) -> np.ndarray:
            rows = self.extractor.extract_from(context, candidates)
            return np.concatenate([r.numpy() for r in rows]) if rows else np.zeros((0, len(FEATURE_NAMES)))

        def update(self, context, candidates, results) -> None:
            pairs = [(c, r) for c, r in zip(candidates, results) if r.run_secs]
            if not pairs:
                return
            feats = self._features(context, [c for c, _ in pairs])
            secs = [float(np.mean([float(s) for s in r.run_secs])) for _, r in pairs]
            self.booster.add(feats, secs)

        def predict(self, context, candidates) -> np.ndarray:
            if not candidates:
                return np.zeros(0)
            return 1.0 / self.booster.predict_seconds(self._features(context, candidates))

    return PlanCostModel


def tuning_context(workload: Any, target: Any, task_name: str):
    """A meta_schedule ``TuneContext`` naming a task, for the cost model's calls.

    ``TuneContext.__init__`` first imports ``tvm.s_tir.tensor_intrin`` (every tensor
    intrinsic TVM has, about 150 s on this machine) for its space generators; a context
    without space generator or search strategy needs none of them, so it is built through
    the same FFI constructor directly.
    """
    from tvm.s_tir.meta_schedule import TuneContext, _ffi_api  # pylint: disable=import-outside-toplevel

    context = TuneContext.__new__(TuneContext)
    context.__init_handle_by_constructor__(  # pylint: disable=no-member
        _ffi_api.TuneContext, workload, target, None, None, task_name, 1, -1, None)
    return context
