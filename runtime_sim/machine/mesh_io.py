"""Where a mesh chip's HBM controllers and host links attach, and where their data enters the
grid: the edge ports (Elk §5 attaches HBM controllers "to the edges of the mesh grid"), the
span of ports each I/O node is wired to, how a load's tensors are sliced over a chip's
controllers, and the links out of a controller that sits inside the grid as a NoC node. See
:mod:`runtime_sim.machine.topology` for the model.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.machine.phase_cost import PhaseCost


def perimeter(rows: int, cols: int) -> np.ndarray:
    """Local indices of the edge cores of a ``rows x cols`` grid, clockwise from (0, 0)."""
    if rows == 1 or cols == 1:
        return np.arange(rows * cols, dtype=np.int64)
    cells = [(0, x) for x in range(cols)]
    cells += [(y, cols - 1) for y in range(1, rows)]
    cells += [(rows - 1, x) for x in range(cols - 2, -1, -1)]
    cells += [(y, 0) for y in range(rows - 2, 0, -1)]
    return np.array([y * cols + x for y, x in cells], dtype=np.int64)


def edge_ports(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """The free boundary ports of a ``rows x cols`` mesh, clockwise from (0, 0): the links an
    I/O node (HBM controller, host link) can attach to an edge router by (Elk §5: controllers
    "attach[ed] ... to the edges of the mesh grid").

    Returns the local index of each port's router and its side (0 top, 1 right, 2 bottom,
    3 left): ``cols`` ports on the top and bottom, ``rows`` on the left and right, so
    ``2 * (rows + cols)`` in all; a corner router has two (one per side it lies on).
    """
    x, y = np.arange(cols), np.arange(rows)
    router = np.concatenate([x, y * cols + cols - 1, (rows - 1) * cols + x[::-1], y[::-1] * cols])
    side = np.repeat(np.arange(4), [cols, rows, cols, rows])
    return router.astype(np.int64), side.astype(np.int64)


class MeshIO:
    """The I/O nodes of a mesh network (a mixin of
    :class:`~runtime_sim.machine.mesh_topology.MeshTopology`, which sets the grid's and the
    controllers' attributes; the HBM timing comes from
    :class:`~runtime_sim.machine.topology_base.Topology`)."""

    def io_ports(self) -> list[np.ndarray]:
        """Per I/O node (controllers, then host links): the edge ports (indices into
        :func:`edge_ports` of one chip) it is wired to.

        With a multiple of 4 controllers per chip, each side of the mesh is split evenly into
        contiguous spans, one per controller (4 controllers: one side each), so that every
        core lies straight across from a port of every controller; otherwise the clockwise
        port ring is split into equal contiguous spans. A host link reaches every port.
        Controllers inside the grid have no edge port (an empty array).
        """
        P = self.num_ports
        ring = np.arange(P)
        sides = [ring[self.port_side == s] for s in range(4)]
        ports: list[np.ndarray] = [np.empty(0, np.int64)] * (self.num_controllers + self.num_chips)
        for k in range(self.num_chips):
            ctrls = self.controllers_of_chip(k)
            if self.interior:
                break
            h = ctrls.size
            if h and h % 4 == 0:
                spans = [span for side in sides for span in np.array_split(side, h // 4)]
            else:
                spans = np.array_split(ring, max(h, 1))
            for span, c in zip(spans, ctrls):
                ports[c] = span if span.size else ring
        for k in range(self.num_chips):
            ports[self.num_controllers + k] = ring
        return ports

    def side_shares(self, v: float) -> np.ndarray | None:
        """Per controller, the fraction of its chip's HBM bytes it holds when a share ``v`` of
        each tensor sits behind the top and bottom sides and ``1 - v`` behind the left and
        right ones (each side's controllers alike); ``None`` unless every controller is wired
        to one side (edge controllers, a multiple of 4 per chip, :meth:`io_ports`)."""
        if self.interior:
            return None
        shares = np.zeros(self.num_controllers)
        ports = self.io_ports()
        for k in range(self.num_chips):
            ctrls = self.controllers_of_chip(k)
            if ctrls.size == 0 or ctrls.size % 4:
                return None
            vertical = np.array([self.port_side[ports[c][0]] % 2 == 0 for c in ctrls])
            shares[ctrls[vertical]] = v / vertical.sum()
            shares[ctrls[~vertical]] = (1.0 - v) / (~vertical).sum()
        return shares

    def hbm_load(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, group: np.ndarray | None,
                 unique_per_chip: np.ndarray) -> tuple[PhaseCost, float]:
        """An HBM load on the mesh: how each tensor is sliced over a chip's controllers decides
        which edge ports carry it. Evenly (Elk §5), the controllers of the short sides (fewer
        ports for the same bytes) bind. The slicing is chosen per load: evenly; all behind one
        pair of sides (``v = 1``: top and bottom, ``v = 0``: left and right), whose busiest
        link loads ``A`` and ``B`` give the balanced share ``v = B / (A + B)``; the load takes
        the fastest of these, ``max(controller time, network time)``. For ``D`` distinct
        bytes spread evenly over a chip's cores that balances every edge port at
        ``D / (2 (rows + cols))``. (The weights a load reads are read by it alone, so their
        placement in HBM can follow their reader.) Controllers inside the grid are sliced
        evenly."""
        even = (self.memo_phase(src, dst, nbytes, multicast=group),
                self._controller_seconds(unique_per_chip, None))
        if self.side_shares(0.5) is None:
            return even
        n = self.num_cores
        io = src >= n
        h = self.home_size

        def with_split(v: float) -> tuple[PhaseCost, float]:
            shares = self.side_shares(v)
            scale = np.ones(src.size)
            scale[io] = shares[src[io] - n] * h[src[io] - n]
            net = self.memo_phase(src, dst, nbytes * scale, multicast=group)
            return net, self._controller_seconds(unique_per_chip, shares)

        vert, hori = with_split(1.0), with_split(0.0)
        options = [even, vert, hori]
        A, B = vert[0].intra_busy_s, hori[0].intra_busy_s
        if A > 0 and B > 0:
            options.append(with_split(B / (A + B)))
        return min(options, key=lambda o: max(o[0].time_s, o[1]))

    @property
    def home_size(self) -> np.ndarray:
        """Per controller, how many home controllers its chip has (io_flows' even stripes)."""
        out = np.zeros(self.num_controllers)
        for k in range(self.num_chips):
            home = self.home_controllers(k)
            out[home] = home.size
        return out

    def io_segments(self) -> list[np.ndarray]:
        """Per I/O node: local indices of the edge routers its ports attach to (grid
        positions ``y * cols + x``; none for a controller inside the grid)."""
        return [np.unique(self.port_router[p]) for p in self.io_ports()]

    @property
    def entry_port(self) -> np.ndarray:
        """``entry_port[j, l]``: the port where I/O node ``j`` injects data for destination
        local index ``l``: the nearest of its ports straight across from ``l`` (same column on
        the top/bottom side, same row on the left/right side), else its nearest port (0 for
        a controller inside the grid, which has none)."""
        if self._entry_port is None:
            cpc, cols = self.cores_per_chip, self.cols
            ly, lx = self.core_y[:cpc], self.core_x[:cpc]
            py, px = self.port_router // cols, self.port_router % cols
            table = np.zeros((self.num_controllers + self.num_chips, cpc), np.int64)
            big = 4 * (self.rows + cols)
            for j, ports in enumerate(self.io_ports()):
                if ports.size == 0:
                    continue
                dist = np.abs(ly[:, None] - py[ports][None, :]) + np.abs(lx[:, None] - px[ports][None, :])
                vertical = self.port_side[ports] % 2 == 0  # top, bottom: a column
                straight = np.where(vertical[None, :], lx[:, None] == px[ports][None, :],
                                    ly[:, None] == py[ports][None, :])
                table[j] = ports[np.argmin(dist + big * ~straight, axis=1)]
            self._entry_port = table
        return self._entry_port

    @property
    def entry(self) -> np.ndarray:
        """``entry[j, l]``: the edge router (grid position ``y * cols + x``) where I/O node
        ``j`` enters the mesh for destination local index ``l`` (the router of :attr:`entry_port`)."""
        return self.port_router[self.entry_port]

    def controller_links(self) -> dict[str, np.ndarray]:
        """Per direction, which links (global ids, as :meth:`routes` numbers them) leave the
        node of a controller inside the grid: its ports into the mesh."""
        if self._ctrl_links is None:
            nc, cols, rows = self.num_chips, self.cols, self.rows
            out = {d: np.zeros(nc * self.n_h, bool) for d in ("east", "west")}
            out.update({d: np.zeros(nc * self.n_v, bool) for d in ("south", "north")})
            if self.interior:
                k = self.node_chip[self.num_cores:self.num_cores + self.num_controllers]
                y, x = self.ctrl_y, self.ctrl_x
                for name, ok, link in (
                        ("east", x < self.lh, k * self.n_h + y * self.lh + x),
                        ("west", (x >= 1) | self.wrap_x, k * self.n_h + y * self.lh + (x - 1) % cols),
                        ("south", y < self.lv, k * self.n_v + x * self.lv + y),
                        ("north", (y >= 1) | self.wrap_y, k * self.n_v + x * self.lv + (y - 1) % rows)):
                    out[name][link[ok]] = True
            self._ctrl_links = out
        return self._ctrl_links
