"""Checks that the API reference documents every public name of :mod:`tvm_icca`.

A name added to ``tvm_icca.__all__`` (or ``tvm_icca.compile``, public but kept out of
``__all__``) without an autodoc entry in ``api.rst`` is a warning, so the ``-W`` build fails
instead of publishing a reference with a hole.
"""

from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: Public names that ``__all__`` leaves out on purpose (``tvm_icca/__init__.py`` says why).
_PUBLIC_OUTSIDE_ALL = ("compile",)


def check(app: Sphinx, env: BuildEnvironment) -> None:
    import tvm_icca

    documented = set(env.get_domain("py").objects)
    public = [*tvm_icca.__all__, *_PUBLIC_OUTSIDE_ALL]
    missing = [n for n in public if f"tvm_icca.{n}" not in documented]
    if missing:
        logger.warning("public names of tvm_icca missing from the API reference (api.rst): %s",
                       ", ".join(missing))


def setup(app: Sphinx) -> dict:
    app.connect("env-check-consistency", check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
