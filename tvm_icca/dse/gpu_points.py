"""GPU reference points of a design-space exploration: a GPU preset beside the ICCA chips.

A spec names GPU presets (:data:`runtime_sim.contract.gpu.GPU_PRESET_NAMES`) under ``gpus``::

    gpus = ["a100", "h100"]

and every workload then gets one more point per GPU: its model compiled for the spec's base
chip (the ICCA compiler partitions it; only the operators' semantics reach the GPU, with no
preload design, :data:`GPU_DESIGN` in the row's ``design`` column) and priced by the GPU
roofline (:func:`runtime_sim.gpu.estimate_gpu`). The row has the run-level columns of an ICCA
row (``total_s``, ``energy_j``, ``average_power_w``, ``hardware`` = the GPU's name, ...), so
tables and plots put the GPU beside the chips; its times are estimates, never measurements
(``estimate_kind``, ``roofline_s``).

This module knows nothing of points or specs (they import it): it checks the names, gives
what a GPU point adds to a key, and computes a row's metrics.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from runtime_sim.contract.errors import InvalidSpecError
from runtime_sim.contract.gpu import GPU_PRESET_NAMES, gpu_preset, is_gpu_preset

__all__ = ["GPU_DESIGN", "GPU_PRELOAD", "check_gpus", "gpu_document", "gpu_metrics"]

#: The ``design`` column of a GPU point (no preload design: the GPU reads HBM as it goes).
GPU_DESIGN = "gpu"
#: The preload design a GPU point's programs are compiled with: none (the plans are not read).
GPU_PRELOAD = "off"


def check_gpus(value: Any, bad: Callable[[str, str], InvalidSpecError]) -> tuple[str, ...]:
    """The spec's ``gpus``: a list of GPU preset names (any case), canonical and deduplicated;
    ``bad(key, why)`` makes the error."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise bad("gpus", f"must be a list of GPU presets ({', '.join(GPU_PRESET_NAMES)}), "
                  f"not {value!r}")
    out: list[str] = []
    for name in value:
        if not is_gpu_preset(name):
            raise bad("gpus", f"unknown GPU preset {name!r}; GPU presets: "
                      f"{', '.join(GPU_PRESET_NAMES)}")
        canon = name.strip().lower()
        if canon not in out:
            out.append(canon)
    return tuple(out)


def gpu_document(name: str) -> dict[str, Any]:
    """What of a GPU determines a point's result (for its key): every field of the preset
    but its notes and assumed marks."""
    doc = gpu_preset(name).to_dict()
    doc.pop("notes", None)
    doc.pop("assumed", None)
    return doc


def gpu_metrics(programs: Sequence[Any], name: str, model: str = "") -> dict[str, Any]:
    """A GPU point's run-level columns: :meth:`runtime_sim.gpu.GpuReport.to_dict` of the
    programs priced on the GPU preset ``name`` (``hardware`` becomes the row's input column,
    so it is left out here)."""
    # pylint: disable=import-outside-toplevel
    from runtime_sim.gpu import estimate_gpu

    data = estimate_gpu(programs, gpu_preset(name), model=model).to_dict(per_op=False)
    data.pop("hardware", None)
    data.pop("model", None)
    return data
