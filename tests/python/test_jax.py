"""farcall.jax.buffer_callback: eager, jit, vmap, the FFI and host-callback
paths, and JAX's own checks and messages."""

import concurrent.futures
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import pytest
from jax.experimental.buffer_callback import buffer_callback as jax_buffer_callback

import farcall
import farcall.jax as fj
from conftest import start_agent, start_python_agent, start_router

S8 = jax.ShapeDtypeStruct((8,), jnp.float32)


def _jax_error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    raise AssertionError("JAX raised nothing")


@pytest.fixture(params=["ffi", "host_callback"])
def path(request):
    fj.prefer_host_callback(request.param == "host_callback")
    yield request.param
    fj.prefer_host_callback(False)


def test_eager_and_jit_with_in_place_aliasing(router, path):
    axpy = fj.buffer_callback("axpy", S8, target=router.address, input_output_aliases={1: 0},
                              attributes={"alpha": 2.0})
    x, y = jnp.arange(8, dtype=jnp.float32), jnp.ones(8, jnp.float32)
    want = 2 * np.arange(8) + 1
    np.testing.assert_array_equal(axpy(x, y), want)
    np.testing.assert_array_equal(jax.jit(axpy)(x, y), want)
    np.testing.assert_array_equal(jax.jit(axpy, donate_argnums=1)(x, jnp.ones(8)), want)
    text = jax.jit(axpy).lower(x, y).as_text()
    if path == "ffi":
        assert "farcall_buffer_call" in text and "output_operand_aliases" in text
    else:
        assert "farcall_buffer_call" not in text


def test_side_effects_attributes_and_pytrees(agent, path):
    f = fj.buffer_callback("scale", {"y": S8}, target=agent.address, has_side_effect=True,
                           attributes={"alpha": np.float32(0.5)})
    out = jax.jit(f)(jnp.arange(8, dtype=jnp.float32))
    np.testing.assert_array_equal(out["y"], 0.5 * np.arange(8))
    fail = fj.buffer_callback("fail", [], target=agent.address,
                              attributes={"code": 8, "message": "out of quota"},
                              has_side_effect=True)
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.block_until_ready(jax.jit(fail)())
    assert "RESOURCE_EXHAUSTED" in str(e.value) and "out of quota" in str(e.value)


def test_runtime_errors_carry_code_and_message(agent, path):
    f = fj.buffer_callback("no_such_handler", S8, target=agent.address)
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.block_until_ready(jax.jit(f)(jnp.ones(8)))
    assert "NOT_FOUND" in str(e.value)
    assert "handler 'no_such_handler' is not registered for platform 'cpu'." in str(e.value)


def test_a_raising_handlers_traceback_is_in_the_jax_error(py_agent, path):
    f = fj.buffer_callback("py_raises", [], target=py_agent.address, has_side_effect=True)
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.block_until_ready(jax.jit(f)())
    text = str(e.value)
    assert "INTERNAL" in text and "KeyError: 'no such key'" in text
    assert 'handlers_for_test.py", line 53, in raises' in text, text


def test_wait_for_ready_reaches_the_agent(agent, path):
    f = fj.buffer_callback("scale", S8, target=agent.address, attributes={"alpha": 3.0},
                           wait_for_ready=True, timeout=10)
    np.testing.assert_array_equal(jax.jit(f)(jnp.ones(8, jnp.float32)), np.full(8, 3.0))


def test_a_donated_step_survives_an_agent_restart_with_retries(path):
    # The training step donates its state to an in-place remote update. The
    # agent goes away between two steps and comes back on the same port
    # while the next step runs: its retries reach the new agent, and the
    # state (donated, so the failed attempts must not have consumed it)
    # carries on.
    first = start_agent()
    port = first.port
    update = fj.buffer_callback("scale", S8, target=first.address, input_output_aliases={0: 0},
                                attributes={"alpha": 2.0}, retries=12, timeout=60)
    step = jax.jit(update, donate_argnums=0)
    x = step(jnp.ones(8, jnp.float32))
    np.testing.assert_array_equal(x, np.full(8, 2.0))
    assert first.stop() == 0
    # Without retries the call fails at once: nothing listens.
    lone = jax.jit(fj.buffer_callback("scale", S8, target=first.address,
                                      attributes={"alpha": 2.0}, retries=0, timeout=60))
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.block_until_ready(lone(jnp.ones(8, jnp.float32)))
    assert "UNAVAILABLE" in str(e.value)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # The step starts while nothing listens; the agent comes back meanwhile.
        later = pool.submit(start_agent, f"--listen=127.0.0.1:{port}")
        x = step(x)
        second = later.result(timeout=60)
    try:
        np.testing.assert_array_equal(x, np.full(8, 4.0))
        np.testing.assert_array_equal(step(x), np.full(8, 8.0))
    finally:
        assert second.stop() == 0


