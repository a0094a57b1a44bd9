"""Softmax on one core: max, exp, sum and divide over a whole row held locally.

The normalized axis is a core-local axis of inner reductions; a plan may split the row across
cores (``runtime_sim.contract.plan_rules.local_splits``): partial max and sum of exp, combined across the
cores sharing the row, then the elementwise tail.
"""

from schedules.base import LocalReductionTemplate


class SoftmaxTemplate(LocalReductionTemplate):
    kind = "softmax"
