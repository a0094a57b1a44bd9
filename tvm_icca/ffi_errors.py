"""ICCA errors across TVM's C++ frames: an exception raised in Python keeps its class.

``tvm_ffi`` turns a Python exception raised inside a packed function into an FFI error of a
*kind* (looked up by the exception's exact type, ``RuntimeError`` if unregistered) and a message,
and turns it back into a Python exception when it reaches Python again, by calling the class
registered for that kind with the message. Measured with apache-tvm-ffi 0.1.14 and the Relax VM:
an unregistered ``IccaError`` reaches the caller of ``vm["main"](...)`` as a plain
``RuntimeError`` with the same message; a registered one keeps its class. So every
:class:`~runtime_sim.contract.errors.IccaError` type is registered here (see :func:`raise_through_ffi`), and
the exception object raised by the device is handed back as is -- attributes such as
``SramOverflowError.budget_bytes`` included -- when it resurfaces on the same thread.

Every compiler pass that TVM calls from C++ (``Sequential``, ``RunCodegen``), the device entry
and the input check re-raise through :func:`raise_through_ffi`.
"""

from __future__ import annotations

import threading

import tvm_ffi

from runtime_sim.contract.errors import ERROR_TYPES, IccaError

__all__ = ["raise_through_ffi", "register_error_types"]

_PENDING = threading.local()  # the last IccaError raised into C++ on this thread
_REGISTERED: set[type] = set()


def _reviver(cls: type[IccaError]) -> type:
    """A stand-in class that tvm_ffi calls with the message to rebuild an error of ``cls``.

    tvm_ffi requires a *type* there and calls it with the message; ``__new__`` returning an
    instance of ``cls`` (not of the stand-in) skips ``__init__``. It returns the very exception
    object that was raised when it is the pending one of this thread; otherwise (e.g. raised in
    another thread) a new ``cls`` instance carrying the message, made without ``cls.__init__``
    because some classes (:class:`~runtime_sim.contract.errors.SramOverflowError`) do not take a single
    message.
    """

    def __new__(_stand_in: type, message: str) -> BaseException:
        pending = getattr(_PENDING, "error", None)
        if pending is not None and type(pending) is cls and str(pending) == message:
            # Not cleared: a pass written in Python re-crosses C++ and revives it again.
            # tvm_ffi appends the frames recorded in the FFI error, which already include
            # this object's own traceback: drop it so frames are not listed twice.
            return pending.with_traceback(None)
        err = cls.__new__(cls)
        Exception.__init__(err, message)
        return err

    return type(f"_Revive{cls.__name__}", (), {"__new__": __new__, "__module__": __name__})


def _register(cls: type[IccaError]) -> None:
    if cls in _REGISTERED:
        return
    kind = f"{cls.__module__}.{cls.__qualname__}"
    # Python -> FFI: the kind of an exception is looked up by its exact type.
    tvm_ffi.register_error(kind, cls)
    # FFI -> Python: the registered callable gets the message (overrides the line above).
    tvm_ffi.register_error(kind, _reviver(cls))
    _REGISTERED.add(cls)


def register_error_types() -> None:
    """Register every error class of :mod:`runtime_sim.contract.errors` with tvm_ffi (idempotent)."""
    for cls in ERROR_TYPES.values():
        _register(cls)


def raise_through_ffi(err: IccaError) -> None:
    """Prepare ``err`` to cross a C++ frame (VM, RunCodegen) and come out unchanged.

    Call it in an ``except`` block right before re-raising; it registers the error's class
    (subclasses defined elsewhere, too) and remembers the object for :func:`_reviver`.
    """
    _register(type(err))
    _PENDING.error = err
