"""Helpers for tests, tutorials and benchmarks (like ``tvm.testing``).

Test models written as ONNX graphs (:mod:`.onnx_models`), random tensor expressions and
plans (:mod:`.exprs`), Relax functions from TVMScript (:mod:`.relax_functions`), the
real-export corpus (:mod:`.export_corpus`) and sweeps stopped by a signal
(:mod:`.sweep_signals`). Uses the public API and the contract; the
compiler never imports it.
"""

from tvm_icca.testing.onnx_models import OnnxCase, mlp, residual_cnn, transformer_encoder_layer

__all__ = ["OnnxCase", "mlp", "residual_cnn", "transformer_encoder_layer"]
