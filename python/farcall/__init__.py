"""farcall: run JAX-style buffer callbacks on remote CPU and GPU agents.

    import farcall
    client = farcall.Client("127.0.0.1:50050")          # a router or an agent
    (y,) = client.call("axpy", x, y, results=[y], input_output_aliases={1: 0},
                       attributes={"alpha": 2.0})      # y updated in place

``farcall.jax.buffer_callback`` is the JAX drop-in (import farcall.jax; it
needs jax). ``python -m farcall.agent --handlers=FILE.py`` serves Python
handlers registered with ``@farcall.handler``.
"""

from farcall._client import (AgentEntry, AgentInfo, CallInfo, Client, DeviceInfo,
                             HandlerInfo, Spec, shared_array)
from farcall._errors import (AbortedError, AlreadyExistsError, CancelledError,
                             DataLossError, DeadlineExceededError, Error,
                             FailedPreconditionError, InternalError, InvalidArgumentError,
                             NotFoundError, OutOfRangeError, PermissionDeniedError,
                             ResidentLostError, ResourceExhaustedError, UnauthenticatedError, UnavailableError,
                             UnimplementedError, UnknownError)
from farcall._handlers import handler
from farcall._resident import Resident

__version__ = "0.1.0"

__all__ = [
    "AbortedError", "AgentEntry", "AgentInfo", "AlreadyExistsError", "CallInfo",
    "CancelledError", "Client", "DataLossError", "DeadlineExceededError", "DeviceInfo",
    "Error", "FailedPreconditionError", "HandlerInfo", "InternalError",
    "InvalidArgumentError", "NotFoundError", "OutOfRangeError", "PermissionDeniedError",
    "Resident", "ResidentLostError", "ResourceExhaustedError", "Spec", "UnauthenticatedError", "UnavailableError",
    "UnimplementedError", "UnknownError", "handler", "shared_array",
]
