"""The provenance record (tvm_icca.provenance): the commit and its uncommitted changes, the
versions, the host and the time, checked against git and the interpreter directly."""

import datetime
import importlib.metadata
import os
import pathlib
import platform
import shutil
import subprocess

import pytest

from tvm_icca.provenance import UNKNOWN, Provenance, checkout_state, current, package_root

ROOT = pathlib.Path(__file__).resolve().parent.parent
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout.strip()


@needs_git
def test_current_names_this_checkout_head():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an installed package)")
    record = current("tvm-icca dse x.toml", fresh=True)
    assert record.commit == _git(ROOT, "rev-parse", "HEAD")
    assert len(record.commit) == 40 and int(record.commit, 16) >= 0
    assert record.short_commit == record.commit[:10]
    status = _git(ROOT, "status", "--porcelain", "--untracked-files=no", "--", "tvm_icca",
                  "runtime_sim", "schedules", "benchmarks/*.py")
    assert record.dirty is bool(status)
    assert record.command == "tvm-icca dse x.toml"


def test_current_versions_host_and_time():
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    record = current()
    after = datetime.datetime.now(datetime.timezone.utc)
    assert record.tvm_icca_version == importlib.metadata.version("tvm-icca")
    assert record.tvm_version == importlib.metadata.version("apache-tvm")
    assert record.python_version == platform.python_version()
    assert record.host == platform.node()
    stamp = datetime.datetime.fromisoformat(record.timestamp)
    assert stamp.utcoffset() == datetime.timedelta(0)
    assert before <= stamp <= after


def test_round_trip_and_missing_fields():
    record = current("cmd")
    assert Provenance.from_dict(record.to_dict()) == record
    old = Provenance.from_dict({"tvm_icca_version": "0.1.0"})
    assert old.commit == UNKNOWN and old.dirty is None and old.tvm_icca_version == "0.1.0"
    assert old.short_commit == UNKNOWN


def test_not_a_checkout_is_unknown(tmp_path):
    assert checkout_state(str(tmp_path)) == (UNKNOWN, None)


@needs_git
def test_dirty_means_tracked_source_changed(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tvm_icca").mkdir(parents=True)
    (repo / "benchmarks" / "results").mkdir(parents=True)
    (repo / "tvm_icca" / "a.py").write_text("x = 1\n")
    (repo / "benchmarks" / "results" / "r.md").write_text("result\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    assert checkout_state(str(repo)) == (head, False)
    (repo / "tvm_icca" / "new.py").write_text("untracked\n")  # untracked: not dirty
    (repo / "benchmarks" / "results" / "r.md").write_text("rewritten\n")  # a result, not code
    assert checkout_state(str(repo)) == (head, False)
    (repo / "tvm_icca" / "a.py").write_text("x = 2\n")
    assert checkout_state(str(repo)) == (head, True)
    # a package installed inside some other checkout (a virtualenv in a repository) is not one
    inner = repo / "venv" / "site-packages"
    inner.mkdir(parents=True)
    assert checkout_state(str(inner)) == (UNKNOWN, None)


def test_package_root_holds_the_package():
    assert os.path.isfile(os.path.join(package_root(), "tvm_icca", "provenance.py"))
