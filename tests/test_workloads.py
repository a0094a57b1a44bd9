"""The workload zoo: published hyper-parameters, shapes, operator counts, and every model's
tiny config compiled for "icca" against TVM's own CPU build of the same module."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

import tvm_icca
from runtime_sim.contract.errors import InvalidWorkloadError
from runtime_sim.contract.presets import small_chip
from runtime_sim.functional.device import get_device
from runtime_sim.run_stats import last_run_timing
from tvm_icca.backend.target import icca_pipeline
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.device_call import device_entry
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.workloads import ELK_TABLE2_OPS, PHASES, get_workload, list_workloads
from tvm_icca.workloads._layers import causal_mask_sampler
from tvm_icca.testing.device_runs import assert_metrics_agree, reference_build, run_outputs

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
_VERIFIED: dict[int, list[tuple[tvm.ir.IRModule, str]]] = {}


def _tiny(name: str):
    extra = {"context": 8} if name in LLMS else {}
    return get_workload(name, tiny=True, batch=2, **extra)


# one worker, first: the tiny configs that are one module (the four OPTs, Llama2-7B/13B) are
# verified once per process (_VERIFIED), and each CPU build of a module is made once per process
# (reference_build), shared by the tests below that run the same module on other chips or
# phases; spread over workers, each would compile them again
_ON_ICCA = pytest.mark.xdist_group("tiny_zoo_on_icca")


@_ON_ICCA
@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_tiny_config_on_icca_matches_llvm(name):
    _check_on_icca_against_llvm(_tiny(name), metrics=True)


def last_run_programs():
    """The programs of the device's latest run, in call order."""
    return get_device().last_run.programs


def _check_on_icca_against_llvm(workload, metrics=False):
    """Compile ``workload`` for "icca" on the small chip, run it, compare with TVM's llvm
    build, and check that what ran is what the timing-only path compiles; with ``metrics``,
    that both executors give one value per metric of the run."""
    name = workload.name
    # The tiny configs of one family's sizes are the same module (e.g. the four OPTs): a module
    # structurally equal to one verified earlier in this session is verified (run alone, a
    # test compiles its own).
    bucket = _VERIFIED.setdefault(tvm_ffi.structural_hash(workload.mod), [])
    if any(tvm_ffi.structural_equal(mod, workload.mod) for mod, _ in bucket):
        return
    args = [tvm.runtime.tensor(a) for a in workload.random_args(seed=0)]
    executed: list[str] = []
    parse = device_entry.parse_program
    # the timing-only path below finds the plans of this compile in the cache they share
    # (tests/test_compile_api.py: what a search of its own gives)
    cache = PlanCache()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(device_entry, "parse_program", lambda text: (executed.append(text), parse(text))[1])
        with tvm_icca.use_hardware(_HW):
            got = run_outputs(tvm.compile(workload.mod, target="icca",
                                          relax_pipeline=icca_pipeline(plan_cache=cache)), args)
    stats = tvm_icca.last_run_stats()
    if metrics:  # one value per metric: the device's counters and the timing simulator's
        # report of this run (tests/test_metric_agreement.py: the encoder and preload streams)
        assert_metrics_agree(last_run_programs(), stats, last_run_timing(), name)
    # the one compiler: what ran is, byte for byte, what the timing-only path compiles
    timed = compile_programs(workload.mod, _HW, plan_cache=cache)
    assert executed == [p.to_json() for p in timed.programs]
    assert stats["regions_executed"] == len(timed.programs)
    assert stats["simulated_s"] == timed.simulate().total_s
    want = run_outputs(reference_build(workload.mod), args)
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
    want = relax.VirtualMachine(reference_build(mod),
                                tvm.cpu())["main"](*args).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


_FOUR_CHIPS = small_chip(64, 64 * 1024, num_chips=4, inter_chip_bandwidth=640e9,
                         inter_chip_latency_s=15e-9, hbm_bandwidth=1e12, hbm_controllers=4)


@_ON_ICCA
@pytest.mark.slow
@pytest.mark.parametrize("name, mapped", [
    ("llama2-70b", True), pytest.param("bert-large", True, marks=pytest.mark.long_run), ("resnet18", False)])
def test_tiny_config_on_four_chips_matches_llvm(name, mapped):
    """Chip-aware core orders and split reductions on a small 4-chip HBM system stay exact,
    and what ``tvm_icca.compile`` runs there (preload schedules included) is, byte for byte,
    what the timing-only path compiles (the check of the SRAM-only chip above, with HBM)."""
    workload = _tiny(name)
    args = [tvm.runtime.tensor(a) for a in workload.random_args(seed=1)]
    cache = PlanCache()  # shared by the two compiles, as above
    executed: list[str] = []
    parse = device_entry.parse_program
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(device_entry, "parse_program", lambda text: (executed.append(text), parse(text))[1])
        got = run_outputs(tvm_icca.compile(workload.mod, _FOUR_CHIPS, plan_cache=cache), args)
    stats = tvm_icca.last_run_stats()
    want = run_outputs(reference_build(workload.mod), args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4)
    timed = compile_programs(workload.mod, _FOUR_CHIPS, plan_cache=cache)
    programs = timed.programs
    assert executed == [p.to_json() for p in programs]
    assert stats["regions_executed"] == len(programs)
    assert stats["simulated_s"] == timed.simulate().total_s
    # the zoo's models have no host op left between layers (head reshapes and transposes,
    # rotary slices and concats run on the chip): no region is called twice
    # (tests/test_planner.py: a region called again, with host ops between the calls)
    assert len(programs) == len({p.region for p in programs})
    assert any(p.inputs[i].source == "hbm" for p in programs for i in range(len(p.inputs)))
    if mapped:  # some plan is numbered onto the cores in a chip-aware order
        assert any(op.plan.core_order for p in programs for op in p.ops)


