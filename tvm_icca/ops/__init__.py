"""What the chip runs, per operator family: which Relax calls it accepts and how their TE reads.

The partitioner (:mod:`tvm_icca.partition`) asks this package *whether* a call can run on the
chip; the lowering (:mod:`tvm_icca.lower`) asks it *what* the call computes:

* :mod:`.te_capture` -- the TE of a composite function, captured from TVM's own legalization;
* :mod:`.extracted_op` -- what reading an operator yields (tensor expression + input sources);
* :mod:`.gather` -- embedding lookups (``take``): reason, pattern and TE reader;
* :mod:`.data_movement` -- concat, split, strided slice and rotary embeddings;
* :mod:`.views` -- reshape-like views and repeats as re-layouts;
* :mod:`.padding` -- pad (constant, reflect, edge) as a (piecewise) affine re-layout;
* :mod:`.conv_transpose` -- transposed convolutions as the convolutions of their output phases;
* :mod:`.resize` -- the weighted tap sum of a linear resize (the rest of a resize is
  re-layouts and takes);
* :mod:`.relax_types` -- static shapes and sizes of Relax tensor types.

A family's pieces sit in its one module; the per-core compute of an op kind is its template in
:mod:`schedules`. May import TVM and :mod:`runtime_sim.contract`. Start at :mod:`.te_capture`.
"""
