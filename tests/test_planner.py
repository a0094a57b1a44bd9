"""The one model-level pass (tvm_icca.model_pass.planner): ``tvm.compile`` runs exactly the device
programs the timing-only path times, and an executable reports the simulated time of its run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.script import relax as R

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass import (
    PROGRAM_ATTR,
    CompileOptions,
    plan_device_programs,
    device_programs,
)
from tvm_icca.device_call import device_entry
from tvm_icca.testing import onnx_models
from tvm_icca.workloads import get_workload
from tvm_icca.testing.device_runs import reference_build

CHIP = small_chip(64, 64 * 1024)
HBM_CHIP = small_chip(64, 64 * 1024).with_overrides(name="hbm-64", hbm_bandwidth=1e12,
                                                    hbm_controllers=2)


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The program texts ``icca.device.run`` receives, in call order."""
    seen: list[str] = []
    parse = device_entry.parse_program

    def recording(text: str):
        seen.append(text)
        return parse(text)

    monkeypatch.setattr(device_entry, "parse_program", recording)
    return seen


def _run(executable, args):
    out = relax.VirtualMachine(executable, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in args])
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def _both_ways(mod, hw, args, executed, **options):
    """Run ``mod`` compiled by tvm.compile; return (outputs, stats, executed programs, the
    timing-only compilation of the same module)."""
    executed.clear()
    outputs = _run(tvm_icca.compile(mod, hw, **options), args)
    stats = tvm_icca.last_run_stats()
    timed = compile_programs(mod, hw, **options)
    return outputs, stats, list(executed), timed


ONNX_CASES = {
    "mlp": lambda: onnx_models.mlp(batch=4),
    "residual_cnn": lambda: onnx_models.residual_cnn(batch=1, channels=4, size=8),
    "encoder_layer": lambda: onnx_models.transformer_encoder_layer(seq=8, d_model=16, heads=2, d_ff=32),
}


@pytest.mark.parametrize("name", sorted(ONNX_CASES))
@pytest.mark.parametrize("hw", [CHIP, HBM_CHIP], ids=["sram-only", "hbm"])
def test_onnx_models_run_the_programs_that_are_timed(name, hw, executed):
    case = ONNX_CASES[name]()
    mod = tvm_icca.load_onnx(case.model)
    args = [case.inputs[k] for k in case.inputs]
    outputs, stats, ran, timed = _both_ways(mod, hw, args, executed)
    np.testing.assert_allclose(outputs[0], case.reference(case.inputs)[0], rtol=1e-4, atol=1e-4)
    # byte for byte: what ran is what the timing-only path compiled, in call order
    assert ran == [p.to_json() for p in timed.programs]
    assert stats["regions_executed"] == len(timed.programs)
    assert stats["simulated_s"] == timed.simulate().total_s > 0
    assert [row["name"] for row in stats["simulated_ops"]] == [
        op.name for p in timed.programs for op in p.ops]


# the tiny zoo models (a decoder, an encoder, a CNN) run the programs that are timed on a
# four-chip HBM system in tests/test_workloads.py (test_tiny_config_on_four_chips_matches_llvm),
# beside their comparison with TVM's CPU build (every zoo model on an SRAM-only chip:
# test_tiny_config_on_icca_matches_llvm)


def test_the_model_kept_on_chip_compiles_the_same_both_ways(executed):
    case = onnx_models.mlp(batch=4)
    mod = tvm_icca.load_onnx(case.model)
    args = [case.inputs[k] for k in case.inputs]
    outputs, stats, ran, timed = _both_ways(mod, CHIP, args, executed, state="chip")
    np.testing.assert_allclose(outputs[0], case.reference(case.inputs)[0], rtol=1e-4, atol=1e-4)
    assert ran == [p.to_json() for p in timed.programs]
    assert timed.model_plan is not None and timed.model_plan.decisions
    # constants (ONNX weights) are model state kept on chip
    assert {c["source"] for p in timed.programs for c in p.constants.values()} <= {"resident"}
    assert stats["simulated_s"] == timed.simulate().total_s


def test_vgm_programs_run_and_are_timed(executed):
    case = onnx_models.mlp(batch=4)
    mod = tvm_icca.load_onnx(case.model)
    args = [case.inputs[k] for k in case.inputs]
    outputs, stats, ran, timed = _both_ways(mod, CHIP, args, executed, execution="vgm",
                                            state="chip")
    np.testing.assert_allclose(outputs[0], case.reference(case.inputs)[0], rtol=1e-4, atol=1e-4)
    assert ran == [p.to_json() for p in timed.programs]
    from runtime_sim.timing.vgm_timing import simulate_vgm_timing

    assert stats["simulated_s"] == simulate_vgm_timing(timed.programs).total_s


