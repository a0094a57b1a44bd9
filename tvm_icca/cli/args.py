"""Argument types shared by the ``tvm-icca`` commands: every check done while parsing.

Each function is an argparse ``type=``: it converts one command-line string or raises
``argparse.ArgumentTypeError``, which argparse prints as one ``tvm-icca <command>: error:``
line after the usage and exits with status 2, before any work is done. A command that finds a
bad combination of arguments after parsing raises :class:`UsageError` (printed by
:func:`tvm_icca.cli.main.main` as one line, exit status 2).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.gpu import GPU_PRESET_NAMES
from runtime_sim.contract.presets import DEFAULT_PRESET, PRESET_NAMES
from tvm_icca.model_pass.state_place import STATE_CHOICES

__all__ = [
    "UsageError", "positive_int", "nonneg_int", "finite_float", "unit_float", "existing_file",
    "writable_path", "shape_arg", "shape_dict", "hardware_help", "hardware_arg",
    "add_hardware_argument", "hardware_or_gpu_arg", "add_state_argument", "add_progress_argument", "nonneg_float",
    "tuning_records", "add_model_arguments",
]


class UsageError(Exception):
    """Arguments that are each valid but do not go together (exit status 2)."""


def _int(text: str) -> int:
    try:
        return int(text, 10)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1 (a batch, a size, a stride)."""
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def nonneg_int(text: str) -> int:
    """An integer >= 0 (a padding, a count)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {value}")
    return value


def finite_float(text: str) -> float:
    """A finite number (no nan, no inf)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def nonneg_float(text: str) -> float:
    """A finite number >= 0 (a tolerance)."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def unit_float(text: str) -> float:
    """A finite number in [0, 1] (a ratio threshold)."""
    value = finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text!r}")
    return value


def existing_file(text: str) -> str:
    """The path of an existing, readable regular file."""
    if not text:
        raise argparse.ArgumentTypeError("empty file name")
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"no such file: '{text}'")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"'{text}' is a directory, not a file")
    if not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read '{text}' (permission denied)")
    return text


def tuning_records(text: str) -> str:
    """A tuning work directory holding records (``tvm-icca tune --work-dir``)."""
    from tvm_icca.records.database import RECORD_FILE  # pylint: disable=import-outside-toplevel

    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"no such directory: '{text}'")
    if not os.path.exists(os.path.join(text, RECORD_FILE)):
        raise argparse.ArgumentTypeError(f"'{text}' holds no tuning records ({RECORD_FILE}); "
                                         "create them with `tvm-icca tune --work-dir`")
    return text


def writable_path(text: str) -> str:
    """A file path that can be written: its directory exists and is writable, and it is not
    a directory itself (checked before the work whose result it receives)."""
    if not text:
        raise argparse.ArgumentTypeError("empty file name")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"'{text}' is a directory, not a file")
    directory = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(directory):
        raise argparse.ArgumentTypeError(f"directory '{os.path.dirname(text) or '.'}' of "
                                         f"'{text}' does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into directory '{directory}' "
                                         "(permission denied)")
    if os.path.exists(text) and not os.access(text, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot overwrite '{text}' (permission denied)")
    return text


def shape_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=1,3,224,224`` (an input's static shape; ``NAME=`` for a scalar)."""
    name, sep, dims = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=D1,D2,... (e.g. x=1,3,224,224), got {text!r}")
    shape: list[int] = []
    for dim in (d.strip() for d in dims.split(",")) if dims.strip() else ():
        try:
            value = int(dim, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"dimension {dim!r} of {name} is not an integer (expected NAME=D1,D2,...)") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"dimension {value} of {name} must be positive")
        shape.append(value)
    return name, tuple(shape)


def shape_dict(pairs: list[tuple[str, tuple[int, ...]]] | None) -> dict[str, tuple[int, ...]] | None:
    """The ``--shape`` arguments as a dict (``None`` if none); a name given twice is an error."""
    if not pairs:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    for name, shape in pairs:
        if name in shapes and shapes[name] != shape:
            raise UsageError(f"--shape {name} given twice with different shapes")
        shapes[name] = shape
    return shapes


def hardware_help(what: str, default: str = DEFAULT_PRESET, gpus: bool = False) -> str:
    """The help of a ``--hw`` option: what the chip is for, its default, every preset and the
    hardware files it also reads (and the GPU presets, when ``gpus``)."""
    gpu_text = (f"; GPU presets, a roofline estimate: {', '.join(GPU_PRESET_NAMES)}"
                if gpus else "")
    return (f"{what}: a preset or the path of a .json/.toml hardware file (default {default}; "
            f"presets, any case: {', '.join(PRESET_NAMES)}{gpu_text})")


