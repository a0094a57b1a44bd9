"""The wheel ships every package and every data file of the source tree.

An editable install (the Makefile's) imports from the source tree and hides a subpackage or a
data file missing from ``setup.py``; a user's ``pip install tvm-icca`` then fails at
``import tvm_icca`` (and TVM's backend autoloader swallows that: the target silently does not
exist). ``.ci/run`` installs the wheel into a fresh virtualenv and runs ``tvm-icca demo``;
this test is the quick check of the same thing.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

# one worker builds the module's shared fixture once (make test runs on several)
pytestmark = pytest.mark.xdist_group("packaging")

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE_ROOTS = ("tvm_icca", "schedules", "runtime_sim")
#: Top-level files the build reads.
BUILD_FILES = ("setup.py", "MANIFEST.in", "setup.cfg", "pyproject.toml")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.so")


def _source_packages() -> set[str]:
    """Every folder with an ``__init__.py`` under the package roots, as a wheel path."""
    return {
        init.parent.relative_to(ROOT).as_posix()
        for root in PACKAGE_ROOTS
        for init in (ROOT / root).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }


def _source_data_files() -> set[str]:
    """Every non-Python file inside a package (the code loads them with importlib.resources)."""
    return {
        path.relative_to(ROOT).as_posix()
        for root in PACKAGE_ROOTS
        for path in (ROOT / root).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
        and path.suffix not in (".py", ".pyc", ".pyo", ".so")
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[set[str], str]:
    """The file list of a freshly built wheel and its entry_points.txt."""
    # Build from a clean copy: a stale build/lib would ship modules deleted since, and a
    # concurrent build in the working tree would race with this one.
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in BUILD_FILES:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    for root in PACKAGE_ROOTS:
        shutil.copytree(ROOT / root, src / root, ignore=IGNORED)
    dist = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = list(dist.glob("tvm_icca-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        return names, archive.read(entry_points).decode()


@pytest.fixture(scope="module")
def wheel_files(wheel) -> set[str]:
    return wheel[0]


def test_wheel_has_every_package(wheel_files):
    packages = _source_packages()
    assert {"tvm_icca/plan_search", "tvm_icca/cli", "runtime_sim/timing"} <= packages
    missing = sorted(p for p in packages if f"{p}/__init__.py" not in wheel_files)
    assert not missing, f"packages missing from the wheel: {missing}"


def test_wheel_has_every_module(wheel_files):
    modules = {
        path.relative_to(ROOT).as_posix()
        for package in _source_packages()
        for path in (ROOT / package).glob("*.py")
    }
    missing = sorted(modules - wheel_files)
    assert not missing, f"modules missing from the wheel: {missing}"


def test_wheel_has_every_data_file(wheel_files):
    data = _source_data_files()
    assert "tvm_icca/data/encoder_layer.onnx" in data  # the demo's model
    missing = sorted(data - wheel_files)
    assert not missing, f"data files missing from the wheel: {missing}"


def test_wheel_declares_entry_points(wheel):
    text = wheel[1]
    assert "[tvm.backends]" in text and "icca = tvm_icca._autoload:autoload" in text
    assert "[console_scripts]" in text and "tvm-icca = tvm_icca.cli.main:main" in text
