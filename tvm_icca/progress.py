"""Progress of the long phases (compile, Elk scheduling, simulation, tuning): one policy.

A whole model is often one ICCA region, and one region of a large LLM takes tens of seconds
to plan, so progress is reported per phase and inside it per unit of work (an operator's plan
search, a candidate schedule, an operator costed). :class:`Progress` is the policy, a frozen
value passed down explicitly (:attr:`tvm_icca.CompileOptions.progress`, function
parameters), never a setting of this module:

* ``show``: ``None`` (the default) shows bars only when the stream is a terminal (tqdm's own
  ``disable=None``), ``True`` always (also into a file or pipe), ``False`` never;
* ``delay_s``: a phase shows nothing until it has run this long, so short work stays silent;
  then its line appears whether or not a unit of work has completed (tqdm's own ``delay``
  waits for the first completed unit: a phase whose first unit takes 30 s showed nothing for
  30 s), and is redrawn every :data:`TICK_S` while it runs;
* ``file``: the stream, standard error by default.

:meth:`Progress.phase` opens one bar (or status line) for a phase, a :class:`Phase` the work
reports to: its total may grow as work is discovered (:meth:`Phase.add`), each unit done is a
:meth:`Phase.step`, and :meth:`Phase.note` names what runs now. Functions below this module
that must not depend on it (the timing simulator, the Elk algorithms) take plain callbacks,
which a :class:`Phase`'s methods are.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import IO, Iterator, Union

from tqdm import tqdm

from runtime_sim.contract.errors import IccaError

__all__ = ["DEFAULT_DELAY_S", "NO_PROGRESS", "Phase", "Progress", "ProgressLike", "as_progress",
           "bars_of_this_process_only"]

#: Seconds a phase runs before its bar appears: "progress from the first second of a phase"
#: (issue 39, item 5; issue 25 had asked for anything over ~2 s); shorter work prints nothing.
DEFAULT_DELAY_S = 1.0

#: Seconds between redraws of a shown bar while no unit completes: the elapsed time keeps
#: moving during a unit of work that takes minutes (one region of a large LLM).
TICK_S = 1.0


class Phase:
    """The bar of one running phase (see the module docstring); it counts even when not shown."""

    def __init__(self, bar: tqdm) -> None:
        self._bar = bar
        self._done = 0
        self._total: int | None = None

    @property
    def done(self) -> int:
        """Units of work reported done so far."""
        return self._done

    @property
    def total(self) -> int | None:
        """Units of work known so far (``None``: not counted, a status line)."""
        return self._total

    def add(self, units: int) -> None:
        """``units`` more units of work discovered (the bar's total grows)."""
        self._total = (self._total or 0) + units
        # no refresh here: a refresh would show the bar before its delay
        self._bar.total = self._total

    def step(self, note: str | None = None, units: int = 1) -> None:
        """``units`` units of work done; ``note`` names what runs now."""
        if note is not None:
            self.note(note)
        self._done += units
        self._bar.update(units)

    def note(self, text: str) -> None:
        """Name what runs now (shown after the counts at the next update)."""
        self._bar.set_postfix_str(text, refresh=False)


@dataclass(frozen=True)
class Progress:
    """How long phases report progress (see the module docstring)."""

    show: bool | None = None
    delay_s: float = DEFAULT_DELAY_S
    file: IO[str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.show is not None and not isinstance(self.show, bool):
            raise IccaError(f"Progress.show must be True, False or None, got {self.show!r}")
        if not self.delay_s >= 0:
            raise IccaError(f"Progress.delay_s must be >= 0 seconds, got {self.delay_s!r}")

    @contextlib.contextmanager
    def phase(self, desc: str, *, unit: str = "it", total: int | None = None,
              leave: bool = False) -> Iterator[Phase]:
        """One phase's bar, closed (and, unless ``leave``, cleared) when the block ends."""
        bar = tqdm(desc=desc, unit=unit, file=self.file, leave=leave,
                   disable=None if self.show is None else not self.show, delay=self.delay_s,
                   dynamic_ncols=True)
        phase = Phase(bar)
        if total is not None:
            phase.add(total)
        stop = threading.Event()
        ticker = None
        if not bar.disable:
            ticker = threading.Thread(target=_tick, args=(bar, stop, self.delay_s),
                                      name=f"progress: {desc}", daemon=True)
            ticker.start()
        try:
            yield phase
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
            bar.close()


def _tick(bar: tqdm, stop: threading.Event, delay_s: float) -> None:
    """Show ``bar`` once ``delay_s`` has passed, then redraw it every :data:`TICK_S` (so that
    its line and elapsed time appear before the first unit of work completes) until
    ``stop``."""
    if stop.wait(delay_s):
        return
    while True:
        bar.refresh()  # takes the bar's own lock: safe beside the worker's update()
        if stop.wait(TICK_S):
            return


#: The policy that shows nothing.
NO_PROGRESS = Progress(show=False)

#: What API functions accept as their ``progress`` argument.
ProgressLike = Union[Progress, bool, None]


def as_progress(value: ProgressLike) -> Progress:
    """``value`` as a :class:`Progress`: ``None`` and ``True`` are the default policy (bars on
    a terminal, after :data:`DEFAULT_DELAY_S`), ``False`` is :data:`NO_PROGRESS`."""
    if isinstance(value, Progress):
        return value
    if value is None or value is True:
        return Progress()
    if value is False:
        return NO_PROGRESS
    raise IccaError(f"progress must be a tvm_icca.progress.Progress, True, False or None, "
                    f"got {value!r}")


def bars_of_this_process_only() -> None:
    """Guard this process's bars with a thread lock instead of tqdm's default, a
    multiprocessing semaphore (for bars that processes share): for a process that shares
    none and may be killed (a sweep's worker, :mod:`tvm_icca.dse.run`), whose semaphore would
    be left to multiprocessing's resource tracker, which warns about it when it exits."""
    tqdm.set_lock(threading.RLock())