# -- prefill and the training forward over a whole sequence (issue 27) -------------------------
def test_prefill_and_train_signatures_llama2_70b():
    w = get_workload("llama2-70b", phase="prefill", seq_len=2048, batch=2)
    assert PHASES == ("decode", "prefill", "train")
    assert w.config["phase"] == "prefill" and w.config["seq_len"] == 2048 and "context" not in w.config
    assert not [p for p in w.params if p.kind == "kv_cache"]  # nothing to read: the cache is written
    assert [(p.name, p.shape) for p in w.inputs] == [
        ("input_ids", (2, 2048)), ("rope_cos", (2, 2048, 1, 128)), ("rope_sin", (2, 2048, 1, 128))]
    # the causal mask is computed in the graph (tests/test_masks.py), not passed by the host
    assert not [p for p in w.params if p.kind == "mask"]
    ret = w.mod["main"].ret_ty
    assert len(ret.fields) == 1 + 2 * 80
    assert [int(d) for d in ret.fields[0].shape.values] == [2, 1, 32000]  # the last position
    assert [int(d) for d in ret.fields[1].shape.values] == [2, 8, 2048, 128]  # the cache layout
    # the same weights as the decode step
    assert w.num_parameters == get_workload("llama2-70b").num_parameters
    train = get_workload("llama2-70b", phase="train", seq_len=2048, batch=2, num_layers=1)
    assert [int(d) for d in train.mod["main"].ret_ty.shape.values] == [2, 2048, 32000]
    assert "training forward" in train.description


def test_rotary_models_take_prompts_longer_than_their_training_length():
    w = get_workload("llama2-13b", phase="prefill", seq_len=8192, num_layers=1)
    assert w.config["seq_len"] == 8192 > w.config["max_positions"]


def test_phase_arguments_keep_one_meaning():
    assert get_workload("opt-1.3b", seq_len=64, num_layers=1).config["context"] == 64  # decode
    with pytest.raises(InvalidWorkloadError, match="not context"):
        get_workload("llama2-7b", phase="prefill", context=128)
    with pytest.raises(InvalidWorkloadError, match="not both"):
        get_workload("llama2-7b", context=128, seq_len=64)
    with pytest.raises(InvalidWorkloadError, match="unknown phase"):
        get_workload("llama2-7b", phase="backward")
    with pytest.raises(InvalidWorkloadError, match="2,048 positions"):
        get_workload("opt-13b", phase="train", seq_len=4096)  # OPT learned 2,048 positions
    with pytest.raises(InvalidWorkloadError, match="phase"):
        get_workload("bert-large", phase="prefill")


def test_gemma2_prompt_past_the_window_masks_local_layers():
    short = get_workload("gemma2-27b", tiny=True, phase="prefill", seq_len=8, num_layers=2)
    w = get_workload("gemma2-27b", tiny=True, phase="prefill", seq_len=12)  # tiny window: 8
    # both masks are computed in the graph: no host input; the window only past its length
    assert not [p for p in short.params + w.params if p.kind == "mask"]
    # the values the graph computes (tests/test_masks.py compares them with this sampler)
    mask = causal_mask_sampler(12, "float32", 8)(np.random.default_rng(0))
    assert (mask[11, 4:12] == 0).all() and (mask[11, :4] < -1e30).all()


# `make test` keeps Llama's prefill and training forward and Gemma's window; Llama2-70B's
# grouped-query prefill and OPT's learned positions run in `make test-full` (long_run), and
# their decode steps in `make test` above
_PREFILL_CASES = [("llama2-7b", "prefill"), pytest.param("llama2-70b", "prefill", marks=pytest.mark.long_run),
                  pytest.param("opt-1.3b", "prefill", marks=pytest.mark.long_run),
                  ("gemma2-27b", "prefill"), ("llama2-13b", "train")]


@_ON_ICCA
@pytest.mark.slow
@pytest.mark.parametrize("name, phase", _PREFILL_CASES)
def test_tiny_prefill_on_icca_matches_llvm(name, phase):
    # 12 tokens: past the tiny Gemma's window of 8, so its local layers read the sliding mask;
    # one value per metric too (a prompt's embedding lookup counts fractional expected bytes)
    _check_on_icca_against_llvm(get_workload(name, tiny=True, batch=2, phase=phase, seq_len=12),
                                metrics=True)


