"""Hardware description of an inter-core connected AI (ICCA) chip.

:class:`HardwareSpec` is half of the contract between the compiler and the simulated device
(the other half is the device program format, :mod:`runtime_sim.contract.program`). Every number in a
preset comes from the paper or vendor document cited beside it; overriding any field is a
``dataclasses.replace`` away (see :func:`HardwareSpec.with_overrides`), and a chip of one's own
is a JSON or TOML file (:func:`load_hardware`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from runtime_sim.contract.errors import InvalidHardwareSpecError, UnsupportedDtypeError
from runtime_sim.contract.text_files import parse_json, parse_toml, read_text


#: Topologies the device knows how to connect cores with.
TOPOLOGIES = ("all-to-all", "mesh")

#: Where a mesh chip's HBM controllers attach (:attr:`HardwareSpec.hbm_placement`): on the
#: edge ports of the grid (Elk §5; AMD's AI Engine arrays, Meta's MTIA v2), as NoC nodes filling
#: whole grid columns (Tenstorrent Wormhole and Blackhole's DRAM tiles), or as NoC nodes at given
#: ``(row, col)`` positions.
HBM_PLACEMENTS = ("edge", "columns:<col>,<col>,...", "nodes:(<row>,<col>),...")

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

# -- bounds of every field -------------------------------------------------------------------
# Sizes are bounded so that an absurd spec fails in validation, not later in ``np.zeros`` of
# the simulator (which keeps several int64 arrays per core, and per core of a chip per HBM
# controller on a mesh). Each bound is far above any real chip and reasoned below.

#: 2**20 cores: above the largest many-core systems, Cerebras WSE-3 (900,000 cores on one
#: wafer) and a Graphcore IPU-POD256 (256 x 1,472 = 376,832 tiles).
MAX_CORES = 2**20
#: 4,096 chips: 16 IPU-POD256 racks' worth of IPUs.
MAX_CHIPS = 4096
#: 4 GiB of SRAM per core: Groq's LPU, the largest on-chip SRAM, has 230 MB per chip, and an
#: IPU core 624 KiB (T10 §2.1); per core more than 4 GiB is not SRAM.
MAX_SRAM_BYTES = 2**32
#: 256 HBM controllers per chip: 8 HBM stacks (NVIDIA B200) of 32 pseudo-channels each
#: (JEDEC HBM3, JESD238: 16 channels x 2 pseudo-channels); Elk §6.1 models 4 per chip.
MAX_HBM_CONTROLLERS_PER_CHIP = 256
#: 4,096: a matrix unit's tile edge (the IPU's AMP unit works on 16, a TPU v6e MXU on 256).
MAX_MATRIX_TILE = 4096
#: Rates: 1e18 B/s is 60,000x Elk's 16 TB/s of HBM for 4 chips; 1e12 Hz is 1 THz. The lower
#: bounds (1 B/s, 1 Hz, 1e-6 FLOP/cycle) keep times finite: ``bytes / rate`` never overflows.
MAX_BANDWIDTH = 1e18
#: 1 PiB of HBM per chip: NVIDIA's B300 carries 288 GB in 8 stacks; 3,500x that is not a
#: memory attached to one chip.
MAX_HBM_BYTES_PER_CHIP = 2**50
_INT_FIELDS: dict[str, tuple[int, int]] = {
    "num_cores": (1, MAX_CORES),
    "sram_bytes_per_core": (1, MAX_SRAM_BYTES),
    "num_chips": (1, MAX_CHIPS),
    "sync_cycles": (0, 10**9),
    # 0 would divide every transfer into infinitely many chunks (T10 §5's shift buffer)
    "shift_buffer_bytes": (1, MAX_SRAM_BYTES),
    "hbm_controllers": (0, MAX_HBM_CONTROLLERS_PER_CHIP * MAX_CHIPS),
    # 0: not modelled (no capacity check)
    "hbm_bytes_per_chip": (0, MAX_HBM_BYTES_PER_CHIP),
    # 0: derived from the core count (:func:`mesh_shape`)
    "mesh_rows": (0, MAX_CORES),
    "mesh_cols": (0, MAX_CORES),
}
#: (lowest positive value, highest value, whether 0 is allowed) of every real-valued field.
_FLOAT_FIELDS: dict[str, tuple[float, float, bool]] = {
    "link_bandwidth": (1.0, MAX_BANDWIDTH, False),
    "clock_hz": (1.0, 1e12, False),
    "matrix_flops_per_cycle": (1e-6, 1e9, False),
    "vector_flops_per_cycle": (1e-6, 1e9, False),
    "host_bandwidth": (1.0, MAX_BANDWIDTH, False),
    "link_latency_s": (0.0, 1.0, True),
    "inter_chip_latency_s": (0.0, 1.0, True),
    "inter_chip_bandwidth": (1.0, MAX_BANDWIDTH, True),
    "hbm_bandwidth": (1.0, MAX_BANDWIDTH, True),
    "hbm_injection_bandwidth": (1.0, MAX_BANDWIDTH, True),
}
_WHY = {
    "num_cores": "cores of the system; WSE-3 has 900,000",
    "sram_bytes_per_core": "bytes of SRAM per core",
    "num_chips": "chips of the system",
    "sync_cycles": "cycles of synchronization per step",
    "shift_buffer_bytes": "the per-core buffer transfers are cut into; 0 would divide by zero",
    "hbm_controllers": "HBM3 gives at most 8 stacks x 32 pseudo-channels per chip",
    "hbm_bytes_per_chip": "bytes of HBM attached to each chip, 0 when the capacity is not "
                          "modelled",
    "link_bandwidth": "bytes per second",
    "clock_hz": "Hz",
    "matrix_flops_per_cycle": "FLOP per cycle per core",
    "vector_flops_per_cycle": "FLOP per cycle per core",
    "host_bandwidth": "bytes per second per chip",
    "link_latency_s": "seconds",
    "inter_chip_latency_s": "seconds per chip crossing, on top of link_latency_s",
    "inter_chip_bandwidth": "bytes per second, 0 for a single chip",
    "hbm_bandwidth": "bytes per second, 0 without HBM",
    "hbm_injection_bandwidth": "bytes per second one controller injects into the NoC, 0 for "
                               "no cap beyond its links",
    "mesh_rows": "NoC grid rows per chip, 0 to derive them from the core count",
    "mesh_cols": "NoC grid columns per chip, 0 to derive them from the core count",
}
_MISSING = object()
#: Fields that describe a spec rather than define the chip: never marked assumed.
_UNMARKED_FIELDS = ("name", "notes", "assumed")


def _pairs(value: Any) -> list[tuple[Any, Any]] | None:
    """A mapping field given as a mapping (JSON object, TOML table) or as ``(key, value)``
    pairs (its stored form), as a list of pairs with distinct string keys; None otherwise."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (list, tuple)) and all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        items = [tuple(p) for p in value]
    else:
        return None
    keys = [k for k, _ in items]
    if any(not isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
        return None
    return items


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
    converted and checked on construction (:meth:`validate`); the presets (:func:`preset`)
    cite a source for each number.

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
        of exactly ``cores_per_chip`` cores (:func:`mesh_shape`), widened by the controller
        columns of a ``columns:`` placement. Grid positions that hold neither a controller nor
        a reserved node take the cores in row-major order; spare positions are routers only.
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
    notes : str
        Where the numbers come from; not compared.
    assumed : mapping of str to str
        Fields whose value no cited document gives, each with why it is what it is (``{
        "sync_cycles": "estimated from ..."}``): ``tvm-icca simulate`` prints them. Not
        compared. :meth:`with_overrides`, :func:`preset` overrides and a hardware file's
        ``base`` drop the mark of every field they set.

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
    notes: str = field(default="", compare=False)
    assumed: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        self.validate()

    # -- validation ---------------------------------------------------------------------
    def validate(self) -> None:
        """Convert every field to its type and check it, or raise :class:`InvalidHardwareSpecError`
        naming the first impossible field.

        Conversion happens here, inside validation, so that every way of building a spec
        (the constructor, :func:`preset` overrides, :meth:`with_overrides`, :meth:`from_dict`,
        JSON) is checked the same way: integers may be given as ``int``, numpy integers,
        integral floats or numeric strings (``"1472"``); numbers as any real finite value or a
        numeric string. Booleans, ``None``, NaN and infinities are refused everywhere, and
        every size is bounded (:data:`LIMITS`) so that an absurd value fails here rather
        than when the simulator allocates per-core arrays.
        """
        # repr: a name with a newline must not break the one-paragraph message
        spec_name = repr(self.name[:40]) if isinstance(self.name, str) else "'?'"

        def bad(field_name: str, why: str, value: Any = _MISSING) -> InvalidHardwareSpecError:
            shown = repr(getattr(self, field_name) if value is _MISSING else value)
            if len(shown) > 40:
                shown = shown[:30] + "..." + shown[-6:]
            return InvalidHardwareSpecError(
                f"invalid HardwareSpec {spec_name}: {field_name}={shown} {why}"
            )

        def put(field_name: str, value: Any) -> None:
            object.__setattr__(self, field_name, value)

        if not isinstance(self.name, str) or not self.name.strip():
            raise bad("name", "must be a non-empty string")
        notes = "" if self.notes is None else self.notes
        if not isinstance(notes, str):
            raise bad("notes", "must be a string")
        put("notes", notes)

        for name, (low, high) in _INT_FIELDS.items():
            value = _as_int(getattr(self, name))
            if value is None or not low <= value <= high:
                raise bad(name, f"must be an integer in [{low}, {high:,}] ({_WHY[name]})")
            put(name, value)
        for name, (low, high, zero_ok) in _FLOAT_FIELDS.items():
            value = _as_float(getattr(self, name))
            ok = value is not None and ((zero_ok and value == 0.0) or low <= value <= high)
            if not ok:
                zero = "0 or " if zero_ok and low > 0 else ""
                raise bad(name, f"must be {zero}a finite number in [{low:g}, {high:g}] ({_WHY[name]})")
            put(name, value)

        tile = self.matrix_tile
        items = list(tile) if isinstance(tile, (list, tuple)) else None
        ints = [_as_int(t) for t in items] if items is not None else []
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

        low, high, _ = _FLOAT_FIELDS["matrix_flops_per_cycle"]
        rates = _pairs(self.matrix_flops_per_cycle_by_dtype)
        if rates is None or any(d not in SUPPORTED_DTYPES for d, _ in rates):
            raise bad("matrix_flops_per_cycle_by_dtype", "must map dtypes of "
                      f"{SUPPORTED_DTYPES} to FLOP per cycle per core")
        checked = {}
        for dtype, rate in rates:
            value = _as_float(rate)
            if value is None or not low <= value <= high:
                raise bad("matrix_flops_per_cycle_by_dtype", f"gives {dtype} {rate!r}; a rate is "
                          f"a finite number in [{low:g}, {high:g}] (FLOP per cycle per core)")
            checked[dtype] = value
        put("matrix_flops_per_cycle_by_dtype",
            tuple((d, checked[d]) for d in SUPPORTED_DTYPES if d in checked))

        marks = _pairs(self.assumed)
        markable = [f.name for f in dataclasses.fields(self) if f.name not in _UNMARKED_FIELDS]
        if marks is None or any(name not in markable or not isinstance(why, str) or not why.strip()
                                for name, why in marks):
            raise bad("assumed", f"must map fields ({', '.join(markable)}) to why their value "
                      "is assumed (a non-empty string)")
        marked = dict(marks)
        put("assumed", tuple((name, marked[name].strip()) for name in markable if name in marked))

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
                      f"({_WHY['hbm_controllers']})")

        torus = self.mesh_torus
        if isinstance(torus, str) and torus.strip().lower() in ("true", "false"):
            torus = torus.strip().lower() == "true"
        if not isinstance(torus, bool):
            raise bad("mesh_torus", "must be true or false")
        put("mesh_torus", torus)
        placement = self.hbm_placement
        if isinstance(placement, (list, tuple)):  # [[row, col], ...] from JSON or TOML
            pairs = [tuple(_as_int(v) for v in p) if isinstance(p, (list, tuple)) else (None,)
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
            put("hbm_placement", _canonical_places(placement, ("columns", "nodes"), edge=True))
        except ValueError as err:
            raise bad("hbm_placement", f"{err}; one of {', '.join(HBM_PLACEMENTS)}") from None
        try:
            put("mesh_reserved", _canonical_places(reserved, ("rows", "columns", "nodes")))
        except ValueError as err:
            raise bad("mesh_reserved", f"{err}; e.g. 'rows:0,6;columns:0' or 'nodes:(0,3)'") from None
        if (self.mesh_rows == 0) != (self.mesh_cols == 0):
            raise bad("mesh_rows", f"and mesh_cols={self.mesh_cols} must both be 0 (derived) or "
                      "both positive")
        try:
            grid = _mesh_grid(self)
        except ValueError as err:
            field_name, why = str(err).split(": ", 1)
            raise bad(field_name, why) from None
        object.__setattr__(self, "_grid", grid)

    # -- derived figures ----------------------------------------------------------------
    def mesh_grid(self) -> "MeshGrid":
        """Where everything sits on one chip's NoC grid when ``topology`` is ``"mesh"``
        (computed and checked on construction; the one definition the topology model, the
        plan cost and the Elk tables share through :class:`runtime_sim.machine.topology.MeshTopology`)."""
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
        return HardwareSpec.from_dict(_overridden(self.to_dict(), overrides))


def _overridden(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a :meth:`HardwareSpec.to_dict` mapping) with ``overrides``, without the
    :attr:`~HardwareSpec.assumed` marks of the fields they set (unless they set the marks)."""
    out = {**data, **overrides}
    if "assumed" not in overrides:
        marks = _pairs(data.get("assumed")) or []
        out["assumed"] = {name: why for name, why in marks if name not in overrides}
    return out


def _as_int(value: Any) -> int | None:
    """``value`` as an int if it is one exactly (int, numpy integer, integral float, numeric
    string), else None. Booleans are not integers here."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            return int(text)
        except ValueError:
            value = _as_float(text)
            if value is None:
                return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isfinite(f) and f.is_integer():
            return int(f)
    return None


def _as_float(value: Any) -> float | None:
    """``value`` as a finite float (real numbers and numeric strings), else None: NaN and
    infinities are refused here, once for every field."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, numbers.Real):
        return None
    try:
        f = float(value)
    except (OverflowError, ValueError, TypeError):
        return None
    return f if math.isfinite(f) else None


# -- the mesh grid ---------------------------------------------------------------------------
_PLACE_KINDS = ("rows", "columns", "nodes")


def _parse_places(text: str) -> dict[str, list]:
    """``"rows:0,6;columns:0;nodes:(2,3),(4,5)"`` as ``{kind: [index or (row, col), ...]}``;
    ValueError naming what is wrong."""
    out: dict[str, list] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        kind, sep, body = part.partition(":")
        kind = kind.strip().lower()
        if not sep or kind not in _PLACE_KINDS:
            raise ValueError(f"cannot read '{part}' (a part is rows:..., columns:... or nodes:...)")
        if kind in out:
            raise ValueError(f"'{kind}' is given twice")
        if kind == "nodes":
            body = body.replace(" ", "")
            items = [tuple(_as_int(v) for v in pair.split(",")) for pair in
                     body.removeprefix("(").removesuffix(")").split("),(")] if body else []
            if not items or any(len(p) != 2 or None in p or min(p) < 0 for p in items):
                raise ValueError(f"cannot read nodes '{body}' (write (row,col),(row,col),...)")
        else:
            items = [_as_int(v) for v in body.split(",")]
            if not items or any(v is None or v < 0 for v in items):
                raise ValueError(f"cannot read {kind} '{body.strip()}' (write non-negative indices, "
                                 "comma-separated)")
        if len(set(items)) != len(items):
            raise ValueError(f"{kind} lists a position twice")
        out[kind] = items
    return out


def _canonical_places(text: str, kinds: tuple[str, ...], edge: bool = False) -> str:
    """The one spelling of a placement string (so equal specs compare and hash equal)."""
    if edge and text.strip().lower() in ("", "edge"):
        return "edge"
    places = _parse_places(text)
    if edge and len(places) != 1:
        raise ValueError(f"cannot read '{text}'")
    unknown = [k for k in places if k not in kinds]
    if unknown:
        raise ValueError(f"'{unknown[0]}' is not a placement here")
    parts = []
    for kind in _PLACE_KINDS:
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
    """One chip's NoC grid (:meth:`HardwareSpec.mesh_grid`): its shape, whether its rings wrap,
    the ``(row, col)`` of each of its cores (local index order) and of each of its HBM
    controllers (``None``: on the edge ports)."""

    rows: int
    cols: int
    torus: bool
    cores: tuple[tuple[int, int], ...]
    controllers: tuple[tuple[int, int], ...] | None


def _mesh_grid(hw: "HardwareSpec") -> MeshGrid:
    """The grid of ``hw`` (see :class:`HardwareSpec`); ValueError ``"<field>: <why>"``."""
    cpc = hw.cores_per_chip
    placement = _parse_places(hw.hbm_placement) if hw.hbm_placement != "edge" else {}
    reserved = _parse_places(hw.mesh_reserved)
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


# -- presets ---------------------------------------------------------------------------------
# Every field of a preset is either cited in a comment beside it or named, with the reason, in
# the preset's ``assumed`` mapping (printed by ``tvm-icca simulate``; tests/test_hardware.py
# checks that each names a real field).
#
# IPU Mk2 (GC200): 1,472 cores x 624 KiB (T10 §2.1); 5.5 GB/s per core link (T10 §2.1);
# clock 1.325 GHz in the Elk artifact, rounded to 1.33 GHz; 118 cycles of synchronization per
# step (Elk artifact, measured) and an 8 KiB shift buffer (T10 §5).
# Matrix rates per dtype, from Graphcore's figures per chip:
# * float16: 250 TFLOPS FP16 (T10 Table 3; Graphcore's IPU-POD128 datasheet: 31.955 PFLOPS
#   FP16.16 for 128 GC200 IPUs, 249.6 TFLOPS each) -> 250e12 / 1472 / 1.33e9 ~ 128 FLOP/cycle;
# * float32: the same datasheet's 7.989 PFLOPS FP32 for 128 IPUs, 62.4 TFLOPS each, a quarter
#   of FP16 -> 32 FLOP/cycle;
# * bfloat16: not an IPU format (Graphcore's IPU Programmer's Guide §2: arithmetic in IEEE
#   single or half precision); modelled at the float16 rate so that bfloat16 models still run
#   (marked assumed).
# Vector: other ops 31.2 TFLOPS on 4 chips (Elk §6.3) -> ~4 FLOP/cycle/core; Elk's emulator
# gives one figure, so every dtype runs at it (marked assumed).
#
# Latencies (issue 9, item 4). What was looked for and what was found:
# * Jia, Tillman, Maggioni, Scarpazza, "Dissecting the Graphcore IPU architecture via
#   microbenchmarking" (arXiv 1912.03413, 2019) measured on-chip tile-to-tile and IPU-Link
#   latencies (their §4, "no-load" and "full-load" point-to-point benchmarks; a public summary
#   reports "congestion increases on-chip latency only marginally (+24%) but affects off chip
#   IPU link latency significantly with slowdowns of 4.0...7.7x"). Their absolute latency
#   figures could NOT be retrieved here, so none of the values below is theirs.
# * Per-hop link latency, ``link_latency_s``: 126 cycles (94.7 ns at 1.33 GHz). Poplar's
#   ``Target::getMaxIPUSyncDelay()`` is the start delay Graphcore's own poplibs cost
#   estimates add once per exchange ("the delay caused by syncing i.e. the time before when
#   all tiles are done, and when the last tile is released from sync", graphcore/poplibs,
#   popops reduction cost estimate). Its value, 126 cycles, is not in Graphcore's
#   documentation that could be searched; it is quoted from a public third-party IPU cost
#   model that reads it from the Poplar target ("the target's getMaxIPUSyncDelay is a
#   conservative bound for its route/start latency", exchange_transfer_cycles: 126). It is
#   used here as the route/start latency of one staged chunk over one hop: conservative
#   (an upper bound for one transfer's start-up), and it costs about 6% of an 8 KiB chunk's
#   1.49 us at 5.5 GB/s.
# * Cross-chip latency, ``inter_chip_latency_s``: 15 ns per IPU-Link crossing, on top of
#   the hop's own latency: the per-hop sync latency Graphcore's poplibs tools give their
#   multi-IPU model (graphcore/poplibs tools, ``setGlobalSyncLatency``:
#   ``const double syncLatencyPerHop = 15e-9;``, "One hop within a card plus one hop per card
#   pair"). A sync signal is the fastest thing an IPU-Link carries, so this is a lower bound
#   for a data chunk (Jia et al.'s measured IPU-Link figure was not retrievable, see above).
# * Synchronization per step, ``sync_cycles``: 118 cycles on one chip (the Elk artifact's
#   constant, measured on the IPU). On several chips a step's barrier also crosses the
#   IPU-Links: poplibs' multi-IPU model charges ``ceil(15e-9 * clock * hops * 2)`` cycles
#   with ``hops = 1 + (chips / 2) / 2`` (same ``setGlobalSyncLatency``), i.e. 80 cycles for 4
#   chips at 1.33 GHz, so 4-chip presets use 118 + 80 = 198 cycles. (Poplar's single-chip
#   target model, ``Target::getGlobalSyncCycles``, is larger, ~600 cycles, see
#   Poplar's target model; the Elk figure is kept as the measured one.)
# * Mesh preset: no source gives a router-hop latency for Elk's hypothetical mesh IPU. Its
#   per-hop latency is set so that a corner-to-corner XY route of one chip's 32 x 46 grid
#   (76 hops) costs what one all-to-all exchange transfer costs (126 cycles), i.e. the two
#   topologies compare at equal worst-case route latency: 126 / 76 ~ 1.66 cycles per hop.
_CLOCK_HZ = 1.33e9
_LINK_LATENCY_CYCLES = 126
_INTER_CHIP_LATENCY_S = 15e-9
_SYNC_CYCLES = 118
_MESH_DIAMETER_HOPS = (32 - 1) + (46 - 1)  # runtime_sim.machine.topology.mesh_shape(1472) = (32, 46)


def _multi_chip_sync_cycles(chips: int) -> int:
    """poplibs' multi-IPU sync model on top of the on-chip barrier (see above)."""
    hops = 1 + (chips // 2) // 2
    return _SYNC_CYCLES + math.ceil(_INTER_CHIP_LATENCY_S * _CLOCK_HZ * hops * 2)


_IPU_MK2_ASSUMED = {
    "dtypes": "bfloat16 is not an IPU Mk2 format (Graphcore: IEEE single and half precision); "
              "kept so that bfloat16 models run, at the float16 matrix rate",
    "vector_flops_per_cycle": "Elk §6.3's emulator figure (31.2 TFLOPS for non-MatMul ops on 4 "
                              "chips), one rate for every dtype; no per-dtype Graphcore figure",
    "matrix_tile": "the AMP unit's shape is not published; padded to 16 as the 16x16 array of "
                   "T10's benchmark problem",
    "link_latency_s": "126 cycles: Poplar's max IPU sync delay as a third-party cost model quotes "
                      "it, used as a chunk's per-hop start latency",
}
_IPU_MK2 = dict(
    num_cores=1472,
    sram_bytes_per_core=624 * KIB,
    link_bandwidth=5.5e9,
    clock_hz=_CLOCK_HZ,
    matrix_flops_per_cycle=128.0,  # float16 (and bfloat16, assumed)
    matrix_flops_per_cycle_by_dtype={"float32": 32.0},
    vector_flops_per_cycle=4.0,
    matrix_tile=(16, 16, 16),
    link_latency_s=_LINK_LATENCY_CYCLES / _CLOCK_HZ,
    sync_cycles=_SYNC_CYCLES,
    shift_buffer_bytes=8 * KIB,
    topology="all-to-all",
    host_bandwidth=8e9,  # the IPU's off-chip bandwidth (T10 Table 3)
    assumed=_IPU_MK2_ASSUMED,
)
#: Elk §6.1 emulates 4 HBM3E modules per chip. An 8-high HBM3E stack holds 24 GB (eight 24 Gb
#: dies; Micron's HBM3E 8-high, also the capacity its 12-high 36 GB part raises by 50%), at
#: about 1.2 TB/s per stack (Micron): four stacks are 96 GB per chip.
_HBM3E_STACKS_PER_CHIP = 4
_HBM3E_STACK_BYTES = 24 * GIB
#: What the 4-chip presets add: 640 GB/s between chips (Elk §5), the IPU-Link latency and the
#: multi-chip barrier (see above).
_POD4 = dict(num_cores=4 * 1472, num_chips=4, inter_chip_bandwidth=640e9,
             inter_chip_latency_s=_INTER_CHIP_LATENCY_S, sync_cycles=_multi_chip_sync_cycles(4),
             assumed={**_IPU_MK2_ASSUMED, "inter_chip_latency_s": (
                 "15 ns per IPU-Link crossing: poplibs' sync latency per hop, used for data")})
#: What Elk's HBM setting leaves open: the capacity of its HBM3E modules.
_HBM_CAPACITY_ASSUMED = {"hbm_bytes_per_chip": "Elk §6.1 gives 4 HBM3E modules per chip, not "
                         "their capacity; 8-high 24 GB stacks (Micron) assumed"}
#: What Elk's mesh (§5) leaves open: no grid, link or router figure is given.
_ELK_MESH_ASSUMED = {
    "link_bandwidth": "Elk gives no mesh link figure; the IPU's 5.5 GB/s core link per mesh link",
    "link_latency_s": "no source gives a router hop: a corner-to-corner route of the 32 x 46 grid "
                      "costs one all-to-all exchange transfer (126 cycles)",
    "mesh_rows": "Elk gives no grid; the most square grid of 1,472 cores (32 x 46)",
    "mesh_cols": "Elk gives no grid; the most square grid of 1,472 cores (32 x 46)",
    "hbm_injection_bandwidth": "Elk gives no controller figure: no cap beyond the edge links",
}


# Tenstorrent mesh chips (issue 27, "mesh hardware as built"): DRAM controllers inside the grid
# as NoC nodes, two NoCs forming a 2-D torus. Every figure was read in Tenstorrent's public
# sources, cited per line: the tt-metal SoC descriptors (tt_metal/soc_descriptors/
# wormhole_b0_80_arch.yaml, blackhole_140_arch.yaml: NoC coordinates are x-y, i.e. column-row),
# tt-metal's Blackhole NoC header (tt_metal/hw/inc/blackhole/noc/noc_parameters.h), the ISA
# documentation (tenstorrent/tt-isa-documentation, WormholeB0/...), the NoC estimator tt-npe
# (tt_npe/cpp/include/device_models/{wormhole_b0,blackhole}.hpp) and the boards' product
# specifications (docs.tenstorrent.com, aibs/wormhole/specifications and
# aibs/blackhole/specifications).
#
# How the model maps them: one bidirectional torus stands for the two unidirectional tori
# (NoC 0 runs east and south, NoC 1 west and north, so each directed link is one NoC's link)
# and a transfer takes the shorter way round, as software choosing the NoC would; one
# "HBM controller" is one DRAM tile (a NoC endpoint), reading an equal share of the chip's
# GDDR6 bandwidth (each channel pair is exposed on 3 tiles).
_WORMHOLE_DRAM_TILES = (  # (row, col) = (y, x) of the 18 distinct DRAM tiles of the descriptor's
    # dram list: x=0 at y=0,1,11,5,6,7 and x=5 at every y
    (0, 0), (1, 0), (11, 0), (5, 0), (6, 0), (7, 0),
    (0, 5), (1, 5), (11, 5), (2, 5), (9, 5), (10, 5), (3, 5), (4, 5), (8, 5), (5, 5), (6, 5), (7, 5),
)
# Matrix rates per dtype (WormholeB0/TensixTile/TensixCoprocessor/MatrixUnit.md, Performance:
# MVMUL peaks at 4.096 TFLOP/s per Tensix with one fidelity phase, 2.048 with two, 1.024 with
# four; SrcASrcB.md, "Fidelity phases": "reasonable" precision takes phases 0 and 1 for BF16,
# all four for FP16 and TF32; FP32 operands enter SrcA/SrcB as TF32, the low 13 mantissa bits
# dropped). BFP8 and FP8 (the product pages' other figures) are formats no dtype of ours maps to.
_TT_FP16_PER_CYCLE = 1024.0  # four phases
_TT_BF16_PER_CYCLE = 2048.0  # two phases
_TT_WORMHOLE = dict(
    name="tt-wormhole",
    # The n150 board as sold: 72 Tensix ("Tensix Cores 72", docs.tenstorrent.com/aibs/wormhole/
    # specifications; MatrixUnit.md: "an n150 board will have 1 ASIC with 72 tiles") of the
    # ASIC's 80 (functional_workers of the descriptor: x = 1-4, 6-9, y = 1-5, 7-11). Harvesting
    # fuses off whole Tensix rows (tt-umd wormhole_coordinate_manager.cpp: the harvesting mask
    # has a bit per row), which row depends on the die: the last one (y = 11) is reserved here
    num_cores=72,
    sram_bytes_per_core=1499136,  # worker_l1_size of the descriptor (1464 KiB of L1 per Tensix)
    # One flit of 256 bits (32 bytes) per cycle per NoC hop (WormholeB0/NoC/README.md,
    # Performance; DRAMTile/README.md: "each hop ... can sustain 32 GB/s"); tt-npe models an
    # effective 30 B/cycle for large transfers
    link_bandwidth=32e9,
    clock_hz=1e9,  # "AI Clock 1 GHz" (n150 specifications; MatrixUnit.md's standard clock)
    # float16: 72 x 1,024 x 1 GHz = 73.7 TFLOPS, the specifications' "TeraFLOPS (FP16) 74"
    matrix_flops_per_cycle=_TT_FP16_PER_CYCLE,
    # bfloat16: 72 x 2,048 x 1 GHz = 147 TFLOPS, the specifications' BLOCKFP8 figure (148), whose
    # full precision is the same two phases; float32 as TF32 at four phases: 73.7 TFLOPS
    matrix_flops_per_cycle_by_dtype={"bfloat16": _TT_BF16_PER_CYCLE, "float32": _TT_FP16_PER_CYCLE},
    # SFPMAD: 0.064 TFLOP/s per Vector Unit at FP32 (MatrixUnit.md); the SFPU is 32 lanes of
    # 32 bits (VectorUnit.md), so every dtype is computed at this one rate
    vector_flops_per_cycle=64.0,
    matrix_tile=(8, 16, 16),  # MVMUL: an 8x16 SrcB times a 16x16 SrcA (MVMUL.md)
    link_latency_s=9e-9,  # router to neighbouring router: 9 cycles (NoC/README.md)
    sync_cycles=270,  # assumed (below): tt-npe's worst NoC read latency
    # a NoC packet carries at most 256 data flits = 8 KiB (NoC/README.md): one staged chunk
    shift_buffer_bytes=8 * KIB,
    topology="mesh",
    # twelve GDDR6 channels at 24 GB/s = 288 GB/s per ASIC (DRAMTile/README.md; n150
    # specifications: 288 GB/sec); 18 DRAM tiles
    hbm_bandwidth=288e9, hbm_controllers=18,
    hbm_bytes_per_chip=12 * GIB,  # the n150's 12 GB of GDDR6 in 6 banks (README.md, specifications)
    hbm_placement="nodes:" + ",".join(f"({r},{c})" for r, c in _WORMHOLE_DRAM_TILES),
    # a tile's NIU injects one flit per cycle per NoC (NoC/README.md), 2 NoCs; tt-npe measures
    # 23.2 B/cycle from a DRAM tile, so its cap is conservatively 2 x 23.2 GB/s
    hbm_injection_bandwidth=2 * 23.2e9,
    mesh_rows=12, mesh_cols=10,  # grid x_size 10, y_size 12 (descriptor; tt-npe: 12 rows, 10 cols)
    # no Tensix in rows 0 and 6 (Ethernet tiles) nor column 0 (ARC, PCIe, router-only, DRAM);
    # row 11's Tensix are the harvested ones (see num_cores): routers only
    mesh_reserved="rows:0,6,11;columns:0",
    mesh_torus=True,  # "The NoCs connect the various tiles to form a 2D torus" (README.md)
    host_bandwidth=31.5e9,  # PCI Express 4.0 x16 (README.md): 16 GT/s x 16 lanes x 128/130 / 8
    assumed={
        "sync_cycles": "no source gives a chip-wide barrier: tt-npe's worst NoC read latency (a "
                       "request and its response across a row and a column), 270 cycles",
        "mesh_reserved": "which Tensix row of the 80 is fused off depends on the die; the last "
                         "(y = 11) is chosen",
    },
    notes="Tenstorrent Wormhole n150: one Wormhole B0, 72 of 80 Tensix on a 10x12 NoC torus, "
          "288 GB/s GDDR6 on 18 DRAM tiles in columns 0 and 5 (n150 specifications, tt-metal "
          "SoC descriptor, tt-isa-documentation, tt-npe)",
)
_TT_BLACKHOLE = dict(
    name="tt-blackhole",
    # The p150 as sold: 120 Tensix of the ASIC's 140 (descriptor functional_workers: x = 1-7,
    # 10-16, y = 2-11; noc_parameters.h NUM_TENSIXES 140). Tenstorrent's specifications first
    # listed 140 for the p150a/p150b (120 for the p100a); firmware 19.5.0 enables 120 on every
    # p150 (BLOCKFP8 774 -> 664 TFLOPS, reported 2026-02-07) and docs.tenstorrent.com's
    # QuietBox 2 guide has "120 ... enabled (two columns are harvested)". Blackhole harvests
    # whole Tensix columns (tt-umd blackhole_coordinate_manager.cpp); which two depends on the
    # die: the last two (x = 15, 16) are reserved here
    num_cores=120,
    sram_bytes_per_core=1499136,  # worker_l1_size of the descriptor ("1.5 MB per Tensix Core", spec)
    # 512-bit (64-byte) flits (noc_parameters.h NOC_PAYLOAD_WIDTH 512) at 1.35 GHz; one flit
    # per cycle per hop is Wormhole's documented rate (tt-npe models 60.9 B/cycle)
    link_bandwidth=64 * 1.35e9,
    clock_hz=1.35e9,  # AI clock "up to 1.35 GHz" (specification; tt-npe ai_clk_ghz = 1.35)
    # Wormhole's fidelity phases (above), assumed for Blackhole's matrix unit; consistent with
    # the figures Tenstorrent gives: 120 x 4,096 x 1.35 GHz = 664 TFLOPS, the BLOCKFP8 figure
    # at one phase; the 372 TFLOPS "16-bit" of Hot Chips 2024 for 140 Tensix is 1,968 FLOP per
    # cycle, two phases' 2,048 (bfloat16) within 4%
    matrix_flops_per_cycle=_TT_FP16_PER_CYCLE,
    matrix_flops_per_cycle_by_dtype={"bfloat16": _TT_BF16_PER_CYCLE, "float32": _TT_FP16_PER_CYCLE},
    vector_flops_per_cycle=64.0,  # assumed (below): Wormhole's SFPMAD rate
    matrix_tile=(8, 16, 16),  # assumed (below): Wormhole's MVMUL shape
    link_latency_s=11 / 1.35e9,  # tt-npe: 11 cycles per hop ("~11.5")
    sync_cycles=329,  # assumed (below): tt-npe's worst NoC read latency, as for Wormhole
    shift_buffer_bytes=16 * KIB,  # NOC_MAX_BURST_SIZE: 256 flits x 64 bytes (noc_parameters.h)
    topology="mesh",
    # 32 GB GDDR6 at 16 GT/s on a 256-bit bus: 512 GB/s (p150 specification); 8 banks, each on
    # 3 tiles: 24 DRAM tiles filling columns 0 and 9 (descriptor dram list, x = 0 and 9, y = 0-11)
    hbm_bandwidth=512e9, hbm_controllers=24, hbm_placement="columns:0,9",
    hbm_bytes_per_chip=32 * GIB,  # the p150's 32 GB of GDDR6 (specification)
    hbm_injection_bandwidth=2 * 54e9,  # tt-npe: a DRAM tile injects 54 GB/s per NoC, 2 NoCs
    mesh_rows=12, mesh_cols=17,  # grid x_size 17, y_size 12 (descriptor)
    # no Tensix in rows 0-1 (PCIe, ARC, router-only, Ethernet) nor column 8 (router-only);
    # columns 15 and 16 hold the harvested Tensix (see num_cores): routers only
    mesh_reserved="rows:0,1;columns:8,15,16",
    mesh_torus=True,  # tt-npe routes both Blackhole NoCs with wrap-around
    host_bandwidth=63.0e9,  # PCI Express 5.0 x16 (specification): 32 GT/s x 16 x 128/130 / 8
    assumed={
        "link_bandwidth": "one 64-byte flit per cycle per hop, Wormhole's documented rate",
        "matrix_flops_per_cycle": "float16 at four fidelity phases, Wormhole's rule (no Blackhole "
                                  "FP16 figure found)",
        "matrix_flops_per_cycle_by_dtype": "bfloat16 at two phases and float32 (TF32) at four, "
                                           "Wormhole's rule; bfloat16 matches Hot Chips 2024's "
                                           "16-bit figure within 4%",
        "vector_flops_per_cycle": "Wormhole's SFPMAD rate (32 FP32 lanes)",
        "matrix_tile": "Wormhole's MVMUL shape",
        "sync_cycles": "no source gives a chip-wide barrier: tt-npe's worst NoC read latency, 329 "
                       "cycles",
        "mesh_reserved": "which two Tensix columns are fused off depends on the die; the last two "
                         "(x = 15, 16) are chosen",
    },
    notes="Tenstorrent Blackhole p150: 120 of 140 Tensix on a 17x12 NoC torus, 512 GB/s GDDR6 "
          "on 24 DRAM tiles in columns 0 and 9 (p150 specification, tt-metal SoC descriptor and "
          "NoC header, tt-npe)",
)


def _preset_table() -> dict[str, dict[str, Any]]:
    return {
        "ipu-mk2": dict(_IPU_MK2, name="ipu-mk2", notes="Graphcore IPU Mk2 GC200 (T10 §2.1, Table 3)"),
        # The T10 benchmark problem: a 16x16 systolic array (256 MAC = 512 FLOP per cycle).
        "ipu-mk2-systolic": dict(
            _IPU_MK2, name="ipu-mk2-systolic", matrix_flops_per_cycle=512.0,
            matrix_flops_per_cycle_by_dtype={},
            assumed={**_IPU_MK2_ASSUMED, "matrix_flops_per_cycle_by_dtype": (
                "T10's benchmark problem gives one 16x16 array and FP16 tensors; every dtype runs "
                "at its rate")},
            notes="IPU Mk2 with a 16x16 systolic array per core (the matmul problem of T10's "
                  "artifact; tvm-icca plan matmul --cost-model t10-bench)",
        ),
        # IPU-POD4: 4 chips, 5,888 cores, 640 GB/s between chips (Elk §5).
        "ipu-pod4": dict(
            _IPU_MK2, **_POD4, name="ipu-pod4", notes="4 x IPU Mk2 (Elk §5)",
        ),
        # Elk's HBM setting: 4 HBM3E modules per chip, 16 TB/s across 4 chips (Elk §6.1).
        "ipu-pod4-hbm": dict(_IPU_MK2, **_POD4) | dict(
            name="ipu-pod4-hbm", hbm_bandwidth=16e12, hbm_controllers=16,
            hbm_bytes_per_chip=_HBM3E_STACKS_PER_CHIP * _HBM3E_STACK_BYTES,
            assumed={**_POD4["assumed"], **_HBM_CAPACITY_ASSUMED},
            notes="IPU-POD4 with 16 TB/s of HBM (Elk §6.1), 4 x 24 GB HBM3E per chip",
        ),
        # Mesh variant: 2D mesh, HBM controllers on the edges (Elk §5, §6.1).
        "ipu-pod4-hbm-mesh": dict(_IPU_MK2, **_POD4) | dict(
            name="ipu-pod4-hbm-mesh", hbm_bandwidth=16e12, hbm_controllers=16,
            hbm_bytes_per_chip=_HBM3E_STACKS_PER_CHIP * _HBM3E_STACK_BYTES,
            link_latency_s=_LINK_LATENCY_CYCLES / _MESH_DIAMETER_HOPS / _CLOCK_HZ,
            assumed={**_POD4["assumed"], **_HBM_CAPACITY_ASSUMED, **_ELK_MESH_ASSUMED},
            topology="mesh", notes="IPU-POD4 with HBM on a 2D mesh (Elk §5, §6.1)",
        ),
        "tt-wormhole": dict(_TT_WORMHOLE),
        "tt-blackhole": dict(_TT_BLACKHOLE),
    }


PRESET_NAMES = tuple(_preset_table())


def preset(preset_name: str, **overrides: Any) -> HardwareSpec:
    """Build a named preset (``ipu-mk2``, ``ipu-pod4``, ...), optionally overriding fields.

    Example: ``preset("ipu-mk2", sram_bytes_per_core=256 * 1024)``.

    Parameters
    ----------
    preset_name : str
        One of :data:`PRESET_NAMES`, case-insensitive (``IPU-Mk2`` is ``ipu-mk2``).
    **overrides : Any
        :class:`HardwareSpec` fields to replace, validated like the rest.

    Returns
    -------
    HardwareSpec
        The preset's spec (its ``notes`` cite where the numbers come from).

    Raises
    ------
    InvalidHardwareSpecError
        An unknown name (the message suggests the closest preset and lists them all), an
        unknown field or an impossible value.
    """
    table = _preset_table()
    key = preset_name.strip().lower() if isinstance(preset_name, str) else None
    if key not in table:
        close = difflib.get_close_matches(key or "", list(table), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise InvalidHardwareSpecError(
            f"unknown hardware preset '{preset_name}'; {hint}known presets: {', '.join(table)}"
        )
    return HardwareSpec.from_dict(_overridden(table[key], overrides))


def small_chip(num_cores: int = 16, sram_bytes_per_core: int = 64 * KIB, **overrides: Any) -> HardwareSpec:
    """An IPU-like chip with few cores, for tests and quick experiments.

    Parameters
    ----------
    num_cores : int
        Cores of the chip; the spec is named ``icca-<num_cores>``.
    sram_bytes_per_core : int
        Private SRAM of each core.
    **overrides : Any
        Further :class:`HardwareSpec` fields to replace.

    Returns
    -------
    HardwareSpec
        The ``ipu-mk2`` preset (clock, links, compute per core) with these fields, and one
        matrix rate for every dtype (its float16 rate: no ``matrix_flops_per_cycle_by_dtype``
        unless given), so that a test's closed form does not depend on its operands' dtype.

    Raises
    ------
    InvalidHardwareSpecError
        An impossible value or unknown field.
    """
    fields = {"name": f"icca-{num_cores}", "num_cores": num_cores,
              "sram_bytes_per_core": sram_bytes_per_core, "matrix_flops_per_cycle_by_dtype": {},
              **overrides}
    return preset("ipu-mk2", **fields)


DEFAULT_PRESET = "ipu-mk2"


# -- hardware description files ------------------------------------------------------------
#: The file formats :func:`load_hardware` reads, by suffix.
HARDWARE_FILE_SUFFIXES = (".json", ".toml")
#: The key of a hardware file that names the preset the file's other fields override.
_BASE_KEY = "base"


def is_hardware_file_name(value: Any) -> bool:
    """Whether ``value`` names a hardware file rather than a preset: a path object, or a string
    ending in one of :data:`HARDWARE_FILE_SUFFIXES` (no preset name does)."""
    if isinstance(value, os.PathLike):
        return True
    return isinstance(value, str) and value.strip().lower().endswith(HARDWARE_FILE_SUFFIXES)


def load_hardware(path: "str | os.PathLike[str]") -> HardwareSpec:
    """Read a chip from a hardware description file (``.json`` or ``.toml``).

    The file is one object (a JSON object, or a TOML document's top-level keys) holding either

    * every field of :meth:`HardwareSpec.to_dict` (those with a default may be left out), or
    * ``base = "<preset>"`` (one of :data:`PRESET_NAMES`) and the fields that differ from it.

    ``name`` defaults to the file's stem (``mychip.toml`` is chip ``mychip``). Units are those of
    :class:`HardwareSpec`: bytes, bytes per second, seconds, Hz. Example (TOML)::

        base = "ipu-mk2"
        name = "mk2-2x-vector"
        vector_flops_per_cycle = 8.0
        notes = "IPU Mk2 with twice the vector throughput"

    Parameters
    ----------
    path : str or os.PathLike
        The file; its suffix (``.json`` or ``.toml``, any case) chooses the format.

    Returns
    -------
    HardwareSpec
        The chip, validated like any other spec (:meth:`HardwareSpec.validate`).

    Raises
    ------
    InvalidHardwareSpecError
        One error for everything that can go wrong, naming the file: it does not exist or cannot
        be read, another suffix, a syntax error (with its line and column), a field no spec has
        (with the closest field's name), an unknown ``base`` preset, a missing field, or an
        impossible value.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidHardwareSpecError(
            f"a hardware file is a path (str or os.PathLike), not {type(path).__name__}")
    where = os.fspath(path)

    def bad(why: str) -> InvalidHardwareSpecError:
        return InvalidHardwareSpecError(f"hardware file '{where}': {why}")

    suffix = os.path.splitext(where)[1].lower()
    if suffix not in HARDWARE_FILE_SUFFIXES:
        raise bad(f"unknown format '{suffix or '(no suffix)'}'; a hardware file ends in "
                  f"{' or '.join(HARDWARE_FILE_SUFFIXES)}")
    text = read_text(where, bad)
    data = parse_json(text, bad) if suffix == ".json" else parse_toml(text, bad)
    if not isinstance(data, dict):
        raise bad(f"must hold one object of fields, not a {type(data).__name__}")

    known = [f.name for f in dataclasses.fields(HardwareSpec)]
    unknown = [key for key in data if key not in known and key != _BASE_KEY]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, known + [_BASE_KEY], n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise bad(f"unknown field '{key}'; {hint}known fields: {_BASE_KEY}, {', '.join(known)}")

    fields = dict(data)
    base = fields.pop(_BASE_KEY, None)
    if base is not None:
        if not isinstance(base, str):
            raise bad(f"base must be a preset name ({', '.join(PRESET_NAMES)}), not {base!r}")
        try:
            base_spec = preset(base)
        except InvalidHardwareSpecError as err:
            raise bad(f"base: {err}") from None
        fields = _overridden({**base_spec.to_dict(), "notes": f"{base_spec.name} with the "
                              f"fields of {os.path.basename(where)}", "name": None}, fields)
    if fields.get("name") is None:
        fields["name"] = os.path.splitext(os.path.basename(where))[0]
    try:
        return HardwareSpec.from_dict(fields)
    except InvalidHardwareSpecError as err:
        hint = (f"; or give {_BASE_KEY}, a preset to start from (e.g. '{DEFAULT_PRESET}')" if (
            base is None and str(err).startswith("incomplete")) else "")
        raise bad(f"{err}{hint}") from None
