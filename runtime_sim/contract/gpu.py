"""A GPU as the reference the ICCA chips are compared with: :class:`GpuSpec` and its presets.

A GPU here is a roofline: peak dense FP16/BF16 tensor-core FLOP/s, peak FP32 (non-tensor)
FLOP/s, HBM bandwidth and capacity, an L2 cache, and the fractions of those peaks a tuned
kernel reaches. :mod:`runtime_sim.gpu` prices the operators of the device programs the ICCA
compiler emits with these numbers; it estimates, it never measures.

Presets (:data:`GPU_PRESET_NAMES`, :func:`gpu_preset`): ``a100`` (A100 SXM4 80GB), ``h100``
(H100 SXM5), ``b200`` (one GPU of an HGX B200). Every number is cited beside it; a field no
document gives is named, with the reason for its value, in the preset's ``assumed`` mapping,
as :class:`~runtime_sim.contract.hardware.HardwareSpec` does. Energies are given through the
one energy formula (:meth:`GpuSpec.energy_table`, :func:`runtime_sim.contract.energy.run_energy`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from runtime_sim.contract.energy import EnergyTable
from runtime_sim.contract.errors import InvalidHardwareSpecError
from runtime_sim.contract.field_values import as_float, as_int, assumed_marks, field_error
from runtime_sim.contract.hardware import override_fields

__all__ = ["GPU_PRESET_NAMES", "GpuSpec", "gpu_preset", "is_gpu_preset"]

GB = 1e9  # vendors give HBM capacity and bandwidth in decimal units
MB = 1e6  # a third-party measurement's megabytes (B200's L2)
MIB = 1024 ** 2  # NVIDIA's "MB" of L2 (the A100's 40 MB is 41,943,040 bytes)
TERA = 1e12

#: Fields that describe a spec rather than define the GPU: never marked assumed.
_UNMARKED = ("name", "notes", "assumed")
#: Fractions of a peak: in (0, 1].
_EFFICIENCIES = ("tensor_efficiency", "fp32_efficiency", "hbm_efficiency")
#: Energies and powers: 0 (not modelled) or positive.
_ENERGIES = ("tensor_pj_per_flop", "fp32_pj_per_flop", "hbm_pj_per_byte", "static_w")


def _on_tensor_cores(unit: str, dtype: str | None) -> bool:
    """Whether an operator runs on the tensor cores: a matrix operator on 16-bit operands."""
    return unit == "matrix" and dtype in ("float16", "bfloat16")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU for the roofline reference (:mod:`runtime_sim.gpu`).

    Parameters
    ----------
    name : str
        The preset's name or the user's.
    sms : int
        Streaming multiprocessors (descriptive: the roofline does not read it).
    tensor_flops : float
        Peak dense FP16/BF16 tensor-core FLOP/s (sparsity not counted).
    fp32_flops : float
        Peak FP32 FLOP/s of the CUDA cores (non-tensor): what element-wise work, reductions
        and float32 products run at.
    hbm_bandwidth : float
        HBM bandwidth, bytes/s.
    hbm_bytes : float
        HBM capacity, bytes.
    l2_bytes : float
        L2 cache, bytes: what the roofline lets an operator's output stay in for the next,
        and the fast memory of a blocked GEMM (:mod:`runtime_sim.gpu.roofline`).
    board_power_w : float
        Rated board power (TDP), W: a sanity bound on the energy model, never a cost.
    nvlink_bandwidth : float
        NVLink bandwidth per GPU (both directions), bytes/s; descriptive (one GPU is modelled).
    tensor_efficiency, fp32_efficiency, hbm_efficiency : float
        The fractions of ``tensor_flops``, ``fp32_flops`` and ``hbm_bandwidth`` tuned kernels
        reach, in (0, 1]; the roofline bound uses 1.
    launch_s : float
        Per-operator (kernel launch) overhead, s; 0 leaves it out.
    tensor_pj_per_flop, fp32_pj_per_flop, hbm_pj_per_byte, static_w : float
        Energies of a tensor-core FLOP, an FP32 FLOP, a byte of HBM traffic, and static
        power (W); 0: not modelled.
    notes : str
        Where the numbers come from.
    assumed : mapping of str to str
        Field -> why its value is assumed, for the fields no cited document gives.

    Raises
    ------
    InvalidHardwareSpecError
        A missing, non-finite, non-positive or out-of-range value, naming the field.
    """

    name: str
    sms: int
    tensor_flops: float
    fp32_flops: float
    hbm_bandwidth: float
    hbm_bytes: float
    l2_bytes: float
    board_power_w: float
    nvlink_bandwidth: float = 0.0
    tensor_efficiency: float = 1.0
    fp32_efficiency: float = 1.0
    hbm_efficiency: float = 1.0
    launch_s: float = 0.0
    tensor_pj_per_flop: float = 0.0
    fp32_pj_per_flop: float = 0.0
    hbm_pj_per_byte: float = 0.0
    static_w: float = 0.0
    notes: str = field(default="", compare=False)
    assumed: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Convert every field to its type and check it, or raise
        :class:`~runtime_sim.contract.errors.InvalidHardwareSpecError` naming the first bad one."""
        def bad(name: str, why: str) -> InvalidHardwareSpecError:
            return field_error("GpuSpec", self.name, name, getattr(self, name), why)

        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if not isinstance(self.name, str) or not self.name.strip():
            raise bad("name", "must be a non-empty string")
        if not isinstance(self.notes, str):
            raise bad("notes", "must be a string")
        sms = as_int(self.sms)
        if sms is None or sms < 1:
            raise bad("sms", "must be a positive integer")
        put("sms", sms)
        for f in dataclasses.fields(self):
            if f.name in ("name", "notes", "assumed", "sms"):
                continue
            value = as_float(getattr(self, f.name))
            if value is None or not math.isfinite(value):
                raise bad(f.name, "must be a finite number")
            if f.name in _EFFICIENCIES:
                if not 0.0 < value <= 1.0:
                    raise bad(f.name, "must be a fraction of the peak in (0, 1]")
            elif f.name in _ENERGIES or f.name in ("nvlink_bandwidth", "launch_s"):
                if value < 0.0:
                    raise bad(f.name, "must be 0 (not modelled) or positive")
            elif value <= 0.0:
                raise bad(f.name, "must be positive")
            put(f.name, value)
        markable = [f.name for f in dataclasses.fields(self) if f.name not in _UNMARKED]
        marks = assumed_marks(self.assumed, markable)
        if marks is None:
            raise bad("assumed", f"must map fields ({', '.join(markable)}) to why their value "
                      "is assumed (a non-empty string)")
        put("assumed", marks)

    # -- derived ------------------------------------------------------------------------
    def peak_flops(self, unit: str, dtype: str | None) -> float:
        """Peak FLOP/s of the unit that runs an operator: tensor cores for a ``"matrix"``
        operator on 16-bit operands (``float16``/``bfloat16``), the FP32 CUDA cores
        otherwise (vector work, and float32 products: TF32 is opt-in and changes the
        numerics, so an FP32 model is not assumed to use it)."""
        return self.tensor_flops if _on_tensor_cores(unit, dtype) else self.fp32_flops

    def efficiency(self, unit: str, dtype: str | None) -> float:
        """The achievable fraction of :meth:`peak_flops` for the same unit."""
        return self.tensor_efficiency if _on_tensor_cores(unit, dtype) else self.fp32_efficiency

    def energy_table(self) -> EnergyTable:
        """The GPU's per-action energies for :func:`runtime_sim.contract.energy.run_energy`:
        tensor FLOPs as matrix FLOPs (at ``fp32_pj_per_flop`` for float32 products, which run
        on the CUDA cores), FP32 FLOPs as vector FLOPs, HBM bytes, static power per chip."""
        return EnergyTable(
            matrix_pj_per_flop=self.tensor_pj_per_flop,
            matrix_pj_per_flop_by_dtype=(("float32", self.fp32_pj_per_flop),),
            vector_pj_per_flop=self.fp32_pj_per_flop, hbm_pj_per_byte=self.hbm_pj_per_byte,
            static_w_per_chip=self.static_w, board_power_w=self.board_power_w)

    @property
    def assumed_fields(self) -> dict[str, str]:
        """``{field: why}`` of the fields no cited document gives."""
        return dict(self.assumed)

    def with_overrides(self, **overrides: Any) -> "GpuSpec":
        """A copy with ``overrides`` applied (validated); a field set here is no longer marked
        assumed."""
        data = self.to_dict()
        unknown = [k for k in overrides if k not in data]
        if unknown:
            raise InvalidHardwareSpecError(f"unknown GpuSpec field(s) {', '.join(unknown)}; "
                                           f"fields: {', '.join(data)}")
        return GpuSpec.from_dict(override_fields(data, overrides))

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["assumed"] = dict(self.assumed)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GpuSpec":
        if not isinstance(data, Mapping):
            raise InvalidHardwareSpecError(f"a GpuSpec is a mapping of fields, not "
                                           f"{type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = [k for k in data if k not in known]
        if unknown:
            raise InvalidHardwareSpecError(f"unknown GpuSpec field(s) {', '.join(map(str, unknown))}")
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.default is dataclasses.MISSING and f.name not in data]
        if missing:
            raise InvalidHardwareSpecError(f"GpuSpec lacks {', '.join(missing)}")
        fields = dict(data)
        if isinstance(fields.get("assumed"), Mapping):
            fields["assumed"] = tuple(fields["assumed"].items())
        return cls(**fields)


# -- presets ------------------------------------------------------------------------------
# Sources (each number below names its own):
# [A100-DS] NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4):
#   A100 80GB SXM: FP16/BF16 tensor 312 TFLOPS dense (624 with sparsity), FP32 19.5 TFLOPS,
#   HBM2e 80 GB at 2,039 GB/s, max TDP 400 W, NVLink 600 GB/s.
# [AMPERE-WP] NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs, 40 MB L2
#   (T10 Table 3 gives the same 40 MB "global cache"; cudaGetDeviceProperties reports
#   l2CacheSize = 41,943,040 bytes = 40 MiB).
# [H100-DS] NVIDIA H100 Tensor Core GPU datasheet: H100 SXM FP16/BF16 tensor 1,979 TFLOPS with
#   sparsity ("specifications 1/2 lower without sparsity": 989.4 dense), FP32 67 TFLOPS, 80 GB
#   HBM3 at 3.35 TB/s, up to 700 W, NVLink 900 GB/s.
# [HOPPER-WP] NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): H100 SXM5 132 SMs,
#   50 MB L2.
# [B200-DS] NVIDIA Blackwell datasheet / HGX B200 specifications, per GPU of the HGX board at
#   1,000 W: FP16/BF16 tensor 2.25 PFLOPS dense (4.5 sparse), FP32 80 TFLOPS, HBM3E 8 TB/s;
#   HGX B200 total memory 1.44 TB over 8 GPUs (180 GB each); NVLink 5 1.8 TB/s per GPU.
# [CNC-B200] Chips and Cheese, "Nvidia's B200: Keeping the CUDA Juggernaut Rolling" (2025),
#   measured on an 8 x B200 instance: 148 SMs (74 enabled per die), 126 MB L2 over the two
#   dies. A third-party measurement: NVIDIA's datasheet gives neither.
# [A100-BW] NVIDIA developer forum, "Trouble to reach peak bandwidth of A100" (2025): a read
#   kernel on an A100 80GB SXM reaches 1.80 of 2.04 TB/s, 88% of peak per Nsight Compute,
#   and the thread cites a GTC talk in which the best kernel reached about 90%.
_HBM_EFFICIENCY = 0.90  # [A100-BW]
# Assumptions shared by the three presets, with why:
_TENSOR_EFFICIENCY = 0.80
_FP32_EFFICIENCY = 0.80
_LAUNCH_S = 2e-6
# HBM access energy: about 3.9 pJ per bit is the figure usually quoted for HBM2 (O'Connor et
# al., "Fine-Grained DRAM", MICRO 2017, compare their design with HBM2 at that level); it is
# not re-derived here, and HBM3/HBM3E are given the same per-bit energy.
_HBM_PJ_PER_BYTE = 3.9 * 8
# Compute energies: half the board power spent by the unit at its peak; static power a fifth
# of the board power. Chosen so that a GPU at its efficiency on both units and HBM at once
# stays under its board power; no per-FLOP figure of these GPUs was found.
_MATH_SHARE = 0.5
_STATIC_SHARE = 0.2

_ASSUMED = {
    "tensor_efficiency": "no published large-GEMM cuBLAS fraction of these GPUs' dense FP16 "
                         "peak was retrieved; 0.8 is a tuned GEMM's usual share",
    "fp32_efficiency": "assumed like tensor_efficiency (0.8): element-wise kernels are "
                       "usually HBM-bound, so this rarely decides an operator",
    "launch_s": "2 us per kernel launched back to back from a CUDA graph or engine: the order "
                "commonly reported, no measurement of these GPUs retrieved",
    "tensor_pj_per_flop": "half the board power at the dense FP16 tensor peak (no per-FLOP "
                          "figure published)",
    "fp32_pj_per_flop": "half the board power at the FP32 peak (no per-FLOP figure published)",
    "hbm_pj_per_byte": "3.9 pJ/bit, the HBM2 figure usually quoted (O'Connor et al., MICRO "
                       "2017), used for HBM2e, HBM3 and HBM3E alike",
    "static_w": "a fifth of the board power (leakage, clocks, idle HBM PHYs); no idle-power "
                "figure of these GPUs retrieved",
}


def _energies(board_w: float, tensor_flops: float, fp32_flops: float) -> dict[str, float]:
    return {"tensor_pj_per_flop": _MATH_SHARE * board_w / tensor_flops / 1e-12,
            "fp32_pj_per_flop": _MATH_SHARE * board_w / fp32_flops / 1e-12,
            "hbm_pj_per_byte": _HBM_PJ_PER_BYTE, "static_w": _STATIC_SHARE * board_w}


def _preset_table() -> dict[str, dict[str, Any]]:
    shared = {"tensor_efficiency": _TENSOR_EFFICIENCY, "fp32_efficiency": _FP32_EFFICIENCY,
              "hbm_efficiency": _HBM_EFFICIENCY, "launch_s": _LAUNCH_S}
    return {
        "a100": dict(
            name="a100", sms=108,                      # [AMPERE-WP]
            tensor_flops=312 * TERA,                   # [A100-DS] dense FP16/BF16
            fp32_flops=19.5 * TERA,                    # [A100-DS]
            hbm_bandwidth=2039 * GB, hbm_bytes=80 * GB,  # [A100-DS] 80GB SXM
            l2_bytes=40 * MIB,                         # [AMPERE-WP]
            board_power_w=400.0,                       # [A100-DS] max TDP
            nvlink_bandwidth=600 * GB,                 # [A100-DS]
            **shared, **_energies(400.0, 312 * TERA, 19.5 * TERA), assumed=dict(_ASSUMED),
            notes="NVIDIA A100 SXM4 80GB (A100 datasheet, Ampere whitepaper)"),
        "h100": dict(
            name="h100", sms=132,                      # [HOPPER-WP]
            tensor_flops=989.4 * TERA,                 # [H100-DS] 1,979 sparse / 2
            fp32_flops=67 * TERA,                      # [H100-DS]
            hbm_bandwidth=3350 * GB, hbm_bytes=80 * GB,  # [H100-DS]
            l2_bytes=50 * MIB,                         # [HOPPER-WP]
            board_power_w=700.0,                       # [H100-DS]
            nvlink_bandwidth=900 * GB,                 # [H100-DS]
            **shared, **_energies(700.0, 989.4 * TERA, 67 * TERA),
            assumed={**_ASSUMED, "hbm_efficiency": "the A100's measured 88-90% of peak "
                     "(NVIDIA developer forum) carried over to HBM3"},
            notes="NVIDIA H100 SXM5 80GB (H100 datasheet, Hopper whitepaper)"),
        "b200": dict(
            name="b200", sms=148,                      # [CNC-B200]
            tensor_flops=2250 * TERA,                  # [B200-DS] HGX, dense
            fp32_flops=80 * TERA,                      # [B200-DS] HGX
            hbm_bandwidth=8000 * GB, hbm_bytes=180 * GB,  # [B200-DS] 1.44 TB / 8 GPUs
            l2_bytes=126 * MB,                         # [CNC-B200] measured
            board_power_w=1000.0,                      # [B200-DS] HGX B200 per GPU
            nvlink_bandwidth=1800 * GB,                # [B200-DS]
            **shared, **_energies(1000.0, 2250 * TERA, 80 * TERA),
            assumed={**_ASSUMED, "hbm_efficiency": "the A100's measured 88-90% of peak "
                     "(NVIDIA developer forum) carried over to HBM3E"},
            notes="NVIDIA B200, one GPU of an HGX B200 (Blackwell datasheet; SMs and L2 "
                  "measured by Chips and Cheese)"),
    }


#: The GPU presets, in the order listings show them.
GPU_PRESET_NAMES: tuple[str, ...] = tuple(_preset_table())


def is_gpu_preset(name: Any) -> bool:
    """Whether ``name`` names a GPU preset (any case)."""
    return isinstance(name, str) and name.strip().lower() in GPU_PRESET_NAMES


def gpu_preset(preset_name: str, **overrides: Any) -> GpuSpec:
    """Build a GPU preset by name (:data:`GPU_PRESET_NAMES`, any case), optionally with fields
    overridden.

    Parameters
    ----------
    preset_name : str
        ``a100``, ``h100`` or ``b200``.
    **overrides : Any
        :class:`GpuSpec` fields to replace, validated like the rest.

    Returns
    -------
    GpuSpec

    Raises
    ------
    InvalidHardwareSpecError
        An unknown name (the closest preset suggested) or a bad override.
    """
    table = _preset_table()
    key = preset_name.strip().lower() if isinstance(preset_name, str) else ""
    if key not in table:
        close = difflib.get_close_matches(key, list(table), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise InvalidHardwareSpecError(f"unknown GPU preset '{preset_name}'; {hint}GPU presets: "
                                       f"{', '.join(table)}")
    spec = GpuSpec.from_dict(table[key])
    return spec.with_overrides(**overrides) if overrides else spec
