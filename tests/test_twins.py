"""Twins (tvm_icca.split.twins): a split decision reaches every layer that repeats the
operator, so a model of many identical blocks needs as many rounds of planning as one."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass import region_plans
from tvm_icca.split.twins import twin_groups
from tvm_icca.testing.device_runs import run_outputs
from tvm_icca.testing.relax_functions import relax_function

TOKENS, DIM, HIDDEN = 1024, 32, 128

# one worker compiles the module's models once (make test runs on several)
pytestmark = pytest.mark.xdist_group("twins")


def _chip():
    # every MLP operator fits alone; the gate's output held beside the up projection does not
    return small_chip(16, 48 * 1024).with_overrides(name="hbm-16", hbm_bandwidth=1e11,
                                                    hbm_controllers=2)


def _blocks(n: int) -> tuple[tvm.IRModule, list[str]]:
    """``n`` Llama MLP blocks over a long prompt, after an input bias."""
    def body(x, bias, *ws):
        h = relax.op.add(x, bias)
        for b in range(n):
            wg, wu, wd = ws[3 * b:3 * b + 3]
            normed = relax.op.nn.rms_norm(h, relax.const(np.ones(DIM, "float32")), axes=[-1])
            g = relax.op.nn.silu(relax.op.matmul(normed, wg))
            h = relax.op.add(h, relax.op.matmul(relax.op.multiply(g, relax.op.matmul(normed, wu)), wd))
        return h

    shapes = [(TOKENS, DIM), (DIM,)] + [(DIM, HIDDEN), (DIM, HIDDEN), (HIDDEN, DIM)] * n
    names = ["x", "bias"] + [f"w_{k}{b}" for b in range(n) for k in ("gate", "up", "down")]
    func = relax_function(tuple(shapes), body, names=names)
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), names[2:]


def _compile(n: int) -> tuple[int, object, object]:
    """The model of ``n`` blocks compiled (``compile_programs``, Elk-Full): the rounds of
    planning it took, its region before splitting, and the compiled model."""
    rounds, unsplit = [], []
    plan_region, choose_splits = region_plans.plan_region, region_plans.choose_splits

    def planning(region, *args, **kwargs):
        rounds.append(region)
        return plan_region(region, *args, **kwargs)

    def choosing(region, *args, **kwargs):
        unsplit.append(region)
        return choose_splits(region, *args, **kwargs)

    mod, resident = _blocks(n)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(region_plans, "plan_region", planning)
        patch.setattr(region_plans, "choose_splits", choosing)
        model = compile_programs(mod, _chip(), resident=resident, preload="elk-full")
    return len(rounds), unsplit[0], model


@pytest.fixture(scope="module")
def compiled() -> dict[int, tuple[int, object, object]]:
    """:func:`_compile` of 1, 2 and 3 blocks, each compiled once for the module's tests."""
    return {n: _compile(n) for n in (1, 2, 3)}


def test_blocks_are_twins_and_the_first_add_is_not(compiled):
    _, region, _ = compiled[2]
    labels = [op.label for op in region.ops]
    groups = twin_groups(region)
    gates = [i for i, label in enumerate(labels) if label == "matmul + silu"]
    assert len(gates) == 2 and groups[gates[0]] == tuple(gates)
    norms = [i for i, label in enumerate(labels) if label == "rms norm"]
    assert groups[norms[0]] == tuple(norms), "both norms read an add just before them"
    assert labels[0] == "add" and groups[0] == (0,), "the input bias reads no produced tensor"
    assert all(i in groups[i] for i in range(len(labels)))


def test_many_blocks_need_as_many_rounds_as_one(compiled):
    one = compiled[1][0]
    assert one > 2, "the case must need several rounds (spread, then cut the chain finer)"
    assert compiled[3][0] == one


def test_blocks_cut_through_their_twins_run_exactly(compiled):
    n = 2
    mod, resident = _blocks(n)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((TOKENS, DIM)).astype(np.float32)
    bias = rng.standard_normal(DIM).astype(np.float32)
    ws = [rng.standard_normal(s).astype(np.float32) / (4 if s[0] == DIM else 8)
          for _ in range(n) for s in ((DIM, HIDDEN), (DIM, HIDDEN), (HIDDEN, DIM))]
    h = x + bias
    for b in range(n):
        wg, wu, wd = ws[3 * b:3 * b + 3]
        normed = h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-5)
        g = normed @ wg
        h = h + ((g / (1 + np.exp(-g))) * (normed @ wu)) @ wd
    # the planned module of the programs checked below is the one built and run (the
    # planning pass leaves a planned module alone; tests/test_workloads.py checks that
    # tvm_icca.compile plans what compile_programs does)
    model = compiled[n][2]
    ex = tvm_icca.compile(model.module, _chip(), resident=resident, preload="elk-full")
    got = run_outputs(ex, [tvm.runtime.tensor(a) for a in (x, bias, *ws)])[0].numpy()
    np.testing.assert_allclose(got, h, rtol=1e-4, atol=1e-4)
    norms = [op.label for op in model.programs[0].ops if op.label.startswith("rms norm")]
    assert len(norms) > n and all("part" in label for label in norms), \
        "both blocks' chains are cut"


def test_a_lone_operator_is_its_own_twin(compiled):
    _, region, _ = compiled[1]
    groups = twin_groups(region)
    assert all(len(g) == 1 for g in groups if region.ops[g[0]].label == "matmul + silu")
