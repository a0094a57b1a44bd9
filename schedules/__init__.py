"""Per-op-type templates: how one core computes the sub-task of a compute-shift step.

:func:`kind_of` chooses the template of a converted operator (see :mod:`schedules.kinds`);
:func:`template_for` returns it.
"""

from __future__ import annotations

from schedules.base import (
    ComputeTemplate,
    ContractionRoles,
    MatrixTemplate,
    arithmetic_nodes,
    contraction_roles,
)
from schedules.conv2d import Conv2dTemplate
from schedules.depthwise_conv2d import DepthwiseConv2dTemplate
from schedules.elementwise import ElementwiseTemplate
from schedules.kinds import kind_of
from schedules.layer_norm import LayerNormTemplate
from schedules.matmul import MatmulTemplate
from schedules.reduce import ReduceTemplate
from schedules.softmax import SoftmaxTemplate

_TEMPLATES: dict[str, ComputeTemplate] = {
    t.kind: t
    for t in (
        MatmulTemplate(), Conv2dTemplate(), DepthwiseConv2dTemplate(), ElementwiseTemplate(), ReduceTemplate(),
        SoftmaxTemplate(), LayerNormTemplate(),
    )
}


def template_for(kind: str) -> ComputeTemplate:
    """The template of an op kind; unknown kinds run as generic vector-unit work."""
    return _TEMPLATES.get(kind, _TEMPLATES["elementwise"])


def template_kinds() -> tuple[str, ...]:
    return tuple(_TEMPLATES)


__all__ = [
    "ComputeTemplate", "ContractionRoles", "MatrixTemplate", "arithmetic_nodes",
    "contraction_roles", "kind_of", "template_for", "template_kinds",
]
