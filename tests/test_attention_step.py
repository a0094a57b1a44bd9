"""The fused attention operator on the functional device (runtime_sim.functional.attention_step)
against numpy's three-step ``softmax(Q K^T * scale + mask) @ V``, under many plans of the plan
space: the key axis split across cores (replicas combined with their running max and sum) and
rotated (K, V and the mask's blocks shift through the cores holding Q), rows, features and batch
axes split, padding on every axis; multi-head and grouped-query heads, additive and causal
masks, soft-cap, float16 and long rows of keys. The timing simulator's counts of the same runs
must equal the device's (one value per metric)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from runtime_sim import run_stats
from runtime_sim.contract.errors import DeviceProgramError, InvalidPlanError
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.plan_rules import attention_scratch_bytes, attention_state_bytes
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.contract.validation import validate_program
from runtime_sim.functional.device import SimulatedDevice
from tvm_icca.testing.device_runs import assert_metrics_agree
from tvm_icca.testing.exprs import attention_expr, attention_reference

HW = small_chip(16)
BIG_SRAM = small_chip(16, 512 * 1024)  # whole rows of 1,024 keys on a core


def program(expr: TensorExpr, plan: ExecutionPlan, hw=HW) -> DeviceProgram:
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype) for t in expr.inputs)
    op = OpProgram("attn", expr, plan, tuple(t.name for t in expr.inputs), expr.output.name)
    return DeviceProgram("r0", hw.to_dict(), decls, (expr.output.name,), (op,))


def inputs(expr: TensorExpr, seed: int = 0, mask_fill: float | None = None) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(t.shape).astype(t.dtype) for t in expr.inputs]
    if len(args) > 3 and mask_fill is not None:  # an additive mask hiding about a third of the keys
        hide = rng.random(args[3].shape) < 0.35
        args[3] = np.where(hide, mask_fill, args[3]).astype(args[3].dtype)
    return args


def plans(expr: TensorExpr, max_cores: int, factors=(1, 2, 3)) -> list[ExecutionPlan]:
    """Every valid plan with F_op in ``factors`` per axis on at most ``max_cores`` cores and
    any temporal factors on the key axis (K, V and the mask rotate; nothing else may), in
    both loop orders the factors allow: the attention part of the plan space, enumerated."""
    names = [a.name for a in expr.axes]
    found = []
    for F in itertools.product(*[[f for f in factors if f <= expr.extent(a)] for a in names]):
        if math.prod(F) > max_cores:
            continue
        split = dict(zip(names, F))
        base = OpLayout(expr, ExecutionPlan(split, tuple({} for _ in expr.tensors)))
        keyed = [t for t in range(len(expr.inputs)) if "j" in base.tensor_axes(t)]
        options = [[f for f in range(1, base.sharing(t) + 1) if base.sharing(t) % f == 0] for t in keyed]
        for fts in itertools.product(*options):
            temporal = [{} for _ in expr.tensors]
            for t, f in zip(keyed, fts):
                if f > 1:
                    temporal[t] = {"j": f}
            plan = ExecutionPlan(split, tuple(temporal))
            try:
                OpLayout(expr, plan).validate()
            except InvalidPlanError:
                continue
            found.append(plan)
    return found


def run(expr: TensorExpr, plan: ExecutionPlan, args: list[np.ndarray],
        hw=HW) -> tuple[np.ndarray, SimulatedDevice]:
    dev = SimulatedDevice()
    prog = program(expr, plan, hw)
    (out,) = dev.run(prog, args)
    assert out.dtype == np.dtype(expr.output.dtype) and out.shape == expr.output.shape
    layout = OpLayout(expr, plan)
    stats = dev.last_run_stats()
    assert stats["reduction_bytes"] == layout.reduction_bytes()
    assert stats["rotation_bytes"] == layout.shift_bytes()
    assert stats["peak_sram_bytes_per_core"] == layout.memory_bytes_per_core() + hw.shift_buffer_bytes
    return out, dev


def check(expr: TensorExpr, plan_list: list[ExecutionPlan], args: list[np.ndarray], ref: np.ndarray,
          atol: float, rtol: float = 1e-5, hw=HW) -> None:
    assert plan_list
    for plan in plan_list:
        out, _ = run(expr, plan, args, hw)
        np.testing.assert_allclose(out.astype(np.float32), ref, atol=atol, rtol=rtol,
                                   err_msg=f"plan {plan.to_dict()}")


def spread(items: list, n: int) -> list:
    """``n`` items spread evenly over ``items`` (all when there are fewer)."""
    if len(items) <= n:
        return items
    return [items[round(k * (len(items) - 1) / (n - 1))] for k in range(n)]


# -- the plan space, enumerated ---------------------------------------------------------------
def test_multi_head_additive_mask_every_plan() -> None:
    """Batch and heads, a mask hiding a third of the keys, keys not divisible by the splits
    (padded keys must add nothing): every plan of the enumeration on up to 16 cores."""
    e = attention_expr(5, 7, 4, batch=(2, 2), value_dim=3, mask=True)
    args = inputs(e, mask_fill=-1e4)
    ref = attention_reference(*args[:3], mask=args[3])
    found = plans(e, 16)
    assert len(found) > 300  # the key axis split, rotated and both, with every other split
    assert any(OpLayout(e, p).replicas(4) > 1 for p in found)
    assert any(OpLayout(e, p).S["j"] > 1 for p in found)
    assert any(OpLayout(e, p).S["j"] > 1 and OpLayout(e, p).replicas(4) > 1 for p in found)
    check(e, spread(found, 120), args, ref, atol=2e-6)


def test_grouped_query_heads_share_kv() -> None:
    """GQA: K and V lack the group axis, so the cores that split ``g`` share them."""
    e = attention_expr(4, 9, 4, batch=(1, 2), group=3, causal=True)
    args = inputs(e, seed=1)
    ref = attention_reference(*args, causal=True)
    found = plans(e, 16)
    assert any(p.F("g") > 1 and p.ft(1, "j") > 1 for p in found)
    check(e, spread(found, 60), args, ref, atol=2e-6)


def test_soft_cap_and_causal_mask_with_more_keys_than_rows() -> None:
    """Gemma 2's soft-cap, and a causal mask on axis values (query i sees keys up to
    i + keys - rows): the first key blocks of a row are often all masked."""
    e = attention_expr(6, 11, 8, batch=(2,), softcap=5.0, causal=True, scale=0.3)
    args = inputs(e, seed=2)
    ref = attention_reference(*args, causal=True, softcap=5.0, scale=0.3)
    check(e, spread(plans(e, 12), 60), args, ref, atol=2e-6)


def test_float16_inputs() -> None:
    """Float16 tensors: the device computes in float32 and rounds the output to float16;
    the reference is the float32 computation on the same float16 inputs."""
    e = attention_expr(8, 12, 8, batch=(2,), mask=True, dtype="float16")
    args = inputs(e, seed=3, mask_fill=-65504.0)
    ref = attention_reference(*args[:3], mask=args[3])
    check(e, spread(plans(e, 16), 40), args, ref, atol=2e-3, rtol=2e-3)


def test_long_rows_of_keys() -> None:
    """A long row of keys rotated in many blocks through few rows: the running max grows
    block by block (scores scaled so that exp would overflow without it)."""
    e = attention_expr(3, 1024, 16, scale=4.0, mask=True)
    args = inputs(e, seed=4, mask_fill=-3.0e38)
    ref = attention_reference(*args[:3], mask=args[3], scale=4.0)
    assert np.isfinite(ref).all()
    found = plans(e, 16, factors=(1, 2, 3, 4))
    chosen = spread([p for p in found if OpLayout(e, p).S["j"] >= 4], 6) + \
        spread([p for p in found if p.F("j") >= 3], 3)
    assert max(OpLayout(e, p).S["j"] for p in chosen) >= 9
    check(e, chosen, args, ref, atol=1e-5, rtol=1e-4, hw=BIG_SRAM)


def test_fully_masked_rows_are_nan_like_the_unfused_softmax() -> None:
    """A row whose keys are all -inf is NaN in the unfused reference; the fused operator
    gives the same, and the other rows stay exact (no NaN leaks through the combine)."""
    e = attention_expr(4, 8, 4, mask=True)
    args = inputs(e, seed=5)
    args[3][1, :] = -np.inf
    args[3][2, :5] = -np.inf  # the first key blocks of row 2 are empty
    ref = attention_reference(*args[:3], mask=args[3])
    assert np.isnan(ref[1]).all() and np.isfinite(ref[[0, 2, 3]]).all()
    found = plans(e, 16, factors=(1, 2, 4))
    both = [p for p in found if p.F("j") > 1 and OpLayout(e, p).S["j"] > 1]
    assert both
    for plan in [ExecutionPlan({"j": 4}, ({}, {}, {}, {}, {}))] + spread(both, 4):
        out, _ = run(e, plan, args)
        assert np.isnan(out[1]).all()
        np.testing.assert_allclose(out[[0, 2, 3]], ref[[0, 2, 3]], atol=2e-6)


# -- memory and bytes -------------------------------------------------------------------------
def test_state_and_score_scratch_in_sram_and_replica_bytes() -> None:
    """A core holds its partitions, two float32 statistics per row and one step's scores;
    each output replica sends its partition and its statistics (closed forms)."""
    e = attention_expr(8, 12, 4, batch=(2,))
    plan = ExecutionPlan({"b0": 2, "i": 2, "j": 2}, ({}, {"j": 2}, {}, {}))
    layout = OpLayout(e, plan)
    rows, keys_per_step = 4, 12 // 2 // 2  # per core: 1 head x 4 rows; 6 keys in 2 steps
    assert attention_state_bytes(e, layout.xp) == 2 * 4 * rows
    assert attention_scratch_bytes(e, layout.rp) == 4 * rows * keys_per_step  # < 16 rows
    partitions = 4 * (rows * 4 + 3 * 4 + 6 * 4 + rows * 4)  # Q, K, V blocks, O (float32)
    assert layout.memory_bytes_per_core() == partitions + 2 * 4 * rows + 4 * rows * keys_per_step
    # a core with more rows holds one block of 16 rows of scores at a time
    many = OpLayout(attention_expr(64, 12, 4, batch=(2,)), plan)
    assert attention_scratch_bytes(many.expr, many.rp) == 4 * 16 * keys_per_step
    assert attention_state_bytes(many.expr, many.xp) == 2 * 4 * 32
    assert layout.replica_bytes() == rows * 4 * 4 + 2 * 4 * rows
    assert layout.reduction_bytes() == 4 * layout.replica_bytes()  # 4 of the 8 cores send
    args = inputs(e, seed=6)
    out, _ = run(e, plan, args)
    np.testing.assert_allclose(out, attention_reference(*args), atol=2e-6)


def test_both_executors_count_the_same_bytes() -> None:
    """One value per metric: the timing simulator's report of a device run of attention
    programs has the device's counts (assert_metrics_agree)."""
    e = attention_expr(5, 7, 4, batch=(2,), mask=True)
    args = inputs(e, seed=7)
    found = plans(e, 16)
    chosen = spread([p for p in found if p.F("j") > 1 and OpLayout(e, p).S["j"] > 1], 3)
    for plan in chosen + [ExecutionPlan({"b0": 2, "j": 3}, ({}, {}, {}, {}, {}))]:
        dev = SimulatedDevice()
        prog = program(e, plan)
        dev.run(prog, args)
        stats = run_stats.last_run_stats(device=dev)
        report = run_stats.last_run_timing(dev)
        assert_metrics_agree([prog], stats, report, f"attention {plan.to_dict()}")
        assert report.reduction_bytes == OpLayout(e, plan).reduction_bytes()


