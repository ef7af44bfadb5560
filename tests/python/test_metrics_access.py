"""The metrics port over TLS, with bearer tokens or client certificates
(--metrics_tls, --metrics_tokens_file, --metrics_client_ca), on agents and
routers: who may scrape, what the others get, rotation without a restart,
slow clients that cannot blind it, and flags that fail closed."""

import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import AGENT_BIN, ROUTER_BIN, Server, start_agent

TOKEN = "metrics-token-0123456789abcdef"


def _run(script: str, cwd: Path) -> None:
    subprocess.run(["bash", "-c", "set -e;" + script], cwd=cwd, check=True, capture_output=True)


def _server_cert(d: Path, name: str) -> None:
    """{name}.pem / {name}.key: a certificate for 127.0.0.1 that ca.pem signed."""
    _run(f"openssl req -newkey rsa:2048 -nodes -subj /CN={name} -keyout {name}.key -out {name}.csr;"
         "printf 'subjectAltName=IP:127.0.0.1\\n' > ext;"
         f"openssl x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
         f"-extfile ext -out {name}.pem", d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """ca.pem signs the servers' certificates (server, and next for a
    rotation); scrapers-ca.pem signs the scraper's client certificate."""
    d = tmp_path_factory.mktemp("metrics-pki")
    _run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ca -keyout ca.key -out ca.pem;"
         "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=scrapers "
         "-keyout scrapers-ca.key -out scrapers-ca.pem;"
         "openssl req -newkey rsa:2048 -nodes -subj /CN=prometheus -keyout scraper.key -out scraper.csr;"
         "openssl x509 -req -in scraper.csr -CA scrapers-ca.pem -CAkey scrapers-ca.key "
         "-CAcreateserial -days 2 -out scraper.pem", d)
    _server_cert(d, "server")
    _server_cert(d, "next")
    (d / "metrics-tokens").write_text(f"{TOKEN} *\n")
    return d


def _context(pki: Path, client_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if client_cert:
        ctx.load_cert_chain(str(pki / "scraper.pem"), str(pki / "scraper.key"))
    return ctx


def _get(port: int, ctx: ssl.SSLContext | None, token: str | None = None, path: str = "/metrics",
         timeout: float = 5) -> tuple[int, str, dict]:
    """(status, body, headers) of an HTTPS GET (plain HTTP when ctx is None)."""
    scheme = "https" if ctx is not None else "http"
    req = urllib.request.Request(f"{scheme}://127.0.0.1:{port}{path}")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def _peer_serial(port: int, pki: Path) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with _context(pki).wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert()["serialNumber"]


def _wait_until(pred, timeout: float, what: str):
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < end, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)


def _tls_flags(d: Path) -> list[str]:
    return [f"--tls_cert={d / 'tls.pem'}", f"--tls_key={d / 'tls.key'}",
            "--metrics_listen=127.0.0.1:0", "--metrics_tls"]


@pytest.fixture
def certs(pki, tmp_path):
    """The server's certificate in files of this test's own (to rotate)."""
    for src, dst in (("server.pem", "tls.pem"), ("server.key", "tls.key")):
        (tmp_path / dst).write_bytes((pki / src).read_bytes())
    tokens = tmp_path / "metrics-tokens"
    tokens.write_text(f"{TOKEN} *\n")
    return tmp_path


@pytest.mark.parametrize("binary", ["agent", "router"])
def test_only_a_scraper_with_a_known_token_reads_the_metrics_port_over_tls(pki, certs, binary):
    flags = _tls_flags(certs) + [f"--metrics_tokens_file={certs / 'metrics-tokens'}"]
    if binary == "agent":
        s = start_agent(*flags)
    else:
        agent = start_agent()
        s = Server([ROUTER_BIN, "--listen=127.0.0.1:0", f"--agents={agent.address}", *flags])
    try:
        code, body, _ = _get(s.metrics_port, _context(pki), TOKEN)
        assert code == 200 and "farcall_build_info" in body, (code, body[:200])
        if binary == "router":  # the status page sits behind the same door
            assert _get(s.metrics_port, _context(pki), TOKEN, path="/status.json")[0] == 200
            assert _get(s.metrics_port, _context(pki), path="/status.json")[0] == 401
        for token in (None, "wrong-token-0123456789abcdef", TOKEN + "x"):
            code, body, headers = _get(s.metrics_port, _context(pki), token)
            assert code == 401, (token, code)
            assert headers.get("WWW-Authenticate") == 'Bearer realm="farcall"', headers
            assert "farcall_" not in body
        # Plain HTTP gets no answer at all: the port speaks TLS only.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            _get(s.metrics_port, None, TOKEN, timeout=3)
        # The token never reaches the log.
        assert TOKEN not in s.output()
    finally:
        s.stop()
        if binary == "router":
            agent.stop()


