"""The 2-D mesh (or torus) network of a chip, Elk §5 and §6.1: each core drives its up to 4
neighbour links at once, XY routing (:mod:`runtime_sim.machine.mesh_routing`), HBM controllers
on the edges or inside the grid (:mod:`runtime_sim.machine.mesh_io`), and the cost of a phase
as the load of its busiest link, port or injection cap. See :mod:`runtime_sim.machine.topology`
for the model.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.machine.links import chunk_latency_seconds
from runtime_sim.machine.mesh_io import MeshIO, edge_ports
from runtime_sim.machine.mesh_routing import MeshRouting, range_loads
from runtime_sim.machine.phase_cost import PhaseCost, bound_by
from runtime_sim.machine.topology_base import Topology


class MeshTopology(MeshIO, MeshRouting, Topology):
    """2D mesh (or torus) per chip, XY routing, XY multicast trees, HBM controllers on the
    edges (Elk §5, §6.1) or inside the grid as NoC nodes; see the module docstring."""

    kind = "mesh"

    def __init__(self, hw: HardwareSpec):
        super().__init__(hw)
        grid = hw.mesh_grid()
        self.rows, self.cols = grid.rows, grid.cols
        local = np.arange(self.num_cores) % self.cores_per_chip
        pos = np.array(grid.cores, np.int64).reshape(-1, 2)
        self.core_y = pos[local, 0]
        self.core_x = pos[local, 1]
        #: Wrap-around links (a torus): a ring of 3 or more nodes gets one; on 2 nodes the
        #: wrap would only duplicate the one link, so such a ring stays a line.
        self.wrap_x = grid.torus and self.cols > 2
        self.wrap_y = grid.torus and self.rows > 2
        if grid.torus:
            self.kind = "torus"  # what reports name it (the routing is the mesh's, wrapped)
        self.lh = self.cols if self.wrap_x else self.cols - 1  # east (or west) links per row
        self.lv = self.rows if self.wrap_y else self.rows - 1  # south (or north) links per column
        self.n_h = self.rows * self.lh  # east (or west) links per chip
        self.n_v = self.cols * self.lv  # south (or north) links per chip
        self.port_router, self.port_side = edge_ports(self.rows, self.cols)
        self.num_ports = self.port_router.size  # per chip: 2 * (rows + cols)
        #: Bandwidth of one edge port (an I/O node's link into an edge router): the link
        #: bandwidth, as every network link (Elk §6.1); an attribute for what-if studies.
        self.io_bandwidth = float(hw.link_bandwidth)
        #: Controllers inside the grid (NoC nodes): the ``(y, x)`` of each (global index).
        self.interior = grid.controllers is not None
        if self.interior and self.num_controllers:
            cpos = np.array(grid.controllers, np.int64).reshape(-1, 2)
            rank = np.arange(self.num_controllers) // self.num_chips  # its index on its chip
            self.ctrl_y, self.ctrl_x = cpos[rank, 0], cpos[rank, 1]
        else:
            self.ctrl_y = self.ctrl_x = np.zeros(self.num_controllers, np.int64)
        self._core_index = np.full(self.rows * self.cols, -1, np.int64)  # grid position -> core
        self._core_index[pos[:, 0] * self.cols + pos[:, 1]] = np.arange(self.cores_per_chip)
        self._entry_port: np.ndarray | None = None
        self._ctrl_links: dict[str, np.ndarray] | None = None

    def position(self, core: int) -> tuple[int, int, int]:
        """``(chip, y, x)`` of a core."""
        return int(self.node_chip[core]), int(self.core_y[core]), int(self.core_x[core])

    def core_at(self, chip: int, y: int, x: int) -> int:
        """The core at grid position ``(y, x)`` of ``chip`` (ValueError if none sits there)."""
        local = int(self._core_index[y * self.cols + x]) if 0 <= y < self.rows and 0 <= x < self.cols else -1
        if local < 0:
            raise ValueError(f"no core at ({y}, {x}) of the {self.rows} x {self.cols} grid")
        return chip * self.cores_per_chip + local

    def _phase(self, src: np.ndarray, dst: np.ndarray, b: np.ndarray, w: float,
               group: np.ndarray | None) -> PhaseCost:
        n, cpc, cols = self.num_cores, self.cores_per_chip, self.cols
        H, C, P = self.num_controllers, self.num_chips, self.num_ports
        k = self.node_chip[dst]
        yd, xd = self.core_y[dst], self.core_x[dst]
        io = src >= n
        hbm = io & (src < n + H)  # from an HBM controller
        ctrl = hbm if self.interior else np.zeros(src.size, bool)  # ... from inside the grid
        edge = io & ~ctrl  # through an edge port
        ys = np.where(io, 0, self.core_y[np.minimum(src, n - 1)])
        xs = np.where(io, 0, self.core_x[np.minimum(src, n - 1)])
        cross = self.node_chip[src] != k
        port = np.full(src.size, -1, np.int64)  # global port id of an edge I/O flow
        if edge.any():
            j = src[edge] - n
            p = self.entry_port[j, dst[edge] % cpc]
            ent = self.port_router[p]
            ys[edge], xs[edge] = ent // cols, ent % cols
            port[edge] = (j * C + k[edge]) * P + p
        if ctrl.any():
            h = src[ctrl] - n
            ys[ctrl], xs[ctrl] = self.ctrl_y[h], self.ctrl_x[h]
        if group is None:
            tree = np.arange(src.size)  # unicast: every flow its own route
            scale = np.ones(src.size)
        else:
            # one tree per (data, destination chip, root): the data crosses the chip fabric
            # once per destination chip and enters the mesh once per edge port it uses (from
            # its own node for a controller inside the grid)
            ports_span = n + (H + C) * C * P
            root = np.where(edge, n + port, np.where(ctrl, ports_span + src - n, src))
            span = ports_span + H
            g = np.unique(group, return_inverse=True)[1].reshape(-1)
            key = (g * C + k) * span + root
            _, tree = np.unique(key, return_inverse=True)
            tree = tree.reshape(-1)
            scale = np.ones(src.size)
            if w > 1:
                # sampled destinations: a tree seen through s of its receivers stands for
                # w / s trees' worth of load when s < w (a sparse piece), for itself when its
                # receivers are dense enough that the sample spans the same tree (s >= w)
                size = np.bincount(tree)
                scale = np.maximum(1.0, w / size[tree]) / w
        once = np.zeros(src.size, bool)
        once[np.unique(tree, return_index=True)[1]] = True
        bw = self.hw.link_bandwidth
        # the loads of every resource, in bytes at link bandwidth, with the cut each one is
        cuts: list[tuple[str, float]] = []
        if edge.any():
            sel = edge & once
            inj = np.bincount(port[sel], weights=(b * scale)[sel]) * w
            cuts.append(("edge ports", float(inj.max()) * bw / self.io_bandwidth))
        cap = self.hw.hbm_injection_bandwidth
        if cap > 0 and hbm.any():
            sel = hbm & once
            inj = np.bincount(src[sel] - n, weights=(b * scale)[sel]) * w
            cuts.append(("injection", float(inj.max()) * bw / cap))
        legs = (self.routes(k, ys, xs, yd, xd, b) if group is None
                else self.tree_routes(k, ys, xs, yd, xd, b * scale, tree))
        ctrl_links = self.controller_links() if self.interior else None
        crossed = [0.0, 0.0, 0.0, 0.0]  # PhaseCost.cut_bytes
        byte_hops = 0.0  # PhaseCost.byte_hops: every link's bytes, summed
        for name, start, end, weight, size in legs:
            load = range_loads(size, start, end, weight)
            if load is None:
                continue
            byte_hops += float(load.sum()) * w
            i = int(np.argmax(load))
            on_ctrl = ctrl_links is not None and bool(ctrl_links[name][i])
            cuts.append(("controller ports" if on_ctrl else "links", float(load[i]) * w))
            self._add_cut_bytes(crossed, name, load, w)
        link_max = max((v for _, v in cuts), default=0.0)
        inter_bytes, inter_s = self._inter(b * scale, cross & once, w)
        hops = (*self.hops(xs, xd, "x"), *self.hops(ys, yd, "y"))
        hops = hops[0] + hops[1] + hops[2] + hops[3] + edge + cross
        latency = chunk_latency_seconds(b, self.hw, hops, cross)
        alone = self._flow_alone(b, cross)
        if cap > 0 and hbm.any():
            alone[hbm] = np.maximum(alone[hbm], b[hbm] / cap)
        uncontended = float((alone + latency).max())
        intra_s = link_max / bw
        bound = bound_by(cuts, intra_s, inter_s)
        return PhaseCost(max(intra_s, inter_s) + float(latency.max()), uncontended,
                         float(b.sum()) * w, inter_bytes, intra_s, inter_s, int(hops.max()), bound,
                         tuple(crossed), byte_hops)

    def _add_cut_bytes(self, crossed: list[float], name: str, load: np.ndarray, w: float) -> None:
        """Add to ``crossed`` (:attr:`PhaseCost.cut_bytes`) the bytes of the ``name`` links'
        ``load`` (as :meth:`routes` numbers them) that cross a middle cut: the forward link
        out of the last column (row) of the first half goes first half -> second half, its
        backward twin the other way; on a torus the wrap link crosses too, the other way."""
        horizontal = name in ("east", "west")
        size, ring, wrap = ((self.cols, self.lh, self.wrap_x) if horizontal
                            else (self.rows, self.lv, self.wrap_y))
        if size < 2:
            return
        per_line = load.reshape(-1, ring)  # (chip x row, link) or (chip x column, link)
        middle = float(per_line[:, size // 2 - 1].sum()) * w
        around = float(per_line[:, size - 1].sum()) * w if wrap else 0.0
        forward = name in ("east", "south")
        first = 0 if horizontal else 2  # index of "first half -> second half"
        crossed[first + (0 if forward else 1)] += middle
        crossed[first + (1 if forward else 0)] += around


def link_loads(topo: MeshTopology, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> dict[str, np.ndarray]:
    """Bytes on every directed link (``east``/``west``/``south``/``north`` arrays, chip-major)
    for core-to-core flows; what :meth:`MeshTopology.phase` maximizes over (for inspection)."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    b = np.asarray(nbytes, np.float64)
    k = topo.node_chip[dst]
    out = {}
    for name, start, end, weight, size in topo.routes(
            k, topo.core_y[src], topo.core_x[src], topo.core_y[dst], topo.core_x[dst], b):
        load = range_loads(size, start, end, weight)
        out[name] = np.zeros(size) if load is None else load
    return out
