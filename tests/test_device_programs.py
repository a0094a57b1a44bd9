"""Timing-only compilation (tvm_icca.drivers.device_programs): program order, input sources, op counts, plan
cache, and the `tvm-icca simulate` / `tvm-icca models` commands."""

from __future__ import annotations

import json
import re

import pytest

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.cli.main import main as cli_main
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.ops.data_movement import split_to_slices
from tvm_icca.model_pass.calls import partitioned_op_counts, region_call_order
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.model_pass.region_plans import compile_region
from tvm_icca.workloads import get_workload
from tvm_icca.workloads._common import relax_op_counts

# one worker builds the module's shared fixture once (make test runs on several)
pytestmark = pytest.mark.xdist_group("device_programs")

HBM_CHIP = small_chip(64, 64 * 1024, hbm_bandwidth=64e9, hbm_controllers=4)
PLAIN_CHIP = small_chip(64, 64 * 1024)


@pytest.fixture(scope="module")
def llama():
    """Two layers of the tiny Llama 2 70B (GQA) and its programs on a chip with HBM."""
    workload = get_workload("llama2-70b", tiny=True, batch=2, context=8, num_layers=2)
    return workload, compile_programs(workload, HBM_CHIP)


def test_programs_follow_mains_call_order(llama):
    workload, model = llama
    part = tvm_icca.partition_for_icca(workload.mod, HBM_CHIP)
    order = region_call_order(part)
    # calls whose programs differ (e.g. the last layer's preload stream) run cloned variants
    planned = region_call_order(model.module)
    assert [p.region for p in model.programs] == planned
    assert [re.sub(r"_v\d+_*$", "", name) for name in planned] == order
    # Both layers (attention heads' reshapes and transposes, rotary slices and concats
    # included) are one region; what stays on the host is integer index arithmetic, before it.
    assert len(set(order)) == 1
    # Execution order is dataflow order: the first region has no "chip" input (regions called
    # with tensors left on chip by earlier calls: tests/test_planner.py).
    assert all(d.source != "chip" for d in model.programs[0].inputs)
    assert len({p.module for p in model.programs}) == 1


def test_input_sources_on_a_chip_with_hbm(llama):
    workload, model = llama
    # The first region reads the host's token ids, and the weights (the embedding table
    # among them), caches and scalar constants of main from HBM.
    first = model.programs[0]
    weights = [p for p in workload.params if p.kind == "weight"]
    hbm = [d for d in first.inputs if d.source == "hbm"]
    cache_shape = (2, 2, 8, 16)
    # one region holds both layers: it reads their weights, KV caches and constants from HBM
    assert hbm and {d.shape for d in hbm} <= {p.shape for p in weights} | {cache_shape, ()}
    assert {p.shape for p in weights} <= {d.shape for d in hbm}
    embedding = next(p for p in workload.params if p.name == "embed_tokens.weight")
    assert embedding.shape in {d.shape for d in hbm}  # the lookup runs on the chip
    assert any(d.source == "host" and d.dtype.startswith("int") for d in first.inputs)
    # KV caches ([batch, kv_heads, context, head_dim]) are model state: read from HBM.
    cache_shape = (2, 2, 8, 16)
    cache_reads = [d for p in model.programs for d in p.inputs if d.shape == cache_shape]
    assert len(cache_reads) == 2 * 2 and {d.source for d in cache_reads} == {"hbm"}
    # The rotary tables are activations the host sends.
    rope = [d for p in model.programs for d in p.inputs if d.shape == (2, 1, 1, 16)]
    assert rope and {d.source for d in rope} == {"host"}
    totals = model.input_bytes()
    assert totals["hbm"] >= workload.nbytes("kv_cache")


def test_without_hbm_model_state_can_come_from_the_host():
    workload = get_workload("llama2-7b", tiny=True, batch=1, context=4, num_layers=1)
    model = compile_programs(workload, PLAIN_CHIP, state="host")
    sources = {d.source for p in model.programs for d in p.inputs}
    assert sources <= {"host", "chip"} and "host" in sources


def test_op_counts_add_up_to_the_imported_model(llama):
    workload, model = llama
    summary = model.summary()
    # the partitioner rewrites each split into the slices it is (tvm_icca.ops.data_movement)
    imported = relax_op_counts(split_to_slices()(workload.mod))
    assert summary["offloaded_relax_ops"] + summary["host_relax_ops"] == sum(imported.values())
    # the embedding lookup runs on the chip (tvm_icca.ops.gather): only the head reshapes stay
    assert set(summary["host_ops"]) == {"relax.reshape"}
    assert summary["device_ops"] == sum(len(p.ops) for p in model.programs)
    # with the rotary embedding on chip, regions span layer boundaries and need not repeat
    assert summary["regions"] == len(model.programs) >= summary["distinct_regions"]
    # Layer 1 repeats layer 0: its identical operators are planned once.
    assert model.plan_cache["hits"] > 0


def test_relax_module_uses_num_input_for_model_state():
    workload = get_workload("nerf", tiny=True, batch=16)
    model = compile_programs(workload.mod, HBM_CHIP)  # plain IRModule: num_input = 2
    weights = {p.shape for p in workload.params if p.kind == "weight"}
    for program in model.programs:
        for decl in program.inputs:
            if decl.source == "hbm":
                assert decl.shape in weights
    # NeRF's skip and view concatenations run on the chip (tvm_icca.ops.data_movement): the whole
    # MLP is one region, fed by the host and HBM only.
    assert len(model.programs) == 1
    assert {d.source for p in model.programs for d in p.inputs} == {"host", "hbm"}
    counts = partitioned_op_counts(tvm_icca.partition_for_icca(workload.mod, HBM_CHIP))
    assert counts["host"] == {} and counts["offloaded"]["relax.concat"] == 3


