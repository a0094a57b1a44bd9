"""
Extend tvm_icca: a new operator, a new chip
===========================================

This tutorial teaches the two ways to extend tvm_icca without changing its code: offloading an
operator the backend has no pattern for (one pattern registered with TVM's own registry, with a
check function that refuses what the chip cannot do), and describing a chip of your own in a
TOML file that the Python API and the ``tvm-icca`` command line both accept. Each extension
ends with the test you would keep next to it.
"""

# %%
# Sizes
# -----
# The full configuration (the default, what the documentation shows) uses a 1024 x 2048
# tensor and a one-layer BERT-Large for the command line. ``TVM_ICCA_TUTORIAL_SIZE=small``
# (what the test suite runs) uses a 64 x 256 tensor, tests fewer shapes and simulates the
# tiny ResNet-18 instead; the steps are the same.
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import get_pattern, register_patterns
from tvm.relax.dpl.pattern import is_op, wildcard
from tvm.relax.transform import PatternCheckContext

import tvm_icca
from runtime_sim.contract.layout import OpLayout

SIZE = os.environ.get("TVM_ICCA_TUTORIAL_SIZE", "full")
SMALL = SIZE == "small"
SHAPE = (64, 256) if SMALL else (1024, 2048)
TEST_SHAPES = [(8, 24), SHAPE] if SMALL else [(8, 24), (257, 1000), SHAPE]
CLI_MODEL = ["resnet18", "--tiny"] if SMALL else ["bert-large", "--layers", "1"]
CLI_MODEL += ["--dtype", "float32"]  # the chip below computes float32 only
print(f"size {SIZE}: softplus over {SHAPE}, command line on {' '.join(CLI_MODEL)}")


