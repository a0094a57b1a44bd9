"""Elementwise operators (add, sub, mul, div, relu, gelu, tanh, sigmoid, exp) on one core.

No axis is reduced, so no tensor needs to be shared: every sub-tensor lives on exactly one
core and plans never rotate (P_T = 1 for every tensor unless an input is broadcast).
"""

from schedules.base import ComputeTemplate


class ElementwiseTemplate(ComputeTemplate):
    kind = "elementwise"
