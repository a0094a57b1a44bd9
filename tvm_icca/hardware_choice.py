"""Hardware descriptions, and which chip ``tvm.compile`` compiles for.

:class:`HardwareSpec` is defined in :mod:`runtime_sim.contract.hardware`, its presets in
:mod:`runtime_sim.contract.presets` and hardware files are read by
:mod:`runtime_sim.contract.hardware_files` (half of the compiler/device contract); this module
re-exports them and adds the compile-time choice of a chip:

* ``with tvm_icca.use_hardware("ipu-pod4"): tvm.compile(mod, target="icca")`` -- a context
  manager based on :mod:`contextvars`, so it is thread- and asyncio-safe;
* ``tvm.compile(mod, target="icca-ipu-pod4")`` -- one target tag per preset
  (see :mod:`tvm_icca.backend.target`).

Wherever a chip is accepted, it may be a spec, a preset name, a ``to_dict()`` mapping or the
path of a hardware file (``.json`` / ``.toml``, :func:`load_hardware`).

The GPU presets (:mod:`runtime_sim.contract.gpu`: ``a100``, ``h100``, ``b200``) are no ICCA
chip: nothing compiles for them. :func:`resolve_chip_or_gpu` is the resolver of the places
that take one as a reference (``tvm-icca simulate --hw h100``, a design-space exploration's
``gpus``); everywhere else a GPU preset is refused with a message saying where it applies.

Nothing in here imports TVM, so the device side can use it too.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from typing import Any, Iterator, Mapping, Union

from runtime_sim.contract.errors import InvalidHardwareSpecError
from runtime_sim.contract.gpu import GPU_PRESET_NAMES, GpuSpec, gpu_preset, is_gpu_preset
from runtime_sim.contract.hardware import SUPPORTED_DTYPES, HardwareSpec
from runtime_sim.contract.hardware_files import is_hardware_file_name, load_hardware
from runtime_sim.contract.presets import DEFAULT_PRESET, PRESET_NAMES, preset, small_chip

__all__ = [
    "DEFAULT_PRESET",
    "GPU_PRESET_NAMES",
    "PRESET_NAMES",
    "SUPPORTED_DTYPES",
    "HardwareLike",
    "HardwareSpec",
    "current_hardware",
    "explicit_hardware",
    "hardware_from_json",
    "hardware_to_json",
    "load_hardware",
    "preset",
    "resolve_chip_or_gpu",
    "resolve_hardware",
    "small_chip",
    "use_hardware",
]

#: Anything that names a chip: a spec, a preset name, the path of a hardware file (a string
#: ending in ``.json`` or ``.toml``, or any ``os.PathLike``; :func:`load_hardware`), or a
#: ``HardwareSpec.to_dict()`` mapping.
HardwareLike = Union[HardwareSpec, str, os.PathLike, Mapping[str, Any]]

_CURRENT: contextvars.ContextVar[HardwareSpec | None] = contextvars.ContextVar(
    "tvm_icca_hardware", default=None
)


def resolve_hardware(hw: HardwareLike | None = None) -> HardwareSpec:
    """Turn ``hw`` into a :class:`HardwareSpec`.

    ``None`` means the chip chosen by the innermost :func:`use_hardware`, else the default
    preset (``ipu-mk2``). A path object, or a string ending in ``.json`` / ``.toml``, is read
    with :func:`load_hardware` (no preset name has such a suffix); any other string is a
    preset name.
    """
    if hw is None:
        return current_hardware()
    if isinstance(hw, HardwareSpec):
        return hw
    if is_hardware_file_name(hw):
        return load_hardware(hw)
    if is_gpu_preset(hw):
        raise InvalidHardwareSpecError(
            f"'{hw}' is a GPU preset, not an ICCA chip: nothing compiles for it. Use it as a "
            f"reference: `tvm-icca simulate MODEL --hw {hw.strip().lower()}` or a design-space "
            f"exploration's gpus = [\"{hw.strip().lower()}\"]")
    if isinstance(hw, str):
        return preset(hw)
    if isinstance(hw, Mapping):
        return HardwareSpec.from_dict(hw)
    raise InvalidHardwareSpecError(
        f"cannot use {type(hw).__name__} as hardware: pass a HardwareSpec, a preset name "
        f"({', '.join(PRESET_NAMES)}), the path of a .json or .toml hardware file or a "
        f"HardwareSpec.to_dict() mapping"
    )


def resolve_chip_or_gpu(hw: "HardwareLike | GpuSpec | None") -> "HardwareSpec | GpuSpec":
    """A GPU preset name (:data:`GPU_PRESET_NAMES`, any case) or a :class:`GpuSpec` as a
    :class:`~runtime_sim.contract.gpu.GpuSpec`; anything else as :func:`resolve_hardware`
    resolves it. For the commands that take a GPU as a reference (``tvm-icca simulate``)."""
    if isinstance(hw, GpuSpec):
        return hw
    if is_gpu_preset(hw):
        return gpu_preset(hw)  # type: ignore[arg-type]
    return resolve_hardware(hw)


def current_hardware() -> HardwareSpec:
    """The chip chosen by the innermost :func:`use_hardware`, else the default preset.

    While :func:`tvm_icca.partition_for_icca` runs, it is the chip being partitioned for: a
    pattern's check function reads it to refuse what that chip cannot do.

    Returns
    -------
    HardwareSpec
        The chip ``tvm.compile(mod, target="icca")`` compiles for here (the default preset
        is ``ipu-mk2``).
    """
    spec = _CURRENT.get()
    return spec if spec is not None else preset(DEFAULT_PRESET)


def explicit_hardware() -> HardwareSpec | None:
    """The chip chosen by the innermost :func:`use_hardware`, or ``None`` outside of one."""
    return _CURRENT.get()


@contextlib.contextmanager
def use_hardware(hw: HardwareLike) -> Iterator[HardwareSpec]:
    """Compile for ``hw`` inside the ``with`` block.

    Example::

        with tvm_icca.use_hardware(tvm_icca.small_chip(16)):
            ex = tvm.compile(mod, target="icca")

    The spec is validated on entry; the previous choice is restored on exit, also when the
    block raises. The choice is a :mod:`contextvars` variable, so threads and asyncio tasks
    each see their own.

    Parameters
    ----------
    hw : HardwareSpec, str, os.PathLike or dict
        The chip: a spec, a preset name (:data:`PRESET_NAMES`, case-insensitive), the path of
        a hardware file (``.json`` or ``.toml``, :func:`load_hardware`) or a
        :meth:`HardwareSpec.to_dict` mapping.

    Yields
    ------
    HardwareSpec
        The resolved chip.

    Raises
    ------
    InvalidHardwareSpecError
        ``hw`` names no preset, its hardware file cannot be read, or it describes an
        impossible chip.
    """
    spec = resolve_hardware(hw)
    token = _CURRENT.set(spec)
    try:
        yield spec
    finally:
        _CURRENT.reset(token)


def hardware_to_json(hw: HardwareSpec) -> str:
    """Serialize a spec the way it is stamped on partitioned regions (``icca.hardware``)."""
    return json.dumps(hw.to_dict(), sort_keys=True, separators=(",", ":"))


def hardware_from_json(text: str) -> HardwareSpec:
    """Inverse of :func:`hardware_to_json`."""
    try:
        data = json.loads(text)
    except (TypeError, json.JSONDecodeError) as err:
        raise InvalidHardwareSpecError(f"hardware description is not valid JSON: {err}") from None
    if not isinstance(data, Mapping):
        raise InvalidHardwareSpecError("hardware description must be a JSON object")
    return HardwareSpec.from_dict(data)
