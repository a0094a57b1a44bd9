"""The public API explains itself: every public name has a real signature and a numpydoc
docstring whose ``Parameters`` name exactly its parameters (issue 26, item 1).

The public names are ``tvm_icca.__all__`` (exactly the names the API reference documents)
and the ``runtime_sim`` entry points users reach directly. The docstrings are parsed here, section by section, so a parameter added
without documentation, or documented after it was removed, fails.
"""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import pydoc
import re

import pytest
import tvm
from tvm import relax

import tvm_icca
from runtime_sim import run_stats
from runtime_sim.contract import hardware, presets
from runtime_sim.contract.errors import ERROR_TYPES
from runtime_sim.contract.metrics import METRICS
from runtime_sim.timing import TimingReport, simulate_timing
from tvm_icca.testing.relax_functions import relax_function

#: Every public name of the package.
PUBLIC_NAMES = sorted(tvm_icca.__all__)
#: The runtime_sim entry points a user calls without going through tvm_icca.
RUNTIME_SIM_ENTRY_POINTS = {
    "runtime_sim.timing.simulate_timing": simulate_timing,
    "runtime_sim.timing.TimingReport": TimingReport,
    "runtime_sim.contract.hardware.HardwareSpec": hardware.HardwareSpec,
    "runtime_sim.contract.presets.preset": presets.preset,
    "runtime_sim.contract.presets.small_chip": presets.small_chip,
    "runtime_sim.run_stats.last_run_stats": run_stats.last_run_stats,
}


def _public_objects() -> dict[str, object]:
    objects = {f"tvm_icca.{name}": getattr(tvm_icca, name) for name in PUBLIC_NAMES}
    objects.update(RUNTIME_SIM_ENTRY_POINTS)
    return objects


def _callables() -> list[tuple[str, object]]:
    return [(name, obj) for name, obj in _public_objects().items()
            if inspect.isfunction(obj) or inspect.isclass(obj)]


_SECTION = re.compile(r"^(\w[\w ]*)\n-{3,}$", re.M)


def _sections(doc: str) -> dict[str, str]:
    """The numpydoc sections of a (dedented) docstring: title -> body."""
    heads = list(_SECTION.finditer(doc))
    return {m.group(1): doc[m.end():heads[i + 1].start() if i + 1 < len(heads) else len(doc)]
            for i, m in enumerate(heads)}


def _entries(body: str) -> dict[str, str]:
    """The entries of a Parameters/Attributes section: ``name : type`` lines at the section's
    indentation -> their type (several names may share a line, ``a, b : int``)."""
    entries = {}
    for line in body.splitlines():
        if not line or line[0].isspace():
            continue
        names, _, type_ = line.partition(" : ")
        for name in names.split(","):
            entries[name.strip().lstrip("*")] = type_.strip()
    return entries


def _described(body: str, name: str) -> bool:
    """Whether the entry ``name`` is followed by an indented description line."""
    lines = body.splitlines()
    for i, line in enumerate(lines):
        if line and not line[0].isspace() and name in [
                n.strip().lstrip("*") for n in line.partition(" : ")[0].split(",")]:
            return i + 1 < len(lines) and lines[i + 1].startswith("    ") and lines[i + 1].strip() != ""
    return False


def _parameters(obj: object) -> list[str]:
    """The parameters a caller passes (``self`` of a class's ``__init__`` excluded)."""
    sig = inspect.signature(obj)
    return [p.name for p in sig.parameters.values() if p.name != "self"]


def _is_exception_without_init(obj: object) -> bool:
    return (inspect.isclass(obj) and issubclass(obj, BaseException)
            and all("__init__" not in vars(k) for k in obj.__mro__ if k.__module__ != "builtins"))


def test_all_names_exist_and_compile_is_public():
    for name in tvm_icca.__all__:
        assert hasattr(tvm_icca, name), name
    assert len(set(tvm_icca.__all__)) == len(tvm_icca.__all__)
    assert tvm_icca.compile.__module__ == "tvm_icca.drivers.compile_api"
    namespace: dict = {}
    exec("from tvm_icca import *", namespace)  # pylint: disable=exec-used
    assert namespace["compile"] is tvm_icca.compile
    assert namespace["compile_onnx"] is tvm_icca.compile_onnx


def _documented_in_api_rst() -> set[str]:
    """The ``tvm_icca.<name>`` entries of docs/api.rst: its autodoc entries, the ``data``
    entries under ``.. module:: tvm_icca`` and the error classes of ``.. icca-error-types::``."""
    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "api.rst").read_text()
    names = set(re.findall(r"^\.\. auto(?!module)\w+:: tvm_icca\.(\w+)\s*$", text, re.M))
    module = re.search(r"^\.\. module:: tvm_icca\s*$", text, re.M)
    assert module, "api.rst documents its data under `.. module:: tvm_icca`"
    names |= set(re.findall(r"^\.\. data:: (\w+)\s*$", text[module.end():], re.M))
    if re.search(r"^\.\. icca-error-types::", text, re.M):
        names |= set(ERROR_TYPES)
    return names


def test_api_reference_documents_exactly_the_names_of_all():
    """``tvm_icca.compile`` was documented but not in ``__all__``; every name the reference
    documents is in ``__all__`` and every name of ``__all__`` is documented."""
    documented = _documented_in_api_rst()
    assert {"compile", "compile_onnx", "PRESET_NAMES", "IccaError"} <= documented
    assert sorted(documented - set(tvm_icca.__all__)) == []
    assert sorted(set(tvm_icca.__all__) - documented) == []


