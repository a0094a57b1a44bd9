"""tvm_icca.ops.te_capture: the TE of a Relax function, captured from TVM's own legalization."""

from __future__ import annotations

import threading

import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

from runtime_sim.contract.errors import UnsupportedOperatorError  # noqa: E402
from tvm_icca.lower.te_to_expr import tensor_expr_of  # noqa: E402
from tvm_icca.ops.te_capture import compose_te  # noqa: E402
from tvm_icca.testing.relax_functions import relax_function  # noqa: E402

op = relax.op


rfunc = relax_function


def test_compose_te_gives_tvm_compute():
    composed = compose_te(rfunc([(4, 8), (8, 5)], op.matmul))
    assert [tuple(int(s) for s in p.shape) for p in composed.placeholders] == [(4, 8), (8, 5)]
    assert composed.op_names == ("relax.matmul",)
    assert [iv.var.name for iv in composed.output.op.reduce_axis] == ["k"]


def test_call_te_is_restored_after_errors():
    original = relax.BlockBuilder.call_te
    with pytest.raises(UnsupportedOperatorError):
        tensor_expr_of(rfunc([(2, 6)], lambda x: op.reshape(x, (3, 4))))
    tensor_expr_of(rfunc([(2, 6)], op.nn.relu))
    assert relax.BlockBuilder.call_te is original


def test_tuple_result_is_refused():
    with pytest.raises(UnsupportedOperatorError, match="tuple"):
        compose_te(rfunc([(4, 6)], lambda x: op.split(x, 2, axis=1)))


def test_concurrent_captures_do_not_mix():
    # Each thread records only into its own composer; the class-level patch is removed by
    # the last capture to finish. (Ops whose topi code opens ``te.tag_scope``, e.g. softmax
    # and relu, are left out: that scope is process-global in TVM itself.)
    original = relax.BlockBuilder.call_te
    cases = [  # built here: a BlockBuilder's ``with bb.function`` scope is process-global
        (rfunc([(4, 8), (8, 5)], op.matmul), ("relax.matmul",), (4, 5)),
        (rfunc([(3, 7), (7,)], op.add), ("relax.add",), (3, 7)),
        (rfunc([(2, 6)], lambda x: op.sum(x, axis=[1])), ("relax.sum",), (2,)),
    ]
    failures: list[str] = []
    start = threading.Barrier(len(cases) * 2)

    def worker(func, names, shape) -> None:
        try:
            start.wait(timeout=60)
            for _ in range(5):
                composed = compose_te(func)
                got = (composed.op_names, tuple(int(s) for s in composed.output.shape))
                if got != (names, shape):
                    failures.append(f"{names}: got {got}")
        except BaseException as err:  # pylint: disable=broad-except
            failures.append(repr(err))

    threads = [threading.Thread(target=worker, args=case) for case in cases * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures
    assert relax.BlockBuilder.call_te is original
