"""farcall.jax.buffer_callback: JAX's buffer_callback, run on a farcall agent.

    from farcall.jax import buffer_callback
    axpy = buffer_callback("axpy", jax.ShapeDtypeStruct((8,), jnp.float32),
                           target="127.0.0.1:50050", input_output_aliases={1: 0},
                           attributes={"alpha": 2.0})
    y = jax.jit(axpy)(x, y)

It mirrors ``jax.experimental.buffer_callback.buffer_callback``: the same
arguments (``handler`` names a handler on the agents instead of being a
Python function), the same checks with JAX's exception types and messages,
and JAX's messages for JVP and transpose. ``vmap_method`` behaves as in
``jax.pure_callback``.

How a call runs depends on the backend the JAX program is lowered for:
- cpu: an XLA FFI custom call into farcall's C++ client. XLA's buffers go to
  the agent with no Python and no GIL on the path, and
  ``input_output_aliases`` is XLA's own operand-output aliasing, so an
  aliased result is written into XLA's buffer in place.
- cuda (when farcall was built with the CUDA toolkit): the same custom
  call; the operands are copied from the device on XLA's stream, and the
  results copied back into XLA's buffers.
- any other backend (a TPU job, say), or a farcall built without jaxlib's
  FFI headers: ``jax.pure_callback`` into farcall.Client, or
  ``jax.experimental.io_callback`` when ``has_side_effect=True``.
"""

from __future__ import annotations

import functools
import itertools
import numbers
import uuid
import warnings
from typing import Any, Mapping

import jax
import numpy as np
from jax import tree_util
from jax._src import core
from jax._src import dispatch
from jax._src import effects
from jax._src import ffi as _jax_ffi
from jax.interpreters import ad, batching, mlir

from farcall import _client, _dtypes, _farcall, _resident, _tree

_PLATFORMS = ("cpu", "cuda", "rocm", "oneapi")
_FFI_TARGET = "farcall_buffer_call"
_DEFAULT_TIMEOUT = 60.0


def _register_ffi_targets() -> frozenset:
    """Registers the extension's FFI handlers (keyed by XLA's platform name:
    "cpu", "CUDA"); returns the JAX backends they serve ("cpu", "cuda")."""
    handlers = _farcall.ffi_handlers()
    for plat, capsule in handlers.items():
        jax.ffi.register_ffi_target(_FFI_TARGET, capsule, platform=plat)
    return frozenset(p.lower() for p in handlers)


_FFI_PLATFORMS = _register_ffi_targets()
_FFI_START = "farcall_buffer_call_start"
_FFI_DONE = "farcall_buffer_call_done"


def _register_cpu_halves() -> bool:
    """Registers the two halves of a call without aliases on the CPU
    backend (see _lower_in_halves); False when this build has none."""
    halves = _farcall.ffi_cpu_halves()
    if not halves:
        return False
    jax.ffi.register_ffi_target(_FFI_START, halves["start"], platform="cpu")
    jax.ffi.register_ffi_target(_FFI_DONE, halves["done"], platform="cpu")
    return True


_CPU_HALVES = _register_cpu_halves()
_PREFER_HOST_CALLBACK = False
_WARNED_WITHOUT_FFI = False


def _warn_once_without_ffi() -> None:
    """Says once per process that this build has no FFI path."""
    global _WARNED_WITHOUT_FFI
    if _FFI_PLATFORMS or _WARNED_WITHOUT_FFI:
        return
    _WARNED_WITHOUT_FFI = True
    warnings.warn(
        "farcall.jax: this farcall build has no XLA FFI path (it was built without jaxlib's "
        "headers, FARCALL_WITHOUT_XLA_FFI=ON), so jitted calls go through jax.pure_callback: "
        "about twice the cost per call, and no overlap with the step's other work. Rebuild "
        "with jaxlib installed for the FFI path.", RuntimeWarning, stacklevel=3)


def prefer_host_callback(enabled: bool = True) -> None:
    """Functions traced after this call use the host-callback path
    (``jax.pure_callback`` / ``io_callback``) on every backend, the FFI
    backends included: for comparisons and tests. Default: off."""
    global _PREFER_HOST_CALLBACK
    _PREFER_HOST_CALLBACK = bool(enabled)


