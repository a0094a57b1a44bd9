"""Signal a ``tvm-icca dse`` sweep at a chosen moment and see how it ends (issue 43).

:func:`stop_sweep` starts the command line in a session of its own, waits for a moment
(``"start"``: right away; ``"workers"``: its first spawned worker; ``"row"``: a new row in the
results file) plus a delay, sends a signal to its process group (as a terminal's Ctrl-C) or
to the driver alone (as ``kill PID``), and reports: the exit status, the seconds from the
signal to the exit, the processes left behind, and whether every row of the results file is
whole. A process is found left behind by a marker in its environment, which every process
the command starts inherits (workers, the plan scans they fork, multiprocessing's resource
tracker, a Ray instance it started); what is left is killed after it is reported.

``tests/test_dse_stopping.py`` asserts on it; run as a module it signals a sweep many times
at random moments and prints one JSON line per stop (the measurements of issue 43)::

    python -m tvm_icca.testing.sweep_signals SPEC --stops 20 --signal SIGINT --to group \\
        --seed 1 -- --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Sequence

import psutil

__all__ = ["LAUNCHER", "MARK", "Stopped", "marked", "stop_sweep", "whole_rows"]

#: The environment variable whose value marks every process of one stopped sweep.
MARK = "TVM_ICCA_SWEEP_MARK"
#: Starts Python with SIGINT's default action whatever the caller set: a caller started
#: ignoring SIGINT (a ``&`` job of a script, some test runners) passes that on through exec,
#: and Python, then ``tvm-icca dse``, keeps ignoring it, as they should.
LAUNCHER = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
            "os.execv(sys.executable, sys.argv[1:])")
#: Seconds between looks at the sweep while waiting for a moment or for its processes to go.
_POLL_S = 0.02


@dataclass
class Stopped:
    """How a signalled sweep ended.

    Parameters
    ----------
    status : int or None
        Its exit status (``-N``: ended by signal N; None: still running after ``within``).
    seconds : float
        From the signal to the exit (``within`` when it did not exit).
    stderr : str
        Its standard error.
    left : list of str
        Command lines of the processes it left behind (alive ``gone_s`` after it exited).
    rows : int
        Rows in the results file, each a whole JSON line (see ``whole``).
    whole : bool
        Every line of the results file is a whole JSON object ending in a newline.
    delay : float
        Seconds from the moment to the signal.
    moment : str
        ``start``, ``workers`` or ``row``.
    """

    status: int | None
    seconds: float
    stderr: str
    left: list[str] = field(default_factory=list)
    rows: int = 0
    whole: bool = True
    delay: float = 0.0
    moment: str = "start"

    @property
    def last_line(self) -> str:
        """The last line of its standard error."""
        return (self.stderr.strip().splitlines() or [""])[-1]


def marked(marker: str) -> list[psutil.Process]:
    """Live (not zombie) processes whose environment carries ``marker``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK) == marker and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def whole_rows(path: "str | os.PathLike[str]") -> tuple[int, bool]:
    """(lines, whether every one is a whole JSON object ending in a newline) of a file."""
    if not os.path.exists(path):
        return 0, True
    with open(path, "rb") as file:
        data = file.read()
    lines = data.splitlines()
    try:
        whole = all(isinstance(json.loads(line), dict) for line in lines)
    except ValueError:
        whole = False
    return len(lines), whole and (not data or data.endswith(b"\n"))


def _newlines(path: str) -> int:
    try:
        with open(path, "rb") as file:
            return file.read().count(b"\n")
    except FileNotFoundError:
        return 0


def _has_worker(pid: int) -> bool:
    try:
        return any("spawn_main" in " ".join(c.cmdline()) for c in psutil.Process(pid).children())
    except psutil.Error:  # a child that ended meanwhile
        return False


