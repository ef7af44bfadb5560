"""farcall.Client: calls handlers on agents, directly or through a router.

The work happens in the C++ client (farcall._farcall); this module turns
Python objects into pointers, dtype codes and shapes, and the answers back
into numpy arrays, without copying tensor bytes.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from farcall import _dtypes, _errors, _farcall, _tree
from farcall._resident import Resident

_farcall._set_error_factory(_errors.make_error)
# At exit, let call_async calls in flight complete (up to 5 s each wait)
# before the interpreter goes; later completions no longer touch Python.
atexit.register(_farcall._drain_completions, 5.0)

_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclasses.dataclass(frozen=True)
class Spec:
    """A result's shape and dtype; any object with ``.shape`` and ``.dtype``
    (a ``jax.ShapeDtypeStruct``, an array) does as well."""

    shape: tuple
    dtype: Any

    def __init__(self, shape, dtype):
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        object.__setattr__(self, "dtype", _native(np.dtype(dtype)))


@dataclasses.dataclass(frozen=True)
class CallInfo:
    """Where and how a call ran, with the agent's own timings."""

    agent_id: str
    platform: str
    transport: str  # how the arrays went: "grpc" or "shm"
    rpc: str  # the gRPC call that carried it: "unary" or "stream"
    via_router: bool  # passed through a router (rather than to the agent it named)
    queue_seconds: float
    transfer_seconds: float
    execute_seconds: float


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    memory_bytes: int


@dataclasses.dataclass(frozen=True)
class HandlerInfo:
    name: str
    command_buffer_compatible: bool
    source: str


@dataclasses.dataclass(frozen=True)
class AgentInfo:
    """An agent's description (``Client.describe()``, ``AgentEntry.info``)."""

    agent_id: str  # "cpu-agent-PORT" unless --agent_id says otherwise
    platform: str  # "cpu", "cuda", "rocm" or "oneapi"
    version: str  # the agent's farcall version
    devices: list  # DeviceInfo: ordinal, name, memory_bytes
    handlers: list  # HandlerInfo: name, command_buffer_compatible, source
    max_call_bytes: int  # larger calls are refused (RESOURCE_EXHAUSTED)
    shm_socket: str  # where same-host clients register shared memory; "": none
    offers_ucx: bool  # the agent moves arrays over UCX for calls that ask
    calls_total: int  # calls it ended since it started, however they came
    failed_calls_total: int  # of those, the ones that ended with a code other than OK
    inflight_calls: int  # calls it holds now, from every client
    resident_count: int = 0  # resident arrays it holds now (Client.put)
    resident_bytes: int = 0  # and their bytes

    @classmethod
    def _from(cls, d: dict) -> "AgentInfo":
        d = dict(d)
        d["devices"] = [DeviceInfo(**x) for x in d["devices"]]
        d["handlers"] = [HandlerInfo(**x) for x in d["handlers"]]
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class AgentEntry:
    """One agent as a router sees it (``Client.agents()``)."""

    address: str  # HOST:PORT, as the router reaches it
    info: AgentInfo  # its answer to the router's last probe
    health: str  # "SERVING", "NOT_SERVING", "DOWN" or "UNKNOWN"
    inflight_calls: int  # calls it holds now, from every client
    last_error: str  # why it is not serving, when it is not
    calls_total: int  # calls it ended: info.calls_total, or those the router forwarded if more


def _native(d: np.dtype) -> np.dtype:
    """The dtype in this machine's byte order: tensors on the wire are."""
    return d if d.isnative else d.newbyteorder("=")