def _check_platform(platform) -> str:
    """JAX's own checks, with its exception types and messages."""
    if isinstance(platform, (list, tuple)):
        if len(platform) > 1:
            raise NotImplementedError("multi-platform lowering for buffer_callback")
        if not platform:
            raise ValueError("buffer_callback needs exactly one platform; got none.")
        platform = platform[0]
    # "gpu" is JAX's name for whichever of cuda and rocm a job has; farcall
    # sends it to whichever has live agents.
    if str(platform).lower() not in _PLATFORMS + ("gpu",):
        raise ValueError(f"`buffer_callback` not supported on {platform} backend.")
    return str(platform)


def _encode_attrs(attributes: Mapping[str, Any] | None) -> str:
    """One string for the FFI handler: a type letter (i, f, b, s), then the
    name and the value, each as "<byte length>:<utf-8 bytes>"."""
    parts = []
    for name, v in sorted((attributes or {}).items()):
        v = _client._attribute(name, v)
        if isinstance(v, bool):
            t, s = "b", "1" if v else "0"
        elif isinstance(v, int):
            t, s = "i", str(v)
        elif isinstance(v, float):
            t, s = "f", repr(v)
        else:
            t, s = "s", v
        parts.append(f"{t}{len(name.encode())}:{name}{len(s.encode())}:{s}")
    return "".join(parts)


def _with_result_tree(attributes, result_shape_dtypes, n_leaves: int):
    """``attributes`` and, unless the results are a plain list, their
    structure (farcall._tree), so that the handler's ``out`` has it as JAX
    gives it: one buffer for one spec, a dict for a dict."""
    attributes = dict(attributes or {})
    for k in attributes:
        if str(k).startswith(_tree.RESERVED_PREFIX):
            raise ValueError(f"attribute {k!r}: names starting with "
                             f"{_tree.RESERVED_PREFIX!r} are farcall's own")
    try:
        leaves, structure = _tree.flatten(result_shape_dtypes)
    except (TypeError, ValueError):
        return attributes  # a pytree of JAX's own kinds: out stays a list
    if len(leaves) == n_leaves and not _tree.is_flat_list(structure):
        attributes[_tree.ATTRIBUTE] = _tree.encode(structure)
    return attributes


class FarcallCallbackEffect(effects.Effect):
    """A side-effecting farcall call: never removed or deduplicated."""

    def __str__(self):
        return "FarcallCallback"


_EFFECT = FarcallCallbackEffect()
effects.lowerable_effects.add_type(FarcallCallbackEffect)
effects.control_flow_allowed_effects.add_type(FarcallCallbackEffect)

# Named as JAX names its own, so that JAX's messages about it (vmap) read the same.
farcall_call_p = core.Primitive("buffer_callback")
farcall_call_p.multiple_results = True
dispatch.simple_impl(farcall_call_p)  # eager calls run as jitted ones


