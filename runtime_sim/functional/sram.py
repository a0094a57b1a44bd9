"""SRAM accounting per core: what every core holds, checked against its budget.

SRAM per core is execution space (the partitions of allocated operators, T10 §4.4
"allocate") + preload space of every operator preloaded and not yet executed (Elk §2.2,
§4.5) + live activations (outputs kept on chip for a later operator of the region) + the
shift buffer reserved on every core (T10 §5 "multi-copy shift with buffer") + the model
state kept on chip all run long in its idle placement (``"resident"`` inputs, T10 §4.3.2,
:func:`runtime_sim.contract.resting.resident_state`; the timing simulator counts the same).
It is checked at every preload and every allocate, so the first core to overflow is named the
instant it does. The resident state of a run is known once its last region ran: the checks
count that of the regions run so far, and the peaks are recorded without it
(:attr:`SramLedger.peak_need`, :attr:`SramLedger.op_need`) so that the run's statistics add
the whole run's (:mod:`runtime_sim.functional.run_counters`). :class:`SramLedger` only counts bytes; the data sits in
:mod:`runtime_sim.functional.cores` and :mod:`runtime_sim.functional.preload_store`.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.sram_budget import check_sram


class SramLedger:
    """Bytes in use on every core of the configured chip, and the peaks of the current region.

    Attributes
    ----------
    used
        Execution space + live activations (+ the VGM region while one runs), per core; the
        shift buffer excluded.
    preload
        Preload space in use, per core (operators preloaded, not executed).
    resident
        Live activations: tensor name -> bytes per core.
    resting
        Model state kept on chip all run long (``"resident"`` inputs of the regions of the
        run so far, in their idle placements), per core.
    ideal
        Design ``"ideal"``: preload space has its own SRAM (set for a region's run).
    peak_need
        Per core, the most SRAM any check of the current region found, without ``resting``
        (under design ``"ideal"``: the execution side alone).
    op_need
        Per operator executed in the current region, its execution side per core (its
        partitions, live activations, shift buffer; without ``resting`` and preload space).
    peak_preload
        Peak preload space per core in the current region.
    labels
        Operator name -> its kind in the user's words, for overflow messages.
    """

    def __init__(self) -> None:
        self._hw: HardwareSpec | None = None
        self.used = np.zeros(0, np.int64)
        self.preload = np.zeros(0, np.int64)
        self.resident: dict[str, np.ndarray] = {}
        self.resting = np.zeros(0, np.int64)
        self.ideal = False
        self.peak_need = np.zeros(0, np.int64)
        self.op_need: dict[str, np.ndarray] = {}
        self.peak_preload = 0
        self.labels: dict[str, str] = {}

    @property
    def hw(self) -> HardwareSpec:
        """The chip being accounted for."""
        if self._hw is None:
            raise DeviceProgramError("the simulated device has no HardwareSpec yet (call configure)")
        return self._hw

    def is_for(self, hw: HardwareSpec) -> bool:
        """Whether the ledger already accounts for chip ``hw``."""
        return self._hw == hw and self.used.size == hw.num_cores

    def reset(self, hw: HardwareSpec) -> None:
        """Account for chip ``hw``, every core empty."""
        self._hw = hw
        self.resident.clear()
        self.used = np.zeros(hw.num_cores, np.int64)
        self.preload = np.zeros(hw.num_cores, np.int64)
        self.start_region(np.zeros(hw.num_cores, np.int64))

    def start_region(self, resting: np.ndarray) -> None:
        """A region starts with ``resting`` (the run's resident state so far) held: its peaks
        start from nothing."""
        self.resting = resting
        self.peak_need = np.zeros(self.hw.num_cores, np.int64)
        self.op_need = {}
        self.peak_preload = 0

    def per_core(self) -> np.ndarray:
        """Bytes of SRAM in use on every core, the reserved shift buffer and the preload space
        included (Elk §2.2: execution space + preload space + buffer)."""
        return self.used + self.preload + self.resting + self.hw.shift_buffer_bytes

    def check(self, op_name: str, used: np.ndarray, preload: np.ndarray, layout: OpLayout,
              *, executing: bool = False) -> int:
        """Raise :class:`~runtime_sim.contract.errors.SramOverflowError` if execution space + activations (``used``) +
        resident state + preload space + shift buffer exceed a core's SRAM; return the peak
        core's bytes. Design ``"ideal"`` gives preloading its own SRAM: each side is checked
        alone. ``executing``: the check of operator ``op_name``'s allocation (its execution
        side is recorded in :attr:`op_need`)."""
        hw = self.hw
        exec_side = used + hw.shift_buffer_bytes
        needed = exec_side if self.ideal else exec_side + preload
        # the one SRAM rule (runtime_sim.contract.sram_budget), the compiler's budget too
        check_sram(op_name, hw, exec_side + self.resting, preload, separate=self.ideal,
                   label=self.labels.get(op_name, layout.expr.kind), tensors=layout.expr.tensor_summary())
        np.maximum(self.peak_need, needed, out=self.peak_need)
        self.peak_preload = max(self.peak_preload, int(preload.max()) if preload.size else 0)
        if executing:
            self.op_need[op_name] = exec_side
        return int((needed + self.resting).max()) if needed.size else 0

    def hold(self, name: str, cores: np.ndarray, nbytes: int) -> None:
        """Keep activation ``name`` on ``cores`` (``nbytes`` each) until :meth:`release`."""
        per_core = np.zeros(self.hw.num_cores, np.int64)
        per_core[cores] = nbytes
        self.resident[name] = per_core
        self.used += per_core

    def release(self, name: str) -> None:
        """Free the SRAM of activation ``name``."""
        self.used -= self.resident.pop(name)

    def release_all(self) -> None:
        """Free every live activation (the end of a region)."""
        for name in list(self.resident):
            self.release(name)
