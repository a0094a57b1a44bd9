"""The results file of a design-space exploration: JSON lines, one row per point, append-only.

Appending is atomic, also with several writers (a sweep's processes, two sweeps on one file
over NFS-free local disk): :func:`append_row` takes an exclusive ``flock`` on the file, opens
it with ``O_APPEND``, writes the whole line with one ``write`` and ``fsync``\\s it before it
lets go. A writer killed in the middle of its ``write`` leaves at most one torn last line;
:func:`read_rows` ignores it (with a warning) and the next :func:`append_row` cuts it off
before it writes, so a torn line never glues itself to a whole one.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import warnings
from typing import Any, Iterable

from runtime_sim.contract.errors import IccaError

__all__ = ["append_row", "done_keys", "read_rows"]

#: Bytes read at a time when looking back for the end of the last whole line.
_CHUNK = 1 << 16


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


def read_rows(path: "str | os.PathLike[str]") -> list[dict[str, Any]]:
    """The rows of a results file, in the order they were written.

    A torn last line (a writer killed mid-row) is ignored with a warning; so is a later row of
    a key already read (two sweeps that ran the same point at once), keeping the first.

    Parameters
    ----------
    path : str or os.PathLike
        The results file; a missing file has no rows.

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
        key = row.get("key")
        if key is not None and key in seen:
            warnings.warn(f"results file '{where}': line {number} repeats point {str(key)[:12]}; "
                          "keeping the first row", RuntimeWarning, stacklevel=2)
            continue
        if key is not None:
            seen.add(key)
        rows.append(row)
    return rows


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
