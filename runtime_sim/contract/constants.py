"""How constant tensors (weights baked into a region) travel inside a device program.

``DeviceProgram.constants`` maps a region tensor name to::

    {"dtype": "float32", "shape": [64, 128], "data": "<base64 of the raw bytes>"}

``data`` is the row-major (C order) array in little-endian byte order, base64-encoded
(RFC 4648, standard alphabet, with padding). A program built for timing only may omit
``data``; running it functionally then raises :class:`DeviceProgramError`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Mapping

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError, short_name


def encode_constant(array: np.ndarray, dtype: str | None = None) -> dict[str, Any]:
    """JSON-ready entry of ``DeviceProgram.constants`` for ``array`` (cast to ``dtype`` if given)."""
    arr = np.asarray(array)
    if dtype is not None:
        arr = arr.astype(dtype)
    little = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return {
        "dtype": arr.dtype.name,  # canonical name: byte order is fixed by the format
        "shape": [int(s) for s in arr.shape],
        "data": base64.b64encode(little.tobytes()).decode("ascii"),
    }


def decode_constant(name: str, entry: Mapping[str, Any]) -> np.ndarray:
    """The array of one ``DeviceProgram.constants`` entry (native byte order, writable)."""
    try:
        dtype = np.dtype(str(entry["dtype"]))
        shape = tuple(int(s) for s in entry["shape"])
    except (KeyError, TypeError, ValueError) as err:
        raise DeviceProgramError(f"constant '{short_name(name)}' has no valid dtype/shape: {err!r}") from None
    data = entry.get("data")
    if data is None:
        raise DeviceProgramError(
            f"constant '{short_name(name)}' carries no data (program built for timing only?)"
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, TypeError, ValueError) as err:
        raise DeviceProgramError(f"constant '{short_name(name)}' data is not base64: {err}") from None
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) != count * dtype.itemsize:
        raise DeviceProgramError(
            f"constant '{short_name(name)}' has {len(raw)} bytes, expected {count * dtype.itemsize} "
            f"for {dtype} {list(shape)}"
        )
    arr = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(shape)
    return arr.astype(dtype)  # native order, and a copy (frombuffer is read-only)


def encode_constants(arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """``{name: encode_constant(array)}``: the whole ``DeviceProgram.constants`` field."""
    return {name: encode_constant(arr) for name, arr in arrays.items()}
