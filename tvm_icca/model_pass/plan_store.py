"""The on-disk layer of the plan cache: plans that outlive the process.

A design-space sweep compiles the same operators for many chips, in many processes (the
workers of a local pool, Ray tasks on several machines, a sweep restarted the next day).
:class:`PlanStore` keeps what :class:`~tvm_icca.model_pass.plan_cache.PlanCache` computes --
searched plans, their candidate placements, the proofs that no plan fits a budget, idle/active
options -- as one file per key in a directory, so that a later process reads them instead of
searching again.

* **Keys** are the in-memory caches' keys: the operator's structure and exactly the hardware
  fields the result depends on (:mod:`tvm_icca.plan_search.hw_fields`). A file is named by the
  SHA-256 of the key's ``repr`` and holds the ``repr`` in its header, so a collision reads as a
  miss.
* **Versions**: files live in a subdirectory named by :data:`PLAN_FORMAT` and the package
  version, and their header repeats both. A change of the code that alters plans bumps
  :data:`PLAN_FORMAT`; older entries are then never read (delete the old subdirectories to
  reclaim the space).
* **Concurrent writers** (several workers, several machines on a shared file system) each
  write a temporary file in the same directory and rename it over the entry
  (``os.replace``, atomic on POSIX and Windows): a reader sees a whole old entry, a whole new
  one or none. Two writers of one key write the same value.
* **Readers tolerate** a missing, truncated or otherwise unreadable entry: it is a miss, and
  the caller computes the value again (and writes it back).
* **One computation per key at a time**: a caller about to compute a missing entry holds the
  key's lock (:meth:`PlanStore.lock`, an exclusive ``fcntl.flock`` on a file in the cache
  directory's ``.locks``), reads the entry again, and computes it only if it is still missing; a second
  process asking for the same key meanwhile waits, then reads it. The workers of a parallel
  sweep so never search one plan twice at the same time. A lock dies with its process.

Entries are pickles: read only a cache directory you trust, as with any pickle.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import pickle
import tempfile
from typing import Any, Hashable, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover  (not POSIX: entries are computed without a lock)
    fcntl = None  # type: ignore[assignment]

__all__ = ["PLAN_FORMAT", "PlanStore", "default_plan_cache_dir", "store_version"]

logger = logging.getLogger(__name__)

#: The format of the entries and of the plans in them: bump it when a change of the
#: compiler changes what a key's value is (a new cost term, a new field of a plan), so that
#: entries written by the older code are not read.
PLAN_FORMAT = 5  # 5: matrix sub-tasks at their dtype's rate (matrix_flops_per_cycle_by_dtype)

_MAGIC = b"tvm_icca plan cache\n"


def store_version() -> str:
    """The version every entry is written under: :data:`PLAN_FORMAT` and the package's."""
    try:
        package = importlib.metadata.version("tvm-icca")
    except importlib.metadata.PackageNotFoundError:
        # a source tree on sys.path, not installed: no version to key entries by (importing
        # the package root for its __version__ would break the stage layering)
        package = "uninstalled"
    return f"v{PLAN_FORMAT}-{package}"


def default_plan_cache_dir() -> str:
    """Where persistent plan caches live by default: ``$TVM_ICCA_PLAN_CACHE`` if set, else
    ``tvm_icca/plan_search`` under ``$XDG_CACHE_HOME`` (``~/.cache`` when unset)."""
    explicit = os.environ.get("TVM_ICCA_PLAN_CACHE")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "tvm_icca", "plans")


class PlanStore:
    """A directory of cache entries, one file per key (see the module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The cache directory (created if missing); entries go into a subdirectory per
        :func:`store_version`.
    version : str, optional
        The version entries are written and read under (default :func:`store_version`).

    Attributes
    ----------
    reads, writes, corrupt : int
        Entries read, written, and found unreadable (a miss) since the store was made.
    """

    def __init__(self, path: "str | os.PathLike[str]", version: str | None = None) -> None:
        self.root = os.path.abspath(os.fspath(path))
        self.version = version if version is not None else store_version()
        self.directory = os.path.join(self.root, self.version)
        os.makedirs(self.directory, exist_ok=True)
        self.reads = self.writes = self.corrupt = 0
        self._warned = False

    def _file(self, text: str) -> str:
        return os.path.join(self.directory, hashlib.sha256(text.encode()).hexdigest() + ".pkl")

    def get(self, key: Hashable) -> Any:
        """The value stored under ``key``, or None (missing, unreadable or another key's)."""
        text = repr(key)
        try:
            with open(self._file(text), "rb") as f:
                data = f.read()
        except OSError:
            return None
        try:
            if not data.startswith(_MAGIC):
                raise ValueError("no header")
            end = data.index(b"\n", len(_MAGIC))
            header = json.loads(data[len(_MAGIC):end])
            if header.get("version") != self.version or header.get("key") != text:
                return None
            value = pickle.loads(data[end + 1:])
        except Exception:  # pylint: disable=broad-except
            # a torn or foreign file is a miss: the caller computes the value again
            self.corrupt += 1
            return None
        self.reads += 1
        return value

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` under ``key`` atomically (a temporary file renamed over the entry).
        A directory that cannot be written is reported once and otherwise ignored: the cache
        is an optimization."""
        text = repr(key)
        header = json.dumps({"format": PLAN_FORMAT, "version": self.version, "key": text})
        try:
            payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".pkl")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_MAGIC + header.encode() + b"\n" + payload)
                os.replace(tmp, self._file(text))
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except (OSError, pickle.PicklingError, TypeError, AttributeError) as err:
            if not self._warned:
                self._warned = True
                logger.warning("plan cache %s: cannot write an entry (%s: %s); going on without",
                               self.directory, type(err).__name__, err)
            return
        self.writes += 1

    @contextlib.contextmanager
    def lock(self, key: Hashable) -> Iterator[None]:
        """Hold ``key``'s lock while computing its entry: another process holding it is waited
        for (then read the entry again: it has computed it). Without ``fcntl``, or when the
        lock file cannot be made, no lock is held (the value may then be computed twice)."""
        fd = None
        if fcntl is not None:
            name = hashlib.sha256(repr(key).encode()).hexdigest()
            try:
                # beside the versions' directories, which hold only entries
                locks = os.path.join(self.root, ".locks")
                os.makedirs(locks, exist_ok=True)
                fd = os.open(os.path.join(locks, name), os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                if fd is not None:
                    os.close(fd)
                fd = None
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)  # releases the lock

    def __len__(self) -> int:
        """Entries of this version in the directory."""
        try:
            return sum(1 for n in os.listdir(self.directory) if n.endswith(".pkl") and not n.startswith("."))
        except OSError:
            return 0

    def __repr__(self) -> str:
        return f"PlanStore({self.directory!r})"