# %%
# An operator the chip does not run yet
# -------------------------------------
# Softplus, ``log(1 + exp(x))``, is a smooth ReLU. TVM's Relax has it (``relax.nn.softplus``)
# but tvm_icca has no pattern for it, so the partitioner leaves it on the host CPU, and the
# partition report says why.
def softplus_model(shape, dtype="float32"):
    """``main(x) = softplus(x)``: one Relax operator inside a dataflow block."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.softplus(x)))
        bb.emit_func_output(out)
    return bb.get()


OP = "relax.nn.softplus"
PATTERN = "icca.tutorial_softplus"
hw = tvm_icca.preset("ipu-mk2")
before = tvm_icca.partition_report(tvm_icca.partition_for_icca(softplus_model(SHAPE), hw))
print(tvm_icca.format_report(before))
if get_pattern(PATTERN) is None:  # not yet registered in this process (see the last section)
    assert before["host_ops"] == {OP: 1} and not before["regions"]

# %%
# Register a pattern
# ------------------
# A BYOC backend in TVM is a set of named patterns. The ICCA partitioner
# (:func:`tvm_icca.partition_for_icca`) runs ``FuseOpsByPattern`` over every pattern of TVM's
# registry whose name starts with ``icca.`` (:func:`tvm_icca.get_icca_patterns`), so a
# pattern registered under that prefix is used exactly like the built-in ones. A pattern has
# four parts: a name, a dataflow pattern (here: a softplus call on any input), annotations
# (none), and a *check function* that may refuse a match.
#
# The check receives TVM's ``PatternCheckContext``; ``matched_expr`` is the matched call. It
# must refuse what the chip cannot do, or the compile fails later. Here: element types the
# chip does not compute (``HardwareSpec.dtypes``). While the partitioner runs,
# :func:`tvm_icca.current_hardware` is the chip being partitioned for.
#
# TVM's registry is global to the process and has no "unregister": registering a name again
# adds a second pattern (tried first) and keeps the old one. A stricter re-registration
# therefore does not replace a looser one, so register once, under a name nothing else uses.
def softplus_fits_the_chip(context: PatternCheckContext) -> bool:
    """Accept a softplus whose input and result have an element type the chip computes."""
    call = context.matched_expr
    dtypes = tvm_icca.current_hardware().dtypes
    return str(call.args[0].ty.dtype) in dtypes and str(call.ty.dtype) in dtypes


if get_pattern(PATTERN) is None:
    register_patterns([(PATTERN, is_op(OP)(wildcard()), {}, softplus_fits_the_chip)])
assert [p.name for p in tvm_icca.get_icca_patterns()].count(PATTERN) == 1

partitioned = tvm_icca.partition_for_icca(softplus_model(SHAPE), hw)
after = tvm_icca.partition_report(partitioned)
print(tvm_icca.format_report(after))
assert after["offloaded_ops"] == {OP: 1} and after["host_ops"] == {}
assert after["regions"][0]["composites"] == [PATTERN]

# %%
# Compile, run, compare with numpy
# --------------------------------
# Nothing else is needed: ``tvm.compile`` lowers the region, plans it and runs it on the
# simulated device, which computes the values (not only the time).
rng = np.random.default_rng(0)
x = (4 * rng.standard_normal(SHAPE)).astype("float32")
with tvm_icca.use_hardware(hw):
    executable = tvm.compile(partitioned, target="icca")
vm = relax.VirtualMachine(executable, tvm.cpu())
got = vm["main"](tvm.runtime.tensor(x)).numpy()
want = np.logaddexp(0.0, x)  # log(1 + exp(x)) without overflow
error = float(np.abs(got - want).max())
stats = tvm_icca.last_run_stats()
print(f"max |chip - numpy| = {error:.2e}; regions run on the chip: {stats['regions_executed']}")
assert stats["regions_executed"] == 1 and error < 1e-5

# %%
# Where the tensor expression and the cost come from
# --------------------------------------------------
# Nobody wrote softplus's math for the chip. To lower a region, tvm_icca runs each operator's
# own TVM legalization (the ``FLegalize`` that ``relax.transform.LegalizeOps`` would run),
# captures the tensor-expression (TE) compute it builds, and converts that TE into the
# device's tensor-expression form: iteration axes, how each tensor is indexed by them, and a
# body of scalar operations. The device's vocabulary of scalar operations is fixed (``exp``,
# ``log``, comparisons, ``select``, ...); an op whose TE needs another intrinsic is refused
# with an ``UnsupportedOperatorError`` when it is compiled.
#
# The planned program (:func:`tvm_icca.plan_device_programs`, the pass ``tvm.compile`` runs)
# holds the converted operator. ``expr`` is its tensor expression, ``expr.kind`` the per-core
# template that computes it, ``plan`` its rTensor execution plan (T10 §4.2). Softplus's body,
# printed as a formula, is TOPI's definition, including its threshold above which it returns
# ``x`` itself:
INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "gt": ">", "ge": ">=", "lt": "<",
         "le": "<=", "eq": "==", "ne": "!="}


def formula(node, names):
    """A tensor-expression body (a tree of {"op": ..., "args": [...]}) as a formula."""
    op = node["op"]
    if op == "load":
        index = ", ".join(" + ".join(a if c == 1 else f"{c}*{a}" for a, c in i["terms"]) or "0"
                          for i in node["index"])
        return f"{names[node['input']]}[{index}]"
    if op == "const":
        return f"{node['value']:g}"
    args = [formula(a, names) for a in node.get("args", ())]
    if op in INFIX:
        return f"({args[0]} {INFIX[op]} {args[1]})"
    return f"{op}({', '.join(args)})"


def arithmetic_ops(node):
    """Scalar operations of a body: every node that is not a load or a constant."""
    own = 0 if node["op"] in ("load", "const", "axis", "cast") else 1
    return own + sum(arithmetic_ops(a) for a in node.get("args", ()))


planned = tvm_icca.plan_device_programs(hw)(partitioned)
op = tvm_icca.device_programs(planned)[0].ops[0]
names = [t.name for t in op.expr.inputs]
print(op.expr)
print("body:", formula(op.expr.body, names))
print("kind:", op.expr.kind, "| plan: parts per axis", dict(op.plan.op_partition))
assert op.expr.kind == "elementwise" and not op.expr.reduce_axes

# %%
# The op kind chooses the per-core template. It is read off the expression: a sum of
# products is a ``matmul`` or ``conv2d`` (the matrix unit), row statistics are ``softmax`` or
# ``layer_norm``, other reductions ``reduce``, and an expression without a reduction, like
# this one, ``elementwise``. The kinds are part of the device contract (a device program can
# name no other), so a new operator never needs a new template: it gets the template of its
# kind. The elementwise template charges each scalar operation of the body one vector FLOP
# per element, so a core spends ``ops / vector_flops_per_cycle`` cycles per element, and every
# step ends with a synchronization of ``sync_cycles``. The simulator's compute time of the
# operator is exactly that, for the elements one core holds in each step:
ops_per_element = arithmetic_ops(op.expr.body)
timing = stats["simulated_ops"][0]
layout = OpLayout(op.expr, op.plan)
per_core = int(np.prod(list(layout.rp.values())))
cycles_per_element = ops_per_element / hw.vector_flops_per_cycle
model_s = layout.steps * (per_core * cycles_per_element + hw.sync_cycles) / hw.clock_hz
print(f"{ops_per_element} scalar ops per element (the run counted "
      f"{timing['flops'] / np.prod(SHAPE):g} FLOP per element)")
print(f"{cycles_per_element:g} cycles per element on '{hw.name}' "
      f"({hw.vector_flops_per_cycle:g} vector FLOP per cycle per core)")
print(f"{layout.steps} step(s) of {per_core} elements per core: {model_s * 1e9:.1f} ns; "
      f"simulated compute time {timing['compute_s'] * 1e9:.1f} ns")
assert timing["flops"] == ops_per_element * np.prod(SHAPE)
assert np.isclose(model_s, timing["compute_s"], rtol=1e-9)

# %%
# The test for the new operator
# -----------------------------
# What you would put in your own test suite: the op is offloaded, and it computes what numpy
# computes, over random inputs of several shapes and of each element type the chip computes
# (16-bit results are rounded to their format, hence the looser tolerance).
TOLERANCE = {"float32": 1e-5, "float16": 2e-3}


def test_softplus_runs_on_the_chip(chip=hw, shapes=TEST_SHAPES, seed=0):
    rng = np.random.default_rng(seed)
    for dtype, tolerance in TOLERANCE.items():
        for shape in shapes:
            part = tvm_icca.partition_for_icca(softplus_model(shape, dtype), chip)
            assert tvm_icca.partition_report(part)["offloaded_ops"] == {OP: 1}, (shape, dtype)
            with tvm_icca.use_hardware(chip):
                run = relax.VirtualMachine(tvm.compile(part, target="icca"), tvm.cpu())
            x = (8 * rng.standard_normal(shape)).astype(dtype)  # both sides of the threshold
            got = run["main"](tvm.runtime.tensor(x)).numpy()
            want = np.logaddexp(0.0, x.astype("float32"))
            np.testing.assert_allclose(got.astype("float32"), want, rtol=tolerance, atol=tolerance)


test_softplus_runs_on_the_chip()
print("test_softplus_runs_on_the_chip passed")

# %%
# A chip of your own
# ------------------
# A chip is a :class:`tvm_icca.HardwareSpec`. To describe one that is not a preset, write a
# TOML (or JSON) file with its fields, and read it with :func:`tvm_icca.load_hardware`. With
# ``base`` the file names a preset and gives only what differs; without it, it gives every
# field (``HardwareSpec.to_dict()``). Units are those of the spec: bytes, bytes per second,
# seconds, Hz. This chip is an IPU Mk2 whose vector unit does twice the FLOP per cycle, and
# which computes only float32.
workdir = pathlib.Path(tempfile.mkdtemp(prefix="tvm_icca_tutorial_"))
chip_file = workdir / "mk2_fast_vector.toml"
chip_file.write_text(
    'base = "ipu-mk2"\n'
    'name = "mk2-fast-vector"\n'
    "vector_flops_per_cycle = 8.0  # the preset's 4.0, doubled\n"
    'dtypes = ["float32"]\n'
    'notes = "IPU Mk2 with a vector unit twice as wide, float32 only (a what-if)"\n'
)
mychip = tvm_icca.load_hardware(chip_file)
for field in ("name", "num_cores", "sram_bytes_per_core", "vector_flops_per_cycle", "dtypes"):
    print(f"{field:24s} {getattr(hw, field)!s:24s} -> {getattr(mychip, field)}")
assert mychip == hw.with_overrides(name="mk2-fast-vector", vector_flops_per_cycle=8.0,
                                   dtypes=("float32",))

# %%
# A mistake in the file is one :class:`tvm_icca.InvalidHardwareSpecError` that names the file,
# the line of a syntax error, or the closest field to a misspelt one:
typo = workdir / "typo.toml"
typo.write_text('base = "ipu-mk2"\nvector_flop_per_cycle = 8.0\n')
try:
    tvm_icca.load_hardware(typo)
    raise AssertionError("a misspelt field must be refused")
except tvm_icca.InvalidHardwareSpecError as err:
    print(str(err)[:160], "...")
    assert "did you mean 'vector_flops_per_cycle'" in str(err)

# %%
# The check function at work
# --------------------------
# The file's path goes wherever a preset name goes. On this chip, a float16 softplus is
# refused by the pattern's check, and the partition report names the pattern that refused
# it together with what the chip lacks. On the preset, the same model is offloaded.
half = softplus_model(SHAPE, "float16")
refused = tvm_icca.partition_report(tvm_icca.partition_for_icca(half, str(chip_file)))
print(tvm_icca.format_report(refused))
(reason,) = refused["host_reasons"][OP]
assert reason.startswith(f"the check function of pattern '{PATTERN}' refused it")
assert "dtype float16" in reason
on_preset = tvm_icca.partition_report(tvm_icca.partition_for_icca(half, hw))
assert on_preset["offloaded_ops"] == {OP: 1}

# %%
# The new chip against its preset
# -------------------------------
# Compile for the new chip with :func:`tvm_icca.use_hardware` (a spec, a preset name or a
# file path) and run. Softplus is compute-bound on a core: with twice the vector FLOP per
# cycle, each element costs half the cycles, so the operator computes faster, and nothing
# else about it changes.
def simulated_op(chip, shape=SHAPE, seed=1):
    """Run softplus on ``chip``; return the run's statistics of the operator and the output."""
    with tvm_icca.use_hardware(chip):
        run = relax.VirtualMachine(tvm.compile(softplus_model(shape), target="icca"), tvm.cpu())
    x = np.random.default_rng(seed).standard_normal(shape).astype("float32")
    out = run["main"](tvm.runtime.tensor(x)).numpy()
    return tvm_icca.last_run_stats()["simulated_ops"][0], out


