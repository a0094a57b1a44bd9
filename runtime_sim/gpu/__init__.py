"""The GPU reference: a roofline estimate of the ICCA compiler's device programs on a GPU.

:func:`estimate_gpu` prices every operator of a model's device programs on a
:class:`~runtime_sim.contract.gpu.GpuSpec` (A100, H100, B200 presets) and returns a
:class:`GpuReport`. An estimate and a bound, never a measurement: see
:mod:`runtime_sim.gpu.roofline` for the rules and what they leave out.
"""

from runtime_sim.gpu.roofline import GpuOpRow, GpuReport, estimate_gpu

__all__ = ["GpuOpRow", "GpuReport", "estimate_gpu"]
