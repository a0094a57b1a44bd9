"""Execution plans: what the compiler decides for one operator (T10 §4.2-4.4; T10 §2.2).

* :class:`ExecutionPlan` -- a compute-shift plan: the spatial partition ``F_op`` of the
  operator's axes over the cores, per tensor the temporal factors ``f_t`` of its rotations
  (:class:`RotatingTensor`), and the core order. Its meaning on the cores (placement,
  rotation rings, chunk schedule) is :class:`runtime_sim.contract.layout.OpLayout`.
* :class:`VgmPlan` -- the virtual-global-memory baseline's tiles
  (:mod:`runtime_sim.contract.vgm_layout`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.json_fields import read_int, read_list, read_map, read_name


@dataclass(frozen=True)
class RotatingTensor:
    """T10's rTensor (§4.1, Fig. 5, Table 1): how one tensor of an operator is partitioned,
    placed and rotated under a plan, per tensor dimension.

    Attributes
    ----------
    name : str
        The tensor's name.
    shape : tuple of int
        Its full shape.
    dtype : str
        Its element type.
    spatial_partition_factor : tuple of int
        f_s: sub-tensors along each dimension (derived from the operator partition F_op).
    temporal_partition_factor : tuple of int
        f_t: partitions each sub-tensor is split into along each dimension; the cores that
        share a sub-tensor pass them around rings of ``prod(f_t)`` cores (1: no rotation).
    rotating_pace : tuple of int
        rp: elements shifted per step along each dimension (0 where it does not rotate).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    spatial_partition_factor: tuple[int, ...]
    temporal_partition_factor: tuple[int, ...]
    rotating_pace: tuple[int, ...]


@dataclass(frozen=True)
class ExecutionPlan:
    """A compute-shift execution plan of one operator (T10 §4.2).

    ``op_partition[a]`` is F_op on axis ``a``; ``temporal[t][a]`` is the temporal factor of the
    ``t``-th tensor (inputs then output, as in :attr:`TensorExpr.tensors`) on axis ``a``
    (missing means 1); ``loop_order`` lists the axes that take temporal steps, outermost
    first.

    ``core_order`` maps sub-operators to physical cores (T10 §4.4, Elk §5): the axes of the
    operator, outermost first, in which the core grid is numbered row-major
    (:attr:`runtime_sim.contract.layout.OpLayout.grid`). Empty means the expression's own axis order.
    On a multi-chip system it decides which sub-operators share a chip: with the axes a
    tensor lacks innermost, the replicas of each of its sub-tensors sit on neighbouring cores.

    ``chips`` spreads the numbered cores over that many chips (:attr:`OpLayout.physical
    <runtime_sim.contract.layout.OpLayout.physical>`): core ``i`` of the grid is physical core
    ``(i // g) * cores_per_chip + i % g`` with ``g = num_cores / chips``, one equal contiguous
    group at the start of each chip. 1 (the default) places the cores contiguously from
    core 0.
    """

    op_partition: Mapping[str, int]
    temporal: tuple[Mapping[str, int], ...]
    loop_order: tuple[str, ...] = ()
    core_order: tuple[str, ...] = ()
    chips: int = 1

    def F(self, axis: str) -> int:
        return int(self.op_partition.get(axis, 1))

    def ft(self, tensor: int, axis: str) -> int:
        return int(self.temporal[tensor].get(axis, 1))

    @property
    def num_cores(self) -> int:
        n = 1
        for f in self.op_partition.values():
            n *= int(f)
        return n

    def to_dict(self) -> dict[str, Any]:
        d = {
            "op_partition": {a: int(f) for a, f in self.op_partition.items()},
            "temporal": [{a: int(f) for a, f in t.items() if int(f) != 1} for t in self.temporal],
            "loop_order": list(self.loop_order),
        }
        if self.core_order:  # only when not the default, so existing programs keep their bytes
            d["core_order"] = list(self.core_order)
        if self.chips != 1:  # likewise
            d["chips"] = int(self.chips)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExecutionPlan":
        return cls(
            op_partition={read_name(a, "axis"): read_int(f, "F_op")
                          for a, f in read_map(d["op_partition"], "op_partition").items()},
            temporal=tuple({read_name(a, "axis"): read_int(f, "temporal factor")
                            for a, f in read_map(t, "temporal factors").items()}
                           for t in read_list(d["temporal"], "temporal")),
            loop_order=tuple(read_name(a, "loop axis") for a in read_list(d.get("loop_order", ()), "loop_order")),
            core_order=tuple(read_name(a, "core order axis") for a in read_list(d.get("core_order", ()), "core_order")),
            chips=read_int(d.get("chips", 1), "chips"),
        )


@dataclass(frozen=True)
class VgmPlan:
    """A load-compute-store plan on a virtual global memory (the baseline T10 §2.2 measures).

    Every tensor has a home slice spread linearly over all cores; the operator is cut into
    output tiles of ``tiles[a]`` elements per spatial axis and processes reduction axes in
    chunks of ``tiles[a]``; each core fetches its input pieces from their home cores,
    computes, and stores its output tile home (Roller-style rTiles aligned to the matrix unit,
    Roller §3.1).

    ``order`` numbers the tiles row-major over the spatial axes it lists, outermost first
    (empty: the expression's own order). ``reuse`` picks how tiles go to cores: ``False``
    round-robin (tile ``i`` on core ``i mod cores``, every box fetched for every chunk);
    ``True`` blocked, so that each core runs consecutive tiles of ``order`` and does not fetch
    again an input box it already holds (Roller §3.2: an rTile stays in the faster memory
    while the tiles that reuse it run; the tiles along the innermost axis of ``order`` share
    the boxes of every input that does not depend on it).
    """

    tiles: Mapping[str, int]
    order: tuple[str, ...] = ()
    reuse: bool = False

    def tile(self, axis: str, extent: int) -> int:
        return min(int(self.tiles.get(axis, extent)), extent)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"execution": "vgm", "tiles": {a: int(t) for a, t in self.tiles.items()}}
        if self.order:  # only when not the default, so existing programs keep their bytes
            d["order"] = list(self.order)
        if self.reuse:
            d["reuse"] = True
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VgmPlan":
        reuse = d.get("reuse", False)
        if not isinstance(reuse, bool):
            raise DeviceProgramError(f"VGM plan: reuse must be true or false, not {reuse!r}")
        return cls({read_name(a, "axis"): read_int(t, "tile") for a, t in read_map(d["tiles"], "tiles").items()},
                   tuple(read_name(a, "tile order axis") for a in read_list(d.get("order", ()), "order")),
                   reuse)


def plan_from_dict(d: Mapping[str, Any]) -> "ExecutionPlan | VgmPlan":
    """Either execution model of an operator, as stored in a program."""
    d = read_map(d, "plan")
    if d.get("execution", "compute-shift") not in ("vgm", "compute-shift"):
        raise DeviceProgramError(f"unknown execution model {d.get('execution')!r} (use 'vgm' or a compute-shift plan)")
    if d.get("execution") == "vgm":
        return VgmPlan.from_dict(d)
    return ExecutionPlan.from_dict(d)


#: Idle placement of resident tensors that is no plan of their operator: every tensor cut
#: into near-even blocks, one per core (the smallest footprint any operator can idle in).
IDLE_SPREAD = "spread"
