"""Where a model's state (weights, KV caches, constants) lives while the model runs.

Three places, one option (:attr:`~tvm_icca.model_pass.CompileOptions.state`, ``--state`` on the
command line):

* ``"chip"``: kept in the cores' SRAM, loaded once before the first run and not timed per
  inference (T10 §4.3.2, the setting of T10's evaluation and how an IPU serves a model that
  fits: only inputs and outputs cross the chip boundary);
* ``"hbm"``: in the chip's HBM, preloaded into SRAM for every run (Elk §2.2, scheduled by the
  Elk pass, :mod:`tvm_icca.model_pass.elk_pass`);
* ``"host"``: sent by the host over its link for every run (what a chip without HBM must do
  when the model does not fit in SRAM).

The default (``None``, ``"auto"`` on the command line) picks HBM on a chip that has it, and
otherwise keeps the model on chip when it fits, else falls back to the host; the choice and
its reason travel with the compiled module (:data:`STATE_ATTR`) so every timing output can
say where the weights came from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.hardware import HardwareSpec

__all__ = ["STATE_ATTR", "STATE_CHOICES", "STATE_PLACES", "STATE_WORDS", "StatePlacement", "describe_setting", "per_operator_state",
           "state_candidates", "state_placement_of"]

#: The places model state can live in, in the vocabulary of the option.
STATE_PLACES = ("chip", "hbm", "host")
#: What ``--state`` accepts: a place or ``auto`` (the default rule).
STATE_CHOICES = ("auto",) + STATE_PLACES
#: Module attribute holding the :class:`StatePlacement` the planning pass used, as JSON.
STATE_ATTR = "icca.state"

#: Each place in words, for the head of every timing output.
STATE_WORDS = {
    "chip": "kept on chip (loaded once, not timed per run; T10's setting)",
    "hbm": "in HBM, preloaded every run",
    "host": "sent from the host every run",
}


@dataclass(frozen=True)
class StatePlacement:
    """The place model state got and why (``requested`` is ``None`` for the default rule)."""

    place: str
    reason: str
    requested: str | None = None

    def describe(self) -> str:
        """One line for the head of a report: ``weights: kept on chip (...): <reason>``."""
        return f"weights: {STATE_WORDS[self.place]}; {self.reason}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "StatePlacement":
        return cls(**json.loads(text))


def check_state(state: str | None) -> str | None:
    """``state`` as :attr:`CompileOptions.state` keeps it (``"auto"`` is the default, None)."""
    if state is None or state == "auto":
        return None
    if state not in STATE_PLACES:
        raise IccaError(f"unknown state place {state!r}; choose one of {STATE_CHOICES}")
    return state


def state_candidates(spec: HardwareSpec, requested: str | None) -> list[StatePlacement]:
    """The placements to try, in order: the first that compiles is used.

    A requested place is the only candidate (``"hbm"`` on a chip without HBM is an error).
    The default rule: HBM on a chip that has it (Elk's setting); otherwise on chip (T10's),
    then the host when the model does not fit in SRAM.
    """
    has_hbm = spec.hbm_bandwidth > 0
    if requested is not None:
        if requested == "hbm" and not has_hbm:
            raise IccaError(f"state='hbm' needs a chip with HBM; '{spec.name}' has none "
                            f"(choose 'chip' or 'host')")
        return [StatePlacement(requested, "as requested", requested)]
    if has_hbm:
        return [StatePlacement("hbm", f"the default on a chip with HBM ('{spec.name}')")]
    return [StatePlacement("chip", f"the default on a chip without HBM ('{spec.name}'), "
                                   "the model fits in SRAM"),
            StatePlacement("host", "the model does not fit in SRAM")]


def per_operator_state(spec: HardwareSpec) -> str:
    """The state place under which the planner plans operators one at a time (``"hbm"`` on a
    chip with HBM, else ``"host"``): what tuning measures and its records apply to. A model
    kept on chip is planned jointly (T10 Algorithm 1), not operator by operator."""
    return "hbm" if spec.hbm_bandwidth > 0 else "host"


def describe_setting(chip: str, design: str | None, placement: StatePlacement | None) -> str:
    """The line every timing output starts with: the chip, the preload design and where the
    weights come from (``design`` None or ``""``: no preload schedule)."""
    where = placement.describe() if placement is not None else "weights: no ICCA region"
    return f"chip {chip}; preload design {design or 'none'}; {where}"


def state_placement_of(mod) -> StatePlacement | None:
    """The placement the planning pass left on ``mod`` (None before planning)."""
    text = mod.attrs.get(STATE_ATTR) if mod.attrs is not None else None
    return None if text is None else StatePlacement.from_json(str(text))
