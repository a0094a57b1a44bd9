"""Hardware description of an inter-core connected AI (ICCA) chip.

:class:`HardwareSpec` is half of the contract between the compiler and the simulated device
(the other half is the device program format, :mod:`runtime_sim.program`). Every number in a
preset comes from ``shared/hardware.md`` and the paper it cites; overriding any field is a
``dataclasses.replace`` away (see :func:`HardwareSpec.with_overrides`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import InvalidHardwareSpecError, UnsupportedDtypeError

#: Topologies the device knows how to connect cores with.
TOPOLOGIES = ("all-to-all", "mesh")

#: Element types the simulated cores can store and compute with. numpy has no bfloat16, so
#: the functional simulator offers the two IEEE types the IPU's AMP unit accepts (T10 §5).
SUPPORTED_DTYPES = ("float32", "float16")

KIB = 1024


def check_dtype(dtype: str, where: str, hw: "HardwareSpec | None" = None) -> None:
    """The one dtype check of the compiler and the device: raise
    :class:`UnsupportedDtypeError` unless ``dtype`` is one of ``hw.dtypes`` (with ``hw=None``:
    one of :data:`SUPPORTED_DTYPES`, what any chip's cores compute). ``where`` names the tensor.
    """
    dtypes = SUPPORTED_DTYPES if hw is None else hw.dtypes
    if str(dtype) not in dtypes:
        device = "the ICCA device" if hw is None else f"chip '{hw.name}'"
        raise UnsupportedDtypeError(f"{where} has dtype {dtype}; {device} computes only {', '.join(dtypes)}")


@dataclass(frozen=True)
class HardwareSpec:
    """One ICCA system: chips of cores with private SRAM, links, optional HBM.

    Bandwidths are in bytes per second, latencies in seconds, memory in bytes.
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
    sync_cycles: int = 0
    shift_buffer_bytes: int = 8 * KIB
    topology: str = "all-to-all"
    num_chips: int = 1
    inter_chip_bandwidth: float = 0.0
    hbm_bandwidth: float = 0.0
    hbm_controllers: int = 0
    #: Host <-> chip bandwidth per chip: the IPU Mk2's off-chip bandwidth, 8 GB/s (T10 Table 3).
    host_bandwidth: float = 8e9
    dtypes: tuple[str, ...] = SUPPORTED_DTYPES
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        self.validate()

    # -- validation ---------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`InvalidHardwareSpecError` naming the first impossible field."""

        def bad(field_name: str, why: str) -> InvalidHardwareSpecError:
            value = getattr(self, field_name)
            return InvalidHardwareSpecError(
                f"invalid HardwareSpec '{self.name}': {field_name}={value!r} {why}"
            )

        for name in ("num_cores", "sram_bytes_per_core", "num_chips"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise bad(name, "must be a positive integer")
        for name in ("link_bandwidth", "clock_hz", "matrix_flops_per_cycle", "vector_flops_per_cycle",
                     "host_bandwidth"):
            value = getattr(self, name)
            if not _is_number(value) or not value > 0 or math.isinf(value):
                raise bad(name, "must be a positive finite number")
        for name in ("link_latency_s", "inter_chip_bandwidth", "hbm_bandwidth"):
            value = getattr(self, name)
            if not _is_number(value) or value < 0 or math.isinf(value):
                raise bad(name, "must be a non-negative finite number")
        for name in ("sync_cycles", "shift_buffer_bytes", "hbm_controllers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise bad(name, "must be a non-negative integer")
        if len(self.matrix_tile) != 3 or any(int(t) <= 0 for t in self.matrix_tile):
            raise bad("matrix_tile", "must be three positive integers (m, k, n)")
        if self.topology not in TOPOLOGIES:
            raise bad("topology", f"must be one of {TOPOLOGIES}")
        if self.shift_buffer_bytes >= self.sram_bytes_per_core:
            raise bad("shift_buffer_bytes", "leaves no SRAM for tensors")
        if self.num_cores % self.num_chips:
            raise bad("num_cores", f"is not a multiple of num_chips={self.num_chips}")
        if self.num_chips > 1 and self.inter_chip_bandwidth <= 0:
            raise bad("inter_chip_bandwidth", "must be positive for a multi-chip system")
        if self.hbm_bandwidth > 0 and self.hbm_controllers <= 0:
            raise bad("hbm_controllers", "must be positive when hbm_bandwidth is set")
        unknown = [d for d in self.dtypes if d not in SUPPORTED_DTYPES]
        if unknown or not self.dtypes:
            raise bad("dtypes", f"must be a non-empty subset of {SUPPORTED_DTYPES}")

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

    def check_dtype(self, dtype: str, where: str) -> None:
        """Raise :class:`UnsupportedDtypeError` unless this chip computes ``dtype``.

        ``where`` names the tensor (``"input 'x' of operator 'mm'"``). See :func:`check_dtype`.
        """
        check_dtype(dtype, where, self)

    # -- (de)serialization --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["matrix_tile"] = list(self.matrix_tile)
        data["dtypes"] = list(self.dtypes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HardwareSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidHardwareSpecError(f"unknown HardwareSpec fields: {', '.join(unknown)}")
        kwargs = dict(data)
        if "matrix_tile" in kwargs:
            kwargs["matrix_tile"] = tuple(int(t) for t in kwargs["matrix_tile"])
        if "dtypes" in kwargs:
            kwargs["dtypes"] = tuple(kwargs["dtypes"])
        try:
            return cls(**kwargs)
        except TypeError as err:  # a required field is missing
            raise InvalidHardwareSpecError(f"incomplete HardwareSpec: {err}") from None

    def with_overrides(self, **overrides: Any) -> "HardwareSpec":
        """A copy with some fields replaced (validated again)."""
        data = self.to_dict()
        data.update(overrides)
        return HardwareSpec.from_dict(data)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# -- presets ---------------------------------------------------------------------------------
# IPU Mk2 (GC200): 1,472 cores x 624 KiB (T10 §2.1); 5.5 GB/s per core link (T10 §2.1);
# 250 TFLOPS fp16 per chip (T10 Table 3) -> 250e12 / 1472 / 1.33e9 ~ 128 FLOP/cycle/core;
# other ops 31.2 TFLOPS on 4 chips (Elk §6.3) -> ~4 FLOP/cycle/core; 118 cycles of
# synchronization per step and an 8 KiB shift buffer (Elk artifact figures, T10 §5).
_IPU_MK2 = dict(
    num_cores=1472,
    sram_bytes_per_core=624 * KIB,
    link_bandwidth=5.5e9,
    clock_hz=1.33e9,
    matrix_flops_per_cycle=128.0,
    vector_flops_per_cycle=4.0,
    matrix_tile=(16, 16, 16),
    sync_cycles=118,
    shift_buffer_bytes=8 * KIB,
    topology="all-to-all",
)


def _preset_table() -> dict[str, dict[str, Any]]:
    return {
        "ipu-mk2": dict(_IPU_MK2, name="ipu-mk2", notes="Graphcore IPU Mk2 GC200 (T10 §2.1, Table 3)"),
        # The T10 benchmark problem: a 16x16 systolic array (256 MAC = 512 FLOP per cycle).
        "ipu-mk2-systolic": dict(
            _IPU_MK2, name="ipu-mk2-systolic", matrix_flops_per_cycle=512.0,
            notes="IPU Mk2 with a 16x16 systolic array per core (t10-benchmark-background)",
        ),
        # IPU-POD4: 4 chips, 5,888 cores, 640 GB/s between chips (Elk §5).
        "ipu-pod4": dict(
            _IPU_MK2, name="ipu-pod4", num_cores=4 * 1472, num_chips=4,
            inter_chip_bandwidth=640e9, notes="4 x IPU Mk2 (Elk §5)",
        ),
        # Elk's HBM setting: 4 HBM3E modules per chip, 16 TB/s across 4 chips (Elk §6.1).
        "ipu-pod4-hbm": dict(
            _IPU_MK2, name="ipu-pod4-hbm", num_cores=4 * 1472, num_chips=4,
            inter_chip_bandwidth=640e9, hbm_bandwidth=16e12, hbm_controllers=16,
            notes="IPU-POD4 with 16 TB/s of HBM (Elk §6.1)",
        ),
        # Mesh variant: 2D mesh, HBM controllers on the edges (Elk §5, §6.1).
        "ipu-pod4-hbm-mesh": dict(
            _IPU_MK2, name="ipu-pod4-hbm-mesh", num_cores=4 * 1472, num_chips=4,
            inter_chip_bandwidth=640e9, hbm_bandwidth=16e12, hbm_controllers=16,
            topology="mesh", notes="IPU-POD4 with HBM on a 2D mesh (Elk §5, §6.1)",
        ),
    }


PRESET_NAMES = tuple(_preset_table())


def preset(preset_name: str, **overrides: Any) -> HardwareSpec:
    """Build a named preset (``ipu-mk2``, ``ipu-pod4``, ...), optionally overriding fields."""
    table = _preset_table()
    if preset_name not in table:
        raise InvalidHardwareSpecError(
            f"unknown hardware preset '{preset_name}'; known presets: {', '.join(table)}"
        )
    data = table[preset_name]
    data.update(overrides)
    return HardwareSpec.from_dict(data)


def small_chip(num_cores: int = 16, sram_bytes_per_core: int = 64 * KIB, **overrides: Any) -> HardwareSpec:
    """An IPU-like chip with few cores, for tests and quick experiments."""
    return preset("ipu-mk2", name=f"icca-{num_cores}", num_cores=num_cores,
                  sram_bytes_per_core=sram_bytes_per_core, **overrides)


DEFAULT_PRESET = "ipu-mk2"
