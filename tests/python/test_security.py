"""farcall.Client with TLS and bearer tokens (certificates made with openssl)."""

import hashlib
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import farcall

from conftest import ROUTER_BIN, Server, start_agent


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


def test_json_logs_name_the_call_and_the_caller_never_the_token(pki, tmp_path):
    """--log_format=json: every line is a JSON object with a UTC time; a
    failed call's line carries its id, handler, code and the caller's
    principal (a hash of the token, never the token); gRPC's own lines (a
    plaintext client's failed TLS handshake) come through the same logger."""
    token = "json-log-token-0123456789"
    (tmp_path / "tokens").write_text(f"{token} *\n")
    tls = (f"--tls_cert={pki / 'server.pem'}", f"--tls_key={pki / 'server.key'}")
    agent = start_agent(*tls, f"--tokens_file={tmp_path / 'tokens'}", "--log_format=json")
    (tmp_path / "own").write_text(token)
    # A router that calls agents with its own token signs each caller's
    # capability (the agent here trusts no key, so it goes by the token).
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(tmp_path / "sign.pem")],
                   check=True, capture_output=True)
    router = Server([ROUTER_BIN, "--listen=127.0.0.1:0", "--agents=" + agent.address,
                     "--log_format=json", f"--tokens_file={tmp_path / 'tokens'}",
                     f"--agent_tls_ca={pki / 'ca.pem'}", f"--agent_token_file={tmp_path / 'own'}",
                     f"--capability_signing_key_file={tmp_path / 'sign.pem'}"])
    try:
        direct = farcall.Client(agent.address, tls_ca=str(pki / "ca.pem"), token=token)
        with pytest.raises(farcall.Error):
            direct.call("fail", results=[], attributes={"code": 7, "message": "not you"},
                        call_id="direct-0001")
        with pytest.raises(farcall.Error):
            farcall.Client(router.address, token=token, via_router=True).call(
                "fail", results=[], attributes={"code": 9, "message": "not now"},
                call_id="routed-0002")
        with pytest.raises(farcall.UnavailableError):  # plaintext to TLS
            farcall.Client(agent.address, token=token).call("copy", results=[], timeout=5)
    finally:
        agent.stop()
        router.stop()
    principal = "token:" + hashlib.sha256(token.encode()).hexdigest()[:12]
    for server, call_id, code in ((agent, "direct-0001", "PERMISSION_DENIED"),
                                  (router, "routed-0002", "FAILED_PRECONDITION")):
        text = server.output()
        assert token not in text
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        assert lines and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", l["time"])
                             for l in lines), text
        assert {l["binary"] for l in lines} == {Path(server.proc.args[0]).name}
        calls = [l for l in lines if l.get("call_id") == call_id]
        assert len(calls) == 1, text
        assert calls[0]["level"] == "warning"
        assert calls[0]["handler"] == "fail"
        assert calls[0]["code"] == code
        assert calls[0]["principal"] == principal
        assert calls[0]["peer"].startswith("ipv4:127.0.0.1:")
    grpc_lines = [l for l in (json.loads(x) for x in agent.output().splitlines() if x.strip())
                  if l.get("source") == "grpc"]
    assert any("andshake" in l["message"] for l in grpc_lines), agent.output()
    assert all(l["file"] and l["line"] > 0 for l in grpc_lines)


def test_a_flood_of_refused_calls_is_a_few_audit_lines(tmp_path):
    """200 calls of a handler the caller's token may not call, at an agent,
    and 200 with an unknown token at a router: each process logs the first
    refusal at once, as an audit line naming the peer, the caller and the
    reason, and the other 199 as one line with their count (written when the
    interval ends, or at exit), never a line per call."""
    token = "audit-test-token-0123456789"
    (tmp_path / "tokens").write_text(f"{token} sum\n")
    agent = start_agent(f"--tokens_file={tmp_path / 'tokens'}")
    router = Server([ROUTER_BIN, "--listen=127.0.0.1:0", "--agents=" + agent.address,
                     f"--tokens_file={tmp_path / 'tokens'}"])
    principal = "token:" + hashlib.sha256(token.encode()).hexdigest()[:12]
    try:
        forbidden = farcall.Client(agent.address, token=token)
        for _ in range(200):
            with pytest.raises(farcall.PermissionDeniedError):
                forbidden.call("copy", results=[])
        unknown = farcall.Client(router.address, token="not-the-token-0123456789",
                                 via_router=True)
        for _ in range(200):
            with pytest.raises(farcall.UnauthenticatedError):
                unknown.call("copy", results=[])
    finally:
        agent.stop()
        router.stop()
    for server, caller in ((agent, principal), (router, "-")):
        text = server.output()
        # The flood's caller's lines (the agent also audits the router's
        # probes, refused: the router has no token for it).
        audit = [line for line in text.splitlines() if "audit:" in line and f" by {caller}" in line]
        assert len([line for line in audit if "audit: refused (auth) call of" in line]) == 1, text
        # At exit, the count line names the time its interval ran.
        assert any(re.search(f"audit: 199 more refusals \\(auth\\) from ipv4:127.0.0.1 by {caller} in "
                             "the last [1-9][0-9]*s$", line) for line in audit), text
        assert len(audit) == 2, text
        assert "not-the-token" not in text and token not in text


def test_a_flood_of_invalid_calls_is_a_few_audit_lines():
    """200 calls of a handler no agent has, straight at an agent and through
    a router: refusals on the call's own content (reason invalid on the
    agent; no_agent on the router, which no live agent could serve) are
    audit lines like any other refusal: the first at once, the rest as one
    count, never a warning per call."""
    agent = start_agent()
    router = Server([ROUTER_BIN, "--listen=127.0.0.1:0", "--agents=" + agent.address])
    try:
        for client in (farcall.Client(agent.address),
                       farcall.Client(router.address, via_router=True)):
            for _ in range(200):
                with pytest.raises(farcall.NotFoundError):
                    client.call("no_such_handler", results=[])
    finally:
        agent.stop()
        router.stop()
    for server, reason in ((agent, "invalid"), (router, "no_agent")):
        text = server.output()
        lines = [line for line in text.splitlines() if "no_such_handler" in line or "audit:" in line]
        assert len([line for line in lines if f"audit: refused ({reason}) call of" in line]) == 1, text
        assert any(f"audit: 199 more refusals ({reason}) from ipv4:127.0.0.1 by - in the last" in line
                   for line in lines), text
        assert len(lines) <= 3, "\n".join(lines)