@tvm.script.ir_module
class SameLayerTwice:
    """One layer (matmul + relu) four times: the first two calls read tensors the host
    sends (a cumulative sum, which has no ICCA implementation, runs on the host between
    them), the last two tensors already on chip (only view ops between that stay on the
    host: reshapes [6, 4] <-> [4, 6] are no re-layout of blocks, tvm_icca.ops.views)."""

    @R.function
    def main(x: R.Tensor((6, 4), "float32"), w1: R.Tensor((4, 4), "float32"),
             w2: R.Tensor((4, 4), "float32")) -> R.Tensor((6, 4), "float32"):
        with R.dataflow():
            a = R.nn.relu(R.matmul(x, w1))
            b = R.cumsum(a, axis=0)
            c = R.nn.relu(R.matmul(b, w2))
            d = R.reshape(R.reshape(c, (4, 6)), (6, 4))
            e = R.nn.relu(R.matmul(d, w2))
            f = R.nn.relu(R.matmul(R.reshape(R.reshape(e, (4, 6)), (6, 4)), w1))
            R.output(f)
        return f


def test_a_region_called_with_different_sources_becomes_variants(executed, tmp_path: Path):
    part = tvm_icca.partition_for_icca(SameLayerTwice, CHIP)
    assert len(tvm_icca.icca_regions(part)) == 1  # one region function, called four times
    planned = plan_device_programs(CHIP, CompileOptions(state="host"))(part)
    programs = device_programs(planned)
    assert [[d.source for d in p.inputs] for p in programs] == [
        ["host", "host"], ["host", "host"], ["chip", "host"], ["chip", "host"]]
    # the host reads the first call's output (the cumulative sum) and the last one's (main's
    # result): those travel chip -> host, so every call is its own program
    assert [bool(p.host_outputs) for p in programs] == [True, False, False, True]
    assert len({p.region for p in programs}) == 4
    assert all(p.run_order == tuple(q.region for q in programs) for p in programs)
    assert len({p.module for p in programs}) == 1
    regions = tvm_icca.icca_regions(planned)
    assert len(regions) == 4 and all(PROGRAM_ATTR in f.attrs for f in regions.values())

    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape).astype("float32") for shape in ((6, 4), (4, 4), (4, 4))]
    want = _run(reference_build(SameLayerTwice), args)
    ex = tvm_icca.compile(SameLayerTwice, CHIP, state="host")
    for _ in range(2):  # a second run is a new run, not the continuation of the first
        executed.clear()
        got = _run(ex, args)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        stats = tvm_icca.last_run_stats()
        assert stats["regions_executed"] == 4
    assert executed == [p.to_json() for p in programs]
    assert stats["simulated_s"] == compile_programs(SameLayerTwice, CHIP, state="host").simulate().total_s

    trace = tmp_path / "run.json"
    tvm_icca.write_last_run_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("args", {}).get("op") == programs[2].ops[0].name for e in events)


def test_codegen_refuses_regions_the_pass_did_not_plan():
    part = tvm_icca.partition_for_icca(SameLayerTwice, CHIP)
    with pytest.raises(tvm_icca.IccaError, match="plan_device_programs"):
        relax.transform.RunCodegen()(part)


def test_planning_twice_changes_nothing():
    planned = plan_device_programs(CHIP)(tvm_icca.partition_for_icca(SameLayerTwice, CHIP))
    again = plan_device_programs(CHIP)(planned)
    assert tvm_ffi.structural_equal(planned, again)


def test_bad_options_are_one_clear_error():
    with pytest.raises(tvm_icca.IccaError, match="execution model"):
        tvm_icca.CompileOptions(execution="roller")
    with pytest.raises(tvm_icca.IccaError, match="not parameters of main"):
        compile_programs(SameLayerTwice, CHIP, resident=["weights"])
    with pytest.raises(tvm_icca.IccaError, match="collection of parameter names"):
        compile_programs(SameLayerTwice, CHIP, resident="w1")  # not the letters 'w' and '1'
    with pytest.raises(tvm_icca.IccaError, match="collection of parameter names"):
        tvm_icca.compile(SameLayerTwice, CHIP, resident="w1")
    with pytest.raises(tvm_icca.IccaError, match="collection of parameter names"):
        tvm_icca.CompileOptions(resident=3)
    assert tvm_icca.CompileOptions(resident=iter(["w1"])).resident == frozenset({"w1"})
    for jobs in (0, -2, "2", True, 1.5):
        with pytest.raises(tvm_icca.IccaError, match="jobs must be a positive number"):
            tvm_icca.CompileOptions(jobs=jobs)
    assert tvm_icca.CompileOptions(jobs=1).jobs == 1
    with pytest.raises(tvm_icca.IccaError, match="no Relax function 'main'"):
        compile_programs(tvm.IRModule(), CHIP)
    with pytest.raises(tvm_icca.InvalidHardwareSpecError, match="unknown hardware preset"):
        plan_device_programs("no-such-chip")  # when the pass is made, not when it runs


