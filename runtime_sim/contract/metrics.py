"""The metric glossary: every number a run reports, with one name, one unit and one meaning.

The functional device's counters (``last_run_stats()``), the timing simulator's report
(``TimingReport.to_dict``, ``tvm-icca simulate --json``), its per-operator rows (the same
names, for one operator) and the trace's ``args`` all use these names; a test checks that
every key they emit is defined here, so a metric cannot quietly get a second spelling or a
second meaning. The documentation's glossary page is generated from :data:`METRICS`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DSE_METRICS", "METRICS", "Metric", "metric"]


@dataclass(frozen=True)
class Metric:
    """One reported quantity: its unit (``s``, ``bytes``, ``ratio``, ``count``, ...), what it
    means, and who reports it (``device``: the functional device's counters; ``timing``: the
    timing simulator; ``both``: each, with the same meaning; ``dse``: a design-space
    exploration's results rows; ``gpu``: the GPU reference, :mod:`runtime_sim.gpu`)."""

    unit: str
    meaning: str
    source: str = "timing"


def _m(unit: str, meaning: str, source: str = "timing") -> Metric:
    return Metric(unit, meaning, source)


#: Name -> definition. Times are seconds of simulated chip time unless the meaning says
#: otherwise; byte counts are per run (one model invocation), summed over cores.
METRICS: dict[str, Metric] = {
    # -- what was run -------------------------------------------------------------------
    "hardware": _m("name", "the chip (hardware preset or spec name) the run was timed on"),
    "assumed_fields": _m("mapping", "field -> why, for the fields of the chip that no cited "
                         "document gives (HardwareSpec.assumed); empty when every field is "
                         "sourced"),
    "topology": _m("name", "the interconnect topology, with the chip count on multi-chip systems"),
    "design": _m("name", "the Elk preload design of the program stream (Elk §6.1); empty "
                 "without a preload schedule"),
    "num_ops": _m("count", "device operators executed (in a row: of that region or kind)"),
    "num_regions": _m("count", "region calls (device programs) executed"),
    "regions_executed": _m("count", "region calls the functional device executed", "device"),
    "cores_used": _m("count", "most cores any operator of the run used", "device"),
    "steps": _m("count", "compute-shift steps (bulk-synchronous rounds: compute, then shift), "
                "T10 §3", "both"),
    "flops": _m("FLOP", "floating-point operations of the operators (a multiply-add is two)"),
    "tuned_ops": _m("names", "operators whose plan came from tuning records", "device"),
    # -- time ------------------------------------------------------------------------------
    "total_s": _m("s", "makespan of the run on the chip: first load to last result returned"),
    "simulated_s": _m("s", "``total_s`` of the timing simulator run over exactly the programs "
                      "the functional device executed; None when nothing ran on the chip",
                      "both"),
    "compute_s": _m("s", "compute-array time of the operators: sub-tasks, per-step "
                    "synchronization, reduction adds, epilogues"),
    "transfer_s": _m("s", "interconnect time inside operator execution: re-layout, shifts, "
                     "replica reduction, distribution"),
    "idle_s": _m("s", "time the compute array waits (``total_s - compute_s - transfer_s``)"),
    "stall_s": _m("s", "time lost to interconnect contention beyond the uncontended time"),
    "hbm_s": _m("s", "time the HBM controllers are busy loading"),
    "overlap_s": _m("s", "time HBM loading runs while an operator executes"),
    "host_s": _m("s", "time the host links are busy, both directions"),
    "simulation_s": _m("s (wall clock)", "host seconds the timing simulation itself took"),
    "preload_s": _m("s", "time some off-chip load is in progress (Elk Fig. 18 'preload')"),
    "preload_only_s": _m("s", "time loads run while nothing executes (non-overlapped preload)"),
    "execute_only_s": _m("s", "time an operator executes while nothing loads"),
    "preload_overlap_s": _m("s", "time loading and execution run together"),
    "interconnect_stall_s": _m("s", "compute-array wait caused by loads sharing links with "
                               "executions (Elk §6.2 'interconnect'; part of ``stall_s``)"),
    "preload_stall_s": _m("s", "total delay of the loads from sharing links with executions, "
                          "exposed or not"),
    # -- bytes -------------------------------------------------------------------------------
    "hbm_bytes": _m("bytes", "distinct bytes of the distinct HBM tensors read (one copy each; "
                    "an embedding lookup reads one table row per id, not its table: "
                    "runtime_sim.contract.hbm_reads)", "both"),
    "hbm_delivered_bytes": _m("bytes", "bytes the HBM controllers read: a copy per chip that "
                              "needs a tensor"),
    "host_in_bytes": _m("bytes", "bytes sent host -> chip over the host links (each tensor "
                        "once per chip that needs it)"),
    "host_out_bytes": _m("bytes", "bytes returned chip -> host over the host links"),
    "host_placed_bytes": _m("bytes", "bytes the functional device wrote into cores' SRAM from "
                            "host-side copies (inputs, host or HBM model state), once per "
                            "replica: a tensor on 4 cores counts 4 times", "device"),
    "input_bytes": _m("bytes", "bytes of region inputs handed to the device", "device"),
    "output_bytes": _m("bytes", "bytes of region outputs handed back by the device", "device"),
    "shift_bytes": _m("bytes", "bytes moved by rotations and replica reductions (T10 §3.2)",
                      "both"),
    "rotation_bytes": _m("bytes", "bytes moved by rotations alone", "both"),
    "reduction_bytes": _m("bytes", "bytes moved by replica reductions alone", "both"),
    "relayout_bytes": _m("bytes", "bytes cores receive from other cores placing on-chip "
                         "inputs into an operator's layout (T10 §4.3.2 re-layout): "
                         "intermediates, other regions' results and resident model state "
                         "from its idle placement; what a core already holds does not count; "
                         "a gathered input counts its expectation under uniform ids "
                         "(runtime_sim.contract.resting)", "both"),
    "inter_chip_bytes": _m("bytes", "bytes that crossed a chip-to-chip link"),
    "fetch_bytes": _m("bytes", "VGM operators: tile bytes loaded from home slices, epilogue "
                      "inputs included (T10 §2.2 baseline); a box the core already holds "
                      "(VgmPlan.reuse) is not loaded again", "device"),
    "store_bytes": _m("bytes", "VGM operators: output tile bytes stored to home slices",
                      "device"),
    "preloaded_bytes": _m("bytes", "bytes preloads wrote into preload space (Elk §4.5); "
                          "without a stream, the bytes loads delivered to cores", "both"),
    "distributed_bytes": _m("bytes", "bytes distribution phases moved between cores "
                            "(preload state -> execute state, Elk §4.2)", "both"),
    # -- memory ----------------------------------------------------------------------------
    "peak_sram_bytes_per_core": _m("bytes", "peak SRAM a core held: execution space (shift "
                                   "buffer and the run's resident model state included) plus "
                                   "preload space, held from the preload's issue in the stream "
                                   "(Elk §4.2); the ideal design: execution space alone",
                                   "both"),
    "peak_sram_with_prefetch_bytes_per_core": _m("bytes", "peak SRAM a core held counting the "
                                                 "next operator's prefetched inputs"),
    "peak_preload_bytes_per_core": _m("bytes", "most preload space a core held, each preload's "
                                      "from its issue in the stream to its execute", "both"),
    "vgm_bytes_per_core": _m("bytes", "VGM runs: the per-core region holding every tensor"),
    "fits": _m("bool", "VGM runs: whether the VGM region plus the largest working set fit SRAM"),
    # -- counts of the preload stream ------------------------------------------------------
    "preloads": _m("count", "preload instructions of the stream (Elk §4.5)", "both"),
    "executes": _m("count", "execute instructions of the stream (one per operator); 0 "
                   "without a stream (``num_ops`` counts operators)", "both"),
    # -- tables (lists of rows whose keys are defined below or above) ----------------------
    "per_op": _m("rows", "one row per operator executed, in start order"),
    "simulated_ops": _m("rows", "``per_op`` of the timing run behind ``simulated_s``", "both"),
    "regions": _m("rows", "one row per region call", "both"),
    "op_kinds": _m("rows", "per operator kind: ops, time_s, lower_bound_s and their ratio"),
    "slow_kinds": _m("rows", "the ``op_kinds`` rows over 10x their lower bound"),
    "slow_ops": _m("rows", "operators over 10x their lower bound"),
    # -- the command line's --json (compilation facts beside the report) --------------------
    "model": _m("name", "the model that was compiled (zoo workload or ONNX file)"),
    "config": _m("mapping", "the zoo workload's configuration (batch, context, layers, ...)"),
    "compile": _m("mapping", "facts about the compilation (regions, ops, inputs per source, "
                  "where the weights live)"),
    "compile_s": _m("s (wall clock)", "host seconds the compilation took"),
    "simulate_s": _m("s (wall clock)", "host seconds the simulation took, trace included"),
    # -- utilizations (ratios in [0, 1]) ----------------------------------------------------
    "flops_utilization": _m("ratio", "``flops`` / (``total_s`` x peak matrix FLOP/s)"),
    "achieved_flops": _m("FLOP/s", "``flops`` / ``total_s``"),
    "hbm_utilization": _m("ratio", "``hbm_bytes`` / (``total_s`` x HBM bandwidth)"),
    "interconnect_utilization": _m("ratio", "share of ``total_s`` the links hold bandwidth: "
                                   "the measure of the union of busy time (executions' "
                                   "transfers, loads' and returns' deliveries, each spread "
                                   "over its interval, bytes over bandwidth, hop latency "
                                   "excluded), an instant counted once per interconnect, over "
                                   "``total_s`` (over 2 x ``total_s`` for the ideal design's "
                                   "two interconnects); in [0, 1] by construction "
                                   "(runtime_sim.timing.floors.busy_fraction)"),
    "link_bandwidth_utilization": _m("ratio", "bytes cores received over links that cost time "
                                     "(``link_bytes`` without the ideal design's free "
                                     "distributions) / (``total_s`` x the cores' aggregate "
                                     "receive rate x interconnects): every core receiving on "
                                     "every link it has (one port on the all-to-all exchange; "
                                     "up to 4 neighbour links and its edge ports on a mesh, "
                                     "plus the inter-chip cap); at most 1 since every phase "
                                     "lasts at least its busiest port's bytes over bandwidth"),
    # -- what bounds the off-chip loads (runtime_sim.timing.work.Load.bound_by) --------------
    "load_bound_by": _m("name", "the cut that bounds the off-chip loads (in a row: that "
                        "operator's longest load): hbm or host (the source's bandwidth), edge "
                        "ports, controller ports (links out of an HBM controller's NoC node), "
                        "injection (a controller's injection cap), links (a mesh link, e.g. "
                        "the bisection), ports (all-to-all core ports) or inter-chip; in a "
                        "run: the cut with the most load time"),
    "load_bound_s": _m("mapping", "per cut of ``load_bound_by``, the seconds of load time it "
                       "bounds"),
    # -- floors: what no schedule beats, one resource at a time (runtime_sim.timing.floors.
    #    resource_floors); a run is bound by the largest --------------------------------------
    "link_bytes": _m("bytes", "bytes cores received over their links: shifts, re-layouts, "
                     "distributions and every load's delivery to its cores"),
    "hbm_floor_s": _m("s", "``hbm_bytes`` / HBM bandwidth (0 without HBM)"),
    "compute_floor_s": _m("s", "``flops`` / the chip's peak matrix FLOP/s (every core)"),
    "compute_units_floor_s": _m("s", "sum over operators of its ``flops`` / the peak FLOP/s of "
                                "the unit that runs it (matrix or vector, every core): at "
                                "least ``compute_floor_s``"),
    "host_floor_s": _m("s", "(``host_in_bytes`` + ``host_out_bytes``) / (host bandwidth x "
                       "chips)"),
    "interconnect_floor_s": _m("s", "bytes cores receive over links (``link_bytes``; on the "
                               "ideal design the larger of executions' and loads', "
                               "distributions excluded) / the cores' aggregate receive rate: "
                               "cores x link bandwidth on the all-to-all exchange (one port "
                               "each); on a mesh every link into a core, every edge port on a "
                               "core's router and the inter-chip cap"),
    "edge_ports_floor_s": _m("s", "mesh with HBM on its edges: ``hbm_delivered_bytes`` / (the "
                             "HBM controllers' edge ports, 2 x (rows + cols) per chip, x their "
                             "bandwidth): every byte read enters the mesh through one; 0 "
                             "otherwise"),
    "controller_ports_floor_s": _m("s", "mesh with HBM controllers inside the grid: "
                                   "``hbm_delivered_bytes`` / (the links leaving the "
                                   "controllers' nodes, up to 4 each, x link bandwidth); 0 "
                                   "otherwise"),
    "injection_floor_s": _m("s", "``hbm_delivered_bytes`` / (controllers x "
                            "``hbm_injection_bandwidth``); 0 without an injection cap"),
    "bisection_floor_s": _m("s", "mesh: the most bytes any direction carries across the "
                            "middle cut of the chips' grids (between the column halves or the "
                            "row halves, XY routing, every transfer and load delivery) / the "
                            "links crossing it that way x link bandwidth; 0 on all-to-all"),
    "inter_chip_floor_s": _m("s", "bytes that crossed chips (every phase, loads included) / "
                             "the inter-chip bandwidth; 0 on one chip"),
    "floor_s": _m("s", "the largest of the ``*_floor_s``: no schedule of the run's programs "
                  "beats it, ``total_s >= floor_s``"),
    "run_bound_by": _m("name", "the resource whose floor is ``floor_s``: compute, compute "
                       "units, hbm, host, interconnect, edge ports, controller ports, "
                       "injection, bisection or inter-chip (the floor's name without "
                       "``_floor_s``); run-level, unlike an operator's ``bound_by``"),
    # -- energy (runtime_sim.contract.energy: per-action energies of the chip x the actions
    #    counted, plus static power over total_s) ---------------------------------------------
    "matrix_flops": _m("FLOP", "FLOPs the matrix units ran (matmul and convolution sub-tasks)",
                       "both"),
    "vector_flops": _m("FLOP", "FLOPs the vector units ran (element-wise work, reductions, "
                       "epilogues, reduction adds)", "both"),
    "sram_read_bytes": _m("bytes", "bytes read from cores' SRAM: sub-task operands and the "
                          "sending end of every transfer", "both"),
    "sram_write_bytes": _m("bytes", "bytes written to cores' SRAM: sub-task results and the "
                           "receiving end of every transfer", "both"),
    "link_byte_hops": _m("byte-hops", "bytes over the on-chip interconnect times the hops each "
                         "took (a mesh's routers crossed); on an all-to-all exchange, one per "
                         "byte", "both"),
    "energy_j": _m("J", "energy of the run: per-action energies times the actions counted "
                   "plus static power over ``total_s``; None when the chip has no energy "
                   "model"),
    "energy_breakdown_j": _m("mapping", "``energy_j`` by component: matrix, vector, sram, "
                             "link, inter_chip, hbm, host, static"),
    "average_power_w": _m("W", "``energy_j`` / ``total_s``"),
    "board_power_w": _m("W", "the system's rated board power (per chip x chips), 0 when not "
                        "known; an ``average_power_w`` above it is reported with a warning"),
    # -- the GPU reference (runtime_sim.gpu.roofline: estimates from peak rates and HBM
    #    traffic, never measurements) ---------------------------------------------------------
    "estimate_kind": _m("text", "what a GPU reference's times are: a roofline estimate and "
                        "bound, not a measurement", "gpu"),
    "roofline_s": _m("s", "GPU reference: the sum over operators of max(FLOPs at the unit's "
                     "peak, HBM traffic at the peak HBM bandwidth), no launch overhead: a "
                     "bound no kernel sequence with that traffic beats (in a row: that "
                     "operator's); ``total_s`` is then the estimate at the GPU's efficiencies "
                     "plus launches", "gpu"),
    "launch_overhead_s": _m("s", "GPU reference: the per-kernel launch overhead times the "
                            "operators, part of ``total_s``", "gpu"),
    "hbm_traffic_bytes": _m("bytes", "GPU reference: bytes moved between HBM and the GPU: "
                            "each input read and output written once, less inputs read from "
                            "L2 (the previous operator's output when it fits), plus "
                            "blocked-GEMM re-reads", "gpu"),
    "reread_bytes": _m("bytes", "GPU reference: the part of ``hbm_traffic_bytes`` a GEMM "
                       "larger than L2 reads again (blocked in L2-sized tiles)", "gpu"),
    "partition_hardware": _m("name", "GPU reference: the ICCA chip whose compiler partitioned "
                             "the model into the operators the GPU was priced on", "gpu"),
    "hbm_bound_ops": _m("count", "GPU reference: operators whose HBM time exceeds their "
                        "compute time", "gpu"),
    "remainder": _m("mapping", "when ``total_s`` > 1.5 x ``floor_s`` (else empty): where the "
                    "run's time goes, seconds per part, adding up to ``total_s``: compute at "
                    "peak, compute below peak, sync, link transfer, hop latency, load wait, "
                    "contention wait, host return (runtime_sim.timing.floors.time_parts); a "
                    "part's share is seconds / ``total_s``"),
}

#: The rows of a design-space exploration's results file (``tvm-icca dse``,
#: :mod:`tvm_icca.dse.results`) use the run-level names above for what the timing report
#: gives, these for the rest, and the names listed in their ``inputs`` for the point's inputs
#: (:class:`~runtime_sim.contract.hardware.HardwareSpec` fields, workload arguments).
DSE_METRICS: dict[str, Metric] = {
    "key": _m("hex", "SHA-256 of the point's inputs (the whole chip, the workload and its "
              "arguments, design, state, execution): one row per key", "dse"),
    "spec": _m("name", "the study (the spec's ``name``)", "dse"),
    "inputs": _m("names", "the row's input columns: the chip's fixed and swept fields, the "
                 "workload and its arguments, design, state, execution", "dse"),
    "workload": _m("name", "the workload: a zoo name or an ONNX file", "dse"),
    "tokens_per_run": _m("count", "tokens (LLM decode: the batch; prefill: batch x prompt) "
                         "or samples (other models: the batch) one run of the workload "
                         "processes", "dse"),
    "time_per_token_s": _m("s", "``total_s`` / ``tokens_per_run``", "dse"),
    "energy_per_token_j": _m("J", "``energy_j`` / the tokens (or samples) one run "
                             "processes", "dse"),
    # the report's table (tvm_icca.dse.columns.derived_rows: CSV and Parquet columns)
    "system_sram_bytes": _m("bytes", "the report's cost proxy: SRAM of the whole system, "
                            "``sram_bytes_per_core`` x ``num_cores``", "dse"),
    "system_hbm_bytes": _m("bytes", "HBM capacity of the whole system, ``hbm_bytes_per_chip`` "
                           "x ``num_chips``; None where the chip does not model it", "dse"),
    "workload_instance": _m("text", "the workload and its arguments as canonical JSON: the "
                            "points whose per-token numbers compare", "dse"),
    "pareto": _m("bool", "on the Pareto front of ``time_per_token_s`` against "
                 "``energy_per_token_j`` among the ``ok`` rows of its workload instance (no "
                 "point at least as good in both and better in one); False without an energy",
                 "dse"),
    "pareto_sram": _m("bool", "on the Pareto front of ``time_per_token_s`` against "
                      "``system_sram_bytes`` among the ``ok`` rows of its workload instance",
                      "dse"),
    "state": _m("name", "where weights and KV caches live (``auto``: decided by the compiler)",
                "dse"),
    "execution": _m("name", "the execution model: ``t10`` (compute-shift) or ``vgm``", "dse"),
    "status": _m("name", "``ok``; ``does_not_fit`` (no plan fits the chip's SRAM); ``failed`` "
                 "(another error): the point's timing columns are then absent", "dse"),
    "reason": _m("text", "why the point did not fit or failed (the error's type and message)",
                 "dse"),
    "elk_planning_s": _m("s (wall clock)", "host seconds of the Elk pass (tables and schedule), "
                         "part of ``compile_s``", "dse"),
    "plan_cache_hits": _m("count", "operator plans the worker's plan cache answered", "dse"),
    "plan_cache_misses": _m("count", "operator plans the worker's plan cache did not hold "
                            "planned for this point's chip (found in the search memo or on disk "
                            "and mapped again, or searched: ``plan_searches``)", "dse"),
    "plan_searches": _m("count", "operator plan searches the point ran itself: those no plan "
                        "cache answered, in memory or on disk (a point after the first of its "
                        "plan group runs few or none)", "dse"),
    "tvm_icca_version": _m("version", "tvm_icca's version that computed the row", "dse"),
    "tvm_version": _m("version", "Apache TVM's version that computed the row", "dse"),
    "host": _m("name", "the machine that computed the row", "dse"),
    "timestamp": _m("ISO 8601", "when the row was computed (UTC)", "dse"),
    # provenance (issue 38): what the row was computed from, by which code, at what cost
    "point_id": _m("hex", "SHA-256 of the point's place in its study (the spec's name, the "
                   "point's own chip overrides, the workload, design, state, execution), "
                   "unchanged when a preset changes: a later row of the same ``point_id`` "
                   "supersedes it", "dse"),
    "chip_digest": _m("hex", "SHA-256 of the resolved chip's fields (its descriptive ones, "
                      "``notes``, left out); the whole chip is in the results' provenance file "
                      "(``<stem>.provenance.jsonl``)", "dse"),
    "supersedes": _m("hex", "the key of the row this one replaces: the same point computed "
                     "earlier on a chip that has changed since (a resumed sweep computed it "
                     "again)", "dse"),
    "workload_args": _m("mapping", "the workload's arguments as ``get_workload`` (or the ONNX "
                        "loader's ``shape``) took them", "dse"),
    "wall_s": _m("s (wall clock)", "host seconds the worker spent on the point: loading the "
                 "workload, compiling, simulating (``compile_s`` + ``simulate_s`` and the "
                 "rest)", "dse"),
    "cpu_s": _m("s (CPU)", "CPU seconds of the worker process over the same span as "
                "``wall_s`` (below it when the machine is shared)", "dse"),
    "commit": _m("hex", "the git commit of the code that computed the row (``unknown`` outside "
                 "a checkout)", "dse"),
    "dirty": _m("bool", "tracked source files had uncommitted changes when the worker started "
                "(null: unknown, outside a checkout)", "dse"),
    "python_version": _m("version", "the Python that computed the row", "dse"),
}

#: Per-operator rows (``per_op`` of the report, ``simulated_ops``) use the run-level names
#: above for one operator, plus these.
OP_METRICS: dict[str, Metric] = {
    "name": _m("name", "the operator's generated key: region symbol plus ``.opN``"),
    "label": _m("text", "the operator in the user's words: kind and output shape"),
    "region": _m("name", "the region (device program) the operator belongs to"),
    "kind": _m("name", "the operator kind (``runtime_sim.contract.op_kinds``)"),
    "cores": _m("count", "cores the operator's plan uses"),
    "chips": _m("indices", "the chips its cores are on"),
    "start_s": _m("s", "when its execution on the compute array starts"),
    "end_s": _m("s", "when its execution ends"),
    "wait_s": _m("s", "compute-array idle time before it, waiting for its loads"),
    "load_start_s": _m("s", "when its off-chip loads start"),
    "load_end_s": _m("s", "when its off-chip loads end"),
    "hbm_start_s": _m("s", "when its HBM load starts"),
    "host_start_s": _m("s", "when its host-link load starts"),
    "host_out_s": _m("s", "duration of returning its outputs to the host"),
    "host_out_start_s": _m("s", "when that return starts"),
    "prefetched": _m("bool", "its load started while the previous operator executed"),
    "sram_bytes_per_core": _m("bytes", "peak SRAM on a core while it runs: its execution "
                              "space, shift buffer and resident model state included, other "
                              "operators' preload space excluded"),
    "relayout_s": _m("s", "its re-layout phase"),
    "link_busy_s": _m("s", "how long its transfers hold link bandwidth (``transfer_s`` "
                      "without hop latencies)"),
    "steps_s": _m("s", "all its steps: sub-tasks, syncs and shifts"),
    "shift_s": _m("s", "its shift phases"),
    "reduction_s": _m("s", "its replica reduction: transfers and adds"),
    "epilogue_s": _m("s", "its fused epilogue"),
    "distribute_s": _m("s", "its distribution phase (preload state -> execute state)"),
    "distinct_shift_phases": _m("count", "distinct shift patterns among its steps"),
    "estimated": _m("bool", "a sampled estimate entered its shift or re-layout cost"),
    "lower_bound_s": _m("s", "what no plan can avoid on this system: the largest of its FLOPs "
                        "at peak, its HBM bytes at full bandwidth, its host bytes, one sync"),
    "bound_by": _m("name", "which term gives the operator's ``lower_bound_s``: flops, hbm, "
                   "host or sync (the run's resource is ``run_bound_by``)"),
    "preloaded": _m("bool", "the preload stream preloads it"),
    "preload_start_s": _m("s", "when its preload starts"),
    "preload_end_s": _m("s", "when its preload ends"),
    "preload_space_bytes_per_core": _m("bytes", "preload space it holds on its busiest core"),
    "time_s": _m("s", "time on the compute array (``wait_s`` + its execution)"),
    "actions": _m("counts", "its actions that cost energy (``runtime_sim.contract.energy"
                  ".ActionCounts``, matrix FLOPs by dtype); rows give them as "
                  "``matrix_flops``, ``vector_flops``, ``sram_read_bytes``, "
                  "``sram_write_bytes`` and ``link_byte_hops``"),
    "ops": _m("rows", "the device's ``regions`` rows: that region's per-operator counters",
              "device"),
    "ratio": _m("ratio", "``time_s`` / ``lower_bound_s`` (1 is the best any plan can do)"),
    # load-compute-store (VGM) operators, T10 §2.2
    "uncontended_transfer_s": _m("s", "VGM: its transfer if no home core were a hot spot"),
    "bytes_moved": _m("bytes", "VGM: tile bytes it fetched and stored"),
    "waves": _m("count", "VGM: rounds of tiles over the cores"),
    "tiles": _m("count", "VGM: output tiles"),
}


def metric(name: str) -> Metric:
    """The definition of ``name`` (run-level first, then per-operator, then design-space
    exploration rows); KeyError if none."""
    if name in METRICS:
        return METRICS[name]
    if name in OP_METRICS:
        return OP_METRICS[name]
    return DSE_METRICS[name]
