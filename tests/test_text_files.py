"""Reading users' text files: every failure is the caller's one error naming the file."""

import pytest

from runtime_sim.contract.text_files import parse_json, parse_toml, read_text


class FileError(Exception):
    pass


def bad(why: str) -> FileError:
    return FileError(f"my file: {why}")


def test_read_text_and_its_failures(tmp_path):
    good = tmp_path / "a.toml"
    good.write_text("x = 1\n", encoding="utf-8")
    assert read_text(str(good), bad) == "x = 1\n"
    with pytest.raises(FileError, match="my file: no such file"):
        read_text(str(tmp_path / "missing.toml"), bad)
    with pytest.raises(FileError, match="is a directory"):
        read_text(str(tmp_path), bad)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b"name = '\xe9'\n")
    with pytest.raises(FileError, match="is not UTF-8 text"):
        read_text(str(latin), bad)


def test_parse_errors_name_the_line():
    assert parse_toml("a = [1, 2]\n[b]\nc = 'x'\n", bad) == {"a": [1, 2], "b": {"c": "x"}}
    assert parse_json('{"a": 1}', bad) == {"a": 1}
    with pytest.raises(FileError, match=r"invalid TOML: .*line 2"):
        parse_toml("a = 1\nb = \n", bad)
    with pytest.raises(FileError, match="invalid JSON at line 2, column"):
        parse_json('{"a": 1,\n}', bad)
