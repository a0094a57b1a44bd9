"""Region symbols shortened after MergeCompositeFunctions (tvm_icca.partition.region_names)."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_icca
from tvm_icca.testing.device_runs import reference_build
from tvm_icca.partition.partitioner import icca_regions
from tvm_icca.partition.region_names import (
    REGION_NAME_CHARS,
    short_region_symbol,
    shorten_region_names,
)


def test_short_symbols_are_kept_and_long_ones_cut_to_a_unique_digest():
    assert short_region_symbol("fused_relax_matmul", set()) == "fused_relax_matmul"
    long_a = "fused_" + "_".join(["relax_matmul"] * 500)
    long_b = long_a + "_relax_add"
    a, b = short_region_symbol(long_a, set()), short_region_symbol(long_b, set())
    assert len(a) <= REGION_NAME_CHARS and len(b) <= REGION_NAME_CHARS
    assert a.startswith("fused_relax_matmul") and a != b
    assert short_region_symbol(long_a, set()) == a          # the same on every run
    assert short_region_symbol(long_a, {a}) != a             # never a taken name
    kept = short_region_symbol(long_a + "_icca", set(), "_icca")
    assert kept.endswith("_icca") and len(kept) <= REGION_NAME_CHARS


def _module_with_long_region():
    long = "fused_" + "_".join(["relax_add"] * 40)

    @I.ir_module
    class Mod:
        @R.function
        def region(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
            R.func_attr({"Codegen": "icca", "global_symbol": "region"})
            y = R.add(x, x)
            return y

        @R.function
        def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
            cls = Mod
            y = cls.region(x)
            z = cls.region(y)
            return z

    gvar = Mod.get_global_var("region")
    mod = Mod.clone()
    mod[gvar] = Mod[gvar].with_attr("global_symbol", long)
    return mod, long


def test_renamed_region_is_called_by_its_new_name():
    mod, long = _module_with_long_region()
    out = shorten_region_names(mod, "icca")
    names = {g.name_hint for g in out.get_global_vars()}
    assert "region" not in names and "main" in names
    (short,) = names - {"main"}
    assert len(short) <= REGION_NAME_CHARS
    assert str(out[short].attrs["global_symbol"]) == short
    calls = []
    relax.analysis.post_order_visit(out["main"].body, lambda n: calls.append(n.op.name_hint)
                                    if isinstance(n, relax.Call)
                                    and isinstance(n.op, tvm.ir.GlobalVar) else None)
    assert calls == [short, short]
    # nothing to shorten: the module itself
    assert shorten_region_names(out, "icca").same_as(out)


@pytest.mark.slow
def test_a_whole_model_region_has_a_short_name_and_still_runs():
    """A zoo model merged into one region: its symbol and its operators' names stay short,
    and the compiled model computes what TVM's CPU build does."""
    workload = tvm_icca.get_workload("bert-large", tiny=True, batch=2)
    mod, hw = workload.mod, "ipu-mk2"
    part = tvm_icca.partition_for_icca(mod, hw)
    regions = icca_regions(part)
    assert regions and all(len(name) <= REGION_NAME_CHARS for name in regions)
    programs = tvm_icca.compile_programs(mod, hw, progress=False, jobs=1).programs
    assert all(len(op.name) <= REGION_NAME_CHARS + 12 for p in programs for op in p.ops)
    args = workload.random_args(seed=0)
    want = relax.VirtualMachine(reference_build(mod), tvm.cpu())["main"](*args)
    got = relax.VirtualMachine(tvm.compile(mod, target="icca"), tvm.cpu())["main"](*args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
