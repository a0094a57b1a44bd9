"""Fused attention from the patterns exporters emit (tvm_icca.ops.attention, the partition
pattern and its check; tvm_icca.lower.te_attention, the lowering to the attention tensor
expression).

Each exporter-shaped block of :mod:`tvm_icca.testing.attention_exports` must become one
operator of kind ``attention`` where, without the pattern, it was the product, the softmax
and the second product (and the elementwise ops between); the look-alikes that are not
``softmax(score) @ V`` must stay as they were.
"""

from __future__ import annotations

import collections

import pytest
from tvm import relax

import tvm_icca
import tvm_icca.partition.partitioner as partitioner
from runtime_sim.contract.expr import walk_expr
from tvm_icca import load_onnx
from tvm_icca.lower.region import extract_region
from tvm_icca.ops.attention import attention_reason
from tvm_icca.partition.patterns import get_icca_patterns
from tvm_icca.testing.attention_exports import FUSED, UNFUSED, Dims
from tvm_icca.testing.export_corpus import check_case
from tvm_icca.workloads import get_workload

HW = tvm_icca.small_chip(64)


def _partition(mod, with_attention: bool = True, monkeypatch=None):
    if not with_attention:
        monkeypatch.setattr(partitioner, "get_icca_patterns", lambda: [
            p for p in get_icca_patterns() if p.name != "icca.attention"])
    return partitioner.partition_for_icca(mod, HW)


def _composites(part) -> collections.Counter:
    report = partitioner.partition_report(part)
    return collections.Counter(c for r in report["regions"] for c in r["composites"])


def _operators(part) -> list:
    """The extracted operators of every region of ``part``."""
    return [op for name, func in partitioner.icca_regions(part).items()
            for op in extract_region(func, name, HW).ops]


def _axes_read(node) -> set[str]:
    return {a for n in walk_expr(node) if n["op"] == "load" for i in n["index"] for a, _ in i["terms"]}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_exporter_attention_is_one_operator(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    case = FUSED[name]()
    mod = load_onnx(case.model)
    fused = _operators(_partition(mod))
    kinds = collections.Counter(op.expr.kind for op in fused)
    assert kinds["attention"] == 1 and "softmax" not in kinds and "matmul" not in kinds, kinds
    with monkeypatch.context() as patch:
        unfused = _operators(_partition(mod, with_attention=False, monkeypatch=patch))
    before = collections.Counter(op.expr.kind for op in unfused)
    # before: Q K^T and P V as matmuls (reduce when the scale or cast sits inside the sum),
    # the softmax, and the scores' elementwise ops
    assert before["softmax"] == 1 and before["matmul"] + before["reduce"] >= 2, before
    # three or more operators became one; the others (GQA's repeat_kv, a where mask) stay
    assert len(unfused) - len(fused) >= 2
    rest = kinds - collections.Counter({"attention": 1})
    assert rest <= before - collections.Counter({"softmax": 1}), (rest, before)
    (expr,) = [op.expr for op in fused if op.expr.kind == "attention"]
    q_shape = case.inputs["q"].shape
    assert expr.combiner == "softmax" and expr.body["op"] == "attention"
    assert [a.name for a in expr.axes] == ["b0", "b1", "i", "d", "j"]
    assert [a.reduce for a in expr.axes] == [False] * 4 + [True]
    assert expr.extent("i") == q_shape[2] and expr.extent("j") == case.inputs["k"].shape[2]
    assert [(a.name, a.extent) for a in expr.local_axes] == [("k", q_shape[3])]
    assert expr.output.shape == q_shape and expr.output.dtype == str(case.inputs["q"].dtype)
    score, value = expr.body["args"]
    # Q, K, V first; the score never reads d, the value never i or k
    assert "d" not in _axes_read(score) and _axes_read(value) <= {"b0", "b1", "j", "d"}
    sums = [n for n in walk_expr(score) if n["op"] == "reduce"]
    assert len(sums) == 1 and sums[0]["axes"] == ["k"] and sums[0]["combiner"] == "sum"
    product = sums[0]["args"][0]
    assert product["op"] == "mul" and [a.get("input") for a in product["args"]] == [0, 1]
    assert [[a for i in n["index"] for a, _ in i["terms"]] for n in product["args"]] == \
        [["b0", "b1", "i", "k"], ["b0", "b1", "j", "k"]]
    assert value["op"] == "load" and value["input"] == 2


@pytest.mark.parametrize("name", sorted(UNFUSED))
def test_lookalikes_stay_unfused(name: str) -> None:
    part = _partition(load_onnx(UNFUSED[name]().model))
    composites = _composites(part)
    assert "icca.attention" not in composites and composites["icca.softmax"] == 1, composites
    assert all(op.expr.kind != "attention" for op in _operators(part))


def _bindings(func: relax.Function) -> dict:
    return {b.var: b.value for block in func.body.blocks for b in block.bindings}


def _chain(softmax_axis: int = -1, mask_shape=(8, 8), score_shape=(1, 2, 8, 8)):
    """``matmul(softmax(matmul(q, k^T) + m, axis), v)`` built with a BlockBuilder: the
    root call and the bindings the check reads."""
    b, h, s, d = score_shape[0], score_shape[1], score_shape[2], 4
    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType((b, h, s, d), "float32"))
    k = relax.Var("k", relax.TensorType((b, h, s, d), "float32"))
    v = relax.Var("v", relax.TensorType((2, h, s, d), "float32"))
    m = relax.Var("m", relax.TensorType(mask_shape, "float32"))
    with bb.function("f", [q, k, v, m]):
        with bb.dataflow():
            scores = bb.emit(relax.op.matmul(q, relax.op.permute_dims(k, [0, 1, 3, 2])))
            masked = bb.emit(relax.op.add(scores, m))
            probs = bb.emit(relax.op.nn.softmax(masked, axis=softmax_axis))
            out = bb.emit_output(relax.op.matmul(probs, v))
        bb.emit_func_output(out)
    func = bb.get()["f"]
    bound = _bindings(func)
    root = [value for var, value in bound.items() if var.same_as(func.body.body)][0]
    return root, bound


