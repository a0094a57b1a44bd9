"""Tuning records as the compiler reads them (meta_schedule ``TuningRecord`` with an ICCA plan).

* :mod:`.database` -- the record format (a plan annotated on the operator's PrimFunc) and the
  work directory's meta_schedule database;
* :mod:`.keys` -- what a record is keyed on: operator structure, chip, unmapped plan;
* :mod:`.apply` -- :func:`use_database` and meta_schedule's ``with database:``: a plan hook
  (:mod:`tvm_icca.plan_search.plan_hook`, the compiler's interface) that lets the compiler use the
  best record of every operator.

The compiler reads records and never measures; the tuner (:mod:`tvm_icca.tuning`) writes them.
May import TVM (meta_schedule, lazily), :mod:`runtime_sim.contract` and :mod:`tvm_icca.plan_search`.
"""