def _as_array(x) -> np.ndarray:
    """A numpy view of x, without a copy where numpy can make one."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__") and not (
        hasattr(x, "__array__") or hasattr(x, "__array_interface__")
    ):
        return np.from_dlpack(x)
    return np.asarray(x)


def _result_spec(r) -> tuple[int, tuple]:
    try:
        shape, dtype = r.shape, r.dtype
    except AttributeError:
        raise TypeError(
            f"results must have .shape and .dtype (farcall.Spec, "
            f"jax.ShapeDtypeStruct or an array); got {type(r).__name__}"
        ) from None
    return _dtypes.code_of(_native(np.dtype(dtype))), tuple(int(d) for d in shape)


def _attribute(name: str, v):
    if isinstance(v, np.generic):
        v = v.item()
    if type(v).__module__.startswith("jax") and type(v).__name__.endswith("Tracer"):
        raise TypeError(
            f"attribute {name!r} is a traced value ({type(v).__name__}): attributes are fixed "
            f"when the call is traced, as in JAX's FFI. Pass a value that changes from step to "
            f"step as an argument (an array the handler reads), and bind constants with "
            f"functools.partial or attributes= outside the traced function.")
    if not isinstance(v, (bool, int, float, str)):
        raise TypeError(
            f"attribute {name!r} must be an int, float, bool or str; got {type(v).__name__}"
        )
    if isinstance(v, int) and not isinstance(v, bool) and not _INT64[0] <= v <= _INT64[1]:
        raise ValueError(f"attribute {name!r} = {v} does not fit in int64")
    return v


class _Prepared:
    """A call's arguments in the form the native client takes."""

    __slots__ = ("arrays", "originals", "args", "results", "aliases", "attributes", "structure",
                 "resident", "platform")

    def __init__(self, args, results, input_output_aliases, attributes, platform="cpu",
                 keep_results=None, resident_ttl=None):
        aliases = {int(i): int(o) for i, o in (input_output_aliases or {}).items()}
        self.platform = platform if isinstance(platform, str) else "cpu"
        keep = [int(o) for o in (keep_results or [])]
        self.resident = {}
        if keep:
            self.resident["keep"] = keep
        if resident_ttl is not None:
            ttl = float(resident_ttl)
            if not ttl > 0:
                raise ValueError(f"resident_ttl must be a positive number of seconds; got "
                                 f"{resident_ttl!r}")
            self.resident["ttl"] = ttl
        resident_args = {}
        # `results` may be one spec or a tree of them, as JAX's
        # result_shape_dtypes: the handler's `out`, and what this call
        # returns, have its structure.
        leaves, structure = _tree.flatten(results)
        self.structure = None if _tree.is_flat_list(structure) else structure
        self.results = [_result_spec(r) for r in leaves]
        self.arrays = []
        self.originals = list(args)
        self.args = []
        aliased_inputs = {i: o for i, o in aliases.items() if 0 <= o < len(self.results)}
        for i, x in enumerate(args):
            if isinstance(x, Resident):
                # On its agent: no bytes travel.
                resident_args[i] = x.handle
                self.arrays.append(None)
                self.args.append((0, _dtypes.code_of(_native(x.dtype)), x.shape, False))
                continue
            a = _as_array(x)
            # A kept result never comes back into its input.
            writable = i in aliased_inputs and aliased_inputs[i] not in keep
            if writable:
                o = aliased_inputs[i]
                if not a.flags.writeable:
                    raise ValueError(
                        f"args[{i}] is aliased to results[{o}] (input_output_aliases) "
                        f"but is read-only; pass a writable array, which the result "
                        f"is written into"
                    )
                if not a.flags.c_contiguous:
                    raise ValueError(
                        f"args[{i}] is aliased to results[{o}] (input_output_aliases) "
                        f"but is not C-contiguous; pass a contiguous array, which "
                        f"the result is written into"
                    )
                if not a.dtype.isnative:
                    raise ValueError(
                        f"args[{i}] is aliased to results[{o}] (input_output_aliases) "
                        f"but its byte order is not this machine's; pass a native "
                        f"{_native(a.dtype)} array, which the result is written into"
                    )
            elif not a.flags.c_contiguous or not a.dtype.isnative:
                # Sent as a dense copy in this machine's byte order.
                a = np.ascontiguousarray(a, dtype=_native(a.dtype))
            self.arrays.append(a)
            self.args.append(
                (a.__array_interface__["data"][0] if a.nbytes else 0,
                 _dtypes.code_of(a.dtype), a.shape, writable)
            )
        if resident_args:
            self.resident["args"] = resident_args
        self.aliases = aliases
        self.attributes = {k: _attribute(k, v) for k, v in (attributes or {}).items()}
        if self.structure is not None:
            self.attributes[_tree.ATTRIBUTE] = _tree.encode(self.structure)

    def finish(self, raw: list) -> list:
        out = []
        by_output = {o: i for i, o in self.aliases.items()}
        for o, r in enumerate(raw):
            if isinstance(r, str):  # stayed on the agent
                i = by_output.get(o)
                orig = self.originals[i] if i is not None else None
                if isinstance(orig, Resident) and orig.handle == r:
                    out.append(orig)  # updated there: the same Resident
                else:
                    code, shape = self.results[o]
                    out.append(Resident(r, shape, _dtypes.dtype_of(code), self.platform))
                continue
            if r is None:  # aliased: the caller's own array, updated in place
                i = by_output[o]
                orig = self.originals[i]
                out.append(orig if isinstance(orig, np.ndarray) else self.arrays[i])
                continue
            code, shape = self.results[o]
            out.append(r.view(_dtypes.dtype_of(code)).reshape(shape))
        return out if self.structure is None else _tree.unflatten(self.structure, out)