def buffer_callback(handler: str, result_shape_dtypes: object, *, target: str,
                    platform: str = "cpu", has_side_effect: bool = False,
                    vmap_method: str | None = None,
                    input_output_aliases: dict[int, int] | None = None,
                    command_buffer_compatible: bool = False,
                    attributes: Mapping[str, Any] | None = None,
                    timeout: float | None = None, tls_ca: str | None = None,
                    tls_cert: str | None = None, tls_key: str | None = None,
                    token: str | None = None, wait_for_ready: bool = False,
                    retries: int = 2, busy_poll: float | None = None,
                    resident: Mapping[str, Any] | None = None):
    """Returns a function that runs ``handler`` on a farcall agent of
    ``platform``, reached at ``target`` (a router or an agent), with TLS and
    a bearer token as farcall.Client takes them (the secrets never enter
    the traced program).

    The returned function takes and returns JAX arrays (pytrees of them),
    and works eagerly and under ``jax.jit``. ``attributes`` are the
    handler's attributes (int, float, bool or str). Errors from the agent
    surface as JAX runtime errors that contain the gRPC code and message.
    ``wait_for_ready=True`` makes a call wait, within its timeout, for a
    target that cannot be reached yet (an agent restarting) instead of
    failing at once. ``retries`` (default 2) sends a failed call again, up
    to that many times within its timeout, when it did not run: an agent or
    router draining, inputs not delivered, no live agent, and, for calls
    without side effects, a target unreachable or a connection broken (any
    UNAVAILABLE no handler raised). A call with side effects keeps one
    ``call_id`` across its attempts, so an agent runs it once. Through a
    router each attempt goes to the agent the router names then. A call
    whose result had begun to land in an aliased operand when it failed is
    not sent again from it: under ``jax.jit`` (the XLA FFI path) the step
    raises, its message starting ``ABORTED`` and naming the operand, and
    never goes on with other numbers; the host-callback path keeps a copy
    of each aliased operand and sends the call again from it.
    ``busy_poll`` is how long (seconds, at most 1) a call polls for its
    answer before its thread sleeps, as ``farcall.Client`` takes it. The
    default, ``None``, lets the cpu backend's XLA FFI path choose: a handler
    whose calls lately ended within 500 us is called on XLA's own thread,
    which polls for up to twice their recent average (about a quarter off a
    64 B call on loopback); other calls, and the cuda and host-callback
    paths, do not poll. ``0`` never polls.

    ``resident`` maps names to ``farcall.Resident`` arrays (from
    ``Client.put``, on the same ``target``): the handler gets each as a
    keyword argument of that name, a buffer it may read and update in
    place, and which stays on its agent between calls, so that a step sends
    only its own operands. They are fixed when the function is made; the
    call goes to the agent that holds them, and raises ``NOT_FOUND`` (a lost
    resident) if that agent is gone: restore them from a snapshot
    (``Client.get``), make the function again, and go on.
    """
    _warn_once_without_ffi()
    residents = dict(resident or {})
    for name, r in residents.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"farcall.jax.buffer_callback: resident names must be Python "
                             f"identifiers (they become keyword arguments); got {name!r}")
        if not isinstance(r, _client.Resident):
            raise TypeError(f"farcall.jax.buffer_callback: resident[{name!r}] must be a "
                            f"farcall.Resident (Client.put); got {type(r).__name__}")
    if not isinstance(retries, int) or retries < 0:
        raise ValueError(f"farcall.jax.buffer_callback: retries must be an int >= 0; "
                         f"got {retries!r}")
    if busy_poll is not None and (isinstance(busy_poll, bool)
                                  or not isinstance(busy_poll, numbers.Real)
                                  or not 0 <= busy_poll <= 1):
        raise ValueError(f"farcall.jax.buffer_callback: busy_poll must be None or 0 to 1 "
                         f"seconds; got {busy_poll!r}")
    if not isinstance(handler, str) or not handler:
        raise TypeError("farcall.jax.buffer_callback: handler must be a handler name (str)")
    flat_shape_dtypes, out_tree = tree_util.tree_flatten(result_shape_dtypes)
    flat_result_avals = tuple(core.ShapedArray(x.shape, x.dtype) for x in flat_shape_dtypes)
    attributes = _with_result_tree(attributes, result_shape_dtypes, len(flat_shape_dtypes))
    encoded_attrs = _encode_attrs(attributes)
    call_timeout = float(_DEFAULT_TIMEOUT if timeout is None else timeout)
    connection = _connection(target, tls_ca, tls_cert, tls_key, token)

    def wrapped_callback(*args, **kwargs):
        remote_platform = _check_platform(platform)
        clash = sorted(set(residents) & set(kwargs))
        if clash:
            raise TypeError(f"farcall.jax.buffer_callback: {clash} are given both as keyword "
                            f"arguments and as residents")
        # Residents are leaves among the keyword arguments (not registered
        # pytree nodes): their places among the call's args, where the
        # call's maker puts them.
        merged = {**kwargs, **residents}
        wire_leaves, _ = tree_util.tree_flatten((args, merged))
        flat_args, in_tree = tree_util.tree_flatten((args, kwargs))
        placed = [(pos, _dtypes.code_of(_client._native(x.dtype)), x)
                  for pos, x in enumerate(wire_leaves) if isinstance(x, _client.Resident)]
        # The handler gets its inputs as JAX gives them: each argument's
        # tree, and keyword arguments by name (farcall._tree).
        call_attributes, call_encoded = attributes, encoded_attrs
        in_structure = _tree.input_structure(args, merged, len(wire_leaves))
        if in_structure is not None or placed:
            call_attributes = dict(attributes)
            if in_structure is not None:
                call_attributes[_tree.IN_ATTRIBUTE] = _tree.encode(in_structure)
            if placed:
                call_attributes[_resident.RESIDENTS_ATTRIBUTE] = _resident.encode_residents(placed)
            call_encoded = _encode_attrs(call_attributes)
        in_avals = [core.typeof(x) for x in flat_args]
        static_aliases: list[tuple[int, int]] = []
        if input_output_aliases is not None:
            for i_idx, o_idx in sorted(input_output_aliases.items()):
                i_idx, o_idx = int(i_idx), int(o_idx)
                if i_idx >= len(args):
                    raise ValueError(
                        f"input_output_aliases contains the mapping '{i_idx}:{o_idx}' "
                        f"with input index {i_idx} outside the range [0, {len(args)}).")
                if o_idx >= len(flat_result_avals):
                    raise ValueError(
                        f"input_output_aliases contains the mapping '{i_idx}:{o_idx}' "
                        f"with output index {o_idx} outside the range [0, "
                        f"{len(flat_result_avals)}).")
                in_aval, out_aval = in_avals[i_idx], flat_result_avals[o_idx]
                if not _jax_ffi._check_compatible_avals(in_aval, out_aval):
                    raise ValueError(
                        f"input_output_aliases contains the mapping '{i_idx}:{o_idx}' "
                        f"referring to an input with abstract value {in_aval} and an "
                        f"output with a different abstract value {out_aval}.")
                static_aliases.append((i_idx, o_idx))
        out_flat = farcall_call_p.bind(
            *flat_args,
            handler=handler,
            target=connection,
            platform=remote_platform,
            result_avals=flat_result_avals,
            vmap_method=vmap_method,
            has_side_effect=bool(has_side_effect),
            input_output_aliases=tuple(static_aliases),
            command_buffer_compatible=bool(command_buffer_compatible),
            attributes=call_encoded,
            raw_attributes=tuple(sorted((call_attributes or {}).items())),
            timeout=call_timeout,
            wait_for_ready=bool(wait_for_ready),
            retries=int(retries),
            busy_poll=-1.0 if busy_poll is None else float(busy_poll),
            use_ffi=not _PREFER_HOST_CALLBACK,
        )
        return tree_util.tree_unflatten(out_tree, out_flat)

    return wrapped_callback


