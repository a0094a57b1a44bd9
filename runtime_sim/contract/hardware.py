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
import json
import math
import numbers
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from runtime_sim.contract.errors import InvalidHardwareSpecError, UnsupportedDtypeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover  (setup.py installs tomli there)
    import tomli as tomllib

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
_INT_FIELDS: dict[str, tuple[int, int]] = {
    "num_cores": (1, MAX_CORES),
    "sram_bytes_per_core": (1, MAX_SRAM_BYTES),
    "num_chips": (1, MAX_CHIPS),
    "sync_cycles": (0, 10**9),
    # 0 would divide every transfer into infinitely many chunks (T10 §5's shift buffer)
    "shift_buffer_bytes": (1, MAX_SRAM_BYTES),
    "hbm_controllers": (0, MAX_HBM_CONTROLLERS_PER_CHIP * MAX_CHIPS),
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
}
_WHY = {
    "num_cores": "cores of the system; WSE-3 has 900,000",
    "sram_bytes_per_core": "bytes of SRAM per core",
    "num_chips": "chips of the system",
    "sync_cycles": "cycles of synchronization per step",
    "shift_buffer_bytes": "the per-core buffer transfers are cut into; 0 would divide by zero",
    "hbm_controllers": "HBM3 gives at most 8 stacks x 32 pseudo-channels per chip",
    "link_bandwidth": "bytes per second",
    "clock_hz": "Hz",
    "matrix_flops_per_cycle": "FLOP per cycle per core",
    "vector_flops_per_cycle": "FLOP per cycle per core",
    "host_bandwidth": "bytes per second per chip",
    "link_latency_s": "seconds",
    "inter_chip_latency_s": "seconds per chip crossing, on top of link_latency_s",
    "inter_chip_bandwidth": "bytes per second, 0 for a single chip",
    "hbm_bandwidth": "bytes per second, 0 without HBM",
}
_MISSING = object()


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
        Matrix-unit FLOP per cycle per core (matmul and convolution sub-tasks).
    vector_flops_per_cycle : float
        Vector FLOP per cycle per core (element-wise work, reductions, epilogues).
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
        HBM controllers of the whole system; positive when ``hbm_bandwidth`` is.
    host_bandwidth : float
        Host <-> chip bytes per second per chip: the IPU Mk2's off-chip bandwidth, 8 GB/s
        (T10 Table 3).
    dtypes : tuple of str
        Element types the cores compute (a subset of :data:`SUPPORTED_DTYPES`).
    notes : str
        Where the numbers come from; not compared.

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
    host_bandwidth: float = 8e9
    dtypes: tuple[str, ...] = SUPPORTED_DTYPES
    notes: str = field(default="", compare=False)

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

        if self.shift_buffer_bytes >= self.sram_bytes_per_core:
            raise bad("shift_buffer_bytes", "leaves no SRAM for tensors")
        if self.num_cores % self.num_chips:
            raise bad("num_cores", f"is not a multiple of num_chips={self.num_chips}")
        if self.num_chips > 1 and self.inter_chip_bandwidth <= 0:
            raise bad("inter_chip_bandwidth", "must be positive for a multi-chip system")
        if self.hbm_bandwidth > 0 and self.hbm_controllers <= 0:
            raise bad("hbm_controllers", "must be positive when hbm_bandwidth is set")
        if self.hbm_controllers > MAX_HBM_CONTROLLERS_PER_CHIP * self.num_chips:
            raise bad("hbm_controllers", f"exceeds {MAX_HBM_CONTROLLERS_PER_CHIP} per chip "
                      f"({_WHY['hbm_controllers']})")

    # -- derived figures ----------------------------------------------------------------
    @property
    def usable_sram_bytes(self) -> int:
        """SRAM per core left for tensor partitions once the shift buffer is reserved."""
        return self.sram_bytes_per_core - self.shift_buffer_bytes

    @property
    def cores_per_chip(self) -> int:
        return self.num_cores // self.num_chips

    @property
    def peak_matrix_flops(self) -> float:
        return self.num_cores * self.matrix_flops_per_cycle * self.clock_hz

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
        """A copy with some fields replaced (validated again; unknown names are refused)."""
        data = self.to_dict()
        data.update(overrides)
        return HardwareSpec.from_dict(data)


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


# -- presets ---------------------------------------------------------------------------------
# IPU Mk2 (GC200): 1,472 cores x 624 KiB (T10 §2.1); 5.5 GB/s per core link (T10 §2.1);
# 250 TFLOPS fp16 per chip (T10 Table 3) -> 250e12 / 1472 / 1.33e9 ~ 128 FLOP/cycle/core;
# other ops 31.2 TFLOPS on 4 chips (Elk §6.3) -> ~4 FLOP/cycle/core; 118 cycles of
# synchronization per step and an 8 KiB shift buffer (Elk artifact figures, T10 §5).
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


