"""tvm_icca.device_call.library: a built library is checked before TVM's loader maps it."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

from runtime_sim.contract.errors import LibraryLoadError
from tvm_icca.device_call.library import load_library


@tvm.script.ir_module
class _AddOne:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y = R.add(x, R.const(1.0, "float32"))
        return y


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("lib") / "add_one.so"
    tvm.compile(_AddOne, target="llvm").export_library(str(path))
    return path


def test_a_whole_library_loads_and_runs(library):
    vm = relax.VirtualMachine(load_library(str(library)), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(np.arange(4, dtype="float32"))).numpy()
    np.testing.assert_array_equal(out, np.arange(4, dtype="float32") + 1)


@pytest.mark.parametrize("cut", [0, 1, 63, 64, 65, 4096, -1])
def test_a_cut_library_is_one_clear_error_not_a_crash(library, tmp_path, cut):
    """The dynamic loader maps the file's segments: a library cut short killed Python with
    SIGBUS when loaded by ``tvm.runtime.load_module``; ``load_library`` refuses it."""
    data = library.read_bytes()
    cut_path = tmp_path / "cut.so"
    cut_path.write_bytes(data[:cut if cut >= 0 else len(data) - 1])
    with pytest.raises(LibraryLoadError, match="expected a library built by") as info:
        load_library(str(cut_path))
    assert str(cut_path) in str(info.value)


def test_missing_and_foreign_files_are_named(tmp_path):
    with pytest.raises(LibraryLoadError, match="cannot read"):
        load_library(str(tmp_path / "absent.so"))
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\x08\x07")
    with pytest.raises(LibraryLoadError, match="by its name, an ONNX model"):
        load_library(str(model))