def test_retries_must_be_a_count():
    with pytest.raises(ValueError, match="retries must be an int >= 0"):
        fj.buffer_callback("copy", S8, target="127.0.0.1:1", retries=-1)


@pytest.mark.parametrize("busy_poll", [-0.001, 1.5, "fast", True, float("nan")])
def test_busy_poll_must_be_none_or_a_second_at_most(busy_poll):
    with pytest.raises(ValueError, match="busy_poll must be None or 0 to 1 seconds"):
        fj.buffer_callback("copy", S8, target="127.0.0.1:1", busy_poll=busy_poll)


@pytest.mark.parametrize("busy_poll", [None, 0, 0.0005, np.float32(0.0005), 1])
def test_busy_polling_calls_give_the_same_answers(agent, path, busy_poll):
    # None: the FFI path polls once the handler's calls are known to be
    # quick (from the second call on); the others as given.
    axpy = jax.jit(fj.buffer_callback("axpy", S8, target=agent.address,
                                      input_output_aliases={1: 0}, attributes={"alpha": 2.0},
                                      busy_poll=busy_poll))
    x = jnp.arange(8, dtype=jnp.float32)
    for i in range(20):
        np.testing.assert_array_equal(axpy(x, jnp.full(8, float(i), jnp.float32)),
                                      2 * np.arange(8) + i)
    # A call longer than the polling sleeps for the rest, and still ends.
    sleep = jax.jit(fj.buffer_callback("sleep", [], target=agent.address,
                                       attributes={"ms": 30}, has_side_effect=True,
                                       busy_poll=busy_poll))
    jax.block_until_ready(sleep())


@pytest.mark.parametrize("method", ["sequential", "expand_dims"])
def test_vmap(agent, path, method):
    f = fj.buffer_callback("scale", S8, target=agent.address, vmap_method=method,
                           attributes={"alpha": 3.0})
    xs = jnp.arange(24, dtype=jnp.float32).reshape(3, 8)
    np.testing.assert_array_equal(jax.vmap(f)(xs), 3 * np.asarray(xs))


def test_vmap_without_method_raises_as_jax_does(agent):
    ours = fj.buffer_callback("copy", [S8], target=agent.address)
    theirs = jax_buffer_callback(lambda ctx, out, x: None, [S8])
    xs = jnp.ones((3, 8))
    assert _jax_error(lambda: jax.vmap(ours)(xs)) == _jax_error(lambda: jax.vmap(theirs)(xs))


def test_jvp_raises_jax_message(agent):
    ours = fj.buffer_callback("sum", jax.ShapeDtypeStruct((), jnp.float32), target=agent.address)
    theirs = jax_buffer_callback(lambda ctx, out, x: None, jax.ShapeDtypeStruct((), jnp.float32))
    x = jnp.ones(3)
    assert _jax_error(lambda: jax.grad(ours)(x)) == _jax_error(lambda: jax.grad(theirs)(x))
    assert _jax_error(lambda: jax.grad(ours)(x))[0] is ValueError


def test_transpose_rule_raises_jax_message():
    with pytest.raises(ValueError, match="Buffer callbacks do not support transpose"):
        fj._transpose_rule()


