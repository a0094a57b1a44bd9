"""Softmax on one core: max, exp, sum and divide over a whole row held locally.

The normalized axis is a core-local axis of inner reductions, so the generic plan rules
(``runtime_sim.layout.pinned_axes``) keep it unsplit; rows are distributed over cores.
"""

from .base import LocalReductionTemplate


class SoftmaxTemplate(LocalReductionTemplate):
    kind = "softmax"
