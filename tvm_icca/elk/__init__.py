"""Elk (MICRO'25) planning algorithms on per-operator trade-off tables; imports nothing from TVM.

Modules: :mod:`.tradeoffs` (input tables), :mod:`.model` (the memory/time model),
:mod:`.inductive` (§4.2), :mod:`.allocation` (§4.3), :mod:`.reorder` (§4.4), :mod:`.designs` (§6.1).
"""