# -- the capacity check before planning (issue 39: refused in seconds, naming the numbers) --

def _state_bytes(workload) -> list[int]:
    """The workload's state tensors' bytes, from its parameter specs (independent of the
    planner's reading of the module)."""
    return sorted((int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize
                   for p in workload.params if p.resident), reverse=True)


def test_a_state_tensor_larger_than_the_whole_chip_is_refused_before_planning() -> None:
    import time

    chip = small_chip(16)  # 16 x 64 KiB of SRAM, no HBM
    # a KV cache of 2**22 tokens: 64 MiB per cache tensor, 64 times the chip's 1 MiB
    workload = get_workload("llama2-7b", tiny=True, num_layers=1, context=2**22)
    sizes = _state_bytes(workload)
    sram = chip.usable_sram_bytes * chip.num_cores
    assert sizes[0] > sram
    for state in (None, "host"):  # the default falls back to the host at once, then refuses
        start = time.process_time()
        with pytest.raises(tvm_icca.StateCapacityError) as info:
            compile_programs(workload, chip, state=state, progress=False)
        assert time.process_time() - start < 5.0
        err = info.value
        assert (err.needed_bytes, err.available_bytes) == (sizes[0], sram)
        assert f"({sizes[0]} bytes)" in str(err) and f"({sram} bytes)" in str(err)
        assert "k_cache" in str(err) or "v_cache" in str(err)
        assert isinstance(err, tvm_icca.PlanNotFoundError)  # no plan fits


def test_the_capacity_check_bounds_each_state_tensor_by_sram_plus_hbm() -> None:
    """The bound is the chip's SRAM (less the shift buffers) plus its HBM: a tensor of
    exactly that size passes, one more byte's worth is refused."""
    from tvm_icca.model_pass.planner import check_state_capacity

    workload = get_workload("llama2-7b", tiny=True, num_layers=1, context=2**11)
    largest = _state_bytes(workload)[0]
    for hbm in (0, largest // 2):
        fits = small_chip(16, hbm_bytes_per_chip=hbm, hbm_bandwidth=1e12 if hbm else 0.0, hbm_controllers=1 if hbm else 0,
                          sram_bytes_per_core=(largest - hbm) // 16 + 8192)
        assert fits.usable_sram_bytes * 16 + hbm >= largest
        check_state_capacity(workload.mod, workload.resident_names, fits)
        tight = small_chip(16, hbm_bytes_per_chip=hbm, hbm_bandwidth=1e12 if hbm else 0.0, hbm_controllers=1 if hbm else 0,
                           sram_bytes_per_core=(largest - hbm) // 16 + 8192 - 64)
        with pytest.raises(tvm_icca.StateCapacityError) as info:
            check_state_capacity(workload.mod, workload.resident_names, tight)
        assert info.value.available_bytes == tight.usable_sram_bytes * 16 + hbm < largest
        assert ("of HBM" in str(info.value)) == bool(hbm)


def test_a_model_that_fits_passes_the_capacity_check_unchanged() -> None:
    from tvm_icca.model_pass.planner import check_state_capacity

    workload = get_workload("llama2-7b", tiny=True, num_layers=1)
    for chip in (small_chip(64), tvm_icca.preset("ipu-pod4-hbm")):
        check_state_capacity(workload.mod, workload.resident_names, chip)  # no error


def test_a_table_only_looked_up_is_not_bounded_by_the_chip() -> None:
    """State read only as an on-chip lookup's table is read row by row: the whole-chip bound
    does not apply to it (tests/test_hbm_reads.py runs such a table from the host). A table
    the output projection also reads (Gemma's tied embedding) is read whole."""
    from tvm_icca.model_pass.calls import default_resident, gathered_state

    for name, want in (("llama2-7b", {"embed_tokens.weight"}), ("gemma2-27b", set())):
        mod = tvm_icca.partition_for_icca(get_workload(name, tiny=True, batch=1, context=8).mod,
                                          small_chip(16))
        assert gathered_state(mod, default_resident(mod)) == want
