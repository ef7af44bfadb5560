"""farcall's answers equal the installed JAX's messages, byte for byte.

JAX's messages are produced live here from jax.experimental.buffer_callback;
farcall's come from the servers themselves (local checks off), through the
router and straight to an agent, over Call and Execute, and from
farcall.jax.buffer_callback at trace time."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.experimental.buffer_callback import buffer_callback as jax_buffer_callback

import farcall
import farcall.jax as fj


def _noop(ctx, out, *args):
    pass


def _jax_lowering_error(platforms):
    f = jax_buffer_callback(_noop, [jax.ShapeDtypeStruct((2,), jnp.float32)])
    try:
        jax.jit(f).trace(jnp.ones(2, jnp.float32)).lower(lowering_platforms=platforms)
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    raise AssertionError("JAX accepted the lowering")


def _jax_alias_error(args, results, aliases):
    f = jax_buffer_callback(_noop, [jax.ShapeDtypeStruct(r.shape, r.dtype) for r in results],
                            input_output_aliases=aliases)
    try:
        f(*[jnp.asarray(a) for a in args])
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    raise AssertionError("JAX accepted the aliases")


def _z(shape, dtype):
    return np.zeros(shape, dtype=np.dtype(dtype))


ALIAS_CASES = [
    ("input_out_of_range", [_z(4, "float32")], [_z(4, "float32")], {1: 0}),
    ("output_out_of_range", [_z(4, "float32")], [_z(4, "float32")], {0: 2}),
    ("bf16_vs_f16", [_z(3, ml_dtypes.bfloat16)], [_z(3, "float16")], {0: 0}),
    ("bool_vs_uint8_scalars", [_z((), "bool")], [_z((), "uint8")], {0: 0}),
    ("complex64_vs_f8e4m3fn", [_z(5, "complex64")], [_z(5, ml_dtypes.float8_e4m3fn)], {0: 0}),
    ("rank3", [_z((2, 3, 4), "float32")], [_z((4, 3, 2), "float32")], {0: 0}),
]


@pytest.fixture(params=[("agent", "unary"), ("agent", "stream"),
                        ("router", "unary"), ("router", "stream")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def server_call(request):
    server, rpc = request.param
    client = farcall.Client(request.getfixturevalue(server).address)

    def call(handler, *args, **kw):
        with pytest.raises(farcall.Error) as e:
            client.call(handler, *args, validate=False, rpc=rpc, **kw)
        return e.value

    return call


@pytest.mark.parametrize("platform", ["tpu", "metal"])
def test_refused_platform(server_call, platform):
    kind, message = _jax_lowering_error((platform,))
    x = np.ones(2, np.float32)
    err = server_call("copy", x, results=[x], platform=platform)
    assert isinstance(err, kind) and err.code == "INVALID_ARGUMENT"
    assert err.message == message


def test_two_platforms(server_call):
    kind, message = _jax_lowering_error(("cpu", "cuda"))
    x = np.ones(2, np.float32)
    err = server_call("copy", x, results=[x], platform=["cpu", "cuda"])
    assert isinstance(err, kind) and err.code == "UNIMPLEMENTED"
    assert err.message == message


@pytest.mark.parametrize("case", ALIAS_CASES, ids=[c[0] for c in ALIAS_CASES])
def test_alias_errors(server_call, case):
    _, args, results, aliases = case
    kind, message = _jax_alias_error(args, results, aliases)
    err = server_call("copy", *args, results=results, input_output_aliases=aliases)
    assert isinstance(err, kind) and err.code == "INVALID_ARGUMENT"
    assert err.message == message


@pytest.mark.parametrize("case", ALIAS_CASES, ids=[c[0] for c in ALIAS_CASES])
def test_alias_errors_of_the_jax_drop_in_and_local_checks(agent, case):
    _, args, results, aliases = case
    expected = _jax_alias_error(args, results, aliases)
    f = fj.buffer_callback("copy", [jax.ShapeDtypeStruct(r.shape, r.dtype) for r in results],
                           target=agent.address, input_output_aliases=aliases)
    with pytest.raises(Exception) as e:
        f(*[jnp.asarray(a) for a in args])
    assert (type(e.value), str(e.value)) == expected
    with pytest.raises(farcall.InvalidArgumentError) as e:  # the client's own checks
        farcall.Client(agent.address).call("copy", *args, results=results,
                                           input_output_aliases=aliases)
    assert e.value.message == expected[1]
