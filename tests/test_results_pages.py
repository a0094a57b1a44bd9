"""docs/_ext/results_pages.py: every Results page has a title, a sentence and the command that
remakes it, and every result file is on a page of an existing script."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import results_pages  # noqa: E402  (docs/_ext; needs the [docs] extra, which make test installs)


@pytest.fixture(scope="module")
def pages():
    return results_pages.result_pages(ROOT)


def test_every_page_has_a_title_a_sentence_and_its_command(pages):
    assert pages
    for name, (text, _) in pages.items():
        script = name.removesuffix(".md")
        assert (ROOT / "benchmarks" / f"{script}.py").exists(), name  # no page per file name
        lines = text.splitlines()
        assert lines[0] == f"# {results_pages.TITLES[script]}", name
        sentence = lines[2]
        assert len(sentence) > 20 and not sentence.startswith(("#", "|", "!", "Made by")), name
        command = re.search(r"```sh\n(.+)\n```", text)
        assert command and f"benchmarks/{script}.py" in command[1], name
        assert "#" not in command[1], name  # the docstring's comment is dropped


def test_every_result_file_is_on_exactly_one_page(pages):
    shown = [f.name for _, files in pages.values() for f in files]
    files = sorted(f.name for f in (ROOT / "benchmarks" / "results").glob("*")
                   if f.suffix in (".md", ".png"))
    assert sorted(shown) == files
    # the README's pictures are on the page of the script that draws them
    assert {"figure_plan.png", "figure_elk_designs.png", "figure_timeline.png"} <= {
        f.name for f in pages["figures.md"][1]}


def test_the_summary_is_the_docstrings_first_paragraph_and_command(tmp_path):
    script = tmp_path / "demo_bench.py"
    script.write_text('"""Speed of a thing, per :func:`tvm_icca.compile` and ``x``.\n\n'
                      'More words.\n\n    .venv/bin/python benchmarks/demo_bench.py --fast'
                      '   # two minutes\n"""\n')
    sentence, command = results_pages.script_summary(script)
    assert sentence == "Speed of a thing, per `tvm_icca.compile` and `x`."
    assert command == ".venv/bin/python benchmarks/demo_bench.py --fast"
