"""tvm_icca.dse.run: a tiny sweep, locally (1 and 2 workers), killed and resumed, and on Ray.

Under a minute together. The study: Llama 2's tiny config on a 16-core chip with HBM, two HBM bandwidths x two
designs, plus a chip whose cores are too small for any plan (two ``does_not_fit`` rows).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from runtime_sim.contract.metrics import DSE_METRICS, METRICS
from tvm_icca.cli.main import main
from tvm_icca.dse import expand, load_spec, read_rows, run
from tvm_icca.dse.worker import TIMING_KEYS

SPEC = """
name = "tiny"
designs = ["static", "elk-full"]
[hardware]
base = "ipu-mk2"
name = "icca-16"
num_cores = 16
sram_bytes_per_core = 65536
hbm_controllers = 2
hbm_bandwidth = 1e11
[grid]
hbm_bandwidth = [1e10, 1e11]
[[points]]
sram_bytes_per_core = 9000
[[workloads]]
name = "llama2-7b"
tiny = true
context = 64
"""
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _spec(directory) -> str:
    path = os.path.join(directory, "tiny.toml")
    with open(path, "w", encoding="utf-8") as file:
        file.write(textwrap.dedent(SPEC))
    return path


def _comparable(rows):
    """Rows by key without what measures the host (times, host name, cache counters)."""
    return {r["key"]: {k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The whole sweep on one local worker."""
    path = _spec(tmp_path_factory.mktemp("jobs1"))
    done = run(path, jobs=1, progress=False)
    return load_spec(path), done, read_rows(done.results)


def test_sweep_rows(reference):
    spec, done, rows = reference
    keys = [p.key for p in expand(spec)]
    assert len(rows) == len(keys) == 6 and sorted(r["key"] for r in rows) == sorted(keys)
    assert done.counts == {"ok": 4, "does_not_fit": 2}
    by = {(r["hbm_bandwidth"], r["sram_bytes_per_core"], r["design"]): r for r in rows}
    for design in ("static", "elk-full"):
        slow, fast = by[(1e10, 65536, design)], by[(1e11, 65536, design)]
        assert slow["status"] == fast["status"] == "ok" and slow["reason"] == ""
        assert slow["total_s"] > fast["total_s"] > 0  # less HBM bandwidth, slower
        for row in (slow, fast):  # no point beats its floors
            for floor in ("hbm_floor_s", "compute_floor_s", "interconnect_floor_s"):
                assert 0 < row[floor] <= row["total_s"] * (1 + 1e-9), floor
        no = by[(1e11, 9000, design)]
        assert no["status"] == "does_not_fit" and "PlanNotFoundError" in no["reason"]
        assert "total_s" not in no and no["compile_s"] > 0
    # the designs' order of Elk §6.2 holds here too
    assert by[(1e10, 65536, "elk-full")]["total_s"] <= by[(1e10, 65536, "static")]["total_s"]
    # every column is defined: in the glossary, or an input the row lists
    for row in rows:
        assert sorted(k for k in row if k not in METRICS and k not in DSE_METRICS
                      and k not in row["inputs"]) == []
        assert row["tvm_icca_version"] and row["tvm_version"] and row["timestamp"]
    # a second run finds everything done
    again = run(spec, jobs=1, progress=False)
    assert again.pending == [] and not again.counts and len(read_rows(done.results)) == 6


def test_killed_sweep_resumes_with_one_row_per_point(reference, tmp_path):
    """Killed after its first row, then resumed on two workers: one row per point, none
    computed twice, and the same rows as one worker's uninterrupted sweep (the local pool's
    jobs=1 and jobs=2 agree)."""
    _, _, rows = reference
    path = _spec(tmp_path)
    results = tmp_path / "tiny.jsonl"
    # the command line in its own session, killed (with its worker) once a row is written
    proc = subprocess.Popen([sys.executable, "-m", "tvm_icca.cli", "dse", path, "--jobs", "1",
                             "--no-progress"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and results.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = read_rows(results)
    assert 1 <= len(before) < 6, "the sweep was not interrupted"
    done = run(path, jobs=2, progress=False)
    after = read_rows(results)
    assert len(after) == 6 and len({r["key"] for r in after}) == 6
    assert done.done_before == {r["key"] for r in before}
    assert sum(done.counts.values()) == 6 - len(before)
    assert after[:len(before)] == before  # finished points were not computed again
    assert _comparable(after) == _comparable(rows)


def test_dry_run_and_limit(tmp_path, capsys):
    path = _spec(tmp_path)
    assert main(["dse", path, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("todo") == 6 and "6 points, 0 done before; would compute 6" in out
    done = run(path, jobs=1, limit=1, progress=False)
    assert sum(done.counts.values()) == 1
    assert main(["dse", path, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("  done  ") == 1 and out.count("  todo  ") == 5


def test_ray_gives_the_same_rows(reference, tmp_path):
    ray = pytest.importorskip("ray")  # the dse extra; `make test` installs it
    _, _, rows = reference
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        done = run(_spec(tmp_path), ray="auto", progress=False)
    finally:
        ray.shutdown()
    assert _comparable(read_rows(done.results)) == _comparable(rows)


def test_script_without_main_guard(tmp_path):
    """Worker processes import the calling script again: an unguarded script with a pool
    gets one error naming the guard; with jobs=1 the sweep runs in the script's process."""
    path = _spec(tmp_path)
    script = tmp_path / "sweep.py"
    script.write_text("import tvm_icca.dse\n"
                      f"tvm_icca.dse.run({path!r}, jobs=2, limit=2, progress=False)\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode != 0
    # multiprocessing's resource tracker may warn about the failed pool's semaphores at
    # interpreter shutdown, after the error; the error is the last line before that
    lines = [line for line in proc.stderr.splitlines() if "resource_tracker" not in line]
    assert 'if __name__ == "__main__":' in lines[-1]
    script.write_text("import tvm_icca.dse\n"
                      f"done = tvm_icca.dse.run({path!r}, jobs=1, limit=1, progress=False)\n"
                      "print(sum(done.counts.values()), 'computed')\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 computed" in proc.stdout


def test_persistent_plan_cache(reference, tmp_path, monkeypatch):
    """`--plan-cache DIR`: the workers keep their plans on disk; a sweep with a warm
    directory (a later run, another worker) searches nothing and gives the same rows."""
    from tvm_icca.dse import worker
    from tvm_icca.plans import search as search_module

    _, _, rows = reference
    cache_dir = tmp_path / "plans"
    path = _spec(tmp_path)
    assert main(["dse", path, "--jobs", "1", "--no-progress", "--plan-cache", str(cache_dir)]) == 0
    assert _comparable(read_rows(tmp_path / "tiny.jsonl")) == _comparable(rows)
    assert any(cache_dir.rglob("*.pkl"))
    searches = []
    real = search_module._search  # pylint: disable=protected-access
    monkeypatch.setattr(search_module, "_search", lambda *a, **k: searches.append(1) or real(*a, **k))
    monkeypatch.setitem(worker._CACHE, "cache", None)  # pylint: disable=protected-access
    again = run(path, jobs=1, progress=False, results=tmp_path / "again.jsonl", plan_cache=cache_dir)
    assert sum(again.counts.values()) == 6 and not searches
    assert _comparable(read_rows(tmp_path / "again.jsonl")) == _comparable(rows)
