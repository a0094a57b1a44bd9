"""Per-op templates: GEMM roles and sub-task cycles in closed form."""

import pytest

from runtime_sim.contract.expr import (
    AffineIndex,
    Axis,
    TensorAccess,
    TensorExpr,
    make_load,
)
from runtime_sim.contract.op_kinds import OP_KINDS
from runtime_sim.contract.presets import preset
from schedules import (
    ComputeTemplate,
    _registry,
    contraction_roles,
    template_for,
    template_kinds,
)
from schedules.elementwise import ElementwiseTemplate

ax = AffineIndex.of_axis


def _matmul(m, k, n):
    a = TensorAccess("A", (m, k), "float16", (ax("m"), ax("k")))
    b = TensorAccess("B", (k, n), "float16", (ax("k"), ax("n")))
    c = TensorAccess("C", (m, n), "float16", (ax("m"), ax("n")))
    body = {"op": "mul", "args": [make_load(0, a.indices), make_load(1, b.indices)]}
    return TensorExpr("matmul", (Axis("m", m), Axis("n", n), Axis("k", k, True)), (a, b), c, body)


def _conv():
    h = AffineIndex((("h", 2), ("kh", 1)), -1)
    w = AffineIndex((("w", 2), ("kw", 1)), -1)
    i = TensorAccess("I", (1, 4, 8, 8), "float32", (ax("b"), ax("c"), h, w))
    wt = TensorAccess("W", (6, 4, 3, 3), "float32", (ax("f"), ax("c"), ax("kh"), ax("kw")))
    o = TensorAccess("O", (1, 6, 4, 4), "float32", (ax("b"), ax("f"), ax("h"), ax("w")))
    body = {"op": "mul", "args": [make_load(0, i.indices), make_load(1, wt.indices)]}
    axes = (Axis("b", 1), Axis("f", 6), Axis("h", 4), Axis("w", 4),
            Axis("c", 4, True), Axis("kh", 3, True), Axis("kw", 3, True))
    return TensorExpr("conv2d", axes, (i, wt), o, body)


def test_roles_of_matmul_and_conv():
    r = contraction_roles(_matmul(4, 8, 16))
    assert (r.batch, r.m, r.n, r.k) == ((), ("m",), ("n",), ("k",))
    r = contraction_roles(_conv())
    assert r.m == ("b", "h", "w") and r.n == ("f",) and r.k == ("c", "kh", "kw")


def test_matrix_cycles_pad_to_tile():
    hw = preset("ipu-mk2-systolic")  # 16x16x16 tile, 512 FLOP per cycle (T10 benchmark)
    t = template_for("matmul")
    expr = _matmul(32, 5120, 15360)
    # ceil16(rp_m) * ceil16(rp_k) * ceil16(rp_n) / 256 cycles, as in the T10 benchmark model.
    assert t.subtask_cycles(expr, {"m": 3, "k": 20, "n": 17}, hw) == pytest.approx(16 * 32 * 32 / 256)
    assert t.subtask_cycles(expr, {"m": 16, "k": 16, "n": 16}, hw) == pytest.approx(16)


def test_vector_cycles_count_body_operations():
    hw = preset("ipu-mk2")
    x = TensorAccess("x", (8, 8), "float32", (ax("i"), ax("j")))
    body = {"op": "exp", "args": [{"op": "add", "args": [make_load(0, x.indices), {"op": "const", "value": 1.0}]}]}
    expr = TensorExpr("elementwise", (Axis("i", 8), Axis("j", 8)), (x,), x, body)
    assert template_for("elementwise").subtask_cycles(expr, {"i": 2, "j": 8}, hw) == pytest.approx(
        16 * 2 / hw.vector_flops_per_cycle
    )
    assert template_for("no-such-kind").kind == "elementwise"


def test_registered_templates_are_exactly_the_op_kinds():
    # both directions: every template has a kind a program may hold, every kind a template
    assert set(template_kinds()) == set(OP_KINDS)
    assert len(template_kinds()) == len(OP_KINDS)
    assert all(template_for(kind).kind == kind for kind in OP_KINDS)


def test_registry_refuses_a_template_of_an_unknown_kind():
    class FftTemplate(ComputeTemplate):
        kind = "fft"

    with pytest.raises(ValueError, match="FftTemplate has op kind 'fft', which is not one of "
                                         "runtime_sim.contract.op_kinds.OP_KINDS"):
        _registry([ElementwiseTemplate(), FftTemplate()])
    with pytest.raises(ValueError, match="both have op kind 'elementwise'"):
        _registry([ElementwiseTemplate(), ComputeTemplate()])


def test_attention_step_in_closed_form():
    """One step of fused attention (schedules.attention): both products on the matrix unit,
    each padded to the 16x16x16 tile, then the vector work of the online softmax, by hand;
    the timing simulator charges exactly this per step (plus the synchronization)."""
    from runtime_sim.contract.layout import OpLayout
    from runtime_sim.contract.plan import ExecutionPlan
    from runtime_sim.machine.topology import make_topology
    from runtime_sim.timing.opcost import op_cost
    from tvm_icca.testing.exprs import attention_expr

    hw = preset("ipu-mk2-systolic")  # 16x16x16 tile
    expr = attention_expr(20, 72, 24, batch=(4,), value_dim=10, mask=True, softcap=2.0, dtype="float16")
    t = template_for("attention")
    chunk = {"b0": 2, "i": 20, "d": 10, "j": 9}
    # scores: per head (2), 32 x 32 (k=24 padded) x 16 (j=9 padded); P V: 32 x 16 x 16 (d=10)
    macs = 2 * 32 * (32 * 16 + 16 * 16)
    rate = hw.matrix_flops_per_cycle_for("float16")
    # per score: soft-cap (div, tanh, mul), mask add = 4, then max, sub, exp, sum = 4; the
    # scale once per element of Q's rows (x 24); per row: 5 for the statistics; per output
    # element: 2 for the rescale
    rows = 2 * 20
    vector = rows * 9 * (4 + 4) + rows * 24 + rows * 5 + rows * 10 * 2
    want = 2 * macs / rate + vector / hw.vector_flops_per_cycle
    assert t.subtask_cycles(expr, chunk, hw) == pytest.approx(want, rel=1e-12)
    assert t.epilogue_cycles(expr, {"b0": 2, "i": 20, "d": 10}, hw) == pytest.approx(
        2 * 20 * 10 / hw.vector_flops_per_cycle)
    assert t.flops(expr, {}) == expr.flops() == 2 * 4 * 20 * 72 * (24 + 10)
    # the timing simulator: each step of a plan costs the template's cycles of its chunk
    layout = OpLayout(expr, ExecutionPlan({"b0": 2, "j": 4}, ({}, {}, {}, {}, {})))
    assert dict(layout.rp) == {"b0": 2, "i": 20, "d": 10, "j": 18}
    cost = op_cost(layout, hw, make_topology(hw))
    step = t.subtask_cycles(expr, layout.rp, hw)
    assert cost.step_s == pytest.approx((step + hw.sync_cycles) / hw.clock_hz, rel=1e-12)


def test_attention_score_ops_by_how_often_they_run():
    """Causal masking on axis values: ``i + offset`` once per row, the comparison and the
    select per score; the scale folded into Q; a soft-cap's three nodes per score."""
    from schedules.attention import ScoreOps, score_ops
    from tvm_icca.testing.exprs import attention_expr

    assert score_ops(attention_expr(4, 8, 4, causal=True)) == ScoreOps(2, 1, 1)
    assert score_ops(attention_expr(4, 8, 4, softcap=3.0, mask=True)) == ScoreOps(4, 0, 1)
