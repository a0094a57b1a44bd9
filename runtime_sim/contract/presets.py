"""The hardware presets: named chips, every number cited beside it.

:func:`preset` builds one by name (:data:`PRESET_NAMES`), optionally with fields overridden;
:func:`small_chip` is the few-core chip of the tests and quick experiments. A field no cited
document gives is named, with the reason for its value, in the preset's ``assumed`` mapping
(printed by ``tvm-icca simulate``). The per-action energies of every preset are derived in
:mod:`runtime_sim.contract.preset_energies`, each from a cited figure or marked assumed there.
The tables of every preset in the documentation are built from these
(``docs/_ext/hardware_presets.py``).
"""

from __future__ import annotations

import difflib
import math
from typing import Any

from runtime_sim.contract.errors import InvalidHardwareSpecError
from runtime_sim.contract.hardware import GIB, KIB, HardwareSpec, override_fields
from runtime_sim.contract.preset_energies import ipu_energies, tenstorrent_energies


# Every field of a preset is either cited in a comment beside it or named, with the reason, in
# the preset's ``assumed`` mapping (printed by ``tvm-icca simulate``; tests/test_hardware.py
# checks that each names a real field).
#
# IPU Mk2 (GC200): 1,472 cores x 624 KiB (T10 §2.1); 5.5 GB/s per core link (T10 §2.1);
# clock 1.325 GHz in the Elk artifact, rounded to 1.33 GHz; 118 cycles of synchronization per
# step (Elk artifact, measured) and an 8 KiB shift buffer (T10 §5).
# Matrix rates per dtype, from Graphcore's figures per chip:
# * float16: 250 TFLOPS FP16 (T10 Table 3; Graphcore's IPU-POD128 datasheet: 31.955 PFLOPS
#   FP16.16 for 128 GC200 IPUs, 249.6 TFLOPS each) -> 250e12 / 1472 / 1.33e9 ~ 128 FLOP/cycle;
# * float32: the same datasheet's 7.989 PFLOPS FP32 for 128 IPUs, 62.4 TFLOPS each, a quarter
#   of FP16 -> 32 FLOP/cycle;
# * bfloat16: not an IPU format (Graphcore's IPU Programmer's Guide §2: arithmetic in IEEE
#   single or half precision); modelled at the float16 rate so that bfloat16 models still run
#   (marked assumed).
# Vector: other ops 31.2 TFLOPS on 4 chips (Elk §6.3) -> ~4 FLOP/cycle/core; Elk's emulator
# gives one figure, so every dtype runs at it (marked assumed).
#
# Latencies (issue 9, item 4). What was looked for and what was found:
# * Jia, Tillman, Maggioni, Scarpazza, "Dissecting the Graphcore IPU architecture via
#   microbenchmarking" (arXiv 1912.03413, 2019) measured on-chip tile-to-tile and IPU-Link
#   latencies (their §4, "no-load" and "full-load" point-to-point benchmarks; a public summary
#   reports "congestion increases on-chip latency only marginally (+24%) but affects off chip
#   IPU link latency significantly with slowdowns of 4.0...7.7x"). Their absolute latency
#   figures could NOT be retrieved here, so none of the values below is theirs.
# * Per-hop link latency, ``link_latency_s``: 126 cycles (94.7 ns at 1.33 GHz). Poplar's
#   ``Target::getMaxIPUSyncDelay()`` is the start delay Graphcore's own poplibs cost
#   estimates add once per exchange ("the delay caused by syncing i.e. the time before when
#   all tiles are done, and when the last tile is released from sync", graphcore/poplibs,
#   popops reduction cost estimate). Its value, 126 cycles, is not in Graphcore's
#   documentation that could be searched; it is quoted from a public third-party IPU cost
#   model that reads it from the Poplar target ("the target's getMaxIPUSyncDelay is a
#   conservative bound for its route/start latency", exchange_transfer_cycles: 126). It is
#   used here as the route/start latency of one staged chunk over one hop: conservative
#   (an upper bound for one transfer's start-up), and it costs about 6% of an 8 KiB chunk's
#   1.49 us at 5.5 GB/s.
# * Cross-chip latency, ``inter_chip_latency_s``: 15 ns per IPU-Link crossing, on top of
#   the hop's own latency: the per-hop sync latency Graphcore's poplibs tools give their
#   multi-IPU model (graphcore/poplibs tools, ``setGlobalSyncLatency``:
#   ``const double syncLatencyPerHop = 15e-9;``, "One hop within a card plus one hop per card
#   pair"). A sync signal is the fastest thing an IPU-Link carries, so this is a lower bound
#   for a data chunk (Jia et al.'s measured IPU-Link figure was not retrievable, see above).
# * Synchronization per step, ``sync_cycles``: 118 cycles on one chip (the Elk artifact's
#   constant, measured on the IPU). On several chips a step's barrier also crosses the
#   IPU-Links: poplibs' multi-IPU model charges ``ceil(15e-9 * clock * hops * 2)`` cycles
#   with ``hops = 1 + (chips / 2) / 2`` (same ``setGlobalSyncLatency``), i.e. 80 cycles for 4
#   chips at 1.33 GHz, so 4-chip presets use 118 + 80 = 198 cycles. (Poplar's single-chip
#   target model, ``Target::getGlobalSyncCycles``, is larger, ~600 cycles, see
#   Poplar's target model; the Elk figure is kept as the measured one.)
# * Mesh preset: no source gives a router-hop latency for Elk's hypothetical mesh IPU. Its
#   per-hop latency is set so that a corner-to-corner XY route of one chip's 32 x 46 grid
#   (76 hops) costs what one all-to-all exchange transfer costs (126 cycles), i.e. the two
#   topologies compare at equal worst-case route latency: 126 / 76 ~ 1.66 cycles per hop.
_CLOCK_HZ = 1.33e9
_LINK_LATENCY_CYCLES = 126
_INTER_CHIP_LATENCY_S = 15e-9
_SYNC_CYCLES = 118
_MESH_DIAMETER_HOPS = (32 - 1) + (46 - 1)  # runtime_sim.machine.topology.mesh_shape(1472) = (32, 46)