base_op, base_out = simulated_op(hw)
new_op, new_out = simulated_op(chip_file)
for label, chip, timing in (("preset", hw, base_op), ("file", mychip, new_op)):
    print(f"{label:6s} {chip.name:16s} cores {timing['cores']:5d}  compute "
          f"{timing['compute_s'] * 1e9:7.1f} ns  operator {timing['time_s'] * 1e9:7.1f} ns")
assert np.array_equal(base_out, new_out)  # same values: only the time depends on the chip
assert new_op["compute_s"] < base_op["compute_s"] and new_op["time_s"] <= base_op["time_s"]

# %%
# The same file on the command line
# ---------------------------------
# Every ``tvm-icca`` command takes the path in ``--hw``. Here ``simulate`` times a zoo model
# on the new chip (run as ``python -m tvm_icca.cli``, which is what the ``tvm-icca``
# script runs), in float32: the zoo's default, float16, is an element type this chip lacks,
# so every operator would stay on the host and ``simulate`` would say so.
command = [sys.executable, "-m", "tvm_icca.cli", "simulate", *CLI_MODEL, "--hw", str(chip_file),
           "--no-progress"]
print("$ tvm-icca " + " ".join(command[3:]))
result = subprocess.run(command, capture_output=True, text=True, check=False)
assert result.returncode == 0, result.stderr
shown = result.stdout.split("\n\n")[0]  # the summary; the per-operator table follows
print(shown)
assert "on mk2-fast-vector" in shown

