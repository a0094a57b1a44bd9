"""The plan measurer of tuning (tvm_icca/tuning/measure.py)."""

import subprocess
import sys
import textwrap


def test_tuning_in_workers_from_an_unguarded_script_says_what_to_do(tmp_path):
    """Workers are spawned and import the caller's script again: a script that tunes at top
    level with jobs > 1 fails with a tvm_icca error naming the fix, not a bare
    BrokenProcessPool."""
    script = tmp_path / "tune_unguarded.py"
    script.write_text(textwrap.dedent(f"""
        import tvm
        from tvm import relax
        import tvm_icca

        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((64, 64), "float32"))
        w = relax.Var("w", relax.TensorType((64, 64), "float32"))
        with bb.function("main", [x, w]):
            with bb.dataflow():
                out = bb.emit_output(bb.emit(relax.op.matmul(x, w)))
            bb.emit_func_output(out)
        try:
            tvm_icca.tune(bb.get(), {str(tmp_path / "work")!r}, hw=tvm_icca.small_chip(16),
                          max_trials=4, jobs=2, progress=False)
        except tvm_icca.IccaError as err:
            print("ICCA ERROR:", err)
        """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert "ICCA ERROR:" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    assert '__name__ == "__main__"' in result.stdout
