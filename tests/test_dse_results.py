"""tvm_icca.dse.results: atomic appends from concurrent writers; a torn last line is ignored."""

from __future__ import annotations

import json
import multiprocessing

import pytest

import tvm_icca
from tvm_icca.dse import append_row, done_keys, read_rows

ROWS_PER_WRITER = 200


def _writer(path: str, who: int) -> None:
    # rows far larger than a pipe buffer's atomic size, so interleaving would show
    for i in range(ROWS_PER_WRITER):
        append_row(path, {"key": f"{who}-{i}", "who": who, "pad": "x" * (5000 + i)})


def test_concurrent_writers_give_whole_lines(tmp_path):
    path = str(tmp_path / "r.jsonl")
    context = multiprocessing.get_context("fork")  # results.py imports no TVM state to lose
    writers = [context.Process(target=_writer, args=(path, who)) for who in range(2)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
        assert w.exitcode == 0
    lines = open(path, encoding="utf-8").read().split("\n")
    assert lines[-1] == "" and len(lines) == 2 * ROWS_PER_WRITER + 1
    rows = [json.loads(line) for line in lines[:-1]]  # every line is one whole row
    assert sorted(r["key"] for r in rows) == sorted(f"{w}-{i}" for w in range(2)
                                                    for i in range(ROWS_PER_WRITER))
    for who in range(2):  # each writer's rows in its order
        mine = [int(r["key"].split("-")[1]) for r in rows if r["who"] == who]
        assert mine == list(range(ROWS_PER_WRITER))


def test_torn_last_line_is_ignored_then_cut(tmp_path):
    path = tmp_path / "r.jsonl"
    append_row(path, {"key": "a", "v": 1.5})
    append_row(path, {"key": "b", "v": float("nan")})  # strict JSON: null
    with open(path, "ab") as file:
        file.write(b'{"key": "c", "v": 2')  # a writer killed mid-row
    with pytest.warns(RuntimeWarning, match="torn last line"):
        rows = read_rows(path)
    assert [r["key"] for r in rows] == ["a", "b"] and rows[1]["v"] is None
    with pytest.warns(RuntimeWarning, match="torn last line"):
        assert done_keys(path) == {"a", "b"}
    # the next append cuts the torn tail first: it never glues onto a whole row
    with pytest.warns(RuntimeWarning, match="cut a torn last line"):
        append_row(path, {"key": "c", "v": 3})
    assert [r["key"] for r in read_rows(path)] == ["a", "b", "c"]
    assert path.read_text().count("\n") == 3


def test_repeated_keys_and_bad_files(tmp_path):
    path = tmp_path / "r.jsonl"
    assert read_rows(path) == [] and done_keys([]) == set()
    append_row(path, {"key": "a", "n": 1})
    append_row(path, {"key": "a", "n": 2})
    with pytest.warns(RuntimeWarning, match="repeats point"):
        assert read_rows(path) == [{"key": "a", "n": 1}]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n{}\n")
    with pytest.raises(tvm_icca.IccaError, match="line 1"):
        read_rows(bad)


def test_provenance_file_and_superseded_rows(tmp_path):
    """Chips and runs go to <stem>.provenance.jsonl; a later row of a point (a changed chip)
    supersedes the earlier; a chip changed back to an earlier one gets its row again."""
    from tvm_icca.dse.results import (append_chip, append_run, provenance_path, read_chips,
                                      read_runs)

    path = tmp_path / "r.jsonl"
    assert provenance_path(path) == str(tmp_path / "r.provenance.jsonl")
    assert provenance_path("x.out") == "x.out.provenance.jsonl"
    append_chip(path, "d1", {"num_cores": 80})
    append_chip(path, "d2", {"num_cores": 72})
    append_chip(path, "d1", {"num_cores": 80})  # two writers recording one chip: harmless
    append_run(path, {"wall_s": 1.5})
    assert read_chips(path) == {"d1": {"num_cores": 80}, "d2": {"num_cores": 72}}
    assert read_runs(path) == [{"wall_s": 1.5}]
    assert read_rows(path) == [] and read_chips(tmp_path / "none.jsonl") == {}
    append_row(path, {"key": "k1", "point_id": "p", "n": 1})
    append_row(path, {"key": "q1", "point_id": "q", "n": 2})
    append_row(path, {"key": "k2", "point_id": "p", "n": 3})  # p on a changed chip
    assert [r["n"] for r in read_rows(path)] == [2, 3]
    assert [r["n"] for r in read_rows(path, superseded=True)] == [1, 2, 3]
    append_row(path, {"key": "k1", "point_id": "p", "n": 4})  # p's chip changed back
    assert [r["n"] for r in read_rows(path)] == [2, 4]
    with pytest.warns(RuntimeWarning, match="repeats point"):
        append_row(path, {"key": "k1", "point_id": "p", "n": 5})  # a true repeat
        assert [r["n"] for r in read_rows(path)] == [2, 4]