@farcall_call_p.def_effectful_abstract_eval
def _abstract_eval(*args, result_avals, has_side_effect, **_):
    return result_avals, ({_EFFECT} if has_side_effect else core.no_effects)


def _jvp_rule(*args, **kwargs):
    raise ValueError(
        "Buffer callbacks do not support JVP. "
        "Please use `jax.custom_jvp` to use callbacks while taking gradients.")


def _transpose_rule(*args, **kwargs):
    raise ValueError(
        "Buffer callbacks do not support transpose. "
        "Please use `jax.custom_vjp` to use callbacks while taking gradients.")


ad.primitive_jvps[farcall_call_p] = _jvp_rule
ad.primitive_transposes[farcall_call_p] = _transpose_rule
batching.primitive_batchers[farcall_call_p] = functools.partial(
    _jax_ffi.ffi_batching_rule, farcall_call_p)


def _ffi_lowering(ctx, *args, handler, target, platform, has_side_effect,
                  input_output_aliases, attributes, timeout, wait_for_ready, retries, busy_poll,
                  use_ffi, **params):
    if not use_ffi:
        return _callback_lowering(
            ctx, *args, handler=handler, target=target, platform=platform,
            has_side_effect=has_side_effect, input_output_aliases=input_output_aliases,
            attributes=attributes, timeout=timeout, wait_for_ready=wait_for_ready,
            retries=retries, busy_poll=busy_poll, **params)
    common = dict(target=target, handler=handler, platform=platform, attributes=attributes,
                  timeout=np.float64(timeout), has_side_effect=bool(has_side_effect),
                  wait_for_ready=bool(wait_for_ready), retries=np.int64(retries),
                  busy_poll=np.float64(busy_poll))
    # A call naming residents goes whole (ffi_handler.cc makes it).
    hold = (None if input_output_aliases or _resident.RESIDENTS_ATTRIBUTE in attributes
            else _handle_holder(ctx.avals_out))
    if (hold is not None and _CPU_HALVES and _lowering_platform(ctx) == "cpu"
            and _nbytes(ctx.avals_in) + _nbytes(ctx.avals_out) <= _HALVES_MAX_BYTES):
        return _lower_in_halves(ctx, args, common, hold)
    rule = jax.ffi.ffi_lowering(
        _FFI_TARGET, has_side_effect=has_side_effect,
        operand_output_aliases=dict(input_output_aliases))
    return rule(ctx, *args, aliases=",".join(f"{i}:{o}" for i, o in input_output_aliases),
                **common)


