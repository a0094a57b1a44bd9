"""The fitted cost model: learns the timing simulator, saves and loads, plugs into the search."""

import pytest

from runtime_sim.contract.presets import preset, small_chip
from tvm_icca.cli.fit_cost_model_command import (
    accuracy,
    fit_cost_model,
    profile_plans,
    random_op_builders,
)
from tvm_icca.plan_search import plan_operator
from tvm_icca.plan_search.fitted import FEATURES, FittedCostModel

# one worker builds the module's shared fixture once (make test runs on several)
pytestmark = pytest.mark.xdist_group("fitted")


@pytest.fixture(scope="module")
def profiles():
    builders = random_op_builders()
    return profile_plans({k: builders[k] for k in ("matmul", "reduce")}, preset("ipu-mk2"), 40, seed=3)


def _predict(model, profiles):
    return [sum(model.coefficients[p.kind][n] * p.features[n] for n in FEATURES) for p in profiles]


def test_fit_beats_analytic_on_held_out_plans(profiles):
    train, test = profiles[::2], profiles[1::2]
    model = fit_cost_model(train, "ipu-mk2")
    simulated = [p.simulated_s for p in test]
    fitted = accuracy(_predict(model, test), simulated)
    analytic = accuracy([p.analytic_s for p in test], simulated)
    assert fitted["mape_percent"] < analytic["mape_percent"]
    assert fitted["mape_percent"] < 5 and fitted["r2"] > 0.99


def test_accuracy_metrics_closed_form():
    assert accuracy([1, 2, 3], [1, 2, 3]) == {"mape_percent": 0.0, "r2": 1.0}
    assert accuracy([2.0, 2.0], [1.0, 4.0])["mape_percent"] == pytest.approx(75.0)


def test_save_load_and_plug_into_search(profiles, tmp_path, exprs):
    model = fit_cost_model(profiles, "ipu-mk2")
    path = tmp_path / "model.json"
    model.save(path)
    again = FittedCostModel.load(path)
    assert again == model
    hw = small_chip(16, 64 * 1024)
    planned = plan_operator(exprs.matmul(64, 64, 64), hw, cost_model=again)
    planned.layout.validate()
    assert planned.cost.time_s == pytest.approx(again.predict(planned.layout, hw))
    with pytest.raises(ValueError):
        (tmp_path / "bad.json").write_text("{}")
        FittedCostModel.load(tmp_path / "bad.json")
