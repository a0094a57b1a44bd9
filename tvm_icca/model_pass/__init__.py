"""Stage 5, the model pass: the decisions that need ``main`` and every ICCA region at once.

Data flow: partitioned module -> :mod:`.calls` (what ``main`` says about the regions: call
order, argument origins) -> per region, lowering (:mod:`tvm_icca.lower.region`) and plans
within the SRAM the region leaves each operator (:mod:`.region_plans`, memoized by
:mod:`.plan_cache`) -> on a model kept on chip, T10 Algorithm 1's idle/active plans
(:mod:`.idle_active`) -> on a chip with HBM, the Elk pass (:mod:`.elk_pass`, fed by the
per-operator trade-off tables of :mod:`.tradeoff_tables`) -> one device program per region,
left on the module by :mod:`.planner`'s pass :func:`plan_device_programs`.

May import: :mod:`runtime_sim.contract`, :mod:`runtime_sim.machine`, :mod:`schedules` and the
compiler stages before it (``ops``, ``partition``, ``lower``, ``plan_search``, ``elk``, ``records``).
Never an executor, never :mod:`tvm_icca.tuning`. Start reading at :mod:`.planner`.
"""

from tvm_icca.model_pass import planner
from tvm_icca.model_pass.planner import *  # noqa: F401,F403  (the pass and what it leaves on a module)

__all__ = list(planner.__all__)
