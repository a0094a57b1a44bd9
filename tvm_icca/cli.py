"""The ``tvm-icca`` command line.

Each subcommand lives in its own module of :mod:`tvm_icca.commands` and exposes
``add_parser(subparsers) -> argparse.ArgumentParser`` (which sets ``func`` to a handler taking
the parsed arguments and returning an exit code). Errors of tvm_icca are printed as one line.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from runtime_sim.errors import IccaError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tvm-icca",
        description="Compile, plan and simulate models on inter-core connected AI chips.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "add_parser"):
            module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except IccaError as err:
        print(f"tvm-icca: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
