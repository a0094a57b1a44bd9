"""Split regions (tvm_icca.split.region_split) run exactly: tiny LLMs on small chips whose
attention cannot fit whole are split, run on the functional device against TVM's CPU build,
and both executors agree on the bytes preloaded, distributed and executed.

Each test plans once: the device run builds ``compile_programs``' planned module
(``CompiledModel.module``), so the programs it checks are the ones that run;
tests/test_workloads.py checks that ``tvm_icca.compile`` plans the same programs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.split.region_split import JOIN_FAN_IN, original_operator, piece_name
from tvm_icca.split.split_choice import needs_split
from tvm_icca.testing.device_runs import run_against_llvm, run_outputs
from tvm_icca.testing.relax_functions import relax_function
from tvm_icca.workloads import get_workload


def _chip(cores: int, sram_kib: int = 32):
    return small_chip(cores, sram_kib * 1024).with_overrides(name=f"hbm-{cores}", hbm_bandwidth=1e11,
                                                       hbm_controllers=2)


def _split_ops(model):
    return [op for p in model.programs for op in p.ops if original_operator(op.name) != op.name]


@pytest.mark.slow
@pytest.mark.xdist_group("split_llama")  # the session's plan_cache: tests/test_piece_grouping.py
@pytest.mark.parametrize("cores, sram_kib, kwargs", [
    (16, 32, {"context": 1024}),                     # decode: the KV cache does not fit
    (64, 32, {"phase": "prefill", "seq_len": 256}),  # prefill: the scores do not fit
])
def test_split_llm_runs_exactly_and_executors_agree(cores, sram_kib, kwargs, plan_cache,
                                                    monkeypatch):
    if kwargs.get("phase") == "prefill":
        # unfused, as the scores exist only then (fused, this prompt's attention fits whole);
        # a cache of its own: the session's holds the fused partition of the same module
        import tvm_icca.partition.partitioner as partitioner

        patterns = partitioner.get_icca_patterns
        monkeypatch.setattr(partitioner, "get_icca_patterns",
                            lambda: [p for p in patterns() if p.name != "icca.attention"])
        plan_cache = None
    workload = get_workload("llama2-13b", tiny=True, batch=2, **kwargs)
    chip = _chip(cores, sram_kib)
    model = compile_programs(workload.mod, chip, preload="elk-full", plan_cache=plan_cache)
    pieces = _split_ops(model)
    assert pieces, "the case must need a split"
    summary = model.summary()
    assert 0 < summary["split_ops"] < summary["split_pieces"] <= len(pieces)
    assert any(a.view is not None for op in pieces for a in op.expr.inputs), \
        "pieces read their blocks of larger tensors as views"
    # the programs checked above are the ones run (not planned a second time)
    _, report = run_against_llvm(workload, chip, "elk-full", planned=model.module)
    assert report.peak_sram_bytes_per_core <= chip.sram_bytes_per_core


def test_unsplit_model_is_unchanged():
    """A model that fits gets no pieces: the split stage leaves its programs alone."""
    model = compile_programs(get_workload("llama2-13b", tiny=True, batch=2, context=8).mod,
                             _chip(64), preload="elk-full")
    assert not _split_ops(model)
    assert all(a.view is None for p in model.programs for op in p.ops for a in op.expr.inputs)


def _attention(ctx: int, dim: int) -> tvm.IRModule:
    """Decode attention of one query over a cache, written as decode kernels compute it."""
    def body(q, k, v):
        s = relax.op.matmul(q, relax.op.permute_dims(k, [0, 1, 3, 2]))
        e = relax.op.exp(relax.op.subtract(s, relax.op.max(s, axis=-1, keepdims=True)))
        return relax.op.divide(relax.op.matmul(e, v), relax.op.sum(e, axis=-1, keepdims=True))

    func = relax_function(((1, 1, 1, dim), (1, 1, ctx, dim), (1, 1, ctx, dim)), body,
                          names=["q", "k_cache", "v_cache"])
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def test_attention_split_along_the_context_matches_numpy():
    """One head, one query: the only axes that cut the cache run along the context (or the
    head dimension), so the cache is read as HBM slices and the scores' maximum and sum and
    the ``P V`` product are combined from partial results."""
    ctx, dim = 2048, 64
    mod = _attention(ctx, dim)
    chip = _chip(16)
    model = compile_programs(mod, chip, resident=["k_cache", "v_cache"], preload="elk-full")
    assert _split_ops(model)
    # the pieces' blocks of the caches add up to the caches: each HBM byte counted once
    assert model.simulate().hbm_bytes == 2 * ctx * dim * 4
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(np.float32)
               for s in ((1, 1, 1, dim), (1, 1, ctx, dim), (1, 1, ctx, dim)))
    s = q @ k.transpose(0, 1, 3, 2)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    ex = tvm_icca.compile(model.module, chip, resident=["k_cache", "v_cache"], preload="elk-full")
    got = run_outputs(ex, [tvm.runtime.tensor(a) for a in (q, k, v)])[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_piece_names_lead_back_to_their_operator():
    assert original_operator(piece_name("r.op3", 11)) == "r.op3"
    assert original_operator("r.op3.combine") == "r.op3"
    assert original_operator("r.op3.concat.j0.2") == "r.op3"
    assert original_operator("r.op3") == "r.op3"
    assert JOIN_FAN_IN >= 2


def _mlp(tokens: int, dim: int, hidden: int) -> tvm.IRModule:
    """A Llama MLP block over a long prompt: ``x + down(silu(gate(n)) * up(n))``, ``n`` the
    RMS-normed ``x``."""
    def body(x, w_gate, w_up, w_down):
        n = relax.op.nn.rms_norm(x, relax.const(np.ones(dim, "float32")), axes=[-1])
        g = relax.op.nn.silu(relax.op.matmul(n, w_gate))
        return relax.op.add(x, relax.op.matmul(relax.op.multiply(g, relax.op.matmul(n, w_up)), w_down))

    func = relax_function(((tokens, dim), (dim, hidden), (dim, hidden), (hidden, dim)), body,
                          names=["x", "w_gate", "w_up", "w_down"])
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def test_mlp_chain_is_cut_when_its_intermediates_fill_the_chip():
    """Every operator of the MLP fits alone, but the gate's output held while the up
    projection runs leaves it no room: the chain from the norm that feeds both is cut along
    the tokens and runs piece by piece (split_choice.pressure_root), exactly."""
    tokens, dim, hidden = 1024, 32, 128
    mod, chip = _mlp(tokens, dim, hidden), _chip(16, 48)
    resident = ["w_gate", "w_up", "w_down"]
    model = compile_programs(mod, chip, resident=resident, preload="elk-full")
    ops = model.programs[0].ops
    norm = ops[0]
    assert norm.label.startswith("rms norm (part 1/") and not needs_split(norm.expr, chip), \
        "the norm fits alone: it is cut for what its readers hold"
    # piece by piece: the second norm piece runs after the first piece's down projection
    kinds = [op.label.split(" (")[0] for op in ops]
    second = next(i for i, op in enumerate(ops) if op.label.startswith("rms norm (part 2/"))
    assert kinds[:second] == ["rms norm", "matmul + silu", "matmul", "multiply", "matmul + bias"]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((tokens, dim)).astype(np.float32)
    wg, wu = (rng.standard_normal((dim, hidden)).astype(np.float32) / 4 for _ in range(2))
    wd = rng.standard_normal((hidden, dim)).astype(np.float32) / 8
    n = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)
    g = n @ wg
    want = x + ((g / (1 + np.exp(-g))) * (n @ wu)) @ wd
    ex = tvm_icca.compile(model.module, chip, resident=resident, preload="elk-full")
    got = run_outputs(ex, [tvm.runtime.tensor(a) for a in (x, wg, wu, wd)])[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _softmax_attention(heads: int, ctx: int, dim: int) -> tvm.IRModule:
    """Decode attention as exported models write it: ``softmax(q K^T + mask) V``."""
    def body(q, k, v, mask):
        s = relax.op.add(relax.op.matmul(q, relax.op.permute_dims(k, [0, 1, 3, 2])), mask)
        return relax.op.matmul(relax.op.nn.softmax(s, axis=-1), v)

    func = relax_function(((1, heads, 1, dim), (1, heads, ctx, dim), (1, heads, ctx, dim),
                           (1, 1, 1, ctx)), body, names=["q", "k_cache", "v_cache", "mask"])
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def test_softmax_over_keys_cut_into_blocks_uses_the_online_combine(monkeypatch):
    """The scores of a cache too long for the chip are cut along the keys; the softmax then
    runs per block (maximum, shifted exponent, sum, partial ``P V``) and one operator
    rescales the blocks to their common maximum (split.online_softmax), exactly. The
    attention is kept unfused here (the fused operator's key blocks:
    tests/test_attention_keys.py)."""
    import tvm_icca.partition.partitioner as partitioner

    patterns = partitioner.get_icca_patterns
    monkeypatch.setattr(partitioner, "get_icca_patterns",
                        lambda: [p for p in patterns() if p.name != "icca.attention"])
    heads, ctx, dim = 2, 4096, 32
    mod, chip = _softmax_attention(heads, ctx, dim), _chip(16)
    resident = ["k_cache", "v_cache"]
    model = compile_programs(mod, chip, resident=resident, preload="elk-full")
    labels = [op.label for p in model.programs for op in p.ops]
    blocks = sum("(online, block" in label and label.endswith("maximum") for label in labels)
    assert blocks >= 2, labels
    assert any("online softmax of" in label for label in labels)
    assert not any("joined" in label for label in labels), "no whole row is put back together"
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(s).astype(np.float32)
               for s in ((1, heads, 1, dim), (1, heads, ctx, dim), (1, heads, ctx, dim)))
    mask = np.where(rng.random((1, 1, 1, ctx)) < 0.1, -1e9, 0).astype(np.float32)
    s = q @ k.transpose(0, 1, 3, 2) + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    ex = tvm_icca.compile(model.module, chip, resident=resident, preload="elk-full")
    got = run_outputs(ex, [tvm.runtime.tensor(a) for a in (q, k, v, mask)])[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _lm_head(tokens: int, dim: int, vocab: int) -> tvm.IRModule:
    """A training forward's last operator: the logits of every position, the model's result."""
    func = relax_function(((tokens, dim), (dim, vocab)), lambda x, w: relax.op.matmul(x, w),
                          names=["x", "w_head"])
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def test_host_output_in_pieces_is_joined_by_the_host():
    """Logits too large for the chip are cut; only the host reads them, so each piece leaves
    the chip as it is produced and the host concatenates them (``DeviceProgram.host_joins``):
    no concat operator holds the whole tensor on chip. Exact against numpy; the timing
    simulator returns exactly the output's bytes to the host."""
    from runtime_sim.contract.errors import DeviceProgramError
    from runtime_sim.contract.program import DeviceProgram, HostJoin
    from runtime_sim.contract.validation import validate_program

    tokens, dim, vocab = 512, 32, 1024
    mod, chip = _lm_head(tokens, dim, vocab), _chip(16)
    model = compile_programs(mod, chip, resident=["w_head"], preload="elk-full")
    program = model.programs[0]
    (name, join), = program.host_joins.items()
    assert program.outputs == (name,) and name in program.host_outputs
    assert len(join.pieces) > 1 and not any(".concat" in op.name for op in program.ops)
    assert DeviceProgram.from_json(program.to_json()) == program
    report = model.simulate()
    assert sum(op.host_out_bytes for op in report.per_op) == tokens * vocab * 4
    rng = np.random.default_rng(2)
    x = rng.standard_normal((tokens, dim)).astype(np.float32)
    w = rng.standard_normal((dim, vocab)).astype(np.float32)
    ex = tvm_icca.compile(model.module, chip, resident=["w_head"], preload="elk-full")
    got = run_outputs(ex, [tvm.runtime.tensor(a) for a in (x, w)])[0].numpy()
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)
    # a join the device cannot trust is refused before anything runs
    bad = [HostJoin(join.dim, join.pieces + ("missing",)),
           HostJoin(join.dim + 5, join.pieces),
           HostJoin(join.dim, join.pieces[:1] + join.pieces),
           HostJoin(join.dim, ())]
    for wrong in bad:
        with pytest.raises(DeviceProgramError):
            validate_program(dataclasses.replace(program, host_joins={name: wrong}), chip)
    for changes in ({"version": 5}, {"host_outputs": ()}):
        with pytest.raises(DeviceProgramError):
            validate_program(dataclasses.replace(program, **changes), chip)
