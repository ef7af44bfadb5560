"""farcall.Client against a real CPU agent and router."""

import concurrent.futures
import time
import urllib.request

import jax
import ml_dtypes
import numpy as np
import pytest

import farcall
from conftest import ROUTER_BIN, Server

F32 = np.float32
ALL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
              "uint64", "float16", "float32", "float64", "complex64", "complex128",
              "bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3b11fnuz",
              "float8_e5m2fnuz", "float8_e4m3fnuz"]


@pytest.fixture(params=["agent", "router"])
def client(request):
    return farcall.Client(request.getfixturevalue(request.param).address)


def test_aliased_result_is_the_callers_array_updated_in_place(client):
    x = np.arange(8, dtype=F32)
    y = np.ones(8, dtype=F32)
    (out,) = client.call("axpy", x, y, results=[y], input_output_aliases={1: 0},
                         attributes={"alpha": 2.0})
    assert out is y
    assert np.shares_memory(out, y)
    np.testing.assert_array_equal(y, 2 * np.arange(8) + 1)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_contract_dtype_round_trips(client, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5)).astype(np.dtype(dtype))
    (out,) = client.call("copy", x, results=[x])
    assert out.dtype == x.dtype and out.shape == x.shape
    assert out.tobytes() == x.tobytes()


def test_results_take_spec_shape_dtype_struct_or_array(client):
    x = np.arange(6, dtype=ml_dtypes.bfloat16).reshape(2, 3)
    for spec in (farcall.Spec((2, 3), ml_dtypes.bfloat16),
                 jax.ShapeDtypeStruct((2, 3), jax.numpy.bfloat16), x):
        (out,) = client.call("copy", x, results=[spec])
        assert out.dtype == x.dtype and out.tobytes() == x.tobytes()


def test_rank0_and_several_results(client):
    x = np.arange(10, dtype=np.int64)
    (total,) = client.call("sum", x, results=[farcall.Spec((), np.int64)])
    assert total.shape == () and total == 45
    a, b = client.call("copy", x, x[::-1], results=[x, x])
    np.testing.assert_array_equal(b, x[::-1])  # a non-contiguous arg is sent dense


def test_args_by_buffer_protocol_and_dlpack(client):
    raw = bytearray(np.arange(4, dtype=F32).tobytes())
    (out,) = client.call("copy", memoryview(raw).cast("f"), results=[farcall.Spec((4,), F32)])
    np.testing.assert_array_equal(out, np.arange(4))
    j = jax.numpy.arange(4, dtype=F32)
    (out,) = client.call("scale", j, results=[j], attributes={"alpha": 3})
    np.testing.assert_array_equal(out, 3 * np.arange(4))


def test_read_only_or_non_contiguous_aliased_arg_is_refused_before_sending(client):
    y = np.ones(8, dtype=F32)
    y.flags.writeable = False
    with pytest.raises(ValueError, match=r"args\[0\] is aliased to results\[0\].*read-only"):
        client.call("scale", y, results=[y], input_output_aliases={0: 0})
    z = np.ones(16, dtype=F32)[::2]
    with pytest.raises(ValueError, match=r"not C-contiguous"):
        client.call("scale", z, results=[z], input_output_aliases={0: 0})


def test_errors_carry_code_message_and_jax_compatible_bases(client):
    x = np.ones(4, dtype=F32)
    with pytest.raises(farcall.InvalidArgumentError) as e:
        client.call("copy", x, results=[x], platform="TPU")
    assert isinstance(e.value, ValueError)
    assert e.value.code == "INVALID_ARGUMENT"
    assert e.value.message == "`buffer_callback` not supported on TPU backend."
    with pytest.raises(NotImplementedError, match="multi-platform lowering for buffer_callback"):
        client.call("copy", x, results=[x], platform=["cpu", "cuda"])
    with pytest.raises(farcall.NotFoundError) as e:
        client.call("no_such_handler", results=[])
    assert e.value.message.startswith(
        "handler 'no_such_handler' is not registered for platform 'cpu'. Registered there: ")
    assert ", copy, " in e.value.message
    with pytest.raises(farcall.DeadlineExceededError) as e:
        client.call("sleep", results=[], attributes={"ms": 5000}, timeout=0.2)
    assert isinstance(e.value, TimeoutError)
    with pytest.raises(farcall.PermissionDeniedError) as e:
        client.call("fail", results=[], attributes={"code": 7, "message": "not you"})
    assert str(e.value) == "PERMISSION_DENIED: not you"


