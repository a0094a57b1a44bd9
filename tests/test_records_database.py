"""Records of tvm_icca.records.database: round trip, TVM's own reader, crashes, concurrency."""

from __future__ import annotations

import os
import random
import warnings

import pytest
import tvm
from tvm import te
from tvm.s_tir import meta_schedule as ms

import tvm_icca
from tvm_icca.records.database import (
    RecordFileWarning,
    RecordStore,
    database_class,
    icca_target,
    plan_of_trace,
    plan_record,
)


def _workload(scale: int = 1) -> tvm.IRModule:
    a = te.placeholder((16, 32), name="x")
    b = te.placeholder((32, 8), name="w")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((16, 8), lambda i, j: te.sum(a[i, k] * b[k, j] * scale, axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def _info(i: int) -> dict:
    return {"plan": {"op_partition": {"i0": i + 1}, "temporal": [{}, {}, {}], "loop_order": []},
            "expr": "e", "hw": "h"}


def _commit(work_dir: str, n: int, offset: int = 0, scale: int = 1) -> None:
    db = database_class()(work_dir)
    hw = tvm_icca.small_chip()
    for i in range(n):
        db.commit_tuning_record(plan_record(_workload(scale), "C", _info(offset + i), 1e-6 * (i + 1), hw))


def test_round_trip_and_tvm_reader(tmp_path):
    _commit(str(tmp_path), 3)
    _commit(str(tmp_path), 1, scale=2)  # a second workload
    db = database_class()(str(tmp_path))
    assert len(db) == 4
    target = icca_target(tvm_icca.small_chip())
    best = db.query_tuning_record(_workload(), target, "main")
    assert [float(s) for s in best.run_secs] == pytest.approx([1e-6])
    assert plan_of_trace(best.trace).op_partition == {"i0": 1}
    # meta_schedule's own JSONDatabase reads the same files, workload indices included
    theirs = ms.database.JSONDatabase(work_dir=str(tmp_path))
    assert len(theirs) == 4
    assert plan_of_trace(theirs.query_tuning_record(_workload(2), target, "main").trace).op_partition == {"i0": 1}


def test_cut_at_any_byte_loses_at_most_the_cut_line(tmp_path):
    _commit(str(tmp_path), 6)
    path = os.path.join(tmp_path, "database_tuning_record.json")
    data = open(path, "rb").read()
    rng = random.Random(1)
    for cut in sorted(rng.sample(range(1, len(data)), 5)) + [len(data) - 1]:
        with open(path, "wb") as f:
            f.write(data[:cut])
        complete = data[:cut].count(b"\n")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            store = RecordStore(str(tmp_path))
        assert len(store) >= complete and len(store) >= 5 - (6 - complete)
        if not data[:cut].endswith(b"\n"):
            assert any(issubclass(w.category, RecordFileWarning) and f"{path}:{complete + 1}" in str(w.message)
                       for w in caught)
    # an append after the damage repairs the file: TVM's reader accepts it again
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordFileWarning)
        _commit(str(tmp_path), 1, offset=10)
    assert len(ms.database.JSONDatabase(work_dir=str(tmp_path))) == data[:cut].count(b"\n") + 1


def test_corrupt_line_in_the_middle_is_skipped(tmp_path):
    _commit(str(tmp_path), 3)
    path = os.path.join(tmp_path, "database_tuning_record.json")
    lines = open(path).read().splitlines()
    lines[1] = lines[1][:40] + "#garbage"
    open(path, "w").write("\n".join(lines) + "\n")
    with pytest.warns(RecordFileWarning, match=f"{path}:2"):
        store = RecordStore(str(tmp_path))
    assert len(store) == 2