def test_flops_count_the_two_products() -> None:
    """2 |batch| |i| |j| (|k| + |d|), the one FLOP count."""
    assert attention_expr(5, 7, 4, batch=(2, 3), value_dim=6).flops() == 2 * 6 * 5 * 7 * (4 + 6)
    assert attention_expr(4, 9, 8, batch=(2,), group=3).flops() == 2 * 2 * 3 * 4 * 9 * (8 + 8)


# -- plans the operator refuses ---------------------------------------------------------------
def test_rows_and_features_never_rotate() -> None:
    e = attention_expr(4, 8, 4)
    for temporal in (({"i": 2}, {}, {}, {}), ({}, {}, {"d": 2}, {})):
        with pytest.raises(InvalidPlanError, match="split but not rotated"):
            OpLayout(e, ExecutionPlan({"j": 2}, temporal)).validate()


def test_validation_of_the_attention_contract() -> None:
    """Kind, combiner and body node only together; one key axis; the value reads no
    core-local axis; the attention node nowhere else; no softmax reduce node."""
    e = attention_expr(4, 8, 4)
    plan = ExecutionPlan({}, ({}, {}, {}, {}))
    validate_program(program(e, plan))
    score, value = e.body["args"]
    bad = {
        "kind": TensorExpr("matmul", e.axes, e.inputs, e.output, e.body, e.local_axes, combiner="softmax"),
        "combiner": TensorExpr("attention", e.axes, e.inputs, e.output, e.body, e.local_axes),
        "body": TensorExpr("attention", e.axes, e.inputs, e.output, score, e.local_axes,
                           combiner="softmax"),
        "one key axis": TensorExpr("attention", e.axes[:-1] + (type(e.axes[0])("j", 8, True),
                                                               type(e.axes[0])("j2", 2, True)),
                                   e.inputs, e.output, e.body, e.local_axes, combiner="softmax"),
        "value": TensorExpr("attention", e.axes, e.inputs, e.output,
                            {"op": "attention", "args": [score, {"op": "reduce", "axes": ["k"],
                                                                 "args": [value]}]},
                            e.local_axes, combiner="softmax"),
        "nested": TensorExpr("attention", e.axes, e.inputs, e.output,
                             {"op": "attention", "args": [score, {"op": "neg", "args": [e.body]}]},
                             e.local_axes, combiner="softmax"),
        "reduce node": TensorExpr("attention", e.axes, e.inputs, e.output,
                                  {"op": "attention", "args": [{**score, "args": [
                                      {**score["args"][0], "combiner": "softmax"}, score["args"][1]]},
                                      value]}, e.local_axes, combiner="softmax"),
    }
    words = {"kind": "together", "combiner": "together", "body": "together",
             "one key axis": "one reduction axis", "value": "core-local axis 'k'",
             "nested": "only valid as the whole body", "reduce node": "unknown reduce combiner"}
    for case, expr in bad.items():
        p = plan if case != "one key axis" else ExecutionPlan({}, ({}, {}, {}, {}))
        with pytest.raises(DeviceProgramError, match=words[case]):
            validate_program(program(expr, p))