def test_call_async_returns_futures(client):
    xs = [np.full(16, i, dtype=F32) for i in range(8)]
    futs = [client.call_async("scale", x, results=[x], attributes={"alpha": 2.0}) for x in xs]
    assert all(isinstance(f, concurrent.futures.Future) for f in futs)
    for i, f in enumerate(futs):
        np.testing.assert_array_equal(f.result(timeout=30)[0], np.full(16, 2 * i))
    bad = client.call_async("no_such_handler", results=[])
    with pytest.raises(farcall.NotFoundError):
        bad.result(timeout=30)


def test_the_gil_is_released_while_a_call_runs(py_agent, gate):
    client = farcall.Client(py_agent.address)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(client.call, "py_gate", results=[])
        gate.wait_entered()  # the other thread is inside its call now
        # This thread runs Python, and a whole call, while the other one is
        # in its call: it could not if that call held the GIL.
        (out,) = client.call("sum", np.ones(4, F32), results=[farcall.Spec((), F32)])
        assert out == 4
        assert not held.done()
        gate.release_all()
        assert held.result(timeout=30) == []


def test_future_callbacks_may_make_blocking_calls(agent):
    client = farcall.Client(agent.address)
    inner = concurrent.futures.Future()

    def on_done(f):
        try:
            inner.set_result(client.call("sum", f.result()[0], results=[farcall.Spec((), F32)]))
        except BaseException as e:  # noqa: BLE001
            inner.set_exception(e)

    x = np.arange(4, dtype=F32)
    client.call_async("copy", x, results=[x]).add_done_callback(on_done)
    assert inner.result(timeout=30)[0] == 6


def test_non_native_byte_order_is_sent_native(client):
    x = np.arange(5, dtype=">f4")
    (out,) = client.call("scale", x, results=[farcall.Spec((5,), ">f4")],
                         attributes={"alpha": 2.0})
    assert out.dtype == np.dtype("float32") and out.dtype.isnative
    np.testing.assert_array_equal(out, 2 * np.arange(5))
    with pytest.raises(ValueError, match="byte order"):
        client.call("scale", x, results=[x], input_output_aliases={0: 0})
    with pytest.raises(ValueError, match="does not fit in int64"):
        client.call("sum", x, results=[farcall.Spec((), F32)], attributes={"big": 1 << 70})


def test_large_calls_stream_both_ways(client):
    x = np.random.default_rng(1).integers(0, 255, size=9 << 20, dtype=np.uint8)
    out, info = client.call_with_info("copy", x, results=[x], rpc="stream")
    assert np.array_equal(out[0], x) and info.transport == "grpc" and info.rpc == "stream"
    out, info = client.call_with_info("copy", x, results=[x])
    assert np.array_equal(out[0], x) and info.transport in ("grpc", "shm")


def test_busy_polling_calls_give_the_same_answers_and_bad_values_are_refused(agent, router):
    for target in (agent.address, router.address):
        c = farcall.Client(target, busy_poll=0.001)
        x = np.arange(8, dtype=F32)
        for _ in range(10):
            (out,) = c.call("copy", x, results=[x])
            np.testing.assert_array_equal(out, x)
        # Longer than the polling: the thread sleeps for the rest.
        c.call("sleep", results=[], attributes={"ms": 20})
    for bad in (-1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"busy_poll must be 0 to 1 seconds; got "):
            farcall.Client(agent.address, busy_poll=bad)


