"""Exceptions of the qc package: one class per qc_status_t (qc.h).

Pure Python, imported by the extension ``qc._qc`` to raise them: a failing C
call becomes ``error_class(status)(status, qc_last_error())``.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

# Values, names and descriptions generated from qc.h (QC_STATUS_MAP) by
# tools/gen_bindings.py; a status qc.h gains without a class below maps to
# the base class Error (tests/test_api.py checks every status has one).
from ._status import STATUS_DESCRIPTIONS, STATUS_NAMES  # noqa: F401


class Error(Exception):
    """A qc call failed.

    Attributes:
        status: the ``qc_status_t`` value (int), e.g. 5 for QC_ERROR_MISMATCH.
        status_name: its name, e.g. ``"QC_ERROR_MISMATCH"``.
        message: the library's ``qc_last_error()`` text for the failing call
            (it names the offending argument).

    Subclasses exist for every status; catch ``qc.Error`` for all of them.
    """

    #: status this class stands for (None on the base class)
    STATUS: Optional[int] = None

    def __init__(self, status: Optional[int] = None, message: str = "") -> None:
        if isinstance(status, str) and not message:  # qc.InvalidArgumentError("text")
            status, message = None, status
        if status is None:
            status = self.STATUS if self.STATUS is not None else 9
        self.status: int = int(status)
        self.status_name: str = STATUS_NAMES.get(self.status, "QC_UNKNOWN_STATUS")
        self.message: str = message
        super().__init__(self.status, message)

    def __str__(self) -> str:
        return f"{self.message} [{self.status_name}]" if self.message else self.status_name

    def __reduce__(self):  # picklable (multiprocessing, pytest-xdist)
        return (type(self), (self.status, self.message))


class InvalidArgumentError(Error, ValueError):
    """QC_ERROR_INVALID_ARGUMENT: an argument or policy field is invalid (also a ValueError)."""

    STATUS = 1


class ArgumentTypeError(Error, TypeError):
    """QC_ERROR_INVALID_ARGUMENT for an argument of the wrong Python type (also a TypeError).

    Raised by the Python binding before the library is called: a float where
    an int is needed, a list where a str is, an int where bytes are, an
    array of a dtype qc does not take; also by pickle/copy of an object that
    cannot be pickled or copied (qc.Comm, qc.ErrorBuffer). A value of the
    right type that qc cannot take raises InvalidArgumentError (a ValueError).
    Not a subclass of InvalidArgumentError: ``except ValueError`` does not
    catch it. ``error_class(1)`` is InvalidArgumentError.
    """

    STATUS = 1


class OutOfMemoryError(Error, MemoryError):
    """QC_ERROR_OUT_OF_MEMORY."""

    STATUS = 2


class UnsupportedError(Error):
    """QC_ERROR_UNSUPPORTED: not supported by this build or configuration (e.g. MPI missing)."""

    STATUS = 3


class TransportError(Error):
    """QC_ERROR_TRANSPORT: the transport failed, or a peer of a local group left."""

    STATUS = 4


class MismatchError(Error):
    """QC_ERROR_MISMATCH: ranks disagree on the collective (count, dtype, op, layer, policy).

    The communicator is broken afterwards: every later collective fails the same way.
    """

    STATUS = 5


class QcTimeoutError(Error, TimeoutError):
    """QC_ERROR_TIMEOUT: a peer did not arrive within the communicator's timeout (also a TimeoutError)."""

    STATUS = 6


class CorruptDataError(Error):
    """QC_ERROR_CORRUPT_DATA: a corrupt or malformed message or checkpoint image."""

    STATUS = 7


class VersionError(Error):
    """QC_ERROR_VERSION: version or struct layout mismatch."""

    STATUS = 8


class InternalError(Error):
    """QC_ERROR_INTERNAL: a bug in qc; please report it."""

    STATUS = 9


_CLASSES: Dict[int, Type[Error]] = {
    cls.STATUS: cls  # type: ignore[misc]
    for cls in (
        InvalidArgumentError,
        OutOfMemoryError,
        UnsupportedError,
        TransportError,
        MismatchError,
        QcTimeoutError,
        CorruptDataError,
        VersionError,
        InternalError,
    )
}


def error_class(status: int) -> Type[Error]:
    """The exception class for a qc_status_t value (qc.Error for unknown ones)."""
    if isinstance(status, bool) or not hasattr(status, "__index__"):
        raise ArgumentTypeError(1, f"error_class: argument 'status' must be an int, not {type(status).__name__}")
    return _CLASSES.get(status.__index__(), Error)