def _multi_chip_sync_cycles(chips: int) -> int:
    """poplibs' multi-IPU sync model on top of the on-chip barrier (see above)."""
    hops = 1 + (chips // 2) // 2
    return _SYNC_CYCLES + math.ceil(_INTER_CHIP_LATENCY_S * _CLOCK_HZ * hops * 2)


# Energies (issue 43): per-action energies from Horowitz's 45 nm table scaled to TSMC 7 nm
# (runtime_sim.contract.preset_energies, every derivation and its marks there). Board power:
# the C600 card, one Mk2 IPU, "a thermal design power (TDP) of 185 W running typical workloads"
# (Graphcore's C600 datasheet, Overview).
_IPU_BOARD_POWER_W = 185.0
_IPU_ENERGY, _IPU_ENERGY_ASSUMED = ipu_energies(_IPU_BOARD_POWER_W)
_IPU_MESH_ENERGY, _IPU_MESH_ENERGY_ASSUMED = ipu_energies(_IPU_BOARD_POWER_W, mesh=True)
_IPU_MK2_ASSUMED = {
    **_IPU_ENERGY_ASSUMED,
    "dtypes": "bfloat16 is not an IPU Mk2 format (Graphcore: IEEE single and half precision); "
              "kept so that bfloat16 models run, at the float16 matrix rate",
    "vector_flops_per_cycle": "Elk §6.3's emulator figure (31.2 TFLOPS for non-MatMul ops on 4 "
                              "chips), one rate for every dtype; no per-dtype Graphcore figure",
    "matrix_tile": "the AMP unit's shape is not published; padded to 16 as the 16x16 array of "
                   "T10's benchmark problem",
    "link_latency_s": "126 cycles: Poplar's max IPU sync delay as a third-party cost model quotes "
                      "it, used as a chunk's per-hop start latency",
}
_IPU_MK2 = dict(
    num_cores=1472,
    sram_bytes_per_core=624 * KIB,
    link_bandwidth=5.5e9,
    clock_hz=_CLOCK_HZ,
    matrix_flops_per_cycle=128.0,  # float16 (and bfloat16, assumed)
    matrix_flops_per_cycle_by_dtype={"float32": 32.0},
    vector_flops_per_cycle=4.0,
    matrix_tile=(16, 16, 16),
    link_latency_s=_LINK_LATENCY_CYCLES / _CLOCK_HZ,
    sync_cycles=_SYNC_CYCLES,
    shift_buffer_bytes=8 * KIB,
    topology="all-to-all",
    host_bandwidth=8e9,  # the IPU's off-chip bandwidth (T10 Table 3)
    **_IPU_ENERGY,  # cited and derived in runtime_sim.contract.preset_energies
    assumed=_IPU_MK2_ASSUMED,
)
#: Elk §6.1 emulates 4 HBM3E modules per chip. An 8-high HBM3E stack holds 24 GB (eight 24 Gb
#: dies; Micron's HBM3E 8-high, also the capacity its 12-high 36 GB part raises by 50%), at
#: about 1.2 TB/s per stack (Micron): four stacks are 96 GB per chip.
_HBM3E_STACKS_PER_CHIP = 4
_HBM3E_STACK_BYTES = 24 * GIB
#: What the 4-chip presets add: 640 GB/s between chips (Elk §5), the IPU-Link latency and the
#: multi-chip barrier (see above).
_POD4 = dict(num_cores=4 * 1472, num_chips=4, inter_chip_bandwidth=640e9,
             inter_chip_latency_s=_INTER_CHIP_LATENCY_S, sync_cycles=_multi_chip_sync_cycles(4),
             assumed={**_IPU_MK2_ASSUMED, "inter_chip_latency_s": (
                 "15 ns per IPU-Link crossing: poplibs' sync latency per hop, used for data"),
                 "board_power_w": "the IPU-M2000's rated power was not retrieved: each IPU at "
                                  "its C600 card's 185 W TDP"})
#: What Elk's HBM setting leaves open: the capacity of its HBM3E modules, and the power they add
#: to a board: its four stacks per chip reading at full bandwidth (16 TB/s / 4 chips) at the
#: preset's hbm_pj_per_byte, on top of the C600's 185 W.
_HBM_BANDWIDTH_PER_CHIP = 16e12 / 4
_HBM_BOARD_POWER_W = (_IPU_BOARD_POWER_W
                      + _HBM_BANDWIDTH_PER_CHIP * _IPU_ENERGY["hbm_pj_per_byte"] * 1e-12)
_HBM_CAPACITY_ASSUMED = {"hbm_bytes_per_chip": "Elk §6.1 gives 4 HBM3E modules per chip, not "
                         "their capacity; 8-high 24 GB stacks (Micron) assumed",
                         "board_power_w": "Elk's chip has no board: the C600's 185 W TDP plus "
                         "its HBM3E read at full bandwidth (4 TB/s per chip) at hbm_pj_per_byte"}
#: What Elk's mesh (§5) leaves open: no grid, link or router figure is given.
_ELK_MESH_ASSUMED = {
    "link_bandwidth": "Elk gives no mesh link figure; the IPU's 5.5 GB/s core link per mesh link",
    "link_latency_s": "no source gives a router hop: a corner-to-corner route of the 32 x 46 grid "
                      "costs one all-to-all exchange transfer (126 cycles)",
    "mesh_rows": "Elk gives no grid; the most square grid of 1,472 cores (32 x 46)",
    "mesh_cols": "Elk gives no grid; the most square grid of 1,472 cores (32 x 46)",
    "hbm_injection_bandwidth": "Elk gives no controller figure: no cap beyond the edge links",
}


# Tenstorrent mesh chips (issue 27, "mesh hardware as built"): DRAM controllers inside the grid
# as NoC nodes, two NoCs forming a 2-D torus. Every figure was read in Tenstorrent's public
# sources, cited per line: the tt-metal SoC descriptors (tt_metal/soc_descriptors/
# wormhole_b0_80_arch.yaml, blackhole_140_arch.yaml: NoC coordinates are x-y, i.e. column-row),
# tt-metal's Blackhole NoC header (tt_metal/hw/inc/blackhole/noc/noc_parameters.h), the ISA
# documentation (tenstorrent/tt-isa-documentation, WormholeB0/...), the NoC estimator tt-npe
# (tt_npe/cpp/include/device_models/{wormhole_b0,blackhole}.hpp) and the boards' product
# specifications (docs.tenstorrent.com, aibs/wormhole/specifications and
# aibs/blackhole/specifications).
#
# How the model maps them: one bidirectional torus stands for the two unidirectional tori
# (NoC 0 runs east and south, NoC 1 west and north, so each directed link is one NoC's link)
# and a transfer takes the shorter way round, as software choosing the NoC would; one
# "HBM controller" is one DRAM tile (a NoC endpoint), reading an equal share of the chip's
# GDDR6 bandwidth (each channel pair is exposed on 3 tiles).
_WORMHOLE_DRAM_TILES = (  # (row, col) = (y, x) of the 18 distinct DRAM tiles of the descriptor's
    # dram list: x=0 at y=0,1,11,5,6,7 and x=5 at every y
    (0, 0), (1, 0), (11, 0), (5, 0), (6, 0), (7, 0),
    (0, 5), (1, 5), (11, 5), (2, 5), (9, 5), (10, 5), (3, 5), (4, 5), (8, 5), (5, 5), (6, 5), (7, 5),
)
# Matrix rates per dtype (WormholeB0/TensixTile/TensixCoprocessor/MatrixUnit.md, Performance:
# MVMUL peaks at 4.096 TFLOP/s per Tensix with one fidelity phase, 2.048 with two, 1.024 with
# four; SrcASrcB.md, "Fidelity phases": "reasonable" precision takes phases 0 and 1 for BF16,
# all four for FP16 and TF32; FP32 operands enter SrcA/SrcB as TF32, the low 13 mantissa bits
# dropped). BFP8 and FP8 (the product pages' other figures) are formats no dtype of ours maps to.
_TT_FP16_PER_CYCLE = 1024.0  # four phases
_TT_BF16_PER_CYCLE = 2048.0  # two phases
# Energies (issue 43): derived in runtime_sim.contract.preset_energies from Horowitz's 45 nm
# table, scaled to the process of each ASIC: Wormhole 12 nm, Blackhole 6 nm (Tenstorrent's
# Dev Day 2025 comparison, as hardwareluxx.de reported it). Board power: "TBP (Total Board
# Power)" 160 W for the n150, 300 W for the p150 (docs.tenstorrent.com, aibs/wormhole and
# aibs/blackhole specifications).
_WORMHOLE_ENERGY, _WORMHOLE_ENERGY_ASSUMED = tenstorrent_energies(
    12, "12 nm (Wormhole)", board_power_w=160.0, cores_per_chip=72)
_BLACKHOLE_ENERGY, _BLACKHOLE_ENERGY_ASSUMED = tenstorrent_energies(
    6, "7 nm, the fit's last node (Blackhole is 6 nm)", board_power_w=300.0, cores_per_chip=120)
_TT_WORMHOLE = dict(
    name="tt-wormhole",
    # The n150 board as sold: 72 Tensix ("Tensix Cores 72", docs.tenstorrent.com/aibs/wormhole/
    # specifications; MatrixUnit.md: "an n150 board will have 1 ASIC with 72 tiles") of the
    # ASIC's 80 (functional_workers of the descriptor: x = 1-4, 6-9, y = 1-5, 7-11). Harvesting
    # fuses off whole Tensix rows (tt-umd wormhole_coordinate_manager.cpp: the harvesting mask
    # has a bit per row), which row depends on the die: the last one (y = 11) is reserved here
    num_cores=72,
    sram_bytes_per_core=1499136,  # worker_l1_size of the descriptor (1464 KiB of L1 per Tensix)
    # One flit of 256 bits (32 bytes) per cycle per NoC hop (WormholeB0/NoC/README.md,
    # Performance; DRAMTile/README.md: "each hop ... can sustain 32 GB/s"); tt-npe models an
    # effective 30 B/cycle for large transfers
    link_bandwidth=32e9,
    clock_hz=1e9,  # "AI Clock 1 GHz" (n150 specifications; MatrixUnit.md's standard clock)
    # float16: 72 x 1,024 x 1 GHz = 73.7 TFLOPS, the specifications' "TeraFLOPS (FP16) 74"
    matrix_flops_per_cycle=_TT_FP16_PER_CYCLE,
    # bfloat16: 72 x 2,048 x 1 GHz = 147 TFLOPS, the specifications' BLOCKFP8 figure (148), whose
    # full precision is the same two phases; float32 as TF32 at four phases: 73.7 TFLOPS
    matrix_flops_per_cycle_by_dtype={"bfloat16": _TT_BF16_PER_CYCLE, "float32": _TT_FP16_PER_CYCLE},
    # SFPMAD: 0.064 TFLOP/s per Vector Unit at FP32 (MatrixUnit.md); the SFPU is 32 lanes of
    # 32 bits (VectorUnit.md), so every dtype is computed at this one rate
    vector_flops_per_cycle=64.0,
    matrix_tile=(8, 16, 16),  # MVMUL: an 8x16 SrcB times a 16x16 SrcA (MVMUL.md)
    link_latency_s=9e-9,  # router to neighbouring router: 9 cycles (NoC/README.md)
    sync_cycles=270,  # assumed (below): tt-npe's worst NoC read latency
    # a NoC packet carries at most 256 data flits = 8 KiB (NoC/README.md): one staged chunk
    shift_buffer_bytes=8 * KIB,
    topology="mesh",
    # twelve GDDR6 channels at 24 GB/s = 288 GB/s per ASIC (DRAMTile/README.md; n150
    # specifications: 288 GB/sec); 18 DRAM tiles
    hbm_bandwidth=288e9, hbm_controllers=18,
    hbm_bytes_per_chip=12 * GIB,  # the n150's 12 GB of GDDR6 in 6 banks (README.md, specifications)
    hbm_placement="nodes:" + ",".join(f"({r},{c})" for r, c in _WORMHOLE_DRAM_TILES),
    # a tile's NIU injects one flit per cycle per NoC (NoC/README.md), 2 NoCs; tt-npe measures
    # 23.2 B/cycle from a DRAM tile, so its cap is conservatively 2 x 23.2 GB/s
    hbm_injection_bandwidth=2 * 23.2e9,
    mesh_rows=12, mesh_cols=10,  # grid x_size 10, y_size 12 (descriptor; tt-npe: 12 rows, 10 cols)
    # no Tensix in rows 0 and 6 (Ethernet tiles) nor column 0 (ARC, PCIe, router-only, DRAM);
    # row 11's Tensix are the harvested ones (see num_cores): routers only
    mesh_reserved="rows:0,6,11;columns:0",
    mesh_torus=True,  # "The NoCs connect the various tiles to form a 2D torus" (README.md)
    host_bandwidth=31.5e9,  # PCI Express 4.0 x16 (README.md): 16 GT/s x 16 lanes x 128/130 / 8
    **_WORMHOLE_ENERGY,  # cited and derived in runtime_sim.contract.preset_energies
    assumed={
        **_WORMHOLE_ENERGY_ASSUMED,
        "sync_cycles": "no source gives a chip-wide barrier: tt-npe's worst NoC read latency (a "
                       "request and its response across a row and a column), 270 cycles",
        "mesh_reserved": "which Tensix row of the 80 is fused off depends on the die; the last "
                         "(y = 11) is chosen",
    },
    notes="Tenstorrent Wormhole n150: one Wormhole B0, 72 of 80 Tensix on a 10x12 NoC torus, "
          "288 GB/s GDDR6 on 18 DRAM tiles in columns 0 and 5 (n150 specifications, tt-metal "
          "SoC descriptor, tt-isa-documentation, tt-npe)",
)
_TT_BLACKHOLE = dict(
    name="tt-blackhole",
    # The p150 as sold: 120 Tensix of the ASIC's 140 (descriptor functional_workers: x = 1-7,
    # 10-16, y = 2-11; noc_parameters.h NUM_TENSIXES 140). Tenstorrent's specifications first
    # listed 140 for the p150a/p150b (120 for the p100a); firmware 19.5.0 enables 120 on every
    # p150 (BLOCKFP8 774 -> 664 TFLOPS, reported 2026-02-07) and docs.tenstorrent.com's
    # QuietBox 2 guide has "120 ... enabled (two columns are harvested)". Blackhole harvests
    # whole Tensix columns (tt-umd blackhole_coordinate_manager.cpp); which two depends on the
    # die: the last two (x = 15, 16) are reserved here
    num_cores=120,
    sram_bytes_per_core=1499136,  # worker_l1_size of the descriptor ("1.5 MB per Tensix Core", spec)
    # 512-bit (64-byte) flits (noc_parameters.h NOC_PAYLOAD_WIDTH 512) at 1.35 GHz; one flit
    # per cycle per hop is Wormhole's documented rate (tt-npe models 60.9 B/cycle)
    link_bandwidth=64 * 1.35e9,
    clock_hz=1.35e9,  # AI clock "up to 1.35 GHz" (specification; tt-npe ai_clk_ghz = 1.35)
    # Wormhole's fidelity phases (above), assumed for Blackhole's matrix unit; consistent with
    # the figures Tenstorrent gives: 120 x 4,096 x 1.35 GHz = 664 TFLOPS, the BLOCKFP8 figure
    # at one phase; the 372 TFLOPS "16-bit" of Hot Chips 2024 for 140 Tensix is 1,968 FLOP per
    # cycle, two phases' 2,048 (bfloat16) within 4%
    matrix_flops_per_cycle=_TT_FP16_PER_CYCLE,
    matrix_flops_per_cycle_by_dtype={"bfloat16": _TT_BF16_PER_CYCLE, "float32": _TT_FP16_PER_CYCLE},
    vector_flops_per_cycle=64.0,  # assumed (below): Wormhole's SFPMAD rate
    matrix_tile=(8, 16, 16),  # assumed (below): Wormhole's MVMUL shape
    link_latency_s=11 / 1.35e9,  # tt-npe: 11 cycles per hop ("~11.5")
    sync_cycles=329,  # assumed (below): tt-npe's worst NoC read latency, as for Wormhole
    shift_buffer_bytes=16 * KIB,  # NOC_MAX_BURST_SIZE: 256 flits x 64 bytes (noc_parameters.h)
    topology="mesh",
    # 32 GB GDDR6 at 16 GT/s on a 256-bit bus: 512 GB/s (p150 specification); 8 banks, each on
    # 3 tiles: 24 DRAM tiles filling columns 0 and 9 (descriptor dram list, x = 0 and 9, y = 0-11)
    hbm_bandwidth=512e9, hbm_controllers=24, hbm_placement="columns:0,9",
    hbm_bytes_per_chip=32 * GIB,  # the p150's 32 GB of GDDR6 (specification)
    hbm_injection_bandwidth=2 * 54e9,  # tt-npe: a DRAM tile injects 54 GB/s per NoC, 2 NoCs
    mesh_rows=12, mesh_cols=17,  # grid x_size 17, y_size 12 (descriptor)
    # no Tensix in rows 0-1 (PCIe, ARC, router-only, Ethernet) nor column 8 (router-only);
    # columns 15 and 16 hold the harvested Tensix (see num_cores): routers only
    mesh_reserved="rows:0,1;columns:8,15,16",
    mesh_torus=True,  # tt-npe routes both Blackhole NoCs with wrap-around
    host_bandwidth=63.0e9,  # PCI Express 5.0 x16 (specification): 32 GT/s x 16 x 128/130 / 8
    **_BLACKHOLE_ENERGY,  # cited and derived in runtime_sim.contract.preset_energies
    assumed={
        **_BLACKHOLE_ENERGY_ASSUMED,
        "link_bandwidth": "one 64-byte flit per cycle per hop, Wormhole's documented rate",
        "matrix_flops_per_cycle": "float16 at four fidelity phases, Wormhole's rule (no Blackhole "
                                  "FP16 figure found)",
        "matrix_flops_per_cycle_by_dtype": "bfloat16 at two phases and float32 (TF32) at four, "
                                           "Wormhole's rule; bfloat16 matches Hot Chips 2024's "
                                           "16-bit figure within 4%",
        "vector_flops_per_cycle": "Wormhole's SFPMAD rate (32 FP32 lanes)",
        "matrix_tile": "Wormhole's MVMUL shape",
        "sync_cycles": "no source gives a chip-wide barrier: tt-npe's worst NoC read latency, 329 "
                       "cycles",
        "mesh_reserved": "which two Tensix columns are fused off depends on the die; the last two "
                         "(x = 15, 16) are chosen",
    },
    notes="Tenstorrent Blackhole p150: 120 of 140 Tensix on a 17x12 NoC torus, 512 GB/s GDDR6 "
          "on 24 DRAM tiles in columns 0 and 9 (p150 specification, tt-metal SoC descriptor and "
          "NoC header, tt-npe)",
)


def _preset_table() -> dict[str, dict[str, Any]]:
    return {
        "ipu-mk2": dict(_IPU_MK2, name="ipu-mk2", notes="Graphcore IPU Mk2 GC200 (T10 §2.1, Table 3)"),
        # The T10 benchmark problem: a 16x16 systolic array (256 MAC = 512 FLOP per cycle).
        "ipu-mk2-systolic": dict(
            _IPU_MK2, name="ipu-mk2-systolic", matrix_flops_per_cycle=512.0,
            matrix_flops_per_cycle_by_dtype={}, board_power_w=0.0,
            assumed={**_IPU_MK2_ASSUMED, "matrix_flops_per_cycle_by_dtype": (
                "T10's benchmark problem gives one 16x16 array and FP16 tensors; every dtype runs "
                "at its rate"), "board_power_w": (
                "0 (not known): T10's benchmark chip, four times the IPU's matrix rate, was never "
                "built, so no board rates it")},
            notes="IPU Mk2 with a 16x16 systolic array per core (the matmul problem of T10's "
                  "artifact; tvm-icca plan matmul --cost-model t10-bench)",
        ),
        # IPU-POD4: 4 chips, 5,888 cores, 640 GB/s between chips (Elk §5).
        "ipu-pod4": dict(
            _IPU_MK2, **_POD4, name="ipu-pod4", notes="4 x IPU Mk2 (Elk §5)",
        ),
        # Elk's HBM setting: 4 HBM3E modules per chip, 16 TB/s across 4 chips (Elk §6.1).
        "ipu-pod4-hbm": dict(_IPU_MK2, **_POD4) | dict(
            name="ipu-pod4-hbm", hbm_bandwidth=16e12, hbm_controllers=16,
            board_power_w=_HBM_BOARD_POWER_W,
            hbm_bytes_per_chip=_HBM3E_STACKS_PER_CHIP * _HBM3E_STACK_BYTES,
            assumed={**_POD4["assumed"], **_HBM_CAPACITY_ASSUMED},
            notes="IPU-POD4 with 16 TB/s of HBM (Elk §6.1), 4 x 24 GB HBM3E per chip",
        ),
        # Mesh variant: 2D mesh, HBM controllers on the edges (Elk §5, §6.1).
        "ipu-pod4-hbm-mesh": dict(_IPU_MK2, **_POD4) | dict(
            name="ipu-pod4-hbm-mesh", hbm_bandwidth=16e12, hbm_controllers=16,
            hbm_bytes_per_chip=_HBM3E_STACKS_PER_CHIP * _HBM3E_STACK_BYTES,
            link_latency_s=_LINK_LATENCY_CYCLES / _MESH_DIAMETER_HOPS / _CLOCK_HZ,
            board_power_w=_HBM_BOARD_POWER_W,
            link_pj_per_byte=_IPU_MESH_ENERGY["link_pj_per_byte"],  # per hop: one tile pitch
            assumed={**_POD4["assumed"], **_HBM_CAPACITY_ASSUMED, **_ELK_MESH_ASSUMED,
                     "link_pj_per_byte": _IPU_MESH_ENERGY_ASSUMED["link_pj_per_byte"]},
            topology="mesh", notes="IPU-POD4 with HBM on a 2D mesh (Elk §5, §6.1)",
        ),
        "tt-wormhole": dict(_TT_WORMHOLE),
        "tt-blackhole": dict(_TT_BLACKHOLE),
    }


PRESET_NAMES = tuple(_preset_table())


def preset(preset_name: str, **overrides: Any) -> HardwareSpec:
    """Build a named preset (``ipu-mk2``, ``ipu-pod4``, ...), optionally overriding fields.

    Example: ``preset("ipu-mk2", sram_bytes_per_core=256 * 1024)``.

    Parameters
    ----------
    preset_name : str
        One of :data:`PRESET_NAMES`, case-insensitive (``IPU-Mk2`` is ``ipu-mk2``).
    **overrides : Any
        :class:`HardwareSpec` fields to replace, validated like the rest.

    Returns
    -------
    HardwareSpec
        The preset's spec (its ``notes`` cite where the numbers come from).

    Raises
    ------
    InvalidHardwareSpecError
        An unknown name (the message suggests the closest preset and lists them all), an
        unknown field or an impossible value.
    """
    table = _preset_table()
    key = preset_name.strip().lower() if isinstance(preset_name, str) else None
    if key not in table:
        close = difflib.get_close_matches(key or "", list(table), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise InvalidHardwareSpecError(
            f"unknown hardware preset '{preset_name}'; {hint}known presets: {', '.join(table)}"
        )
    return HardwareSpec.from_dict(override_fields(table[key], overrides))


def small_chip(num_cores: int = 16, sram_bytes_per_core: int = 64 * KIB, **overrides: Any) -> HardwareSpec:
    """An IPU-like chip with few cores, for tests and quick experiments.

    Parameters
    ----------
    num_cores : int
        Cores of the chip; the spec is named ``icca-<num_cores>``.
    sram_bytes_per_core : int
        Private SRAM of each core.
    **overrides : Any
        Further :class:`HardwareSpec` fields to replace.

    Returns
    -------
    HardwareSpec
        The ``ipu-mk2`` preset (clock, links, compute per core) with these fields, and one
        matrix rate for every dtype (its float16 rate: no ``matrix_flops_per_cycle_by_dtype``
        unless given), so that a test's closed form does not depend on its operands' dtype.

    Raises
    ------
    InvalidHardwareSpecError
        An impossible value or unknown field.
    """
    fields = {"name": f"icca-{num_cores}", "num_cores": num_cores,
              "sram_bytes_per_core": sram_bytes_per_core, "matrix_flops_per_cycle_by_dtype": {},
              **overrides}
    return preset("ipu-mk2", **fields)


DEFAULT_PRESET = "ipu-mk2"
