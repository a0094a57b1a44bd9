"""tvm_icca.processes: children that their parent stops, through the plan scans of
tvm_icca.plan_search.option_pool (a Ctrl-C is the parent's; they end with it, also when it is
killed outright).

Each case is a small script in its own session whose scans sleep (a scan that never ends on
its own): the test signals it and looks, with psutil, for processes still carrying the
marker its environment passed to every process it started
(:func:`tvm_icca.testing.sweep_signals.marked`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import psutil

from tvm_icca.testing.sweep_signals import LAUNCHER, MARK, marked

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import sys, time
    from tvm_icca.plan_search.option_pool import map_in_workers
    print("ready", flush=True)
    map_in_workers(time.sleep, [60.0, 60.0], jobs=2)
    print("finished", flush=True)
""")
def _start(marker: str) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """The script, once its two scans run."""
    env = dict(os.environ, PYTHONPATH=ROOT, **{MARK: marker})
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, sys.executable, "-c", SCRIPT],
                            env=env, cwd=ROOT, start_new_session=True, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 60
    scans: list[psutil.Process] = []
    while len(scans) < 2 and time.monotonic() < deadline:
        scans = psutil.Process(proc.pid).children()
        time.sleep(0.05)
    assert len(scans) == 2, "the scans did not start"
    time.sleep(0.3)  # past their start-up, into the work
    return proc, scans


def _alive(proc: psutil.Process) -> bool:
    """Running, not a zombie (a child ended but not yet waited for by its parent)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone(marker: str, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not marked(marker)


def test_ctrl_c_is_the_parents_and_its_scans_end_at_once():
    """SIGINT to the whole process group, as a terminal sends it: the scans ignore it (no
    traceback of theirs), the parent's KeyboardInterrupt ends them at once (they would sleep
    a minute), and the parent ends as Python does on an uncaught KeyboardInterrupt."""
    marker = uuid.uuid4().hex
    proc, _ = _start(marker)
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 10
    assert proc.returncode == -signal.SIGINT
    assert err.count("Traceback") == 1 and err.rstrip().endswith("KeyboardInterrupt")
    assert _gone(marker)


def test_scans_die_with_a_parent_killed_outright():
    """SIGKILL to the parent alone: nothing of it runs again, and the kernel ends its scans
    (the parent-death signal serve_parent asks for)."""
    marker = uuid.uuid4().hex
    proc, scans = _start(marker)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert _gone(marker)
    # the parent-death signal is delivered at once; a loaded machine may take a moment to
    # run the scans' exits (and their reaper to collect them)
    deadline = time.monotonic() + 10
    while any(_alive(scan) for scan in scans) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(scan) for scan in scans)


def test_a_scan_ignores_sigint_and_ends_on_sigterm():
    """A scan sent SIGINT alone keeps working; SIGTERM (what ``terminate`` sends) ends it, with
    the default action, not a handler inherited from its parent."""
    marker = uuid.uuid4().hex
    proc, scans = _start(marker)
    try:
        first, second = scans
        first.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert _alive(first)
        second.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _alive(second) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(second)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    assert _gone(marker)