def test_help_of_the_package_lists_every_public_name():
    """The package docstring's API list names every public name; ``help(tvm_icca)`` (pydoc
    follows ``__all__``) shows ``compile``."""
    doc = tvm_icca.__doc__
    for name in PUBLIC_NAMES:
        if name.endswith("Error"):
            continue  # the errors are listed as a group, checked next
        assert re.search(rf"\b{name}\b", doc), f"tvm_icca's docstring does not list {name}"
    assert "IccaError" in doc
    assert "compile(" in pydoc.render_doc(tvm_icca, renderer=pydoc.plaintext)


@pytest.mark.parametrize("name, obj", _callables(), ids=[n for n, _ in _callables()])
def test_real_signature(name, obj):
    if _is_exception_without_init(obj):
        # An error class that defines no __init__ anywhere in its hierarchy is built by
        # BaseException.__init__, a C function without a text signature: inspect.signature
        # cannot show one. It takes the message (``IccaError("what went wrong")``); the
        # docstring says when it is raised (checked in test_docstring).
        with pytest.raises(ValueError):
            inspect.signature(obj)
        return
    params = inspect.signature(obj).parameters.values()
    kinds = {p.kind for p in params}
    assert kinds - {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD} or not kinds, (
        f"{name} shows only *args/**kwargs: {inspect.signature(obj)}")
    # what help() shows: the real signature on the object's own line (inherited members such
    # as builtins' __new__ may show their own (*args, **kwargs) further down)
    rendered = pydoc.render_doc(obj, renderer=pydoc.plaintext)
    assert f"{obj.__name__}{inspect.signature(obj)}" in rendered, name


@pytest.mark.parametrize("name, obj", _callables(), ids=[n for n, _ in _callables()])
def test_docstring(name, obj):
    doc = inspect.getdoc(obj)
    assert doc, f"{name} has no docstring"
    summary = doc.split("\n\n")[0]
    assert "\n" not in summary, f"{name}: the summary is not one line: {summary!r}"
    assert summary.endswith("."), f"{name}: the summary is not a sentence: {summary!r}"
    sections = _sections(doc)
    if _is_exception_without_init(obj):
        assert issubclass(obj, tvm_icca.IccaError)
        return
    params = _parameters(obj)
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        fields = [f.name for f in dataclasses.fields(obj)]
        assert params == fields, f"{name}: __init__ is not the dataclass's own"
    if not params:
        assert "Parameters" not in sections, f"{name} takes no parameters but documents some"
    else:
        assert "Parameters" in sections or "Attributes" in sections, f"{name}: no Parameters section"
        body = sections.get("Parameters") or sections["Attributes"]
        documented = _entries(body)
        glossary = _glossary_fields(obj, doc)
        missing = [p for p in params if p not in documented and p not in glossary]
        assert not missing, f"{name}: parameters not documented: {missing}"
        stale = sorted(set(documented) - set(params))
        assert not stale, f"{name}: documents parameters it does not take: {stale}"
        for p in documented:
            assert documented[p], f"{name}: parameter {p} has no type"
            assert _described(body, p), f"{name}: parameter {p} has no description"
    if inspect.isfunction(obj):
        returns = inspect.signature(obj).return_annotation
        if returns not in (None, "None", inspect.Signature.empty):
            assert {"Returns", "Yields"} & set(sections), f"{name}: no Returns/Yields section"


def _glossary_fields(obj: object, doc: str) -> set[str]:
    """Fields a class documents by pointing to the metric glossary
    (:mod:`runtime_sim.contract.metrics`) instead of defining them a second time: only fields
    the glossary defines, and only when the docstring says that it defers to it."""
    if inspect.isclass(obj) and "runtime_sim.contract.metrics" in doc:
        return set(METRICS)
    return set()


def test_preload_designs_are_each_explained():
    doc = inspect.getdoc(tvm_icca.CompileOptions)
    assert "Elk §6.1" in doc
    for design in tvm_icca.PRELOAD_DESIGNS:
        assert f"``{design}``" in doc, f"CompileOptions does not explain preload design {design}"


def test_last_run_stats_points_to_the_glossary():
    for func in (tvm_icca.last_run_stats, run_stats.last_run_stats):
        assert "runtime_sim.contract.metrics" in inspect.getdoc(func)


def test_partition_report_documents_its_keys_and_how_to_print_it():
    """The keys the docstring lists are the keys a real report has (and the region rows')."""
    def body(x, w):
        return relax.op.nn.relu(relax.op.matmul(x, w))

    func = relax_function([(8, 32), (32, 16)], body, names=["x", "w"])
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, tvm_icca.small_chip(16)))
    returns = _sections(inspect.getdoc(tvm_icca.partition_report))["Returns"]
    documented = set(re.findall(r"^    \* ``(\w+)``(?: / ``(\w+)``)?", returns, re.M))
    top = {k for pair in documented for k in pair if k}
    assert top == set(report)
    assert report["regions"], "the matmul + relu runs on the chip"
    for row in report["regions"]:
        for key in row:
            assert f"``{key}``" in returns, f"region row key {key} is not documented"
    assert "format_report" in inspect.getdoc(tvm_icca.partition_report)
    assert report["regions"][0]["label"] in tvm_icca.format_report(report)