def test_against_tvm_llvm_build_of_the_unfused_relax_chain() -> None:
    """The fused operator on the device against TVM's CPU build of the same computation as
    a model writes it in Relax (scale, mask add, softmax, matmul: three operators), float16
    grouped-query heads included (K and V repeated over the group in the Relax graph)."""
    import tvm
    from tvm import relax

    from tvm_icca.testing.device_runs import reference_build

    B, KVH, G, S, T, D = 1, 2, 2, 6, 10, 8
    e = attention_expr(S, T, D, batch=(B, KVH), group=G, mask=True, dtype="float16")
    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType((B, KVH, G, S, D), "float16"))
    k = relax.Var("k", relax.TensorType((B, KVH, T, D), "float16"))
    v = relax.Var("v", relax.TensorType((B, KVH, T, D), "float16"))
    m = relax.Var("m", relax.TensorType((S, T), "float16"))
    op = relax.op
    with bb.function("main", [q, k, v, m]):
        with bb.dataflow():
            kt = bb.emit(op.expand_dims(op.permute_dims(k, [0, 1, 3, 2]), 2))
            s = bb.emit(op.multiply(op.matmul(op.astype(q, "float32"), op.astype(kt, "float32")),
                                    relax.const(1.0 / math.sqrt(D), "float32")))
            s = bb.emit(op.add(s, op.astype(m, "float32")))
            p = bb.emit(op.nn.softmax(s, axis=-1))
            o = bb.emit(op.matmul(p, op.astype(op.expand_dims(v, 2), "float32")))
            out = bb.emit_output(op.astype(o, "float16"))
        bb.emit_func_output(out)
    mod = tvm.IRModule(bb.get().functions)
    args = inputs(e, seed=8, mask_fill=-65504.0)
    vm = relax.VirtualMachine(reference_build(mod), tvm.cpu())
    want = vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()
    found = plans(e, 16)
    for plan in spread([p for p in found if p.F("j") > 1 or OpLayout(e, p).S["j"] > 1], 6):
        out, _ = run(e, plan, args)
        np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), atol=2e-3, rtol=2e-3)


