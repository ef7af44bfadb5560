"""Python handlers for the tests. Each is a JAX buffer callback, unchanged:
test_parity.py runs the same functions under JAX's own buffer_callback."""

import os
import socket
import time

import numpy as np

import farcall
import farcall.agent


@farcall.handler("py_affine")
def affine(ctx, out, x):
    """out[0] = 2x + 1 (elementwise math)."""
    np.asarray(out[0])[...] = np.asarray(x) * 2 + 1


@farcall.handler("py_double_in_place")
def double_in_place(ctx, out, x):
    """Called with {0: 0}: out[0] is x's buffer."""
    o = np.asarray(out[0])
    o[...] = o * 2


@farcall.handler("py_stats")
def stats(ctx, out, x):
    """Several results, one rank 0: the sum, and x negated."""
    a = np.asarray(x)
    np.asarray(out[0])[...] = a.sum(dtype=a.dtype)
    np.asarray(out[1])[...] = -a


_count = 0


@farcall.handler("py_count")
def count(ctx, out):
    """A side effect the tests can see: out[0] = how many times this ran."""
    global _count
    _count += 1
    np.asarray(out[0])[...] = _count


@farcall.handler("py_returns_value")
def returns_value(ctx, out):
    return 42


@farcall.handler("py_raises")
def raises(ctx, out):
    raise KeyError("no such key")


@farcall.handler("py_raises_farcall_error")
def raises_farcall_error(ctx, out):
    raise farcall.FailedPreconditionError("not ready yet")


@farcall.handler("py_slow")
def slow(ctx, out, seconds):
    time.sleep(float(np.asarray(seconds)))


@farcall.handler("py_gate")
def gate(ctx, out):
    """Tells the test's Gate it is running, then waits until released."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(os.environ["FARCALL_TEST_GATE"])
        s.recv(1)


@farcall.handler("py_deadline_left")
def deadline_left(ctx, out):
    """The seconds left until the call's deadline (ctx.deadline), and
    whether it counts as cancelled yet."""
    np.asarray(out[0])[...] = ctx.deadline - time.monotonic()
    np.asarray(out[1])[...] = ctx.cancelled()


_CANCEL_WAITS = []


@farcall.handler("py_until_cancelled")
def until_cancelled(ctx, out):
    """Waits (up to 60 s) for ctx.cancelled(), and records how long."""
    start = time.monotonic()
    while not ctx.cancelled() and time.monotonic() - start < 60:
        time.sleep(0.01)
    _CANCEL_WAITS.append(time.monotonic() - start)


@farcall.handler("py_cancel_waits")
def cancel_waits(ctx, out):
    """How long each py_until_cancelled call waited, in order (-1: none)."""
    a = np.asarray(out[0])
    a[...] = -1
    n = min(len(_CANCEL_WAITS), a.size)
    a[:n] = _CANCEL_WAITS[:n]


@farcall.handler("py_raises_odd_errors")
def raises_odd_errors(ctx, out, which):
    """farcall.Error with a non-str message, or with code OK."""
    if int(np.asarray(which)) == 0:
        raise farcall.InvalidArgumentError(42)
    raise farcall.Error("claims success", code="OK")


@farcall.handler("py_types")
def types(ctx, out):
    """1 where the objects are the agent module's own classes."""
    np.asarray(out[0])[...] = [isinstance(ctx, farcall.agent.ExecutionContext),
                               isinstance(out[0], farcall.agent.Buffer)]


_kept = []


@farcall.handler("py_inspect")
def inspect(ctx, out, x):
    """Writes 1 for each property of the buffers that holds."""
    arg = np.asarray(x)
    res = np.asarray(out[0])
    dl = np.from_dlpack(x)
    checks = [
        x.shape == (2, 3), x.dtype == np.float32, x.ndim == 2,
        not arg.flags.writeable, res.flags.writeable,
        bool(np.all(dl == arg)), x.__dlpack_device__() == (1, 0),
        ctx.stage == farcall.agent.ExecutionStage.EXECUTE, ctx.platform == "cpu",
    ]
    _kept.append(x)
    res[...] = np.array(checks, dtype=np.int32)


@farcall.handler("py_stale_buffer")
def stale_buffer(ctx, out):
    """1 if a buffer kept from an earlier call refuses conversion."""
    try:
        np.asarray(_kept[-1])
        ok = 0
    except ValueError:
        ok = 1
    np.asarray(out[0])[...] = ok


