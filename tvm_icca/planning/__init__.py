"""The model-level compiler: decisions that need ``main`` and every ICCA region at once.

* :mod:`.calls` -- what ``main`` says about the regions (call order, argument origins);
* :mod:`.idle_active` -- T10 Algorithm 1 over a model kept on chip (idle/active plans);
* :mod:`.preloads` -- the Elk pass: HBM preload schedules (with :mod:`.preload_tables`);
* :mod:`.planner` -- the pass :func:`plan_device_programs` that leaves every region's device
  program on the module, for ``tvm.compile`` and the timing-only path alike.
"""

from tvm_icca.planning import planner
from tvm_icca.planning.planner import (
    EXECUTION_MODELS,
    MODEL_PLAN_ATTR,
    PRELOAD_DESIGNS,
    PRELOAD_OFF,
    PRELOAD_PLAN_ATTR,
    preload_summary_of,
    PROGRAM_ATTR,
    CompileOptions,
    icca_model_passes,
    is_planned,
    model_plan_of,
    plan_device_programs,
    program_of,
    programs_in_call_order,
)

__all__ = list(planner.__all__)
