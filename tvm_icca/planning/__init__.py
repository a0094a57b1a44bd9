"""Model-level planning: the decisions that need ``main`` and every ICCA region at once.

Data flow: partitioned module -> :mod:`.calls` (what ``main`` says about the regions: call
order, argument origins) -> per region, lowering (:mod:`tvm_icca.lower.region`) and plans
within the SRAM the region leaves each operator (:mod:`.region_plans`, memoized by
:mod:`.plan_cache`) -> on a model kept on chip, T10 Algorithm 1's idle/active plans
(:mod:`.idle_active`) -> on a chip with HBM, the Elk pass (:mod:`.elk_pass`, fed by the
per-operator trade-off tables of :mod:`.tradeoff_tables`) -> one device program per region,
left on the module by :mod:`.planner`'s pass :func:`plan_device_programs`.

May import: :mod:`runtime_sim.contract`, :mod:`runtime_sim.machine`, :mod:`schedules` and the
compiler stages before it (``ops``, ``partition``, ``lower``, ``plans``, ``elk``, ``records``).
Never an executor, never :mod:`tvm_icca.tuning`. Start reading at :mod:`.planner`.
"""

from tvm_icca.planning.planner import (
    EXECUTION_MODELS,
    MODEL_PLAN_ATTR,
    PRELOAD_DESIGNS,
    PRELOAD_OFF,
    PRELOAD_PLAN_ATTR,
    PROGRAM_ATTR,
    CompileOptions,
    icca_model_passes,
    is_planned,
    model_plan_of,
    plan_device_programs,
    preload_summary_of,
    program_of,
    programs_in_call_order,
)

__all__ = [
    "EXECUTION_MODELS",
    "MODEL_PLAN_ATTR",
    "PRELOAD_DESIGNS",
    "PRELOAD_OFF",
    "PRELOAD_PLAN_ATTR",
    "PROGRAM_ATTR",
    "CompileOptions",
    "icca_model_passes",
    "is_planned",
    "model_plan_of",
    "plan_device_programs",
    "preload_summary_of",
    "program_of",
    "programs_in_call_order",
]
