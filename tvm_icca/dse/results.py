"""The results file of a design-space exploration: JSON lines, one row per point, append-only.

Appending is atomic, also with several writers (a sweep's processes, two sweeps on one file
over NFS-free local disk): :func:`append_row` takes an exclusive ``flock`` on the file, opens
it with ``O_APPEND``, writes the whole line with one ``write`` and ``fsync``\\s it before it
lets go. A writer killed in the middle of its ``write`` leaves at most one torn last line;
:func:`read_rows` ignores it (with a warning) and the next :func:`append_row` cuts it off
before it writes, so a torn line never glues itself to a whole one.

Beside the results file, its *provenance file* (:func:`provenance_path`: ``<stem>.provenance.jsonl``,
JSON lines, appended the same way) holds what would repeat in every row: each resolved chip
once (``{"chip": digest, "hardware": HardwareSpec.to_dict()}``; rows name it by their
``chip_digest``), and one record per run of the sweep (its provenance, measured wall time and
counts). A row stays small (a sweep has thousands) and the file of rows keeps one kind of line,
so every reader of rows is unchanged; :func:`read_chips` and :func:`read_runs` read the rest.

A sweep resumed after a chip changed (a preset edited) computes the changed points again
(:mod:`tvm_icca.dse.run`); their earlier rows stay in the file but :func:`read_rows` returns
only the newest row of each point (``point_id``), so tables and plots show one chip per point.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import warnings
from typing import Any, Iterable

from runtime_sim.contract.errors import IccaError

__all__ = ["append_chip", "append_row", "clean_row", "append_run", "done_keys", "provenance_path",
           "read_chips", "read_rows", "read_runs"]

#: Bytes read at a time when looking back for the end of the last whole line.
_CHUNK = 1 << 16


def clean_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as a results file holds it (JSON types; NaN and infinities as ``None``)."""
    return json.loads(json.dumps(_clean(row), allow_nan=False, default=str))


def _clean(value: Any) -> Any:
    """``value`` as strict JSON holds it: NaN and infinities become ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def append_row(path: "str | os.PathLike[str]", row: dict[str, Any]) -> None:
    """Append one row to a JSON-lines results file, atomically.

    Parameters
    ----------
    path : str or os.PathLike
        The results file; created if absent (its directory must exist).
    row : dict
        A JSON-ready mapping (NaN and infinities are written as ``null``).

    Raises
    ------
    IccaError
        ``row`` cannot be written as JSON.
    OSError
        The file cannot be opened or written.
    """
    try:
        line = json.dumps(_clean(row), sort_keys=False, allow_nan=False, default=str) + "\n"
    except (TypeError, ValueError) as err:
        raise IccaError(f"a results row cannot be written as JSON: {err}") from None
    data = line.encode("utf-8")
    fd = os.open(os.fspath(path), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            _cut_torn_tail(fd, os.fspath(path))
            written = os.write(fd, data)
            if written != len(data):  # a full disk: leave no torn line behind
                size = os.fstat(fd).st_size
                os.ftruncate(fd, size - written)
                raise OSError(f"short write to '{os.fspath(path)}' ({written} of {len(data)} bytes)")
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _cut_torn_tail(fd: int, where: str) -> None:
    """Truncate a last line without its newline (a writer killed mid-write), under the lock."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        chunk = os.pread(fd, end - start, start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            end = start + cut + 1
            break
        end = start
    warnings.warn(f"results file '{where}': cut a torn last line ({size - end} bytes, from a "
                  "writer interrupted mid-row)", RuntimeWarning, stacklevel=3)
    os.ftruncate(fd, end)