# %%
# Whole models compare the same way, through the API: :func:`tvm_icca.compile_programs` plans
# a zoo model for a chip without running it, and ``simulate()`` times it. The model's compute
# time falls with the wider vector unit. Its total need not: the total also counts transfers
# and host time, and the compiler picks each operator's plan anew for the new balance of
# compute and communication, so the printed change of the total can go either way.
workload = (tvm_icca.get_workload("resnet18", tiny=True, dtype="float32") if SMALL
            else tvm_icca.get_workload("bert-large", num_layers=1, dtype="float32"))
reports = {chip.name: tvm_icca.compile_programs(workload, chip, progress=False).simulate()
           for chip in (hw, mychip)}
for name, report in reports.items():
    print(f"{name:16s} total {report.total_s * 1e6:8.2f} us  compute {report.compute_s * 1e6:8.2f} us")
old, new = reports[hw.name], reports[mychip.name]
print(f"compute {100 * (new.compute_s / old.compute_s - 1):+.1f}%, "
      f"total {100 * (new.total_s / old.total_s - 1):+.1f}%")
assert new.compute_s < old.compute_s

# %%
# The test for the new chip
# -------------------------
# A direction that must hold, whatever the plans: the file loads as the chip it describes,
# and doubling the vector FLOP per cycle never makes this compute-bound operator slower, at
# any size, while its values stay the same.
def test_fast_vector_chip(path=chip_file, shapes=TEST_SHAPES):
    chip = tvm_icca.load_hardware(path)
    base = tvm_icca.preset("ipu-mk2")
    assert chip.vector_flops_per_cycle == 2 * base.vector_flops_per_cycle
    assert chip.with_overrides(vector_flops_per_cycle=base.vector_flops_per_cycle,
                               dtypes=base.dtypes, name=base.name) == base
    for shape in shapes:
        slow, slow_out = simulated_op(base, shape)
        fast, fast_out = simulated_op(path, shape)
        assert fast["compute_s"] <= slow["compute_s"] and fast["time_s"] <= slow["time_s"], shape
        np.testing.assert_array_equal(fast_out, slow_out)


test_fast_vector_chip()
print("test_fast_vector_chip passed")

# %%
# Summary
# -------
# * A new operator: register ``icca.<name>`` with TVM's ``register_patterns``, with a check
#   function that reads :func:`tvm_icca.current_hardware` and refuses what the chip lacks.
#   Its tensor expression comes from TVM's own legalization, its per-core template from its
#   kind; the partition report names the pattern when its check refuses an op.
# * A new chip: a TOML or JSON file, ``base`` plus the fields that differ, read by
#   :func:`tvm_icca.load_hardware` and accepted wherever a preset name is, ``--hw`` included.
