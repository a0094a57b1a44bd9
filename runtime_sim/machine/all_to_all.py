"""The all-to-all exchange (the IPU's, Elk §2.1): one port per core to the exchange, served
one transfer after another at full bandwidth; identical data broadcast once. See
:mod:`runtime_sim.machine.topology` for the model.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.machine.links import chunk_latency_seconds
from runtime_sim.machine.phase_cost import NO_PHASE, MulticastPattern, PhaseCost, bound_by
from runtime_sim.machine.topology_base import Topology


class AllToAllTopology(Topology):
    """IPU exchange: one port per core, served sequentially at full bandwidth (Elk §2.1)."""

    kind = "all-to-all"

    def _phase(self, src: np.ndarray, dst: np.ndarray, b: np.ndarray, w: float,
               group: np.ndarray | None) -> PhaseCost:
        n, c = self.num_cores, self.num_chips
        bw = self.hw.link_bandwidth
        recv = np.bincount(dst, weights=b, minlength=n)
        src_chip, dst_chip = self.node_chip[src], self.node_chip[dst]
        cross = src_chip != dst_chip
        if group is None:
            one = np.ones(b.size, bool)
            cross_once = cross
        else:  # one copy per multicast group leaves the sender ...
            _, first = np.unique(group, return_index=True)
            one = np.zeros(b.size, bool)
            one[first] = True
            # ... and one per destination chip crosses the inter-chip fabric
            _, first_chip = np.unique(group * c + dst_chip, return_index=True)
            cross_once = np.zeros(b.size, bool)
            cross_once[first_chip] = True
            cross_once &= cross
        from_core = one & (src < n)  # I/O nodes multicast; their rate is charged on unique bytes
        sent = np.bincount(src[from_core], weights=b[from_core], minlength=n) * w
        port_bytes = max(float(recv.max()), float(sent.max()) if sent.size else 0.0)
        inter_bytes, inter_s = self._inter(b, cross_once, w)
        latency = chunk_latency_seconds(b, self.hw, 1, cross)  # one hop through the exchange
        lat = float(latency.max())
        uncontended = float((self._flow_alone(b, cross) + latency).max())
        intra_s = port_bytes / bw
        # every byte delivered passes the exchange once (byte_hops = bytes delivered)
        return PhaseCost(max(intra_s, inter_s) + lat, uncontended, float(b.sum()) * w, inter_bytes,
                         intra_s, inter_s, 1, bound_by([("ports", port_bytes)], intra_s, inter_s),
                         byte_hops=float(b.sum()) * w)

    def multicast_phase(self, pattern: MulticastPattern) -> PhaseCost:
        """Broadcast pieces: the owner's port and the inter-chip fabric (once per destination
        chip) carry one copy of each piece; every receiver's port its own bytes."""
        n, bw = self.num_cores, self.hw.link_bandwidth
        recv = np.asarray(pattern.recv_bytes, np.float64)
        rx = np.asarray(pattern.piece_receivers, np.float64)
        live = rx.sum(axis=1) > 0
        if not live.any() or not recv.any():
            return NO_PHASE
        src = np.asarray(pattern.piece_src, np.int64)[live]
        b = np.asarray(pattern.piece_bytes, np.float64)[live]
        rx = rx[live]
        w = pattern.sample_weight
        on_core = src < n
        sent = np.bincount(src[on_core], weights=b[on_core], minlength=n) * w
        src_chip = self.node_chip[src]
        foreign = rx > 0
        foreign[np.arange(src.size), src_chip] = False
        inter_bytes, inter_s = (0.0, 0.0)
        if self.num_chips > 1:
            inter_bytes = float((b * foreign.sum(axis=1)).sum()) * w
            inter_s = inter_bytes / self.hw.inter_chip_bandwidth if inter_bytes else 0.0
        crosses = foreign.any(axis=1)
        latency = chunk_latency_seconds(b, self.hw, 1, crosses)
        uncontended = float((self._flow_alone(b, crosses) + latency).max())
        intra_s = max(float(recv.max()), float(sent.max())) / bw
        return PhaseCost(max(intra_s, inter_s) + float(latency.max()), uncontended,
                         float(recv.sum()), inter_bytes, intra_s, inter_s, 1,
                         bound_by([("ports", intra_s)], intra_s, inter_s),
                         byte_hops=float(recv.sum()))
