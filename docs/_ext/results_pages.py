"""Results pages, generated from ``benchmarks/results/`` when the documentation is built.

One page per benchmark script (``benchmarks/<script>.py``) that wrote results: a title
(:data:`TITLES`), a sentence saying what the page shows (the script docstring's first
paragraph), the command that remakes it (the docstring's first command line naming the
script), then its markdown tables, as written, and its plots. A result file belongs to the
script whose name is the longest prefix of the file's name (``elk_llm_sweeps.md`` ->
``elk_llm.py``), or that :data:`FILE_OWNERS` names. The pages are written to
``docs/results/`` (not tracked; rewritten only when they change, so an unchanged result is not
rebuilt) and read by myst-parser.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: Page titles, by script; a script not listed gets its file name.
TITLES = {
    "architect_review": "ICCA designs beside A100, H100 and B200: time and energy per token",
    "compile_time": "Compile time of the model zoo",
    "cost_model_accuracy": "Cost model accuracy",
    "dse_jobs": "Sweeps on one and two workers",
    "dse_point_cost": "Cost of a design-space sweep point",
    "elk_dse": "Elk §6.4 design-space studies at full size",
    "energy": "Energy per token and average power on the IPU presets",
    "elk_algo_speed": "Speed of the Elk scheduling algorithms",
    "elk_llm": "Elk preload designs on LLM decode",
    "elk_paper_gap": "Why our Elk ratios differ from the Elk paper's",
    "elk_overlap": "Elk Fig. 18a's overlap: what our Basic overlaps, and why",
    "t10_share_ablation": "T10's transfer share against the matrix unit's efficiency",
    "figures": "The pictures of the README's tour",
    "gpu_reference": "IPU Mk2 + T10 against the A100, H100 and B200 roofline estimate (T10 §6.6-6.7)",
    "fused_attention": "Fused attention: one prefill attention, three forms of its mask",
    "llm_audit": "LLM decode on multi-chip systems",
    "long_context": "Long context: split operators streamed from HBM",
    "onnx_import_folding": "ONNX import and graph preparation",
    "op_granularity": "Operators per decoder layer, before and after fusion",
    "paper_results": "The T10 and Elk papers' results beside ours",
    "plan_space_sizes": "Plan-space sizes and search time",
    "real_exports": "Real PyTorch exports on the chip (both exporters, against onnxruntime)",
    "sim_speed": "Simulation speed",
    "t10_vs_vgm": "T10 plans vs the virtual-global-memory baseline",
    "tuning": "Autotuning",
    "zoo_timing": "Simulated time of the model zoo",
}
#: Result files whose name does not start with their script's: file-name prefix -> script.
#: (``figures.py`` names its pictures ``figure_*.png``, the names the README links.)
FILE_OWNERS = {"figure_": "figures"}

_HEADING = re.compile(r"^(#+)(\s)", re.MULTILINE)
_OUT = "results"  # under the documentation source directory
#: Sphinx roles and literals of a docstring, as markdown: ``x`` and :func:`x` -> `x`.
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def _owner(stem: str, scripts: list[str]) -> str:
    for prefix, script in FILE_OWNERS.items():
        if stem.startswith(prefix):
            return script
    owners = [s for s in scripts if stem == s or stem.startswith(s + "_")]
    return max(owners, key=len) if owners else stem


def script_summary(path: Path) -> tuple[str, str]:
    """What a benchmark script's results show and how to remake them: the first paragraph of
    its docstring, as one markdown line, and the first command line of the docstring that
    runs it (its trailing comment dropped), else ``.venv/bin/python benchmarks/<script>.py``."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(line.strip() for line in doc.split("\n\n", 1)[0].splitlines())
    sentence = _ROLE.sub(r"`\1`", paragraph).replace("``", "`")
    command = f".venv/bin/python benchmarks/{path.name}"
    for line in doc.splitlines():
        if f"benchmarks/{path.name}" in line:
            text = line.strip().removeprefix("Run:").strip().strip("`")
            command = re.split(r"\s+#", text, maxsplit=1)[0].strip()
            break
    return sentence, command


def _shift_headings(text: str, top: int) -> str:
    """Shift the markdown headings of ``text`` so that its shallowest is level ``top``."""
    levels = [len(m.group(1)) for m in _HEADING.finditer(text)]
    if not levels:
        return text
    shift = top - min(levels)
    return _HEADING.sub(lambda m: "#" * (len(m.group(1)) + shift) + m.group(2), text)


def _page(script: str, files: list[Path], source: Path | None) -> str:
    title = TITLES.get(script, script)
    parts = [f"# {title}", ""]
    if source is not None:
        sentence, command = script_summary(source)
        parts += [sentence, "", f"Made by `benchmarks/{script}.py` (each table below says how it "
                  "was run); to make it again, from the repository's root:", "", "```sh",
                  command, "```", ""]
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


def result_pages(root: Path) -> dict[str, tuple[str, list[Path]]]:
    """The Results pages of the repository at ``root``: page file name -> (markdown text,
    the result files it shows)."""
    results = root / "benchmarks" / "results"
    scripts = sorted(p.stem for p in (root / "benchmarks").glob("*.py"))
    groups: dict[str, list[Path]] = {}
    for f in sorted(results.glob("*")):
        if f.suffix in (".md", ".png"):
            groups.setdefault(_owner(f.stem, scripts), []).append(f)
    return {f"{script}.md": (_page(script, files, root / "benchmarks" / f"{script}.py"
                                   if script in scripts else None), files)
            for script, files in groups.items()}


def generate(app: Sphinx) -> None:
    """Write one page per benchmark script into ``<srcdir>/results/``; drop stale pages."""
    root = Path(app.srcdir).parent
    out = Path(app.srcdir) / _OUT
    out.mkdir(exist_ok=True)
    pages = result_pages(root)
    if not pages:
        logger.warning("no results in %s: the Results section is empty",
                       root / "benchmarks" / "results")
    keep = set()
    for name, (text, files) in pages.items():
        _write_if_changed(out / name, text.encode("utf-8"))
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
