"""The compiler/device boundary: ``.importlinter``, the code and the docs say the same.

``lint-imports`` (run first by ``make test``) checks that no forbidden import exists. These
tests check what it cannot: that every member of the device side and of the compiler is
classified by a contract (a new package cannot slip past the boundary unnamed), that the
compiler really imports every device-side package the contract allows (the docs do not
overstate), and that the README and the two architecture pages name the same packages.
"""

from __future__ import annotations

import ast
import configparser
import pkgutil
import re
from pathlib import Path

import pytest

import runtime_sim
import tvm_icca

ROOT = Path(__file__).resolve().parents[1]
DEVICE_CONTRACT = "importlinter:contract:compiler-device-side"
HOST_TOOLS_CONTRACT = "importlinter:contract:compiler-without-host-tools"


def _config() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    return parser


def _modules(section: configparser.SectionProxy, key: str) -> set[str]:
    return set(section[key].split())


def _members(package) -> set[str]:
    """Direct subpackages and modules of ``package`` (private ones included)."""
    return {f"{package.__name__}.{info.name}" for info in pkgutil.iter_modules(package.__path__)}


def _device_side() -> set[str]:
    return _members(runtime_sim) | {"schedules"}


def _allowed() -> set[str]:
    """The device-side packages the contract's comment lists as allowed, one per line."""
    text = (ROOT / ".importlinter").read_text()
    head = text[:text.index(f"[{DEVICE_CONTRACT}]")]
    head = head[head.rindex("\n\n"):]  # the comment block right above the contract
    return set(re.findall(r"^#\s+(runtime_sim\.\w+|schedules)\s{2,}", head, flags=re.M))


def _imported_device_packages(module_prefixes: set[str]) -> dict[str, set[str]]:
    """Device-side package -> compiler modules importing it, found by parsing the source."""
    device = _device_side()
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tvm_icca").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if not any(name == p or name.startswith(p + ".") for p in module_prefixes):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
                if node.module == "runtime_sim":
                    targets = [f"runtime_sim.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                for package in device:
                    if target == package or target.startswith(package + "."):
                        found.setdefault(package, set()).add(name)
    return found


def test_contract_lists_three_allowed_packages():
    assert _allowed() == {"runtime_sim.contract", "runtime_sim.machine", "schedules"}


def test_every_device_member_allowed_or_forbidden():
    forbidden = _modules(_config()[DEVICE_CONTRACT], "forbidden_modules")
    allowed = _allowed()
    assert not allowed & forbidden
    assert allowed | forbidden == _device_side(), (
        "a member of runtime_sim is neither allowed to the compiler (the comment above "
        "the compiler-device-side contract) nor forbidden by it")


def test_every_compiler_member_is_compiler_or_host_tool():
    config = _config()
    compiler = _modules(config[DEVICE_CONTRACT], "source_modules")
    assert compiler == _modules(config[HOST_TOOLS_CONTRACT], "source_modules")
    host_tools = _modules(config[HOST_TOOLS_CONTRACT], "forbidden_modules")
    assert not compiler & host_tools
    assert compiler | host_tools == _members(tvm_icca)


def test_compiler_imports_exactly_the_allowed_packages():
    """Measured from the source: no allowed package is unused, none forbidden is used."""
    compiler = _modules(_config()[DEVICE_CONTRACT], "source_modules")
    imported = _imported_device_packages(compiler)
    assert set(imported) == _allowed(), imported
    # The reason given for the machine model: the plan search, the Elk tables and Elk use it.
    users = imported["runtime_sim.machine"]
    for stage in ("tvm_icca.plan_search", "tvm_icca.model_pass", "tvm_icca.elk"):
        assert any(u.startswith(stage + ".") for u in users), (stage, users)


def test_host_tools_are_what_imports_the_executors():
    host_tools = _modules(_config()[HOST_TOOLS_CONTRACT], "forbidden_modules")
    imported = _imported_device_packages(host_tools)
    forbidden = _modules(_config()[DEVICE_CONTRACT], "forbidden_modules")
    # Otherwise the contract would forbid nothing anyone wants, and the docs' sentence on the
    # host-side tools would be stale.
    assert forbidden <= set(imported), imported
    assert imported["runtime_sim.functional"] == {"tvm_icca.device_call.device_entry"}


def _section(path: Path, heading: str) -> str:
    """The text from ``heading`` to the next heading of the same or a higher level."""
    text = path.read_text()
    start = text.index(heading)
    if path.suffix == ".md":
        level = heading.split()[0]
        rest = text[start + len(heading):]
        ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, flags=re.M)]
    else:  # reStructuredText: the next section title underlined with '-' or '='
        rest = text[start + len(heading):]
        ends = [m.start() for m in re.finditer(r"^\S.*\n[-=]{3,}$", rest, flags=re.M)][1:]
    return heading + (rest[:ends[0]] if ends else rest)


DOC_SECTIONS = [
    ("README.md", "## How it is built"),
    ("docs/architecture.rst", "What the compiler imports from the device side"),
    ("docs/design/layout.md", "## Layer rules"),
]


@pytest.mark.parametrize("path, heading", DOC_SECTIONS)
def test_docs_name_the_boundary(path, heading):
    section = _section(ROOT / path, heading)
    # Paths and dotted names count alike: runtime_sim/machine/ is runtime_sim.machine.
    dotted = re.sub(r"\.py\b", "", section.replace("/", "."))
    forbidden = _modules(_config()[DEVICE_CONTRACT], "forbidden_modules")
    for package in sorted(_allowed() | forbidden):
        assert re.search(rf"(?<![\w.]){re.escape(package)}(?!\w)", dotted), (path, package)
    assert "machine/links.py" in section, path
    assert "only runtime_sim/contract" not in section and "import only this" not in section


def test_readme_names_files_that_exist():
    """The README's first files to read (the compiler's entry, the IR) and every folder it
    names in "How it is built" exist, so a rename cannot leave the newcomer a dead path."""
    section = _section(ROOT / "README.md", "## How it is built")
    paths = set(re.findall(r"`((?:tvm_icca|runtime_sim|schedules)/[\w/]*(?:\.py)?)`", section))
    assert {"tvm_icca/backend/target.py", "runtime_sim/contract/program.py"} <= paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing
    # The IR's definition is named beside the words a newcomer looks for.
    assert re.search(r"runtime_sim/contract/program\.py`: the device program format \(the IR\)",
                     section)


# -- units of one job each (issue 39, item 3) ---------------------------------------------------
#: A source file longer than this holds more than one job: split it by job (as
#: runtime_sim/contract/hardware.py and runtime_sim/machine/topology.py were).
MAX_SOURCE_LINES = 800
SOURCE_ROOTS = ("tvm_icca", "runtime_sim", "schedules", "benchmarks", "tests")


def test_no_source_file_exceeds_the_line_limit():
    """No Python file of the packages, the benchmarks or the tests is over 800 lines."""
    files = [path for root in SOURCE_ROOTS for path in (ROOT / root).rglob("*.py")
             if "__pycache__" not in path.parts]
    assert len(files) > 200  # the walk found the tree, not an empty folder
    lengths = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
               for path in files}
    too_long = {path: n for path, n in sorted(lengths.items()) if n > MAX_SOURCE_LINES}
    assert not too_long, f"over {MAX_SOURCE_LINES} lines, split by job: {too_long}"
