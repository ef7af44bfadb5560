"""Resident arrays: Client.put/get/delete, calls that name them, sticky
routing through a router with two agents, a lost holder, another principal,
the TTL and the quota."""

from __future__ import annotations

import secrets
import time

import numpy as np
import pytest

import farcall
from conftest import start_agent, start_router


def axpy_step(client, x, state, alpha=0.5, **kw):
    """state = alpha * x + state, on the agent; returns the call's result and info."""
    (out,), info = client.call_with_info("axpy", x, state, results=[state],
                                         input_output_aliases={1: 0},
                                         attributes={"alpha": alpha}, **kw)
    return out, info


def test_put_get_delete_round_trip(agent):
    c = farcall.Client(agent.address)
    x = np.arange(1000, dtype=np.float32).reshape(10, 100)
    r = c.put(x)
    assert isinstance(r, farcall.Resident)
    assert (r.shape, r.dtype, r.platform) == ((10, 100), np.dtype(np.float32), "cpu")
    assert r.agent_id == c.describe().agent_id
    assert r.handle.split("-")[1] not in repr(r)  # the secret is never shown
    np.testing.assert_array_equal(c.get(r), x)
    info = c.describe()
    assert info.resident_count >= 1 and info.resident_bytes >= x.nbytes
    c.delete(r)
    with pytest.raises(farcall.NotFoundError, match="does not hold for this caller"):
        c.get(r)


def test_an_aliased_resident_is_updated_on_the_agent_and_comes_back_as_itself(agent):
    c = farcall.Client(agent.address)
    state = np.zeros(4096, dtype=np.float32)
    r = c.put(state)
    want = state.copy()
    for step in range(5):
        g = np.full(4096, step, dtype=np.float32)
        out, info = axpy_step(c, g, r)
        assert out is r
        assert info.transport == "grpc"
        want = 0.5 * g + want
    np.testing.assert_array_equal(c.get(r), want)
    c.delete(r)


def test_a_kept_result_stays_as_a_new_resident(agent):
    c = farcall.Client(agent.address)
    x = np.arange(16, dtype=np.float64)
    (r,) = c.call("scale", x, results=[x], attributes={"alpha": 3.0}, keep_results=[0])
    assert isinstance(r, farcall.Resident) and r.shape == (16,)
    (total,) = c.call("sum", r, results=[farcall.Spec((), np.float64)])
    assert total == 3.0 * x.sum()
    a, b = c.get_many([r, r])
    np.testing.assert_array_equal(a, 3.0 * x)
    np.testing.assert_array_equal(b, 3.0 * x)
    c.delete(r)


def test_a_resident_of_another_spec_is_refused(agent):
    c = farcall.Client(agent.address)
    r = c.put(np.zeros(8, dtype=np.float32))
    wrong = farcall.Resident(r.handle, (4,), np.float32, "cpu")
    with pytest.raises(farcall.InvalidArgumentError, match=r"args\[0\] names resident .* "
                       r"of float32\[8\], but the call declares it float32\[4\]"):
        c.get(wrong)
    c.delete(r)


def test_shared_memory_carries_the_other_tensors_but_never_keeps(agent):
    c = farcall.Client(agent.address, transport="shm")
    x = np.arange(64 << 10, dtype=np.float32)
    r = farcall.Client(agent.address).put(x)
    out, info = axpy_step(c, np.ones_like(x), r)
    assert out is r and info.transport == "shm"
    np.testing.assert_array_equal(c.get(r), 0.5 + x)
    with pytest.raises(farcall.FailedPreconditionError,
                       match="keeps results as resident arrays sends its other tensors over gRPC"):
        c.put(x)


@pytest.fixture
def two_agents():
    a, b = start_agent(), start_agent()
    router = start_router(a, b)
    yield a, b, router
    for s in (router, a, b):
        s.stop()


def test_sticky_routing_sends_every_update_to_the_holder(two_agents):
    a, b, router = two_agents
    c = farcall.Client(router.address)
    table = np.zeros((64, 16), dtype=np.float32)
    r = c.put(table)
    want = table.copy()
    for step in range(20):
        g = np.random.default_rng(step).standard_normal((64, 16)).astype(np.float32)
        out, info = axpy_step(c, g, r, alpha=-0.1, has_side_effect=True)
        assert out is r
        assert info.agent_id == r.agent_id
        assert not info.via_router  # the lookaside went straight to the holder
        want = np.float32(-0.1) * g + want
    np.testing.assert_allclose(c.get(r), want, rtol=1e-6)
    # Through the router's own path too.
    via = farcall.Client(router.address, via_router=True)
    out, info = axpy_step(via, np.zeros((64, 16), np.float32), r)
    assert info.via_router and info.agent_id == r.agent_id
    # The other agent never held it.
    holder = [s for s in (a, b) if farcall.Client(s.address).describe().agent_id == r.agent_id]
    other = [s for s in (a, b) if s is not holder[0]][0]
    assert farcall.Client(other.address).describe().resident_count == 0
    assert farcall.Client(holder[0].address).describe().resident_count == 1


