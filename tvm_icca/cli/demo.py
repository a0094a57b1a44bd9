"""``tvm-icca demo``: the bundled end-to-end example (same as ``make demo``)."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("demo", help="compile and run the bundled ONNX encoder layer")
    parser.add_argument("--hw", default="ipu-mk2", help="hardware preset")
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    from tvm_icca.drivers.demo import main

    return main(["--hw", args.hw])
