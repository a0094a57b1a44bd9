"""Helpers for tests, tutorials and benchmarks (like ``tvm.testing``)."""

from tvm_icca.testing.onnx_models import OnnxCase, mlp, residual_cnn, transformer_encoder_layer

__all__ = ["OnnxCase", "mlp", "residual_cnn", "transformer_encoder_layer"]
