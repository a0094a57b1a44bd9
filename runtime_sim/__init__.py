"""The ICCA device side: its contract with the compiler, the machine's cost model, two executors.

Four layers, each a subpackage (``lint-imports`` checks the rules in ``.importlinter``):

* :mod:`runtime_sim.contract` -- what a compiler and a device agree on: the device program
  format and its validation, :class:`~runtime_sim.contract.hardware.HardwareSpec` and its
  presets, the meaning of a plan on the cores (``OpLayout``, re-layout geometry), preload and
  stream formats, tensor lifetimes and the error types. Imports nothing else of the project.
* :mod:`runtime_sim.machine` -- the machine's cost formulas that the compiler's cost models and
  the timing simulator must share: links, topologies, the stream's timing rules, preload
  delivery. Imports only the contract.
* :mod:`runtime_sim.functional` -- the functional executor: runs programs on data, core by
  core (T10 §4.4, §5).
* :mod:`runtime_sim.timing` -- the timing simulator: runs programs on shapes only and reports
  simulated time (Elk §5, "Simulation framework").

The two executors never import each other and never plan; :mod:`runtime_sim.run_stats` puts the
functional device's counters and the timing simulator's time of the same run side by side.
Start reading at :mod:`runtime_sim.contract.program`. Nothing here imports TVM or ``tvm_icca``.
"""
