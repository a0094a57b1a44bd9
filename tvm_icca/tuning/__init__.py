"""Autotuning of ICCA execution plans on meta_schedule's machinery (a driver of the compiler).

A session (:func:`tune`) extracts the distinct ICCA operators of a model (:mod:`.tasks`),
proposes plans from their complete plan space (:mod:`.candidates`), times them on the
simulated device's timing simulator (:mod:`.measure`), learns which plans are fast
(:mod:`.features`, :mod:`.cost_model`: XGBoost behind meta_schedule's ``PyCostModel``) and keeps
every measurement as an ordinary meta_schedule ``TuningRecord`` in a work directory
(:mod:`tvm_icca.records.database`). The compiler reads them through :func:`use_database` or
meta_schedule's own ``with database:`` (:mod:`tvm_icca.records.apply`, over the compiler's
plan hook :mod:`tvm_icca.plan_search.plan_hook`); on a chip with HBM the Elk pass gets measured
execute-state points (:mod:`tvm_icca.model_pass.tradeoff_tables`). Operators compiled with
tuned plans are marked (:attr:`runtime_sim.contract.program.OpProgram.tuned`).

The compiler never imports this package; xgboost loads when a session starts.
"""

from tvm_icca.tuning.session import TuneSummary, tune

__all__ = ["TuneSummary", "tune"]