def test_a_client_certificate_is_required_when_a_client_ca_is_given(pki, certs):
    s = start_agent(*_tls_flags(certs), f"--metrics_client_ca={pki / 'scrapers-ca.pem'}")
    try:
        code, body, _ = _get(s.metrics_port, _context(pki, client_cert=True))
        assert code == 200 and "farcall_build_info" in body
        # Without one, or with one another CA signed, the handshake fails.
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _get(s.metrics_port, _context(pki), timeout=3)
        wrong = _context(pki)
        wrong.load_cert_chain(str(pki / "server.pem"), str(pki / "server.key"))  # ca.pem's
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _get(s.metrics_port, wrong, timeout=3)
    finally:
        s.stop()


def test_a_rotated_certificate_and_tokens_file_serve_without_a_restart(pki, certs):
    tokens = certs / "metrics-tokens"
    s = start_agent(*_tls_flags(certs), f"--metrics_tokens_file={tokens}")
    try:
        before = _peer_serial(s.metrics_port, pki)
        # As the kubelet swaps a Secret: whole new files, put in place.
        for src, dst in (("next.key", "tls.key"), ("next.pem", "tls.pem")):
            tmp = certs / (dst + ".new")
            tmp.write_bytes((pki / src).read_bytes())
            os.replace(tmp, certs / dst)
        after = _wait_until(lambda: (serial := _peer_serial(s.metrics_port, pki)) != before and serial,
                            15, "the metrics port to serve the new certificate")
        assert after != before
        new_token = "rotated-token-0123456789abcdef"
        tmp = certs / "metrics-tokens.new"
        tmp.write_text(f"{new_token} *\n")
        os.replace(tmp, tokens)
        _wait_until(lambda: _get(s.metrics_port, _context(pki), new_token)[0] == 200, 15,
                    "the new metrics token to be taken")
        assert _get(s.metrics_port, _context(pki), TOKEN)[0] == 401
    finally:
        s.stop()


def test_connections_that_never_finish_a_handshake_do_not_blind_the_tls_port(pki, certs):
    s = start_agent(*_tls_flags(certs), f"--metrics_tokens_file={certs / 'metrics-tokens'}")
    idle = []
    try:
        for i in range(32):
            c = socket.socket()
            c.bind(("127.0.0.2", 0))
            c.connect(("127.0.0.1", s.metrics_port))
            if i % 2:
                c.sendall(b"\x16\x03\x01\x00")  # the start of a ClientHello, then nothing
            idle.append(c)
        start = time.monotonic()
        for _ in range(3):
            code, body, _ = _get(s.metrics_port, _context(pki), TOKEN, timeout=5)
            assert code == 200 and "farcall_build_info" in body
        assert time.monotonic() - start < 10
    finally:
        for c in idle:
            c.close()
        s.stop()


@pytest.mark.parametrize("binary", [AGENT_BIN, ROUTER_BIN])
@pytest.mark.parametrize("case", ["no_tls_files", "token_without_tls", "ca_without_tls",
                                  "empty_tokens", "unreadable_ca", "ca_not_pem"])
def test_metrics_access_flags_fail_closed(pki, certs, tmp_path, binary, case):
    empty = tmp_path / "empty"
    empty.write_text("")
    flags = {
        "no_tls_files": ["--metrics_listen=127.0.0.1:0", "--metrics_tls"],
        "token_without_tls": [f"--metrics_tokens_file={certs / 'metrics-tokens'}"],
        "ca_without_tls": [f"--metrics_client_ca={pki / 'scrapers-ca.pem'}"],
        "empty_tokens": _tls_flags(certs) + [f"--metrics_tokens_file={empty}"],
        "unreadable_ca": _tls_flags(certs) + [f"--metrics_client_ca={tmp_path / 'missing.pem'}"],
        "ca_not_pem": _tls_flags(certs) + [f"--metrics_client_ca={certs / 'metrics-tokens'}"],
    }[case]
    extra = ["--agents=127.0.0.1:1"] if binary == ROUTER_BIN else []
    out = subprocess.run([binary, "--listen=127.0.0.1:0", *extra, *flags], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2, (case, out.returncode, out.stderr[-500:])
    expected = {
        "no_tls_files": "--metrics_tls serves the metrics port with this server's certificate",
        "token_without_tls": "need --metrics_tls",
        "ca_without_tls": "need --metrics_tls",
        "empty_tokens": "--metrics_tokens_file",
        "unreadable_ca": "--metrics_client_ca",
        "ca_not_pem": "--metrics_client_ca",
    }[case]
    assert expected in out.stderr, (case, out.stderr[-500:])
    assert TOKEN not in out.stderr
