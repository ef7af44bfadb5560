"""python -m farcall.agent: Python handlers with JAX's callback signature."""

import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import ml_dtypes
import numpy as np
import pytest

import farcall

from conftest import AGENT_BIN, Server, start_python_agent

F32 = np.float32


@pytest.fixture(params=["py_agent", "py_router"])
def client(request):
    return farcall.Client(request.getfixturevalue(request.param).address)


def test_serves_builtins_and_python_handlers(py_agent):
    info = farcall.Client(py_agent.address).describe()
    names = {h.name: h.source for h in info.handlers}
    assert names["axpy"] == "builtin"
    assert names["py_affine"].startswith("python:") and "handlers_for_test.py" in names["py_affine"]


def test_python_handler_results(client):
    x = np.arange(6, dtype=F32).reshape(2, 3)
    (out,) = client.call("py_affine", x, results=[x])
    np.testing.assert_array_equal(out, 2 * x + 1)
    b = np.arange(4, dtype=ml_dtypes.bfloat16)
    (out,) = client.call("py_affine", b, results=[b])
    assert out.dtype == b.dtype and np.all(out.astype(F32) == 2 * np.arange(4) + 1)
    total, neg = client.call("py_stats", x, results=[farcall.Spec((), F32), x])
    assert total.shape == () and total == 15
    np.testing.assert_array_equal(neg, -x)


def test_aliased_python_handler_updates_in_place(client):
    y = np.arange(5, dtype=np.int32)
    (out,) = client.call("py_double_in_place", y, results=[y], input_output_aliases={0: 0})
    assert out is y
    np.testing.assert_array_equal(y, 2 * np.arange(5))


def test_buffers_behave_like_jax_buffers(client):
    x = np.ones((2, 3), F32)
    (checks,) = client.call("py_inspect", x, results=[farcall.Spec((9,), np.int32)])
    assert checks.tolist() == [1] * 9
    (stale,) = client.call("py_stale_buffer", results=[farcall.Spec((), np.int32)])
    assert stale == 1


def test_an_array_kept_past_its_call_never_shows_another_calls_bytes(py_agent):
    """A handler keeps np.asarray(x) of a 4 MiB call of 7s; during the next
    call, of 42s, the kept array must still read 7s: the memory it views is
    held for it, and went to no other call."""
    client = farcall.Client(py_agent.address, transport="grpc")
    spec = [farcall.Spec((2,), np.uint8)]
    n = 4 << 20
    # Each answer: [the array kept one call ago, this call's], as read now.
    answers = [client.call("py_keep_array", np.full(n, v, np.uint8), results=spec)[0].tolist()
               for v in (7, 42, 42, 9)]
    assert answers[1:] == [[7, 42], [42, 42], [42, 9]]


def test_a_raising_handlers_traceback_reaches_the_caller(client):
    """The caller sees the handler's traceback, as JAX in-process shows it:
    in Error.remote_traceback and after the message in str(error); the
    message itself is the contract's."""
    with pytest.raises(farcall.InternalError) as e:
        client.call("py_raises", results=[])
    assert e.value.message == "KeyError: 'no such key'"
    tb = e.value.remote_traceback
    assert tb.startswith("Traceback (most recent call last):"), tb
    assert 'handlers_for_test.py", line 53, in raises' in tb, tb
    assert tb.rstrip().endswith("KeyError: 'no such key'"), tb
    assert "farcall/agent.py" not in tb  # the agent's own frames are left out
    text = str(e.value)
    assert text.splitlines()[0] == "INTERNAL: KeyError: 'no such key'"
    assert tb in text
    # A farcall.Error a handler raises keeps its code, and gets its traceback.
    with pytest.raises(farcall.FailedPreconditionError) as e:
        client.call("py_raises_farcall_error", results=[])
    assert "in raises_farcall_error" in e.value.remote_traceback
    # An error that is not a handler's carries none.
    with pytest.raises(farcall.NotFoundError) as e:
        client.call("no_such_handler", results=[])
    assert e.value.remote_traceback is None


