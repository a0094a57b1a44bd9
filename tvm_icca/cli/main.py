"""The ``tvm-icca`` command line.

Each subcommand lives in its own module ``tvm_icca.cli.<name>_command`` and exposes
``add_parser(subparsers) -> argparse.ArgumentParser`` (which sets ``func`` to a handler taking
the parsed arguments and returning an exit code). Argument types shared by the commands are in
:mod:`tvm_icca.cli.args`.

Exit status: 0 success; 1 a failure of the work (a ``tvm_icca`` error, a failed ``--check``,
a file that cannot be written); 2 bad arguments (argparse prints the usage and one line; also
a file that is not an ONNX model, or not a library: ``LibraryLoadError``); 130 interrupted
(``dse``: 128 + the signal that stopped a sweep, 130 for SIGINT, 143 for SIGTERM);
141 when the reader of standard output went away (``| head``), silently, as Unix tools stop.
Every error is one ``tvm-icca: error: ...`` line on stderr, never a traceback (set
``TVM_ICCA_TRACEBACK=1`` to see the traceback of an unexpected error).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from runtime_sim.contract.errors import IccaError, LibraryLoadError
from tvm_icca.cli.args import UsageError

#: Module name suffix of a subcommand (``compile_command`` is ``tvm-icca compile``).
COMMAND_SUFFIX = "_command"
#: Exit status when the reader of standard output went away (``tvm-icca ... | head``): 128 +
#: SIGPIPE (13), what a shell reports for a Unix tool stopped the same way.
EXIT_BROKEN_PIPE = 128 + 13


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: ``tvm-icca: error: <command>: <message> (see --help)``.

    ``add_subparsers`` creates the subcommands' parsers of the same class.
    """

    def error(self, message: str):  # type: ignore[override]
        command = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        where = f"{command}: " if command else ""
        _error(f"{where}{message} (see '{self.prog} --help')")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tvm-icca",
        description="Compile, plan and simulate models on inter-core connected AI chips.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Each command module imports what its work needs inside its handler, so that
    # `tvm-icca --help` and argument errors answer without loading TVM's compiler.
    here = os.path.dirname(os.path.abspath(__file__))
    for info in sorted(pkgutil.iter_modules([here]), key=lambda m: m.name):
        if info.name.endswith(COMMAND_SUFFIX):
            importlib.import_module(f"{__package__}.{info.name}").add_parser(subparsers)
    return parser


def _error(message: str, first_line_only: bool = False) -> None:
    """One line on stderr: a tvm_icca message (one paragraph) joined, a foreign one cut to its
    first line (TVM's carry a C++ backtrace)."""
    lines = [line.strip() for line in str(message).strip().splitlines() if line.strip()]
    if first_line_only:
        lines = lines[:1]
    print(f"tvm-icca: error: {' '.join(lines) if lines else 'unknown error'}", file=sys.stderr)


def _discard_stdout() -> None:
    """Point standard output at the null device, so that what is still buffered for the pipe
    that closed is not written again, and reported, when the interpreter exits (the pattern
    of the Python documentation, ``signal`` module, "Note on SIGPIPE")."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's captured output)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # argparse: usage + one error line (2), or --help (0)
            return exit_.code if isinstance(exit_.code, int) else 2
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe raises here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # `tvm-icca plan ... | head`: the reader has all it wanted
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("tvm-icca: interrupted", file=sys.stderr)
        return 130
    except (UsageError, LibraryLoadError) as err:  # a file that is not what it should be
        _error(str(err))
        return 2
    except IccaError as err:
        _error(str(err))
        return 1
    except OSError as err:  # e.g. the disk filled up while writing the output
        _error(f"{err.strerror or err}{f': {err.filename}' if err.filename else ''}")
        return 1
    except Exception as err:  # pylint: disable=broad-except
        if os.environ.get("TVM_ICCA_TRACEBACK"):
            raise
        first = (str(err).strip().splitlines() or ["(no message)"])[0]
        _error(f"unexpected {type(err).__name__}: {first} "
               "(set TVM_ICCA_TRACEBACK=1 for the traceback)", first_line_only=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
