"""tvm_icca.tune sessions: trials, resuming, two sessions at once on one work_dir."""

from __future__ import annotations

import json
import multiprocessing

import numpy as np
import tvm
from tvm.script import relax as R

import tvm_icca
from tvm_icca.records.database import RecordStore


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
    assert "untuned us" in first.table()
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
