"""T10's search constraints on the plan space (§4.3.1 "Search constraints")."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PlanFilters:
    """T10's two user-configurable search constraints (§4.3.1), plus an SRAM fit option.

    * Parallelism: a plan must use at least ``min_cores`` cores and at least
      ``min_core_utilization`` of the most cores the operator can use at all
      (``min(hardware cores, largest feasible prod F_op)``): a tiny operator is not asked to
      fill a chip it cannot fill.
    * Padding: the padded iteration space ``prod_a F_a * xp_a`` may exceed the original
      ``prod_a extent_a`` by at most ``max_padding_ratio``.
    * ``fit_sram``: drop plans whose partitions exceed a core's usable SRAM (they can never
      run, whatever the other operators do).

    :meth:`t10` gives the thresholds of the public Elk artifact (core utilization 0.9, padding
    0.9, i.e. at least 90% of the padded space is real; the constants of the public Elk MICRO'25
    artifact's planner); :meth:`none` keeps the complete space.

    Parameters
    ----------
    min_core_utilization : float
        Least fraction of the most cores the operator can use that a plan must use.
    min_cores : int
        Least number of cores a plan must use.
    max_padding_ratio : float
        Largest padded-to-original iteration space ratio (``inf``: any padding).
    fit_sram : bool
        Whether plan-space counts (:func:`space_sizes`) drop plans over a core's usable SRAM.
    """

    min_core_utilization: float = 0.0
    min_cores: int = 1
    max_padding_ratio: float = math.inf
    fit_sram: bool = True

    @classmethod
    def t10(cls, utilization: float = 0.9, padding: float = 0.9) -> "PlanFilters":
        """The public Elk artifact's thresholds: 0.9 and 0.9."""
        return cls(min_core_utilization=utilization, max_padding_ratio=1.0 / padding)

    @classmethod
    def none(cls) -> "PlanFilters":
        """No search constraint: the complete space (only plans that fit SRAM)."""
        return cls()

    def without_parallelism(self) -> "PlanFilters":
        """These constraints less the parallelism one (padding and SRAM fit kept): the space
        :func:`.pareto.pareto_plans` falls back to when no plan meets both (see there)."""
        return dataclasses.replace(self, min_core_utilization=0.0, min_cores=1)
