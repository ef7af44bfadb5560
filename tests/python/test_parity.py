"""The same callbacks under the installed JAX's buffer_callback (on the CPU)
and on a farcall Python agent give identical results."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.experimental.buffer_callback import buffer_callback as jax_buffer_callback

import farcall
import handlers_for_test as h


def _specs(*arrays):
    return [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]


CASES = [
    # (name, callback, args, results, aliases)
    ("elementwise", h.affine, [np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)],
     lambda x: [x], None),
    ("alias", h.double_in_place, [np.arange(7, dtype=np.int32)], lambda x: [x], {0: 0}),
    ("bfloat16", h.affine, [np.linspace(-2, 2, 9).astype(ml_dtypes.bfloat16)],
     lambda x: [x], None),
    ("several_and_rank0", h.stats, [np.arange(12, dtype=np.float64).reshape(3, 4)],
     lambda x: [jax.ShapeDtypeStruct((), x.dtype), x], None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_farcall_agent_matches_jax_buffer_callback(py_agent, case):
    _, callback, args, results_of, aliases = case
    results = results_of(*args)
    results = _specs(*results) if not isinstance(results[0], jax.ShapeDtypeStruct) else [
        r if isinstance(r, jax.ShapeDtypeStruct) else jax.ShapeDtypeStruct(r.shape, r.dtype)
        for r in results]
    expected = jax.jit(jax_buffer_callback(callback, results, input_output_aliases=aliases))(
        *[jnp.asarray(a) for a in args])
    name = {h.affine: "py_affine", h.double_in_place: "py_double_in_place",
            h.stats: "py_stats"}[callback]
    got = farcall.Client(py_agent.address).call(
        name, *[np.array(a) for a in args], results=results, input_output_aliases=aliases)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape
        assert g.tobytes() == e.tobytes()


# Result trees: JAX gives `out` the structure of result_shape_dtypes (a
# single buffer for one spec, a dict for a dict, nested), and so does a
# farcall agent, through farcall.jax.buffer_callback and Client.call alike.
TREE_CASES = [
    ("single_spec", h.py_add_one_inplace, "py_add_one_inplace",
     [np.array(41, dtype=np.int32)], lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype)),
    ("single_spec_array", h.py_add_one_inplace, "py_add_one_inplace",
     [np.arange(6, dtype=np.float32).reshape(2, 3)],
     lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype)),
    ("dict", h.sum_and_diff_dict, "py_sum_and_diff_dict",
     [np.arange(4, dtype=np.float32), np.ones(4, np.float32)],
     lambda x, y: {"sum": jax.ShapeDtypeStruct(x.shape, x.dtype),
                   "diff": jax.ShapeDtypeStruct(x.shape, x.dtype)}),
    ("nested", h.nested, "py_nested", [np.arange(5, dtype=np.int64)],
     lambda x: (jax.ShapeDtypeStruct(x.shape, x.dtype),
                {"neg": jax.ShapeDtypeStruct(x.shape, x.dtype),
                 "pair": [jax.ShapeDtypeStruct((), x.dtype), jax.ShapeDtypeStruct((), x.dtype)]})),
]


@pytest.mark.parametrize("case", TREE_CASES, ids=[c[0] for c in TREE_CASES])
def test_out_has_the_structure_of_the_result_specs(py_agent, case):
    _, callback, name, args, specs_of = case
    specs = specs_of(*args)
    expected = jax.jit(jax_buffer_callback(callback, specs))(*[jnp.asarray(a) for a in args])
    from farcall.jax import buffer_callback as farcall_buffer_callback
    remote = jax.jit(farcall_buffer_callback(name, specs, target=py_agent.address))(
        *[jnp.asarray(a) for a in args])
    got = farcall.Client(py_agent.address).call(name, *args, results=specs)
    for result in (remote, got):
        assert jax.tree_util.tree_structure(result) == jax.tree_util.tree_structure(expected)
        for g, e in zip(jax.tree_util.tree_leaves(result), jax.tree_util.tree_leaves(expected)):
            g, e = np.asarray(g), np.asarray(e)
            assert g.dtype == e.dtype and g.shape == e.shape
            assert g.tobytes() == e.tobytes()


def test_handlers_read_the_calls_attributes(py_agent):
    x = np.arange(4, dtype=np.float32)
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    from farcall.jax import buffer_callback as farcall_buffer_callback
    f = farcall_buffer_callback("py_scale_by_attribute", spec, target=py_agent.address,
                                attributes={"lr": 0.5})
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), x * 0.5)
    out = farcall.Client(py_agent.address).call("py_scale_by_attribute", x, results=spec,
                                                attributes={"lr": 3})
    np.testing.assert_array_equal(out, x * 3)


# Inputs: JAX calls callback(ctx, out, *args, **kwargs) with each argument's
# tree rebuilt (dicts, tuples, lists, None) and keyword arguments by name;
# so does a farcall agent, through farcall.jax.buffer_callback.
def _tree_calls():
    g = jnp.arange(4, dtype=jnp.float32)
    state = {"m": jnp.ones(4, jnp.float32), "v": jnp.full(4, 2.0, jnp.float32)}
    return [
        ("dict", (g, state), {}),
        ("tuple", (g, state, (jnp.ones(4, jnp.float32), jnp.full(4, 3.0, jnp.float32))), {}),
        ("list", (g, state, [jnp.full(4, 0.5, jnp.float32)]), {}),
        ("none_and_keyword", (g, state, None), {"scale": jnp.float32(2)}),
        ("keyword_only", (g,), {"state": state, "scale": jnp.float32(3)}),
    ]


@pytest.mark.parametrize("path", ["ffi", "host_callback"])
@pytest.mark.parametrize("call", _tree_calls(), ids=[c[0] for c in _tree_calls()])
def test_inputs_keep_their_structure(py_agent, call, path):
    import farcall.jax as fj
    _, args, kwargs = call
    spec = jax.ShapeDtypeStruct((4,), jnp.float32)
    specs = {"m": spec, "v": spec}
    expected = jax.jit(jax_buffer_callback(h.tree_inputs, specs))(*args, **kwargs)
    fj.prefer_host_callback(path == "host_callback")
    try:
        remote = fj.buffer_callback("py_tree_inputs", specs, target=py_agent.address)
        got = jax.jit(remote)(*args, **kwargs)
    finally:
        fj.prefer_host_callback(False)
    assert sorted(got) == ["m", "v"]
    for k in ("m", "v"):
        assert np.asarray(got[k]).tobytes() == np.asarray(expected[k]).tobytes(), k


# ctx.stage, ctx.stream and the buffers' properties, as JAX gives them on
# the CPU, for every dtype JAX has, with 64-bit types off and on.
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("x64", [False, True], ids=["x64_off", "x64_on"])
@pytest.mark.parametrize("path", ["ffi", "host_callback"])
def test_the_context_and_buffers_are_as_jax_gives_them(py_agent, path, x64):
    import farcall.jax as fj
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", x64)
    fj.prefer_host_callback(path == "host_callback")
    try:
        for name in DTYPES:
            x = jnp.asarray(np.arange(6).reshape(2, 3) % 2).astype(name)  # JAX's own dtype
            specs = [jax.ShapeDtypeStruct((9,), jnp.int32), jax.ShapeDtypeStruct(x.shape, x.dtype)]
            local = jax.jit(jax_buffer_callback(h.jax_context, specs))(x)
            remote = jax.jit(fj.buffer_callback("py_jax_context", specs,
                                                target=py_agent.address))(x)
            assert np.asarray(local[0]).tolist() == [1] * 9, (name, "under JAX")
            assert np.asarray(remote[0]).tolist() == [1] * 9, (name, np.asarray(remote[0]))
            assert remote[1].dtype == x.dtype and remote[1].shape == x.shape, name
            assert np.asarray(remote[1]).tobytes() == np.asarray(x).tobytes(), name
    finally:
        fj.prefer_host_callback(False)
        jax.config.update("jax_enable_x64", previous)


# Inputs sharded over meshes, as JAX takes them. JAX needs a process with
# several devices, so this runs in a child process of its own (4 CPU
# devices). Over two different meshes in one call, jit itself refuses
# the call, the drop-in exactly as JAX's own; over two shardings of one
# mesh, the remote call gives JAX's values.
SHARDED = r'''
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax.experimental.buffer_callback import buffer_callback
import farcall.jax as fj

target = sys.argv[1]
devs = np.array(jax.devices())
assert len(devs) == 4, devs
spec = jax.ShapeDtypeStruct((8,), jnp.float32)

def add(ctx, out, a, b):
    np.asarray(out)[...] = np.asarray(a) + np.asarray(b)

def outcome(f, x, y):
    try:
        return "ok", np.asarray(jax.jit(f)(x, y)).tobytes()
    except Exception as e:
        return type(e).__name__, str(e).split("\n")[0]

for path in ("ffi", "host_callback"):
    fj.prefer_host_callback(path == "host_callback")
    remote = fj.buffer_callback("add", spec, target=target)
    a, b = Mesh(devs[:2], ("a",)), Mesh(devs[2:], ("b",))
    x = jax.device_put(jnp.arange(8, dtype=jnp.float32), NamedSharding(a, P("a")))
    y = jax.device_put(jnp.arange(8, dtype=jnp.float32) * 10, NamedSharding(b, P("b")))
    mine, theirs = outcome(remote, x, y), outcome(buffer_callback(add, spec), x, y)
    assert theirs[0] == "ValueError" and "incompatible devices" in theirs[1], theirs
    assert mine == theirs, (path, mine, theirs)
    grid = Mesh(devs.reshape(2, 2), ("x", "y"))
    x = jax.device_put(jnp.arange(8, dtype=jnp.float32), NamedSharding(grid, P("x")))
    y = jax.device_put(jnp.arange(8, dtype=jnp.float32) * 10, NamedSharding(grid, P("y")))
    mine, theirs = outcome(remote, x, y), outcome(buffer_callback(add, spec), x, y)
    assert mine[0] == "ok" and mine == theirs, (path, mine, theirs)
print("sharded: as JAX")
'''


def test_inputs_sharded_over_meshes_as_jax_takes_them(agent):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", SHARDED, agent.address], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "sharded: as JAX" in out.stdout, out.stdout + out.stderr
