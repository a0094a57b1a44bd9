"""Stage 3, lowering: a partitioned region's operators as tensor expressions (T10 §4.2, §5).

* :mod:`.te_to_expr` -- an offloaded composite's TE (captured from TVM's legalization) as a
  :class:`~runtime_sim.contract.expr.TensorExpr`: which reduction is the top level, the epilogue;
* :mod:`.te_converter` -- the walk over the TE DAG that builds the expression tree;
* :mod:`.te_axes` -- the iteration axes of one conversion and its affine index maps (T10 §5);
* :mod:`.te_nodes` -- the questions the walk asks of TE tensors and TIR nodes;
* :mod:`.region` -- a region function as its operators, their input sources and constants;
* :mod:`.expr_cache` -- the memo of extracted operators, shared by identical layers.

Nothing here chooses a plan. May import TVM, :mod:`runtime_sim.contract`, :mod:`schedules`,
:mod:`tvm_icca.ops` and :mod:`tvm_icca.partition`. Start at :mod:`.region`.
"""
