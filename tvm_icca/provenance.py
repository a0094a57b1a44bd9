"""Where a result came from: the code (commit, uncommitted changes), the versions, the host, the time.

One :class:`Provenance` record is written with every result this project keeps: each row of a
design-space exploration (:mod:`tvm_icca.dse`) and each results file of ``benchmarks/`` (their
``result_files`` module). A number read later can then be traced to the code that made it, and
re-made on that code.

The commit is the git ``HEAD`` of the checkout this package was imported from; an installed
package (a wheel, no checkout around it) records the commit as :data:`UNKNOWN` and never fails.
"Dirty" means tracked source files differ from the commit (:data:`SOURCE_PATHS`): results or
notes being rewritten do not make the code dirty.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib.metadata
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["Provenance", "SOURCE_PATHS", "UNKNOWN", "checkout_state", "current", "package_root",
           "process_checkout_state"]

#: What an unknown commit or version is recorded as.
UNKNOWN = "unknown"
#: The tracked paths whose uncommitted changes change results (git pathspecs, relative to the
#: checkout's root): the compiler, the device, the schedules and the benchmark scripts.
SOURCE_PATHS = ("tvm_icca", "runtime_sim", "schedules", "benchmarks/*.py")
#: Seconds a git query may take before the commit is recorded as unknown (a hung NFS mount
#: must not hang a sweep).
_GIT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Provenance:
    """The origin of a result.

    Parameters
    ----------
    commit : str
        Full hash of the checkout's ``HEAD``, or :data:`UNKNOWN` (not run from a git checkout).
    dirty : bool or None
        True when tracked source files (:data:`SOURCE_PATHS`) have uncommitted changes;
        None when unknown (no checkout).
    tvm_icca_version : str
        This package's version.
    tvm_version : str
        Apache TVM's version.
    python_version : str
        The interpreter's version (``3.11.9``).
    host : str
        The machine's network name.
    timestamp : str
        When the record was made: UTC, ISO 8601 to the second.
    command : str
        The command that made the result, when known (empty otherwise).
    """

    commit: str
    dirty: bool | None
    tvm_icca_version: str
    tvm_version: str
    python_version: str
    host: str
    timestamp: str
    command: str = ""

    @property
    def short_commit(self) -> str:
        """The first 10 hex digits of the commit (or :data:`UNKNOWN`)."""
        return self.commit if self.commit == UNKNOWN else self.commit[:10]

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready mapping (field -> value)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Provenance":
        """A record from :meth:`to_dict`'s mapping (unknown keys ignored, missing ones unknown)."""
        names = [f.name for f in dataclasses.fields(cls)]
        values = {name: data.get(name, UNKNOWN) for name in names}
        values["dirty"] = data.get("dirty")
        values["command"] = data.get("command", "")
        return cls(**values)


def package_root() -> str:
    """The directory that holds this package (the checkout's root when run from one)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(root: str, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                              check=False, timeout=_GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def checkout_state(root: str | None = None) -> tuple[str, bool | None]:
    """The commit and dirty flag of the git checkout whose root is ``root``.

    Parameters
    ----------
    root : str, optional
        The checkout's root directory (default: :func:`package_root`).

    Returns
    -------
    tuple of (str, bool or None)
        The full ``HEAD`` hash and whether :data:`SOURCE_PATHS` have uncommitted changes;
        ``(UNKNOWN, None)`` when ``root`` is not the root of a git checkout (an installed
        package inside some other repository, e.g. a virtualenv in a checkout, is not one).
    """
    root = os.path.realpath(root or package_root())
    top = _git(root, "rev-parse", "--show-toplevel")
    if not top or os.path.realpath(top) != root:
        return UNKNOWN, None
    head = _git(root, "rev-parse", "HEAD")
    if not head:
        return UNKNOWN, None
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *SOURCE_PATHS)
    return head, (None if status is None else bool(status))


@functools.lru_cache(maxsize=None)
def process_checkout_state() -> tuple[str, bool | None]:
    """:func:`checkout_state` of :func:`package_root`, asked once per process.

    The code a process runs is the code it imported, so the state when it first asks is the
    right one even if the checkout moves on while it runs (others commit; a sweep's points do
    not each run git). A script that runs long calls it when it starts.
    """
    return checkout_state()


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN


def current(command: str = "", *, fresh: bool = False) -> Provenance:
    """The provenance of a result made now, by this process.

    Parameters
    ----------
    command : str
        The command that makes the result (recorded as given).
    fresh : bool
        Ask git again instead of reusing this process's first answer
        (:func:`process_checkout_state`).

    Returns
    -------
    Provenance
        The record; never raises for a missing checkout or git.
    """
    commit, dirty = checkout_state() if fresh else process_checkout_state()
    return Provenance(
        commit=commit, dirty=dirty, tvm_icca_version=_version("tvm-icca"),
        tvm_version=_version("apache-tvm"), python_version=sys.version.split()[0],
        host=platform.node(),
        timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        command=command)