def test_platform_checks_at_trace_time(agent):
    x = jnp.ones(8)
    for bad in ("tpu", "metal"):
        f = fj.buffer_callback("copy", [S8], target=agent.address, platform=bad)
        with pytest.raises(ValueError) as e:
            jax.jit(f).trace(x)
        assert str(e.value) == f"`buffer_callback` not supported on {bad} backend."
    f = fj.buffer_callback("copy", [S8], target=agent.address, platform=("cpu", "cuda"))
    with pytest.raises(NotImplementedError, match="^multi-platform lowering for buffer_callback"):
        jax.jit(f).trace(x)
    g = fj.buffer_callback("copy", [S8], target=agent.address, platform="CPU")
    np.testing.assert_array_equal(g(x)[0], x)


def test_a_build_without_the_ffi_path_warns_once(monkeypatch):
    # As a build made with FARCALL_WITHOUT_XLA_FFI=ON is: no FFI handlers.
    monkeypatch.setattr(fj, "_FFI_PLATFORMS", frozenset())
    monkeypatch.setattr(fj, "_WARNED_WITHOUT_FFI", False)
    spec = jax.ShapeDtypeStruct((2,), jnp.float32)
    with pytest.warns(RuntimeWarning, match="this farcall build has no XLA FFI path"):
        fj.buffer_callback("copy", spec, target="127.0.0.1:1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fj.buffer_callback("copy", spec, target="127.0.0.1:1")  # once per process


def test_cuda_lowers_to_the_ffi_custom_call_with_aliasing():
    if "cuda" not in fj._FFI_PLATFORMS:
        pytest.skip("SKIPPED: farcall was built without the CUDA toolkit: no cuda FFI handler")
    f = fj.buffer_callback("axpy", S8, target="127.0.0.1:1", input_output_aliases={1: 0},
                           attributes={"alpha": 2.0})
    x = jnp.ones(8, jnp.float32)
    text = jax.jit(f).trace(x, x).lower(lowering_platforms=("cuda",)).as_text()
    assert "stablehlo.custom_call @farcall_buffer_call" in text
    assert "operand_index = 1" in text and 'aliases = "1:0"' in text


def test_cuda_ffi_path_on_a_gpu(router):
    if "cuda" not in fj._FFI_PLATFORMS:
        pytest.skip("SKIPPED: farcall was built without the CUDA toolkit: no cuda FFI handler")
    try:
        device = jax.devices("cuda")[0]
    except RuntimeError as e:
        pytest.skip(f"SKIPPED: no JAX CUDA backend or device here ({e}); the cuda FFI path "
                    f"runs only on a GPU")
    axpy = fj.buffer_callback("axpy", S8, target=router.address, input_output_aliases={1: 0},
                              attributes={"alpha": 2.0})
    x = jax.device_put(jnp.arange(8, dtype=jnp.float32), device)
    y = jax.device_put(jnp.ones(8, jnp.float32), device)
    out = jax.jit(axpy, donate_argnums=1)(x, y)
    assert out.devices() == {device}
    np.testing.assert_array_equal(out, 2 * np.arange(8) + 1)


def test_the_ffi_handler_lets_xla_run_independent_work_while_a_call_is_out(py_agent, gate):
    """The CPU FFI handler is asynchronous: two independent remote calls in
    one jitted step are both in flight at once (each waits in py_gate until
    the test has seen both enter). A handler that held XLA's thread would
    never let the second start while the first is held. (Calls with side
    effects keep their program order, so these two have none.)"""
    fj.prefer_host_callback(False)
    # Two calls that differ (by an attribute), so that XLA keeps both.
    first, second = (fj.buffer_callback("py_gate", jax.ShapeDtypeStruct((), jnp.float32),
                                        target=py_agent.address, timeout=60,
                                        attributes={"n": n}) for n in (1, 2))

    def local(a):  # enough operations that XLA runs the step's parts concurrently
        for _ in range(5):
            a = jnp.tanh(a @ a)
        return a

    step = jax.jit(lambda x: (first(), second(), local(x)))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # XLA's CPU runtime runs a program of few operations (under about
        # 8), or of tiny buffers only, in order whatever the handler.
        x = jnp.full((64, 64), 0.01, jnp.float32)
        out = pool.submit(lambda: jax.block_until_ready(step(x)))
        gate.wait_entered()
        gate.wait_entered()  # times out (60 s) if the calls ran one after the other
        assert not out.done()
        gate.release_all()
        np.testing.assert_allclose(out.result(timeout=30)[2], local(x), rtol=1e-6)


@pytest.mark.parametrize("has_side_effect", [False, True])
def test_a_call_with_tensors_lets_the_steps_local_work_run_while_it_is_out(
        py_agent, gate, has_side_effect):
    """A call whose input is computed inside the step, and whose result the
    step returns, waits in its handler (py_gate_copy) until a host callback
    that comes after the step's local work lets it go. XLA gives such a
    call's operand slice to the local work's next output; a call made as one
    asynchronous custom call held that slice until it ended, so the local
    work waited for the call, the host callback never ran and the call timed
    out. Made in two halves (farcall.jax's _lower_in_halves), it does not."""
    fj.prefer_host_callback(False)
    call = fj.buffer_callback("py_gate_copy", jax.ShapeDtypeStruct((4,), jnp.float32),
                              target=py_agent.address, timeout=20,
                              has_side_effect=has_side_effect)

    def let_go(a):
        gate.wait_entered()  # the call is in its handler
        gate.release_all()
        return a

    def local(a):
        for _ in range(6):
            a = jnp.tanh(a @ a)
        return a

    def step(x, a):
        remote = call(jnp.full((4,), x[0] * 3))
        done = jax.pure_callback(let_go, jax.ShapeDtypeStruct(a.shape, a.dtype), local(a))
        return remote, done

    x, a = jnp.full((4,), 2.0, jnp.float32), jnp.full((200, 200), 0.001, jnp.float32)
    text = jax.jit(step).lower(x, a).as_text()
    assert "farcall_buffer_call_start" in text and "farcall_buffer_call_done" in text
    remote, done = jax.jit(step)(x, a)
    np.testing.assert_array_equal(remote, np.full(4, 6.0, np.float32))
    np.testing.assert_allclose(done, local(a), rtol=1e-6)


def test_calls_with_side_effects_run_one_after_the_other_in_halves_too(py_agent, gate):
    """Two calls with side effects in one step, each made in two halves, run
    one after the other in program order, as one custom call each did: the
    second does not reach its handler while the first is held there (XLA may
    start the second's first half before the first's second half; farcall
    holds the second until the first has ended)."""
    fj.prefer_host_callback(False)
    first, second = (fj.buffer_callback("py_gate_copy", jax.ShapeDtypeStruct((4,), jnp.float32),
                                        target=py_agent.address, timeout=30,
                                        has_side_effect=True, attributes={"n": n})
                     for n in (1, 2))

    def local(a):
        for _ in range(6):
            a = jnp.tanh(a @ a)
        return a

    step = jax.jit(lambda x, a: (first(x * 2), second(x * 3), local(a)))
    x, a = jnp.ones(4, jnp.float32), jnp.full((200, 200), 0.001, jnp.float32)
    assert step.lower(x, a).as_text().count("farcall_buffer_call_start") == 2
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        out = pool.submit(lambda: jax.block_until_ready(step(x, a)))
        gate.wait_entered()
        # Run together, the second would be in its handler within
        # milliseconds; in order, it is not until the first is let go.
        gate.server.settimeout(1.0)
        with pytest.raises(TimeoutError):
            gate.wait_entered()
        gate.server.settimeout(60)
        gate.release_all()
        gate.wait_entered()
        gate.release_all()
        got = out.result(timeout=30)
    np.testing.assert_array_equal(got[0], np.full(4, 2.0))
    np.testing.assert_array_equal(got[1], np.full(4, 3.0))


def test_the_two_halves_return_each_result_and_each_error(agent):
    """Calls made in two halves: several results of several dtypes (the
    handle rides in the first with room for it, and is overwritten), a
    result too small to hold it (one custom call then), and errors."""
    fj.prefer_host_callback(False)
    specs = [jax.ShapeDtypeStruct((), jnp.int8), jax.ShapeDtypeStruct((3,), jnp.int32),
             jax.ShapeDtypeStruct((2, 2), jnp.float32)]
    copy = fj.buffer_callback("copy", specs, target=agent.address)
    args = (jnp.int8(-7), jnp.array([1, 2, 3], jnp.int32), jnp.arange(4.0).reshape(2, 2))
    f = jax.jit(lambda a, b, c: copy(a + 0, b * 2, c + 1))
    text = f.lower(*args).as_text()
    assert "farcall_buffer_call_start" in text
    got = f(*args)
    assert got[0] == -7 and got[0].dtype == jnp.int8
    np.testing.assert_array_equal(got[1], [2, 4, 6])
    np.testing.assert_array_equal(got[2], np.arange(4.0).reshape(2, 2) + 1)
    small = fj.buffer_callback("copy", jax.ShapeDtypeStruct((), jnp.float32), target=agent.address)
    text = jax.jit(small).lower(jnp.float32(1)).as_text()
    assert "farcall_buffer_call_start" not in text and "farcall_buffer_call" in text
    assert jax.jit(small)(jnp.float32(2.5)) == 2.5
    missing = fj.buffer_callback("no_such_handler", S8, target=agent.address)
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.block_until_ready(jax.jit(lambda x: missing(x * 2))(jnp.ones(8)))
    assert "NOT_FOUND" in str(e.value)
    # The agent serves on, and a later call in halves is right.
    np.testing.assert_array_equal(jax.jit(lambda x: copy(x[0] + 0, x[1], x[2]))(args)[1],
                                  [1, 2, 3])


def test_a_traced_attribute_says_to_pass_it_as_an_argument(agent):
    # A learning rate traced under jit cannot be an attribute (fixed when the
    # call is traced, as in JAX's FFI): the error says what to do instead.
    def step(x, lr):
        f = fj.buffer_callback("scale", S8, target=agent.address, attributes={"alpha": lr})
        return f(x)

    with pytest.raises(TypeError) as e:
        jax.jit(step)(jnp.ones(8, jnp.float32), 0.5)
    assert "attribute 'alpha' is a traced value" in str(e.value)
    assert "as an argument" in str(e.value)
    # A constant bound outside the traced function works.
    np.testing.assert_array_equal(jax.jit(lambda x: step(x, 0.5))(jnp.ones(8, jnp.float32)),
                                  np.full(8, 0.5))


def _topk_ef_reference(grads, k):
    """py_topk_ef in process: the compressed steps and the last residual."""
    residual = np.zeros_like(grads[0])
    sent = []
    for g in grads:
        residual = residual + g
        keep = np.argsort(-np.abs(residual), kind="stable")[:k]
        o = np.zeros_like(residual)
        o[keep] = residual[keep]
        residual[keep] = 0
        sent.append(o)
    return sent, residual


def test_a_resident_is_a_keyword_buffer_that_stays_between_jitted_steps(path):
    py_a = start_python_agent()
    py_b = start_python_agent()
    router = start_router(py_a, py_b)
    try:
        client = farcall.Client(router.address)
        spec = jax.ShapeDtypeStruct((256,), jnp.float32)
        residual = client.put(np.zeros(256, np.float32))
        step = jax.jit(fj.buffer_callback("py_topk_ef", spec, target=router.address,
                                          has_side_effect=True, attributes={"k": 16},
                                          resident={"residual": residual}))
        rng = np.random.default_rng(7)
        grads = [rng.standard_normal(256).astype(np.float32) for _ in range(6)]
        want, want_residual = _topk_ef_reference(grads, 16)
        for g, w in zip(grads, want):
            np.testing.assert_allclose(np.asarray(step(jnp.asarray(g))), w, rtol=1e-6)
        np.testing.assert_allclose(client.get(residual), want_residual, rtol=1e-6)
        # Every update landed on the holder; the other agent holds nothing.
        holders = [farcall.Client(s.address).describe() for s in (py_a, py_b)]
        assert sorted(h.resident_count for h in holders) == [0, 1]
        assert [h.agent_id for h in holders if h.resident_count] == [residual.agent_id]
    finally:
        for s in (router, py_a, py_b):
            s.stop()


def test_resident_names_and_values_are_checked():
    with pytest.raises(TypeError, match="must be a farcall.Resident"):
        fj.buffer_callback("copy", S8, target="127.0.0.1:1", resident={"r": np.zeros(8)})
    r = farcall.Resident("res-x@a", (8,), np.float32)
    with pytest.raises(ValueError, match="identifiers"):
        fj.buffer_callback("copy", S8, target="127.0.0.1:1", resident={"not a name": r})