def test_pip_install_puts_the_binaries_on_path():
    """`pip install ./python` (scripts/build.sh does it into .venv) puts the
    CLI, the agent and the router beside the interpreter."""
    bindir = os.path.dirname(sys.executable)
    for name in ("farcall", "farcall-agent", "farcall-router"):
        path = os.path.join(bindir, name)
        assert os.access(path, os.X_OK), f"{name} is not in {bindir}"
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        assert name in out.stdout + out.stderr, (name, out.stdout, out.stderr)
    out = subprocess.run([sys.executable, "-m", "farcall.agent", "-h"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0
    assert "--handlers" in out.stdout and "--python_threads" in out.stdout


def test_return_value_and_exceptions_fail_the_call_and_the_agent_serves_on(client):
    with pytest.raises(farcall.InternalError) as e:
        client.call("py_returns_value", results=[])
    assert "buffer_callback callback must not return any values." in e.value.message
    with pytest.raises(farcall.InternalError) as e:
        client.call("py_raises", results=[])
    assert e.value.message == "KeyError: 'no such key'"
    with pytest.raises(farcall.FailedPreconditionError) as e:
        client.call("py_raises_farcall_error", results=[])
    assert e.value.message == "not ready yet"
    (out,) = client.call("py_affine", np.zeros(2, F32), results=[farcall.Spec((2,), F32)])
    np.testing.assert_array_equal(out, [1, 1])


def test_a_held_python_handler_blocks_no_native_handler(gate):
    # One worker for native handlers, one thread for Python ones: a Python
    # call that never finishes must leave the native worker free.
    s = start_python_agent("--workers=1", "--python_threads=1")
    try:
        client = farcall.Client(s.address)
        held = client.call_async("py_gate", results=[])
        gate.wait_entered()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            natives = [pool.submit(client.call, "sum", np.ones(8, F32),
                                   results=[farcall.Spec((), F32)]) for _ in range(8)]
            assert [f.result(timeout=30)[0] for f in natives] == [8] * 8
        assert not held.done()
        gate.release_all()
        assert held.result(timeout=30) == []
    finally:
        gate.release_all()
        assert s.stop() == 0, s.output()


def test_a_call_cut_by_the_drain_is_answered_and_logged(gate):
    """SIGTERM with a call held in its handler past --drain_seconds: the
    call is cut, its caller gets the contract's UNAVAILABLE (reason
    DRAIN_CUT: it may have run, so a call with side effects is not sent
    again), and the agent says so in one warning line naming the count and
    the flags to size."""
    s = start_python_agent("--drain_seconds=0.5")
    try:
        client = farcall.Client(s.address)
        held = client.call_async("py_gate", results=[], has_side_effect=True)
        gate.wait_entered()
        s.proc.send_signal(signal.SIGTERM)
        with pytest.raises(farcall.UnavailableError) as e:
            held.result(timeout=30)
        assert e.value.message == (
            "this agent's drain for shutdown ran out (--drain_seconds=0.5) while the call ran: "
            "it was cut, and its handler may have run in part."), e.value
        assert not e.value.did_not_run
    finally:
        gate.release_all()
        s.stop()
    assert ("the drain ended after --drain_seconds=0.5 with 1 call still running: cut"
            in s.output()), s.output()
    assert "--max_call_seconds" in s.output()


def test_a_tenant_holding_every_python_thread_does_not_stall_another(tmp_path, gate):
    # One Python thread, held by tenant c's call; tenant b's call gets a
    # spare thread at once instead of waiting for c's to end. Without
    # spares it waits.
    b_token, c_token = "b" * 32, "c" * 32
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{b_token} * tenant=b\n{c_token} * tenant=c\n")
    for spares, b_waits in (("-1", False), ("0", True)):
        s = start_python_agent("--python_threads=1", f"--tokens_file={tokens}",
                               f"--tenant_spare_workers={spares}")
        try:
            c = farcall.Client(s.address, token=c_token)
            b = farcall.Client(s.address, token=b_token)
            held = c.call_async("py_gate", results=[])
            gate.wait_entered()
            queued = c.call_async("py_affine", np.zeros(2, F32), results=[farcall.Spec((2,), F32)])
            mine = b.call_async("py_affine", np.zeros(2, F32), results=[farcall.Spec((2,), F32)])
            if b_waits:
                with pytest.raises(concurrent.futures.TimeoutError):
                    mine.result(timeout=0.5)
            else:
                np.testing.assert_array_equal(mine.result(timeout=10)[0], [1, 1])
                assert not held.done()
            gate.release_all()
            assert held.result(timeout=30) == []
            np.testing.assert_array_equal(queued.result(timeout=30)[0], [1, 1])
            np.testing.assert_array_equal(mine.result(timeout=30)[0], [1, 1])
        finally:
            gate.release_all()
            assert s.stop() == 0, s.output()


def test_handlers_see_their_deadline_and_stop_when_cancelled(client):
    left, cancelled = client.call("py_deadline_left", timeout=5,
                                  results=[farcall.Spec((), np.float64), farcall.Spec((), np.bool_)])
    # gRPC sends the timeout, which the agent counts from the call's arrival.
    assert 3 < left <= 5.5
    assert not cancelled
    # A handler that waits for ctx.cancelled() stops once the caller's 0.5 s
    # timeout passes, not at its own 60 s limit.
    with pytest.raises(farcall.DeadlineExceededError):
        client.call("py_until_cancelled", timeout=0.5, results=[])
    deadline = time.monotonic() + 30
    while True:
        (waits,) = client.call("py_cancel_waits", results=[farcall.Spec((4,), np.float64)])
        if waits[0] >= 0 or time.monotonic() > deadline:
            break
    assert 0.3 < waits[0] < 5, waits


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.mark.parametrize("binary", ["agent", "python_agent"])
def test_connections_that_send_nothing_do_not_blind_the_metrics_port(binary):
    """32 connections to the metrics port that never finish a request (the
    attack that kept 3 scrapes out of an embedded server with 4 threads and
    a 10 s request timeout): scrapes from another address still succeed,
    each at once."""
    flags = ("--metrics_listen=127.0.0.1:0",)
    s = (Server([AGENT_BIN, "--listen=127.0.0.1:0", *flags]) if binary == "agent"
         else start_python_agent(*flags))
    idle = []
    try:
        for _ in range(32):
            c = socket.socket()
            c.bind(("127.0.0.2", 0))
            c.connect(("127.0.0.1", s.metrics_port))
            idle.append(c)
        for _ in range(3):
            with urllib.request.urlopen(f"http://127.0.0.1:{s.metrics_port}/metrics",
                                        timeout=3) as r:
                assert b"farcall_build_info" in r.read()
    finally:
        for c in idle:
            c.close()
        s.stop()


def test_a_quick_call_is_served_behind_eight_stuck_handlers():
    # Two Python threads; eight calls sleep 5 s past their 1 s deadline.
    s = start_python_agent("--python_threads=2", "--python_max_threads=16",
                           "--metrics_listen=127.0.0.1:0")
    try:
        client = farcall.Client(s.address)
        stuck = [client.call_async("py_slow", np.array(5.0), results=[], timeout=1)
                 for _ in range(8)]
        for f in stuck:
            with pytest.raises(farcall.DeadlineExceededError):
                f.result(timeout=30)
        start = time.monotonic()
        (out,) = client.call("py_affine", np.zeros(2, F32), results=[farcall.Spec((2,), F32)])
        assert time.monotonic() - start < 2
        np.testing.assert_array_equal(out, [1, 1])
        # The count follows the pool's own look at its threads: read until it
        # shows the two sleeping past their deadline (bounded: they sleep 5 s).
        deadline = time.monotonic() + 3
        while True:
            held = [line for line in _scrape(s.metrics_port).splitlines()
                    if line.startswith("farcall_agent_python_stuck_handlers ")]
            if (held and float(held[0].split()[1]) >= 2) or time.monotonic() > deadline:
                break
        assert held and float(held[0].split()[1]) >= 2, held
    finally:
        assert s.stop() == 0, s.output()  # once the sleeps end


def test_odd_errors_from_handlers_stay_errors(client):
    with pytest.raises(farcall.InvalidArgumentError) as e:
        client.call("py_raises_odd_errors", np.array(0), results=[])
    assert e.value.message == "42"
    with pytest.raises(farcall.InternalError) as e:
        client.call("py_raises_odd_errors", np.array(1), results=[])
    assert e.value.message == "claims success"


def test_handlers_see_the_agent_modules_classes(client):
    (out,) = client.call("py_types", results=[farcall.Spec((2,), np.int32)])
    assert out.tolist() == [1, 1]


def test_bad_handler_file_and_bad_flags_fail_at_start(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('broken handlers file')\n")
    with pytest.raises(RuntimeError, match="broken handlers file"):
        start_python_agent(handlers=str(bad))
    with pytest.raises(RuntimeError, match="not supported on tpu backend"):
        start_python_agent("--platform=tpu")
    clash = tmp_path / "clash.py"
    clash.write_text("import farcall\n@farcall.handler('copy')\ndef c(ctx, out): pass\n")
    with pytest.raises(RuntimeError, match="handler 'copy' for platform 'cpu'.*already registered"):
        start_python_agent(handlers=str(clash))


def test_sigterm_stops_the_agent_cleanly():
    s = start_python_agent()
    assert farcall.Client(s.address).health() == "SERVING"
    assert s.stop() == 0
    assert "shutting down" in s.output()


def test_a_call_with_side_effects_runs_once_per_call_id(client):
    one = np.zeros(1, np.int64)

    def count(call_id, rpc="unary"):
        (out,) = client.call("py_count", results=[one], has_side_effect=True,
                             call_id=call_id, rpc=rpc)
        return int(out[0])

    # Ids of this test's own: the agent outlives it (and its other param).
    unique = uuid.uuid4().hex
    first = count(f"retry-me-{unique}")
    assert count(f"retry-me-{unique}") == first  # the first answer, replayed
    assert count(f"another-{unique}") == first + 1
    assert count(None) == first + 2  # a fresh id each time
    assert count(None) == first + 3
    # A streamed answer is not kept: its repeat is refused, never run.
    n = count(f"streamed-{unique}", rpc="stream")
    with pytest.raises(farcall.AlreadyExistsError, match="already ran on this agent"):
        count(f"streamed-{unique}", rpc="stream")
    assert count(None) == n + 1


def _affine_as(s, token):
    return farcall.Client(s.address, token=token).call(
        "py_affine", np.zeros(2, F32), results=[farcall.Spec((2,), F32)])


def _reload_tokens(s, tokens, text, new_token):
    """Replaces the tokens file with `text` as Kubernetes does (a rename),
    sends SIGHUP, and returns once `new_token` is taken (bounded: 10 s)."""
    tokens.with_suffix(".new").write_text(text)
    os.rename(tokens.with_suffix(".new"), tokens)
    s.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while True:
        try:
            return _affine_as(s, new_token)
        except farcall.UnauthenticatedError:
            assert time.monotonic() < deadline, "the new token was not taken within 10 s"


def _python_agent_with_tokens(tmp_path, text):
    tokens = tmp_path / "tokens"
    tokens.write_text(text)
    return start_python_agent(f"--tokens_file={tokens}"), tokens


def test_the_python_agent_reloads_its_tokens_on_sighup(tmp_path):
    old, new = "o" * 32, "n" * 32
    s, tokens = _python_agent_with_tokens(tmp_path, f"{old} *\n")
    try:
        _affine_as(s, old)
        _reload_tokens(s, tokens, f"{new} *\n", new)
        with pytest.raises(farcall.UnauthenticatedError):
            _affine_as(s, old)
    finally:
        assert s.stop() == 0, s.output()
    assert "tokens reloaded" in s.output()


def test_a_tokens_file_naming_a_handler_the_agent_lacks_is_warned_of(tmp_path):
    # At start, and again on a reload that brings another such name.
    first, second = "f" * 32, "s" * 32
    s, tokens = _python_agent_with_tokens(tmp_path, f"{first} py_affine,py_afine\n")
    try:
        _reload_tokens(s, tokens, f"{second} py_affine,no_such_handler\n", second)
    finally:
        assert s.stop() == 0, s.output()
    out = s.output()
    for name in ("py_afine", "no_such_handler"):
        assert (f"names handler '{name}', which this agent does not serve (a typo, or a handler "
                f"it lacks): no token may call it here.") in out, out
    assert "names handler 'py_affine'" not in out


def _calls_counted(port: int, handler: str, code: str) -> float:
    for line in _scrape(port).splitlines():
        if (line.startswith("farcall_agent_calls_total{") and f'handler="{handler}"' in line
                and f'code="{code}"' in line):
            return float(line.split()[-1])
    return 0.0


def test_a_handler_that_ends_after_its_callers_deadline_is_counted_as_the_caller_saw_it():
    # The caller got DEADLINE_EXCEEDED; the handler returned normally later.
    # The agent counts the call as the caller saw it, not as OK.
    s = start_python_agent("--metrics_listen=127.0.0.1:0")
    try:
        client = farcall.Client(s.address)
        with pytest.raises(farcall.DeadlineExceededError) as e:
            client.call("py_slow", np.array(0.6), results=[], timeout=0.2)
        # The deadline error names the handler, the timeout and the phase.
        assert "the call of 'py_slow' on cpu did not end within its timeout of 200ms" in str(e.value)
        assert "waiting for its answer" in str(e.value)
        with pytest.raises(farcall.DeadlineExceededError) as e:
            client.call("py_slow", np.array(0.6), results=[], timeout=0.2, rpc="stream")
        assert "it was waiting for the handler's answer" in str(e.value)
        # Both handlers end about 0.4 s later: bounded wait for the count.
        deadline = time.monotonic() + 20
        while (_calls_counted(s.metrics_port, "py_slow", "DEADLINE_EXCEEDED") < 2
               and time.monotonic() < deadline):
            pass  # each look is one scrape of /metrics
        assert _calls_counted(s.metrics_port, "py_slow", "DEADLINE_EXCEEDED") == 2
        assert _calls_counted(s.metrics_port, "py_slow", "OK") == 0
    finally:
        assert s.stop() == 0, s.output()
