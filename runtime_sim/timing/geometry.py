"""Where tensor data sits on the cores, and which bytes a change of layout moves where.

Two descriptions, both computed for all cores at once:

* :class:`Boxes` -- what an operator needs on each core before its first step: the box (a
  range per tensor dimension, clipped to the tensor) of the input partition the core holds in
  its initial placement (T10 §4.4 "Sub-tensor placement"; :meth:`OpLayout.partition_start`).
  Halos of compound indices (a convolution window) are part of the box; padding outside the
  tensor is not data and moves nowhere.
* :class:`~runtime_sim.contract.layout.BlockGrid` -- where a tensor already is (part of the layout
  contract, :mod:`runtime_sim.contract.layout`, which the compiler reads too): a regular grid of blocks, each held by one
  core. A producer's output after its replica reduction is such a grid (each ring-0 core owns
  one output partition, :meth:`OpLayout.owners`); so is the canonical layout assumed for a
  region input that is already on chip but whose producer is unknown (another region).

A re-layout (T10 §5: "the program may rearrange the data on cores") sends each consumer core
the bytes of its box that it does not hold itself, from the cores that own them. The
overlap of a box with the grid's blocks is exact (per dimension interval intersections), and
computed once per *distinct* box: replicas of a sub-tensor (T10 §4.2) need the same bytes, so
the same (owner, piece) data goes to all of them -- a multicast the all-to-all exchange sends
once (:meth:`Topology.multicast_phase`). Explicit per-destination flows, numbered by piece
(for the mesh, which routes each piece as an XY multicast tree) are listed on demand; beyond ``max_pairs`` (owner, consumer) pairs a uniform
stride sample of the destinations stands for all of them (:meth:`Topology.phase`
``sample_weight``).

The code lives in :mod:`runtime_sim.contract.layout` (the compiler's mapping cost reads it too, and the
compiler never imports the timing simulator); this module re-exports it. Boxes are indexed by
a layout's numbered cores; :meth:`Boxes.placed` puts them on physical cores (a plan spread
over chips, :attr:`OpLayout.physical`), the index a re-layout works in.
"""

from __future__ import annotations

from runtime_sim.contract.layout import (
    MAX_PAIRS,
    BlockGrid,
    Boxes,
    Flows,
    OpLayout,
    Relayout,
    _row_ids,
    canonical_grid,
    gather_relayout,
    input_boxes,
    input_relayout,
    placement_grid,
    producer_grid,
    relayout,
    relayout_flows,
)

