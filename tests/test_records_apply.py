"""tvm_icca.use_database: tuned plans in the compiled model, exact results, stale records."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm.testing
from test_tuning_session import tiny_model
from tvm import relax

import tvm_icca
from runtime_sim.contract.plan import ExecutionPlan
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass.plan_cache import PlanCache

# one worker builds the module's shared fixture once (make test runs on several)
pytestmark = pytest.mark.xdist_group("records_apply")


def assert_exact_mlp(ex, seed: int) -> None:
    """The compiled relu(x @ w + b) against numpy on random data."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 96)).astype("float32")
    w = rng.standard_normal((96, 32)).astype("float32")
    b = rng.standard_normal(32).astype("float32")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), tvm.runtime.tensor(b)).numpy()
    tvm.testing.assert_allclose(out, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-5)

@pytest.fixture(scope="module")
def tuned_small_chip(tmp_path_factory):
    """A work directory of records of the tiny model on the default small chip (one session
    shared by the tests that only read it)."""
    work_dir = str(tmp_path_factory.mktemp("tuned"))
    summary = tvm_icca.tune(tiny_model(), work_dir, tvm_icca.small_chip(), max_trials=12,
                            batch_size=4, progress=False)
    return work_dir, summary


def test_tuned_plan_is_compiled_and_exact(tuned_small_chip):
    hw = tvm_icca.small_chip()
    work_dir, summary = tuned_small_chip
    [result] = summary.results
    assert result.best_s < result.untuned_s  # the simulator prefers another plan here
    untuned = compile_programs(tiny_model(), hw, state="host")
    with tvm_icca.use_database(work_dir) as tuned:
        timed = compile_programs(tiny_model(), hw, state="host")
        with tvm_icca.use_hardware(hw):
            ex = tvm.compile(tiny_model(), target="icca", relax_pipeline=tvm_icca.icca_pipeline(
                options=tvm_icca.CompileOptions(state="host")))
    assert tuned.applied and "tuned plans applied" in tuned.report()
    assert all(a.tuned_s < a.untuned_s for a in tuned.applied)
    assert timed.programs[0].ops[0].plan != untuned.programs[0].ops[0].plan
    assert timed.simulate().total_s < untuned.simulate().total_s
    assert_exact_mlp(ex, seed=0)


def test_records_do_not_apply_to_a_model_kept_on_chip_and_say_so(tuned_small_chip):
    work_dir, _ = tuned_small_chip
    with tvm_icca.use_database(work_dir) as tuned:
        kept = compile_programs(tiny_model(), tvm_icca.small_chip())  # default: on chip
    assert kept.state.place == "chip" and not kept.tuned_ops
    assert "kept on chip" in tuned.report() and "--state host" in tuned.report()


def test_record_of_another_chip_is_ignored(tmp_path):
    tvm_icca.tune(tiny_model(), str(tmp_path), tvm_icca.small_chip(), max_trials=8,
                  batch_size=4, progress=False)
    other = tvm_icca.small_chip(sram_bytes_per_core=32 * 1024)
    plain = compile_programs(tiny_model(), other, state="host")
    with tvm_icca.use_database(str(tmp_path)) as tuned:
        compiled = compile_programs(tiny_model(), other, state="host")
    assert not tuned.applied
    assert any("ignored" in note for note in tuned.notes)
    assert compiled.programs[0].ops[0].plan == plain.programs[0].ops[0].plan


HBM_CHIP = dict(num_cores=64, sram_bytes_per_core=64 * 1024, hbm_bandwidth=64e9, hbm_controllers=4)


def test_hbm_elk_schedule_uses_measured_points_and_stays_exact(tmp_path):
    """On a chip with HBM the Elk pass trades off measured execute-state points."""
    from tvm_icca.model_pass import tradeoff_tables as preload_tables
    from tvm_icca.records.database import RecordStore
    from tvm_icca.records.keys import plan_signature

    hw = tvm_icca.small_chip(**HBM_CHIP)
    tvm_icca.tune(tiny_model(), str(tmp_path), hw, max_trials=10, batch_size=4, progress=False)
    measured = {plan_signature(ExecutionPlan.from_dict(r.info["plan"])): r.seconds
                for r in RecordStore(str(tmp_path)).records}
    untuned = compile_programs(tiny_model(), hw)
    assert untuned.preload is not None and not untuned.tuned_ops
    # the session measured every execute-state point the untuned Elk pass trades off
    [plain] = preload_tables.operator_tables(untuned.programs, hw, PlanCache())
    assert len(plain.execs) > 1
    assert all(plan_signature(p.plan.plan) in measured for p in plain.execs)
    with tvm_icca.use_database(str(tmp_path)) as tuned:
        compiled = compile_programs(tiny_model(), hw)
        [table] = preload_tables.operator_tables(compiled.programs, hw, PlanCache())
        with tvm_icca.use_hardware(hw):
            ex = tvm.compile(tiny_model(), target="icca")
    assert compiled.preload is not None
    [op] = compiled.programs[0].ops
    assert op.plan != untuned.programs[0].ops[0].plan and op.tuned
    assert compiled.tuned_ops == [op.name] == tuned.tuned_ops
    assert "operators compiled with tuned plans: 1" in tuned.report()
    # every point with a record carries its measured seconds; records add points of their own
    recorded = [p for p in table.execs if plan_signature(p.plan.plan) in measured]
    assert recorded and all(p.time_s == pytest.approx(measured[plan_signature(p.plan.plan)])
                            for p in recorded)
    assert any(p.plan.tuned for p in table.execs[1:])
    times = [p.time_s for p in table.execs]
    assert times == sorted(times) and [p.space for p in table.execs] == sorted(
        (p.space for p in table.execs), reverse=True)
    # the schedule executes the measured point it chose, with that time as its estimate
    assert op.estimated_time_s == pytest.approx(measured[plan_signature(op.plan)])
    assert compiled.simulate().total_s <= untuned.simulate().total_s
    assert_exact_mlp(ex, seed=1)
    assert tvm_icca.last_run_stats(timing=False)["tuned_ops"] == [op.name]


def test_meta_schedule_database_context_applies_records(tuned_small_chip):
    """``with database:`` (meta_schedule's own context) works as use_database does, for the
    ICCA database and for TVM's JSONDatabase over the same files."""
    from tvm.s_tir import meta_schedule as ms

    from tvm_icca.records.database import database_class

    hw = tvm_icca.small_chip()
    work_dir, _ = tuned_small_chip
    with tvm_icca.use_database(work_dir):
        expected = compile_programs(tiny_model(), hw, state="host")
    assert expected.tuned_ops
    for database in (database_class()(work_dir), ms.database.JSONDatabase(work_dir=work_dir)):
        with database:
            compiled = compile_programs(tiny_model(), hw, state="host")
        assert compiled.tuned_ops == expected.tuned_ops
        assert compiled.programs[0].ops[0].plan == expected.programs[0].ops[0].plan
    assert not compile_programs(tiny_model(), hw, state="host").tuned_ops  # outside the block: untuned
