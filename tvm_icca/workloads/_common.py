"""What every workload of the zoo shares: the :class:`Workload` record, export, inputs, counts.

A workload is a real architecture written with :mod:`tvm.relax.frontend.nn` and exported with
``nn.Module.export_tvm``: only shapes exist, every weight becomes a parameter of the Relax
function ``main`` (after the activations), so a 70B-parameter model costs a few megabytes of IR
and nothing is downloaded.
"""

from __future__ import annotations

import collections
import functools
import inspect
import math
import numbers
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.frontend import nn

from runtime_sim.contract.errors import InvalidWorkloadError, UnknownWorkloadError
from runtime_sim.contract.hardware import SUPPORTED_DTYPES

__all__ = [
    "TensorSpec",
    "Workload",
    "check_workload_args",
    "default_dtype",
    "export_workload",
    "relax_op_counts",
    "workload_builder",
]

#: Largest batch, context, sequence length or image edge a builder accepts: one tensor
#: dimension of a device program (:data:`runtime_sim.contract.json_fields.MAX_EXTENT`).
MAX_SIZE = 2**31 - 1
#: Most layers a builder accepts: 12x the deepest model of the zoo (Llama 2 70B, 80 layers);
#: each layer is about 50 Relax operators, so more is a typo, not a model.
MAX_LAYERS = 1024
#: Size arguments of the builders and their smallest values.
_SIZE_ARGS = {"batch": 1, "context": 1, "seq_len": 1, "image": 1, "num_layers": 1}


def check_workload_args(builder: str, args: Mapping[str, Any], sizes: Sequence[str] = ()) -> None:
    """Raise :class:`InvalidWorkloadError` unless every argument of a builder call is usable:
    ``size`` one of ``sizes``; ``batch``, ``context``, ``seq_len``, ``image`` and
    ``num_layers`` integers >= 1 (``None`` where the builder defaults them; never ``batch``); ``tiny`` a bool;
    ``dtype`` None or one the device computes. Called before anything is built."""
    if "size" in args and sizes and (not isinstance(args["size"], str) or args["size"] not in sizes):
        raise UnknownWorkloadError(
            f"{builder}: unknown size {_short(args['size'])}; known: {', '.join(sizes)}"
        )
    for name, low in _SIZE_ARGS.items():
        if name not in args:
            continue
        value = args[name]
        if value is None and name != "batch":
            continue
        high = MAX_LAYERS if name == "num_layers" else MAX_SIZE
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
            raise InvalidWorkloadError(
                f"{builder}: {name}={_short(value)} must be an integer in [{low}, {high:,}]"
            )
    if "tiny" in args and not isinstance(args["tiny"], (bool, np.bool_)):
        raise InvalidWorkloadError(f"{builder}: tiny={_short(args['tiny'])} must be True or False")
    dtype = args.get("dtype")
    if dtype is not None and (not isinstance(dtype, str) or dtype not in SUPPORTED_DTYPES):
        raise InvalidWorkloadError(
            f"{builder}: dtype={_short(dtype)} is not one of {', '.join(SUPPORTED_DTYPES)}"
        )


def workload_builder(fn: Callable[..., "Workload"]) -> Callable[..., "Workload"]:
    """Check a builder's arguments (:func:`check_workload_args`; sizes from its module's
    ``CONFIGS``) before it builds anything; arguments it does not take are refused with the
    ones it does."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def builder(*args: Any, **kwargs: Any) -> "Workload":
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as err:
            raise InvalidWorkloadError(
                f"{fn.__name__}: {err}; it takes {', '.join(sig.parameters)}"
            ) from None
        bound.apply_defaults()
        sizes = tuple(getattr(sys.modules[fn.__module__], "CONFIGS", {}))
        check_workload_args(fn.__name__, bound.arguments, sizes)
        return fn(*bound.args, **bound.kwargs)

    return builder


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:30] + "..." + text[-6:]

#: Kinds of ``main`` parameters. ``weight`` and ``kv_cache`` are model state that lives in
#: off-chip memory (HBM) on a chip that has it; ``input`` is an activation sent by the host.
#: ``mask`` is an attention mask of a prompt length (prefill, training): built once for that
#: length and kept in the device's memory beside the model state, as inference engines keep
#: theirs on the device; sending ``seq x seq`` values from the host with every prompt would
#: make a long prompt host-bound (134 MB at 8K tokens in float16, per layer that reads it).
#: The zoo's LLMs compute their causal and sliding-window masks in the graph instead
#: (``_llm.prefill_masks``), so none of them has a ``mask`` parameter today.
TENSOR_KINDS = ("input", "weight", "kv_cache", "mask")

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
        """Model state (weights, KV caches, masks) rather than a per-call activation."""
        return self.kind != "input"


@dataclass(frozen=True)
class Workload:
    """A model of the zoo, exported to Relax.

    Made by :func:`tvm_icca.get_workload`; :func:`tvm_icca.compile_programs` compiles it.

    Attributes
    ----------
    name : str
        The workload's name (``"llama2-13b"``).
    mod : tvm.IRModule
        The Relax module; ``mod["main"]`` takes ``params`` in order: the activations first,
        then weights and KV caches.
    params : tuple of TensorSpec
        Every parameter of ``main``: name, shape, dtype and ``kind`` (``"input"``,
        ``"weight"`` or ``"kv_cache"``).
    config : Mapping[str, Any]
        The hyper-parameters actually used (layers, batch, context, model width, ...).
    description : str
        One line naming the architecture and its source.
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
