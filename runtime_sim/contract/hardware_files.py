"""A chip of one's own: reading a hardware description file (``.json`` or ``.toml``).

:func:`load_hardware` reads one; :func:`is_hardware_file_name` tells a file's path from a
preset name wherever either is accepted.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Any

from runtime_sim.contract.errors import InvalidHardwareSpecError
from runtime_sim.contract.hardware import HardwareSpec, override_fields
from runtime_sim.contract.presets import DEFAULT_PRESET, PRESET_NAMES, preset
from runtime_sim.contract.text_files import parse_json, parse_toml, read_text


#: The file formats :func:`load_hardware` reads, by suffix.
HARDWARE_FILE_SUFFIXES = (".json", ".toml")
#: The key of a hardware file that names the preset the file's other fields override.
_BASE_KEY = "base"


def is_hardware_file_name(value: Any) -> bool:
    """Whether ``value`` names a hardware file rather than a preset: a path object, or a string
    ending in one of :data:`HARDWARE_FILE_SUFFIXES` (no preset name does)."""
    if isinstance(value, os.PathLike):
        return True
    return isinstance(value, str) and value.strip().lower().endswith(HARDWARE_FILE_SUFFIXES)


def load_hardware(path: "str | os.PathLike[str]") -> HardwareSpec:
    """Read a chip from a hardware description file (``.json`` or ``.toml``).

    The file is one object (a JSON object, or a TOML document's top-level keys) holding either

    * every field of :meth:`HardwareSpec.to_dict` (those with a default may be left out), or
    * ``base = "<preset>"`` (one of :data:`PRESET_NAMES`) and the fields that differ from it.

    ``name`` defaults to the file's stem (``mychip.toml`` is chip ``mychip``). Units are those of
    :class:`HardwareSpec`: bytes, bytes per second, seconds, Hz. Example (TOML)::

        base = "ipu-mk2"
        name = "mk2-2x-vector"
        vector_flops_per_cycle = 8.0
        notes = "IPU Mk2 with twice the vector throughput"

    Parameters
    ----------
    path : str or os.PathLike
        The file; its suffix (``.json`` or ``.toml``, any case) chooses the format.

    Returns
    -------
    HardwareSpec
        The chip, validated like any other spec (:meth:`HardwareSpec.validate`).

    Raises
    ------
    InvalidHardwareSpecError
        One error for everything that can go wrong, naming the file: it does not exist or cannot
        be read, another suffix, a syntax error (with its line and column), a field no spec has
        (with the closest field's name), an unknown ``base`` preset, a missing field, or an
        impossible value.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidHardwareSpecError(
            f"a hardware file is a path (str or os.PathLike), not {type(path).__name__}")
    where = os.fspath(path)

    def bad(why: str) -> InvalidHardwareSpecError:
        return InvalidHardwareSpecError(f"hardware file '{where}': {why}")

    suffix = os.path.splitext(where)[1].lower()
    if suffix not in HARDWARE_FILE_SUFFIXES:
        raise bad(f"unknown format '{suffix or '(no suffix)'}'; a hardware file ends in "
                  f"{' or '.join(HARDWARE_FILE_SUFFIXES)}")
    text = read_text(where, bad)
    data = parse_json(text, bad) if suffix == ".json" else parse_toml(text, bad)
    if not isinstance(data, dict):
        raise bad(f"must hold one object of fields, not a {type(data).__name__}")

    known = [f.name for f in dataclasses.fields(HardwareSpec)]
    unknown = [key for key in data if key not in known and key != _BASE_KEY]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, known + [_BASE_KEY], n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise bad(f"unknown field '{key}'; {hint}known fields: {_BASE_KEY}, {', '.join(known)}")

    fields = dict(data)
    base = fields.pop(_BASE_KEY, None)
    if base is not None:
        if not isinstance(base, str):
            raise bad(f"base must be a preset name ({', '.join(PRESET_NAMES)}), not {base!r}")
        try:
            base_spec = preset(base)
        except InvalidHardwareSpecError as err:
            raise bad(f"base: {err}") from None
        fields = override_fields({**base_spec.to_dict(), "notes": f"{base_spec.name} with the "
                              f"fields of {os.path.basename(where)}", "name": None}, fields)
    if fields.get("name") is None:
        fields["name"] = os.path.splitext(os.path.basename(where))[0]
    try:
        return HardwareSpec.from_dict(fields)
    except InvalidHardwareSpecError as err:
        hint = (f"; or give {_BASE_KEY}, a preset to start from (e.g. '{DEFAULT_PRESET}')" if (
            base is None and str(err).startswith("incomplete")) else "")
        raise bad(f"{err}{hint}") from None
