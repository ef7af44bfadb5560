"""Exact results or an error from Python and JAX, whatever moment of its
result an agent dies at (tests/fault/fault_matrix_test.cc is the C++ matrix,
every phase and plane).

Two agents behind a router; the first to reach the phase ends there
(--inject_faults=exit_at=PHASE,exit_once=FILE, which names the phase in
FILE). One call updates y in place (axpy, alpha 2, x = 1, y = 0): every
element of y comes back 2, or the call raises the status contract's ABORTED
error naming the argument. Never 4: a retry that sent the half-overwritten y.
"""

import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import farcall
import farcall.jax as fj
from conftest import start_agent, start_router

N = 1 << 20  # 4 MiB of float32: 64 result frames of 64 KiB
PHASES = ["result_first", "result_mid", "result_last"]


@pytest.fixture
def servers(request):
    phase = request.param
    marker = os.path.join(tempfile.mkdtemp(prefix="farcall-fault-"), "ended")
    flags = ["--response_chunk_bytes=65536",
             f"--inject_faults=exit_at={phase},exit_by=kill,exit_once={marker}"]
    agents = [start_agent(*flags), start_agent(*flags)]
    router = start_router(*agents)
    client = farcall.Client(router.address)
    for _ in range(200):  # bounded: until the router counts both agents live
        if sum(a.health == "SERVING" for a in client.agents(refresh=True)) == 2:
            break
    yield phase, marker, router
    client.close()
    router.stop()
    for a in agents:
        a.stop()


def _reached(marker, phase):
    with open(marker) as f:
        assert f.read() == phase, "no agent reached the phase"


def _check(y, error):
    """y is exact, or the call raised the contract's ABORTED error."""
    if error is None:
        np.testing.assert_array_equal(np.asarray(y), np.full(N, 2.0, np.float32))
        return
    assert "ABORTED" in str(error) or isinstance(error, farcall.AbortedError), error
    assert "which it aliases" in str(error) and "not sent again" in str(error), error


@pytest.mark.parametrize("servers", PHASES, indirect=True)
@pytest.mark.parametrize("via_router", [False, True], ids=["lookaside", "router"])
def test_the_python_client_never_answers_with_other_numbers(servers, via_router):
    phase, marker, router = servers
    client = farcall.Client(router.address, via_router=via_router, transport="grpc")
    x, y = np.ones(N, np.float32), np.zeros(N, np.float32)
    error = None
    try:
        client.call("axpy", x, y, results=[y], input_output_aliases={1: 0},
                    attributes={"alpha": 2.0}, rpc="stream", timeout=30)
    except farcall.Error as e:
        error = e
        assert isinstance(e, farcall.AbortedError), e
    _reached(marker, phase)
    _check(y, error)


@pytest.mark.parametrize("servers", ["result_mid"], indirect=True)
def test_a_kept_copy_lets_the_python_client_send_again(servers):
    phase, marker, router = servers
    client = farcall.Client(router.address, transport="grpc")
    x, y = np.ones(N, np.float32), np.zeros(N, np.float32)
    client.call("axpy", x, y, results=[y], input_output_aliases={1: 0},
                attributes={"alpha": 2.0}, rpc="stream", timeout=30, keep_aliased_args=True)
    _reached(marker, phase)
    _check(y, None)


@pytest.mark.parametrize("servers", PHASES, indirect=True)
@pytest.mark.parametrize("path", ["ffi", "host_callback"])
def test_a_jitted_step_with_donation_never_goes_on_with_other_numbers(servers, path):
    phase, marker, router = servers
    if path == "ffi" and not fj.uses_ffi("cpu"):
        pytest.skip("SKIPPED: this build has no XLA FFI path (jaxlib's headers were missing)")
    fj.prefer_host_callback(path == "host_callback")
    try:
        spec = jax.ShapeDtypeStruct((N,), jnp.float32)
        axpy = fj.buffer_callback("axpy", spec, target=router.address,
                                  input_output_aliases={1: 0}, attributes={"alpha": 2.0},
                                  timeout=30)
        step = jax.jit(axpy, donate_argnums=1)
        error = y = None
        try:
            y = jax.block_until_ready(step(jnp.ones(N, jnp.float32), jnp.zeros(N, jnp.float32)))
        except Exception as e:  # noqa: BLE001: JAX's runtime error, or the host path's
            error = e
        _reached(marker, phase)
        if path == "host_callback":
            # The host path keeps a copy of each aliased operand: it sends again.
            assert error is None, error
        _check(y, error)
    finally:
        fj.prefer_host_callback(False)