def farcall_spec(r: Resident) -> Spec:
    """A resident's spec, as a call's result."""
    return Spec(r.shape, r.dtype)


def _info(d: dict) -> CallInfo:
    return CallInfo(**d)


class _CallFuture(concurrent.futures.Future):
    """``call_async``'s future. ``cancel()`` works while the call is in
    flight too: the future is cancelled at once (``result()`` raises
    ``concurrent.futures.CancelledError``) and the call is stopped, on the
    wire or between its attempts. Its handler may have run, or be running."""

    def __init__(self, stop):
        super().__init__()
        self._stop = stop

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        self._stop.stop()
        return True


def _retries(retries) -> int:
    """CallOptions.retries for ``retries=``."""
    if isinstance(retries, bool) or not isinstance(retries, (int, np.integer)) or retries < 0:
        raise ValueError(f"retries must be an int >= 0; got {retries!r}")
    return int(retries)


class Client:
    """A connection to a farcall router or agent.

    ``target`` is ``HOST:PORT``. Connecting is lazy: an unreachable target
    fails calls, not this constructor. Thread-safe; one Client serves many
    threads. Same-host agents are reached through shared memory.

    TLS: ``tls_ca`` (a PEM file) verifies the server; ``tls_cert`` and
    ``tls_key`` present a client certificate to servers that require one.
    ``token`` is sent as ``authorization: Bearer TOKEN`` on every call; it
    never travels in clear beyond this host (a target that is not a
    loopback address needs TLS) unless ``allow_insecure_tokens=True`` says
    the network is trusted. Agents that a router names and mints
    capabilities for get those instead of the token.
    ``tls_server_name`` checks the target's certificate against that name
    instead of its address; ``agent_tls_server_name`` does the same for the
    agents a router names, when they share one certificate.

    Given a router, a call asks it which agents may serve the call (cached
    for the router's probe interval) and goes to one of them directly, so
    that the arrays do not pass through the router; it goes through the
    router when no such agent can be reached or one refuses ``token``.
    ``via_router=True`` sends every call through the router, for clients
    that cannot reach the agents. ``CallInfo.via_router`` says which way a
    call went.

    ``wait_for_ready=True`` makes each call wait, within its timeout, for a
    target that cannot be reached yet (an agent restarting) instead of
    failing at once with ``UnavailableError``. Either way a restarted agent
    is reached again within a second: reconnection is retried at most a
    second apart.

    ``transport`` says how the arrays travel: ``"auto"`` (shared memory to
    an agent on this host that offers it, for calls of 64 KiB or more of
    arrays or with an arg in a ``shared_array``, else UCX for calls of 1 MiB
    or more to an agent that offers it, else gRPC), ``"grpc"``, ``"shm"`` or
    ``"ucx"`` (UCX straight between the arrays and the agent's tensors;
    the ``UCX_TLS`` environment variable picks UCX's transports). ``shm``
    and ``ucx`` are refused with ``FailedPreconditionError`` where they
    cannot be used. ``rpc`` on each call picks the gRPC call's shape.

    ``busy_poll`` (seconds, at most 1) makes a small blocking call (one that
    goes as a single gRPC message each way; not ``call_async``) poll for its
    answer that long before its thread sleeps: lower latency for calls that end within it, one core
    spent meanwhile. At most half the machine's cores poll at once.

        client = farcall.Client("127.0.0.1:50050")
        x = np.arange(8, dtype=np.float32)
        y = np.ones(8, dtype=np.float32)
        (out,) = client.call("axpy", x, y, results=[y], input_output_aliases={1: 0},
                             attributes={"alpha": 2.0})
        assert out is y          # updated in place
    """

    def __init__(self, target: str, *, timeout: float = 60.0, tls_ca: str | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None,
                 token: str | None = None, via_router: bool = False,
                 transport: str = "auto", tls_server_name: str | None = None,
                 agent_tls_server_name: str | None = None, allow_insecure_tokens: bool = False,
                 wait_for_ready: bool = False, busy_poll: float = 0.0):
        # ValueError for a name or a busy_poll out of range, before connecting.
        _farcall.CallOptions().busy_poll = float(busy_poll)
        if not isinstance(transport, str):
            raise ValueError(
                f"transport must be 'auto', 'grpc', 'shm' or 'ucx'; got {transport!r}")
        _farcall.CallOptions().transport = transport
        self.target = target
        self.timeout = float(timeout)
        options = _farcall.ClientOptions()
        options.tls_ca = tls_ca or ""
        options.tls_cert = tls_cert or ""
        options.tls_key = tls_key or ""
        options.token = token or ""
        options.tls_server_name = tls_server_name or ""
        options.agent_tls_server_name = agent_tls_server_name or ""
        options.allow_insecure_tokens = bool(allow_insecure_tokens)
        self._native = _farcall.Client(target=target, options=options)
        # Every call's options start from these.
        self._via_router = bool(via_router)
        self._wait_for_ready = bool(wait_for_ready)
        self._transport = transport
        self._busy_poll = float(busy_poll)

    def __repr__(self) -> str:
        return f"farcall.Client({self.target!r})"

    def _native_call(self, handler, platform, p: "_Prepared", has_side_effect, timeout, rpc,
                     validate, call_id, stop=None, retries=0,
                     keep_aliased_args=False) -> dict:
        """The native call's keyword arguments (all but the result memory and
        the completion)."""
        # One platform per call, as in JAX; more are refused with the
        # contract's UNIMPLEMENTED.
        platforms = [platform] if isinstance(platform, str) else [str(p) for p in platform]
        if not platforms:
            raise _errors.InvalidArgumentError(
                "buffer_callback needs exactly one platform; the call names none.")
        options = _farcall.CallOptions()
        options.timeout = float(self.timeout if timeout is None else timeout)
        options.rpc = rpc
        options.transport = self._transport
        options.validate_locally = bool(validate)
        options.call_id = "" if call_id is None else str(call_id)
        options.via_router = self._via_router
        options.wait_for_ready = self._wait_for_ready
        options.busy_poll = self._busy_poll
        options.retries = _retries(retries)
        options.keep_aliased_args = bool(keep_aliased_args)
        options.stop = stop
        return dict(handler=handler, platforms=platforms, args=p.args, results=p.results,
                    aliases=p.aliases, attributes=p.attributes,
                    has_side_effect=bool(has_side_effect), options=options)

    def call(self, handler: str, *args, results: Sequence, platform: str = "cpu",
             input_output_aliases: Mapping[int, int] | None = None,
             attributes: Mapping[str, Any] | None = None, has_side_effect: bool = False,
             timeout: float | None = None, rpc: str = "auto",
             validate: bool = True, call_id: str | None = None, retries: int = 0,
             keep_aliased_args: bool = False, keep_results: Sequence[int] | None = None,
             resident_ttl: float | None = None) -> list:
        """Runs ``handler`` on an agent of ``platform``; returns the results.

        ``results`` are objects with ``.shape`` and ``.dtype``: a list of
        them, one, or a tree (tuples, dicts, nested), as JAX's
        ``result_shape_dtypes``; the handler's ``out`` and the returned
        results have that structure. An aliased result is the caller's own
        input array, updated in place. The GIL is
        released while the call runs. ``rpc`` forces the unary ``Call`` or
        the streamed ``Execute`` RPC; ``validate=False`` skips the local
        checks so that the servers answer a bad call (for tests).
        ``call_id`` names the call (by default a fresh id each time): an
        agent runs a call with ``has_side_effect`` at most once per id, so
        retry such a call with the id it first had, and a repeat gets the
        first answer or ``AlreadyExistsError``.

        ``retries`` (default 0) sends a failed call again to the same target
        up to that many times, after a failure that may be sent again: one
        no handler ran, and, for a call without side effects,
        ``UnavailableError`` that no handler raised. Whatever it says, a call
        goes to a router's next agent, and again through a router that
        drains, as the C++ client's ``CallOptions::retries`` says. A call
        whose aliased result had begun to land in its input array when it
        failed is never sent again from it: it raises ``AbortedError``
        naming the argument, unless ``keep_aliased_args=True``, which keeps a
        copy of each aliased input to restore it from (one copy per call).

        Resident arrays (``farcall.Resident``, from ``put``) go wherever an
        array does, and their bytes stay on their agent; the call goes there.
        ``keep_results`` lists results the agent keeps instead of sending
        back: each comes back as a ``Resident``, alive for ``resident_ttl``
        seconds after its last use (default: the agent's ``--resident_ttl``).

        Raises a ``farcall.Error`` subclass with the contract's code and
        message.
        """
        return self.call_with_info(
            handler, *args, results=results, platform=platform,
            input_output_aliases=input_output_aliases, attributes=attributes,
            has_side_effect=has_side_effect, timeout=timeout, rpc=rpc, validate=validate,
            call_id=call_id, retries=retries, keep_aliased_args=keep_aliased_args,
            keep_results=keep_results, resident_ttl=resident_ttl)[0]

    def call_with_info(self, handler: str, *args, results: Sequence, platform: str = "cpu",
                       input_output_aliases=None, attributes=None, has_side_effect=False,
                       timeout=None, rpc="auto", validate=True,
                       call_id=None, retries=0,
                       keep_aliased_args=False, keep_results=None,
                       resident_ttl=None) -> tuple[list, CallInfo]:
        """As ``call``, and also returns a ``CallInfo``: which agent ran it,
        over which transport, and the agent's timings."""
        p = _Prepared(args, results, input_output_aliases, attributes, platform, keep_results,
                      resident_ttl)
        raw, info = self._native.call(
            **self._native_call(handler, platform, p, has_side_effect, timeout, rpc, validate,
                                call_id, retries=retries, keep_aliased_args=keep_aliased_args),
            result_memory=[], resident=p.resident)
        return p.finish(raw), _info(info)

    def call_async(self, handler: str, *args, results: Sequence, platform: str = "cpu",
                   input_output_aliases=None, attributes=None, has_side_effect=False,
                   timeout=None, rpc="auto", validate=True,
                   call_id=None, retries=0,
                   keep_aliased_args=False, keep_results=None,
                   resident_ttl=None) -> concurrent.futures.Future:
        """As ``call``, but returns at once with a ``concurrent.futures.Future``
        of the results. The args must not be changed until it is done. Bad
        arguments raise at once; the call's own errors go to the future.
        Futures complete on a thread of farcall's (never gRPC's), where
        their done-callbacks run too."""
        p = _Prepared(args, results, input_output_aliases, attributes, platform, keep_results,
                      resident_ttl)
        stop = _farcall.CallStop()
        fut = _CallFuture(stop)

        def done(out, code, message, traceback, did_not_run, from_handler, resident_lost,
                 p=p):  # p keeps the arrays alive
            if fut.cancelled():
                return
            try:
                if code is None:
                    fut.set_result(p.finish(out[0]))
                else:
                    fut.set_exception(_errors.make_error(code, message, traceback, did_not_run,
                                                         from_handler, resident_lost))
            except BaseException as e:  # noqa: BLE001: the future must end
                if not fut.done():
                    fut.set_exception(e)

        self._native.call_async(
            **self._native_call(handler, platform, p, has_side_effect, timeout, rpc, validate,
                                call_id, stop, retries, keep_aliased_args), done=done,
            resident=p.resident)
        return fut

    def put(self, array, *, ttl: float | None = None, platform: str = "cpu",
            timeout: float | None = None, call_id: str | None = None) -> Resident:
        """Leaves ``array`` on an agent of ``platform`` (through a router: one
        it picks) and returns its ``farcall.Resident``. It lives for ``ttl``
        seconds after its last use (default: the agent's ``--resident_ttl``),
        or until ``delete``. Restores a snapshot from ``get`` too, on any
        agent. A repeat with the same ``call_id`` keeps no second copy."""
        a = _as_array(array)
        (r,) = self.call("copy", a, results=[a], platform=platform,
                         input_output_aliases={0: 0}, keep_results=[0], resident_ttl=ttl,
                         has_side_effect=True, timeout=timeout, call_id=call_id)
        return r

    def get(self, resident: Resident, *, out: np.ndarray | None = None,
            timeout: float | None = None) -> np.ndarray:
        """A copy of a resident array (a snapshot: ``put`` restores it).
        ``out``, a writable C-contiguous array of its shape and dtype,
        receives it (and is returned) instead of a new array: a loop that
        takes snapshots reuses its memory."""
        if out is None:
            return self.get_many([resident], timeout=timeout)[0]
        if not isinstance(resident, Resident):
            raise TypeError(f"get takes farcall.Resident; got {type(resident).__name__}")
        if (not isinstance(out, np.ndarray) or out.shape != resident.shape
                or _native(out.dtype) != _native(resident.dtype) or not out.flags.writeable
                or not out.flags.c_contiguous):
            raise ValueError(f"out must be a writable C-contiguous {resident.dtype.name} array "
                             f"of shape {resident.shape}")
        p = _Prepared([resident], [farcall_spec(resident)], None, None, resident.platform)
        self._native.call(
            **self._native_call("copy", resident.platform, p, False, timeout, "auto", True, None),
            result_memory=[out.__array_interface__["data"][0] if out.nbytes else 0],
            resident=p.resident)
        return out

    def get_many(self, residents: Sequence[Resident], *,
                 timeout: float | None = None) -> list:
        """Copies of several resident arrays of one agent, in one call."""
        residents = list(residents)
        if not residents:
            return []
        for r in residents:
            if not isinstance(r, Resident):
                raise TypeError(f"get takes farcall.Resident; got {type(r).__name__}")
        return self.call("copy", *residents, results=[farcall_spec(r) for r in residents],
                         platform=residents[0].platform, timeout=timeout)

    def delete(self, *residents: Resident, timeout: float | None = None) -> None:
        """Frees resident arrays now (all of one agent). Their handles then
        name nothing: a call naming one raises ``NotFoundError``."""
        if len(residents) == 1 and not isinstance(residents[0], Resident):
            residents = tuple(residents[0])
        for r in residents:
            if not isinstance(r, Resident):
                raise TypeError(f"delete takes farcall.Resident; got {type(r).__name__}")
        if not residents:
            return
        p = _Prepared([], [], None, None, residents[0].platform)
        p.resident["release"] = [r.handle for r in residents]
        self._native.call(
            **self._native_call("copy", residents[0].platform, p, True, timeout, "auto", True,
                                None),
            result_memory=[], resident=p.resident)

    def close(self) -> None:
        """Stops this client's calls in flight (their futures end with
        ``CancelledError`` from farcall, code ``CANCELLED``) and refuses new
        ones with ``FAILED_PRECONDITION``. Also what ``with Client(...) as c:``
        does on leaving the block. Closing twice does nothing more."""
        self._native.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self, timeout: float = 5.0) -> AgentInfo:
        """The agent's id, platform, devices and handlers (agents only)."""
        return AgentInfo._from(self._native.describe(timeout=float(timeout)))

    def agents(self, refresh: bool = False, timeout: float = 5.0) -> list:
        """Every agent the router knows, with its health (routers only)."""
        out = []
        for d in self._native.agents(refresh=bool(refresh), timeout=float(timeout)):
            d = dict(d)
            d["info"] = AgentInfo._from(d["info"])
            out.append(AgentEntry(**d))
        return out

    def health(self, timeout: float = 5.0) -> str:
        """"SERVING" when the standard health check says so; otherwise raises
        farcall.UnavailableError saying why."""
        self._native.health(timeout=float(timeout))
        return "SERVING"

    def allocate_shared(self, nbytes: int) -> np.ndarray:
        """``nbytes`` of shared memory with a same-host agent, as uint8."""
        return self._native.allocate_shared(nbytes=int(nbytes))


def shared_array(shape, dtype, client: Client) -> np.ndarray:
    """A numpy array in memory shared with ``client``'s agent (same host).

    Passed to ``client.call``, it is not copied at all: the agent reads it,
    and writes an aliased result into it, in place. Raises
    farcall.FailedPreconditionError when the target is a router or a remote
    agent.
    """
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return client.allocate_shared(n).view(dtype).reshape(shape)