def test_plan_cache_gives_the_same_programs():
    workload = get_workload("opt-1.3b", tiny=True, batch=2, context=8, num_layers=1)
    part = tvm_icca.partition_for_icca(workload.mod, PLAIN_CHIP)
    cache = PlanCache()
    for name, func in tvm_icca.icca_regions(part).items():
        plain = compile_region(func, name, PLAIN_CHIP)
        cached = compile_region(func, name, PLAIN_CHIP, plan_cache=cache)
        again = compile_region(func, name, PLAIN_CHIP, plan_cache=cache)
        assert cached.to_dict() == plain.to_dict() == again.to_dict()
    assert cache.hits >= cache.misses > 0


def test_public_plan_cache_shared_by_preload_designs():
    """``tvm_icca.PlanCache`` shared by compilations under two preload designs (what the HBM
    tutorial does): the second reuses the first's plans and compiles exactly what a cache of
    its own gives."""
    assert tvm_icca.PlanCache is PlanCache
    workload = get_workload("llama2-13b", tiny=True, batch=2, context=8, num_layers=1)
    cache = tvm_icca.PlanCache(jobs=1)
    compile_programs(workload, HBM_CHIP, preload="basic", plan_cache=cache, progress=False)
    shared = compile_programs(workload, HBM_CHIP, preload="static", plan_cache=cache,
                              progress=False)
    alone = compile_programs(workload, HBM_CHIP, preload="static",
                             plan_cache=tvm_icca.PlanCache(jobs=1), progress=False)
    assert shared.plan_cache["misses"] == 0 and shared.plan_cache["hits"] > 0
    assert [p.to_dict() for p in shared.programs] == [p.to_dict() for p in alone.programs]

def test_simulate_command_json(capsys, tmp_path):
    pytest.importorskip("runtime_sim.timing")
    trace = tmp_path / "trace.json"
    code = cli_main(["simulate", "--model", "llama2-13b", "--tiny", "--batch", "2", "--context", "8",
                     "--hw", "ipu-pod4-hbm", "--json", "--no-progress", "--trace", str(trace)])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("total_s", "compute_s", "transfer_s", "hbm_s", "overlap_s", "stall_s", "num_ops",
                "hbm_bytes"):
        assert key in data
    assert data["total_s"] > 0 and data["hbm_bytes"] > 0
    assert data["num_ops"] == data["compile"]["device_ops"]
    assert trace.exists()


def test_simulate_command_table(capsys):
    pytest.importorskip("runtime_sim.timing")
    assert cli_main(["simulate", "--model", "resnet18", "--tiny", "--hw", "ipu-mk2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "resnet18" in out and re.search(r"\b1 region call\b|\d+ region calls", out) and "total" in out


def test_models_command(capsys):
    assert cli_main(["models"]) == 0
    out = capsys.readouterr().out
    assert "llama2-70b" in out and "dit-xl2" in out
    assert cli_main(["models", "--ops", "--json", "nerf"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["relax_ops"] == rows[0]["offloaded"] + rows[0]["host"] == 48


def test_unknown_model_is_a_clean_error(capsys):
    assert cli_main(["simulate", "--model", "gpt-9"]) == 2
    assert "unknown workload" in capsys.readouterr().err


def test_state_read_by_regions_leaves_out_host_only_state(llama):
    from tvm_icca.model_pass.calls import state_read_by_regions

    workload, model = llama
    read = state_read_by_regions(model.module, workload.resident_names)
    # the embedding lookup runs on the chip (tvm_icca.ops.gather): every weight and cache,
    # the embedding table included, reaches a region
    host_only = {p.name for p in workload.params if p.resident} - read
    assert host_only == set()
    hbm_bytes = sum(d.nbytes for p in model.programs for d in p.inputs if d.source == "hbm")
    # besides those parameters, only scalar constants of main (model state too) come from HBM
    assert 0 <= hbm_bytes - sum(p.nbytes for p in workload.params if p.name in read) <= 64


def test_a_model_with_nothing_on_the_chip_is_not_timed_as_zero():
    """A symbolic batch keeps every op on the host: the timing-only path says so and why, and
    a compiled executable's run reports no chip time (None), not 0 s or a missing key."""
    import numpy as np
    import tvm
    from tvm import relax

    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.relu(x)))
        bb.emit_func_output(out)
    mod = bb.get()
    model = compile_programs(mod, "ipu-mk2")
    assert model.num_regions == 0
    with pytest.raises(tvm_icca.IccaError, match="nothing of the model runs on the chip 'ipu-mk2'"
                       ".*dynamic shape"):
        model.simulate()
    # an earlier test's run is the device's latest: the call of main must start a new one
    ex = tvm.compile(mod, target="icca")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(-np.ones((3, 8), "float32")))
    assert float(got.numpy().max()) == 0.0
    stats = tvm_icca.last_run_stats()
    assert stats["simulated_s"] is None and stats["simulated_ops"] == []
