"""Entry points that run the whole pipeline.

* :mod:`.compile_api` -- ``tvm_icca.compile`` / ``compile_onnx``: one call to
  ``tvm.compile(mod, target="icca")`` with the model-level choices;
* :mod:`.device_programs` -- :func:`~tvm_icca.drivers.device_programs.compile_programs`: the same passes
  up to the device programs, without the host build, then the timing simulator
  (``CompiledModel.simulate``).

Drivers resolve the chip once (:func:`tvm_icca.hardware_choice.resolve_hardware`) and pass it
down; they may run executors. Start at :mod:`.device_programs`.
"""