def test_residents_on_two_agents_in_one_call_name_both(two_agents):
    a, b, router = two_agents
    ra = farcall.Client(a.address).put(np.zeros(8, dtype=np.float32))
    rb = farcall.Client(b.address).put(np.zeros(8, dtype=np.float32))
    c = farcall.Client(router.address)
    for validate in (True, False):  # the client's own check, and the router's
        with pytest.raises(farcall.InvalidArgumentError) as e:
            c.call("add", ra, rb, results=[ra], validate=validate)
        assert ra.agent_id in str(e.value) and rb.agent_id in str(e.value)


def test_a_lost_holder_is_a_typed_not_found_never_fresh_memory(two_agents):
    a, b, router = two_agents
    c = farcall.Client(router.address)
    r = c.put(np.ones(8, dtype=np.float32))
    holder = a if farcall.Client(a.address).describe().agent_id == r.agent_id else b
    snapshot = c.get(r)
    holder.stop()
    g = np.ones(8, dtype=np.float32)
    # The router may still list the holder until its next probe: the call
    # fails either way, and never runs on the other agent.
    deadline = time.monotonic() + 30
    while True:
        with pytest.raises(farcall.Error) as e:
            axpy_step(c, g, r, timeout=5)
        if isinstance(e.value, farcall.ResidentLostError) or time.monotonic() > deadline:
            break
    assert isinstance(e.value, farcall.ResidentLostError), e.value
    assert e.value.code == "NOT_FOUND" and "lost with its agent" in e.value.message
    # The recipe: restore from the snapshot, and go on.
    r2 = c.put(snapshot)
    assert r2.agent_id != r.agent_id
    axpy_step(c, g, r2)
    np.testing.assert_array_equal(c.get(r2), snapshot + 0.5)


def test_a_handle_from_before_a_restart_is_lost():
    first = start_agent("--agent_id=same-agent")
    r = farcall.Client(first.address).put(np.zeros(4, dtype=np.float32))
    first.stop()
    second = start_agent("--agent_id=same-agent")
    try:
        with pytest.raises(farcall.ResidentLostError, match="restarted"):
            farcall.Client(second.address).get(r)
    finally:
        second.stop()


def test_another_principal_gets_the_same_not_found_as_an_unknown_handle(tmp_path):
    alice, bob = secrets.token_hex(16), secrets.token_hex(16)
    (tmp_path / "tokens").write_text(f"{alice} *\n{bob} *\n")
    s = start_agent(f"--tokens_file={tmp_path / 'tokens'}")
    try:
        ca = farcall.Client(s.address, token=alice)
        cb = farcall.Client(s.address, token=bob)
        r = ca.put(np.arange(4, dtype=np.float32))
        forged = farcall.Resident(r.handle[:4] + ("0" if r.handle[4] != "0" else "1")
                                  + r.handle[5:], r.shape, r.dtype)
        with pytest.raises(farcall.NotFoundError) as theirs:
            cb.get(r)
        with pytest.raises(farcall.NotFoundError) as unknown:
            ca.get(forged)
        assert theirs.value.message.split(",", 1)[1] == unknown.value.message.split(",", 1)[1]
        with pytest.raises(farcall.NotFoundError):
            cb.delete(r)
        np.testing.assert_array_equal(ca.get(r), np.arange(4, dtype=np.float32))
    finally:
        s.stop()


def test_the_quota_per_principal_is_enforced_before_memory(tmp_path):
    s = start_agent("--resident_bytes_per_principal=1024")
    try:
        c = farcall.Client(s.address)
        r = c.put(np.zeros(200, dtype=np.float32))  # 800 bytes
        with pytest.raises(farcall.ResourceExhaustedError,
                           match="--resident_bytes_per_principal=1024"):
            c.put(np.zeros(200, dtype=np.float32))
        c.delete(r)
        c.delete(c.put(np.zeros(200, dtype=np.float32)))
        assert c.describe().resident_count == 0
    finally:
        s.stop()


