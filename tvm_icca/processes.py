"""Child processes that stop when, and only when, the process that started them says so.

A design-space sweep starts worker processes (:mod:`tvm_icca.dse.run`), and a compile forks
plan-scan processes (:mod:`tvm_icca.plan_search.option_pool`). Both are stopped by their
parent, never by a signal meant for it:

* A terminal's Ctrl-C sends SIGINT to every process of the foreground process group, so a
  child that took it would die (or, a Python child, print a ``KeyboardInterrupt`` traceback)
  while its parent still counts on it. Children ignore SIGINT (:func:`serve_parent`); their
  parent, which takes it, ends them explicitly.
* A child is started with SIGINT and SIGTERM blocked (:func:`signals_blocked` around its
  start, the way CPython starts its ``multiprocessing`` resource tracker), so a signal that
  comes while it starts up is neither lost by the parent (blocked, not ignored: delivered to it
  when the start returns) nor taken by the child before :func:`serve_parent` set it aside.
* A parent that dies without ending its children (``kill -9``, a second Ctrl-C) takes them
  with it: on Linux the kernel sends the child SIGKILL when its parent ends (``prctl(2)``
  ``PR_SET_PDEATHSIG``); elsewhere a thread of the child looks at its parent once a second.
  A child that was itself a parent (a sweep worker whose plan scans were forked from it) then
  takes its own children along the same way.

``PR_SET_PDEATHSIG`` fires when the *thread* that started the child ends; the callers start
their children from the thread that waits for them, so that thread outlives them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from typing import Iterator

__all__ = ["STOP_SIGNALS", "serve_parent", "signals_blocked"]

#: The signals that ask a process to stop: Ctrl-C, and what ``kill``, ``timeout`` and batch
#: schedulers send.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``: the signal this process gets when its parent ends.
_PR_SET_PDEATHSIG = 1
#: Seconds between a child's looks at its parent where the kernel cannot watch it (not Linux).
_PARENT_POLL_S = 1.0


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Block :data:`STOP_SIGNALS` in this thread while the body runs (a child started in it
    begins its life with them blocked); one that comes meanwhile is delivered on leaving."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover  (not POSIX)
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def serve_parent(parent: int) -> None:
    """Make this child process its parent's to stop: SIGINT ignored, SIGTERM ending it (the
    default action; not a handler inherited through ``fork``), both unblocked
    (:func:`signals_blocked`), and ended with SIGKILL as soon as ``parent`` (its pid) ends.

    Call it first thing in a child started under :func:`signals_blocked`.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if not _kernel_watches_parent():
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                         name="tvm_icca-watch-parent").start()
    if os.getppid() != parent:  # it ended before anything above could watch it
        os.kill(os.getpid(), signal.SIGKILL)


def _kernel_watches_parent() -> bool:
    """Ask Linux to send this process SIGKILL when its parent ends; whether it will."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):  # pragma: no cover  (no prctl in this libc)
        return False


def _watch_parent(parent: int) -> None:  # pragma: no cover  (not Linux)
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGKILL)