def test_attention_reason_accepts_attention_and_names_what_is_not() -> None:
    root, bound = _chain(score_shape=(2, 2, 8, 8))
    assert attention_reason(root, bound) is None
    root, bound = _chain(softmax_axis=2, score_shape=(2, 2, 8, 8))
    assert "not over the keys" in attention_reason(root, bound)
    root, bound = _chain(mask_shape=(2, 1, 8, 8), score_shape=(1, 2, 8, 8))
    assert "broadcasts up" in attention_reason(root, bound)


@pytest.mark.parametrize("name, kwargs", [
    ("llama2-7b", {"phase": "prefill", "batch": 2, "seq_len": 12}),
    ("gemma2-27b", {"phase": "prefill", "batch": 2, "seq_len": 12}),  # soft-cap, sliding mask
    ("llama2-70b", {"phase": "prefill", "batch": 2, "seq_len": 12}),  # grouped-query
    ("bert-large", {}),
    ("vit-b16", {}),
])
def test_zoo_attention_is_fused(name: str, kwargs: dict) -> None:
    workload = get_workload(name, tiny=True, **kwargs)
    part = _partition(workload.mod)
    composites = _composites(part)
    layers = sum(1 for op in _operators(part) if op.expr.kind == "attention")
    assert layers == composites["icca.attention"] >= 2 and "icca.softmax" not in composites


# -- on the chip ---------------------------------------------------------------------------
SMALL = Dims(batch=1, heads=2, tokens=4, head_dim=8)  # the plan search of each stays fast


@pytest.mark.parametrize("name", sorted(FUSED))
def test_exporter_attention_is_exact_on_the_chip(name: str) -> None:
    """Each export path's block, compiled for the chip with its attention fused, computes
    what ``onnx.reference`` computes (float32; float16 to its rounding)."""
    case = FUSED[name](SMALL)
    result = check_case(case, tvm_icca.small_chip(16))
    assert _composites(result.partitioned)["icca.attention"] == 1
    assert result.regions == 1 and result.device_calls == 1 and result.host_ops == {}, result
    assert result.max_rel_error <= (2e-3 if "fp16" in name else 1e-5), result


def test_only_factors_outside_the_head_dimension_leave_its_sum() -> None:
    from tvm_icca.lower.te_attention import _hoisted

    def load(i, *axes):
        return {"op": "load", "input": i, "index": [{"terms": [[a, 1]], "offset": 0} for a in axes]}

    c = load(3)
    q, k = load(0, "i", "k"), load(1, "j", "k")
    scaled = {"op": "reduce", "combiner": "sum", "axes": ["k"], "args": [
        {"op": "mul", "args": [{"op": "div", "args": [q, c]}, {"op": "mul", "args": [k, c]}]}]}
    plain = {"op": "reduce", "combiner": "sum", "axes": ["k"], "args": [
        {"op": "mul", "args": [q, k]}]}
    # sum_k (q / c)(k c) = ((sum_k q k) / c) c
    assert _hoisted(scaled) == {"op": "mul", "args": [{"op": "div", "args": [plain, c]}, c]}
    # a divisor that reads k stays inside
    divided = {"op": "reduce", "combiner": "sum", "axes": ["k"], "args": [
        {"op": "div", "args": [{"op": "mul", "args": [q, c]}, k]}]}
    assert _hoisted(divided) == divided


def test_lowering_gives_the_contract_expression() -> None:
    """``softmax(Q K^T * 0.25 + M) @ V`` lowers to what ``attention_expr`` builds from the
    contract's definition (names aside; constants kept in the composite)."""
    from dataclasses import replace

    from tvm_icca.testing.exprs import attention_expr

    shape = (2, 3, 8, 4)
    params = [relax.Var(n, relax.TensorType(shape, "float32")) for n in "qkv"]
    mask = relax.Var("m", relax.TensorType((8, 8), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [*params, mask]):
        with bb.dataflow():
            q, k, v = params
            s = bb.emit(relax.op.matmul(q, relax.op.permute_dims(k, [0, 1, 3, 2])))
            s = bb.emit(relax.op.add(relax.op.multiply(s, relax.const(0.25, "float32")), mask))
            out = bb.emit_output(relax.op.matmul(relax.op.nn.softmax(s, axis=-1), v))
        bb.emit_func_output(out)
    part = partitioner.partition_for_icca(bb.get(), HW, bind_constants=True)
    (op,) = _operators(part)
    want = attention_expr(8, 8, 4, batch=(2, 3), mask=True, scale=0.25)

    def canonical(expr):  # the converter marks core-local axes as reductions; the key blanks names
        local = tuple(replace(a, reduce=False) for a in expr.local_axes)
        return replace(expr, local_axes=local).structure_key()

    assert canonical(op.expr) == canonical(want)
