"""Where everything sits on one mesh chip's NoC grid: the placement strings of
:attr:`~runtime_sim.contract.hardware.HardwareSpec.hbm_placement` and
:attr:`~runtime_sim.contract.hardware.HardwareSpec.mesh_reserved`, read and spelled one way,
and the grid they give (:class:`MeshGrid`, built once when a spec is validated).

The device's mesh model (:class:`runtime_sim.machine.mesh_topology.MeshTopology`), the plan cost and
the Elk tables all read the grid through :meth:`~runtime_sim.contract.hardware.HardwareSpec.mesh_grid`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from runtime_sim.contract.field_values import as_int
from runtime_sim.contract.hardware_limits import MAX_CORES

#: Where a mesh chip's HBM controllers attach
#: (:attr:`~runtime_sim.contract.hardware.HardwareSpec.hbm_placement`): on the edge ports of
#: the grid (Elk §5; AMD's AI Engine arrays, Meta's MTIA v2), as NoC nodes filling whole grid
#: columns (Tenstorrent Wormhole and Blackhole's DRAM tiles), or as NoC nodes at given
#: ``(row, col)`` positions.
HBM_PLACEMENTS = ("edge", "columns:<col>,<col>,...", "nodes:(<row>,<col>),...")
#: The kinds of position a placement string lists, in the order its one spelling gives them.
PLACE_KINDS = ("rows", "columns", "nodes")


def parse_places(text: str) -> dict[str, list]:
    """``"rows:0,6;columns:0;nodes:(2,3),(4,5)"`` as ``{kind: [index or (row, col), ...]}``;
    ValueError naming what is wrong."""
    out: dict[str, list] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        kind, sep, body = part.partition(":")
        kind = kind.strip().lower()
        if not sep or kind not in PLACE_KINDS:
            raise ValueError(f"cannot read '{part}' (a part is rows:..., columns:... or nodes:...)")
        if kind in out:
            raise ValueError(f"'{kind}' is given twice")
        if kind == "nodes":
            body = body.replace(" ", "")
            items = [tuple(as_int(v) for v in pair.split(",")) for pair in
                     body.removeprefix("(").removesuffix(")").split("),(")] if body else []
            if not items or any(len(p) != 2 or None in p or min(p) < 0 for p in items):
                raise ValueError(f"cannot read nodes '{body}' (write (row,col),(row,col),...)")
        else:
            items = [as_int(v) for v in body.split(",")]
            if not items or any(v is None or v < 0 for v in items):
                raise ValueError(f"cannot read {kind} '{body.strip()}' (write non-negative indices, "
                                 "comma-separated)")
        if len(set(items)) != len(items):
            raise ValueError(f"{kind} lists a position twice")
        out[kind] = items
    return out


def canonical_places(text: str, kinds: tuple[str, ...], edge: bool = False) -> str:
    """The one spelling of a placement string (so equal specs compare and hash equal)."""
    if edge and text.strip().lower() in ("", "edge"):
        return "edge"
    places = parse_places(text)
    if edge and len(places) != 1:
        raise ValueError(f"cannot read '{text}'")
    unknown = [k for k in places if k not in kinds]
    if unknown:
        raise ValueError(f"'{unknown[0]}' is not a placement here")
    parts = []
    for kind in PLACE_KINDS:
        if kind in places:
            items = places[kind]
            body = (",".join(f"({r},{c})" for r, c in items) if kind == "nodes"
                    else ",".join(str(v) for v in items))
            parts.append(f"{kind}:{body}")
    return ";".join(parts)


def mesh_shape(cores: int) -> tuple[int, int]:
    """``(rows, cols)`` of the most square grid with exactly ``cores`` cores (rows <= cols).

    An exact factorization keeps every row full, so XY routes never pass through a missing
    core; 1,472 IPU cores give 32 x 46. A prime count degenerates to a 1 x n line.
    """
    rows = max(r for r in range(1, math.isqrt(cores) + 1) if cores % r == 0)
    return rows, cores // rows


@dataclass(frozen=True)
class MeshGrid:
    """One chip's NoC grid (:meth:`~runtime_sim.contract.hardware.HardwareSpec.mesh_grid`): its
    shape, whether its rings wrap, the ``(row, col)`` of each of its cores (local index order)
    and of each of its HBM controllers (``None``: on the edge ports)."""

    rows: int
    cols: int
    torus: bool
    cores: tuple[tuple[int, int], ...]
    controllers: tuple[tuple[int, int], ...] | None


def build_mesh_grid(hw: Any) -> MeshGrid:
    """The grid of ``hw``, a :class:`~runtime_sim.contract.hardware.HardwareSpec` whose fields
    :meth:`~runtime_sim.contract.hardware.HardwareSpec.validate` has converted (typed ``Any``:
    the spec module imports this one); ValueError ``"<field>: <why>"``."""
    cpc = hw.cores_per_chip
    placement = parse_places(hw.hbm_placement) if hw.hbm_placement != "edge" else {}
    reserved = parse_places(hw.mesh_reserved)
    interior = bool(placement)
    if interior and hw.hbm_controllers % hw.num_chips:
        raise ValueError(f"hbm_controllers: must be a multiple of num_chips={hw.num_chips} "
                         f"with controllers inside the grid ({hw.hbm_placement})")
    per_chip = hw.hbm_controllers // hw.num_chips
    ctrl_cols = placement.get("columns", [])
    rows, cols = hw.mesh_rows, hw.mesh_cols
    if rows == 0:
        if "nodes" in placement or reserved:
            which = "hbm_placement" if "nodes" in placement else "mesh_reserved"
            raise ValueError(f"{which}: needs an explicit grid (mesh_rows and mesh_cols)")
        rows, cols = mesh_shape(cpc)
        cols += len(ctrl_cols)
    if rows * cols > MAX_CORES:
        raise ValueError(f"mesh_rows: with mesh_cols={cols} gives more than {MAX_CORES:,} grid "
                         "nodes")
    taken: set[tuple[int, int]] = set()
    for kind, items in reserved.items():
        for item in items:
            if kind == "rows":
                taken.update((item, c) for c in range(cols))
            elif kind == "columns":
                taken.update((r, item) for r in range(rows))
            else:
                taken.add(item)
        bound = {"rows": rows, "columns": cols}.get(kind)
        if any((v >= bound) if bound else (v[0] >= rows or v[1] >= cols) for v in items):
            raise ValueError(f"mesh_reserved: lists {kind} outside the {rows} x {cols} grid")
    controllers = None
    if ctrl_cols:
        if max(ctrl_cols) >= cols:
            raise ValueError(f"hbm_placement: column {max(ctrl_cols)} is outside the {rows} x {cols} grid")
        # a column's controllers spread evenly over its rows (the middle of equal bands)
        counts = [per_chip // len(ctrl_cols) + (i < per_chip % len(ctrl_cols)) for i in range(len(ctrl_cols))]
        if max(counts) > rows:
            raise ValueError(f"hbm_placement: {max(counts)} controllers do not fit in a column of "
                             f"{rows} rows")
        controllers = tuple((((2 * j + 1) * rows) // (2 * n), col)
                            for col, n in zip(ctrl_cols, counts) for j in range(n))
        taken.update((r, col) for col in ctrl_cols for r in range(rows))
    elif "nodes" in placement:
        nodes = placement["nodes"]
        if len(nodes) != per_chip:
            raise ValueError(f"hbm_placement: lists {len(nodes)} nodes for {per_chip} controllers "
                             "per chip")
        if any(r >= rows or c >= cols for r, c in nodes):
            raise ValueError(f"hbm_placement: lists a node outside the {rows} x {cols} grid")
        controllers = tuple(nodes)
        taken.update(nodes)
    free = [(r, c) for r in range(rows) for c in range(cols) if (r, c) not in taken]
    if len(free) < cpc:
        raise ValueError(f"mesh_rows: {rows} x {cols} grid has {len(free)} nodes for cores, "
                         f"fewer than the {cpc} cores per chip")
    return MeshGrid(rows, cols, hw.mesh_torus, tuple(free[:cpc]), controllers)
