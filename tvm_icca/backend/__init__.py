"""Stage 6, the BYOC backend: the ``icca`` target, its pipeline and the codegen.

* :mod:`.target` -- the ``icca`` / ``icca-<preset>`` target tags and :func:`icca_pipeline`,
  the readable list of passes ``tvm.compile(mod, target="icca")`` runs;
* :mod:`.codegen` -- ``relax.ext.icca``: serializes each region's device program into a small
  LLVM stub that calls the device entry (it decides nothing);
* :mod:`.input_check` -- a pass that makes compiled ``main`` functions check their arguments.

May import TVM, :mod:`runtime_sim.contract` and the compiler stages below (``model_pass`` and
before); never an executor. Start at :mod:`.target`.
"""
