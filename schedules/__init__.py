"""Per-op-type templates: how one core computes the sub-task of a compute-shift step.

:func:`kind_of` chooses the template of a converted operator (see :mod:`schedules.kinds`);
:func:`template_for` returns it. Templates register against the op kinds of the device
program format (:data:`runtime_sim.contract.op_kinds.OP_KINDS`): one template per kind, and
no template of a kind a device program cannot hold.

Imports only :mod:`runtime_sim.contract`; the compiler's cost models and the timing simulator
both read the templates' per-sub-task cycles. Start at :mod:`.base`.
"""

from __future__ import annotations

from typing import Iterable

from runtime_sim.contract.op_kinds import OP_KINDS
from schedules.attention import AttentionTemplate
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


def _registry(templates: Iterable[ComputeTemplate]) -> dict[str, ComputeTemplate]:
    """The templates by kind, each registered against the op kinds of the device format.

    Parameters
    ----------
    templates
        One template per op kind.

    Returns
    -------
    dict[str, ComputeTemplate]
        Kind -> template, in the order given.

    Raises
    ------
    ValueError
        A template's kind is not in :data:`~runtime_sim.contract.op_kinds.OP_KINDS` (a device
        program could never name it: the kind must be added to the contract first), or two
        templates share a kind.
    """
    registry: dict[str, ComputeTemplate] = {}
    for t in templates:
        if t.kind not in OP_KINDS:
            raise ValueError(f"template {type(t).__name__} has op kind {t.kind!r}, which is not one of "
                             f"runtime_sim.contract.op_kinds.OP_KINDS ({', '.join(OP_KINDS)})")
        if t.kind in registry:
            raise ValueError(f"templates {type(registry[t.kind]).__name__} and {type(t).__name__} "
                             f"both have op kind {t.kind!r}")
        registry[t.kind] = t
    return registry


_TEMPLATES: dict[str, ComputeTemplate] = _registry((
    MatmulTemplate(), Conv2dTemplate(), DepthwiseConv2dTemplate(), ElementwiseTemplate(), ReduceTemplate(),
    SoftmaxTemplate(), LayerNormTemplate(), AttentionTemplate(),
))


def template_for(kind: str) -> ComputeTemplate:
    """The template of an op kind; unknown kinds run as generic vector-unit work.

    Parameters
    ----------
    kind
        An op kind, normally one of :data:`~runtime_sim.contract.op_kinds.OP_KINDS`.

    Returns
    -------
    ComputeTemplate
        Its template, or the elementwise template for a kind without one.
    """
    return _TEMPLATES.get(kind, _TEMPLATES["elementwise"])


def template_kinds() -> tuple[str, ...]:
    """The op kinds that have a registered template, in registration order.

    Returns
    -------
    tuple[str, ...]
        Every registered kind; all of them are in :data:`~runtime_sim.contract.op_kinds.OP_KINDS`.
    """
    return tuple(_TEMPLATES)


__all__ = [
    "ComputeTemplate", "ContractionRoles", "MatrixTemplate", "arithmetic_nodes",
    "contraction_roles", "kind_of", "template_for", "template_kinds",
]
