"""Tuning records as ordinary meta_schedule records, in files that survive crashes and
concurrent sessions.

A record is a ``tvm.s_tir.meta_schedule.database.TuningRecord``: its workload is the
operator's PrimFunc (:func:`tvm_icca.tuning.tasks.operator_workload`), its trace annotates the block that
writes the output with ``icca.plan`` (the plan and what it was tuned for, as JSON: the
recipe checked in design.md "TVM 0.27 facts"), ``run_secs`` holds the simulated seconds and
``target`` is the ``icca`` target with the chip as its ``model``.

The files are ``JSONDatabase``'s (``database_workload.json``, ``database_tuning_record.json``
in the work directory, one JSON document per line; a record names its workload by the index
of that workload's line), so ``JSONDatabase(work_dir=...)`` reads them. Two things
``JSONDatabase`` does not do are done here:

* **loading survives damage**: a truncated or corrupt line is skipped with a
  :class:`RecordFileWarning` naming the file and the line; every other record stays usable
  (``JSONDatabase`` refuses the whole file);
* **appends are atomic between processes**: every append holds an exclusive ``fcntl.flock``
  on ``database.lock`` and first reads what other processes appended since, so two sessions
  on one work directory number workloads consistently and lose nothing. A line left
  unterminated by a crashed writer is cut off under the lock before appending (it is the
  only line a crash can damage), which keeps the files readable by ``JSONDatabase`` too.

:class:`RecordStore` is the file layer (plain Python); :func:`database_class` gives
``IccaDatabase``, a meta_schedule ``PyDatabase`` over it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

from runtime_sim.contract.plan import ExecutionPlan

__all__ = ["PLAN_ANNOTATION", "RecordFileWarning", "RecordStore", "StoredRecord",
           "database_class", "icca_target", "plan_annotation", "plan_of_trace", "plan_record"]

#: Block annotation carrying the plan (and what it was tuned for) in a record's trace.
PLAN_ANNOTATION = "icca.plan"
WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
LOCK_FILE = "database.lock"


class RecordFileWarning(UserWarning):
    """A line of a records file was skipped (truncated or corrupt)."""


def icca_target(hw: Any):
    """The ``icca`` target naming the chip (``model``), as records carry it."""
    from tvm.target import Target  # pylint: disable=import-outside-toplevel

    return Target({"kind": "llvm", "keys": ["icca", "cpu"], "model": hw.name})


@dataclass(frozen=True)
class StoredRecord:
    """One record as read from the file: its workload line, seconds, chip and plan info."""

    workload: int
    seconds: float
    chip: str
    info: dict  # the icca.plan annotation: plan, expr, hw, budget, task
    raw: list  # the TuningRecord JSON (for TuningRecord.from_json)


def plan_annotation(trace_json: Any) -> dict | None:
    """The ``icca.plan`` annotation of a trace in JSON form, or None."""
    try:
        insts = trace_json[0]
        for inst in insts:
            if inst[0] == "Annotate" and list(inst[2]) == [PLAN_ANNOTATION]:
                text = inst[1][1]
                # a string argument is kept quoted in the trace's JSON
                if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] == '"':
                    text = text[1:-1]
                return json.loads(text)
    except (IndexError, KeyError, TypeError, ValueError):
        return None
    return None


def plan_of_trace(trace: Any):
    """The :class:`~runtime_sim.contract.plan.ExecutionPlan` a schedule trace carries."""
    info = plan_annotation(trace.as_json())
    if info is None:
        raise ValueError(f"the trace carries no '{PLAN_ANNOTATION}' annotation")
    return ExecutionPlan.from_dict(info["plan"])


def plan_record(workload: Any, block: str, info: dict, seconds: float, hw: Any):
    """A ``TuningRecord`` for a measured plan (``info``: the annotation's content)."""
    from tvm import s_tir  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload  # pylint: disable=import-outside-toplevel

    sch = s_tir.Schedule(workload)
    sch.annotate(sch.get_sblock(block), PLAN_ANNOTATION, json.dumps(info, sort_keys=True))
    return TuningRecord(sch.trace, Workload(workload), [float(seconds)], icca_target(hw),
                        ArgInfo.from_prim_func(workload["main"]))


class RecordStore:
    """The records files of one work directory (module docstring)."""

    def __init__(self, work_dir: str) -> None:
        self.work_dir = os.path.abspath(work_dir)
        os.makedirs(self.work_dir, exist_ok=True)
        self.paths = {kind: os.path.join(self.work_dir, name)
                      for kind, name in (("workload", WORKLOAD_FILE), ("record", RECORD_FILE))}
        self._lock_path = os.path.join(self.work_dir, LOCK_FILE)
        self._offset = {kind: 0 for kind in self.paths}  # bytes consumed (complete lines)
        self._lines = {kind: 0 for kind in self.paths}  # non-empty lines consumed
        self.workloads: list[Any] = []  # per workload line: its JSON (or None when corrupt)
        self._by_hash: dict[str, list[int]] = {}
        self.records: list[StoredRecord] = []
        self.skipped = 0
        self._warned: set[tuple[str, int]] = set()  # truncated tails already reported
        with self._locked(fcntl.LOCK_SH):
            self._catch_up(repair=False)

    # -- locking and reading ------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        with open(self._lock_path, "a+b") as lock:
            fcntl.flock(lock, mode)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _catch_up(self, repair: bool) -> None:
        """Read the lines appended since the last read (by anyone). A last line without its
        newline is a crash remnant (writers append whole lines under the lock): skipped,
        and with ``repair`` (under the exclusive lock) cut off the file."""
        for kind in ("workload", "record"):
            path = self.paths[kind]
            if not os.path.exists(path):
                continue
            with open(path, "rb") as f:
                f.seek(self._offset[kind])
                data = f.read()
            end = data.rfind(b"\n") + 1
            complete, tail = data[:end], data[end:]
            start_line = self._line_number(kind)
            for k, line in enumerate(complete.split(b"\n")[:-1]):
                if line.strip():
                    self._consume(kind, line, start_line + k)
            self._offset[kind] += len(complete)
            if tail and (kind, self._offset[kind]) not in self._warned:
                self._warned.add((kind, self._offset[kind]))
                lineno = start_line + complete.count(b"\n")
                self._warn(path, lineno, "truncated line (no newline: a writer stopped mid-line)")
                if repair:
                    with open(path, "r+b") as f:
                        f.truncate(self._offset[kind])

    def _line_number(self, kind: str) -> int:
        """1-based number of the next line of a file not yet read."""
        path = self.paths[kind]
        if not self._offset[kind]:
            return 1
        with open(path, "rb") as f:
            return f.read(self._offset[kind]).count(b"\n") + 1

    def _warn(self, path: str, lineno: int, why: str) -> None:
        self.skipped += 1
        warnings.warn(f"{path}:{lineno}: skipped: {why}", RecordFileWarning, stacklevel=4)

    def _consume(self, kind: str, line: bytes, lineno: int) -> None:
        path = self.paths[kind]
        try:
            value = json.loads(line)
        except ValueError as err:
            value, why = None, f"not JSON ({err})"
        if kind == "workload":
            # every non-empty line holds a workload index, corrupt or not (JSONDatabase's count)
            index = len(self.workloads)
            ok = isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
            if value is not None and not ok:
                why = "not a [hash, workload] pair"
            self.workloads.append(value if ok else None)
            if ok:
                self._by_hash.setdefault(value[0], []).append(index)
            else:
                self._warn(path, lineno, why)
            return
        try:
            index, rec = int(value[0]), value[1]
            if not 0 <= index < len(self.workloads) or self.workloads[index] is None:
                raise ValueError(f"names workload line {index + 1}, which is missing or corrupt")
            seconds = [float(s) for s in rec[1]]
            info = plan_annotation(rec[0])
            chip = str((rec[2] or {}).get("model", ""))
        except (TypeError, ValueError, IndexError, AttributeError) as err:
            self._warn(path, lineno, f"not a tuning record ({err})")
            return
        self.records.append(StoredRecord(index, sum(seconds) / len(seconds), chip, info or {}, rec))

    def refresh(self) -> None:
        """Read what other processes appended since."""
        with self._locked(fcntl.LOCK_SH):
            self._catch_up(repair=False)

    # -- writing -------------------------------------------------------------------------
    def _append(self, kind: str, text: str) -> None:
        with open(self.paths[kind], "ab") as f:
            f.write(text.encode() + b"\n")
            f.flush()

    def workload_index(self, workload_json: list) -> int | None:
        """Index of a workload (``Workload.as_json()``) among those read, or None."""
        for index in self._by_hash.get(workload_json[0], []):
            if self.workloads[index][1] == workload_json[1]:
                return index
        for index in self._by_hash.get(workload_json[0], []):
            if self._same_module(self.workloads[index], workload_json):
                return index
        return None

    @staticmethod
    def _same_module(a: list, b: list) -> bool:
        import tvm_ffi  # pylint: disable=import-outside-toplevel
        from tvm.s_tir.meta_schedule.database import Workload  # pylint: disable=import-outside-toplevel

        return bool(tvm_ffi.structural_equal(Workload.from_json(a).mod, Workload.from_json(b).mod))

    def commit_workload(self, workload_json: list) -> int:
        """Index of the workload, appending it when no process has."""
        with self._locked(fcntl.LOCK_EX):
            self._catch_up(repair=True)
            index = self.workload_index(workload_json)
            if index is None:
                self._append("workload", json.dumps(workload_json, separators=(",", ":")))
                self._catch_up(repair=True)
                index = self.workload_index(workload_json)
        assert index is not None
        return index

    def commit_records(self, workload: int, records_json: list[list]) -> None:
        """Append records of workload line ``workload`` (``TuningRecord.as_json()`` each)."""
        if not records_json:
            return
        with self._locked(fcntl.LOCK_EX):
            self._catch_up(repair=True)
            for rec in records_json:
                self._append("record", json.dumps([workload, rec], separators=(",", ":")))
            self._catch_up(repair=True)

    # -- queries -------------------------------------------------------------------------
    def records_of(self, workload: int) -> list[StoredRecord]:
        return [r for r in self.records if r.workload == workload]

    def __len__(self) -> int:
        return len(self.records)


@functools.lru_cache(maxsize=None)
def database_class():
    """``IccaDatabase``: a meta_schedule ``PyDatabase`` over a :class:`RecordStore`."""
    from tvm.ir.utils import derived_object  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.database import PyDatabase, TuningRecord, Workload  # pylint: disable=import-outside-toplevel

    @derived_object
    class IccaDatabase(PyDatabase):
        """meta_schedule database of ICCA tuning records in ``work_dir`` (JSONDatabase's
        files, loaded robustly, appended under a file lock)."""

        def __init__(self, work_dir: str) -> None:
            super().__init__()
            self.store = RecordStore(work_dir)
            self._workloads: dict[int, Any] = {}

        def _workload(self, index: int):
            found = self._workloads.get(index)
            if found is None:
                found = self._workloads[index] = Workload.from_json(self.store.workloads[index])
            return found

        def has_workload(self, mod) -> bool:
            return self.store.workload_index(Workload(mod).as_json()) is not None

        def commit_workload(self, mod):
            return self._workload(self.store.commit_workload(Workload(mod).as_json()))

        def commit_tuning_record(self, record) -> None:
            index = self.store.commit_workload(record.workload.as_json())
            self.store.commit_records(index, [record.as_json()])

        def get_top_k(self, workload, top_k: int):
            index = self.store.workload_index(workload.as_json())
            if index is None:
                return []
            found = sorted(self.store.records_of(index), key=lambda r: r.seconds)[:top_k]
            return [TuningRecord.from_json(r.raw, self._workload(index)) for r in found]

        def get_all_tuning_records(self):
            return [TuningRecord.from_json(r.raw, self._workload(r.workload))
                    for r in self.store.records]

        def __len__(self) -> int:
            return len(self.store)

    return IccaDatabase