def test_output_with_heads_merged_into_features() -> None:
    """The output written ``[batch, rows, heads * features]`` (a transpose and reshape
    folded into the operator, as a model feeds its output projection): heads split, the
    merged inner axis (the features) whole on every core."""
    from dataclasses import replace

    from runtime_sim.contract.expr import AffineIndex

    e = attention_expr(5, 9, 4, batch=(2, 3), mask=True)
    H, D = 3, 4
    merged = AffineIndex((("b1", D), ("d", 1)))
    out = replace(e.output, shape=(2, 5, H * D),
                  indices=(AffineIndex.of_axis("b0"), AffineIndex.of_axis("i"), merged))
    e = replace(e, output=out)
    args = inputs(e, seed=9)
    ref = attention_reference(*args[:3], mask=args[3]).transpose(0, 2, 1, 3).reshape(2, 5, H * D)
    found = [p for p in plans(e, 16) if p.F("d") == 1]
    assert any(p.F("b1") > 1 and OpLayout(e, p).S["j"] > 1 for p in found)
    check(e, spread(found, 30), args, ref, atol=2e-6)


def test_epilogue_maps_the_normalized_output() -> None:
    """The epilogue sees ``o / l`` (the softmax-weighted sum), not the running output."""
    from dataclasses import replace

    e = replace(attention_expr(4, 10, 4, mask=True),
                epilogue={"op": "add", "args": [{"op": "mul", "args": [{"op": "result"},
                                                                      {"op": "const", "value": 2.0}]},
                                                {"op": "const", "value": 1.0}]})
    args = inputs(e, seed=10)
    ref = 2 * attention_reference(*args[:3], mask=args[3]) + 1
    check(e, [ExecutionPlan({"j": 3, "i": 2}, ({}, {}, {}, {}, {})),
              ExecutionPlan({}, ({}, {}, {}, {}, {}))], args, ref, atol=4e-6)
