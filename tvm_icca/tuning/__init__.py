"""Autotuning of ICCA execution plans on meta_schedule's machinery (issue 12).

A session (:func:`tune`) extracts the distinct ICCA operators of a model (:mod:`.tasks`),
proposes plans from their complete plan space (:mod:`.candidates`), times them on the
simulated device (:mod:`.measure`), learns which plans are fast (:mod:`.features`,
:mod:`.cost_model`: XGBoost behind meta_schedule's ``PyCostModel``) and keeps every
measurement as an ordinary meta_schedule ``TuningRecord`` in a work directory
(:mod:`.database`). :func:`use_database` makes the one model-level compiler use the best
record of every operator (:mod:`.apply`, through the narrow hook of :mod:`.hook`), and on a
chip with HBM gives the Elk pass measured execute-state points
(:mod:`tvm_icca.planning.tradeoff_tables`); meta_schedule's own ``with database:`` does the same.
Operators compiled with tuned plans are marked (:attr:`runtime_sim.contract.program.OpProgram.tuned`)
and counted by ``CompiledModel.tuned_ops`` and the run statistics' ``tuned_ops``.

Nothing heavy is imported here: the compiler imports :mod:`.hook` on every compilation, and
``import tvm`` must stay fast; meta_schedule and xgboost load when a session starts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tune", "use_database"]


def tune(*args: Any, **kwargs: Any):
    """See :func:`tvm_icca.tuning.session.tune`."""
    from tvm_icca.tuning.session import tune as _tune  # pylint: disable=import-outside-toplevel

    return _tune(*args, **kwargs)


def use_database(*args: Any, **kwargs: Any):
    """See :func:`tvm_icca.records.apply.use_database`."""
    from tvm_icca.records.apply import (  # pylint: disable=import-outside-toplevel
        use_database as _use,
    )

    return _use(*args, **kwargs)