def test_transport_ucx_moves_the_arrays_over_ucx(agent):
    if not farcall.Client(agent.address).describe().offers_ucx:
        pytest.skip("SKIPPED: this build of farcall has no UCX data plane")
    client = farcall.Client(agent.address, transport="ucx")
    x = np.random.default_rng(2).integers(0, 255, size=(5 << 20) + 3, dtype=np.uint8)
    out, info = client.call_with_info("copy", x, results=[x])
    assert np.array_equal(out[0], x) and info.transport == "ucx" and info.rpc == "unary"
    y = np.ones(1 << 20, dtype=F32)
    out, info = client.call_with_info("axpy", np.full(1 << 20, 2, F32), y, results=[y],
                                      input_output_aliases={1: 0}, attributes={"alpha": 3.0})
    assert out[0] is y and np.all(y == 7.0) and info.transport == "ucx"
    with pytest.raises(farcall.FailedPreconditionError, match="a UCX call goes as a unary Call"):
        client.call("copy", x, results=[x], rpc="stream")


def test_describe_agents_and_health_are_plain_objects(agent, router):
    info = farcall.Client(agent.address).describe()
    assert isinstance(info, farcall.AgentInfo)
    assert info.platform == "cpu" and "axpy" in [h.name for h in info.handlers]
    entries = farcall.Client(router.address).agents()
    assert [e.address for e in entries] == [agent.address]
    assert entries[0].health == "SERVING" and entries[0].info.agent_id == info.agent_id
    assert farcall.Client(agent.address).health() == "SERVING"
    with pytest.raises(farcall.UnavailableError):
        farcall.Client("127.0.0.1:1").health(timeout=2)


def test_a_router_names_the_agent_and_via_router_sends_the_arrays_through_it(agent, router):
    x = np.arange(8, dtype=F32)
    out, info = farcall.Client(router.address).call_with_info("copy", x, results=[x])
    assert np.array_equal(out[0], x)
    assert not info.via_router and f"-agent-{agent.address.rsplit(':', 1)[1]}-" in info.agent_id
    out, info = farcall.Client(router.address, via_router=True).call_with_info(
        "copy", x, results=[x])
    assert np.array_equal(out[0], x) and info.via_router and info.transport != "shm"
    _, info = farcall.Client(agent.address).call_with_info("copy", x, results=[x])
    assert not info.via_router


def test_shared_array_is_not_copied(agent):
    client = farcall.Client(agent.address)
    s = farcall.shared_array((1024,), F32, client)
    s[:] = 1.5
    out, info = client.call_with_info("scale", s, results=[s], input_output_aliases={0: 0},
                                      attributes={"alpha": 2.0})
    assert info.transport == "shm"
    assert out[0] is s and np.all(s == 3.0)


def test_shared_array_needs_a_same_host_agent(router):
    with pytest.raises(farcall.FailedPreconditionError):
        farcall.shared_array((4,), F32, farcall.Client(router.address))


