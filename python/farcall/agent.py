"""``python -m farcall.agent --handlers=FILE.py [farcall-agent flags]``

Starts an agent that serves the built-in and plugin handlers plus every
function in FILE.py (several files: comma-separated) registered with
``@farcall.handler("name")``. Every farcall-agent flag works (``--platform``,
``--listen``, ``--plugins``, ``--ready_fd``, ...), and
``--python_threads=N`` (default 4) sets how many threads run Python handlers,
and ``--python_max_threads=N`` (default 64) how many may run while handlers
are stuck past their calls' deadlines; native handlers run on the agent's
own workers and never wait for Python. Tenants share the Python threads as
they share the agent's workers: a free thread takes the call of the tenant
holding the fewest, and a tenant holding none while others hold them all
gets a spare thread (``--tenant_spare_workers``, by default as many as
``--python_threads``).

Handlers are called as JAX calls buffer callbacks, ``callback(ctx, out,
*args)``. A handler that returns a value fails its call with INTERNAL ("ValueError:
buffer_callback callback must not return any values."); an exception fails
it with INTERNAL naming the exception's type and message, or with the code
of a ``farcall.Error`` it raised. The agent serves on either way. A handler
must return: the agent's shutdown waits for the calls in flight.
"""

from __future__ import annotations

import ctypes
import enum
import importlib.util
import os
import signal
import sys
import threading
import traceback
import types

import numpy as np

from farcall import _dtypes, _errors, _farcall, _handlers, _resident, _tree

# DLPack device types.
_KDL_CPU, _KDL_CUDA, _KDL_ROCM = 1, 2, 10


class _ExecutionStage(enum.Enum):
    """As jax.experimental.buffer_callback.ExecutionStage, for agents where
    jax is not installed; it compares equal to JAX's members of the same
    name and value (so a handler written against JAX's compares as there)."""

    INSTANTIATE = 0
    PREPARE = 1
    INITIALIZE = 2
    EXECUTE = 3

    def __eq__(self, other):
        if isinstance(other, enum.Enum):
            return self.name == other.name and self.value == other.value
        return NotImplemented

    def __hash__(self):
        return hash((self.name, self.value))


def _jax_runtime():
    """(ExecutionStage, JaxRuntimeError) from jaxlib where it is installed
    (a fifth of a second to import, once), else farcall's stand-ins."""
    try:
        import importlib.util as util
        if util.find_spec("jaxlib") is None:
            raise ImportError
        import jaxlib._jax as jax_runtime
        return jax_runtime.ffi.ExecutionStage, jax_runtime.JaxRuntimeError
    except Exception:  # noqa: BLE001: any jaxlib that does not have them
        return _ExecutionStage, _errors.UnimplementedError


# JAX's own enum and exception type when jaxlib is importable here: a
# handler that compares ctx.stage with jax's ExecutionStage, or catches
# jax.errors.JaxRuntimeError from ctx.stream, behaves as under JAX.
ExecutionStage, _ContextError = _jax_runtime()
# What JAX raises for ctx.stream where there is no GPU stream.
_NO_GPU_CONTEXT = "UNIMPLEMENTED: XLA FFI GPU context is not available"


_NO_ATTRIBUTES = types.MappingProxyType({})


class ExecutionContext:
    """What JAX's ExecutionContext offers: ``stage`` (JAX's
    ``ExecutionStage.EXECUTE`` where jaxlib is installed), and ``stream``
    (the platform stream as an int, on GPU agents; on cpu it raises as JAX
    does, ``JaxRuntimeError("UNIMPLEMENTED: XLA FFI GPU context is not
    available")``, or ``farcall.UnimplementedError`` with that message
    without jaxlib). Also ``platform``,
    ``device_ordinal``, ``attributes`` (the call's attributes, int, float,
    bool or str by name, a read-only mapping), ``deadline`` (when the call
    ends, as a ``time.monotonic()`` value: the caller's timeout or the
    agent's ``--max_call_seconds``, whichever is sooner; None when neither
    is set) and ``cancelled()`` (whether the caller gave up or the deadline
    passed; True once the call has ended), so that a long handler can stop
    early."""

    __slots__ = ("stage", "_stream", "platform", "device_ordinal", "attributes", "deadline",
                 "_cancel")

    def __init__(self, platform: str, device_ordinal: int, stream: int,
                 attributes=_NO_ATTRIBUTES, deadline=None, cancel=None):
        self.stage = ExecutionStage.EXECUTE
        self._stream = stream
        self.platform = platform
        self.device_ordinal = device_ordinal
        self.attributes = attributes
        self.deadline = deadline
        self._cancel = cancel

    @property
    def stream(self) -> int:
        if self.platform == "cpu":
            raise _ContextError(_NO_GPU_CONTEXT)
        return self._stream

    def cancelled(self) -> bool:
        return self._cancel is not None and self._cancel.cancelled()

    def __repr__(self) -> str:
        return (f"ExecutionContext(platform={self.platform!r}, "
                f"device_ordinal={self.device_ordinal}, stream={self._stream:#x})")


