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