def test_the_client_imports_without_jax():
    import subprocess
    import sys
    code = ("import sys, farcall, numpy as np\n"
            "assert 'jax' not in sys.modules and 'jaxlib' not in sys.modules, sorted(sys.modules)\n"
            "print(farcall.Spec((2,), np.float32))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_a_restarted_agent_is_reached_again_within_a_second():
    """An agent that restarts on its port is reached again within about a
    second of serving (reconnection is retried at most a second apart, not
    gRPC's back-off of up to 2 minutes); a call with wait_for_ready=True
    waits for it within its timeout instead of failing at once."""
    from conftest import AGENT_BIN, Server, start_agent
    import concurrent.futures
    import time

    first = start_agent()
    port = first.port
    x = np.arange(4, dtype=np.float32)
    plain = farcall.Client(first.address, transport="grpc")
    waiting = farcall.Client(first.address, transport="grpc", wait_for_ready=True)
    for c in (plain, waiting):
        np.testing.assert_array_equal(c.call("copy", x, results=[x])[0], x)
    first.stop()
    with pytest.raises(farcall.UnavailableError):
        plain.call("copy", x, results=[x], timeout=10)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # Issued while the agent is away; it waits instead of failing.
        pending = pool.submit(waiting.call, "copy", x, results=[x], timeout=60)
        # The agent is away long enough for gRPC's own back-off to grow past
        # a second (the outage, not a wait for a condition).
        time.sleep(6)
        assert not pending.done()
        second = Server([AGENT_BIN, f"--listen=127.0.0.1:{port}"])
        served = time.monotonic()
        try:
            np.testing.assert_array_equal(pending.result(timeout=30)[0], x)
            assert time.monotonic() - served < 2.0
        finally:
            second.stop()


def test_a_router_says_when_an_agents_entry_names_no_agent():
    # A mistyped name: the router serves, says so in its log, and its
    # callers get the contract's UNAVAILABLE.
    # Its series stays, at 0, for the alert on it.
    s = Server([ROUTER_BIN, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                "--agents=dns:///no-such-agent.invalid:50051"])
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{s.metrics_port}/metrics",
                                    timeout=10) as r:
            page = r.read().decode()
        assert ('farcall_router_agent_source_addresses{source="dns:///no-such-agent.invalid:50051"}'
                ' 0') in page, page
        with pytest.raises(farcall.UnavailableError) as e:
            farcall.Client(s.address).call("copy", np.ones(4, F32),
                                           results=[farcall.Spec((4,), F32)],
                                           rpc="unary", timeout=10)
        assert e.value.message == "no live agent serves platform 'cpu'."
    finally:
        assert s.stop() == 0
    assert ("--agents entry 'dns:///no-such-agent.invalid:50051' cannot be resolved" in s.output()
            and "calls it should serve get UNAVAILABLE until it names an agent." in s.output()), \
        s.output()


def _wait_until_holding(client, calls, within=30.0):
    """Waits, bounded, until the agent says it holds `calls` calls."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if client.describe().inflight_calls == calls:
            return True
    return False


def test_cancelling_a_future_stops_its_call_and_the_handler_sees_it(py_agent):
    client = farcall.Client(py_agent.address)
    fut = client.call_async("py_until_cancelled", results=[], timeout=30)
    assert _wait_until_holding(client, 1)
    assert fut.cancel()
    assert fut.cancelled() and fut.done()
    with pytest.raises(concurrent.futures.CancelledError):
        fut.result(timeout=0)
    # The agent ends the call, and the handler's ctx.cancelled() turns true
    # long before the call's 30 s timeout.
    assert _wait_until_holding(client, 0)
    end = time.monotonic() + 30
    waits = np.full(8, -1.0)
    while time.monotonic() < end and waits[0] < 0:
        (waits,) = client.call("py_cancel_waits", results=[farcall.Spec((8,), np.float64)])
    assert 0 <= waits[0] < 10, waits
    # A finished future cannot be cancelled.
    done = client.call_async("py_affine", np.zeros(2, F32), results=[farcall.Spec((2,), F32)])
    done.result(timeout=30)
    assert not done.cancel()


def test_close_stops_calls_in_flight_and_refuses_new_ones(agent):
    with farcall.Client(agent.address) as client:
        fut = client.call_async("sleep", results=[], attributes={"ms": 30000}, timeout=60)
        assert _wait_until_holding(client, 1)
        client.close()
        with pytest.raises(farcall.CancelledError) as e:
            fut.result(timeout=10)
        assert e.value.message == "the caller stopped the call."
        with pytest.raises(farcall.FailedPreconditionError) as e:
            client.call("sum", np.ones(4, F32), results=[farcall.Spec((), F32)])
        assert e.value.message == "this client is closed."
    # Leaving the block closed it again: nothing more happens.