def test_the_ttl_frees_an_unused_resident():
    s = start_agent()
    try:
        c = farcall.Client(s.address)
        r = c.put(np.zeros(8, dtype=np.float32), ttl=0.2)
        # The agent's reaper looks once a second.
        deadline = time.monotonic() + 10
        while c.describe().resident_count and time.monotonic() < deadline:
            time.sleep(0.1)
        assert c.describe().resident_count == 0
        with pytest.raises(farcall.NotFoundError, match="expired"):
            c.get(r)
    finally:
        s.stop()


@pytest.mark.parametrize("side_effect", [True, False])
def test_a_call_updating_a_resident_runs_once_per_call_id(agent, side_effect):
    # Even one declared pure: it changes the agent's state, so a repeat (a
    # retry after a broken connection) must not apply it twice.
    c = farcall.Client(agent.address)
    r = c.put(np.zeros(8, dtype=np.float32))
    g = np.ones(8, dtype=np.float32)
    for _ in range(3):  # one call, sent three times
        axpy_step(c, g, r, has_side_effect=side_effect,
                  call_id=f"resident-once-{side_effect}")
    np.testing.assert_array_equal(c.get(r), 0.5 * g)
    c.delete(r)


def test_a_draining_agent_serves_its_residents_until_they_are_moved():
    import signal
    s = start_agent("--drain_seconds=60")
    try:
        c = farcall.Client(s.address)
        x = np.arange(32, dtype=np.float32)
        r = c.put(x)
        s.proc.send_signal(signal.SIGTERM)
        # New calls that name no resident are turned away at once...
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                c.call("sum", x, results=[farcall.Spec((), np.float32)])
            except farcall.UnavailableError as e:
                assert "draining" in e.message
                break
        else:
            raise AssertionError("the agent never began to drain")
        # ...but its residents are served: the client moves them away.
        np.testing.assert_array_equal(c.get(r), x)
        out, _ = axpy_step(c, np.ones(32, dtype=np.float32), r)
        assert out is r
        c.delete(r)
        # With none left and no call in flight, the drain ends long before
        # its 60 s.
        assert s.proc.wait(timeout=20) == 0
        assert "draining with 1 resident arrays" in s.output()
    finally:
        s.stop()


def test_on_a_device_agent_residents_stay_in_device_memory():
    # The oneapi agent keeps tensors in OpenCL buffers (PoCL on the CPU here):
    # residents there are device memory, updated and kept on the device.
    try:
        s = start_agent("--platform=oneapi")
    except RuntimeError as e:
        pytest.skip(f"SKIPPED: no oneapi agent here (built without OpenCL, or no device): "
                    f"{str(e)[:200]}")
    try:
        c = farcall.Client(s.address)
        x = np.arange(1 << 18, dtype=np.float32)
        r = c.put(x, platform="oneapi")
        for transport in ("grpc", "shm"):
            out, info = axpy_step(farcall.Client(s.address, transport=transport),
                                  np.ones_like(x), r, alpha=2.0, platform="oneapi")
            assert out is r and info.transport == transport
        np.testing.assert_array_equal(c.get(r), x + 4)
        (k,) = c.call("scale", x, results=[x], attributes={"alpha": 3.0}, keep_results=[0],
                      platform="oneapi")
        np.testing.assert_array_equal(c.get(k), 3 * x)
        big = np.arange(3 << 20, dtype=np.float32)  # streamed back in chunks
        np.testing.assert_array_equal(c.get(c.put(big, platform="oneapi")), big)
        assert c.describe().resident_count == 3
    finally:
        s.stop()


def test_a_tenant_held_to_an_in_flight_quota_keeps_no_more_than_it(tmp_path):
    # Residents leave the tenant's in-flight quota; without a resident quota
    # of their own they are held to it, so that no tenant takes the agent's
    # budget from the others by keeping arrays.
    alice = secrets.token_hex(16)
    (tmp_path / "tokens").write_text(f"{alice} *\n")
    s = start_agent(f"--tokens_file={tmp_path / 'tokens'}", "--tenant_max_bytes=1048576")
    try:
        c = farcall.Client(s.address, token=alice)
        x = np.zeros(100 << 10, dtype=np.float32)  # 400 KiB
        kept = [c.put(x), c.put(x)]
        with pytest.raises(farcall.ResourceExhaustedError, match="--tenant_max_bytes=1048576"):
            c.put(x)
        # Its in-flight quota is free for calls meanwhile.
        c.call("sum", x, results=[farcall.Spec((), np.float32)])
        c.delete(*kept)
        c.delete(c.put(x))
    finally:
        s.stop()
