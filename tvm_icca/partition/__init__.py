"""Stage 2, partitioning: which subgraphs go to the ICCA chip, which stay on the host CPU.

* :mod:`.patterns` -- the ``icca.*`` pattern table, registered with TVM's pattern registry,
  and the operand check every pattern shares (dtypes and static shapes the chip supports);
* :mod:`.partitioner` -- :func:`partition_for_icca` (``FuseOpsByPattern`` +
  ``MergeCompositeFunctions``, TVM's BYOC convention) and the partition report.

May import TVM, :mod:`runtime_sim.contract`, :mod:`tvm_icca.ops`, :mod:`tvm_icca.frontend` and
:mod:`tvm_icca.hardware_choice`. Start at :mod:`.partitioner`.
"""
