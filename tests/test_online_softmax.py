"""Which softmax operators the online-softmax combine replaces (tvm_icca.split.online_softmax);
its exactness on the device is tested with the split regions (tests/test_region_split.py)."""

from __future__ import annotations

from dataclasses import replace

from tvm_icca.split.online_softmax import row_softmax_axis
from tvm_icca.testing import exprs


def test_the_softmax_of_a_tensor_over_its_last_axis_is_recognized():
    assert row_softmax_axis(exprs.softmax(8, 16)) == "j"


def test_other_normalizations_are_not():
    softmax = exprs.softmax(8, 16)
    # log-softmax, or any other body over the same row, keeps its row whole
    log_softmax = replace(softmax, body={"op": "log", "args": [softmax.body]})
    assert row_softmax_axis(log_softmax) is None
    assert row_softmax_axis(replace(softmax, kind="elementwise")) is None
    assert row_softmax_axis(exprs.layer_norm(8, 16)) is None
    # a softmax over its first axis reads the row through the other index
    first = replace(softmax, axes=softmax.axes[::-1])
    assert row_softmax_axis(first) is None