def _run_llvm(workload, values):
    args = [tvm.runtime.tensor(values[p.name]) for p in workload.params]
    return [t.numpy() for t in run_outputs(reference_build(workload.mod), args)]


@_ON_ICCA
@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param("llama2-70b", marks=pytest.mark.long_run), "opt-1.3b", "gemma2-27b"])
def test_prefill_then_decode_is_a_longer_prefill(name):
    """The three phases are one model: prefilling s-1 tokens and decoding token s against the
    returned keys and values gives the last logits of prefilling s tokens, which are the
    training forward's last position (GQA, OPT's positions, Gemma's window all included)."""
    s = 12
    full = get_workload(name, tiny=True, batch=2, phase="prefill", seq_len=s)
    values = {p.name: a for p, a in zip(full.params, full.random_args(seed=3))}
    prefill = _run_llvm(full, values)
    short = get_workload(name, tiny=True, batch=2, phase="prefill", seq_len=s - 1)
    short_values = {p.name: a for p, a in zip(short.params, short.random_args(seed=3))}
    short_values.update({p.name: values[p.name] for p in short.params if p.kind == "weight"})
    short_values["input_ids"] = values["input_ids"][:, : s - 1]
    cache = _run_llvm(short, short_values)[1:]
    decode = get_workload(name, tiny=True, batch=2, context=s - 1)
    decode_values = {p.name: a for p, a in zip(decode.params, decode.random_args(seed=0))}
    decode_values.update({p.name: values[p.name] for p in decode.params if p.kind == "weight"})
    decode_values["input_ids"] = values["input_ids"][:, s - 1:]
    caches = [p for p in decode.params if p.kind == "kv_cache"]
    for p, kv in zip(caches, cache, strict=True):  # local layers keep the last window - 1
        decode_values[p.name] = kv[:, :, kv.shape[2] - p.shape[2]:]
    step = _run_llvm(decode, decode_values)
    np.testing.assert_allclose(step[0], prefill[0], rtol=1e-4, atol=1e-5)
    for new, whole in zip(step[1:], prefill[1:], strict=True):  # the new token's k, v
        np.testing.assert_allclose(new, whole[:, :, -1:], rtol=1e-4, atol=1e-5)
    train = _run_llvm(get_workload(name, tiny=True, batch=2, phase="train", seq_len=s), values)
    np.testing.assert_allclose(train[0][:, -1:], prefill[0], rtol=1e-6, atol=1e-6)


@pytest.mark.slow
@pytest.mark.full_size
def test_llama2_13b_prefill_at_2048_compiles_timing_only_on_a_pod():
    """One full-size layer of a 2,048-token prefill fits ipu-pod4-hbm: the causal mask is a
    predicate on the positions (no ``[S, S]`` tensor), the attention's scores (40 heads x
    2048 x 2048) never exist as a tensor, and if the attention is cut into query pieces
    (tvm_icca.split.visible_keys) each reads only the keys its rows see."""
    workload = get_workload("llama2-13b", phase="prefill", seq_len=2048, num_layers=1)
    compiled = compile_programs(workload, "ipu-pod4-hbm", progress=False)
    ops = [op for p in compiled.programs for op in p.ops]
    shapes = {(op.expr.kind, tuple(op.expr.output.shape)) for op in ops}
    attention = [op.expr for op in ops if op.expr.kind == "attention"]
    assert sum(e.extent("i") for e in attention) == 2048
    assert all(len(e.inputs) == 3 for e in attention)  # Q, K, V: no mask tensor
    rows = 0
    for e in sorted(attention, key=lambda e: e.extent("j")):
        rows += e.extent("i")
        assert e.extent("j") == rows  # a causal piece's keys end at its last row
    assert not any(shape[-2:] == (2048, 2048) for _, shape in shapes)
    report = compiled.simulate()
    # ~1.39 TFLOP as written (2 x 0.32 B weights x 2048 tokens + 4 x 2048^2 x 5120 of
    # attention); the pieces skip up to half the attention's 0.086 TFLOP: a compute-bound
    # operator mix, unlike a decode step
    assert 1.30e12 < report.flops <= 1.39e12 * 1.02
    assert report.total_s >= report.compute_floor_s > report.hbm_floor_s
    assert report.flops_utilization > 0.3


@pytest.mark.slow
@pytest.mark.full_size
def test_dit_xl2_on_one_chip_with_hbm():
    """Elk §6.4 Fig. 23's DiT-XL point: one IPU Mk2 with 2.7 GB/s of HBM per core (4 TB/s,
    a quarter of ipu-pod4-hbm) compiles and simulates at full width."""
    hw = tvm_icca.preset("ipu-mk2", hbm_bandwidth=4e12, hbm_controllers=4)
    compiled = compile_programs(get_workload("dit-xl2", num_layers=1), hw, progress=False)
    report = compiled.simulate()
    assert report.design == "elk-full" and report.hbm_bytes > 0  # weights preloaded from HBM
    assert report.total_s >= max(report.compute_floor_s, report.hbm_floor_s) > 0
    assert report.peak_sram_bytes_per_core <= hw.sram_bytes_per_core
