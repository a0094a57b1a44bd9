"""Shared test helpers: hand-built tensor expressions of common operators.

They are offered through the ``exprs`` fixture (a namespace of builder functions from
:mod:`tvm_icca.testing.exprs`) so test modules need no import path tricks.
"""

from __future__ import annotations

import types

import pytest
from hypothesis import strategies as st

from tvm_icca.testing import exprs as builders


def _random_plan(draw, expr, max_cores, core_order=False):
    """:func:`tvm_icca.testing.exprs.random_plan` driven by a hypothesis ``data.draw``."""
    return builders.random_plan(lambda options: draw(st.sampled_from(list(options))), expr, max_cores,
                                core_order)


@pytest.fixture(scope="session")
def exprs() -> types.SimpleNamespace:
    """Builders of hand-written tensor expressions (see tvm_icca/testing/exprs.py)."""
    names = ("ax", "load", "op", "const", "matmul", "conv2d", "conv_out", "bias_add", "softmax",
             "layer_norm", "rms_norm", "row_sum", "matmul_bias_relu")
    return types.SimpleNamespace(random_plan=_random_plan,
                                 **{name: getattr(builders, name) for name in names})
