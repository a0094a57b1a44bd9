"""Planning seconds of the Elk algorithms (tvm_icca.elk) on synthetic LLM-sized trade-off tables.

    python benchmarks/elk_algo_speed.py            # 13B-like (40 layers) and 70B-like (80 layers)
    python benchmarks/elk_algo_speed.py --layers 40 --designs elk-full

Sizes: the synthetic layer has 20 operators; with --ops-per-layer 32 / 32 the op counts match
Llama2-13B (~1,300) and Llama2-70B (~2,600) by repeating the layer's light operators.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tvm_icca.elk.designs import DESIGNS, plan_preloads  # noqa: E402
from tvm_icca.elk.synthetic import LAYER, SRAM, synthetic_llm  # noqa: E402
from tvm_icca.elk.tradeoffs import ElkMachine  # noqa: E402


def _layer(ops_per_layer: int):
    layer = list(LAYER)
    extra = 0
    while len(layer) < ops_per_layer:       # pad with light elementwise ops (distinct keys)
        layer.insert(len(layer) // 2, (f"light{extra}", 0, 0.1))
        extra += 1
    return tuple(layer)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, nargs="*", default=[40, 80])
    ap.add_argument("--ops-per-layer", type=int, default=32)
    ap.add_argument("--designs", nargs="*", default=list(DESIGNS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    machine = ElkMachine(SRAM)
    for n_layers in args.layers:
        ops = synthetic_llm(n_layers, seed=args.seed, layer=_layer(args.ops_per_layer))
        print(f"{n_layers} layers, {len(ops)} operators")
        for design in args.designs:
            t0 = time.perf_counter()
            s = plan_preloads(ops, machine, design)
            wall = time.perf_counter() - t0
            print(f"  {design:9s} plan {wall:7.2f} s   total {s.total_s * 1e3:8.3f} ms   "
                  f"orders {s.stats.orders_tried:4d}   displacement {s.stats.avg_displacement:.2f}   "
                  f"source {s.stats.source}")


if __name__ == "__main__":
    main()
