"""Reading the small text files users write: hardware descriptions and study specs.

One rule for every such file, so each says what is wrong with it the same way: the caller
passes ``bad``, which turns a reason into its own error type naming the file, and gets back
the file's text or its parsed TOML / JSON, or that one error (never an ``OSError`` or a
decoder's exception).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover  (setup.py installs tomli there)
    import tomli as tomllib

__all__ = ["parse_json", "parse_toml", "read_text"]

#: Makes the caller's error (naming the file) from a reason.
BadFile = Callable[[str], Exception]


def read_text(where: str, bad: BadFile) -> str:
    """The UTF-8 text of the file ``where``; ``bad(reason)`` is raised when it cannot be read."""
    try:
        with open(where, encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError:
        raise bad("no such file") from None
    except IsADirectoryError:
        raise bad("is a directory, not a file") from None
    except PermissionError:
        raise bad("cannot be read (permission denied)") from None
    except UnicodeDecodeError as err:
        raise bad(f"is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise bad(f"cannot be read ({err.strerror or err})") from None


def parse_toml(text: str, bad: BadFile) -> Any:
    """``text`` as TOML; a syntax error is ``bad(...)`` with its line and column."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:  # its message ends "(at line L, column C)"
        raise bad(f"invalid TOML: {err}") from None


def parse_json(text: str, bad: BadFile) -> Any:
    """``text`` as JSON; a syntax error is ``bad(...)`` with its line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise bad(f"invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