def read_rows(path: "str | os.PathLike[str]", *, superseded: bool = False) -> list[dict[str, Any]]:
    """The rows of a results file, in the order they were written.

    A torn last line (a writer killed mid-row) is ignored with a warning; so is a later row of
    a key already read (two sweeps that ran the same point at once), keeping the first. A row
    superseded by a later row of the same point (``point_id``) computed on a changed chip is
    left out unless ``superseded``.

    Parameters
    ----------
    path : str or os.PathLike
        The results file; a missing file has no rows.
    superseded : bool
        Also return the rows later rows of their point replaced (the file's whole history): a
        later row of the same ``point_id``, or one whose ``supersedes`` names the row's key.

    Returns
    -------
    list of dict
        One mapping per point.

    Raises
    ------
    IccaError
        A line other than the last is not a JSON object (the file is not a results file).
    """
    where = os.fspath(path)
    try:
        with open(where, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    point_key: dict[str, str] = {}  # point_id -> the key of its newest row
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        last = number == len(lines)  # no newline after it: possibly torn
        try:
            row = json.loads(raw.decode("utf-8"))
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
        except (UnicodeDecodeError, ValueError) as err:
            if last:
                warnings.warn(f"results file '{where}': ignoring a torn last line (line "
                              f"{number}, {len(raw)} bytes)", RuntimeWarning, stacklevel=2)
                continue
            raise IccaError(f"results file '{where}', line {number}: not a results row "
                            f"({err})") from None
        key, point = row.get("key"), row.get("point_id")
        # a point whose chip changed back to one computed before has a new row of an old key
        back = point is not None and point_key.get(point, key) != key
        if key is not None and key in seen and not back:
            warnings.warn(f"results file '{where}': line {number} repeats point {str(key)[:12]}; "
                          "keeping the first row", RuntimeWarning, stacklevel=2)
            continue
        if key is not None:
            seen.add(key)
            if point is not None:
                point_key[point] = key
        rows.append(row)
    if superseded:
        return rows
    newest = {r["point_id"]: i for i, r in enumerate(rows) if r.get("point_id")}
    # a row older than point_id is replaced by the later row that names it
    replaced = {str(r["supersedes"]): i for i, r in enumerate(rows) if r.get("supersedes")}
    return [r for i, r in enumerate(rows) if newest.get(r.get("point_id"), i) == i
            and replaced.get(str(r.get("key")), -1) < i]


def provenance_path(results: "str | os.PathLike[str]") -> str:
    """The provenance file beside a results file: ``x.jsonl`` -> ``x.provenance.jsonl``."""
    where = os.fspath(results)
    stem = where[:-len(".jsonl")] if where.endswith(".jsonl") else where
    return stem + ".provenance.jsonl"


def append_chip(results: "str | os.PathLike[str]", digest: str, hardware: dict[str, Any]) -> None:
    """Record a resolved chip (:meth:`HardwareSpec.to_dict`) under its digest
    (:func:`tvm_icca.dse.points.chip_digest`) in the results' provenance file."""
    append_row(provenance_path(results), {"chip": digest, "hardware": hardware})


def append_run(results: "str | os.PathLike[str]", record: dict[str, Any]) -> None:
    """Record one run of a sweep (its provenance, wall time, counts) in the provenance file."""
    append_row(provenance_path(results), {"run": record})


def _sidecar(results: "str | os.PathLike[str]") -> list[dict[str, Any]]:
    return read_rows(provenance_path(results), superseded=True)


def read_chips(results: "str | os.PathLike[str]") -> dict[str, dict[str, Any]]:
    """Digest -> the chip's :meth:`HardwareSpec.to_dict` mapping, of every chip the results'
    provenance file records (the first record of a digest; empty without the file)."""
    chips: dict[str, dict[str, Any]] = {}
    for entry in _sidecar(results):
        if "chip" in entry and isinstance(entry.get("hardware"), dict):
            chips.setdefault(str(entry["chip"]), entry["hardware"])
    return chips


def read_runs(results: "str | os.PathLike[str]") -> list[dict[str, Any]]:
    """The records of every run of the sweep on this results file, in order (see
    :func:`tvm_icca.dse.run.run`: provenance, ``wall_s``, ``cpu_s``, counts)."""
    return [entry["run"] for entry in _sidecar(results) if isinstance(entry.get("run"), dict)]


def done_keys(rows_or_path: "Iterable[dict[str, Any]] | str | os.PathLike[str]") -> set[str]:
    """The keys of the points a results file (or its rows) already holds, whatever their status.

    Parameters
    ----------
    rows_or_path : iterable of dict, str or os.PathLike
        Rows of :func:`read_rows`, or the file.

    Returns
    -------
    set of str
        The rows' ``key`` values.
    """
    rows = read_rows(rows_or_path) if isinstance(rows_or_path, (str, os.PathLike)) else rows_or_path
    return {str(r["key"]) for r in rows if "key" in r}
