"""deploy/compose.yaml with deploy/compose.secure.yaml on top (callers'
tokens and signed capabilities), brought up with podman-compose from keys
deploy/compose_keys.sh writes:

  - a caller on the compose network with the token calls the agent straight
    (lookaside) on a capability the router signed: the agent counts it
    verified, and the router forwards no call;
  - a caller without a token is refused by the router (UNAUTHENTICATED);
  - the caller's token opens nothing at the agent itself (its tokens file
    holds the router's token as a digest only);
  - `podman-compose down`, then whatever is left is removed, pass or fail.

Run: .venv/bin/python -m pytest -q tests/deploy/test_compose_secure.py
Needs what test_compose.py needs (it runs after it, under ctest's
deploy_compose_test: both publish the same ports).
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploy_testlib as lib  # noqa: E402
import test_compose as plain  # noqa: E402

SECURE_FILE = lib.DEPLOY / "compose.secure.yaml"


def _metric(url: str, name: str, labels: str) -> float:
    m = re.search(r"^%s\{%s\} (\S+)$" % (re.escape(name), re.escape(labels)), lib.http_get(url), re.M)
    return float(m.group(1)) if m else 0.0


def _verified() -> float:
    return _metric("http://127.0.0.1:9151/metrics", "farcall_agent_capability_checks_total",
                   'result="verified"') + \
        _metric("http://127.0.0.1:9151/metrics", "farcall_agent_capability_checks_total",
                'result="cached"')


def _forwarded() -> float:
    text = lib.http_get("http://127.0.0.1:9150/metrics")
    return sum(float(v) for v in re.findall(r"^farcall_router_calls_total\{[^}]*\} (\S+)$", text, re.M))


@pytest.fixture(scope="module")
def secure():
    keys = pathlib.Path(tempfile.mkdtemp(prefix="farcall-compose-keys-"))
    os.chmod(keys, 0o755)
    c = None
    try:
        r = subprocess.run(["bash", str(lib.DEPLOY / "compose_keys.sh"), str(keys / "k")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        # The caller's copy, readable by the CLI's container user (65532).
        token = keys / "caller-token"
        shutil.copy(keys / "k" / "caller-token", token)
        os.chmod(token, 0o644)
        c = plain.start(files=[plain.COMPOSE_FILE, SECURE_FILE],
                        env={"FARCALL_COMPOSE_KEYS": str(keys / "k")},
                        token_file=str(keys / "k" / "caller-token"))
        c.caller_token = token
        yield c
        plain.stop(c)
    finally:
        if c is not None:
            c.remove_leftovers()
        shutil.rmtree(keys, ignore_errors=True)


def _in_network(c, *args: str, token: bool = True) -> subprocess.CompletedProcess:
    mount = ["-v", f"{c.caller_token}:/run/caller-token:ro"] if token else []
    return c.podman.run(
        "run", "--rm", "--read-only", "--network", c.network, *mount,
        "--entrypoint", "/usr/local/bin/farcall", f"localhost/farcall-router:{plain.TAG}",
        *plain.AXPY, "--target=router:50050",
        *(["--token_file=/run/caller-token"] if token else []), *args, check=False)


def test_a_direct_call_on_a_signed_capability(secure):
    verified, forwarded = _verified(), _forwarded()
    # A capability in clear to the agent's address on the compose bridge:
    # allowed here, as without TLS the client would go through the router.
    r = _in_network(secure, "--allow_insecure_tokens")
    assert r.returncode == 0 and plain.AXPY_RESULT in r.stdout, r.stdout + r.stderr + secure.logs()
    assert _verified() > verified, "the agent verified no capability"
    assert _forwarded() == forwarded, "the call went through the router, not straight to the agent"
    print(r.stdout)


def test_a_caller_without_a_token_is_refused(secure):
    r = _in_network(secure, token=False)
    assert r.returncode != 0 and "UNAUTHENTICATED" in r.stderr, r.stdout + r.stderr


def test_the_callers_token_opens_nothing_at_the_agent(secure):
    r = plain.cli(*plain.AXPY, "--target=127.0.0.1:50051", f"--token_file={secure.caller_token}")
    assert r.returncode != 0 and "UNAUTHENTICATED" in r.stderr, r.stdout + r.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-rs", "-p", "no:cacheprovider"]))