class Buffer:
    """One of a handler's buffers: ``shape``, ``dtype``, ``ndim``,
    ``writeable`` (False for args, True for results, as JAX's), and
    ``np.asarray`` (host platforms; read-only for args, writable for
    results), ``__dlpack__``, and ``__cuda_array_interface__`` on cuda and
    rocm. A buffer is converted only while its handler runs; an array taken
    from it may be kept after that, and then holds the call's memory (which
    goes to no other call while it does)."""

    __slots__ = ("_ptr", "_code", "shape", "dtype", "_nbytes", "_writable", "_platform",
                 "_device", "_stream", "_live", "_lease", "__weakref__")

    def __init__(self, ptr, code, shape, nbytes, writable, platform, device, stream, lease=None):
        self._ptr = ptr
        self._code = code
        self.shape = tuple(shape)
        self.dtype = _dtypes.dtype_of(code)
        self._nbytes = nbytes
        self._writable = writable
        self._platform = platform
        self._device = device
        self._stream = stream
        self._live = True
        # The native owner of the memory: every view made from this buffer
        # holds it (through the buffer), so the agent gives the memory to no
        # other call while a view lives.
        self._lease = lease

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def writeable(self) -> bool:
        return self._writable

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self) -> str:
        kind = "result" if self._writable else "arg"
        return f"farcall.agent.Buffer({kind}, {self.dtype.name}{list(self.shape)}, {self._platform})"

    def _check(self):
        if not self._live:
            raise ValueError("this buffer's call has ended; buffers are valid only "
                             "while their handler runs")

    def __array__(self, dtype=None, copy=None):
        self._check()
        if self._platform not in ("cpu",):
            raise TypeError(
                f"a {self._platform} buffer lives in device memory; use __dlpack__ "
                f"or __cuda_array_interface__")
        if copy:
            raise ValueError("farcall buffers convert without a copy only")
        if self._nbytes == 0:
            a = np.empty(self.shape, self.dtype)
        else:
            raw = (ctypes.c_ubyte * self._nbytes).from_address(self._ptr)
            raw._owner = self  # the array's base holds the memory's lease
            a = np.frombuffer(raw, dtype=np.uint8).view(self.dtype).reshape(self.shape)
            if not self._writable:
                a.flags.writeable = False
        if dtype is not None and np.dtype(dtype) != self.dtype:
            raise ValueError(f"buffer has dtype {self.dtype}, not {np.dtype(dtype)}")
        return a

    def __dlpack_device__(self):
        kind = {"cuda": _KDL_CUDA, "rocm": _KDL_ROCM}.get(self._platform, _KDL_CPU)
        return (kind, self._device if kind != _KDL_CPU else 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule over the buffer. On cuda and rocm the agent's
        inputs are on the device before the handler runs; work enqueued on
        another stream than ``ctx.stream`` must be complete when the handler
        returns."""
        self._check()
        if self._platform not in ("cpu", "cuda", "rocm"):
            raise BufferError(f"{self._platform} buffers are not addressable memory "
                              f"(an OpenCL buffer object); DLPack cannot describe them")
        kind, dev = self.__dlpack_device__()
        view = _farcall.dlpack_view(ptr=self._ptr, shape=list(self.shape), dtype=self._code,
                                    readonly=not self._writable, device_type=kind,
                                    device_id=dev, owner=self)
        kwargs = {}
        if max_version is not None:
            kwargs["max_version"] = max_version
        return view.__dlpack__(**kwargs)

    @property
    def __cuda_array_interface__(self):
        self._check()
        if self._platform not in ("cuda", "rocm"):
            raise AttributeError("__cuda_array_interface__ is for cuda and rocm buffers")
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "descr": [("", self.dtype.str)],
            "data": (self._ptr, not self._writable),
            "version": 3,
            "strides": None,
            "stream": self._stream or None,
        }


_MUST_NOT_RETURN = "buffer_callback callback must not return any values."


def _text(message) -> str:
    """A status message: any object's str, made valid UTF-8."""
    return str(message).encode("utf-8", "backslashreplace").decode("utf-8")


_TRACEBACK_FRAMES = 20
_TRACEBACK_BYTES = 8 << 10


def _remote_traceback(e: BaseException) -> str:
    """The handler's traceback as Python prints it: its last 20 frames (not
    the agent's own), at most 8 KiB (the end kept)."""
    try:
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        text = "".join(traceback.format_exception(type(e), e, tb, limit=-_TRACEBACK_FRAMES))
    except Exception:  # noqa: BLE001: a traceback that cannot be formatted is left out
        return ""
    text = _text(text)
    data = text.encode("utf-8")
    if len(data) > _TRACEBACK_BYTES:
        text = "...\n" + data[-(_TRACEBACK_BYTES - 4):].decode("utf-8", "ignore")
    return text


def _dispatch(fn, ctx_info, results, args):
    """Runs one Python handler; None, or (code, message, traceback) for a
    failed call (traceback: the handler's, or "").
    Called by the native agent on a Python handler thread, with the GIL."""
    platform = ctx_info["platform"]
    dev, stream = ctx_info["device_ordinal"], ctx_info["stream"]
    out = [Buffer(p, c, s, n, True, platform, dev, stream, lease)
           for p, c, s, n, lease in results]
    ins = [Buffer(p, c, s, n, False, platform, dev, stream, lease)
           for p, c, s, n, lease in args]
    attributes = ctx_info.get("attributes", {})
    tree = attributes.get(_tree.ATTRIBUTE)
    in_tree = attributes.get(_tree.IN_ATTRIBUTE)
    resident_in = attributes.get(_resident.RESIDENT_IN_ATTRIBUTE)
    visible = types.MappingProxyType(
        {k: v for k, v in attributes.items() if not k.startswith(_tree.RESERVED_PREFIX)})
    try:
        if isinstance(resident_in, str) and resident_in:
            # farcall.jax's residents: each arg there is aliased to one of
            # the last results, which the handler gets instead, writable, by
            # the arg's keyword; `out` is the call's own results.
            places = [int(p) for p in resident_in.split(",")]
            if len(places) > len(out) or any(not 0 <= p < len(ins) for p in places):
                raise _errors.InvalidArgumentError(
                    f"{_resident.RESIDENT_IN_ATTRIBUTE} names args {places}; the call has "
                    f"{len(ins)} args and {len(out)} results.")
            kept = out[len(out) - len(places):]
            del out[len(out) - len(places):]
            for p, b in zip(places, kept):
                ins[p] = b
        # `out` has the structure of the call's result specs, as JAX gives
        # it (a single buffer for one spec); a plain list without one.
        handed = out
        if isinstance(tree, str):
            try:
                structure = _tree.decode(tree)
            except ValueError as e:
                raise _errors.InvalidArgumentError(str(e)) from None
            if _tree.count(structure) != len(out):
                raise _errors.InvalidArgumentError(
                    f"{_tree.ATTRIBUTE} holds {_tree.count(structure)} results; the call "
                    f"has {len(out)}.")
            handed = _tree.unflatten(structure, out)
        # The inputs as the caller's arguments were: trees, and keyword
        # arguments by name (farcall.jax); flat leaves without.
        in_args, in_kwargs = tuple(ins), {}
        if isinstance(in_tree, str):
            try:
                structure = _tree.decode(in_tree, _tree.IN_ATTRIBUTE)
                if _tree.count(structure) != len(ins):
                    raise ValueError(f"{_tree.IN_ATTRIBUTE} holds {_tree.count(structure)} "
                                     f"inputs; the call has {len(ins)}.")
                in_args, in_kwargs = _tree.unflatten_inputs(structure, ins)
            except (ValueError, TypeError) as e:
                raise _errors.InvalidArgumentError(str(e)) from None
        try:
            ctx = ExecutionContext(platform, dev, stream, visible, ctx_info.get("deadline"),
                                   ctx_info.get("cancel"))
            ret = fn(ctx, handed, *in_args, **in_kwargs)
        except BaseException as e:  # noqa: BLE001: the handler's own failure
            try:
                e.__farcall_traceback__ = _remote_traceback(e)
            except AttributeError:
                pass  # an exception that takes no attributes goes without
            raise
        if ret is not None:
            raise ValueError(_MUST_NOT_RETURN)
        return None
    except _errors.Error as e:
        code = _errors.CODES.get(e.code, _errors.CODES["UNKNOWN"])
        if code == 0:  # an "error" with code OK cannot succeed the call
            code = _errors.CODES["INTERNAL"]
        return (code, _text(e.message), getattr(e, "__farcall_traceback__", ""))
    except BaseException as e:  # noqa: BLE001: every failure becomes the call's
        return (_errors.CODES["INTERNAL"], _text(f"{type(e).__name__}: {e}"),
                getattr(e, "__farcall_traceback__", ""))
    finally:
        for b in out + ins:
            b._live = False


def load_handlers(paths: str) -> dict:
    """Imports each file in the comma-separated ``paths``; returns every
    handler registered with @farcall.handler."""
    for path in filter(None, paths.split(",")):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--handlers: no such file: {path}")
        name = "farcall_handlers_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return _handlers.registered()


def _take_flag(argv: list, name: str, default: str) -> tuple[str, list]:
    value, rest, i = default, [], 0
    while i < len(argv):
        a = argv[i]
        if a == f"--{name}" and i + 1 < len(argv):
            value = argv[i + 1]
            i += 2
            continue
        if a.startswith(f"--{name}="):
            value = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return value, rest


_USAGE = """python -m farcall.agent --handlers=FILE.py[,FILE.py...] [farcall-agent flags]

Serves the built-in and plugin handlers and the Python handlers in FILE.py
(functions registered with @farcall.handler("name"), called as JAX calls
buffer callbacks: callback(ctx, out, *args)).

  --handlers=FILES       comma-separated Python files of handlers
  --python_threads=N     threads that run Python handlers (default 4); native
                         handlers run on the agent's own workers
  --python_max_threads=N threads at most (default 64): a handler still running
                         past its call's deadline is "stuck" and counts no more
                         against --python_threads, so another thread serves the
                         calls behind it (farcall_agent_python_stuck_handlers)

Every farcall-agent flag works as well (--platform, --listen, --plugins,
--tokens_file, ...); they follow.
"""


def main(argv: list | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    prog, flags = argv[0], argv[1:]
    if any(f in ("--help", "-h", "--helpfull") for f in flags):
        print(_USAGE)
        sys.stdout.flush()
        if "-h" in flags:
            return 0
    paths, flags = _take_flag(flags, "handlers", "")
    threads, flags = _take_flag(flags, "python_threads", "4")
    max_threads, flags = _take_flag(flags, "python_max_threads", "64")
    try:
        handlers = load_handlers(paths)
        n_threads, n_max = int(threads), int(max_threads)
        if n_threads < 1 or n_max < n_threads:
            raise ValueError(f"--python_threads must be at least 1 and --python_max_threads at "
                             f"least --python_threads; got {n_threads} and {n_max}")
    except Exception as e:  # noqa: BLE001: a start-up error, printed plainly
        print(f"farcall-agent: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    hangup = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    # SIGHUP reloads the tokens file (as farcall-agent's does), never stops.
    signal.signal(signal.SIGHUP, lambda signum, frame: hangup.set())
    agent = _farcall.start_agent(
        [prog] + flags, sorted(handlers.items()), _dispatch, n_threads, n_max,
        "python:" + paths)
    if isinstance(agent, int):
        return agent
    try:
        # Every 2 s: a tokens file that changed on disk is reloaded.
        while not stop.wait(2):
            agent.reload_config(hangup.is_set())
            hangup.clear()
        print("farcall-agent: signal received, shutting down", file=sys.stderr)
    finally:
        agent.shutdown()
    return 0


if __name__ == "__main__":
    # Run as farcall.agent, not __main__, so that handler files importing
    # farcall.agent see the same classes the agent passes them.
    from farcall.agent import main as _main

    sys.exit(_main())