def stop_sweep(dse_args: Sequence[str], results: "str | os.PathLike[str]", *, moment: str,
               delay: float, signum: int, to: str, root: str, cwd: str | None = None,
               within: float = 60.0, gone_s: float = 5.0, again_after: float | None = None,
               wait_s: float = 300.0) -> Stopped:
    """Run ``tvm-icca dse DSE_ARGS`` with ``root`` first on ``PYTHONPATH``, signal it
    ``delay`` seconds after ``moment``, and report how it ended (the module docstring).

    Parameters
    ----------
    dse_args : sequence of str
        The arguments after ``tvm-icca dse`` (the spec, ``--jobs 2``, ``--ray local``, ...).
    results : str or os.PathLike
        Its results file.
    moment : str
        ``"start"``, ``"workers"`` or ``"row"`` (see the module docstring).
    delay : float
        Seconds after the moment.
    signum : int
        The signal.
    to : str
        ``"group"`` (its process group, as a terminal sends Ctrl-C) or ``"driver"`` (its
        process alone).
    root : str
        The checkout of tvm_icca to run.
    cwd : str, optional
        Its working directory.
    within : float
        Seconds it may take to exit before it is killed (and reported still running).
    gone_s : float
        Seconds its processes may take to be gone once it exited.
    again_after : float, optional
        Send the signal a second time this many seconds after the first.
    wait_s : float
        Seconds to wait for the moment.

    Returns
    -------
    Stopped
    """
    marker = uuid.uuid4().hex
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        **{MARK: marker})
    results = os.fspath(results)
    before = _newlines(results)
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, sys.executable, "-m",
                             "tvm_icca.cli", "dse", *dse_args, "--no-progress"],
                            cwd=cwd, env=env, start_new_session=True, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    send = os.killpg if to == "group" else os.kill
    try:
        deadline = time.monotonic() + wait_s
        while moment != "start" and proc.poll() is None and time.monotonic() < deadline:
            if (_has_worker(proc.pid) if moment == "workers" else _newlines(results) > before):
                break
            time.sleep(_POLL_S)
        time.sleep(delay)
        sent = time.monotonic()
        if proc.poll() is None:
            send(proc.pid, signum)
        if again_after is not None:
            time.sleep(again_after)
            if proc.poll() is None:
                send(proc.pid, signum)
        try:
            _, err = proc.communicate(timeout=within)
            seconds = time.monotonic() - sent
        except subprocess.TimeoutExpired:
            seconds = within
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            err = (err or "") + "\n[still running: killed]"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    deadline = time.monotonic() + gone_s
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(_POLL_S * 5)
    left = []
    for process in marked(marker):
        try:
            left.append(" ".join(process.cmdline())[:160])
            process.kill()
        except psutil.Error:
            continue
    rows, whole = whole_rows(results)
    status = None if err.endswith("[still running: killed]") else proc.returncode
    return Stopped(status=status, seconds=seconds, stderr=err, left=left, rows=rows,
                   whole=whole, delay=delay, moment=moment)


def main(argv: Sequence[str] | None = None) -> int:
    """Signal a sweep ``--stops`` times at random moments; one JSON line per stop."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Arguments after -- go to tvm-icca dse.")
    parser.add_argument("spec", help="the study (copied to a fresh directory for each stop)")
    parser.add_argument("--stops", type=int, default=20)
    parser.add_argument("--signal", default="SIGINT", choices=["SIGINT", "SIGTERM", "SIGKILL"])
    parser.add_argument("--to", default="group", choices=["group", "driver"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-delay", type=float, default=28.0,
                        help="signal at a uniform random time in [0, this] s after the start")
    parser.add_argument("--again-after", type=float, default=None,
                        help="send the signal a second time this many seconds later")
    parser.add_argument("--root", default=os.getcwd(), help="the tvm_icca checkout to run")
    argv = list(sys.argv[1:] if argv is None else argv)
    dse_args = argv[argv.index("--") + 1:] if "--" in argv else []  # more for tvm-icca dse
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    rng = random.Random(args.seed)
    signum = getattr(signal, args.signal)
    for _ in range(args.stops):
        where = tempfile.mkdtemp(prefix="sweep-signals-")
        try:
            spec = os.path.join(where, os.path.basename(args.spec))
            shutil.copy(args.spec, spec)
            results = os.path.join(where, os.path.splitext(os.path.basename(spec))[0] + ".jsonl")
            stopped = stop_sweep([spec, *dse_args], results, moment="start",
                                 delay=rng.uniform(0.0, args.max_delay), signum=signum,
                                 to=args.to, root=args.root, cwd=where,
                                 again_after=args.again_after)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        record = asdict(stopped)
        record["stderr"] = stopped.last_line[:200]
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
