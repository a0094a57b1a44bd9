"""The functional simulated ICCA device: every core's SRAM, compute and shifts, with data.

:class:`SimulatedDevice` is the device the host runtime talks to (T10 §4.4, §5). It is a
facade over the parts of the functional executor, one job each:

* :mod:`runtime_sim.functional.cores` -- the device operations T10 §4.4 names
  (:meth:`~SimulatedDevice.allocate`, :meth:`~SimulatedDevice.compute`,
  :meth:`~SimulatedDevice.shift`), with :meth:`~SimulatedDevice.place` (initial placement),
  :meth:`~SimulatedDevice.reduce_outputs` and :meth:`~SimulatedDevice.read_output` (epilogue);
* :mod:`runtime_sim.functional.sram` -- SRAM accounting per core (execution space + preload
  space + live activations + the shift buffer of T10 §5), checked at every preload and every
  allocate;
* :mod:`runtime_sim.functional.preload_store` -- Elk's preload space (Elk §2.2, §4.3, §4.5):
  :meth:`~SimulatedDevice.preload_async` and :meth:`~SimulatedDevice.distribute`;
* :mod:`runtime_sim.functional.interpreter` -- :meth:`~SimulatedDevice.run` executes a whole
  region (:class:`~runtime_sim.contract.program.DeviceProgram`) with these, as the host runtime
  does, VGM operators (T10 §2.2) through :mod:`runtime_sim.functional.vgm_exec`;
* :mod:`runtime_sim.functional.run_counters` -- the statistics of the latest run
  (:meth:`~SimulatedDevice.last_run_stats`, :attr:`~SimulatedDevice.last_run`).

The functional device never times anything: :mod:`runtime_sim.run_stats` puts the timing
simulator's time of the programs that ran (:attr:`~SimulatedDevice.last_run`) beside these
counts. :func:`get_device` is the process-wide device.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout, ShiftEvent
from runtime_sim.contract.program import DeviceProgram
from runtime_sim.functional.cores import Cores
from runtime_sim.functional.interpreter import Interpreter
from runtime_sim.functional.preload_store import PreloadStore
from runtime_sim.functional.run_counters import LastRun, RunCounters
from runtime_sim.functional.sram import SramLedger

__all__ = ["LastRun", "SimulatedDevice", "get_device"]


class SimulatedDevice:
    """A simulated ICCA chip that executes device programs on data (T10 §4.4, §5)."""

    def __init__(self, hw: HardwareSpec | None = None):
        self._lock = threading.RLock()
        self._sram = SramLedger()
        self._preloads = PreloadStore(self._sram)  # preloaded operators not yet executed
        self._cores = Cores(self._sram, self._preloads)
        self._counters = RunCounters()
        self._interpreter = Interpreter(self._cores, self._preloads, self._sram, self._counters,
                                        self._lock)
        if hw is not None:
            self.configure(hw)

    # -- configuration ------------------------------------------------------------------
    @property
    def hw(self) -> HardwareSpec:
        """The chip (raises :class:`DeviceProgramError` before :meth:`configure`)."""
        return self._cores.hw

    def configure(self, hw: HardwareSpec) -> None:
        """Become chip ``hw``. Changing the chip drops everything held on the old one."""
        self._cores.configure(hw)

    def sram_used_per_core(self) -> np.ndarray:
        """Bytes of SRAM in use on every core, the reserved shift buffer and the preload
        space included (Elk §2.2: execution space + preload space + buffer)."""
        return self._sram.per_core()

    def preload_used_per_core(self) -> np.ndarray:
        """Bytes of preload space in use on every core (operators preloaded, not executed)."""
        return self._sram.preload.copy()

    # -- device operations (runtime_sim.functional.cores) -----------------------------------
    def allocate(self, op_name: str, layout: OpLayout) -> None:
        """:meth:`Cores.allocate <runtime_sim.functional.cores.Cores.allocate>`: reserve one
        partition of every tensor of ``op_name`` on each of its cores."""
        self._cores.allocate(op_name, layout)

    def free(self, op_name: str) -> None:
        """Release the SRAM of an operator (its preload space too, if it was preloaded)."""
        self._cores.free(op_name)

    def preload_async(self, op_name: str, layout: OpLayout, inputs: Mapping[int, np.ndarray],
                      chunks: Mapping[int, int] | None = None,
                      ids_values: Mapping[int, np.ndarray] | None = None) -> int:
        """:meth:`PreloadStore.preload_async
        <runtime_sim.functional.preload_store.PreloadStore.preload_async>` (Elk §4.5): deliver
        the operator's off-chip inputs into the preload space of its cores; returns the bytes
        delivered."""
        return self._cores.preload_async(op_name, layout, inputs, chunks, ids_values)

    def distribute(self, op_name: str) -> int:
        """:meth:`Cores.distribute <runtime_sim.functional.cores.Cores.distribute>` (Elk §4.5):
        assemble the preloaded inputs' partitions; returns the bytes moved between cores."""
        return self._cores.distribute(op_name)

    def buffers(self, op_name: str) -> list[np.ndarray]:
        """The stacked per-core buffers of an operator (inputs, then the output accumulator)."""
        return self._cores.allocation(op_name).buffers

    def place(self, op_name: str, tensor: int, array: np.ndarray,
              ids: np.ndarray | None = None) -> int:
        """:meth:`Cores.place <runtime_sim.functional.cores.Cores.place>`: put every core's
        initial partition of input ``tensor`` in its buffer; returns the bytes written."""
        return self._cores.place(op_name, tensor, array, ids)

    def compute(self, op_name: str, counters: Mapping[str, int]) -> None:
        """:meth:`Cores.compute <runtime_sim.functional.cores.Cores.compute>`: one compute
        step on every core, the sub-task at loop ``counters`` (T10 §4.2)."""
        self._cores.compute(op_name, counters)

    def shift(self, op_name: str, event: ShiftEvent) -> int:
        """:meth:`Cores.shift <runtime_sim.functional.cores.Cores.shift>`: rotate partitions
        of one tensor; returns the bytes received over the interconnect."""
        return self._cores.shift(op_name, event)

    def run_steps(self, op_name: str) -> int:
        """All compute-shift steps of an operator (T10 §4.2 nested loops); returns shift bytes."""
        return self._cores.run_steps(op_name)

    def reduce_outputs(self, op_name: str) -> int:
        """Sum the output replicas of all rings into ring 0; returns the bytes sent."""
        return self._cores.reduce_outputs(op_name)

    def read_output(self, op_name: str) -> np.ndarray:
        """Apply the epilogue on ring-0 cores and assemble the output tensor from them."""
        return self._cores.read_output(op_name)

    # -- whole regions (runtime_sim.functional.interpreter) ---------------------------------
    def run(self, program: DeviceProgram | Mapping[str, Any] | str,
            inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """:meth:`Interpreter.run <runtime_sim.functional.interpreter.Interpreter.run>`:
        execute one offloaded region on data and return its outputs (T10 §4.4, §5)."""
        return self._interpreter.run(program, inputs)

    # -- statistics (runtime_sim.functional.run_counters) -----------------------------------
    def reset_stats(self) -> None:
        """Start a new run: the next region executed is the first of a fresh run."""
        with self._lock:
            self._counters.reset()

    @property
    def last_run(self) -> LastRun:
        """The latest run as plain data: the programs that executed, in call order, and the
        counters of :meth:`last_run_stats` (what :mod:`runtime_sim.run_stats` times)."""
        with self._lock:
            return self._counters.last_run()

    def last_run_stats(self, *, timing: bool = False) -> dict[str, Any]:
        """The device's counters of the current (latest) run, one model invocation
        (:meth:`RunCounters.counters <runtime_sim.functional.run_counters.RunCounters.counters>`).

        The functional device does not time: ``timing=True`` raises :class:`ValueError`;
        :func:`runtime_sim.run_stats.last_run_stats` (``device=`` this device) adds the
        simulated time of the run to these counters.
        """
        if timing:
            raise ValueError("the functional device has no timing: use "
                             "runtime_sim.run_stats.last_run_stats(device=...) for simulated_s")
        with self._lock:
            return self._counters.counters()


# -- the process-wide device ------------------------------------------------------------------
_DEVICE: SimulatedDevice | None = None
_DEVICE_LOCK = threading.Lock()


def get_device() -> SimulatedDevice:
    """The device of this process (the one process-wide state of the simulator)."""
    global _DEVICE
    with _DEVICE_LOCK:
        if _DEVICE is None:
            _DEVICE = SimulatedDevice()
        return _DEVICE
