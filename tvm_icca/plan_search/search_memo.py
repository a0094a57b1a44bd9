"""Memo of the plan search, owned by its caller and passed down (never a module global).

The compiler's ``PlanCache`` keeps one :class:`SearchMemo` for a whole compilation;
every public search function takes it as an optional ``cache`` argument and, without one,
uses a fresh cache for that call only (same results, nothing kept between calls).

It memoizes three things:

* the :class:`~.structure.PlanStructure` of each tensor expression, by
  :meth:`TensorExpr.structure_key` (operators differing only in tensor names share it);
* per rotation pattern (:attr:`~.structure.PlanStructure.rotation_key`: which tensor may
  rotate on which axis), the f_t assignments of each sharing tuple
  (:class:`~.partitions.Assignments`, held in 16-bit integers when the factors allow), bounded
  by their bytes (200 MB per pattern: the operators of a ResNet-50 reuse most of their lists).
  The assignments depend on nothing else, so the convolutions of a ResNet, say, share them
  whatever their shapes. Assignments capped per axis (the searches' padding
  bounds, :class:`~.partitions.StepCaps`) are kept under the sharing tuple and the caps;
* per rotation pattern and sharing tuple, the number of assignments (the searches' chunking
  needs it for rows whose assignments it may never build), and the complete list joined to
  count them (:meth:`SearchMemo.keep_joined`, bounded like the assignments): a capped list
  is cut from it (:func:`~.plan_space.assignments_many`) instead of joined again;
* the ring rule's verdict (:func:`runtime_sim.contract.layout_checks.check_rings`) per
  pattern of which tensor each axis indexes, F_op and f_t: it depends on nothing else (not
  the extents, not the names), so operators of one pattern (the pieces of a split operator,
  a model's projections) share their verdicts (bounded: :data:`MAX_RING_VERDICTS`);
* the candidate F_op rows of a structure and a model's lower bound of each (:func:`~.search.best_plan`
  and the chip-aware shortlist's :func:`~.search.fastest_rows` of one operator read the same,
  as do identical operators planned within other budgets), in memory only and for the last
  :data:`MAX_ROW_ARRAYS` keys (half a million rows on 5,888 cores: tens of MB each);
* planned operators of the default analytic model (:func:`~.search.plan_operator`) and the
  candidate placements of their plans, keyed on the chip's fields they read
  (:mod:`~.hw_fields`). With a ``store`` (an object with ``get(key)`` and ``put(key, value)``,
  such as :class:`tvm_icca.model_pass.plan_store.PlanStore`) these are also read from and
  written to it: a memo that outlives the process.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import OrderedDict
from typing import Any, Callable, ContextManager, Hashable, Sequence

from runtime_sim.contract.expr import TensorExpr
from tvm_icca.plan_search.structure import PlanStructure, build_structure


#: Ring-rule verdicts a memo keeps (a key is a few hundred bytes: tens of MB at most); a
#: split Llama prefill's plan scans ask about 12,000, of about 5,000 distinct plans.
MAX_RING_VERDICTS = 200_000

#: Arrays of candidate rows and their bounds a memo keeps (:meth:`SearchMemo.row_arrays`):
#: one operator's search and its chip-aware shortlist read two (the rows, one model's
#: bounds), and a model's identical operators follow one another; a ResNet-50 convolution's
#: rows on 5,888 cores take 28 MB.
MAX_ROW_ARRAYS = 6


class SearchMemo:
    """LRU memo of plan structures, temporal-factor assignments and planned operators."""

    def __init__(self, max_structures: int = 256, max_plans: int = 512,
                 max_assignment_bytes: int = 200_000_000, store: Any = None):
        #: where planned operators are also kept (``get(key)``, ``put(key, value)``), or None
        self.store = store
        self.max_structures = max_structures
        self.max_plans = max_plans
        self.max_assignment_bytes = max_assignment_bytes
        self._structures: OrderedDict[str, PlanStructure] = OrderedDict()
        # rotation pattern -> (sharing tuple (or (tuple, caps)) -> Assignments, [bytes held])
        self._assignments: OrderedDict[str, tuple[OrderedDict, list[int]]] = OrderedDict()
        self._plans: OrderedDict[Hashable, Any] = OrderedDict()
        self._counts: dict[tuple, dict[tuple[int, ...], int]] = {}  # numbers: no bound needed
        # (rotation pattern, sharing tuple) -> its complete assignments in join order
        self._joined: OrderedDict[tuple, Any] = OrderedDict()
        self._joined_bytes = 0
        # (own pattern, F_op, f_t) -> whether the plan passes the ring rule
        self._ring_verdicts: OrderedDict[tuple, bool] = OrderedDict()
        # (what, structure key, cores, filters[, model key]) -> a read-only array
        self._row_arrays: OrderedDict[Hashable, Any] = OrderedDict()
        #: plan searches run with this memo (:func:`~.search.plan_operator` calls that no
        #: memo, in memory or in the store, answered)
        self.searches = 0

    def structure(self, expr: TensorExpr) -> PlanStructure:
        """The memoized :class:`PlanStructure` of ``expr``."""
        key = expr.structure_key(views=False)
        hit = self._structures.get(key)
        if hit is not None:
            self._structures.move_to_end(key)
            # same structure, this operator's tensor names (arrays and memo shared)
            return hit if hit.expr == expr else dataclasses.replace(hit, expr=expr)
        structure = self._structures[key] = build_structure(expr)
        _trim(self._structures, self.max_structures)
        return structure

    def _pattern(self, structure: PlanStructure) -> tuple[OrderedDict, list[int]]:
        skey = structure.rotation_key
        memo = self._assignments.get(skey)
        if memo is None:
            memo = self._assignments[skey] = (OrderedDict(), [0])
            _trim(self._assignments, self.max_structures)
        else:
            self._assignments.move_to_end(skey)
        return memo

    def assignments_many(self, structure: PlanStructure, keys: Sequence[Hashable],
                         build: Callable[[Sequence[int]], list]) -> list:
        """The assignments of several sharing tuples (or (tuple, caps)) of ``structure``,
        shared by every structure with the same rotation pattern; ``build(indices)`` returns
        the entries of the keys at those indices of ``keys`` that the memo does not hold."""
        entries, held = self._pattern(structure)
        out = [entries.get(key) for key in keys]
        for key, hit in zip(keys, out):
            if hit is not None:
                entries.move_to_end(key)
        first = {}  # each missing key built once, however often it is asked for
        for i, hit in enumerate(out):
            if hit is None:
                first.setdefault(keys[i], i)
        if first:
            built = dict(zip(first, build(list(first.values()))))
            for key, entry in built.items():
                entries[key] = entry
                held[0] += entry.combos.nbytes
            out = [built[key] if hit is None else hit for key, hit in zip(keys, out)]
            while held[0] > self.max_assignment_bytes and len(entries) > 1:
                _, old = entries.popitem(last=False)
                held[0] -= old.combos.nbytes
        return out

    def keep_joined(self, structure: PlanStructure, keys: Sequence[tuple[int, ...]],
                    lists: Sequence[Any]) -> None:
        """Keep the complete f_t assignments of each sharing tuple of ``keys`` in join order
        (ungrouped, as :func:`~.plan_space.assignment_counts` joined them to count them),
        for :meth:`joined`; the oldest go beyond ``max_assignment_bytes``."""
        for key, combos in zip(keys, lists):
            full = (structure.rotation_key, key)
            if full not in self._joined:
                self._joined[full] = combos
                self._joined_bytes += combos.nbytes
        while self._joined_bytes > self.max_assignment_bytes and len(self._joined) > 1:
            _, old = self._joined.popitem(last=False)
            self._joined_bytes -= old.nbytes

    def joined(self, structure: PlanStructure, keys: Sequence[tuple[int, ...] | None]) -> list:
        """The complete assignments :meth:`keep_joined` holds for each sharing tuple of
        ``keys`` of ``structure``'s rotation pattern, else None (and None for None)."""
        return [None if key is None else self._joined.get((structure.rotation_key, key))
                for key in keys]

    def assignment_counts(self, structure: PlanStructure, keys: Sequence[tuple[int, ...]],
                          count: Callable[[Sequence[int]], list[int]]) -> list[int]:
        """How many assignments each sharing tuple of ``keys`` has; ``count(indices)`` counts
        those (at those indices of ``keys``) that are neither counted nor held."""
        counts = self._counts.setdefault(structure.rotation_key, {})
        memo = self._assignments.get(structure.rotation_key)
        out = []
        for key in keys:
            hit = counts.get(key)
            if hit is None and memo is not None and key in memo[0]:
                hit = counts[key] = len(memo[0][key].combos)
            out.append(hit)
        missing = [i for i, hit in enumerate(out) if hit is None]
        if missing:
            for i, n in zip(missing, count(missing)):
                out[i] = counts[keys[i]] = int(n)
        return out

    def planned(self, key: Hashable):
        """A planned operator stored under ``key``, or None."""
        hit = self._plans.get(key)
        if hit is not None:
            self._plans.move_to_end(key)
        elif self.store is not None:
            hit = self.store.get(key)
            if hit is not None:
                self._plans[key] = hit
                _trim(self._plans, self.max_plans)
        return hit

    def remember(self, key: Hashable, planned: Any) -> None:
        self._plans[key] = planned
        _trim(self._plans, self.max_plans)
        if self.store is not None:
            self.store.put(key, planned)

    def claim(self, key: Hashable) -> ContextManager[None]:
        """Hold ``key`` while computing what :meth:`remember` will keep under it: with a store
        that locks (:meth:`tvm_icca.model_pass.plan_store.PlanStore.lock`) another process
        computing the same key is waited for; ask :meth:`planned` again inside."""
        lock = getattr(self.store, "lock", None)
        return lock(key) if lock is not None else contextlib.nullcontext()

    def planned_once(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The value under ``key``, computed by ``compute()`` and remembered if no memo holds
        it, by one process at a time (:meth:`claim`)."""
        hit = self.planned(key)
        if hit is None:
            with self.claim(key):
                hit = self.planned(key)
                if hit is None:
                    hit = compute()
                    self.remember(key, hit)
        return hit

    def ring_verdicts(self, keys: Sequence[tuple],
                      check: Callable[[list[int]], Sequence[bool]]) -> list[bool]:
        """The ring rule's verdicts of the plans ``keys`` name (see the module docstring):
        ``check(indices)`` gives, in one call, those of the keys at ``indices`` that the memo
        does not hold yet (each distinct key once)."""
        verdicts = [self._ring_verdicts.get(key) for key in keys]
        missing: dict[tuple, int] = {}
        for i, (key, hit) in enumerate(zip(keys, verdicts)):
            if hit is None and key not in missing:
                missing[key] = i
        if missing:
            found = dict(zip(missing, (bool(v) for v in check(list(missing.values())))))
            self._ring_verdicts.update(found)
            _trim(self._ring_verdicts, MAX_RING_VERDICTS)
            verdicts = [found[key] if hit is None else hit for key, hit in zip(keys, verdicts)]
        return verdicts

    def row_arrays(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The array under ``key`` (candidate rows of a structure, a model's bounds of them),
        ``compute()`` the first time; kept read-only, in memory only, for the last
        :data:`MAX_ROW_ARRAYS` keys."""
        hit = self._row_arrays.get(key)
        if hit is None:
            hit = self._row_arrays[key] = compute()
            hit.flags.writeable = False
            _trim(self._row_arrays, MAX_ROW_ARRAYS)
        else:
            self._row_arrays.move_to_end(key)
        return hit

    def clear(self) -> None:
        self._row_arrays.clear()
        self._ring_verdicts.clear()
        self._structures.clear()
        self._assignments.clear()
        self._counts.clear()
        self._joined.clear()
        self._joined_bytes = 0
        self._plans.clear()


def _trim(memo: OrderedDict, size: int) -> None:
    while len(memo) > size:
        memo.popitem(last=False)


def cache_or_new(cache: SearchMemo | None) -> SearchMemo:
    """``cache``, or a fresh one for a single call."""
    return cache if cache is not None else SearchMemo()


def plan_structure(expr: TensorExpr, cache: "SearchMemo | None" = None) -> PlanStructure:
    """The :class:`PlanStructure` of ``expr`` (memoized in ``cache`` when one is given)."""
    if cache is not None:
        return cache.structure(expr)
    return build_structure(expr)
