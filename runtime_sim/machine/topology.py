"""Inter-core networks of the simulated ICCA device: what a set of concurrent transfers costs.

Elk §5 "Simulation framework" models every core, every network link (latency and bandwidth)
and the off-chip HBM; packets that share a link are served one after another (Elk §6.1).
This module does the same at the granularity the timing simulator needs: a *phase* is a set
of transfers (flows) that start together (one shift of a compute-shift step, one round of a
replica reduction, a re-layout, the delivery of an HBM load), and its time is set by the most
loaded resource. Loads are accumulated over all flows at once with numpy (``np.bincount`` over
port and link ids, difference arrays for mesh routes), never flow by flow in Python.

Nodes are numbered ``[0, N)`` for cores, ``[N, N + H)`` for HBM controllers and
``[N + H, N + H + C)`` for the host link of each chip (``N`` cores, ``H`` controllers, ``C``
chips). Core ``c`` lives on chip ``c // (N / C)`` (cores are split into chips by index);
controller ``h`` on chip ``h mod C``.

Cost of one phase (all topologies)::

    time = max(resource bytes / resource bandwidth) + max(flow latency)
    flow latency = ceil(bytes / shift_buffer_bytes) * (hops * link_latency_s
                                                        + chip_hops * inter_chip_latency_s)

Every transfer is staged through the per-core shift buffer (T10 §5: a smaller buffer "will
require multiple shift iterations"), and each staged chunk pays the latency of every hop of
its path; chunks of different flows stream behind each other on a shared resource, so only
the bytes serialize there. A ``shift_buffer_bytes`` of 0 means no staging (one chunk).

*Uncontended* time is what the slowest flow would take alone on the network; ``time -
uncontended`` is the contention stall the timing report accounts for.

Topologies:

* :class:`AllToAllTopology` (IPU, Elk §2.1): every core has one port to the exchange; a core
  that receives from k sources, or sends to k destinations, at once serves them one after
  another at full link bandwidth. Identical data for several receivers (replicas of a
  sub-tensor during a re-layout) is broadcast: sent once, received by each (Elk §5 emulates
  HBM preload with exactly such a broadcast). HBM controllers and host links are dedicated nodes of the
  network (Elk §5: "we model HBM controllers as dedicated nodes"); they multicast, so their
  own rate is charged by the caller on the unique bytes they read (see
  :mod:`runtime_sim.timing`), and here only the receiving ports are charged.
* :class:`MeshTopology` (Elk §5, §6.1): the cores of each chip on a near-square 2D grid
  (row-major); each core drives its up to 4 neighbour links at once (Elk §6.1, "each core can
  simultaneously communicate with all its neighbors (up to 4 in a 2D mesh)"); dimension-order
  (XY) routing (Elk §4.5); contention is the maximum load over directed links.
  *Multicast*: flows that carry the same data (``multicast`` ids; a re-layout's pieces, the
  replicas of an HBM tensor) form one XY tree per destination chip: the packet is replicated
  at the routers on the union of its XY routes, so each link carries it once (on the root
  row up to the extreme destination columns, then down/up each destination column to its
  extreme rows: one link-id range per tree and per (tree, column), summed with the same
  difference arrays as unicast routes). Elk's simulator moves "shared data" by broadcast
  (§2.2, §5); it does not say how a mesh replicates it: XY-tree multicast is our choice.
  *HBM and host*: Elk §5 "attach[es] HBM controllers to the edges of the mesh grid". The mesh
  has ``2 * (rows + cols)`` free edge ports (:func:`~runtime_sim.machine.mesh_io.edge_ports`,
  one per boundary side of an edge router, two at a corner); each controller is wired to a
  contiguous span of them (with 4 controllers per chip, one side each; a host link to all)
  and injects through all of them in parallel, each port at the link bandwidth (Elk §6.1:
  every network link has the same bandwidth). Data for a core enters through the controller's port straight across from it
  (same column on the top/bottom side, same row on the left/right side), else its nearest
  port, and then routes XY (as a tree when several cores need the same bytes). So a
  controller delivers at ``min(its HBM share, E ports x link bandwidth)``, a chip at most
  ``min(hbm_bandwidth per chip, 2 (rows + cols) x link bandwidth)``: the edge cut. Sliced
  evenly over the controllers (Elk §5), the short sides' controllers bind (fewer ports, same
  bytes); :meth:`MeshTopology.hbm_load` slices each load's tensors over the sides so that
  the edge ports share it evenly (our choice: Elk does not say how a mesh chip places
  tensors over its HBM modules). For the
  IPU-POD4 mesh (32 x 46 per chip, 5.5 GB/s links) that cut is 156 x 5.5 GB/s = 0.86 TB/s per
  chip, below the 4 TB/s of its HBM: a property of a mesh with IPU-rate links, not of the
  model (``MeshTopology.io_bandwidth`` widens the ports for experiments).
* Mesh hardware as built (issue 27): the grid of a chip may be given
  (:meth:`HardwareSpec.mesh_grid`: ``mesh_rows`` x ``mesh_cols``, nodes without cores), and
  the HBM controllers may sit *inside* it as NoC nodes (``hbm_placement``, as Tenstorrent's
  DRAM tiles): such a controller's data routes XY from its own node, so its up to 4 links
  are its ports ("controller ports"), and ``hbm_injection_bandwidth`` caps what it pushes
  into the NoC ("injection"). With ``mesh_torus`` every row and column is a ring with a
  wrap link; a route goes the shorter way round each ring (ties forward: east, south) and a
  multicast tree extends both ways from its root as far as its farthest destination each
  way. Every phase names the cut that bounds it
  (:attr:`~runtime_sim.machine.phase_cost.PhaseCost.bound_by`).
* Multi-chip (both): traffic between chips shares one capped fabric of
  ``inter_chip_bandwidth`` bytes/s (Elk §5 tracks "in-flight inter-chip transfer events and
  cap[s] their total bandwidth"; 640 GB/s for IPU-POD4). On the mesh, a cross-chip flow first
  crosses the chip dimension (landing at the same grid position in the destination chip),
  then routes X then Y: dimension order with the chip index as the outermost dimension.
  The Elk artifact's alternative, a x1.25 communication factor beyond 1,472 cores, is not
  applied on top of the explicit cap.

Modules, one job each: :mod:`~runtime_sim.machine.phase_cost` (what a phase costs, multicast
patterns), :mod:`~runtime_sim.machine.topology_base` (nodes, HBM and host flows, the phase
memo), :mod:`~runtime_sim.machine.all_to_all`, :mod:`~runtime_sim.machine.mesh_topology`
(the mesh's phase cost), :mod:`~runtime_sim.machine.mesh_routing` (XY routes and trees) and
:mod:`~runtime_sim.machine.mesh_io` (edge ports and controllers on the mesh). This module
picks the network of a chip (:func:`make_topology`).
"""

from __future__ import annotations

from functools import lru_cache

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.machine.all_to_all import AllToAllTopology
from runtime_sim.machine.mesh_topology import MeshTopology
from runtime_sim.machine.topology_base import Topology


@lru_cache(maxsize=16)
def make_topology(hw: HardwareSpec) -> Topology:
    """The network of ``hw`` (cached per spec: the mesh entry tables are built once)."""
    if hw.topology == "mesh":
        return MeshTopology(hw)
    return AllToAllTopology(hw)
