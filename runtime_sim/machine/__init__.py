"""The machine model: cost formulas the compiler and the timing simulator must share.

* :mod:`.links` -- one transfer over a link, replica-reduction and gather schedules (closed forms);
* :mod:`.topology` -- what a phase of concurrent transfers costs on the all-to-all exchange or
  a routed mesh, with HBM controllers and host links as nodes (Elk §5): the model, and the
  network of a chip (:func:`~.topology.make_topology`). One job a module: :mod:`.phase_cost`
  (a phase's cost, multicast patterns), :mod:`.topology_base` (nodes, HBM and host flows),
  :mod:`.all_to_all` (the exchange), :mod:`.mesh_topology` (the mesh's phase cost),
  :mod:`.mesh_routing` (XY routes and multicast trees), :mod:`.mesh_io` (edge ports and
  controllers on the mesh);
* :mod:`.stream_timing` -- when the instructions of a preload/execute stream run (Elk §4.5);
* :mod:`.preload_delivery` -- how a preload reaches its cores (off-chip leg + distribution).

The compiler's cost models (:mod:`tvm_icca.plan_search`, :mod:`tvm_icca.model_pass.tradeoff_tables`) and
the timing simulator (:mod:`runtime_sim.timing`) price the same things with these functions, so
they cannot disagree. Imports only :mod:`runtime_sim.contract`. Start at :mod:`.topology`.
"""
