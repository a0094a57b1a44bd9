"""The bounds of every :class:`~runtime_sim.contract.hardware.HardwareSpec` field, and why.

Sizes are bounded so that an absurd spec fails in validation, not later in ``np.zeros`` of
the simulator (which keeps several int64 arrays per core, and per core of a chip per HBM
controller on a mesh). Each bound is far above any real chip and reasoned beside it.
"""

from __future__ import annotations

from runtime_sim.contract.energy import ENERGY_PJ_FIELDS

#: 2**20 cores: above the largest many-core systems, Cerebras WSE-3 (900,000 cores on one
#: wafer) and a Graphcore IPU-POD256 (256 x 1,472 = 376,832 tiles).
MAX_CORES = 2**20
#: 4,096 chips: 16 IPU-POD256 racks' worth of IPUs.
MAX_CHIPS = 4096
#: 4 GiB of SRAM per core: Groq's LPU, the largest on-chip SRAM, has 230 MB per chip, and an
#: IPU core 624 KiB (T10 §2.1); per core more than 4 GiB is not SRAM.
MAX_SRAM_BYTES = 2**32
#: 256 HBM controllers per chip: 8 HBM stacks (NVIDIA B200) of 32 pseudo-channels each
#: (JEDEC HBM3, JESD238: 16 channels x 2 pseudo-channels); Elk §6.1 models 4 per chip.
MAX_HBM_CONTROLLERS_PER_CHIP = 256
#: 4,096: a matrix unit's tile edge (the IPU's AMP unit works on 16, a TPU v6e MXU on 256).
MAX_MATRIX_TILE = 4096
#: Rates: 1e18 B/s is 60,000x Elk's 16 TB/s of HBM for 4 chips; 1e12 Hz is 1 THz. The lower
#: bounds (1 B/s, 1 Hz, 1e-6 FLOP/cycle) keep times finite: ``bytes / rate`` never overflows.
MAX_BANDWIDTH = 1e18
#: 1 PiB of HBM per chip: NVIDIA's B300 carries 288 GB in 8 stacks; 3,500x that is not a
#: memory attached to one chip.
MAX_HBM_BYTES_PER_CHIP = 2**50
#: 1e6 pJ (1 uJ) per action: 1,000x a 64-bit DRAM access (Horowitz, ISSCC 2014).
MAX_PJ = 1e6
#: 1 MW: beyond any chip's board (a Cerebras CS-3 system draws 23 kW).
MAX_WATTS = 1e6
#: (lowest value, highest value) of every integer field.
INT_FIELDS: dict[str, tuple[int, int]] = {
    "num_cores": (1, MAX_CORES),
    "sram_bytes_per_core": (1, MAX_SRAM_BYTES),
    "num_chips": (1, MAX_CHIPS),
    "sync_cycles": (0, 10**9),
    # 0 would divide every transfer into infinitely many chunks (T10 §5's shift buffer)
    "shift_buffer_bytes": (1, MAX_SRAM_BYTES),
    "hbm_controllers": (0, MAX_HBM_CONTROLLERS_PER_CHIP * MAX_CHIPS),
    # 0: not modelled (no capacity check)
    "hbm_bytes_per_chip": (0, MAX_HBM_BYTES_PER_CHIP),
    # 0: derived from the core count (:func:`mesh_shape`)
    "mesh_rows": (0, MAX_CORES),
    "mesh_cols": (0, MAX_CORES),
}
#: (lowest positive value, highest value, whether 0 is allowed) of every real-valued field.
FLOAT_FIELDS: dict[str, tuple[float, float, bool]] = {
    "link_bandwidth": (1.0, MAX_BANDWIDTH, False),
    "clock_hz": (1.0, 1e12, False),
    "matrix_flops_per_cycle": (1e-6, 1e9, False),
    "vector_flops_per_cycle": (1e-6, 1e9, False),
    "host_bandwidth": (1.0, MAX_BANDWIDTH, False),
    "link_latency_s": (0.0, 1.0, True),
    "inter_chip_latency_s": (0.0, 1.0, True),
    "inter_chip_bandwidth": (1.0, MAX_BANDWIDTH, True),
    "hbm_bandwidth": (1.0, MAX_BANDWIDTH, True),
    "hbm_injection_bandwidth": (1.0, MAX_BANDWIDTH, True),
    # energies: 0 is "not modelled"; 1e-6 pJ is far below any switching event of a
    # digital circuit, 1e6 pJ (1 uJ) per byte or FLOP is 1,000x a DRAM access (Horowitz,
    # ISSCC 2014: 1.3-2.6 nJ per 64-bit access)
    **{name: (1e-6, MAX_PJ, True) for name in ENERGY_PJ_FIELDS},
    # watts: 1 MW per core or per chip is beyond any board (Cerebras CS-3: 23 kW per wafer)
    "static_w_per_core": (1e-9, MAX_WATTS, True),
    "static_w_per_chip": (1e-9, MAX_WATTS, True),
    "board_power_w": (1e-3, MAX_WATTS, True),
}
#: What each bounded field counts, and the reason for its bound where it is not obvious.
WHY = {
    "num_cores": "cores of the system; WSE-3 has 900,000",
    "sram_bytes_per_core": "bytes of SRAM per core",
    "num_chips": "chips of the system",
    "sync_cycles": "cycles of synchronization per step",
    "shift_buffer_bytes": "the per-core buffer transfers are cut into; 0 would divide by zero",
    "hbm_controllers": "HBM3 gives at most 8 stacks x 32 pseudo-channels per chip",
    "hbm_bytes_per_chip": "bytes of HBM attached to each chip, 0 when the capacity is not "
                          "modelled",
    "link_bandwidth": "bytes per second",
    "clock_hz": "Hz",
    "matrix_flops_per_cycle": "FLOP per cycle per core",
    "vector_flops_per_cycle": "FLOP per cycle per core",
    "host_bandwidth": "bytes per second per chip",
    "link_latency_s": "seconds",
    "inter_chip_latency_s": "seconds per chip crossing, on top of link_latency_s",
    "inter_chip_bandwidth": "bytes per second, 0 for a single chip",
    "hbm_bandwidth": "bytes per second, 0 without HBM",
    "hbm_injection_bandwidth": "bytes per second one controller injects into the NoC, 0 for "
                               "no cap beyond its links",
    "mesh_rows": "NoC grid rows per chip, 0 to derive them from the core count",
    "mesh_cols": "NoC grid columns per chip, 0 to derive them from the core count",
    **{name: "picojoules per action, 0 when not modelled" for name in ENERGY_PJ_FIELDS},
    "static_w_per_core": "watts of static power per core, 0 when not modelled",
    "static_w_per_chip": "watts of static power per chip outside its cores, 0 when not modelled",
    "board_power_w": "rated watts of one chip's board, 0 when not known",
}
