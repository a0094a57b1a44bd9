"""Subcommands of ``tvm-icca`` (one module each, see :mod:`tvm_icca.cli`)."""
