"""Stopping a design-space sweep on SIGINT or SIGTERM (issue 43): the first signal ends the
sweep within seconds, once the row being appended is whole; a second ends the process at once.
:func:`tvm_icca.dse.run.run` installs :func:`stopping_signals` for its duration; the local pool
(:mod:`tvm_icca.dse.local_pool`) and the Ray tasks stop through the :class:`SweepStop` it yields.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Iterator

from tvm_icca.processes import STOP_SIGNALS

__all__ = ["SweepInterrupted", "SweepStop", "stopping_signals"]


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by SIGINT or SIGTERM (:func:`stopping_signals`).

    Every row finished before the signal is whole in the results file, no worker is left
    running, and the same command run again computes the missing points. A
    ``KeyboardInterrupt``, so code that stops on Ctrl-C stops on it too.

    Parameters
    ----------
    signum : int
        The signal (``signal.SIGINT`` or ``signal.SIGTERM``).
    summary : DseRun, optional
        What the run did before it stopped (set by :func:`run`; ``None`` when the signal came
        before the sweep started).
    """

    def __init__(self, signum: int, summary: "DseRun | None" = None) -> None:
        super().__init__(f"sweep stopped by {signal.Signals(signum).name}")
        self.signum = int(signum)
        self.summary = summary

    @property
    def exit_status(self) -> int:
        """The shell's status of a process a signal ended: 128 + its number (130, 143)."""
        return 128 + self.signum


class SweepStop:
    """What :func:`stopping_signals` installs: the first SIGINT or SIGTERM raises
    :class:`SweepInterrupted` in the main thread (after a :meth:`held` section, such as
    appending a row, is done) and gives both signals back their default action, so a second
    one ends the process at once.

    Python runs a handler only when the main thread runs Python code, and two signals that
    come while it is inside a long call (``ray.init``, a TVM build) would be handled as one:
    so every signal delivered is also counted by a thread reading the handler's wake-up file
    descriptor (:func:`signal.set_wakeup_fd`), which ends the process at the second
    (``os._exit(128 + signum)``; the workers die with it, :mod:`tvm_icca.processes`).
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._held = 0
        self._previous: dict[int, Any] = {}
        self._wakeup: tuple[int, int, int] | None = None  # read end, write end, previous fd

    def install(self) -> None:
        """Handle each of :data:`~tvm_icca.processes.STOP_SIGNALS` that has its default
        handler, or that this object handled before (``ray.init`` replaces SIGTERM's); in
        the main thread only (Python runs signal handlers there)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in STOP_SIGNALS:
            current = signal.getsignal(signum)
            if signum in self._previous or current in (signal.SIG_DFL, signal.default_int_handler):
                self._previous.setdefault(signum, current)
                signal.signal(signum, signal.SIG_DFL if self.signum is not None else self._handle)
        if self._previous and self._wakeup is None:
            read, write = os.pipe()
            os.set_blocking(write, False)
            previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            self._wakeup = (read, write, previous)
            threading.Thread(target=self._count, args=(read,), daemon=True,
                             name="tvm_icca-stop-signals").start()

    def restore(self) -> None:
        """Give back the handlers :meth:`install` replaced."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if self._wakeup is not None:
            read, write, previous = self._wakeup
            signal.set_wakeup_fd(previous)
            os.close(write)  # the counting thread reads the end of the pipe and closes it
            self._wakeup = None

    def _count(self, read: int) -> None:
        """The wake-up descriptor's reader: end the process at the second stop signal."""
        seen = 0
        try:
            while True:
                data = os.read(read, 64)
                if not data:
                    return
                for signum in data:
                    if signum in STOP_SIGNALS:
                        seen += 1
                        if seen >= 2:
                            os._exit(128 + signum)  # pylint: disable=protected-access
        finally:
            os.close(read)

    def _handle(self, signum: int, frame: Any) -> None:  # pylint: disable=unused-argument
        if self.signum is None:
            self.signum = signum
        for each in self._previous:  # the second one is the kernel's to act on
            signal.signal(each, signal.SIG_DFL)
        if not self._held:
            self.check()

    def check(self) -> None:
        """Raise :class:`SweepInterrupted` if a stop signal came (the loops of the sweep ask
        at every turn: code that caught the first one does not keep the sweep going)."""
        if self.signum is not None and not self._held:
            raise SweepInterrupted(self.signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A section a stop signal does not cut (appending a row): a first signal that comes
        during it raises after it."""
        before = self.signum
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        if before is None:
            self.check()


@contextlib.contextmanager
def stopping_signals() -> Iterator[SweepStop]:
    """SIGINT and SIGTERM stop a sweep cleanly while the body runs.

    The first raises :class:`SweepInterrupted` in the main thread: :func:`run` kills its local
    workers (and the plan scans they forked), cancels its Ray tasks in flight, shuts down a
    Ray instance it started, and records the run; every finished row is whole in the results
    file. A second signal ends the process at once (the default action; the workers die with
    it, :mod:`tvm_icca.processes`). Only a signal whose handler is Python's default is taken
    (a SIGINT ignored by ``nohup`` or ``&`` stays ignored; a caller's own handler stays), and
    only in the main thread; nested uses share the outer one; the handlers are given back on
    leaving. ``tvm-icca dse`` runs under it from its start.

    Yields
    ------
    object
        The handler's state: ``check()`` raises :class:`SweepInterrupted` if a signal came.
    """
    for signum in STOP_SIGNALS:
        owner = getattr(signal.getsignal(signum), "__self__", None)
        if isinstance(owner, SweepStop):
            yield owner
            return
    stop = SweepStop()
    stop.install()
    try:
        yield stop
    finally:
        stop.restore()
