"""Synthetic LLM-like trade-off tables, for tests and benchmarks of the Elk algorithms.

A model is prologue + ``n_layers`` identical decoder layers + epilogue (Elk §4.4's structure).
Tables are a deterministic function of (seed, key), so identical layers get identical tables.
Sizes are abstract (bytes per core of a chip with ``SRAM`` bytes per core); times are seconds.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence

from tvm_icca.elk.tradeoffs import ExecPoint, OpTradeoffs, PreloadPoint

SRAM = 600_000

# (name, weight KB per core, relative compute) of one decoder layer; weight 0: loads nothing
LAYER = (
    ("rmsnorm", 2, 0.2), ("q_proj", 120, 1.0), ("k_proj", 120, 1.0), ("v_proj", 120, 1.0),
    ("rope_q", 0, 0.2), ("rope_k", 0, 0.2), ("kv_append", 1, 0.1), ("attn_qk", 160, 0.8),
    ("scale", 0, 0.1), ("softmax", 0, 0.3), ("attn_av", 160, 0.8), ("o_proj", 120, 1.0),
    ("residual", 0, 0.1), ("rmsnorm2", 2, 0.2), ("gate", 300, 2.2), ("up", 300, 2.2),
    ("silu", 0, 0.2), ("mul", 0, 0.1), ("down", 300, 2.2), ("residual2", 0, 0.1),
)
_PROLOGUE = (("embed", 40, 0.3),)
_EPILOGUE = (("final_norm", 2, 0.2), ("lm_head", 250, 2.0))


def _op(seed: int, key: str, weight_kb: int, work: float, hbm_bw: float) -> OpTradeoffs:
    rng = random.Random(zlib.crc32(f"{seed}:{key}".encode()))
    n_exec = rng.randint(3, 7)
    t_fast = 4e-6 * work * rng.uniform(0.8, 1.2)
    space = int((weight_kb * 1.4 + 40 * work + 8) * 1000)
    execs = []
    t = t_fast
    for _ in range(n_exec):
        execs.append(ExecPoint(t, space, t * rng.uniform(0.1, 0.6)))
        space = int(space * rng.uniform(0.6, 0.85))
        t *= rng.uniform(1.05, 1.5)
    preloads: list[tuple[PreloadPoint, ...]] = []
    hbm = weight_kb * 1000.0
    if weight_kb:
        for ep in execs:
            n_pre = rng.randint(1, 4)
            pspace = int(min(ep.space, weight_kb * 1000 * rng.uniform(1.0, 1.6)))
            front, dist = [], 0.0
            for _ in range(n_pre):
                net = pspace / (hbm_bw * 2.5)
                front.append(PreloadPoint(pspace, dist, max(hbm / hbm_bw, net), net))
                pspace = int(pspace * rng.uniform(0.4, 0.8))
                dist += ep.time_s * rng.uniform(0.05, 0.4)
                if pspace < weight_kb * 1000 // 4:
                    break
            preloads.append(tuple(front))
    return OpTradeoffs(key, tuple(execs), tuple(preloads), hbm if weight_kb else 0.0,
                       int(rng.uniform(0, 0.05) * SRAM))


def synthetic_llm(n_layers: int, seed: int = 0, hbm_bw: float = 12e9,
                  layer: Sequence[tuple[str, int, float]] = LAYER) -> list[OpTradeoffs]:
    """prologue + ``n_layers`` identical layers + epilogue; ``hbm_bw`` is bytes per core per second."""
    ops = [_op(seed, f"pro.{n}", w, c, hbm_bw) for n, w, c in _PROLOGUE]
    body = [_op(seed, f"layer.{n}", w, c, hbm_bw) for n, w, c in layer]
    for _ in range(n_layers):
        ops.extend(body)
    ops.extend(_op(seed, f"epi.{n}", w, c, hbm_bw) for n, w, c in _EPILOGUE)
    return ops
