"""Hardware description of an inter-core connected AI (ICCA) chip: :class:`HardwareSpec` and
its validation.

:class:`HardwareSpec` is half of the contract between the compiler and the simulated device
(the other half is the device program format, :mod:`runtime_sim.contract.program`). Overriding
any field is a call away (:meth:`HardwareSpec.with_overrides`). The rest of the hardware
description lives beside this module, one job each:

* :mod:`runtime_sim.contract.presets` -- the named chips, every number cited beside it
  (:func:`~runtime_sim.contract.presets.preset`, :func:`~runtime_sim.contract.presets.small_chip`);
* :mod:`runtime_sim.contract.hardware_files` -- a chip of one's own from a JSON or TOML file
  (:func:`~runtime_sim.contract.hardware_files.load_hardware`);
* :mod:`runtime_sim.contract.hardware_limits` -- the bounds of every field, and why;
* :mod:`runtime_sim.contract.mesh_grid` -- controller and reserved-node placements, and the
  NoC grid of a mesh chip;
* :mod:`runtime_sim.contract.field_values` -- how a given value reads as a field's type.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from runtime_sim.contract.energy import ENERGY_FIELDS, EnergyTable
from runtime_sim.contract.errors import InvalidHardwareSpecError, UnsupportedDtypeError
from runtime_sim.contract.field_values import as_float, as_int, as_pairs, assumed_marks, field_error
from runtime_sim.contract.hardware_limits import (
    FLOAT_FIELDS,
    INT_FIELDS,
    MAX_HBM_CONTROLLERS_PER_CHIP,
    MAX_MATRIX_TILE,
    WHY,
)
from runtime_sim.contract.mesh_grid import HBM_PLACEMENTS, MeshGrid, build_mesh_grid, canonical_places


#: Topologies the device knows how to connect cores with.
TOPOLOGIES = ("all-to-all", "mesh")

#: Element types the simulated cores can store and compute with: the two IEEE types the IPU's
#: AMP unit accepts (T10 §5) and bfloat16, the 16-bit format of TPUs and most LLM checkpoints
#: (numpy stores it through ``ml_dtypes``, which TVM and onnx depend on). The 16-bit types
#: are computed in float32 and rounded to their format when stored (runtime_sim.functional.expr_eval).
SUPPORTED_DTYPES = ("float32", "float16", "bfloat16")

#: Element types every chip holds but never computes: boolean masks, which an operator only
#: reads as the condition of a select (ONNX Where, masked fill). One byte per element.
MASK_DTYPES = ("bool",)

#: Element types of index tensors: the row numbers a gather reads (ONNX Gather's ``indices``,
#: ``relax.take``'s ``indices``; ONNX allows int32 and int64). Held like masks, read-only, and
#: only as the ids of a gathered access (:class:`runtime_sim.contract.expr.Gather`): the cores never
#: compute integer arithmetic, which stays on the host.
INDEX_DTYPES = ("int32", "int64")

KIB = 1024
GIB = 1024**3

_MISSING = object()
#: Fields that describe a spec rather than define the chip: never marked assumed.
_UNMARKED_FIELDS = ("name", "notes", "assumed")


def check_dtype(dtype: str, where: str, hw: "HardwareSpec | None" = None, *,
                mask: bool = False, index: bool = False) -> None:
    """The one dtype check of the compiler and the device: raise
    :class:`UnsupportedDtypeError` unless ``dtype`` is one of ``hw.dtypes`` (with ``hw=None``:
    one of :data:`SUPPORTED_DTYPES`, what any chip's cores compute). ``where`` names the tensor.
    ``mask``: the tensor is only read (an operator input), so a :data:`MASK_DTYPES` mask is
    accepted too; what an operator computes is never a mask. ``index``: the tensor holds the
    row numbers of a gather (or is a region tensor that may), so :data:`INDEX_DTYPES` are
    accepted too.
    """
    dtypes = SUPPORTED_DTYPES if hw is None else hw.dtypes
    if mask and str(dtype) in MASK_DTYPES:
        return
    if index and str(dtype) in INDEX_DTYPES:
        return
    if str(dtype) not in dtypes:
        device = "the ICCA device" if hw is None else f"chip '{hw.name}'"
        raise UnsupportedDtypeError(f"{where} has dtype {dtype}; {device} computes only {', '.join(dtypes)}")


@dataclass(frozen=True)
class HardwareSpec:
    """One ICCA system: chips of cores with private SRAM, links, optional HBM.

    Bandwidths are in bytes per second, latencies in seconds, memory in bytes. Every field is
    converted and checked on construction (:meth:`validate`); the presets
    (:func:`~runtime_sim.contract.presets.preset`) cite a source for each number.

    Parameters
    ----------
    name : str
        The system's name (a preset name for the presets).
    num_cores : int
        Cores of the whole system (all chips).
    sram_bytes_per_core : int
        Private SRAM of each core (624 KiB on an IPU Mk2 core, T10 §2.1).
    link_bandwidth : float
        Bytes per second a core sends (and receives) over the on-chip interconnect.
    clock_hz : float
        Core clock.
    matrix_flops_per_cycle : float
        Matrix-unit FLOP per cycle per core (matmul and convolution sub-tasks) at every dtype
        ``matrix_flops_per_cycle_by_dtype`` does not list: a chip file that gives only this
        number runs every dtype at it. On the presets it is the float16 rate.
    vector_flops_per_cycle : float
        Vector FLOP per cycle per core (element-wise work, reductions, epilogues), one rate for
        every dtype: the vector units of the presets compute every format in float32 lanes
        (Tenstorrent's SFPU) or have one published figure (the IPU, Elk §6.3).
    matrix_tile : tuple of int
        The matrix unit's tile ``(m, k, n)`` (the IPU's AMP unit works on 16): a matrix
        sub-task's cycles are those of its shape padded up to it (T10 §4.3.1,
        :class:`schedules.base.MatrixTemplate`).
    link_latency_s : float
        Latency of one chunk's hop over an on-chip link.
    inter_chip_latency_s : float
        Extra latency of a hop between chips (IPU-Link), paid per chunk on top of
        ``link_latency_s`` (:func:`runtime_sim.machine.links.chunk_latency_seconds`).
    sync_cycles : int
        Cycles of the synchronization that ends every bulk-synchronous step (T10 §3).
    shift_buffer_bytes : int
        The per-core buffer transfers are cut into (T10 §5); reserved out of the SRAM.
    topology : str
        How cores connect: ``"all-to-all"`` (the IPU's exchange) or ``"mesh"`` (2-D).
    num_chips : int
        Chips of the system; ``num_cores`` must be a multiple of it.
    inter_chip_bandwidth : float
        Bytes per second between chips; 0 for a single chip.
    hbm_bandwidth : float
        Bytes per second of HBM over the whole system; 0 without HBM (Elk §6.1 models
        16 TB/s for four chips).
    hbm_controllers : int
        HBM controllers of the whole system; positive when ``hbm_bandwidth`` is. Each reads
        ``hbm_bandwidth / hbm_controllers``; controller ``h`` serves chip ``h % num_chips``.
        On a chip whose DRAM is reached through NoC nodes, count the nodes (Wormhole: 18 DRAM
        tiles for 12 GDDR6 channels).
    hbm_bytes_per_chip : int
        HBM capacity of each chip, in bytes; the model state kept in HBM (weights, KV
        caches) must fit in ``hbm_bytes_per_chip x num_chips``, which the compiler checks.
        0 (default): the capacity is not modelled and not checked. Needs ``hbm_bandwidth``.
    host_bandwidth : float
        Host <-> chip bytes per second per chip: the IPU Mk2's off-chip bandwidth, 8 GB/s
        (T10 Table 3).
    hbm_placement : str
        Mesh only: where the controllers attach. ``"edge"`` (default, Elk §5): on the grid's
        boundary ports, each controller wired to a span of them. ``"columns:0,5"``: those grid
        columns hold no cores; each chip's controllers are NoC nodes spread evenly over their
        rows. ``"nodes:(0,0),(1,0),..."``: one NoC node per controller of a chip, at ``(row,
        col)`` (a list of ``[row, col]`` pairs is accepted too). An interior controller injects
        from its node and its data routes XY from there.
    hbm_injection_bandwidth : float
        Mesh only: bytes per second one controller can inject into the NoC (its network
        interface); 0 (default): no cap beyond the links it drives (its edge ports, or the up
        to 4 links of its node).
    mesh_rows, mesh_cols : int
        Mesh only: the NoC grid of one chip. 0 and 0 (default): derived, the most square grid
        of exactly ``cores_per_chip`` cores (:func:`~runtime_sim.contract.mesh_grid.mesh_shape`),
        widened by the controller columns of a ``columns:`` placement. Grid positions that hold
        neither a controller nor a reserved node take the cores in row-major order; spare
        positions are routers only.
    mesh_reserved : str
        Mesh only: grid nodes without a core (Ethernet, PCIe, management tiles: routers only),
        e.g. ``"rows:0,6;columns:0"`` or ``"nodes:(0,3)"``; needs an explicit grid.
    mesh_torus : bool
        Mesh only: wrap-around links in both dimensions (a 2-D torus, as Tenstorrent's NoCs):
        routes take the shorter way around each ring (dimension order X then Y).
    dtypes : tuple of str
        Element types the cores compute (a subset of :data:`SUPPORTED_DTYPES`).
    matrix_flops_per_cycle_by_dtype : mapping of str to float
        Matrix-unit FLOP per cycle per core of the dtypes whose rate differs from
        ``matrix_flops_per_cycle`` (``{"float32": 32.0}`` on the IPU Mk2, whose FP32 peak is a
        quarter of its FP16 peak). A matrix sub-task runs at the rate of its operands' dtype
        (:func:`schedules.base.compute_dtype`, :meth:`matrix_flops_per_cycle_for`). Stored as
        sorted ``(dtype, rate)`` pairs; :meth:`to_dict` gives a mapping.
    matrix_pj_per_flop, vector_pj_per_flop : float
        Energy in picojoules of one matrix-unit FLOP (at every dtype
        ``matrix_pj_per_flop_by_dtype`` does not list) and of one vector-unit FLOP
        (:mod:`runtime_sim.contract.energy`). Every energy field defaults to 0: a chip that gives
        none has no energy model, and reports say so.
    matrix_pj_per_flop_by_dtype : mapping of str to float
        Picojoules per matrix FLOP of the dtypes whose energy differs from
        ``matrix_pj_per_flop`` (stored as sorted pairs, like the rates).
    sram_read_pj_per_byte, sram_write_pj_per_byte : float
        Picojoules per byte read from / written to a core's SRAM.
    link_pj_per_byte : float
        Picojoules per byte over the on-chip interconnect: per hop on a mesh, per byte through
        the exchange on an all-to-all chip.
    inter_chip_pj_per_byte, hbm_pj_per_byte, host_pj_per_byte : float
        Picojoules per byte between chips, read from HBM (or DRAM), over the host link.
    static_w_per_core, static_w_per_chip : float
        Static power (leakage, clocks, idle PHYs) in watts of every core and of every chip
        (what is not in a core: the exchange, the IPU-Links, the HBM PHYs), paid all run long.
    board_power_w : float
        Rated power of one chip's board in watts (a sanity bound: a run whose average power
        exceeds it is reported with a warning); 0: not known.
    notes : str
        Where the numbers come from; not compared.
    assumed : mapping of str to str
        Fields whose value no cited document gives, each with why it is what it is (``{
        "sync_cycles": "estimated from ..."}``): ``tvm-icca simulate`` prints them. Not
        compared. :meth:`with_overrides`, :func:`~runtime_sim.contract.presets.preset` overrides
        and a hardware file's ``base`` drop the mark of every field they set.

    Raises
    ------
    InvalidHardwareSpecError
        A field is impossible; the message names the first one and its allowed range.
    """

    name: str
    num_cores: int
    sram_bytes_per_core: int
    link_bandwidth: float
    clock_hz: float
    matrix_flops_per_cycle: float
    vector_flops_per_cycle: float
    matrix_tile: tuple[int, int, int] = (16, 16, 16)
    link_latency_s: float = 0.0
    inter_chip_latency_s: float = 0.0
    sync_cycles: int = 0
    shift_buffer_bytes: int = 8 * KIB
    topology: str = "all-to-all"
    num_chips: int = 1
    inter_chip_bandwidth: float = 0.0
    hbm_bandwidth: float = 0.0
    hbm_controllers: int = 0
    hbm_bytes_per_chip: int = 0
    host_bandwidth: float = 8e9
    hbm_placement: str = "edge"
    hbm_injection_bandwidth: float = 0.0
    mesh_rows: int = 0
    mesh_cols: int = 0
    mesh_reserved: str = ""
    mesh_torus: bool = False
    dtypes: tuple[str, ...] = SUPPORTED_DTYPES
    matrix_flops_per_cycle_by_dtype: tuple[tuple[str, float], ...] = ()
    matrix_pj_per_flop: float = 0.0
    matrix_pj_per_flop_by_dtype: tuple[tuple[str, float], ...] = ()
    vector_pj_per_flop: float = 0.0
    sram_read_pj_per_byte: float = 0.0
    sram_write_pj_per_byte: float = 0.0
    link_pj_per_byte: float = 0.0
    inter_chip_pj_per_byte: float = 0.0
    hbm_pj_per_byte: float = 0.0
    host_pj_per_byte: float = 0.0
    static_w_per_core: float = 0.0
    static_w_per_chip: float = 0.0
    board_power_w: float = 0.0
    notes: str = field(default="", compare=False)
    assumed: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        self.validate()

    # -- validation ---------------------------------------------------------------------
    def validate(self) -> None:
        """Convert every field to its type and check it, or raise :class:`InvalidHardwareSpecError`
        naming the first impossible field.

        Conversion happens here, inside validation, so that every way of building a spec
        (the constructor, :func:`~runtime_sim.contract.presets.preset` overrides, :meth:`with_overrides`, :meth:`from_dict`,
        JSON) is checked the same way: integers may be given as ``int``, numpy integers,
        integral floats or numeric strings (``"1472"``); numbers as any real finite value or a
        numeric string. Booleans, ``None``, NaN and infinities are refused everywhere, and
        every size is bounded (:mod:`runtime_sim.contract.hardware_limits`) so that an absurd value fails here rather
        than when the simulator allocates per-core arrays.
        """
        def bad(field_name: str, why: str, value: Any = _MISSING) -> InvalidHardwareSpecError:
            return field_error("HardwareSpec", self.name, field_name,
                               getattr(self, field_name) if value is _MISSING else value, why)

        def put(field_name: str, value: Any) -> None:
            object.__setattr__(self, field_name, value)

        if not isinstance(self.name, str) or not self.name.strip():
            raise bad("name", "must be a non-empty string")
        notes = "" if self.notes is None else self.notes
        if not isinstance(notes, str):
            raise bad("notes", "must be a string")
        put("notes", notes)

        for name, (low, high) in INT_FIELDS.items():
            value = as_int(getattr(self, name))
            if value is None or not low <= value <= high:
                raise bad(name, f"must be an integer in [{low}, {high:,}] ({WHY[name]})")
            put(name, value)
        for name, (low, high, zero_ok) in FLOAT_FIELDS.items():
            value = as_float(getattr(self, name))
            ok = value is not None and ((zero_ok and value == 0.0) or low <= value <= high)
            if not ok:
                zero = "0 or " if zero_ok and low > 0 else ""
                raise bad(name, f"must be {zero}a finite number in [{low:g}, {high:g}] ({WHY[name]})")
            put(name, value)

        tile = self.matrix_tile
        items = list(tile) if isinstance(tile, (list, tuple)) else None
        ints = [as_int(t) for t in items] if items is not None else []
        if items is None or len(items) != 3 or any(t is None or not 1 <= t <= MAX_MATRIX_TILE for t in ints):
            raise bad("matrix_tile", f"must be three integers (m, k, n) in [1, {MAX_MATRIX_TILE}]")
        put("matrix_tile", tuple(ints))

        if not isinstance(self.topology, str) or self.topology not in TOPOLOGIES:
            raise bad("topology", f"must be one of {TOPOLOGIES}")
        dtypes = self.dtypes
        if isinstance(dtypes, str):
            dtypes = (dtypes,)
        if not isinstance(dtypes, (list, tuple)) or not dtypes or any(
            not isinstance(d, str) or d not in SUPPORTED_DTYPES for d in dtypes
        ):
            raise bad("dtypes", f"must be a non-empty subset of {SUPPORTED_DTYPES}")
        put("dtypes", tuple(dict.fromkeys(dtypes)))

        # per-dtype maps: a rate (never 0) and an energy (0: not modelled), checked alike
        for name, base, zero_ok, what in (
                ("matrix_flops_per_cycle_by_dtype", "matrix_flops_per_cycle", False,
                 "FLOP per cycle per core"),
                ("matrix_pj_per_flop_by_dtype", "matrix_pj_per_flop", True, "picojoules per FLOP")):
            low, high, _ = FLOAT_FIELDS[base]
            pairs = as_pairs(getattr(self, name))
            if pairs is None or any(d not in SUPPORTED_DTYPES for d, _ in pairs):
                raise bad(name, f"must map dtypes of {SUPPORTED_DTYPES} to {what}")
            checked = {}
            for dtype, given in pairs:
                value = as_float(given)
                if value is None or not ((zero_ok and value == 0.0) or low <= value <= high):
                    raise bad(name, f"gives {dtype} {given!r}; a value is {'0 or ' if zero_ok else ''}"
                              f"a finite number in [{low:g}, {high:g}] ({what})")
                checked[dtype] = value
            put(name, tuple((d, checked[d]) for d in SUPPORTED_DTYPES if d in checked))

        markable = [f.name for f in dataclasses.fields(self) if f.name not in _UNMARKED_FIELDS]
        marks = assumed_marks(self.assumed, markable)
        if marks is None:
            raise bad("assumed", f"must map fields ({', '.join(markable)}) to why their value "
                      "is assumed (a non-empty string)")
        put("assumed", marks)

        if self.shift_buffer_bytes >= self.sram_bytes_per_core:
            raise bad("shift_buffer_bytes", "leaves no SRAM for tensors")
        if self.num_cores % self.num_chips:
            raise bad("num_cores", f"is not a multiple of num_chips={self.num_chips}")
        if self.num_chips > 1 and self.inter_chip_bandwidth <= 0:
            raise bad("inter_chip_bandwidth", "must be positive for a multi-chip system")
        if self.hbm_bandwidth > 0 and self.hbm_controllers <= 0:
            raise bad("hbm_controllers", "must be positive when hbm_bandwidth is set")
        if self.hbm_bytes_per_chip > 0 and self.hbm_bandwidth <= 0:
            raise bad("hbm_bytes_per_chip", "needs hbm_bandwidth: a chip without HBM has no "
                      "HBM capacity")
        if self.hbm_controllers > MAX_HBM_CONTROLLERS_PER_CHIP * self.num_chips:
            raise bad("hbm_controllers", f"exceeds {MAX_HBM_CONTROLLERS_PER_CHIP} per chip "
                      f"({WHY['hbm_controllers']})")

        torus = self.mesh_torus
        if isinstance(torus, str) and torus.strip().lower() in ("true", "false"):
            torus = torus.strip().lower() == "true"
        if not isinstance(torus, bool):
            raise bad("mesh_torus", "must be true or false")
        put("mesh_torus", torus)
        placement = self.hbm_placement
        if isinstance(placement, (list, tuple)):  # [[row, col], ...] from JSON or TOML
            pairs = [tuple(as_int(v) for v in p) if isinstance(p, (list, tuple)) else (None,)
                     for p in placement]
            if any(len(p) != 2 or None in p for p in pairs):
                raise bad("hbm_placement", "as a list must hold [row, col] pairs of integers")
            placement = "nodes:" + ",".join(f"({r},{c})" for r, c in pairs)
        if not isinstance(placement, str):
            raise bad("hbm_placement", f"must be one of {', '.join(HBM_PLACEMENTS)}")
        reserved = "" if self.mesh_reserved is None else self.mesh_reserved
        if not isinstance(reserved, str):
            raise bad("mesh_reserved", "must be a string such as 'rows:0,6;columns:0'")
        try:
            put("hbm_placement", canonical_places(placement, ("columns", "nodes"), edge=True))
        except ValueError as err:
            raise bad("hbm_placement", f"{err}; one of {', '.join(HBM_PLACEMENTS)}") from None
        try:
            put("mesh_reserved", canonical_places(reserved, ("rows", "columns", "nodes")))
        except ValueError as err:
            raise bad("mesh_reserved", f"{err}; e.g. 'rows:0,6;columns:0' or 'nodes:(0,3)'") from None
        if (self.mesh_rows == 0) != (self.mesh_cols == 0):
            raise bad("mesh_rows", f"and mesh_cols={self.mesh_cols} must both be 0 (derived) or "
                      "both positive")
        try:
            grid = build_mesh_grid(self)
        except ValueError as err:
            field_name, why = str(err).split(": ", 1)
            raise bad(field_name, why) from None
        object.__setattr__(self, "_grid", grid)

    # -- derived figures ----------------------------------------------------------------
    def mesh_grid(self) -> MeshGrid:
        """Where everything sits on one chip's NoC grid when ``topology`` is ``"mesh"``
        (computed and checked on construction; the one definition the topology model, the
        plan cost and the Elk tables share through :class:`runtime_sim.machine.mesh_topology.MeshTopology`)."""
        return self._grid  # type: ignore[attr-defined]

    @property
    def usable_sram_bytes(self) -> int:
        """SRAM per core left for tensor partitions once the shift buffer is reserved."""
        return self.sram_bytes_per_core - self.shift_buffer_bytes

    @property
    def cores_per_chip(self) -> int:
        return self.num_cores // self.num_chips

    @property
    def hbm_capacity_bytes(self) -> int:
        """HBM of the whole system (``hbm_bytes_per_chip x num_chips``; 0: not modelled)."""
        return self.hbm_bytes_per_chip * self.num_chips

    @property
    def peak_matrix_flops(self) -> float:
        """FLOP/s of every core's matrix unit at ``matrix_flops_per_cycle``, the rate of the
        dtypes ``matrix_flops_per_cycle_by_dtype`` does not list (float16 on the presets); a
        run's own dtype: :meth:`peak_matrix_flops_for`."""
        return self.peak_flops("matrix")

    def peak_matrix_flops_for(self, dtype: str) -> float:
        """FLOP/s of every core's matrix unit on operands of ``dtype``
        (:meth:`matrix_flops_per_cycle_for`)."""
        return self.peak_flops("matrix", dtype)

    def matrix_flops_per_cycle_for(self, dtype: str | None) -> float:
        """Matrix-unit FLOP per cycle per core on operands of ``dtype``: its entry of
        ``matrix_flops_per_cycle_by_dtype``, else ``matrix_flops_per_cycle`` (also for
        ``None``). The one lookup of the matrix rate: the per-core templates
        (:mod:`schedules.base`), the compiler's batched cost model and the floors use it."""
        for listed, rate in self.matrix_flops_per_cycle_by_dtype:
            if listed == dtype:
                return rate
        return self.matrix_flops_per_cycle

    def peak_flops(self, unit: str, dtype: str | None = None) -> float:
        """FLOP/s of the ``"matrix"`` unit of every core on operands of ``dtype`` (``None``:
        at ``matrix_flops_per_cycle``), or of its vector unit otherwise (one rate for every
        dtype)."""
        per_cycle = (self.matrix_flops_per_cycle_for(dtype) if unit == "matrix"
                     else self.vector_flops_per_cycle)
        return self.num_cores * per_cycle * self.clock_hz

    def energy_table(self) -> EnergyTable:
        """The per-action energies of this system (:mod:`runtime_sim.contract.energy`): the one
        view of the energy fields the executors' reports price their actions with."""
        return EnergyTable(**{name: getattr(self, name) for name in ENERGY_FIELDS})

    @property
    def assumed_fields(self) -> dict[str, str]:
        """``{field: why}`` of the fields no cited document gives (:attr:`assumed`)."""
        return dict(self.assumed)

    def supports_dtype(self, dtype: str) -> bool:
        return str(dtype) in self.dtypes

    def check_dtype(self, dtype: str, where: str, *, mask: bool = False, index: bool = False) -> None:
        """Raise :class:`UnsupportedDtypeError` unless this chip computes ``dtype`` (or, with
        ``mask``, holds it as a read-only mask).

        ``where`` names the tensor (``"input 'x' of operator 'mm'"``). See :func:`check_dtype`.
        """
        check_dtype(dtype, where, self, mask=mask, index=index)

    # -- (de)serialization --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["matrix_tile"] = list(self.matrix_tile)
        data["dtypes"] = list(self.dtypes)
        data["matrix_flops_per_cycle_by_dtype"] = dict(self.matrix_flops_per_cycle_by_dtype)
        data["matrix_pj_per_flop_by_dtype"] = dict(self.matrix_pj_per_flop_by_dtype)
        data["assumed"] = dict(self.assumed)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HardwareSpec":
        """A spec from a :meth:`to_dict` mapping (JSON object). Unknown or missing fields and
        every impossible value raise :class:`InvalidHardwareSpecError`."""
        if not isinstance(data, Mapping):
            raise InvalidHardwareSpecError(
                f"a HardwareSpec description must be a mapping of fields, not {type(data).__name__}"
            )
        fields_ = dataclasses.fields(cls)
        known = {f.name for f in fields_}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise InvalidHardwareSpecError(
                f"unknown HardwareSpec fields: {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        required = [f.name for f in fields_
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise InvalidHardwareSpecError(f"incomplete HardwareSpec: missing {', '.join(missing)}")
        return cls(**dict(data))  # every field is converted and checked in validate()

    def with_overrides(self, **overrides: Any) -> "HardwareSpec":
        """A copy with some fields replaced (validated again; unknown names are refused). A
        field it sets is no longer marked :attr:`assumed`: its value is the caller's."""
        return HardwareSpec.from_dict(override_fields(self.to_dict(), overrides))


def override_fields(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a :meth:`HardwareSpec.to_dict` mapping) with ``overrides``, without the
    :attr:`~HardwareSpec.assumed` marks of the fields they set (unless they set the marks).

    The one rule of overriding, shared by :meth:`HardwareSpec.with_overrides`, a preset's
    overrides and a hardware file's ``base``: a value the caller sets is the caller's.

    Parameters
    ----------
    data : mapping of str to Any
        The fields of a spec (:meth:`HardwareSpec.to_dict`) or of a preset.
    overrides : mapping of str to Any
        The fields to replace.

    Returns
    -------
    dict of str to Any
        The fields of the overridden spec, not yet validated.
    """
    out = {**data, **overrides}
    if "assumed" not in overrides:
        marks = as_pairs(data.get("assumed")) or []
        out["assumed"] = {name: why for name, why in marks if name not in overrides}
    return out


