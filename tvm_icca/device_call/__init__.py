"""After stage 6, the host side of a device call: ``icca.device.run`` and run statistics.

:mod:`.device_entry` parses the device program an LLVM stub passes, runs it on the simulated
device (:mod:`runtime_sim.functional`) and reports the latest run
(:func:`~tvm_icca.device_call.device_entry.last_run_stats`, with the timing simulator's time via
:mod:`runtime_sim.run_stats`). This is the only compiler-side package that runs an executor at
run time of a built model.
"""
