"""farcall.Client with TLS and bearer tokens (certificates made with openssl)."""

import subprocess

import numpy as np
import pytest

import farcall

from conftest import start_agent


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    script = (
        "set -e;"
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ca -keyout ca.key -out ca.pem;"
        "openssl req -newkey rsa:2048 -nodes -subj /CN=server -keyout server.key -out server.csr;"
        "printf 'subjectAltName=IP:127.0.0.1\\n' > ext;"
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile ext -out server.pem;"
        "printf 'py-token-0123456789 copy\\n' > tokens")
    subprocess.run(["bash", "-c", script], cwd=d, check=True, capture_output=True)
    return d


def test_tls_and_tokens(pki):
    agent = start_agent(f"--tls_cert={pki / 'server.pem'}", f"--tls_key={pki / 'server.key'}",
                        f"--tokens_file={pki / 'tokens'}")
    try:
        x = np.arange(4, dtype=np.float32)
        good = farcall.Client(agent.address, tls_ca=str(pki / "ca.pem"), token="py-token-0123456789")
        (out,) = good.call("copy", x, results=[x])
        np.testing.assert_array_equal(out, x)
        with pytest.raises(farcall.UnauthenticatedError):
            farcall.Client(agent.address, tls_ca=str(pki / "ca.pem")).call("copy", x, results=[x])
        with pytest.raises(farcall.PermissionDeniedError, match="handler 'sum'"):
            good.call("sum", x, results=[farcall.Spec((), np.float32)])
        with pytest.raises(farcall.UnavailableError):
            farcall.Client(agent.address, token="py-token-0123456789").call("copy", x, results=[x], timeout=5)
        with pytest.raises(farcall.NotFoundError, match="cannot read"):
            farcall.Client(agent.address, tls_ca=str(pki / "missing.pem"))
    finally:
        agent.stop()


@pytest.mark.parametrize("path", ["ffi", "host_callback"])
def test_jax_drop_in_with_tls_and_a_token_keeps_them_out_of_the_program(pki, path):
    import jax
    import jax.numpy as jnp

    import farcall.jax as fj

    agent = start_agent(f"--tls_cert={pki / 'server.pem'}", f"--tls_key={pki / 'server.key'}",
                        f"--tokens_file={pki / 'tokens'}")
    fj.prefer_host_callback(path == "host_callback")
    try:
        spec = jax.ShapeDtypeStruct((4,), jnp.float32)
        f = fj.buffer_callback("copy", spec, target=agent.address, tls_ca=str(pki / "ca.pem"),
                               token="py-token-0123456789")
        x = jnp.arange(4, dtype=jnp.float32)
        np.testing.assert_array_equal(jax.jit(f)(x), x)
        assert "py-token-0123456789" not in jax.jit(f).lower(x).as_text()
        bad = fj.buffer_callback("copy", spec, target=agent.address, tls_ca=str(pki / "ca.pem"))
        with pytest.raises(Exception, match="UNAUTHENTICATED|Unauthenticated"):
            jax.block_until_ready(jax.jit(bad)(x))
    finally:
        fj.prefer_host_callback(False)
        agent.stop()
