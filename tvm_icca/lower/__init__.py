"""Stage 3, lowering: a partitioned region's operators as tensor expressions (T10 §4.2, §5).

* :mod:`.te_to_expr` -- an offloaded composite's TE (captured from TVM's legalization) as a
  :class:`~runtime_sim.contract.expr.TensorExpr`: axes, reductions, affine index maps;
* :mod:`.region` -- a region function as its operators, their input sources and constants;
* :mod:`.expr_cache` -- the memo of extracted operators, shared by identical layers.

Nothing here chooses a plan. May import TVM, :mod:`runtime_sim.contract`, :mod:`schedules`,
:mod:`tvm_icca.ops` and :mod:`tvm_icca.partition`. Start at :mod:`.region`.
"""
