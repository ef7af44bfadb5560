"""farcall's exceptions: one class per gRPC status code.

Each has ``.code`` (the gRPC name, such as ``"NOT_FOUND"``) and ``.message``
(the wire contract's message). Three also derive from the built-in exception
that JAX raises for the same condition, so code written for JAX keeps
working: INVALID_ARGUMENT is a ``ValueError``, UNIMPLEMENTED a
``NotImplementedError`` and DEADLINE_EXCEEDED a ``TimeoutError``.
"""

from __future__ import annotations


class Error(Exception):
    """A failed farcall call: ``.code`` and ``.message``."""

    code = "UNKNOWN"

    def __init__(self, message: str = "", code: str | None = None,
                 remote_traceback: str | None = None, did_not_run: bool = False,
                 from_handler: bool = False):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        # A Python handler's traceback on the agent (its last 20 frames, at
        # most 8 KiB), or None.
        self.remote_traceback = remote_traceback or None
        # The call failed before any handler could run it (target
        # unreachable, agent or router draining, inputs not delivered, no
        # live agent): sending it again is safe (with its call_id).
        self.did_not_run = bool(did_not_run)
        # A handler raised it (not farcall's own refusal or a broken link).
        self.from_handler = bool(from_handler)

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.remote_traceback:
            text += "\n\nRemote traceback (the agent's handler):\n" + self.remote_traceback
        return text


class CancelledError(Error):
    code = "CANCELLED"


class UnknownError(Error):
    code = "UNKNOWN"


class InvalidArgumentError(Error, ValueError):
    code = "INVALID_ARGUMENT"


class DeadlineExceededError(Error, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class NotFoundError(Error):
    code = "NOT_FOUND"


class ResidentLostError(NotFoundError):
    """A resident array the call names is gone with the agent that held it
    (the agent restarted, or no live agent has its id). Restore it from a
    snapshot (``Client.get``) with ``Client.put`` and call again."""


class AlreadyExistsError(Error):
    code = "ALREADY_EXISTS"


class PermissionDeniedError(Error):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(Error):
    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(Error):
    code = "FAILED_PRECONDITION"


class AbortedError(Error):
    code = "ABORTED"


class OutOfRangeError(Error):
    code = "OUT_OF_RANGE"


class UnimplementedError(Error, NotImplementedError):
    code = "UNIMPLEMENTED"


class InternalError(Error):
    code = "INTERNAL"


class UnavailableError(Error):
    code = "UNAVAILABLE"


class DataLossError(Error):
    code = "DATA_LOSS"


class UnauthenticatedError(Error):
    code = "UNAUTHENTICATED"


# The gRPC numbers, as on the wire.
CODES = {
    "OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5, "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
    "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13,
    "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}

_BY_CODE = {cls.code: cls for cls in Error.__subclasses__()}


def make_error(code: str, message: str, remote_traceback: str | None = None,
               did_not_run: bool = False, from_handler: bool = False,
               resident_lost: bool = False) -> Error:
    """The Error subclass for a gRPC code name (``ResidentLostError`` for a
    NOT_FOUND marked so)."""
    cls = _BY_CODE.get(code, Error)
    if resident_lost and cls is NotFoundError:
        cls = ResidentLostError
    if cls is Error:
        return Error(message, code, remote_traceback, did_not_run, from_handler)
    return cls(message, remote_traceback=remote_traceback, did_not_run=did_not_run,
               from_handler=from_handler)
