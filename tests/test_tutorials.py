"""Every tutorial runs as a test, in a fresh interpreter, as a user would run it.

The test suite runs each in its small configuration (``TVM_ICCA_TUTORIAL_SIZE=small``: fewer
layers, smaller chips and shapes, the same steps); by hand and in the documentation they run at
full size.
"""

import os
import pathlib
import subprocess
import sys

import pytest

TUTORIALS = sorted((pathlib.Path(__file__).parent.parent / "tutorials").glob("*.py"))
#: the biggest tutorials (10-16 s each in their small configuration): `make test-full` runs
#: them (CI; `make docs` at full size). What they teach keeps fast tests in `make test`: 05's
#: tuning session and records (test_tuning_session, test_records_apply, test_records_database),
#: 06's user pattern (test_partition's user-registered patterns) and chip file (test_hardware's
#: TOML chips), 07's sweep (test_dse_run, test_dse_spec, test_sweep_report)
LONG = {"05_tuning", "06_extending", "07_design_space"}


@pytest.mark.slow
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.long_run) if p.stem in LONG
                                  else p for p in TUTORIALS], ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(path, tmp_path):
    env = dict(os.environ, TVM_ICCA_TUTORIAL_SIZE="small", MPLBACKEND="Agg")
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                            timeout=600, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


def test_tutorials_say_what_they_teach():
    """Each tutorial opens with a title and a paragraph on what it teaches, and imports only
    the public API (no ``tvm_icca.testing`` helpers, no private modules)."""
    assert len(TUTORIALS) >= 1
    for path in TUTORIALS:
        text = path.read_text()
        assert text.startswith('"""'), path.name
        head = text.split('"""')[1]
        assert "teaches" in head or "you will learn" in head.lower(), path.name
        assert "tvm_icca.testing" not in text, path.name
        for line in text.splitlines():
            if line.startswith(("import ", "from ")) and "tvm_icca" in line:
                module = line.split()[1]
                assert not any(part.startswith("_") for part in module.split(".")), line
