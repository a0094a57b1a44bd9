"""What every inter-core network of the simulated device shares: its nodes (cores, HBM
controllers, host links), where HBM and host data come from, the phase memo, and the
entry point of a phase's cost (:meth:`Topology.phase`), which each network implements
(:mod:`runtime_sim.machine.all_to_all`, :mod:`runtime_sim.machine.mesh_topology`). The model
they share is described in :mod:`runtime_sim.machine.topology`.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any

import numpy as np

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.machine.phase_cost import NO_PHASE, MulticastPattern, PhaseCost


class Topology:
    """A network of cores, HBM controllers and host links (see the module docstring)."""

    kind = "abstract"

    def __init__(self, hw: HardwareSpec):
        self.hw = hw
        self.num_cores = hw.num_cores
        self.num_chips = hw.num_chips
        self.num_controllers = hw.hbm_controllers
        self.cores_per_chip = hw.cores_per_chip
        n, h, c = self.num_cores, self.num_controllers, self.num_chips
        self.num_nodes = n + h + c
        chip = np.empty(self.num_nodes, np.int64)
        chip[:n] = np.arange(n) // self.cores_per_chip
        chip[n:n + h] = np.arange(h) % c
        chip[n + h:] = np.arange(c)
        self.node_chip = chip
        self._home = [self._home_controllers(k) for k in range(c)]
        #: Phases already costed on this network, by what they depend on: re-layouts and
        #: distributions by operator structure, plan and chunk counts, loads by their flows
        #: (:meth:`memo_phase`). A phase is routed over links and ports only, so chips that
        #: differ in their HBM or host bandwidth alone share one memo (:func:`network_memo`):
        #: the designs of a sweep point, and its points along an HBM-bandwidth axis, cost
        #: each phase once.
        self.phase_memo: dict[tuple, Any] = network_memo(network_key(hw))

    def home_controllers(self, chip: int) -> np.ndarray:
        """Controllers (0-based indices) that serve the HBM data of ``chip``'s cores."""
        return self._home[chip]

    # -- nodes ---------------------------------------------------------------------------
    def controller_node(self, h: int) -> int:
        return self.num_cores + h

    def host_node(self, chip: int) -> int:
        return self.num_cores + self.num_controllers + chip

    def controllers_of_chip(self, chip: int) -> np.ndarray:
        """Controller indices (0-based, not node ids) attached to ``chip``."""
        return np.flatnonzero(np.arange(self.num_controllers) % self.num_chips == chip)

    def _home_controllers(self, chip: int) -> np.ndarray:
        # A core's HBM data is sliced over the controllers of its own chip (each chip's HBM
        # holds what its cores need, Elk §5/§6.1 model parallelism); a chip without
        # controllers reads through all of them.
        own = self.controllers_of_chip(chip)
        return own if own.size else np.arange(self.num_controllers)

    def io_flows(self, kind: str, dst: np.ndarray, nbytes: np.ndarray, group: np.ndarray | None = None):
        """Flows that deliver ``nbytes[i]`` to core ``dst[i]`` from HBM or the host.

        HBM data is striped evenly over the home controllers of the destination's chip (Elk §5
        "evenly slice each tensor across all HBM modules"); host data comes over the
        destination chip's own host link. With ``group`` (destinations with equal ids need the
        same bytes, e.g. replicas of a sub-tensor), a fourth array numbers the data of every
        flow for :meth:`phase`'s ``multicast``: equal ``group`` and equal source.
        """
        dst = np.asarray(dst, np.int64)
        nbytes = np.asarray(nbytes, np.float64)
        gid = np.arange(dst.size) if group is None else np.asarray(group, np.int64)
        chip = self.node_chip[dst]
        if kind == "host":
            flows = (self.num_cores + self.num_controllers + chip, dst, nbytes)
            return flows if group is None else flows + (gid,)
        if kind != "hbm":
            raise ValueError(f"unknown I/O kind {kind!r}")
        if self.num_controllers == 0:
            raise ValueError(f"chip '{self.hw.name}' has no HBM controllers")
        srcs, dsts, sizes, ids = [], [], [], []
        for k in np.unique(chip):
            sel = chip == k
            home = self._home[int(k)]
            srcs.append(np.tile(self.num_cores + home, int(sel.sum())))
            dsts.append(np.repeat(dst[sel], home.size))
            sizes.append(np.repeat(nbytes[sel] / home.size, home.size))
            ids.append(np.repeat(gid[sel], home.size) * self.num_controllers + np.tile(home, int(sel.sum())))
        flows = (np.concatenate(srcs), np.concatenate(dsts), np.concatenate(sizes))
        return flows if group is None else flows + (np.concatenate(ids),)

    def memo_phase(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                   multicast: np.ndarray | None = None) -> PhaseCost:
        """:meth:`phase` of these flows, costed once per network (:attr:`phase_memo`, keyed
        by a digest of the flows)."""
        digest = hashlib.blake2b(digest_size=16)
        for a in (src, dst, nbytes) + (() if multicast is None else (multicast,)):
            a = np.ascontiguousarray(a)
            digest.update(f"{a.dtype}{a.shape}".encode())
            digest.update(a.data)
        key = ("phase", digest.hexdigest())
        hit = self.phase_memo.get(key)
        if hit is None:
            hit = self.phase_memo[key] = self.phase(src, dst, nbytes, multicast=multicast)
        return hit

    def hbm_load(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, group: np.ndarray | None,
                 unique_per_chip: np.ndarray) -> tuple[PhaseCost, float]:
        """An HBM load: ``(network delivery, controller time)`` of the :meth:`io_flows`
        ``src, dst, nbytes, group`` when chip ``k``'s HBM reads ``unique_per_chip[k]`` distinct
        bytes. Each chip's bytes are striped evenly over its home controllers (Elk §5), each
        reading at ``hbm_bandwidth / hbm_controllers``."""
        network = self.memo_phase(src, dst, nbytes, multicast=group)
        return network, self._controller_seconds(unique_per_chip, None)

    def io_load(self, kind: str, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                group: np.ndarray | None, unique_per_chip: np.ndarray) -> tuple[PhaseCost, float]:
        """``(network delivery, source time)`` of the :meth:`io_flows` ``src, dst, nbytes,
        group`` when chip ``k``'s source sends ``unique_per_chip[k]`` distinct bytes: its HBM
        controllers (:meth:`hbm_load`) or its host link (``host_bandwidth`` per chip)."""
        if kind == "hbm":
            return self.hbm_load(src, dst, nbytes, group, unique_per_chip)
        if kind != "host":
            raise ValueError(f"unknown I/O kind {kind!r}")
        network = self.memo_phase(src, dst, nbytes, multicast=group)
        return network, float(np.max(unique_per_chip)) / self.hw.host_bandwidth

    def _controller_seconds(self, unique_per_chip: np.ndarray, shares: np.ndarray | None) -> float:
        """Seconds the busiest controller reads: chip ``k``'s bytes split over its home
        controllers by ``shares`` (a fraction per controller; ``None``: evenly)."""
        hw = self.hw
        per_ctrl = np.zeros(hw.hbm_controllers)
        for k in range(hw.num_chips):
            home = self.home_controllers(k)
            per_ctrl[home] += unique_per_chip[k] * (1.0 / home.size if shares is None else shares[home])
        return float(per_ctrl.max()) / (hw.hbm_bandwidth / hw.hbm_controllers)

    # -- cost ------------------------------------------------------------------------------
    def phase(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
              sample_weight: float = 1.0, multicast: np.ndarray | None = None) -> PhaseCost:
        """Cost of the flows ``src[i] -> dst[i]`` of ``nbytes[i]`` bytes, all started together.

        ``multicast[i]`` (optional) numbers the data of flow ``i``: flows with the same number
        carry the same bytes from the same source, which an all-to-all exchange sends once
        (IPU exchange broadcast, Elk §5) -- the send port and the inter-chip fabric (once per
        destination chip) carry one copy; every receiver still takes its own. The mesh sends
        it along an XY multicast tree (each link once). ``sample_weight`` > 1 says the flows are a
        uniform sample of the destinations: loads that sum over many destinations (send
        ports, links, the inter-chip fabric) are scaled by it; a receive port is exact.
        """
        src = np.asarray(src, np.int64)
        dst = np.asarray(dst, np.int64)
        b = np.asarray(nbytes, np.float64)
        group = None if multicast is None else np.asarray(multicast, np.int64)
        keep = (b > 0) & (src != dst)
        if not keep.all():
            src, dst, b = src[keep], dst[keep], b[keep]
            group = None if group is None else group[keep]
        if b.size == 0:
            return NO_PHASE
        if int(dst.max()) >= self.num_cores:
            raise ValueError("transfers must end on cores")
        return self._phase(src, dst, b, float(sample_weight), group)

    def _phase(self, src: np.ndarray, dst: np.ndarray, b: np.ndarray, w: float,
               group: np.ndarray | None) -> PhaseCost:
        raise NotImplementedError

    def multicast_phase(self, pattern: MulticastPattern) -> PhaseCost:
        """Cost of a :class:`MulticastPattern`; without multicast, of its explicit flows."""
        flows = pattern.flows()
        src, dst, nbytes, weight = flows[:4]
        group = flows[4] if len(flows) > 4 else None
        return self.phase(src, dst, nbytes, weight, multicast=group)

    def _inter(self, b: np.ndarray, cross: np.ndarray, w: float) -> tuple[float, float]:
        inter = float(b[cross].sum()) * w
        if inter <= 0:
            return 0.0, 0.0
        return inter, inter / self.hw.inter_chip_bandwidth

    def _flow_alone(self, b: np.ndarray, cross: np.ndarray) -> np.ndarray:
        """Seconds each flow's bytes take on its slowest resource when alone on the network."""
        bw = np.full(b.shape, self.hw.link_bandwidth)
        if cross.any():
            bw[cross] = min(self.hw.link_bandwidth, self.hw.inter_chip_bandwidth)
        return b / bw


def network_key(hw: HardwareSpec) -> str:
    """``hw`` as far as its phases depend on it: every field but its name, notes and the
    HBM and host bandwidths (which time the sources of a load, not its network delivery)."""
    fields = hw.to_dict()
    for name in ("name", "notes", "hbm_bandwidth", "host_bandwidth"):
        fields.pop(name, None)
    return json.dumps(fields, sort_keys=True, default=str)


@lru_cache(maxsize=16)
def network_memo(key: str) -> dict[tuple, Any]:
    """The phase memo of one network (:attr:`Topology.phase_memo`), shared by its chips."""
    del key  # the cache's key: one memo per network
    return {}
