"""Loading a library built for target ``icca``, checked first: that the file is a whole shared library.

``tvm.runtime.load_module`` hands a ``.so`` to the system's dynamic loader, which maps the
file's segments into memory: a truncated library (a copy cut short, a full disk) then kills
the process with SIGBUS when a page beyond the end of the file is touched, and any other file
gets TVM's own loader text ("Loader for `.onnx` files is not registered ..."). So the ELF
header is read first (the layout of the System V ABI's ELF specification, the "gABI"): the
program and section header tables, and every segment's bytes, must lie inside the file.
Everything the check cannot see (another machine's library, a library that is not TVM's)
is left to the loader, whose first line becomes the message.
"""

from __future__ import annotations

import os
import struct
from typing import Any

from runtime_sim.contract.errors import LibraryLoadError

__all__ = ["EXPECTED", "check_library_file", "load_library"]

#: What :func:`load_library` (and ``tvm-icca run``) takes, as every message says it.
EXPECTED = "a library built by `tvm-icca compile` (a shared library, .so)"

_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3  # e_type of a shared object
#: Per ELF class (1: 32-bit, 2: 64-bit): the struct format of an address or offset, the
#: header's size and the byte offsets of the fields read here (header, then program header).
_LAYOUT = {
    1: {"word": "I", "header": 52, "e_type": 16, "e_phoff": 28, "e_shoff": 32,
        "e_phentsize": 42, "e_phnum": 44, "e_shentsize": 46, "e_shnum": 48,
        "p_offset": 4, "p_filesz": 16},
    2: {"word": "Q", "header": 64, "e_type": 16, "e_phoff": 32, "e_shoff": 40,
        "e_phentsize": 54, "e_phnum": 56, "e_shentsize": 58, "e_shnum": 60,
        "p_offset": 8, "p_filesz": 32},
}


def load_library(path: str) -> Any:
    """``tvm.runtime.load_module(path)``, after checking that ``path`` is a whole shared library.

    For a library built by ``tvm.compile(..., target="icca")`` and exported; the check is
    :func:`check_library_file`.

    Parameters
    ----------
    path : str
        The shared library (``.so``) ``export_library`` wrote.

    Returns
    -------
    tvm.runtime.Module
        The library, for ``relax.VirtualMachine(lib, tvm.cpu())``.

    Raises
    ------
    LibraryLoadError
        If the file is missing, empty, not a shared library, truncated (which would kill the
        process inside the dynamic loader), or refused by the loader (its first line quoted).
    """
    import tvm  # pylint: disable=import-outside-toplevel

    check_library_file(path)  # before the loader: a truncated library would crash it
    try:
        return tvm.runtime.load_module(os.path.abspath(path))
    except Exception as err:  # pylint: disable=broad-except
        raise LibraryLoadError(f"cannot load '{path}' ({first_line(err)}); expected "
                               f"{EXPECTED}") from None


def first_line(err: BaseException) -> str:
    """The first line of a foreign error (TVM's carry a C++ backtrace)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def check_library_file(path: str) -> None:
    """Raise :class:`~runtime_sim.contract.errors.LibraryLoadError` unless ``path`` is a whole
    ELF shared library (it may still be another machine's, or not TVM's: the loader says so)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as file:
            data = file.read(min(size, 1 << 20))
    except OSError as err:
        raise LibraryLoadError(f"cannot read '{path}': {err.strerror or err}") from None
    if size == 0:
        raise LibraryLoadError(f"'{path}' is empty; expected {EXPECTED}")
    if data[:4] != _ELF_MAGIC:
        if path.lower().endswith(".onnx"):
            library = os.path.splitext(os.path.basename(path))[0] + ".so"
            raise LibraryLoadError(
                f"'{path}' is not a shared library but, by its name, an ONNX model; expected "
                f"{EXPECTED}: compile it first (`tvm-icca compile {path} -o {library}`) or time "
                f"it with `tvm-icca simulate {path}`")
        raise LibraryLoadError(f"'{path}' is not a shared library (no ELF header); expected "
                               f"{EXPECTED}")
    problem = _elf_problem(data, size)
    if problem:
        raise LibraryLoadError(f"'{path}' is {problem}; expected {EXPECTED}")


def _elf_problem(data: bytes, size: int) -> str | None:
    """Why an ELF file (its first bytes ``data``, ``size`` bytes in all) cannot be a whole
    shared library, or ``None``."""
    layout = _LAYOUT.get(data[4]) if len(data) > 5 else None
    if layout is None or data[5] not in (1, 2):
        return "an ELF file with an invalid header"
    if size < layout["header"]:
        return f"truncated: {size} bytes, shorter than an ELF header ({layout['header']} bytes)"
    order = "<" if data[5] == 1 else ">"

    def read(field: str, base: int = 0) -> int:
        fmt = layout["word"] if field.endswith(("off", "offset", "filesz")) else "H"
        return struct.unpack_from(order + fmt, data, base + layout[field])[0]

    if read("e_type") != _ET_DYN:
        return "an ELF file but not a shared library (an object file or a program)"
    for table in ("ph", "sh"):
        end = read(f"e_{table}off") + read(f"e_{table}entsize") * read(f"e_{table}num")
        if end > size:
            return f"truncated: {size} bytes, its ELF header tables end at byte {end}"
    for i in range(read("e_phnum")):
        base = read("e_phoff") + i * read("e_phentsize")
        if base + read("e_phentsize") > len(data):
            break  # program headers beyond the bytes read: left to the loader
        end = read("p_offset", base) + read("p_filesz", base)
        if end > size:
            return f"truncated: {size} bytes, its segment {i} ends at byte {end}"
    return None
