"""tvm_icca.tune sessions: trials, resuming, two sessions at once on one work_dir."""

from __future__ import annotations

import json
import multiprocessing
import re

import numpy as np
import tvm
from tvm.script import relax as R

import tvm_icca
from tvm_icca.records.database import RecordStore
from tvm_icca.tuning.session import TaskResult, TuneSummary


def tiny_model() -> tvm.IRModule:
    @tvm.script.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((64, 96), "float32"), w: R.Tensor((96, 32), "float32"),
                 b: R.Tensor((32,), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                z = R.add(y, b)
                r = R.nn.relu(z)
                R.output(r)
            return r

    return Module


def _session(work_dir: str, trials: int, seed: int, out=None):
    summary = tvm_icca.tune(tiny_model(), work_dir, tvm_icca.small_chip(), max_trials=trials,
                            batch_size=4, seed=seed, progress=False)
    if out is not None:
        out.put(summary.committed)
    return summary


def test_session_measures_untuned_plan_and_resumes(tmp_path):
    first = _session(str(tmp_path), 8, 0)
    [result] = first.results
    assert result.trials == result.new_trials == 8 and first.committed == 8
    assert result.untuned_s is not None and result.best_s <= result.untuned_s
    assert re.search(r"untuned (ns|us|ms|s) ", first.table())
    second = _session(str(tmp_path), 12, 0)
    [again] = second.results
    assert again.trials == 12 and again.new_trials == 4  # continues from the 8 on disk
    assert again.best_s <= result.best_s
    store = RecordStore(str(tmp_path))
    assert len(store) == 12
    plans = {json.dumps(r.info["plan"], sort_keys=True) for r in store.records}
    assert len(plans) == 12  # nothing measured twice
    assert all(r.chip == tvm_icca.small_chip().name and r.seconds > 0 for r in store.records)


def test_two_sessions_at_once_keep_every_record(tmp_path):
    ctx = multiprocessing.get_context("spawn")  # fork deadlocks under TVM (checked)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_session, args=(str(tmp_path), 8, seed, queue)) for seed in (1, 2)]
    for p in procs:
        p.start()
    committed = [queue.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = RecordStore(str(tmp_path))
    assert len(store) == sum(committed) and store.skipped == 0
    assert len(store.workloads) == 1
    assert np.isfinite([r.seconds for r in store.records]).all()


def test_summary_table_reads_in_the_unit_of_its_largest_time():
    """The table's time columns were fixed at "us" (a 2 ms operator read 2000.000 us): one
    unit for the table, the one its largest time (the weighted total) reads best in."""
    def summary(untuned: float, best: float) -> TuneSummary:
        return TuneSummary("records", "ipu-mk2", [
            TaskResult("matmul op0", 3, 8, 8, untuned, best),
            TaskResult("softmax op1", 1, 4, 4, untuned / 10, None)], committed=12)

    lines = summary(2.5e-3, 2e-3).table().splitlines()  # weighted: 7.75 ms untuned, 6.25 best
    assert lines[0].split()[-5:] == ["untuned", "ms", "best", "ms", "gain"]
    assert lines[2].split()[-3:] == ["2.500", "2.000", "1.25x"]
    assert lines[3].split()[-3:] == ["0.250", "-", "1.00x"]
    assert lines[4].split()[-3:] == ["7.750", "6.250", "1.24x"]
    table = summary(40e-9, 30e-9).table()  # weighted: 124 ns untuned
    assert "untuned ns" in table and "40.000" in table and "124.000" in table
    assert "untuned s " in summary(0.5, 0.25).table()  # weighted 1.55 s
