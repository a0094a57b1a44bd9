"""tvm_icca.dse.run: a tiny sweep, locally (1 and 2 workers), killed and resumed, and on Ray.

Under a minute together. The study: Llama 2's tiny config on a 16-core chip with HBM, two HBM bandwidths x two
designs, plus a chip whose cores are too small for any plan (two ``does_not_fit`` rows).
"""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from runtime_sim.contract.metrics import DSE_METRICS, METRICS
from tvm_icca.cli.main import main
from tvm_icca.dse import expand, load_spec, read_rows, run
from tvm_icca.dse.points import chip_digest
from tvm_icca.dse.results import provenance_path, read_chips, read_runs
from tvm_icca.dse.run import ChipChangedWarning
from tvm_icca.dse.worker import PROVENANCE_KEYS, TIMING_KEYS
from tvm_icca.hardware_choice import HardwareSpec
from tvm_icca.provenance import current

# one worker builds the module's shared fixture once (make test runs on several)
pytestmark = [pytest.mark.xdist_group("dse_run"), pytest.mark.slow]

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
matrix_pj_per_flop = 0.5
matrix_pj_per_flop_by_dtype = {}
static_w_per_core = 0.0
static_w_per_chip = 20.0
[grid]
hbm_bandwidth = [1e10, 1e11]
[[points]]
sram_bytes_per_core = 8400
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
    """Rows by key without what measures the host (times, host name, cache counters) or names
    the code (others commit to the checkout while the tests run)."""
    return {r["key"]: {k: v for k, v in r.items() if k not in TIMING_KEYS + PROVENANCE_KEYS}
            for r in rows}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The whole sweep on one local worker, its plans kept on disk (:func:`_plans`): the
    other sweeps here compute their rows without them and compare them with these."""
    path = _spec(tmp_path_factory.mktemp("jobs1"))
    done = run(path, jobs=1, progress=False, plan_cache=_plans(path))
    return load_spec(path), done, read_rows(done.results)


def _plans(spec_path) -> str:
    """The plan cache directory of the reference sweep of ``spec_path`` (beside the spec)."""
    return os.path.join(os.path.dirname(spec_path), "plans")


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
            # the run's energy and the actions it is priced on (runtime_sim.contract.energy)
            assert row["energy_j"] == pytest.approx(sum(row["energy_breakdown_j"].values()))
            assert row["energy_breakdown_j"]["matrix"] == pytest.approx(
                row["matrix_flops"] * 0.5e-12)
            assert row["energy_breakdown_j"]["static"] == pytest.approx(20.0 * row["total_s"])
            assert row["average_power_w"] == pytest.approx(row["energy_j"] / row["total_s"])
            assert row["sram_read_bytes"] > 0 and row["link_byte_hops"] > 0
        no = by[(1e11, 8400, design)]
        assert no["status"] == "does_not_fit" and "PlanNotFoundError" in no["reason"]
        assert "total_s" not in no and no["compile_s"] > 0
    # the designs' order of Elk §6.2 holds here too
    assert by[(1e10, 65536, "elk-full")]["total_s"] <= by[(1e10, 65536, "static")]["total_s"]
    # every column is defined: in the glossary, or an input the row lists
    for row in rows:
        assert sorted(k for k in row if k not in METRICS and k not in DSE_METRICS
                      and k not in row["inputs"]) == []
        assert row["tvm_icca_version"] and row["tvm_version"] and row["timestamp"]
    # where each row came from: the code, the chip (stored once beside the results), the
    # workload's arguments, and what the point cost
    chips = read_chips(done.results)
    origin = current()
    for row in rows:
        assert row["commit"] == origin.commit and row["dirty"] is origin.dirty
        assert chip_digest(chips[row["chip_digest"]]) == row["chip_digest"]
        hw = HardwareSpec.from_dict(chips[row["chip_digest"]])
        assert (hw.hbm_bandwidth, hw.sram_bytes_per_core) == (row["hbm_bandwidth"],
                                                             row["sram_bytes_per_core"])
        assert row["workload_args"] == {"tiny": True, "context": 64}
        assert row["wall_s"] >= row["compile_s"] + row["simulate_s"] > 0
        assert 0 < row["cpu_s"]
    assert len(chips) == 3 and len({r["point_id"] for r in rows}) == 6
    (record,) = read_runs(done.results)  # one run computed them all
    assert record["commit"] == origin.commit and record["spec"] == "tiny"
    assert record["counts"] == {"ok": 4, "does_not_fit": 2} and record["pending"] == 6
    assert record["wall_s"] >= record["points_wall_s"] == pytest.approx(
        sum(r["wall_s"] for r in rows))
    assert done.wall_s == record["wall_s"]
    # a second run finds everything done
    again = run(spec, jobs=1, progress=False)
    assert again.pending == [] and not again.counts and len(read_rows(done.results)) == 6


@pytest.mark.long_run  # a command line killed mid-sweep, then resumed: `make test-full`
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


def test_dry_run_and_limit(tmp_path, capsys, monkeypatch):
    """``--dry-run`` lists the points; ``limit=1`` computes one, with ``jobs=1`` in this
    process: no worker is started, so no worker imports the caller's script (an unguarded
    script can sweep; its pool's error: test_script_without_main_guard)."""
    path = _spec(tmp_path)
    assert main(["dse", path, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("todo") == 6 and "6 points, 0 done before; would compute 6" in out

    def no_worker(*args, **kwargs):
        raise AssertionError("jobs=1 started a sweep worker")

    monkeypatch.setattr(sys.modules["tvm_icca.dse.local_pool"], "_Worker", no_worker)
    monkeypatch.setattr(sys.modules["tvm_icca.dse.run"], "run_local", no_worker)
    done = run(path, jobs=1, limit=1, progress=False)
    monkeypatch.undo()
    assert sum(done.counts.values()) == 1
    assert main(["dse", path, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("  done  ") == 1 and out.count("  todo  ") == 5


@pytest.mark.long_run  # a Ray instance and its workers started cold: `make test-full`
def test_ray_gives_the_same_rows(reference, tmp_path, monkeypatch):
    """``ray="local"`` starts a Ray instance of its own whatever the machine holds: here
    ``RAY_ADDRESS`` names a dead cluster and Ray's temporary directory holds the record a
    stopped head leaves (``ray/ray_current_cluster``), both of which ``ray.init(address=None)``
    follows (before: "When connecting to an existing cluster, num_cpus and num_gpus must not
    be provided", or a wait of minutes). The rows computed on it are the local ones."""
    ray = pytest.importorskip("ray")  # the dse extra; `make test` installs it
    _, _, rows = reference
    # a short directory: Ray's sockets live under it (a Unix socket path is at most 107 bytes)
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    try:
        os.makedirs(os.path.join(ray_tmp, "ray"))
        with open(os.path.join(ray_tmp, "ray", "ray_current_cluster"), "w", encoding="utf-8") as f:
            f.write("127.0.0.1:1")
        monkeypatch.setenv("RAY_TMPDIR", ray_tmp)
        monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)  # ray.init sets it for its own
        # two points, one in flight: each Ray worker process imports TVM and plans cold, and
        # what is checked is that rows computed there are the rows computed here
        done = run(_spec(tmp_path), ray="local", jobs=1, progress=False, limit=2)
        assert not ray.is_initialized()  # the run shut down what it started
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    ray_rows = read_rows(done.results)
    assert len(ray_rows) == 2
    local = _comparable(rows)
    assert _comparable(ray_rows) == {key: local[key] for key in _comparable(ray_rows)}
    assert all(r["wall_s"] > 0 and r["cpu_s"] > 0 for r in ray_rows)  # measured on the workers


def test_ray_addresses_that_cannot_be_used_say_why(tmp_path, monkeypatch):
    """An address where nothing listens (given, or ``RAY_ADDRESS`` for ``auto``) is said at
    once (``ray.init`` would retry for minutes); a cluster that refuses the driver (a head of ``ray start --head`` with token
    authentication, and no ``RAY_AUTH_MODE=token`` here: Ray's bare ``ConnectionError`` after
    ``InvalidAuthToken``) is one error naming what to set."""
    ray = pytest.importorskip("ray")
    import socket

    from runtime_sim.contract.errors import IccaError

    path = _spec(tmp_path)
    with socket.socket() as closed:  # a port nothing listens on once this socket is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(IccaError, match=f"nothing answers at 127.0.0.1:{port}"):
        run(path, ray=f"127.0.0.1:{port}", progress=False, limit=1)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")  # what --ray auto then joins
    with pytest.raises(IccaError, match=f"nothing answers at 127.0.0.1:{port}"):
        run(path, ray="auto", progress=False, limit=1)
    monkeypatch.delenv("RAY_ADDRESS")
    assert time.monotonic() - start < 30
    calls = []

    def refused(address=None, **kwargs):  # what ray.init raises after InvalidAuthToken
        calls.append(address)
        raise ConnectionError(f"Failed to connect to Ray cluster at {address}")

    monkeypatch.setattr(ray, "init", refused)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with socket.socket() as head:  # something listens, as a head's GCS does
        head.bind(("127.0.0.1", 0))
        head.listen()
        address = f"127.0.0.1:{head.getsockname()[1]}"
        with pytest.raises(IccaError, match="set RAY_AUTH_MODE=token") as err:
            run(path, ray=address, progress=False, limit=1)
        assert "RAY_AUTH_TOKEN" in str(err.value) and "\n" not in str(err.value)
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
        with pytest.raises(IccaError, match="is the cluster's"):
            run(path, ray=address, progress=False, limit=1)
    assert calls == [address, address]
    assert read_rows(tmp_path / "tiny.jsonl") == []  # nothing computed


def test_script_without_main_guard(tmp_path):
    """Worker processes import the calling script again: an unguarded script with a pool
    (two plan groups, two workers) gets one error naming the guard. With jobs=1 nothing is
    spawned (test_dry_run_and_limit: the sweep runs in the caller's process)."""
    path = _spec(tmp_path)
    script = tmp_path / "sweep.py"
    script.write_text("import tvm_icca.dse\n"
                      f"tvm_icca.dse.run({path!r}, jobs=2, progress=False)\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode != 0
    # multiprocessing's resource tracker may warn about the failed pool's semaphores at
    # interpreter shutdown, after the error; the error is the last line before that
    lines = [line for line in proc.stderr.splitlines() if "resource_tracker" not in line]
    assert 'if __name__ == "__main__":' in lines[-1]


def test_persistent_plan_cache(reference, tmp_path, monkeypatch):
    """`--plan-cache DIR`: the workers keep their plans on disk; a sweep with a warm
    directory (a later run, another worker: the reference sweep's, made with
    ``plan_cache=DIR``) searches nothing and gives the same rows."""
    from tvm_icca.dse import worker
    from tvm_icca.plan_search import search as search_module

    spec, done, rows = reference
    cache_dir = pathlib.Path(_plans(done.results))
    assert any(cache_dir.rglob("*.pkl"))
    searches = []
    real = search_module._search  # pylint: disable=protected-access
    monkeypatch.setattr(search_module, "_search", lambda *a, **k: searches.append(1) or real(*a, **k))
    # this process ran the reference sweep: its worker's plans are read from disk, not memory
    monkeypatch.setitem(worker._CACHE, "cache", None)  # pylint: disable=protected-access
    path = _spec(tmp_path)
    assert main(["dse", path, "--jobs", "1", "--no-progress", "--plan-cache", str(cache_dir)]) == 0
    assert not searches
    again = read_rows(tmp_path / "tiny.jsonl")
    assert len(again) == 6 and _comparable(again) == _comparable(rows)
    assert sum(r["plan_searches"] for r in again) == 0 < sum(r["plan_searches"] for r in rows)


def test_parallel_sweep_searches_each_plan_once(reference, tmp_path):
    """``jobs=2`` on a study of one plan group (its chips differ in HBM bandwidth only): one
    worker, this process, whose plan scans fork over both CPUs; every plan is searched once
    (the searches the rows count are the searched plans the cache holds, one entry each);
    the rows are the one-worker sweep's, and the cache directory holds only whole entries.
    Two workers sharing one group's searches: test_schedule_starts_each_group_once and the
    killed sweep (two groups, ``--jobs 2``)."""
    from tvm_icca.model_pass import plan_store
    from tvm_icca.plan_search import PlannedOp

    _, _, rows = reference
    path = tmp_path / "tiny.toml"
    path.write_text(textwrap.dedent(SPEC).replace("[[points]]\nsram_bytes_per_core = 8400\n", ""))
    spec = load_spec(str(path))
    points = expand(spec)
    assert len(points) == 4 and len({p.group for p in points}) == 1
    cache_dir = tmp_path / "plans"
    done = run(spec, jobs=2, progress=False, plan_cache=cache_dir)
    assert done.counts == {"ok": 4}
    parallel = {r["key"]: r for r in read_rows(done.results)}
    assert _comparable(parallel.values()) == {k: r for k, r in _comparable(rows).items()
                                              if k in parallel}
    directory = plan_store.PlanStore(cache_dir).directory
    names = os.listdir(directory)
    assert names and not [n for n in names if n.startswith(".tmp")]
    searched = 0
    for name in names:  # every entry whole: its header, then a pickle that loads
        data = (cache_dir / directory / name).read_bytes()
        assert data.startswith(plan_store._MAGIC)  # pylint: disable=protected-access
        end = data.index(b"\n", len(plan_store._MAGIC))  # pylint: disable=protected-access
        assert json.loads(data[len(plan_store._MAGIC):end])["version"] == plan_store.store_version()
        searched += isinstance(pickle.loads(data[end + 1:]), PlannedOp)
    searches = [parallel[p.key]["plan_searches"] for p in points]
    # a plan searched by both workers would be counted twice and held once
    assert sum(searches) == searched > 0


@pytest.mark.parametrize("follow", [False, True])
@pytest.mark.parametrize("sizes,slots", [((4,), 2), ((1, 3, 2), 2), ((5, 1, 1, 2), 3), ((2, 2), 1)])
def test_schedule_starts_each_group_once(sizes, slots, follow):
    """The driver's schedule, run against simulated workers with random durations: every
    task runs once and every group's first task starts before any group's second. Without a
    shared plan cache (``follow`` false) no task of a group starts before its first has
    finished, and a worker idles only while every group with tasks left is running its
    first; with one, no worker idles while tasks are left, and one follows a group still being
    searched only when no searched group has tasks left."""
    import random

    schedule_type = sys.modules["tvm_icca.dse.local_pool"].Schedule
    rng = random.Random(sum(sizes) * 10 + slots)
    tasks = [{"group": f"g{g}", "n": i} for g, size in enumerate(sizes) for i in range(size)]
    schedule = schedule_type(tasks, follow=follow)
    clock, running, started, finished = 0.0, [], [], set()
    while True:
        while len(running) < slots:
            task = schedule.next_for(started[-1]["group"] if started else None)
            left = {t["group"] for t in tasks if t not in started}
            if task is None:
                assert not follow or not left
                assert all(any(r["group"] == g and r["n"] == 0 for _, r in running) for g in left)
                break
            searched = {g for g, n in finished if n == 0}
            if not follow:
                assert task["n"] == 0 or task["group"] in searched
            elif task["n"] and task["group"] not in searched:
                assert not left & searched - {task["group"]}
            started.append(task)
            running.append((clock + rng.uniform(1, 10) * (5 if task["n"] == 0 else 1), task))
        if not running:
            break
        running.sort(key=lambda entry: entry[0])
        clock, task = running.pop(0)
        schedule.finished(task)
        finished.add((task["group"], task["n"]))
    assert sorted(map(id, started)) == sorted(map(id, tasks)) and not schedule
    firsts = [i for i, t in enumerate(started) if t["n"] == 0]
    assert len(firsts) == len(sizes)
    assert max(firsts) < min((i for i, t in enumerate(started) if t["n"] == 1), default=len(started))


def _copy_results(reference, directory):
    """The reference sweep's results and provenance file, copied into ``directory``."""
    _, done, _ = reference
    target = os.path.join(directory, "tiny.jsonl")
    shutil.copy(done.results, target)
    shutil.copy(provenance_path(done.results), provenance_path(target))
    return target


def test_rerun_reproduces_and_reports_a_difference(reference, tmp_path, capsys):
    """`dse rerun` computes rows again from what they stored: identical totals exit 0; a stored
    total edited by 1% is found (exit 1); bad selections are usage errors (exit 2)."""
    _, _, rows = reference
    path = _copy_results(reference, tmp_path)
    ok = next(i for i, r in enumerate(rows) if r["status"] == "ok")
    no = next(i for i, r in enumerate(rows) if r["status"] == "does_not_fit")
    assert main(["dse", "rerun", path, "--rows", f"{ok},{rows[no]['key'][:12]}"]) == 0
    out = capsys.readouterr().out
    assert "2 row(s) re-run" in out and "all reproduce" in out
    assert f"{rows[ok]['total_s']:.6g}" in out
    edited = [dict(r, total_s=r["total_s"] * 1.01) if i == ok else r for i, r in enumerate(rows)]
    with open(path, "w", encoding="utf-8") as file:
        file.writelines(json.dumps(r) + "\n" for r in edited)
    assert main(["dse", "rerun", path, "--rows", str(ok)]) == 1
    out = capsys.readouterr().out
    line = next(li for li in out.splitlines() if li.startswith(f"{ok} "))
    assert f"{1 - 1 / 1.01:.2e}" in line and "1 do not reproduce" in out
    assert main(["dse", "rerun", path, "--rows", "99"]) == 2
    assert main(["dse", "rerun", path, "--rows", "ffffffffff"]) == 2
    assert main(["dse", _spec(tmp_path), "--rows", "1"]) == 2
    capsys.readouterr()
    # a row of a file without its provenance file cannot be re-run: it does not reproduce
    os.remove(provenance_path(path))
    assert main(["dse", "rerun", path, "--rows", str(no)]) == 1
    assert "not re-run" in capsys.readouterr().out


def test_resume_after_a_chip_change_names_the_fields(reference, tmp_path, capsys):
    """The spec's chip changes under a finished sweep (here a fixed field; a preset edit is the
    same): the resumed run says which points and fields, computes them again, and the file's
    current rows are the new ones; changed back, the old chip's rows come back."""
    _, _, rows = reference
    path = _copy_results(reference, tmp_path)
    original = _spec(tmp_path)
    old_sync = HardwareSpec.from_dict(read_chips(path)[rows[0]["chip_digest"]]).sync_cycles
    edited = tmp_path / "edited.toml"
    edited.write_text(textwrap.dedent(SPEC).replace(
        "hbm_controllers = 2", "hbm_controllers = 2\nsync_cycles = 777").replace(
        'name = "tiny"', 'name = "tiny"\nresults = "tiny.jsonl"'))
    assert main(["dse", str(edited), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "6 point(s) have rows computed on a different chip" in captured.err
    assert f"sync_cycles {old_sync} -> 777" in captured.err
    assert captured.out.count("  redo  ") == 6
    with pytest.warns(ChipChangedWarning, match=f"sync_cycles {old_sync} -> 777"):
        done = run(str(edited), jobs=1, limit=1, progress=False)
    assert len(done.changed) == 6 and sum(done.counts.values()) == 1
    current_rows = read_rows(path)
    assert len(current_rows) == 6 and len(read_rows(path, superseded=True)) == 7
    (new,) = [r for r in current_rows if r["key"] not in {r0["key"] for r0 in rows}]
    assert read_chips(path)[new["chip_digest"]]["sync_cycles"] == 777
    # the original spec again: the recomputed point's chip changed back
    with pytest.warns(ChipChangedWarning, match=f"sync_cycles 777 -> {old_sync}"):
        back = run(original, jobs=1, progress=False)
    assert sum(back.counts.values()) == 1
    now = read_rows(path)
    (again,) = [r for r in now if r.get("supersedes")]
    assert again["supersedes"] == new["key"] and again["key"] != new["key"]
    assert _comparable(dict(r, supersedes=None) for r in now) == _comparable(
        dict(r, supersedes=None) for r in rows)


def test_resume_matches_rows_older_than_point_ids(reference, tmp_path, capsys):
    """Rows written before rows named their point and chip (the committed results of earlier
    versions) are matched on what they recorded; the fields they recorded are compared."""
    _, _, rows = reference
    path = _copy_results(reference, tmp_path)
    os.remove(provenance_path(path))
    drop = ("point_id", "chip_digest", "workload_args", "supersedes")
    with open(path, "w", encoding="utf-8") as file:
        file.writelines(json.dumps({k: v for k, v in r.items() if k not in drop}) + "\n"
                        for r in rows)
    edited = tmp_path / "edited.toml"
    edited.write_text(textwrap.dedent(SPEC).replace("hbm_controllers = 2", "hbm_controllers = 4")
                      .replace('name = "tiny"', 'name = "tiny"\nresults = "tiny.jsonl"'))
    assert main(["dse", str(edited), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "6 point(s) have rows computed on a different chip" in err
    assert "hbm_controllers 2 -> 4, the other chip fields the row did not record" in err
    with pytest.warns(ChipChangedWarning):
        run(str(edited), jobs=1, limit=1, progress=False)
    current_rows = read_rows(path)
    assert len(current_rows) == 6 and len(read_rows(path, superseded=True)) == 7
    (new,) = [r for r in current_rows if r.get("point_id")]
    assert new["supersedes"] in {r["key"] for r in rows} and new["hbm_controllers"] == 4


def test_resume_names_rows_made_by_other_commits(reference, tmp_path, capsys):
    """Rows a resumed sweep keeps but another commit made are named with their commits and
    the command that checks them (they are not computed again); rows of this commit, or of
    no checkout, give no note."""
    from tvm_icca.dse.run import OtherCommitsWarning, other_commits_note
    from tvm_icca.provenance import current

    _, _, rows = reference
    path = _copy_results(reference, tmp_path)
    now = current().commit
    assert other_commits_note(rows, now, path) is None  # the reference sweep ran just now
    assert other_commits_note([dict(r, commit="0" * 40) for r in rows], "unknown", path) is None
    old = [dict(r, commit="a" * 40) for r in rows[:2]] + list(rows[2:])
    with open(path, "w", encoding="utf-8") as f:  # the file as an older sweep left it
        f.writelines(json.dumps(r) + "\n" for r in old)
    note = other_commits_note(old, now, path)
    if now == "unknown":  # not run from a checkout: nothing to compare with
        assert note is None
        return
    assert note.startswith(f"2 of the {len(rows)} rows kept were computed by other commits (2 by aaaaaaaaaa;")
    assert f"tvm-icca dse rerun {path}" in note
    with pytest.warns(OtherCommitsWarning, match="2 of the"):
        done = run(_spec(tmp_path), dry_run=True, results=path)
    assert done.other_commits == note and not done.pending
    assert main(["dse", _spec(tmp_path), "--dry-run", "--results", path]) == 0
    assert f"tvm-icca: note: {note}" in capsys.readouterr().err
