"""The workload zoo: real architectures as Relax modules, shapes only, nothing downloaded.

Each family is written with :mod:`tvm.relax.frontend.nn` in its own module and exported with
``export_tvm``; every weight (and every KV cache) is a parameter of ``main`` after the
activations, so even Llama 2 70B is a few megabytes of IR.

=================  ======================================  ==========================================
name               model                                   size arguments
=================  ======================================  ==========================================
``bert-large``     BERT-large encoder (Devlin et al. 2019)  batch, seq_len
``vit-b16``        ViT-Base/16, 224x224 (Dosovitskiy 2021)  batch
``resnet18/50``    ResNet-18 / 50, BN folded (He 2016)      batch, image
``nerf``           NeRF MLP (Mildenhall et al. 2020)       batch (points)
``opt-*``          OPT 1.3B/6.7B/13B/30B                   batch, context (decode); phase, seq_len
``llama2-*``       Llama 2 7B/13B/70B                      batch, context (decode); phase, seq_len
``gemma2-27b``     Gemma 2 27B                             batch, context (decode); phase, seq_len
``dit-xl2``        DiT-XL/2 denoising step                 batch
=================  ======================================  ==========================================

Every builder also takes ``num_layers`` (keep the first N layers/blocks), ``tiny=True`` (a
small config of the same architecture for functional tests) and ``dtype`` (float16 by
default as on the IPU, float32 when tiny).

The LLMs take a ``phase`` (:data:`PHASES`; see :mod:`tvm_icca.workloads._llm`):

* ``"decode"`` (default): one new token per sequence against a KV cache of ``context``
  tokens (Elk §6.1); returns the logits and each layer's new key and value.
* ``"prefill"``: a prompt of ``seq_len`` tokens per sequence through every layer, causal
  self-attention over the prompt (``seq_len x seq_len`` scores, masked, softmax); returns the
  last position's logits and every layer's keys and values in the cache layout (the KV cache
  is written as outputs, not read).
* ``"train"``: the training forward pass of Elk §6.4 (Fig. 24) over ``batch x seq_len``
  tokens: the prefill computation, returning every position's logits and no keys or values.

``context`` always means the KV-cache length of a decode step and ``seq_len`` the tokens of
a sequence (a prompt, a training sample; BERT's input); for a decode step ``seq_len`` is
still accepted as another name for ``context``.

``get_workload("llama2-13b", batch=32, context=2048)`` is a decode step,
``get_workload("llama2-13b", phase="prefill", seq_len=2048)`` a prefill; both return a
:class:`Workload`. ``list_workloads()`` names them all.

Operator counts and Elk's Table 2
---------------------------------
Elk (MICRO'25, Table 2) reports the total number of operators N of the models it schedules,
at batch 32 and sequence length 2048. Ours are Relax operator calls right after import
(:func:`relax_op_counts`), then how many of them land in ICCA regions (per region call) and how
many stay on the host after :func:`~tvm_icca.partition.partitioner.partition_for_icca` for
``ipu-pod4-hbm`` (``tvm-icca models --ops`` prints this table):

==============  ======  ==========  =========  =========  ======  =======  ======
model           layers  Relax ops   per layer  offloaded  host    Elk N    ratio
==============  ======  ==========  =========  =========  ======  =======  ======
Llama2-13B      40      2,126       53         1,803      323     1,928    1.10
Gemma2-27B      46      2,816       61         2,445      371     2,216    1.27
OPT-30B         48      2,122       44         1,924      198     2,269    0.94
Llama2-70B      80      4,246       53         3,603      643     3,808    1.12
DiT-XL/2        28      1,410       49         975        435     1,521    0.93
==============  ======  ==========  =========  =========  ======  =======  ======

(Other models: BERT-large 876 ops / 675 offloaded, ViT-B/16 446 / 343, ResNet-18 90 / 69,
ResNet-50 229 / 175, NeRF 48 / 45, OPT-1.3B 1,066 / 964, Llama2-7B 1,702 / 1,443.)

The totals agree within -7 % to +27 %; per layer Elk has ~48 operators for every LLM
(1,928 / 40, 2,269 / 48, 3,808 / 80, 2,216 / 46) and ~54 for DiT (1,521 / 28). The
differences are granularity, not architecture:

* Relax counts layout operators separately: every ``nn.Linear`` emits a ``permute_dims`` of
  its weight (7 per Llama layer; fused into the matmul on the chip, but counted at import),
  the K-cache transposes (2) and the head split/merge reshapes (4): 17 of the 53 ops of
  a Llama layer are layout ops (12 of OPT's 44);
* our decode attention reads the KV cache in place, without ``concat``, as two softmax
  blocks merged with a running maximum (:func:`~tvm_icca.workloads._layers.decode_attention`):
  16 ops (2 transposes, 3 matmuls, max, maximum, 2 subtract, 2 exp, sum, 2 add, multiply,
  divide) where ``concat`` + ``softmax(QK^T)V`` is about 8; the price of never copying the
  cache, which is the largest tensor of decode;
* rotary embeddings in the Hugging Face form cost 6 ops per rotated tensor (``split``,
  ``negative``, ``concat``, 2 ``multiply``, ``add``): 12 per layer; OPT has none (learned
  absolute positions), which is why it is the one LLM below Elk's count;
* Gemma 2 has two more RMSNorms per layer (pre/post norms around both blocks) and attention
  logit soft-capping (3 ops on each of the 2 score blocks): 61 ops per layer; Elk's Gemma
  count (48 per layer, like Llama) suggests it did not model these;
* DiT's adaLN-Zero is 5 ops per modulation and 3 per gate around LayerNorms without affine
  (49 per block), and timm's fused-qkv split adds ``split``/``squeeze``; Elk's 54 per block
  likely counts the reshapes of a traced PyTorch graph;
* embedding lookup, final norm and LM head add 6-10 ops per model (38 for DiT, whose timestep
  and class embedders and final adaLN layer are outside the blocks).

What stays on the host, and why (``partition_report``'s reasons): ``take`` (embedding
gathers: data-dependent indices), ``reshape`` (no ICCA implementation; head split/merge),
``permute_dims`` other than a matmul operand's last-two-axes transpose (attention heads of the
encoders), ``split``/``concat`` (rotary ``rotate_half``, NeRF's skip/view concatenations, ViT's
class token, DiT's adaLN chunks: no pattern, although :mod:`tvm_icca.lower.te_to_expr` extracts
both as affine/select index maps), ``expand_dims``/``squeeze``/``broadcast_to`` (layout),
``max_pool2d`` (ResNet stem: no pattern), ``cos``/``sin`` (DiT timestep frequencies: no device
intrinsic) and ``astype``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Mapping

from runtime_sim.contract.errors import InvalidWorkloadError, UnknownWorkloadError
from tvm_icca.workloads._common import (
    TENSOR_KINDS,
    TensorSpec,
    Workload,
    export_workload,
    relax_op_counts,
)
from tvm_icca.workloads._llm import PHASES, resolve_length
from tvm_icca.workloads.bert import bert
from tvm_icca.workloads.dit import dit
from tvm_icca.workloads.gemma import gemma2
from tvm_icca.workloads.llama import llama2
from tvm_icca.workloads.nerf import nerf
from tvm_icca.workloads.opt import opt
from tvm_icca.workloads.resnet import resnet
from tvm_icca.workloads.vit import vit

__all__ = [
    "ELK_TABLE2_OPS",
    "PHASES",
    "TENSOR_KINDS",
    "TensorSpec",
    "Workload",
    "canonical_name",
    "export_workload",
    "get_workload",
    "list_workloads",
    "relax_op_counts",
    "tokens_per_run",
    "workload_info",
]

_BUILDERS: dict[str, Callable[..., Workload]] = {
    "bert-large": functools.partial(bert, "bert-large"),
    "vit-b16": functools.partial(vit, "vit-b16"),
    "resnet18": functools.partial(resnet, "resnet18"),
    "resnet50": functools.partial(resnet, "resnet50"),
    "nerf": functools.partial(nerf, "nerf"),
    "opt-1.3b": functools.partial(opt, "opt-1.3b"),
    "opt-6.7b": functools.partial(opt, "opt-6.7b"),
    "opt-13b": functools.partial(opt, "opt-13b"),
    "opt-30b": functools.partial(opt, "opt-30b"),
    "llama2-7b": functools.partial(llama2, "llama2-7b"),
    "llama2-13b": functools.partial(llama2, "llama2-13b"),
    "llama2-70b": functools.partial(llama2, "llama2-70b"),
    "gemma2-27b": functools.partial(gemma2, "gemma2-27b"),
    "dit-xl2": functools.partial(dit, "dit-xl2"),
}

_DESCRIPTIONS = {
    "bert-large": "BERT-large encoder: 24 layers, hidden 1024, 16 heads, FFN 4096 (Devlin et al. 2019)",
    "vit-b16": "ViT-Base/16: 224x224, 12 layers, hidden 768, 12 heads (Dosovitskiy et al. 2021)",
    "resnet18": "ResNet-18, batch norm folded into convolutions (He et al. 2016)",
    "resnet50": "ResNet-50, batch norm folded into convolutions (He et al. 2016)",
    "nerf": "NeRF MLP: 8 x 256 ReLU layers with a skip, view-dependent RGB (Mildenhall et al. 2020)",
    "opt-1.3b": "OPT-1.3B: 24 layers, hidden 2048, 32 heads (Zhang et al. 2022)",
    "opt-6.7b": "OPT-6.7B: 32 layers, hidden 4096, 32 heads (Zhang et al. 2022)",
    "opt-13b": "OPT-13B: 40 layers, hidden 5120, 40 heads (Zhang et al. 2022)",
    "opt-30b": "OPT-30B: 48 layers, hidden 7168, 56 heads (Zhang et al. 2022)",
    "llama2-7b": "Llama 2 7B: 32 layers, hidden 4096, 32 heads (Touvron et al. 2023)",
    "llama2-13b": "Llama 2 13B: 40 layers, hidden 5120, 40 heads (Touvron et al. 2023)",
    "llama2-70b": "Llama 2 70B: 80 layers, hidden 8192, 64 heads, 8 KV heads (GQA)",
    "gemma2-27b": "Gemma 2 27B: 46 layers, hidden 4608, 32 heads, 16 KV heads (Gemma Team 2024)",
    "dit-xl2": "DiT-XL/2 denoising step: 28 layers, hidden 1152, 16 heads, 256 tokens (Peebles & Xie 2023)",
}

_ALIASES = {"bert": "bert-large", "vit": "vit-b16", "vit-base": "vit-b16", "dit-xl": "dit-xl2",
            "dit-xl/2": "dit-xl2", "dit": "dit-xl2", "gemma2": "gemma2-27b"}

#: Family of each workload: which size arguments it takes.
_SEQUENCE_ARG = {"bert-large": "seq_len"}
_CONTEXT_MODELS = frozenset(n for n in _BUILDERS if n.startswith(("opt-", "llama2-", "gemma2-")))

#: Total operator counts N of Elk's Table 2 (batch 32, sequence length 2048).
ELK_TABLE2_OPS: dict[str, int] = {
    "llama2-13b": 1928, "gemma2-27b": 2216, "opt-30b": 2269, "llama2-70b": 3808, "dit-xl2": 1521,
}


def list_workloads() -> list[str]:
    """The names :func:`get_workload` accepts (aliases excluded), in zoo order.

    Returns
    -------
    list of str
        ``["bert-large", "vit-b16", ...]``; ``tvm-icca models`` prints them with their sizes.
    """
    return list(_BUILDERS)


def canonical_name(name: str) -> str:
    key = name.strip().lower() if isinstance(name, str) else None
    key = _ALIASES.get(key, key)
    if key not in _BUILDERS:
        # UnknownWorkloadError is an IccaError and a KeyError (a lookup miss)
        raise UnknownWorkloadError(f"unknown workload {name!r}; known: {', '.join(_BUILDERS)}")
    return key


def get_workload(name: str, **kwargs: Any) -> Workload:
    """Build a model of the workload zoo as a Relax module (shapes only, nothing downloaded).

    Parameters
    ----------
    name : str
        One of :func:`list_workloads` (case-insensitive; ``llama-2-13b`` and similar aliases
        are accepted).
    **kwargs : Any
        The family's size arguments: ``batch``; for LLMs ``phase`` (``"decode"``, the default,
        ``"prefill"`` or ``"train"``: :data:`PHASES`), ``context`` for a decode step (the KV
        cache length) and ``seq_len`` for prefill and train (the tokens of each sequence);
        ``seq_len`` for BERT (where a family takes one length, either name is accepted);
        ``image`` for ResNets; and for every family ``num_layers`` (keep the first N layers),
        ``tiny=True`` (a small config of the same architecture) and ``dtype``.

    Returns
    -------
    Workload
        The module, its parameters (activations, weights, KV caches) and the config used.

    Raises
    ------
    UnknownWorkloadError
        ``name`` is not in the zoo (the message lists the names).
    InvalidWorkloadError
        A size argument the family does not take, an unknown phase, ``context`` for a prefill
        (or ``seq_len`` and ``context`` for a decode step), or an impossible size.
    """
    key = canonical_name(name)
    if key in _SEQUENCE_ARG and "context" in kwargs:
        kwargs[_SEQUENCE_ARG[key]] = kwargs.pop("context")
    if key in _CONTEXT_MODELS and "seq_len" in kwargs and kwargs.get("phase", "decode") == "decode":
        # a decode step's one length is its KV cache's: ``seq_len`` is another name for it
        if "context" in kwargs:
            raise InvalidWorkloadError(f"{key}: a decode step takes context or seq_len, not both")
        kwargs["context"] = kwargs.pop("seq_len")
    return _BUILDERS[key](**kwargs)


def workload_info(name: str) -> dict[str, Any]:
    """A one-line description of ``name``, which size argument it takes (``context``,
    ``seq_len`` or None; an LLM's decode step), its phases (``["decode", "prefill",
    "train"]`` for the LLMs, ``[]`` for the others) and Elk's Table 2 operator count if any
    (for the command line)."""
    key = canonical_name(name)
    return {
        "name": key,
        "description": _DESCRIPTIONS[key],
        "sequence_arg": "context" if key in _CONTEXT_MODELS else _SEQUENCE_ARG.get(key),
        "phases": list(PHASES) if key in _CONTEXT_MODELS else [],
        "elk_ops": ELK_TABLE2_OPS.get(key),
    }


def tokens_per_run(name: str, args: Mapping[str, Any] | None = None) -> int:
    """The tokens (or samples) one run of a zoo workload processes: what a per-token time or
    energy divides by.

    An LLM decode step gives every sequence one new token (``batch``); a prefill or a training
    forward pass runs ``batch x seq_len`` tokens (the prompt of each sequence); every other
    model processes ``batch`` samples (images, sequences, NeRF points). The arguments are
    completed with the builder's defaults (``batch=4096`` for NeRF, a 2,048-token prompt), so
    no model is built.

    Parameters
    ----------
    name : str
        A zoo name (:func:`list_workloads`; aliases accepted).
    args : mapping, optional
        The arguments :func:`get_workload` takes (``batch``, ``phase``, ``seq_len``, ...).

    Returns
    -------
    int
        Tokens per run (LLMs) or samples per run (the others).

    Raises
    ------
    UnknownWorkloadError
        ``name`` is not in the zoo.
    InvalidWorkloadError
        An argument the builder does not take, or a phase with the wrong length argument.
    """
    key = canonical_name(name)
    given = dict(args or {})
    try:
        bound = inspect.signature(_BUILDERS[key]).bind_partial(**given)
    except TypeError as err:
        raise InvalidWorkloadError(f"{key}: {err}") from None
    bound.apply_defaults()
    values = bound.arguments
    batch = int(values["batch"])
    phase = values.get("phase", "decode") if key in _CONTEXT_MODELS else None
    if phase is None or phase == "decode":
        return batch
    # prefill and train: the prompt of every sequence (its default as the builder takes it)
    return batch * resolve_length(key, phase, values.get("context"), values.get("seq_len"))
