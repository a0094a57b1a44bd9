"""Entry point of the ``tvm.backends`` group (declared in setup.py).

``import tvm`` calls :func:`autoload` at the end of ``tvm/__init__.py``; importing the package
registers the ``icca`` target tags, the pipeline hook, the ``icca.*`` patterns, the codegen
``relax.ext.icca`` and the device entry ``icca.device.run``. So a plain ``import tvm`` makes
``Target("icca")`` resolve and lets an exported ICCA library be loaded and run.
"""

import importlib


def autoload() -> None:
    """Import :mod:`tvm_icca` for its registrations.

    When ``import tvm_icca`` itself triggered ``import tvm`` (and so this hook), the package is
    still initializing and this import returns at once; the package finishes its
    registrations on its own. Safe to call more than once.
    """
    importlib.import_module("tvm_icca")
