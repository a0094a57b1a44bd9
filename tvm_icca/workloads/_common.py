"""What every workload of the zoo shares: the :class:`Workload` record, export, inputs, counts.

A workload is a real architecture written with :mod:`tvm.relax.frontend.nn` and exported with
``nn.Module.export_tvm``: only shapes exist, every weight becomes a parameter of the Relax
function ``main`` (after the activations), so a 70B-parameter model costs a few megabytes of IR
and nothing is downloaded.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.frontend import nn

__all__ = [
    "TensorSpec",
    "Workload",
    "default_dtype",
    "export_workload",
    "relax_op_counts",
]

#: Kinds of ``main`` parameters. ``weight`` and ``kv_cache`` are model state that lives in
#: off-chip memory (HBM) on a chip that has it; ``input`` is an activation sent by the host.
TENSOR_KINDS = ("input", "weight", "kv_cache")

Sampler = Callable[[np.random.Generator], np.ndarray]


def default_dtype(dtype: str | None, tiny: bool) -> str:
    """``dtype`` if given; else float16 at full size (the setting of the benchmarks) and
    float32 for tiny configurations (the tests compare them with TVM's CPU build)."""
    return dtype or ("float32" if tiny else "float16")


@dataclass(frozen=True)
class TensorSpec:
    """One parameter of ``main``: its name, shape, dtype and role."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str = "input"
    # How to draw a meaningful value (token ids in range, rotary tables, ...); None means
    # a generic random tensor (see Workload.random_args).
    sample: Sampler | None = field(default=None, compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def resident(self) -> bool:
        """Model state (weights, KV caches) rather than a per-call activation."""
        return self.kind != "input"


@dataclass(frozen=True)
class Workload:
    """A model of the zoo, exported to Relax.

    ``mod["main"]`` takes ``params`` in order: the activations first, then weights and KV
    caches (``TensorSpec.kind``). ``config`` holds the hyper-parameters actually used.
    """

    name: str
    mod: IRModule
    params: tuple[TensorSpec, ...]
    config: Mapping[str, Any]
    description: str = ""

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return tuple(p for p in self.params if p.kind == "input")

    @property
    def resident_names(self) -> frozenset[str]:
        """Names of the ``main`` parameters that are model state (weights and KV caches)."""
        return frozenset(p.name for p in self.params if p.resident)

    @property
    def num_parameters(self) -> int:
        """Number of weight elements (KV caches excluded)."""
        return sum(math.prod(p.shape) for p in self.params if p.kind == "weight")

    def nbytes(self, kind: str) -> int:
        return sum(p.nbytes for p in self.params if p.kind == kind)

    def random_args(self, seed: int = 0) -> list[np.ndarray]:
        """Arrays for every parameter of ``main``, in order, for functional runs.

        Weights are scaled by ``1/sqrt(fan_in)`` and norm scales drawn around 1 so that
        activations stay O(1) through many layers and a float32 comparison at ``rtol=1e-4``
        is meaningful.
        """
        rng = np.random.default_rng(seed)
        return [_sample(p, rng) for p in self.params]

    def op_counts(self) -> collections.Counter[str]:
        """Relax operator calls of the imported module (see :func:`relax_op_counts`)."""
        return relax_op_counts(self.mod)

    @property
    def num_ops(self) -> int:
        return sum(self.op_counts().values())


def _sample(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    if spec.sample is not None:
        value = np.asarray(spec.sample(rng))
    elif np.dtype(spec.dtype).kind in "iu":
        value = rng.integers(0, 2, size=spec.shape)
    elif spec.kind == "weight" and len(spec.shape) >= 2:
        fan_in = math.prod(spec.shape[1:])
        value = rng.standard_normal(spec.shape) / math.sqrt(fan_in)
    elif spec.kind == "weight" and spec.name.endswith("weight"):
        value = 1.0 + 0.1 * rng.standard_normal(spec.shape)  # a norm's scale
    elif spec.kind == "weight":
        value = 0.1 * rng.standard_normal(spec.shape)  # a bias
    else:
        value = rng.standard_normal(spec.shape)
    return value.astype(spec.dtype).reshape(spec.shape)


def export_workload(
    name: str,
    module: nn.Module,
    inputs: Sequence[TensorSpec],
    config: Mapping[str, Any],
    description: str = "",
    kv_cache_suffix: str = "_cache",
) -> Workload:
    """Export ``module.forward`` for ``inputs`` and rename the function to ``main``.

    Parameters of the module whose name ends with ``kv_cache_suffix`` (``...k_cache``) are
    KV caches, the others weights.
    """
    spec = {"forward": {t.name: nn.spec.Tensor(list(t.shape), t.dtype) for t in inputs}}
    mod, named_params = module.export_tvm(spec)
    func = mod["forward"].with_attr("global_symbol", "main")
    main_mod = IRModule({"main": func})
    params = list(inputs)
    for pname, param in named_params:
        kind = "kv_cache" if pname.endswith(kv_cache_suffix) else "weight"
        params.append(TensorSpec(pname, tuple(int(s) for s in param.shape), str(param.dtype), kind))
    # The exporter orders the function parameters exactly like this (inputs, then
    # named_parameters()); check so that random_args can never feed a wrong tensor.
    got = [(str(p.name), _shape(p)) for p in func.params]
    want = [(p.name, p.shape) for p in params]
    if got != want:
        raise AssertionError(f"{name}: unexpected parameter order {got[:4]}... vs {want[:4]}...")
    return Workload(name, main_mod, tuple(params), dict(config), description)


def _shape(var: relax.Var) -> tuple[int, ...]:
    return tuple(int(s) for s in var.ty.shape.values)


def relax_op_counts(mod: IRModule) -> collections.Counter[str]:
    """Calls of Relax operators (``relax.*``) in every Relax function of ``mod``.

    This is the operator count of the model as TVM sees it after import: layout operators
    (reshape, permute_dims) and the transpose a ``nn.Linear`` emits for its weight count,
    function calls and tuple accesses do not.
    """
    counts: collections.Counter[str] = collections.Counter()

    def visit(node: Any) -> None:
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op):
            counts[node.op.name] += 1

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return counts
