"""XY routing on a mesh or torus: how the links of a chip's grid are numbered, the hops of a
route, the link-id ranges of routes and of multicast trees, and the per-link loads they sum to
(difference arrays, never flow by flow). Elk §4.5 routes dimension order; the multicast trees
are our choice (see :mod:`runtime_sim.machine.topology`).
"""

from __future__ import annotations

import numpy as np


class MeshRouting:
    """Routes on the grids of a mesh network (a mixin of
    :class:`~runtime_sim.machine.mesh_topology.MeshTopology`, which sets the grid's
    attributes below)."""

    rows: int  # grid rows and columns of one chip
    cols: int
    num_chips: int
    wrap_x: bool  # a wrap link on every row (a torus ring of 3 or more nodes)
    wrap_y: bool  # a wrap link on every column
    lh: int  # east (or west) links per row
    lv: int  # south (or north) links per column
    n_h: int  # east (or west) links per chip
    n_v: int  # south (or north) links per chip

    def hops(self, s: np.ndarray, d: np.ndarray, axis: str) -> tuple[np.ndarray, np.ndarray]:
        """Per flow, ``(forward, backward)`` hops from ``s`` to ``d`` along ``axis`` (``"x"``:
        east/west, ``"y"``: south/north); one of the two is 0. On a mesh the sign of
        ``d - s`` decides; on a torus ring the shorter way round (ties go forward)."""
        size, wrap = (self.cols, self.wrap_x) if axis == "x" else (self.rows, self.wrap_y)
        if not wrap:
            diff = d - s
            return np.maximum(diff, 0), np.maximum(-diff, 0)
        fwd = (d - s) % size
        back = (size - fwd) % size
        ahead = fwd <= back
        return np.where(ahead, fwd, 0), np.where(ahead, 0, back)

    def _legs(self, kx, row, x0, east, west, bx, ky, col, y0, south, north, by):
        """Link-id ranges of route legs, in the form of :meth:`routes`: X legs on ``row`` of
        chip ``kx`` from column ``x0`` (``east`` or ``west`` hops, ``bx`` bytes), Y legs on
        column ``col`` of chip ``ky`` from row ``y0``. A leg that crosses a wrap link is two
        ranges (to the ring's end, then from its start)."""
        nc = self.num_chips
        row_base = kx * self.n_h + row * self.lh
        col_base = ky * self.n_v + col * self.lv
        legs = (
            ("east", row_base, x0, east, bx, True, self.lh, nc * self.n_h),
            ("west", row_base, x0, west, bx, False, self.lh, nc * self.n_h),
            ("south", col_base, y0, south, by, True, self.lv, nc * self.n_v),
            ("north", col_base, y0, north, by, False, self.lv, nc * self.n_v),
        )
        for name, base, start, count, weight, forward, ring, size in legs:
            mask = count > 0
            if not mask.any():
                yield name, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), size
                continue
            base, start, count, weight = base[mask], start[mask], count[mask], weight[mask]
            # forward link i goes i -> i + 1, backward link i goes i + 1 -> i (mod the ring)
            lo = start if forward else start - count
            hi = lo + count
            wrapped = (lo < 0) | (hi > ring)
            if not wrapped.any():
                yield name, base + lo, base + hi, weight, size
                continue
            lo = lo % ring
            hi = lo + count
            over = hi > ring
            yield (name, np.concatenate([base + lo, base[over]]),
                   np.concatenate([base + np.minimum(hi, ring), base[over] + hi[over] - ring]),
                   np.concatenate([weight, weight[over]]), size)

    def routes(self, k: np.ndarray, ys: np.ndarray, xs: np.ndarray, yd: np.ndarray, xd: np.ndarray,
               b: np.ndarray):
        """XY routes as link-id ranges: per direction ``(name, start, end, bytes, size)``.

        Links are numbered per chip: east link ``(y, x) -> (y, x+1)`` and west link
        ``(y, x+1) -> (y, x)`` as ``y * lh + x``; south ``(y, x) -> (y+1, x)`` and north as
        ``x * lv + y``, where ``lh = cols - 1`` and ``lv = rows - 1`` on a mesh and ``cols``
        and ``rows`` on a torus (the last link of a ring is its wrap link, ``x + 1`` taken
        modulo ``cols``). The X leg runs on the source row, the Y leg on the destination
        column, so each leg is one contiguous range of ids (two when it wraps).
        """
        east, west = self.hops(xs, xd, "x")
        south, north = self.hops(ys, yd, "y")
        yield from self._legs(k, ys, xs, east, west, b, k, xd, ys, south, north, b)

    def tree_routes(self, k: np.ndarray, ys: np.ndarray, xs: np.ndarray, yd: np.ndarray,
                    xd: np.ndarray, b: np.ndarray, tree: np.ndarray):
        """XY multicast trees as link-id ranges, in the form of :meth:`routes`.

        Flows with the same ``tree`` id share a root ``(k, ys, xs)`` and carry the same bytes;
        the packet is replicated at the routers of the union of their XY routes, so each link
        of that union carries it once: on the root row, east as far as the farthest
        destination reached eastward and west as far as the farthest reached westward (on a
        torus each destination goes the shorter way round); on each destination column, south
        and north as far as its farthest destination each way. One X range per tree and one Y
        range per (tree, destination column): the same difference-array sum as unicast.
        """
        t, first, inv = np.unique(tree, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        T = t.size
        tb = b[first]
        tk, tys, txs = k[first], ys[first], xs[first]
        # X leg on the root row: to the farthest destination column each way
        east, west = self.hops(xs, xd, "x")
        E = np.zeros(T, np.int64)
        np.maximum.at(E, inv, east)
        W = np.zeros(T, np.int64)
        np.maximum.at(W, inv, west)
        # Y legs: one per (tree, destination column), to its farthest destination row each way
        col_key = inv * self.cols + xd
        c, cfirst, cinv = np.unique(col_key, return_index=True, return_inverse=True)
        cinv = cinv.reshape(-1)
        south, north = self.hops(ys, yd, "y")
        S = np.zeros(c.size, np.int64)
        np.maximum.at(S, cinv, south)
        N = np.zeros(c.size, np.int64)
        np.maximum.at(N, cinv, north)
        ct = inv[cfirst]
        yield from self._legs(tk, tys, txs, E, W, tb, tk[ct], xd[cfirst], tys[ct], S, N, tb[ct])


def range_loads(size: int, start: np.ndarray, end: np.ndarray, weight: np.ndarray) -> np.ndarray | None:
    """Per id in ``[0, size)``, the sum of ``weight[i]`` over ranges ``[start[i], end[i])``
    covering it (``None`` when there are no ranges)."""
    if start.size == 0 or size == 0:
        return None
    diff = np.bincount(start, weights=weight, minlength=size + 1)
    diff -= np.bincount(end, weights=weight, minlength=size + 1)
    return np.cumsum(diff[:size])
