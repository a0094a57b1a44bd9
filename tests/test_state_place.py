"""Where model state lives (tvm_icca.model_pass.state_place): one option, a default that keeps a
model on a chip without HBM when it fits, and outputs that say which setting was timed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.cli.main import main
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass import CompileOptions
from tvm_icca.model_pass.state_place import STATE_WORDS, state_candidates
from tvm_icca.testing.relax_functions import relax_function

SHAPES = ((8, 64), (64, 64), (64, 32))


def _mlp() -> tvm.IRModule:
    def body(x, w1, w2):
        return relax.op.matmul(relax.op.nn.relu(relax.op.matmul(x, w1)), w2)

    func = relax_function(SHAPES, body, names=["x", "w1", "w2"])
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def _hbm_chip():
    return small_chip(16).with_overrides(hbm_bandwidth=1e11, hbm_controllers=2)


def test_candidates_follow_the_rule() -> None:
    assert [c.place for c in state_candidates(small_chip(16), None)] == ["chip", "host"]
    assert [c.place for c in state_candidates(_hbm_chip(), None)] == ["hbm"]
    assert [c.place for c in state_candidates(small_chip(16), "host")] == ["host"]
    with pytest.raises(tvm_icca.IccaError, match="needs a chip with HBM"):
        state_candidates(small_chip(16), "hbm")


@pytest.mark.parametrize("bad", ["on-chip", 3, True])
def test_a_bad_state_is_one_clear_error(bad) -> None:
    with pytest.raises(tvm_icca.IccaError, match="state"):
        CompileOptions(state=bad)


def test_auto_is_none() -> None:
    assert CompileOptions(state="auto").state is None


def test_default_keeps_a_model_that_fits_on_a_chip_without_hbm() -> None:
    model = compile_programs(_mlp(), small_chip(16), resident=["w1", "w2"])
    assert model.state.place == "chip" and model.state.requested is None
    sources = {d.source for p in model.programs for d in p.inputs}
    assert "resident" in sources and "host" not in sources
    assert model.summary()["state"] == "chip"


def _deep_mlp(layers: int) -> tvm.IRModule:
    def body(x, *ws):
        for w in ws:
            x = relax.op.nn.relu(relax.op.matmul(x, w))
        return x

    func = relax_function([(8, 64)] + [(64, 64)] * layers, body,
                          names=["x"] + [f"w{i}" for i in range(layers)])
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def test_default_falls_back_to_the_host_and_says_why() -> None:
    # 8 layers of 16 KB weights; 8 cores keep 8 KiB each beside the shift buffer: the model
    # cannot stay on chip, each layer alone fits
    chip = small_chip(8, 16 * 1024)
    model = compile_programs(_deep_mlp(8), chip, resident=[f"w{i}" for i in range(8)])
    assert model.state.place == "host"
    assert "does not fit" in model.state.reason
    assert model.input_bytes()["host"] >= 8 * 64 * 64 * 4


def test_hbm_chip_defaults_to_hbm_and_chip_can_be_forced() -> None:
    hbm = compile_programs(_mlp(), _hbm_chip(), resident=["w1", "w2"])
    assert hbm.state.place == "hbm" and hbm.preload is not None
    kept = compile_programs(_mlp(), _hbm_chip(), resident=["w1", "w2"], state="chip")
    assert kept.state.place == "chip" and kept.preload is None
    with pytest.raises(tvm_icca.IccaError, match="not in HBM"):
        compile_programs(_mlp(), _hbm_chip(), resident=["w1", "w2"], state="host", preload="basic")


@pytest.mark.parametrize("state", ["chip", "host", None])
def test_every_place_computes_the_same_result(state) -> None:
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    want = np.maximum(args[0] @ args[1], 0) @ args[2]
    ex = tvm_icca.compile(_mlp(), small_chip(16), state=state, resident=["w1", "w2"])
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*(tvm.runtime.tensor(a) for a in args))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_simulate_names_chip_design_and_weights_first(capsys) -> None:
    assert main(["simulate", "bert-large", "--tiny", "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "chip ipu-mk2" in lines[1] and "preload design none" in lines[1]
    assert STATE_WORDS["chip"] in lines[1]
    assert main(["simulate", "bert-large", "--tiny", "--state", "host", "--json",
                 "--no-progress"]) == 0
    host = json.loads(capsys.readouterr().out)
    assert main(["simulate", "bert-large", "--tiny", "--state", "chip", "--json",
                 "--no-progress"]) == 0
    chip = json.loads(capsys.readouterr().out)
    assert host["compile"]["state"] == "host" and chip["compile"]["state"] == "chip"
    # weights sent every run cross the host link; kept on chip, they do not
    assert host["host_in_bytes"] > chip["host_in_bytes"]
    assert host["total_s"] > chip["total_s"]


def test_every_command_has_the_same_default_chip(capsys) -> None:
    from runtime_sim.contract.presets import DEFAULT_PRESET

    for command in ("compile", "simulate", "run", "tune", "plan", "demo", "models"):
        try:
            main([command, "--help"])
        except SystemExit:
            pass
        text = " ".join(capsys.readouterr().out.split())
        if "--hw" in text:
            assert f"default {DEFAULT_PRESET}" in text, command


def test_model_state_must_fit_in_the_hbm_it_is_kept_in() -> None:
    """The weights kept in HBM (w1: 16 KiB, w2: 8 KiB float32) against the chip's HBM
    capacity: exactly enough compiles; a byte less is one HbmCapacityError naming the
    largest tensor and the capacity, for the default placement and for state='hbm'; the
    host and the chip are not limited by it, nor is a chip whose capacity is not modelled."""
    from runtime_sim.contract.errors import HbmCapacityError

    state = 64 * 64 * 4 + 64 * 32 * 4
    exact = _hbm_chip().with_overrides(hbm_bytes_per_chip=state)
    assert compile_programs(_mlp(), exact, resident=["w1", "w2"]).state.place == "hbm"
    short = _hbm_chip().with_overrides(hbm_bytes_per_chip=state - 1)
    for requested in (None, "hbm"):
        with pytest.raises(HbmCapacityError) as info:
            compile_programs(_mlp(), short, resident=["w1", "w2"], state=requested)
        text = str(info.value)
        assert "'w1' [64, 64] float32" in text and "2 tensors" in text
        assert f"chip '{short.name}'" in text and "state='host'" in text
    assert compile_programs(_mlp(), short, resident=["w1", "w2"], state="host").state.place == "host"
    assert compile_programs(_mlp(), _hbm_chip(), resident=["w1", "w2"]).state.place == "hbm"
    with pytest.raises(HbmCapacityError):   # tvm.compile says it in the same words
        tvm_icca.compile(_mlp(), short, resident=["w1", "w2"])