def _lowering_platform(ctx) -> str | None:
    platforms = ctx.module_context.platforms
    return platforms[0] if len(platforms) == 1 else None


_CALL_SITES = itertools.count()
# Calls with more tensor bytes than this (inputs and results together) stay
# one custom call: the halves copy the inputs on XLA's thread and the results
# into XLA's buffers, which for a 64 MiB copy took the jitted call from
# 60 ms to 160 ms (docs/python.md), while 1 MiB costs tens of microseconds.
_HALVES_MAX_BYTES = 1 << 20


def _nbytes(avals) -> int:
    return sum(np.dtype(a.dtype).itemsize * int(np.prod(a.shape, dtype=np.int64))
               for a in avals)


def _handle_holder(avals) -> int | None:
    """The first result with room for a call's 8-byte handle, or None."""
    for i, a in enumerate(avals):
        if _nbytes([a]) >= 8:
            return i
    return None


def _lower_in_halves(ctx, args, common, hold):
    """A call without aliases on the CPU backend, as two custom calls. One
    asynchronous custom call holds its operands' buffers until it ends, and
    XLA:CPU runs any later op that reuses one of those slices only then:
    buffer assignment often gives a callback's operand slice to the next
    op's output, so the step's independent work waited for the remote call.
    Here a synchronous start copies the inputs, sends the call and writes
    its 8-byte handle into result ``hold``'s buffer; an asynchronous done
    takes that buffer as its operand, aliased to the same result, and
    completes when the call ends, results written. The start's operands are
    free as soon as it returns, and the only slice done reads is its own
    result's, which no other op may reuse while it lives. Each start
    carries its own call_site number, so that XLA never merges two."""
    results = ";".join(
        f"{code}:{','.join(str(d) for d in dims)}"
        for code, dims in (_client._result_spec(a) for a in ctx.avals_out))
    held = ctx.avals_out[hold]
    start = jax.ffi.ffi_lowering(_FFI_START, has_side_effect=common["has_side_effect"])
    (handle,) = start(ctx.replace(avals_out=[held]), *args, aliases="", results=results,
                      call_site=np.int64(next(_CALL_SITES)), **common)
    done = jax.ffi.ffi_lowering(_FFI_DONE, has_side_effect=common["has_side_effect"],
                                operand_output_aliases={0: hold})
    return done(ctx.replace(avals_in=[held]), handle)


# Host-path clients by (connection key, wait_for_ready), and what a key
# stands for.
_CLIENTS: dict[tuple[str, bool, float], _client.Client] = {}
_KEY_OPTIONS: dict[str, dict] = {}


