"""docs/get_started.rst runs as written: its shell and Python blocks, in order, in an empty folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "get_started.rst"

#: ``.. code-block:: LANG`` then a blank line then the indented body (up to the first line
#: that is not blank and not indented).
_BLOCK = re.compile(r"^\.\. code-block:: (?P<lang>\w+)\n\n(?P<body>(?:(?:[ \t]+.*)?\n)+)",
                    re.MULTILINE)


def page_blocks(text: str) -> list[tuple[str, str]]:
    """The page's ``code-block`` directives as (language, dedented body), in page order."""
    blocks = []
    for match in _BLOCK.finditer(text):
        lines = match["body"].rstrip("\n").split("\n")
        indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
        blocks.append((match["lang"], "\n".join(line[indent:] for line in lines) + "\n"))
    return blocks


def test_block_extraction_sees_every_directive():
    # the runner below is only as good as this parse: every directive on the page is found
    text = PAGE.read_text()
    assert len(page_blocks(text)) == text.count(".. code-block::")
    langs = [lang for lang, _ in page_blocks(text)]
    assert set(langs) <= {"python", "shell"}, langs  # a new language needs a runner here


@pytest.mark.long_run  # installs nothing, but runs every block in fresh interpreters: `make test-full`
def test_get_started_runs_as_written_in_an_empty_folder(tmp_path):
    blocks = page_blocks(PAGE.read_text())
    langs = [lang for lang, _ in blocks]
    assert langs.count("shell") >= 2 and "python" in langs, langs
    env = dict(os.environ)
    # the commands a user's install puts on PATH: those of this interpreter's environment
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)  # the installed package, as a user has it, not the checkout
    for lang, body in blocks:
        argv = [sys.executable, "-c", body] if lang == "python" else ["bash", "-e", "-c", body]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, f"{lang} block failed:\n{body}\n{done.stdout}\n{done.stderr}"
    # what the steps promise to leave behind
    for name in ("model.onnx", "run.json", "model.so"):
        assert (tmp_path / name).stat().st_size > 0, name
