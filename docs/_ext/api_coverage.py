"""Checks that the API reference and ``tvm_icca.__all__`` list the same names.

A name added to ``tvm_icca.__all__`` without an autodoc entry in ``api.rst`` is a warning, and
so is a ``tvm_icca.<name>`` the reference documents that ``__all__`` leaves out (a star import
and ``help(tvm_icca)`` would miss it), so the ``-W`` build fails instead of publishing a
reference that disagrees with the package.
"""

from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging

logger = logging.getLogger(__name__)


def check(app: Sphinx, env: BuildEnvironment) -> None:
    import tvm_icca

    objects = env.get_domain("py").objects
    documented = {name.split(".", 1)[1] for name, entry in objects.items()
                  if name.count(".") == 1 and name.startswith("tvm_icca.")
                  and entry.objtype != "module"}
    public = set(tvm_icca.__all__)
    if public - documented:
        logger.warning("public names of tvm_icca missing from the API reference (api.rst): %s",
                       ", ".join(sorted(public - documented)))
    if documented - public:
        logger.warning("names the API reference (api.rst) documents that tvm_icca.__all__ "
                       "leaves out: %s", ", ".join(sorted(documented - public)))


def setup(app: Sphinx) -> dict:
    app.connect("env-check-consistency", check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