def add_hardware_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                          what: str, gpus: bool = False) -> None:
    """``--hw PRESET|FILE``: the chip, with the one default every command shares
    (:data:`~runtime_sim.contract.hardware.DEFAULT_PRESET`, also the API's). ``args.hw`` is
    the resolved :class:`~runtime_sim.contract.hardware.HardwareSpec` (see :func:`hardware_arg`);
    with ``gpus``, a GPU preset resolves to a :class:`~runtime_sim.contract.gpu.GpuSpec`
    (:func:`hardware_or_gpu_arg`)."""
    parser.add_argument("--hw", type=hardware_or_gpu_arg if gpus else hardware_arg,
                        default=DEFAULT_PRESET, metavar="PRESET|FILE",
                        help=hardware_help(what, gpus=gpus))


def add_state_argument(parser: argparse.ArgumentParser) -> None:
    """``--state``: where weights and KV caches live (:attr:`tvm_icca.CompileOptions.state`)."""
    parser.add_argument("--state", default="auto", choices=STATE_CHOICES,
                        help="where weights and KV caches live: chip (loaded once, kept in SRAM), "
                        "hbm (preloaded every run), host (sent every run); auto (default): hbm "
                        "on a chip with HBM, else chip when the model fits, else host")


def add_layer_reuse_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-layer-reuse``, read as ``args.reuse_layers``
    (:attr:`tvm_icca.CompileOptions.reuse_layers`)."""
    parser.add_argument("--no-layer-reuse", dest="reuse_layers", action="store_false",
                        help="search the HBM preload schedule over every layer instead of one "
                        "period of identical layers and its copies (slower; by default one "
                        "period, which gives the same programs on the zoo's LLMs)")


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``, read as ``args.progress``: ``True`` (the default policy of
    :mod:`tvm_icca.progress`) or ``False``, what every ``progress=`` parameter takes."""
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bars (by default a phase that runs over a second "
                        "shows one on standard error when it is a terminal)")


def hardware_arg(text: str) -> HardwareSpec:
    """The chip of ``--hw``: a preset name (``tvm_icca.PRESET_NAMES``, any case) or the path of a
    ``.json`` / ``.toml`` hardware file (``tvm_icca.load_hardware``), resolved once, here, by
    the API's own resolver, so every command accepts the same chips and a bad file is a usage
    error before any work."""
    # pylint: disable=import-outside-toplevel
    from runtime_sim.contract.errors import IccaError
    from tvm_icca.hardware_choice import resolve_hardware

    try:
        return resolve_hardware(text)
    except IccaError as err:
        raise argparse.ArgumentTypeError(str(err).splitlines()[0] if str(err) else text) from None


def hardware_or_gpu_arg(text: str) -> Any:
    """The chip of a ``--hw`` that also takes a GPU preset (``tvm-icca simulate``): a
    :class:`~runtime_sim.contract.gpu.GpuSpec` for one of
    :data:`~runtime_sim.contract.gpu.GPU_PRESET_NAMES`, else :func:`hardware_arg`'s chip."""
    # pylint: disable=import-outside-toplevel
    from runtime_sim.contract.gpu import gpu_preset, is_gpu_preset

    return gpu_preset(text) if is_gpu_preset(text) else hardware_arg(text)


def add_model_arguments(parser: argparse.ArgumentParser, example: str) -> None:
    """The MODEL argument of the commands that take a zoo workload or an ONNX file
    (``simulate``, ``tune``): the model itself, ONNX input shapes and the zoo's options.
    ``example``: a workload name for the help text."""
    parser.add_argument("model_arg", nargs="?", metavar="MODEL",
                        help=f"workload name (e.g. {example}) or path of an ONNX file")
    parser.add_argument("--model", dest="model_opt", metavar="MODEL",
                        help="same as the positional MODEL")
    parser.add_argument("--shape", action="append", type=shape_arg, metavar="NAME=D1,D2,...",
                        help="static shape of an ONNX input with symbolic dimensions "
                        "(repeatable), e.g. --shape input=1,3,224,224")
    parser.add_argument("--batch", type=positive_int, default=None,
                        help="zoo: batch size (default: the model's, 1 for most, 4096 points "
                        "for NeRF)")
    parser.add_argument("--context", "--seq-len", dest="context", type=positive_int, default=None,
                        help="zoo: KV-cache context of an LLM decode step (default 2048), tokens "
                        "per sequence of an LLM prefill or training forward (default 2048) or "
                        "sequence length of BERT (default 128); ignored by other models")
    parser.add_argument("--phase", default=None, choices=("decode", "prefill", "train"),
                        help="zoo LLMs: a decode step against a KV cache (default), the prefill "
                        "of a prompt, or the forward pass of training over whole sequences")
    parser.add_argument("--layers", type=positive_int, default=None,
                        help="zoo: keep only the first N layers")
    parser.add_argument("--dtype", default=None, choices=("float16", "float32"),
                        help="zoo: float16 (default) or float32")
    parser.add_argument("--tiny", action="store_true",
                        help="zoo: the model's small test config (same architecture, few channels)")
