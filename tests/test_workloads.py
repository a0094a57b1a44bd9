"""The workload zoo: published hyper-parameters, shapes, operator counts, and every model's
tiny config compiled for "icca" against TVM's own CPU build of the same module."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

import tvm_icca
from runtime_sim.contract.hardware import small_chip
from tvm_icca.drivers.timing_only import compile_programs
from tvm_icca.runtime import device_entry
from tvm_icca.workloads import ELK_TABLE2_OPS, get_workload, list_workloads

ZOO = [
    "bert-large", "vit-b16", "resnet18", "resnet50", "nerf", "opt-1.3b", "opt-6.7b", "opt-13b",
    "opt-30b", "llama2-7b", "llama2-13b", "llama2-70b", "gemma2-27b", "dit-xl2",
]
LLMS = [n for n in ZOO if n.startswith(("opt-", "llama2-", "gemma2-"))]

# Published parameter counts (weights only, no KV cache), in billions: Llama 2 paper Table 1
# and model cards (6.74B / 13.02B / 68.98B), OPT paper Table 1, Gemma 2 report Table 1 (27.2B),
# DiT paper Table 4 (675M), BERT-large 334M (encoder, no pooler), ViT-B 86M (Table 1), torchvision
# ResNet-18 11.69M / ResNet-50 25.56M (minus the folded batch-norm scales), NeRF ~0.6M.
PUBLISHED_PARAMS = {
    "llama2-7b": 6.74, "llama2-13b": 13.02, "llama2-70b": 68.98, "opt-1.3b": 1.3, "opt-6.7b": 6.7,
    "opt-13b": 12.9, "opt-30b": 30.0, "gemma2-27b": 27.2, "dit-xl2": 0.675, "bert-large": 0.334,
    "vit-b16": 0.0866, "resnet18": 0.0117, "resnet50": 0.0256, "nerf": 0.000595,
}


def test_registry_lists_the_zoo():
    assert list_workloads() == ZOO
    assert get_workload("DiT-XL/2", tiny=True).name == "dit-xl2"
    with pytest.raises(KeyError, match="unknown workload"):
        get_workload("gpt-5")


@pytest.mark.parametrize("name", ZOO)
def test_full_size_matches_published_parameter_count(name):
    workload = get_workload(name)  # shapes only: cheap even for 70B
    assert workload.num_parameters / 1e9 == pytest.approx(PUBLISHED_PARAMS[name], rel=0.02)
    assert workload.config["dtype"] == "float16"


def test_decode_step_signature_llama2_70b():
    w = get_workload("llama2-70b", batch=32, context=2048)
    assert w.config["heads"] == 64 and w.config["kv_heads"] == 8 and w.config["layers"] == 80
    caches = [p for p in w.params if p.kind == "kv_cache"]
    assert len(caches) == 2 * 80
    assert {p.shape for p in caches} == {(32, 8, 2048, 128)}
    assert [p.name for p in w.inputs] == ["input_ids", "rope_cos", "rope_sin"]
    assert w.inputs[0].shape == (32, 1)  # one new token per sequence, not a prefill
    ret = w.mod["main"].ret_ty
    assert len(ret.fields) == 1 + 2 * 80  # logits, then each layer's new key and value
    assert [int(d) for d in ret.fields[0].shape.values] == [32, 1, 32000]
    assert [int(d) for d in ret.fields[1].shape.values] == [32, 8, 1, 128]


def test_gemma2_sliding_window_layers_cache_less():
    w = get_workload("gemma2-27b", batch=1, context=8192, num_layers=2)
    caches = {p.name: p.shape for p in w.params if p.kind == "kv_cache"}
    assert caches["layers.0.self_attn.k_cache"] == (1, 16, 4095, 128)  # local layer
    assert caches["layers.1.self_attn.k_cache"] == (1, 16, 8192, 128)  # global layer


@pytest.mark.parametrize("name", sorted(ELK_TABLE2_OPS))
def test_operator_counts_close_to_elk_table2(name):
    # Granularity differs (see tvm_icca.workloads docstring) but not by more than ~30 %.
    sizes = {"batch": 32, "context": 2048} if name in LLMS else {"batch": 32}
    ops = get_workload(name, **sizes).num_ops
    assert abs(ops - ELK_TABLE2_OPS[name]) / ELK_TABLE2_OPS[name] < 0.3


def test_llama_layer_op_count_is_stable():
    one = get_workload("llama2-13b", num_layers=1).num_ops
    two = get_workload("llama2-13b", num_layers=2).num_ops
    assert two - one == 53  # per-layer ops, itemized in the zoo's docstring
    assert get_workload("llama2-13b").num_ops == one + 39 * 53


# -- functional: every model's tiny config, icca vs llvm ---------------------------------------
_HW = small_chip(64, 64 * 1024)
_REFERENCE_TARGET = {"kind": "llvm", "opt-level": 0}  # same TIR, faster LLVM code generation
_VERIFIED: dict[int, list[tuple[tvm.ir.IRModule, str]]] = {}


def _tiny(name: str):
    extra = {"context": 8} if name in LLMS else {}
    return get_workload(name, tiny=True, batch=2, **extra)


def _run(ex, args):
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*args)
    return [out] if hasattr(out, "numpy") else list(out)


@pytest.mark.parametrize("name", ZOO)
def test_tiny_config_on_icca_matches_llvm(name):
    workload = _tiny(name)
    # The tiny configs of one family's sizes are the same module (e.g. the four OPTs): a module
    # structurally equal to one verified earlier in this session is verified (run alone, a
    # test compiles its own).
    bucket = _VERIFIED.setdefault(tvm_ffi.structural_hash(workload.mod), [])
    if any(tvm_ffi.structural_equal(mod, workload.mod) for mod, _ in bucket):
        return
    args = [tvm.runtime.tensor(a) for a in workload.random_args(seed=0)]
    executed: list[str] = []
    parse = device_entry.parse_program
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(device_entry, "parse_program", lambda text: (executed.append(text), parse(text))[1])
        with tvm_icca.use_hardware(_HW):
            got = _run(tvm.compile(workload.mod, target="icca"), args)
    stats = tvm_icca.last_run_stats()
    # the one compiler: what ran is, byte for byte, what the timing-only path compiles
    timed = compile_programs(workload.mod, _HW)
    assert executed == [p.to_json() for p in timed.programs]
    assert stats["regions_executed"] == len(timed.programs)
    assert stats["simulated_s"] == timed.simulate().total_s
    want = _run(tvm.compile(workload.mod, target=tvm.target.Target(_REFERENCE_TARGET)), args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4)
    assert stats["regions_executed"] >= 1
    assert stats["peak_sram_bytes_per_core"] <= _HW.sram_bytes_per_core
    bucket.append((workload.mod, name))


def test_llm_layers_offload_everything_but_head_reshapes():
    part = tvm_icca.partition_for_icca(_tiny("llama2-70b").mod, _HW)
    report = tvm_icca.partition_report(part)
    # RMSNorm, SiLU, the attention's max/maximum, the fused qkv split (as slices) and the
    # rotary embedding (slices, negation, concat: tvm_icca.ops.data_movement) go to the chip ...
    assert {"relax.nn.rms_norm", "relax.nn.silu", "relax.max", "relax.maximum", "relax.negative",
            "relax.matmul", "relax.exp", "relax.divide", "relax.strided_slice",
            "relax.concat"} <= set(report["offloaded_ops"])
    composites = [c for r in report["regions"] for c in r["composites"]]
    assert "icca.rotary_embedding" in composites
    # ... and the embedding lookup (tvm_icca.ops.gather): only the head reshapes stay.
    assert "icca.take" in composites
    assert set(report["host_ops"]) == {"relax.reshape"}


@pytest.mark.parametrize("op, expect", [
    (lambda x, w: relax.op.nn.silu(x), "icca.silu"),
    (lambda x, w: relax.op.nn.rms_norm(x, w, axes=[-1]), "icca.rms_norm"),
    (lambda x, w: relax.op.negative(x), "icca.negative"),
    (lambda x, w: relax.op.max(x, axis=[-1], keepdims=True), "icca.max"),
    (lambda x, w: relax.op.min(x, axis=[1]), "icca.min"),
    (lambda x, w: relax.op.maximum(x, w), "icca.maximum"),
    (lambda x, w: relax.op.minimum(x, w), "icca.minimum"),
])
def test_patterns_added_for_the_zoo_are_offloaded_and_exact(op, expect):
    x = relax.Var("x", relax.TensorType((6, 40), "float32"))
    w = relax.Var("w", relax.TensorType((40,), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(op(x, w))
        bb.emit_func_output(out)
    mod = bb.get()
    part = tvm_icca.partition_for_icca(mod, small_chip(16, 32 * 1024))
    report = tvm_icca.partition_report(part)
    assert [c for r in report["regions"] for c in r["composites"]] == [expect]
    assert not report["host_ops"]
    rng = np.random.default_rng(1)
    args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32")) for s in ((6, 40), (40,))]
    got = relax.VirtualMachine(tvm.compile(part, target="icca"), tvm.cpu())["main"](*args).numpy()
    want = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target(_REFERENCE_TARGET)),
                                tvm.cpu())["main"](*args).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


_FOUR_CHIPS = small_chip(64, 64 * 1024, num_chips=4, inter_chip_bandwidth=640e9,
                         inter_chip_latency_s=15e-9, hbm_bandwidth=1e12, hbm_controllers=4)


@pytest.mark.parametrize("name, mapped", [
    ("llama2-70b", True), ("bert-large", True), ("resnet18", False)])
def test_tiny_config_on_four_chips_matches_llvm(name, mapped):
    """Chip-aware core orders and split reductions on a small 4-chip HBM system stay exact."""
    workload = _tiny(name)
    args = [tvm.runtime.tensor(a) for a in workload.random_args(seed=1)]
    got = _run(tvm_icca.compile(workload.mod, _FOUR_CHIPS), args)
    want = _run(tvm.compile(workload.mod, target=tvm.target.Target(_REFERENCE_TARGET)), args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4)
    programs = compile_programs(workload.mod, _FOUR_CHIPS).programs
    if mapped:  # some plan is numbered onto the cores in a chip-aware order
        assert any(op.plan.core_order for p in programs for op in p.ops)
