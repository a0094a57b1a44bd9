"""TVM's C++ warnings during our calls into TVM, each said once, as Python warnings.

TVM's C++ side logs a warning straight to the process's standard error (file descriptor 2)
every time the code that warns runs. We run some of TVM's code several times per operator on
purpose: ``FoldConstant`` legalizes every op of a model while partitioning it, and
:func:`tvm_icca.ops.te_capture.compose_te` legalizes each offloaded op again and calls its TE
function twice (once inside ``call_te``, once on our placeholders). An embedding lookup
(``take`` in mode ``"fast"``, TVM's default) thus printed topi's "Fast mode segfaults when
there are out-of-bounds indices" three times for one operator.

:func:`tvm_warnings_once` is wrapped around exactly those calls. While it is active, what is
written to descriptor 2 goes to a temporary file; when the outermost block ends, each TVM
warning line is re-issued with :func:`warnings.warn_explicit` as a :class:`TvmWarning` at its
C++ source location, which Python's default filter shows once per distinct message (and which
``-W`` / :func:`warnings.filterwarnings` can silence or turn into errors), and every other
line is written back unchanged. Other output keeps its place, only later.

Warnings that mean nothing to a user of tvm_icca are dropped, each for the reason given in
:data:`MEANINGLESS` (checked by ``tests/test_tvm_warnings.py``); every other TVM warning is
shown.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
import warnings
from typing import IO, Iterator

__all__ = ["MEANINGLESS", "TvmWarning", "tvm_warnings_once"]


class TvmWarning(UserWarning):
    """A warning TVM's C++ code logged while tvm_icca called it."""


#: TVM warnings raised inside :func:`tvm_warnings_once` blocks that are dropped: (the start
#: of the message, why it means nothing to the user). The blocks wrap only our own trial
#: legalizations (partitioning's FoldConstant, the TE capture of offloaded ops); the host
#: build of ops left on the host (``tvm.compile``'s LegalizeOps) runs outside them, so TVM's
#: warnings about code that really runs on the host still show there.
MEANINGLESS: tuple[tuple[str, str], ...] = (
    # topi's take in mode "fast" (TVM's default for relax.op.take and ONNX Gather) reads
    # without bounds checks. The capture's TIR never runs: the chip's gather checks every id
    # and refuses one out of range with a DeviceProgramError (runtime_sim.contract.expr).
    ("Fast mode segfaults when there are out-of-bounds indices",
     "the chip's gather checks every id; the captured TIR never runs"),
    # TVM warns on any constant exponent >= 3 (the tanh GELU's x ** 3 in every GPT-style
    # model). A negative base to an integral power is exact on LLVM's pow and numpy's, and to
    # a fractional one is nan in both, as ONNX Pow defines it: nothing the user can change.
    ("Detected pow(x, y) where y >= 3",
     "pow of a negative base is what ONNX Pow and numpy define (exact for integral y)"),
)

#: TVM's C++ log line of a warning: ``[hh:mm:ss] path/file.h:123: Warning: text``.
_WARNING_LINE = re.compile(r"^\[[0-9:]+\] (?P<file>[^\s:]+):(?P<line>\d+): Warning: (?P<text>.*)$")


class _Redirect:
    """Descriptor 2 sent to one temporary file while any block of any thread is active: the
    first block in redirects, the last one out restores and replays (descriptors belong to the
    process, so concurrent blocks must share one redirection)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._saved: int | None = None
        self._sink: IO[bytes] | None = None

    def enter(self) -> None:
        with self._lock:
            self._depth += 1
            if self._depth > 1:
                return
            try:
                sys.stderr.flush()
                sink = tempfile.TemporaryFile()
                saved = os.dup(2)
            except (OSError, ValueError):  # no descriptor 2 (a daemon): nothing to capture
                return
            os.dup2(sink.fileno(), 2)
            self._saved, self._sink = saved, sink

    def leave(self) -> str:
        """What the outermost block captured ('' from an inner block)."""
        with self._lock:
            self._depth -= 1
            if self._depth > 0 or self._sink is None or self._saved is None:
                return ""
            sink, saved = self._sink, self._saved
            self._sink = self._saved = None
            try:
                sys.stderr.flush()  # Python's own writes of the block land in the sink too
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
        with sink:
            sink.seek(0)
            return sink.read().decode("utf-8", errors="replace")


_REDIRECT = _Redirect()


@contextlib.contextmanager
def tvm_warnings_once() -> Iterator[None]:
    """Run the block with TVM's C++ warnings turned into :class:`TvmWarning` (module
    docstring): repeated ones are shown once."""
    _REDIRECT.enter()
    try:
        yield
    finally:
        replay(_REDIRECT.leave())


def replay(text: str) -> None:
    """Re-issue captured output: TVM warning lines as :class:`TvmWarning`, at their C++
    location (so that Python's default filter shows each message once), the rest as it was."""
    rest = []
    for line in text.splitlines(keepends=True):
        match = _WARNING_LINE.match(line.rstrip("\r\n"))
        if match is None:
            rest.append(line)
            continue
        if match["text"].strip().startswith(tuple(start for start, _ in MEANINGLESS)):
            continue
        # this module's registry, as warnings.warn keeps one per module: a message seen is
        # not shown again under the default filter
        registry = globals().setdefault("__warningregistry__", {})
        warnings.warn_explicit(match["text"].strip(), TvmWarning, match["file"],
                               int(match["line"]), module="tvm", registry=registry)
    if rest:
        sys.stderr.write("".join(rest))
        sys.stderr.flush()
