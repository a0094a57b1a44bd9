"""Stage 1, import: models into Relax, cleaned up for partitioning.

* :mod:`.onnx_prepare` -- the ONNX graph before TVM's importer: static input shapes, shape
  inference, constant subgraphs folded with onnx's own evaluator;
* :mod:`.onnx_conv_transpose` -- ConvTranspose's ``output_shape`` and ``auto_pad`` as the
  explicit pads of the ONNX specification (TVM's importer drops or clamps them);
* :mod:`.recurrent` -- ONNX LSTM, GRU and RNN unrolled over their static sequence length into ops
  TVM imports (its importer has no converter for them);
* :mod:`.onnx_loader` -- :func:`load_onnx`: preparation + TVM's ONNX importer, with one clear
  :class:`~runtime_sim.contract.errors.ModelImportError` for every failure;
* :mod:`.onnx_resize` -- ONNX ``Resize`` nodes in the form TVM's importer reads as they mean;
* :mod:`.rewrites`, :mod:`.conv_rewrites` -- Relax rewrites that give written-out activations
  and norms their ops back and fold inference batch norms (run by the partitioner);
* :mod:`.resize_rewrites` -- ``resize2d`` as repeats, slices, takes by constant per-axis
  tables and tap sums (run by the partitioner);
* :mod:`.gather_nd` -- ``gather_nd`` by a constant outer-product table as one take per axis
  (run by the partitioner).

May import TVM, onnx and :mod:`runtime_sim.contract` (errors). Start at :mod:`.onnx_loader`.
"""