def _connection(target, tls_ca, tls_cert, tls_key, token) -> str:
    """The key calls use for ``target``: the target itself when plain, or a
    key standing for its TLS files and token, so that they stay out of the
    traced program."""
    if not (tls_ca or tls_cert or tls_key or token):
        return target
    options = dict(target=target, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
    client = _client.Client(**options)
    if _FFI_PLATFORMS:
        native = _farcall.ClientOptions()
        native.tls_ca = tls_ca or ""
        native.tls_cert = tls_cert or ""
        native.tls_key = tls_key or ""
        native.token = token or ""
        key = _farcall.ffi_connection(target=target, options=native)
    else:
        key = f"{target}#py{len(_CLIENTS)}"
    _CLIENTS[(key, False, 0.0)] = client
    _KEY_OPTIONS[key] = options
    return key


def _client_for(key: str, wait_for_ready: bool = False,
                busy_poll: float = 0.0) -> _client.Client:
    k = (key, bool(wait_for_ready), float(busy_poll))
    c = _CLIENTS.get(k)
    if c is None:
        options = _KEY_OPTIONS.get(key, {"target": key})
        c = _CLIENTS.setdefault(k, _client.Client(**options, wait_for_ready=k[1], busy_poll=k[2]))
    return c


def _host_call(*args, handler, target, platform, result_avals, input_output_aliases,
               has_side_effect, raw_attributes, timeout, wait_for_ready=False, retries=2,
               busy_poll=-1.0):
    """The call from a host callback: args are numpy arrays, maybe read-only.
    The client makes the retries (core/retry_policy.h), restoring each
    aliased arg from its copy before it sends the call again."""
    aliased = {i for i, _ in input_output_aliases}
    # Aliased args are written in place: the host callback's may be read-only.
    fresh = [np.array(a) if i in aliased else a for i, a in enumerate(args)]
    specs = [_client.Spec(a.shape, a.dtype) for a in result_avals]
    attributes = dict(raw_attributes)
    aliases = dict(input_output_aliases)
    placed = _resident.decode_residents(attributes.pop(_resident.RESIDENTS_ATTRIBUTE, ""))
    if placed:
        # As ffi_handler.cc does: each resident at its place among the args,
        # aliased to a result of its own after the call's.
        where = {pos: (code, shape, handle) for pos, code, shape, handle in placed}
        shift = sorted(where)
        wire, operands = [], iter(fresh)
        for pos in range(len(fresh) + len(placed)):
            if pos in where:
                code, shape, handle = where[pos]
                wire.append(_client.Resident(handle, shape, _dtypes.dtype_of(code), platform))
            else:
                wire.append(next(operands))
        aliases = {_wire_index(i, shift): o for i, o in aliases.items()}
        for pos in shift:
            aliases[pos] = len(specs)
            code, shape, _ = where[pos]
            specs.append(_client.Spec(shape, _dtypes.dtype_of(code)))
        attributes[_resident.RESIDENT_IN_ATTRIBUTE] = ",".join(str(p) for p in shift)
        fresh = wire
    out = _client_for(target, wait_for_ready, max(busy_poll, 0.0)).call(
        handler, *fresh, results=specs,
        platform=platform, input_output_aliases=aliases,
        attributes=attributes, has_side_effect=has_side_effect,
        timeout=timeout, call_id=uuid.uuid4().hex, retries=int(retries),
        keep_aliased_args=bool(aliased))
    return tuple(out[:len(result_avals)])


def _wire_index(operand: int, resident_positions: list) -> int:
    """Where operand `operand` goes among the wire args, residents placed
    at `resident_positions` (ascending)."""
    wire = operand
    for p in resident_positions:
        if p <= wire:
            wire += 1
    return wire


def _callback_impl(*args, result_avals, has_side_effect, **params):
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in result_avals]
    host = functools.partial(_host_call, result_avals=result_avals,
                             has_side_effect=has_side_effect, **params)
    if has_side_effect:
        from jax.experimental import io_callback
        return list(io_callback(host, shapes, *args, ordered=False))
    return list(jax.pure_callback(host, shapes, *args))


def _callback_lowering(ctx, *args, handler, target, platform, result_avals,
                       has_side_effect, input_output_aliases, raw_attributes, timeout,
                       wait_for_ready=False, retries=2, busy_poll=-1.0, **_):
    impl = functools.partial(
        _callback_impl, handler=handler, target=target, platform=platform,
        result_avals=result_avals, has_side_effect=has_side_effect,
        input_output_aliases=input_output_aliases, raw_attributes=raw_attributes,
        timeout=timeout, wait_for_ready=wait_for_ready, retries=retries, busy_poll=busy_poll)
    return mlir.lower_fun(impl, multiple_results=True)(ctx, *args)


mlir.register_lowering(farcall_call_p, _callback_lowering)
for _plat in _FFI_PLATFORMS:
    mlir.register_lowering(farcall_call_p, _ffi_lowering, platform=_plat)


def uses_ffi(backend: str = "cpu") -> bool:
    """Whether calls lowered for ``backend`` take the XLA FFI path."""
    return backend in _FFI_PLATFORMS and not _PREFER_HOST_CALLBACK