_IPU_MK2 = dict(
    num_cores=1472,
    sram_bytes_per_core=624 * KIB,
    link_bandwidth=5.5e9,
    clock_hz=_CLOCK_HZ,
    matrix_flops_per_cycle=128.0,
    vector_flops_per_cycle=4.0,
    matrix_tile=(16, 16, 16),
    link_latency_s=_LINK_LATENCY_CYCLES / _CLOCK_HZ,
    sync_cycles=_SYNC_CYCLES,
    shift_buffer_bytes=8 * KIB,
    topology="all-to-all",
)
#: What the 4-chip presets add: 640 GB/s between chips (Elk §5), the IPU-Link latency and the
#: multi-chip barrier (see above).
_POD4 = dict(num_cores=4 * 1472, num_chips=4, inter_chip_bandwidth=640e9,
             inter_chip_latency_s=_INTER_CHIP_LATENCY_S, sync_cycles=_multi_chip_sync_cycles(4))


def _preset_table() -> dict[str, dict[str, Any]]:
    return {
        "ipu-mk2": dict(_IPU_MK2, name="ipu-mk2", notes="Graphcore IPU Mk2 GC200 (T10 §2.1, Table 3)"),
        # The T10 benchmark problem: a 16x16 systolic array (256 MAC = 512 FLOP per cycle).
        "ipu-mk2-systolic": dict(
            _IPU_MK2, name="ipu-mk2-systolic", matrix_flops_per_cycle=512.0,
            notes="IPU Mk2 with a 16x16 systolic array per core (the matmul problem of T10's "
                  "artifact; tvm-icca plan matmul --cost-model t10-bench)",
        ),
        # IPU-POD4: 4 chips, 5,888 cores, 640 GB/s between chips (Elk §5).
        "ipu-pod4": dict(
            _IPU_MK2, **_POD4, name="ipu-pod4", notes="4 x IPU Mk2 (Elk §5)",
        ),
        # Elk's HBM setting: 4 HBM3E modules per chip, 16 TB/s across 4 chips (Elk §6.1).
        "ipu-pod4-hbm": dict(
            _IPU_MK2, **_POD4, name="ipu-pod4-hbm", hbm_bandwidth=16e12, hbm_controllers=16,
            notes="IPU-POD4 with 16 TB/s of HBM (Elk §6.1)",
        ),
        # Mesh variant: 2D mesh, HBM controllers on the edges (Elk §5, §6.1).
        "ipu-pod4-hbm-mesh": dict(
            _IPU_MK2, **_POD4, name="ipu-pod4-hbm-mesh", hbm_bandwidth=16e12, hbm_controllers=16,
            link_latency_s=_LINK_LATENCY_CYCLES / _MESH_DIAMETER_HOPS / _CLOCK_HZ,
            topology="mesh", notes="IPU-POD4 with HBM on a 2D mesh (Elk §5, §6.1)",
        ),
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
    data = table[key]
    data.update(overrides)
    return HardwareSpec.from_dict(data)


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
        The ``ipu-mk2`` preset (clock, links, compute per core) with these fields.

    Raises
    ------
    InvalidHardwareSpecError
        An impossible value or unknown field.
    """
    fields = {"name": f"icca-{num_cores}", "num_cores": num_cores,
              "sram_bytes_per_core": sram_bytes_per_core, **overrides}
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
    try:
        with open(where, encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError:
        raise bad("no such file") from None
    except IsADirectoryError:
        raise bad("is a directory, not a file") from None
    except PermissionError:
        raise bad("cannot be read (permission denied)") from None
    except UnicodeDecodeError as err:
        raise bad(f"is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise bad(f"cannot be read ({err.strerror or err})") from None

    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise bad(f"invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:  # its message ends "(at line L, column C)"
            raise bad(f"invalid TOML: {err}") from None
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
        fields = {**base_spec.to_dict(), "notes": f"{base_spec.name} with the fields of "
                  f"{os.path.basename(where)}", "name": None, **fields}
    if fields.get("name") is None:
        fields["name"] = os.path.splitext(os.path.basename(where))[0]
    try:
        return HardwareSpec.from_dict(fields)
    except InvalidHardwareSpecError as err:
        hint = (f"; or give {_BASE_KEY}, a preset to start from (e.g. '{DEFAULT_PRESET}')" if (
            base is None and str(err).startswith("incomplete")) else "")
        raise bad(f"{err}{hint}") from None