_kept_arrays = []


@farcall.handler("py_keep_array")
def keep_array(ctx, out, x):
    """Keeps np.asarray(x) past the call (as a careless handler might), and
    answers the first element of every array kept so far, newest last."""
    _kept_arrays.append(np.asarray(x))
    np.asarray(out[0])[...] = [a.flat[0] for a in _kept_arrays[-2:]] + [0] * (
        2 - len(_kept_arrays[-2:]))


# Callbacks as JAX's documentation writes them, with the decorator alone
# added: `out` has the structure of result_shape_dtypes.
@farcall.handler("py_add_one_inplace")
def py_add_one_inplace(ctx, out, x):
    np.asarray(out)[...] = np.asarray(x) + 1


@farcall.handler("py_sum_and_diff_dict")
def sum_and_diff_dict(ctx, out, x, y):
    np.asarray(out["sum"])[...] = np.asarray(x) + np.asarray(y)
    np.asarray(out["diff"])[...] = np.asarray(x) - np.asarray(y)


@farcall.handler("py_nested")
def nested(ctx, out, x):
    a = np.asarray(x)
    np.asarray(out[0])[...] = a * 2
    np.asarray(out[1]["neg"])[...] = -a
    np.asarray(out[1]["pair"][0])[...] = a.sum()
    np.asarray(out[1]["pair"][1])[...] = a.max()


@farcall.handler("py_scale_by_attribute")
def scale_by_attribute(ctx, out, x):
    """The call's attributes, as ctx.attributes: read-only, and without
    farcall's own (the result tree)."""
    assert not any(k.startswith("_farcall.") for k in ctx.attributes), dict(ctx.attributes)
    try:
        ctx.attributes["lr"] = 0
        raise AssertionError("ctx.attributes is writable")
    except TypeError:
        pass
    np.asarray(out)[...] = np.asarray(x) * ctx.attributes["lr"]


@farcall.handler("py_tree_inputs")
def tree_inputs(ctx, out, g, state, extra=None, *, scale=None):
    """Inputs as JAX gives them: a dict, a tuple or list (or None), and a
    keyword argument; results in a dict."""
    gg = np.asarray(g)
    s = 1.0 if scale is None else np.asarray(scale)[()]
    e = 0 if extra is None else sum(np.asarray(t) for t in extra)
    np.asarray(out["m"])[...] = 0.9 * np.asarray(state["m"]) + 0.1 * gg * s + e
    np.asarray(out["v"])[...] = 0.99 * np.asarray(state["v"]) + 0.01 * gg * gg


@farcall.handler("py_jax_context")
def jax_context(ctx, out, x):
    """1 for each thing that is as JAX gives it on the CPU: the stage
    (compared with JAX's own enum), ctx.stream raising JAX's error, and
    the buffers' properties; then x copied into out[1]."""
    from jax.experimental.buffer_callback import ExecutionStage
    import jax.errors
    try:
        ctx.stream
        stream_raises = False
    except jax.errors.JaxRuntimeError as e:
        stream_raises = str(e) == "UNIMPLEMENTED: XLA FFI GPU context is not available"
    checks = [
        ctx.stage == ExecutionStage.EXECUTE, ctx.stage.name == "EXECUTE", ctx.stage.value == 3,
        stream_raises, x.writeable is False, out[1].writeable is True,
        x.ndim == len(x.shape), out[1].shape == x.shape, out[1].dtype == x.dtype,
    ]
    np.asarray(out[0])[...] = np.array(checks, dtype=np.int32)
    np.asarray(out[1])[...] = np.asarray(x)


@farcall.handler("py_gate_copy")
def gate_copy(ctx, out, x):
    """py_gate with a tensor in and out: once released, copies x to out."""
    gate(ctx, out)
    np.copyto(np.asarray(out), np.asarray(x))


@farcall.handler("py_topk_ef")
def topk_error_feedback(ctx, out, grad, *, residual):
    """Top-k gradient compression with error feedback: the residual (a
    resident, updated in place) gathers what was not sent; out holds the k
    largest entries of grad + residual, the rest zero."""
    r = np.asarray(residual)
    r += np.asarray(grad)
    k = ctx.attributes["k"]
    keep = np.argsort(-np.abs(r), kind="stable")[:k]
    o = np.asarray(out)
    o[...] = 0
    o[keep] = r[keep]
    r[keep] = 0
