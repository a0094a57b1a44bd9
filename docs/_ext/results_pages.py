"""Results pages, generated from ``benchmarks/results/`` when the documentation is built.

One page per benchmark script (``benchmarks/<script>.py``) that wrote results: its markdown
tables, as written, and its plots. A result file belongs to the script whose name is the
longest prefix of the file's name (``elk_llm_sweeps.md`` -> ``elk_llm.py``). The pages are
written to ``docs/results/`` (not tracked; rewritten only when they change, so an unchanged
result is not rebuilt) and read by myst-parser.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: Page titles, by script; a script not listed gets its file name.
TITLES = {
    "compile_time": "Compile time of the model zoo",
    "cost_model_accuracy": "Cost model accuracy",
    "dse_point_cost": "Cost of a design-space sweep point",
    "elk_dse": "Elk §6.4 design-space studies at full size",
    "elk_llm": "Elk preload designs on LLM decode",
    "figures": "The pictures of the README's tour",
    "llm_audit": "LLM decode on multi-chip systems",
    "long_context": "Long context: split operators streamed from HBM",
    "onnx_import_folding": "ONNX import and graph preparation",
    "paper_results": "The T10 and Elk papers' results beside ours",
    "plan_space_sizes": "Plan-space sizes and search time",
    "sim_speed": "Simulation speed",
    "t10_vs_vgm": "T10 plans vs the virtual-global-memory baseline",
    "tuning": "Autotuning",
    "zoo_timing": "Simulated time of the model zoo",
}
_HEADING = re.compile(r"^(#+)(\s)", re.MULTILINE)
_OUT = "results"  # under the documentation source directory


def _owner(stem: str, scripts: list[str]) -> str:
    owners = [s for s in scripts if stem == s or stem.startswith(s + "_")]
    return max(owners, key=len) if owners else stem


def _shift_headings(text: str, top: int) -> str:
    """Shift the markdown headings of ``text`` so that its shallowest is level ``top``."""
    levels = [len(m.group(1)) for m in _HEADING.finditer(text)]
    if not levels:
        return text
    shift = top - min(levels)
    return _HEADING.sub(lambda m: "#" * (len(m.group(1)) + shift) + m.group(2), text)


def _page(script: str, files: list[Path], has_script: bool) -> str:
    title = TITLES.get(script, script)
    made = (f"Made by `benchmarks/{script}.py` (each table below says how it was run)."
            if has_script else "")
    parts = [f"# {title}", "", made, ""]
    tables = [f for f in files if f.suffix == ".md"]
    for md in tables:
        text = md.read_text(encoding="utf-8").strip()
        if len(tables) > 1:
            parts += [f"## `{md.name}`", "", _shift_headings(text, 3), ""]
        else:
            parts += [f"From `benchmarks/results/{md.name}`.", "", _shift_headings(text, 2), ""]
    for png in (f for f in files if f.suffix == ".png"):
        parts += [f"![{png.stem}]({png.name})", "", f"*`benchmarks/results/{png.name}`*", ""]
    return "\n".join(parts)


def _write_if_changed(path: Path, data: bytes) -> None:
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


def generate(app: Sphinx) -> None:
    """Write one page per benchmark script into ``<srcdir>/results/``; drop stale pages."""
    root = Path(app.srcdir).parent
    results = root / "benchmarks" / "results"
    out = Path(app.srcdir) / _OUT
    out.mkdir(exist_ok=True)
    scripts = sorted(p.stem for p in (root / "benchmarks").glob("*.py"))
    pages: dict[str, list[Path]] = {}
    for f in sorted(results.glob("*")):
        if f.suffix in (".md", ".png"):
            pages.setdefault(_owner(f.stem, scripts), []).append(f)
    if not pages:
        logger.warning("no results in %s: the Results section is empty", results)
    keep = set()
    for script, files in pages.items():
        name = f"{script}.md"
        _write_if_changed(out / name, _page(script, files, script in scripts).encode("utf-8"))
        keep.add(name)
        for png in (f for f in files if f.suffix == ".png"):
            _write_if_changed(out / png.name, png.read_bytes())
            keep.add(png.name)
    for stale in out.iterdir():
        if stale.name not in keep:
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink()


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
