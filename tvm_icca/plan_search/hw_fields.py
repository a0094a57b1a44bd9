"""Which :class:`HardwareSpec` fields an operator's plan depends on: the one declaration.

A design-space sweep changes one or two fields of the chip per point (HBM bandwidth, link
bandwidth, ...). A plan memoized under the whole chip would be searched again at every point,
although most of what the compiler plans does not read the field that changed. So the memos
(:class:`~.search_memo.SearchMemo`, :class:`tvm_icca.model_pass.plan_cache.PlanCache` and its
on-disk layer) key each result on exactly the fields its computation reads:

* :data:`SEARCH_FIELDS`: the plan search (:func:`~.search.plan_operator` before the mapping:
  :class:`~.batch_cost.AnalyticBatchModel`'s compute, synchronization, shift and reduction
  terms, its lower bounds, the number of cores, the SRAM a budget comes from) and the
  idle/active options of :func:`~.reconcile.operator_options`. It is topology-unaware: HBM,
  host and mesh fields are not read, nor is the inter-chip bandwidth;
* :data:`PLACEMENT_FIELDS`: the candidate placements of a plan on the chips of a multi-chip
  system and the bytes each sends to HBM and between chips (:func:`~.mapping.placement_bytes`);
* :func:`placement_rates`: the bandwidths the choice among those candidates divides the bytes
  by (:func:`~.mapping.pick_placement`): the HBM bandwidth only when the operator reads an
  input from HBM, the inter-chip bandwidth only on more than one chip.

``tests/test_hw_fields.py`` runs the search, the placement and the options on a spec whose
undeclared fields are changed and on a spec that records every field read, and fails if any
computation reads a field these lists leave out. A field a new cost term reads must be added
here (and :data:`tvm_icca.model_pass.plan_store.PLAN_FORMAT` bumped, so that plans kept on disk
under the old keys are not read).
"""

from __future__ import annotations

from typing import Any, Sequence

from runtime_sim.contract.hardware import HardwareSpec

__all__ = ["SEARCH_FIELDS", "PLACEMENT_FIELDS", "search_key", "placement_key", "placement_rates",
           "plan_key"]

#: Fields the plan search and the idle/active options read. ``link_latency_s`` and
#: ``inter_chip_latency_s`` enter every transfer's hop latency
#: (:func:`runtime_sim.machine.links.hop_latency_seconds`); a matrix sub-task runs at the rate
#: of its dtype (``matrix_flops_per_cycle_by_dtype``, :func:`schedules.base.compute_dtype`);
#: ``dtypes`` bounds the element types a plan may hold (the search never reads it, listed to
#: be safe).
SEARCH_FIELDS: tuple[str, ...] = (
    "num_cores", "num_chips", "sram_bytes_per_core", "shift_buffer_bytes", "clock_hz",
    "matrix_flops_per_cycle", "matrix_flops_per_cycle_by_dtype", "vector_flops_per_cycle",
    "matrix_tile", "sync_cycles", "link_bandwidth", "link_latency_s", "inter_chip_latency_s",
    "dtypes",
)

#: Fields the candidate placements of a plan and their bytes read (the chips' shape).
PLACEMENT_FIELDS: tuple[str, ...] = ("num_cores", "num_chips")


def _values(hw: HardwareSpec, fields: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    return tuple((name, getattr(hw, name)) for name in fields)


def search_key(hw: HardwareSpec) -> tuple[tuple[str, Any], ...]:
    """``hw`` as far as the plan search sees it: ``(field, value)`` of :data:`SEARCH_FIELDS`."""
    return _values(hw, SEARCH_FIELDS)


def placement_key(hw: HardwareSpec) -> tuple[tuple[str, Any], ...]:
    """``hw`` as far as a plan's candidate placements and their bytes depend on it."""
    return _values(hw, PLACEMENT_FIELDS)


def placement_rates(hw: HardwareSpec, hbm_inputs: Sequence[int]) -> tuple[tuple[str, Any], ...]:
    """The bandwidths the choice of a placement divides its bytes by: none on one chip (there
    is nothing to choose), the inter-chip bandwidth on several, and the HBM bandwidth when the
    operator reads some input from HBM (no HBM bytes otherwise)."""
    if hw.num_chips <= 1:
        return ()
    fields = ("inter_chip_bandwidth", "hbm_bandwidth") if len(hbm_inputs) else ("inter_chip_bandwidth",)
    return _values(hw, fields)


def plan_key(hw: HardwareSpec, hbm_inputs: Sequence[int]) -> tuple[tuple[str, Any], ...]:
    """``hw`` as far as a mapped plan (:func:`~.search.plan_operator`'s result) depends on it:
    the search's fields, the placements' and the rates of the choice among them."""
    return search_key(hw) + placement_key(hw) + placement_rates(hw, hbm_inputs)
