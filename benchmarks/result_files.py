"""Where each benchmark result came from: the command and the commit, written with the result.

Every markdown table a script in ``benchmarks/`` writes to ``benchmarks/results/`` starts with
one provenance line, so a number on the documentation's Results pages always says which
command made it, on which commit, with which TVM (``tests/test_result_files.py`` checks every
results file has it).
"""

from __future__ import annotations

import datetime
import pathlib
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The first words of every provenance line (the docs and the test look for them).
PROVENANCE_PREFIX = "Made by `"


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()

    head = git("rev-parse", "--short=10", "HEAD") or "unknown"
    # only tracked source files count: results being rewritten do not make the code dirty
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "tvm_icca", "runtime_sim",
                "schedules", "benchmarks/*.py")
    return head + (" with uncommitted changes" if dirty else "")


def provenance_line(argv: list[str] | None = None) -> str:
    """One line naming the command (as typed from the repository root), commit, versions, date."""
    import tvm  # pylint: disable=import-outside-toplevel

    argv = sys.argv if argv is None else argv
    script = pathlib.Path(argv[0]).resolve()
    try:
        script_text = str(script.relative_to(ROOT))
    except ValueError:
        script_text = argv[0]
    command = shlex.join([".venv/bin/python", script_text, *argv[1:]])
    return (f"{PROVENANCE_PREFIX}{command}` on commit {_commit()} (apache-tvm {tvm.__version__}, "
            f"Python {sys.version.split()[0]}), {datetime.date.today().isoformat()}.")


def write_markdown(path: pathlib.Path | str, text: str) -> None:
    """Write a results markdown file whose first line is the provenance of this run."""
    path = pathlib.Path(path)
    path.write_text(provenance_line() + "\n\n" + text.rstrip("\n") + "\n", encoding="utf-8")
