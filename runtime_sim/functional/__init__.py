"""The functional executor: runs device programs on data, core by core (T10 §4.4, §5).

:mod:`~runtime_sim.functional.device` is the entry point (:class:`SimulatedDevice`,
:func:`get_device`), a facade over :mod:`~runtime_sim.functional.cores` (the device
operations), :mod:`~runtime_sim.functional.sram` (SRAM accounting per core),
:mod:`~runtime_sim.functional.placement` (initial partitions),
:mod:`~runtime_sim.functional.preload_store` (Elk §4.5 preload space),
:mod:`~runtime_sim.functional.interpreter` (whole regions),
:mod:`~runtime_sim.functional.run_counters` (statistics of the latest run),
:mod:`~runtime_sim.functional.vgm_exec` (load-compute-store operators, T10 §2.2) and
:mod:`~runtime_sim.functional.expr_eval` (the per-core compute). It never imports the timing
simulator; :mod:`runtime_sim.run_stats` puts the two side by side.
"""
