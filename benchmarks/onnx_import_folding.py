"""ONNX import with and without the graph preparation of ``tvm_icca.frontend.onnx_prepare``, over the
ONNX project's own node test cases (``onnx.backend.test.case.node.collect_testcases``).

For each case: does TVM's importer accept the model as exported (``fold_constants=False``) and
after preparation? Every case only the prepared import accepts is then built for TVM's CPU
target and run on the case's own inputs, and its outputs are compared with the case's expected
outputs (computed by the onnx project's reference implementations): a model that imports but
computes something else would be worse than an import error. Writes
``benchmarks/results/onnx_import_folding.md``.

    .venv/bin/python benchmarks/onnx_import_folding.py [--no-run]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import time
import warnings

import numpy as np
from result_files import write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _imports(model, fold: bool):
    import tvm_icca

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return tvm_icca.load_onnx(model, fold_constants=fold, allow_symbolic=True)
    except tvm_icca.ModelImportError:
        return None


def _matches(mod, case) -> str:
    """'same', 'differs' or why it could not run."""
    import tvm
    from tvm import relax

    try:
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    except Exception as err:  # noqa: BLE001  (a build failure is a result here)
        return f"build fails ({type(err).__name__})"
    for inputs, expected in case.data_sets:
        try:
            args = [tvm.runtime.tensor(np.asarray(a)) for a in inputs]
            out = vm["main"](*args)
        except Exception as err:  # noqa: BLE001
            return f"run fails ({type(err).__name__})"
        outs = [out] if hasattr(out, "numpy") else list(out)
        if len(outs) != len(expected):
            return "differs"
        for got, want in zip(outs, expected):
            want = np.asarray(want)
            got = got.numpy()
            if got.shape != want.shape or not np.allclose(got.astype(np.float64), want.astype(np.float64),
                                                          rtol=1e-3, atol=1e-3, equal_nan=True):
                return "differs"
    return "same"


def _folding_exact(case) -> bool:
    """Whether the prepared graph computes exactly what the exported one computes, both run by
    ``onnx.reference.ReferenceEvaluator`` on the case's inputs: tells a folding error from
    TVM's own numerics."""
    from onnx.reference import ReferenceEvaluator

    from tvm_icca.frontend.onnx_prepare import prepare_onnx

    inputs, _ = case.data_sets[0]
    feeds = dict(zip([i.name for i in case.model.graph.input], inputs))
    want = ReferenceEvaluator(case.model).run(None, feeds)
    got = ReferenceEvaluator(prepare_onnx(case.model)).run(None, feeds)
    return all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True) for a, b in zip(want, got))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-run", action="store_true", help="count imports only")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    start = time.perf_counter()
    cases = collect_testcases()
    counts = {"both": 0, "as exported only": 0, "prepared only": 0, "neither": 0}
    gained = []
    for case in cases:
        raw, prepared = _imports(case.model, False), _imports(case.model, True)
        key = ("both" if raw is not None else "prepared only") if prepared is not None else (
            "as exported only" if raw is not None else "neither")
        counts[key] += 1
        if key == "prepared only":
            gained.append((case, prepared))
    import_s = time.perf_counter() - start
    results = {}
    if not args.no_run:
        for case, mod in gained:
            results[case.name] = _matches(mod, case)
    lines = [
        "# ONNX import with and without graph preparation",
        "",
        f"{len(cases)} ONNX node test cases (onnx {__import__('onnx').__version__}), "
        f"TVM's importer, {import_s:.0f} s for both imports of all cases.",
        "",
        "| imports | cases |", "|---|---|",
        *[f"| {k} | {v} |" for k, v in counts.items()],
    ]
    if results:
        tally: dict[str, int] = {}
        for verdict in results.values():
            tally[verdict] = tally.get(verdict, 0) + 1
        lines += ["", "Cases only the prepared import accepts, built for llvm and run on the "
                  "case's inputs against its expected outputs (rtol = atol = 1e-3):", "",
                  "| outcome | cases |", "|---|---|", *[f"| {k} | {v} |" for k, v in sorted(tally.items())],
                  ""]
        differing = [case for case, _ in gained if results[case.name] == "differs"]
        exact = [case.name for case in differing if _folding_exact(case)]
        lines += [f"Differing: {len(differing)}; of these, the prepared graph computes exactly what "
                  f"the exported graph computes (both run by onnx's ReferenceEvaluator) in "
                  f"{len(exact)}: the difference is TVM's build of graphs it could not import "
                  "before.", "", ", ".join(case.name for case in differing) or "none"]
    text = "\n".join(lines) + "\n"
    out = ROOT / "benchmarks" / "results" / "onnx_import_folding.md"
    write_markdown(out, text)
    print(text)


if __name__ == "__main__":
    main()
