"""The FLOPs of a zoo decoder's forward pass as written: the numerator of model FLOPs
utilization (MFU).

PaLM (Chowdhery et al. 2022, appendix B) defines MFU as the FLOPs the model needs -- two
per weight per token (a multiply and an add) plus the attention scores and their weighted
sum, every score of the ``T x T`` matrix whether a causal mask hides it or not -- over the
time taken, as a share of peak. It is the convention under which the long-context tables
before causal block skipping were measured (they executed every score), and it lets two
runs that skip different amounts of work be compared on the same numerator. The timing
report's ``flops_utilization`` counts the FLOPs the chip executed instead; a run that skips
the scores a causal mask hides (``tvm_icca.split.visible_keys``) executes fewer, so both
are shown, under their own names.

Norms, rotary embeddings and activations are not counted (PaLM neither): they are a few
hundredths of a percent of a layer's FLOPs.
"""

from __future__ import annotations

from typing import Any, Mapping


def written_flops(config: Mapping[str, Any]) -> int:
    """Forward FLOPs of a zoo decoder (``Workload.config``) in the prefill or training phase:
    the projections and the MLP at 2 FLOPs per weight per token, every attention score and
    its weighted sum (``2 * heads * T * T * head_dim`` each), and the head's logits for the
    tokens the phase returns them for (the last token of each prompt in prefill, every token
    in training)."""
    d, heads, kv_heads = config["hidden"], config["heads"], config["kv_heads"]
    head_dim = config.get("head_dim") or d // heads
    tokens, batch = config["seq_len"], config["batch"]
    per_token = (d * heads * head_dim  # q
                 + 2 * d * kv_heads * head_dim  # k, v
                 + heads * head_dim * d  # o
                 + 3 * d * config["ffn"])  # gate, up, down
    layer = 2 * batch * tokens * per_token + 2 * 2 * batch * heads * tokens * tokens * head_dim
    logits = batch * (tokens if config["phase"] == "train" else 1)
    return config["layers"] * layer + 2 * logits * d * config["vocab"]


def mfu(config: Mapping[str, Any], seconds: float, peak_flops: float) -> float:
    """Model FLOPs utilization: :func:`written_flops` over ``seconds`` at ``peak_flops``."""
    return written_flops(config) / (seconds * peak_flops) if seconds > 0 and peak_flops > 0 else 0.0
