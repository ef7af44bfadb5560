"""The operator's scenarios, under load, on a stack secured as a shared
cluster runs it (deploy/k8s/tls): TLS on every hop, bearer tokens on the
routers and the agents (the agents know the router's token by its sha256
digest only), and capabilities the routers sign with Ed25519 and the agents
verify. Two cpu agents and two routers, on loopback ports the OS picks.

While threads of the Python client call built-in handlers without a pause,
each result checked against numpy (pure calls through the routers'
lookaside and through the routers, and calls with side effects), each test
does one thing an operator does or suffers, and asserts that no call failed:
  rotation      the TLS certificates and the tokens files are swapped as the
                kubelet swaps a mounted Secret (a new `..data` link renamed
                over the old one); new handshakes get the new certificates,
                new tokens work and removed ones are refused;
  router roll   each router in turn gets SIGTERM and a replacement, the
                clients holding both routers' addresses;
  agent drain   an agent gets SIGTERM (it drains), then a replacement;
  agent kill    an agent gets SIGKILL, then a replacement: pure calls go
                again elsewhere; a call with side effects that was running
                there may fail, only saying that it may have run (counted);
  dns           a router that finds the agents by a dns:/// name, in a
                private mount namespace whose /etc/hosts then drops the name
                (the machine's own /etc/hosts is never touched): it keeps
                the agents it knew, and says so;
  slow scrapers 32 connections that never finish their request, on an
                agent's metrics port and 32 on a router's: scrapes still
                answer at once;
  audit flood   1000 refused calls at a router and 1000 at an agent: a few
                audit lines in each log, every refusal accounted for in
                them, and the refused-calls metric up by exactly that many.
Each test prints a line such as `ops: rotation: 1234 calls, 0 failed, ...`
(also appended to the file $FARCALL_OPS_REPORT names, when set).

Run alone (ctest deploy_ops_test sets the same from the build):
  FARCALL_AGENT_BIN=build/device_agents/farcall-agent \\
  FARCALL_ROUTER_BIN=build/server/farcall-router FARCALL_CLI_BIN=build/client/farcall \\
  PYTHONPATH=build/python .venv/bin/python -m pytest -q -rs tests/deploy/test_ops.py
or just `.venv/bin/python tests/deploy/test_ops.py` (the binaries from
build/; the farcall package installed in .venv, else build/python).
It found two bugs, fixed since: calls with side effects that failed as an
idle agent drained (it closed its port before its routers and clients knew
it drained: core/drain_gate.h now keeps refusing for a while), and refused
Describes at an agent that no audit line or metric counted.
Needs openssl; the dns test needs root and `unshare` (it skips, saying why,
without them, and fails in CI). Nothing sleeps to wait: every wait polls a
condition with a deadline.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploy_testlib as lib  # noqa: E402

try:
    import farcall
except ImportError:  # not installed, and no PYTHONPATH: the build tree's
    sys.path.insert(0, str(lib.ROOT / "build" / "python"))
    farcall = lib.require_module("farcall", "build it (bash scripts/build.sh) or set PYTHONPATH")

OPENSSL_HINT = "apt-get install openssl (scripts/install_deps.sh)"
AGENT_TLS_NAME = "farcall-agent.farcall.svc"  # the name the routers check, as in deploy/k8s/tls
DNS_NAME = "agents.farcall.test"
CALL_TIMEOUT_S = 30
WAIT_S = 30  # the most any one condition is waited for


# --- small helpers ------------------------------------------------------------

def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# How the metrics ports are scraped: as the TLS overlay's ServiceMonitors do,
# over https checking the CA, with the metrics token (set by the stack).
SCRAPER: dict = {}


def scrape(port: int, timeout: float = 10) -> str:
    req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    req.add_header("Authorization", f"Bearer {SCRAPER['token']}")
    with urllib.request.urlopen(req, timeout=timeout, context=SCRAPER["ssl"]) as r:
        assert r.status == 200
        return r.read().decode()


def metric(port: int, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels` (0 when
    there is none): e.g. refused calls over every tenant."""
    total = 0.0
    for line in scrape(port).splitlines():
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def served_certificate(address: str, ca: str) -> bytes:
    """The certificate a new TLS handshake with `address` gets (DER)."""
    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


def log_messages(server) -> list[str]:
    """The `message` of each JSON line a server logged."""
    out = []
    for line in server.output().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line).get("message", ""))
    return out


def stop(server, timeout: float = 15) -> int:
    """SIGTERM, then SIGKILL if it has not exited within `timeout`."""
    if server.proc.poll() is None:
        server.proc.terminate()
    try:
        return server.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        return server.proc.wait()


def report(capsys, line: str) -> None:
    """Shows a scenario's figures in the test's output (past pytest's capture)."""
    with capsys.disabled():
        print(f"\nops: {line}", flush=True)
    path = os.environ.get("FARCALL_OPS_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(f"ops: {line}\n")


class MountedSecret:
    """A directory laid out as the kubelet mounts a Secret: KEY is a link to
    ..data/KEY, ..data a link to a timestamped directory that holds the
    files. update() writes a new directory and renames a new ..data link
    over the old one: every file changes at once."""

    def __init__(self, path: pathlib.Path, files: dict[str, bytes]):
        self.path = path
        self.generation = 0
        path.mkdir()
        self.update(files)

    def update(self, files: dict[str, bytes]) -> None:
        self.generation += 1
        old = self.path / "..data"
        old_target = os.readlink(old) if old.is_symlink() else None
        new = self.path / time.strftime(f"..%Y_%m_%d_%H_%M_%S.{self.generation}")
        new.mkdir()
        for key, data in files.items():
            (new / key).write_bytes(data)
            (new / key).chmod(0o600)
            link = self.path / key
            if not link.is_symlink():
                link.symlink_to(f"..data/{key}")
        os.symlink(new.name, self.path / "..data_tmp")
        os.replace(self.path / "..data_tmp", old)
        if old_target:
            shutil.rmtree(self.path / old_target)

    def __getitem__(self, key: str) -> str:
        return str(self.path / key)


# --- the stack ----------------------------------------------------------------

# A throwaway CA; two generations of certificates for the routers and for
# the agents (every name they are reached by); the routers' Ed25519 key.
PKI_SCRIPT = r"""
set -e
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
"$OPENSSL" req -x509 $ec -days 2 -subj /CN=farcall-ops-test-ca -keyout ca.key -out ca.pem
printf 'subjectAltName=DNS:localhost,DNS:%s,IP:127.0.0.1,IP:127.0.0.2\n' "$1" > san.ext
for name in router-v1 router-v2 agent-v1 agent-v2; do
  "$OPENSSL" req $ec -subj /CN=$name -keyout $name.key -out $name.csr
  "$OPENSSL" x509 -req -in $name.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile san.ext -out $name.pem
done
"$OPENSSL" genpkey -algorithm ed25519 -out sign.pem
"$OPENSSL" pkey -in sign.pem -pubout -out verify.pem
"""


class Stack:
    """Two agents and two routers, secured as deploy/k8s/tls does it.

    The agents serve on one port of 127.0.0.1 and 127.0.0.2 (the second
    takes the port the OS gave the first), so that one DNS name can name
    both, as a headless Service does. Every process started is in
    `started`, and stop_all() ends them."""

    def __init__(self, workdir: pathlib.Path):
        """The files: certificates, keys and tokens, laid out as mounted."""
        self.dir = workdir
        self.started = []
        self.agent_bin, self.router_bin = lib.agent_bin(), lib.router_bin()
        openssl = lib.require_tool("openssl", OPENSSL_HINT)
        pki = workdir / "pki"
        pki.mkdir()
        r = subprocess.run(["bash", "-c", PKI_SCRIPT, "pki", AGENT_TLS_NAME], cwd=pki,
                           env=dict(os.environ, OPENSSL=openssl), capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, f"making the certificates failed:\n{r.stderr}"
        self.pki = pki
        self.ca = str(pki / "ca.pem")
        self.tokens = {name: secrets.token_hex(24) for name in (
            "load", "caller_old", "caller_new", "direct_old", "direct_new", "limited", "router")}
        self.router_tls = MountedSecret(workdir / "router-tls", self._tls_files("router-v1"))
        self.agent_tls = MountedSecret(workdir / "agent-tls", self._tls_files("agent-v1"))
        self.generation = "old"  # of the tokens files (test_rotation makes it "new")
        self.token_files = MountedSecret(workdir / "tokens", self._token_files("old"))
        self.signing = MountedSecret(workdir / "capability-signing",
                                     {"key.pem": (pki / "sign.pem").read_bytes()})
        self.verify = MountedSecret(workdir / "capability-verify",
                                    {"keys.pem": (pki / "verify.pem").read_bytes()})
        # The metrics ports: TLS, and the scraper's token (by digest).
        self.metrics_token = secrets.token_hex(24)
        self.metrics_auth = MountedSecret(workdir / "metrics-auth", {
            "tokens": f"sha256:{digest(self.metrics_token)} *\n".encode()})
        SCRAPER.update(ssl=ssl.create_default_context(cafile=self.ca), token=self.metrics_token)
        # Read at start only (a generated Secret in deploy/k8s/tls).
        self.agent_auth = workdir / "router-agent-auth"
        self.agent_auth.mkdir()
        (self.agent_auth / "token").write_text(self.tokens["router"])
        (self.agent_auth / "ca.crt").write_bytes((pki / "ca.pem").read_bytes())

    def start(self) -> None:
        """The processes: two agents, then two routers that see both."""
        first = self.start_agent("127.0.0.1:0")
        self.agent_port = first.port
        self.agents = [first, self.start_agent(f"127.0.0.2:{self.agent_port}")]
        self.agent_addresses = [f"127.0.0.1:{self.agent_port}", f"127.0.0.2:{self.agent_port}"]
        self.routers = [self.start_router("127.0.0.1:0") for _ in range(2)]
        for router in self.routers:
            self.wait_router_sees_agents(router)

    # Files ---------------------------------------------------------------------
    def _tls_files(self, name: str) -> dict[str, bytes]:
        return {"tls.crt": (self.pki / f"{name}.pem").read_bytes(),
                "tls.key": (self.pki / f"{name}.key").read_bytes(),
                "ca.crt": (self.pki / "ca.pem").read_bytes()}

    def _token_files(self, generation: str) -> dict[str, bytes]:
        """The callers' tokens file for the routers (key `router`) and the
        agents' (key `agent`, tokens by digest). `old` and `new` differ in
        one caller's token for each."""
        t = self.tokens
        router = (f"{t['load']} *\n{t['caller_' + generation]} *\n{t['limited']} sum\n")
        agent = (f"sha256:{digest(t['router'])} *\nsha256:{digest(t['direct_' + generation])} *\n"
                 f"sha256:{digest(t['limited'])} sum\n")
        return {"router": router.encode(), "agent": agent.encode()}

    def token(self, who: str) -> str:
        """The token of `who` ("caller": at the routers, "direct": at the
        agents) that the tokens files hold now."""
        return self.tokens[f"{who}_{self.generation}"]

    def certificate(self, name: str) -> bytes:
        return ssl.PEM_cert_to_DER_cert((self.pki / f"{name}.pem").read_text())

    # Processes -----------------------------------------------------------------
    def _start(self, cmd: list[str], host: str = "127.0.0.1"):
        server = lib.Server(cmd)
        self.started.append(server)
        server.address = f"{host}:{server.port}"  # the address it listens on
        server.refused = 0  # calls this test had refused there (the audit's ledger)
        return server

    def start_agent(self, listen: str):
        return self._start([
            self.agent_bin, "--platform=cpu", f"--listen={listen}",
            "--metrics_listen=127.0.0.1:0", "--log_format=json", "--drain_seconds=10",
            f"--tls_cert={self.agent_tls['tls.crt']}", f"--tls_key={self.agent_tls['tls.key']}",
            "--metrics_tls", f"--metrics_tokens_file={self.metrics_auth['tokens']}",
            f"--tokens_file={self.token_files['agent']}",
            f"--capability_verify_keys_file={self.verify['keys.pem']}"], listen.rsplit(":", 1)[0])

    def router_flags(self, listen: str, agents: str) -> list[str]:
        return [f"--listen={listen}", "--metrics_listen=127.0.0.1:0", "--log_format=json",
                "--drain_seconds=10", f"--agents={agents}",
                f"--tls_cert={self.router_tls['tls.crt']}",
                f"--tls_key={self.router_tls['tls.key']}",
                "--metrics_tls", f"--metrics_tokens_file={self.metrics_auth['tokens']}",
                f"--tokens_file={self.token_files['router']}",
                f"--agent_tls_ca={self.agent_auth / 'ca.crt'}",
                f"--agent_token_file={self.agent_auth / 'token'}",
                f"--agent_tls_server_name={AGENT_TLS_NAME}",
                f"--capability_signing_key_file={self.signing['key.pem']}"]

    def start_router(self, listen: str, agents: str | None = None, wrapper: list[str] = ()):
        agents = agents or ",".join(self.agent_addresses)
        return self._start([*wrapper, self.router_bin, *self.router_flags(listen, agents)])

    def agents_up(self, router) -> int:
        return sum(int(metric(router.metrics_port, "farcall_router_agent_up", agent=a))
                   for a in self.agent_addresses)

    def wait_router_sees_agents(self, router, n: int = 2) -> None:
        lib.wait_for(f"the router at {router.address} to see {n} agents SERVING",
                     lambda: self.agents_up(router) == n, WAIT_S, 0.05)

    def routers_target(self) -> str:
        return "ipv4:" + ",".join(r.address for r in self.routers)

    def client(self, target: str, token: str, **kw) -> farcall.Client:
        # The routers' certificate names localhost; an ipv4: list of two
        # routers has no single host name of its own.
        return farcall.Client(target, tls_ca=self.ca, token=token, tls_server_name="localhost",
                              timeout=CALL_TIMEOUT_S, **kw)

    def stop_all(self) -> None:
        for server in self.started:
            stop(server)


@pytest.fixture(scope="module")
def stack():
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="farcall-ops-test-"))
    s = None
    try:
        s = Stack(workdir)
        s.start()
        yield s
    finally:
        if s is not None:
            s.stop_all()  # every process it started, whatever happened
        shutil.rmtree(workdir, ignore_errors=True)


# --- the load -----------------------------------------------------------------

class Load:
    """Threads that call built-in handlers until stopped, each result
    checked against numpy:
      pure        lookaside (the router names an agent; the call goes there)
      via_router  through a router, now and then a streamed 1.5 MiB call
      side_effect axpy in place with has_side_effect (at most once), half
                  by lookaside and half through a router
    Values are small integers, so that float results are exact."""

    KINDS = ("pure", "via_router", "side_effect")
    PURE = ("add", "axpy", "scale", "sum", "copy")

    def __init__(self, stack: Stack, target: str | None = None):
        self.target = target or stack.routers_target()
        self.stack = stack
        self.lock = threading.Lock()
        self.calls = {k: 0 for k in self.KINDS}
        self.failures = {k: [] for k in self.KINDS}  # (handler, code, message, did_not_run)
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(k, i), daemon=True)
                        for i, k in enumerate(self.KINDS)]

    def __enter__(self):
        self.started = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=CALL_TIMEOUT_S + 10)
        self.seconds = time.monotonic() - self.started

    def total(self) -> int:
        with self.lock:
            return sum(self.calls.values())

    def await_more(self, n: int) -> None:
        """Returns once `n` more calls have ended (the load goes on)."""
        goal = self.total() + n
        lib.wait_for(f"{n} more calls of the load (at {self.total()} of {goal})",
                     lambda: self.total() >= goal, WAIT_S, 0.02)

    def clients(self, via_router: bool) -> farcall.Client:
        return self.stack.client(self.target, self.stack.tokens["load"], via_router=via_router,
                                 transport="grpc")

    def _record(self, kind: str, handler: str, check) -> None:
        """Runs check() (a call and the check of its result) and counts it."""
        failure = None
        try:
            check()
        except farcall.Error as e:
            failure = (handler, e.code, e.message, e.did_not_run)
        except AssertionError as e:
            failure = (handler, "WRONG_RESULT", str(e)[:300], False)
        except Exception as e:  # noqa: BLE001 - a bug of the test's own, counted as failed
            failure = (handler, type(e).__name__, str(e)[:300], False)
        with self.lock:
            self.calls[kind] += 1
            if failure:
                self.failures[kind].append(failure)

    def _run(self, kind: str, seed: int) -> None:
        rng = np.random.default_rng(seed)
        client = self.clients(via_router=(kind == "via_router"))
        routed = self.clients(via_router=True)  # calls with side effects go both ways, in turn
        n = 0
        while not self.stopping.is_set():
            n += 1
            if kind == "side_effect":
                c = routed if n % 2 else client
                self._record(kind, "axpy" + (" via router" if n % 2 else ""),
                             lambda: self._side_effect(c, rng))
            else:
                big = kind == "via_router" and n % 40 == 0
                handler = "copy 1.5 MiB" if big else self.PURE[int(rng.integers(5))]
                self._record(kind, handler, lambda: self._pure(client, rng, handler))
            time.sleep(0.002)  # a steady load, not a flood: two cores run all of it

    def burst(self, clients: list, n: int) -> None:
        """n calls with side effects at once from `clients` in turn (made by
        clients() beforehand), counted with the load's: what arrives in the
        moment an agent goes away."""
        rng = np.random.default_rng(99)
        sent = []
        for i in range(n):
            x = rng.integers(-1000, 1000, 128).astype(np.float32)
            y = rng.integers(-1000, 1000, 128).astype(np.float32)
            want = 3 * x + y
            future = clients[i % len(clients)].call_async(
                "axpy", x, y, results=[y], input_output_aliases={1: 0}, attributes={"alpha": 3.0},
                has_side_effect=True)
            sent.append((future, want, i % len(clients)))
        for future, want, which in sent:
            self._record("side_effect", f"axpy (burst, client {which})",
                         lambda: np.testing.assert_array_equal(
                             future.result(timeout=CALL_TIMEOUT_S)[0], want))

    @staticmethod
    def _pure(client, rng, handler: str) -> None:
        """One pure call of `handler` ("copy 1.5 MiB": streamed over Execute,
        more than one 1 MiB message)."""
        if handler == "copy 1.5 MiB":
            x = rng.integers(-1000, 1000, 3 << 17).astype(np.float32)
            (out,) = client.call("copy", x, results=[x])
            np.testing.assert_array_equal(out, x)
        elif handler == "add":
            a, b = (rng.integers(-2**20, 2**20, 512).astype(np.int32) for _ in range(2))
            (out,) = client.call("add", a, b, results=[a])
            np.testing.assert_array_equal(out, a + b)
        elif handler == "axpy":  # in place; a copy of y is kept so that it may go again
            x = rng.integers(-1000, 1000, 256).astype(np.float32)
            y = rng.integers(-1000, 1000, 256).astype(np.float32)
            want = 2 * x + y
            (out,) = client.call("axpy", x, y, results=[y], input_output_aliases={1: 0},
                                 attributes={"alpha": 2.0}, keep_aliased_args=True)
            assert out is y
            np.testing.assert_array_equal(out, want)
        elif handler == "scale":
            x = rng.integers(-1000, 1000, 300).astype(np.float64)
            (out,) = client.call("scale", x, results=[x], attributes={"alpha": -0.5})
            np.testing.assert_array_equal(out, -0.5 * x)
        elif handler == "sum":
            x = rng.integers(-2**40, 2**40, 1000, dtype=np.int64)
            (out,) = client.call("sum", x, results=[farcall.Spec((), np.int64)])
            assert int(out) == int(x.sum()), (int(out), int(x.sum()))
        else:
            a = rng.integers(-128, 128, 64).astype(np.int8)
            b = rng.integers(-1000, 1000, (4, 8)).astype(np.float64)
            out_a, out_b = client.call("copy", a, b, results=[a, b])
            np.testing.assert_array_equal(out_a, a)
            np.testing.assert_array_equal(out_b, b)

    @staticmethod
    def _side_effect(client, rng) -> None:
        x = rng.integers(-1000, 1000, 128).astype(np.float32)
        y = rng.integers(-1000, 1000, 128).astype(np.float32)
        want = 3 * x + y
        (out,) = client.call("axpy", x, y, results=[y], input_output_aliases={1: 0},
                             attributes={"alpha": 3.0}, has_side_effect=True)
        np.testing.assert_array_equal(out, want)

    # Figures -------------------------------------------------------------------
    def summary(self, name: str) -> str:
        with self.lock:
            calls = dict(self.calls)
            failed = {k: len(v) for k, v in self.failures.items()}
        per_kind = ", ".join(f"{k} {calls[k]}/{failed[k]}" for k in self.KINDS)
        return (f"{name}: {sum(calls.values())} calls, {sum(failed.values())} failed "
                f"in {self.seconds:.1f} s (calls/failed: {per_kind})")

    def describe_failures(self, kinds=KINDS) -> str:
        lines = []
        with self.lock:
            for k in kinds:
                counts: dict[tuple, int] = {}
                for f in self.failures[k]:
                    counts[f] = counts.get(f, 0) + 1
                for (handler, code, message, did_not_run), n in counts.items():
                    lines.append(f"  {n} x {k} {handler}: {code}: {message}"
                                 f"{' (did not run)' if did_not_run else ''}")
        return "\n".join(lines)

    def assert_no_failures(self, kinds=KINDS) -> None:
        with self.lock:
            failed = sum(len(self.failures[k]) for k in kinds)
            calls = sum(self.calls[k] for k in kinds)
        assert calls > 0, "the load made no calls"
        assert failed == 0, (f"{failed} of {calls} calls ({', '.join(kinds)}) failed:\n"
                             f"{self.describe_failures(kinds)}")


# --- the scenarios ------------------------------------------------------------

def try_call(client, server, **kw) -> bool:
    """One call with a token that may not be loaded yet: True when it ran,
    False (and counted on `server`) when refused as unauthenticated."""
    x = np.arange(4, dtype=np.int32)
    try:
        (out,) = client.call("add", x, x, results=[x], **kw)
    except farcall.UnauthenticatedError:
        server.refused += 1
        return False
    np.testing.assert_array_equal(out, 2 * x)
    return True


def test_rotation(stack, capsys):
    """Certificates and tokens swapped as Secrets are, on routers and agents."""
    processes = [("router", r) for r in stack.routers] + [("agent", a) for a in stack.agents]
    for kind, p in processes:
        assert served_certificate(p.address, stack.ca) == stack.certificate(f"{kind}-v1")
    t = stack.tokens
    with Load(stack) as load:
        load.await_more(300)
        start = time.monotonic()
        stack.router_tls.update(stack._tls_files("router-v2"))
        stack.agent_tls.update(stack._tls_files("agent-v2"))
        stack.token_files.update(stack._token_files("new"))
        stack.generation = "new"
        for kind, p in processes:
            lib.wait_for(f"a new handshake with the {kind} at {p.address} to get the new "
                         "certificate",
                         lambda: served_certificate(p.address, stack.ca)
                         == stack.certificate(f"{kind}-v2"), WAIT_S, 0.1)
        took_tls = time.monotonic() - start
        # The new caller's token works at each router, and the removed one
        # is refused; so for the token an agent knows by digest.
        for kind, p in processes:
            token = t["caller_new" if kind == "router" else "direct_new"]
            via = {"via_router": True} if kind == "router" else {}
            client = stack.client(p.address, token, **via)
            lib.wait_for(f"the {kind} at {p.address} to take the new token",
                         lambda: try_call(client, p), WAIT_S, 0.1)
            old = t["caller_old" if kind == "router" else "direct_old"]
            assert not try_call(stack.client(p.address, old, **via), p), \
                f"the {kind} at {p.address} still takes the removed token"
        took_tokens = time.monotonic() - start
        load.await_more(300)
    for kind, p in processes:
        messages = log_messages(p)
        assert any(m.startswith("TLS files reloaded") for m in messages), p.output()[-3000:]
        assert any(m.startswith("tokens reloaded from") for m in messages), p.output()[-3000:]
        assert not any(secret in p.output() for secret in t.values()), "a token in a log"
    report(capsys, load.summary("rotation") + f"; new certificates served after "
           f"{took_tls:.1f} s, tokens swapped after {took_tokens:.1f} s")
    load.assert_no_failures()


LONG_CALL_MS = 4000


def test_router_roll(stack, capsys):
    """Each router in turn: SIGTERM under load, then a replacement on its
    address (a new pod behind the same name). The first holds a long call,
    which its drain lets finish."""
    first = stack.routers[0]
    # Sent before the load starts, so that the router's in-flight gauge shows
    # this call alone.
    sent = time.monotonic()
    held = stack.client(first.address, stack.tokens["load"], via_router=True).call_async(
        "sleep", results=[], attributes={"ms": LONG_CALL_MS}, has_side_effect=True)
    lib.wait_for(f"the long call to be in flight at the router {first.address}",
                 lambda: metric(first.metrics_port, "farcall_router_agent_inflight_calls") >= 1,
                 WAIT_S, 0.02)
    stopped = []
    with Load(stack) as load:
        load.await_more(300)
        for i in (0, 1):
            old = stack.routers[i]
            start = time.monotonic()
            rc = stop(old, timeout=30)
            stopped.append(time.monotonic() - start)
            assert rc == 0, f"router {old.address} exited {rc}:\n{old.output()[-3000:]}"
            if i == 0:  # its drain waited for the long call
                assert time.monotonic() - sent >= LONG_CALL_MS / 1000 - 0.5, \
                    f"the router exited {time.monotonic() - sent:.1f} s into a " \
                    f"{LONG_CALL_MS} ms call it held"
            load.await_more(300)  # served by the other router alone
            stack.routers[i] = stack.start_router(old.address)
            stack.wait_router_sees_agents(stack.routers[i])
            load.await_more(300)
    report(capsys, load.summary("router roll") + "; the routers drained in "
           + " and ".join(f"{s:.1f} s" for s in stopped)
           + f" (the first holding a {LONG_CALL_MS} ms call)")
    assert held.result(timeout=CALL_TIMEOUT_S) == [], "the long call failed"
    load.assert_no_failures()


def stop_agent(stack, i: int, sig: int) -> float:
    """Sends agent i `sig` and waits for it to exit; returns how long that took."""
    old = stack.agents[i]
    start = time.monotonic()
    old.proc.send_signal(sig)
    rc = old.proc.wait(timeout=30)
    took = time.monotonic() - start
    want = 0 if sig == signal.SIGTERM else -signal.SIGKILL
    assert rc == want, f"agent {old.address} exited {rc}:\n{old.output()[-3000:]}"
    return took


def replace_agent(stack, i: int, load: Load) -> None:
    """A new agent on agent i's address (a new pod behind the same name),
    once both routers see it serve."""
    stack.agents[i] = stack.start_agent(stack.agent_addresses[i])
    for router in stack.routers:
        stack.wait_router_sees_agents(router)
    load.await_more(200)


@pytest.fixture(scope="module")
def drain(stack):
    """The drain, once, for the two tests below: SIGTERM to an agent under
    load; then, at once, a burst of calls with side effects (those that
    arrive as it goes); the other agent alone; a replacement."""
    with Load(stack) as load:
        load.await_more(300)
        # Many clients, as in a cluster, each with its own view of the agents.
        burst = [load.clients(via_router=False) for _ in range(8)]
        burst.append(load.clients(via_router=True))
        load.burst(burst, len(burst))  # connected, and the agents resolved, beforehand
        took = stop_agent(stack, 0, signal.SIGTERM)
        load.burst(burst, 2 * len(burst))
        load.await_more(300)
        replace_agent(stack, 0, load)
    return load, took


def test_agent_drain(drain, capsys):
    """An agent drains on SIGTERM: pure calls never fail."""
    load, took = drain
    failures = load.describe_failures()
    report(capsys, load.summary("agent drain") + f"; the agent drained in {took:.1f} s"
           + (f"\n{failures}" if failures else ""))
    load.assert_no_failures(kinds=("pure", "via_router"))


def test_agent_drain_fails_no_call_with_side_effects(drain):
    """A drain is no failure either for calls with side effects: those that
    come as it ends never ran anywhere, and may go to the other agent."""
    load, _ = drain
    load.assert_no_failures(kinds=("side_effect",))


def test_agent_kill(stack, capsys):
    """SIGKILL: pure calls go again elsewhere. A call with side effects runs
    at most once, so one that was running on the killed agent may fail, but
    only UNAVAILABLE and not marked as never run (it may have run)."""
    victim = stack.agents[1]
    # A long call with side effects, straight to the victim, in flight when
    # it dies (sent before the load, so that the gauge shows it alone; the
    # kill ends it long before it would end).
    held = stack.client(victim.address, stack.token("direct")).call_async(
        "sleep", results=[], attributes={"ms": 20000}, has_side_effect=True)
    lib.wait_for(f"the long call to be in flight at the agent {victim.address}",
                 lambda: metric(victim.metrics_port, "farcall_agent_inflight_calls") >= 1,
                 WAIT_S, 0.02)
    with Load(stack) as load:
        load.await_more(300)
        assert not held.done(), f"the long call ended before the kill: {held.exception()}"
        stop_agent(stack, 1, signal.SIGKILL)
        load.await_more(300)
        replace_agent(stack, 1, load)
    with pytest.raises(farcall.UnavailableError) as cut:
        held.result(timeout=CALL_TIMEOUT_S)
    assert not cut.value.did_not_run, f"the cut call is marked as never run: {cut.value}"
    failed = load.failures["side_effect"]
    may_have_run = [f for f in failed if f[1] == "UNAVAILABLE" and not f[3]]
    # Of those, the ones that never reached the agent (sent after it died):
    # a port closed by the kill, reported here, not failed on.
    refused = [f for f in may_have_run if f[2].startswith("failed to connect")]
    report(capsys, load.summary("agent kill")
           + f"; {len(may_have_run)} calls with side effects failed UNAVAILABLE, may have run "
           f"({len(may_have_run) - len(refused)} cut mid-call, {len(refused)} refused a "
           f"connection); the long call cut: {cut.value}"
           + ("\n" + load.describe_failures(("side_effect",)) if failed else ""))
    load.assert_no_failures(kinds=("pure", "via_router"))
    assert len(may_have_run) == len(failed), (
        f"{len(failed) - len(may_have_run)} calls with side effects failed otherwise than "
        f"UNAVAILABLE (may have run):\n{load.describe_failures(('side_effect',))}")


def unshare_or_skip() -> str:
    """The `unshare` tool, where this process may make a mount namespace."""
    tool = lib.require_tool("unshare", "apt-get install util-linux")
    if os.geteuid() != 0:
        lib.unavailable("root", "a private /etc/hosts needs a mount namespace: run as root")
    r = subprocess.run([tool, "--mount", "--propagation", "private", "true"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        lib.unavailable("a mount namespace (unshare --mount)", r.stderr.strip())
    return tool


def test_dns_failure(stack, capsys):
    """A router that finds the agents by a DNS name keeps the agents it
    knew when the name stops resolving, and says so."""
    unshare = unshare_or_skip()
    hosts, resolv = stack.dir / "hosts", stack.dir / "resolv.conf"
    named = f"127.0.0.1 localhost\n127.0.0.1 {DNS_NAME}\n127.0.0.2 {DNS_NAME}\n"
    hosts.write_text(named)
    # Names not in the hosts file go to a server that is not there: lookups
    # fail at once, as with a DNS outage.
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    # The router sees these two files as /etc/hosts and /etc/resolv.conf;
    # nothing else on the machine does.
    wrapper = [unshare, "--mount", "--propagation", "private", "--", "sh", "-c",
               'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf '
               '&& shift 2 && exec "$@"', "sh", str(hosts), str(resolv)]
    source = f"dns:///{DNS_NAME}:{stack.agent_port}"
    router = stack.start_router("127.0.0.1:0", agents=source, wrapper=wrapper)

    def resolved() -> float:  # the addresses the name gave at the router's last look
        return metric(router.metrics_port, "farcall_router_agent_source_addresses", source=source)

    try:
        stack.wait_router_sees_agents(router)
        assert resolved() == 2
        with Load(stack, target=router.address) as load:
            load.await_more(300)
            start = time.monotonic()
            # Written in place: the bind mount holds this file's inode.
            hosts.write_text("127.0.0.1 localhost\n")
            kept = (f"--agents entry '{source}' cannot be resolved (cannot resolve agent source "
                    f"'{source}': ")
            lib.wait_for("the router to log that the name no longer resolves",
                         lambda: any(m.startswith(kept) for m in log_messages(router)),
                         WAIT_S, 0.05)
            line = next(m for m in log_messages(router) if m.startswith(kept))
            assert line.endswith("; the router keeps calling the 2 agent(s) it knew from it, "
                                 "as their probes allow, until it resolves again."), line
            assert resolved() == 0
            load.await_more(300)
            assert stack.agents_up(router) == 2, "the router dropped agents it knew"
            failing_for = time.monotonic() - start
            hosts.write_text(named)
            lib.wait_for("the router to log that the name resolves again",
                         lambda: f"--agents entry '{source}' names 2 agent(s) again."
                         in log_messages(router), WAIT_S, 0.05)
            load.await_more(200)
    finally:
        rc = stop(router)
    assert rc == 0, router.output()[-3000:]
    report(capsys, load.summary("dns") + f"; the name failed for {failing_for:.1f} s, "
           f"the router kept 2 agents")
    load.assert_no_failures()


def slow_connections(port: int, n: int) -> list[socket.socket]:
    """n connections that send the start of a TLS ClientHello and never the
    rest, from four source addresses (so that no per-peer bound alone saves
    the server)."""
    out = []
    for i in range(n):
        s = socket.socket()
        out.append(s)
        s.bind((f"127.0.0.{11 + i % 4}", 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"\x16\x03\x01\x00")
        s.setblocking(False)
    return out


def closed_by_server(s: socket.socket) -> bool:
    """Whether the server has closed this connection (whatever it sent first)."""
    try:
        while s.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def test_slow_scrapers(stack, capsys):
    """32 connections that never finish a TLS handshake, on an agent's
    metrics port and 32 on a router's: three scrapes of each (TLS, with the
    metrics token) still answer at once, and the servers drop the stalled
    connections (a request, its handshake included, must arrive whole within
    2 s: core/http_server.h)."""
    agent, router = stack.agents[0], stack.routers[0]
    held = []
    scrapes = []
    try:
        with Load(stack) as load:
            load.await_more(200)
            start = time.monotonic()
            for name, server in (("agent", agent), ("router", router)):
                held += slow_connections(server.metrics_port, 32)
                for _ in range(3):
                    began = time.monotonic()
                    page = scrape(server.metrics_port)
                    scrapes.append((name, time.monotonic() - began))
                    assert "farcall_" in page
            load.await_more(200)
            lib.wait_for("the servers to drop the stalled connections",
                         lambda: all(closed_by_server(s) for s in held), WAIT_S, 0.1)
            dropped_after = time.monotonic() - start
    finally:
        for s in held:
            s.close()
    slowest = max(s for _, s in scrapes)
    report(capsys, load.summary("slow scrapers") + f"; {len(scrapes)} scrapes beside 64 stalled "
           f"connections, the slowest {slowest * 1000:.0f} ms; the stalled ones dropped within "
           f"{dropped_after:.1f} s")
    load.assert_no_failures()
    assert slowest < 3, f"scrapes took {scrapes} (s)"


AUDIT_REFUSED = re.compile(r"^audit: refused \((\w+)\) call of '[^']*' from (\S+) by (\S+): ")
AUDIT_MORE = re.compile(r"^audit: (\d+) more refusals \((\w+)\) from (\S+) by (\S+) in the last ")


def audited(server) -> tuple[int, int]:
    """(audit lines, refusals they account for) in a server's log."""
    lines = refusals = 0
    for m in log_messages(server):
        if AUDIT_REFUSED.match(m):
            lines, refusals = lines + 1, refusals + 1
        elif mm := AUDIT_MORE.match(m):
            lines, refusals = lines + 1, refusals + int(mm.group(1))
    return lines, refusals


def count_lines(server) -> int:
    """How many `N more refusals` lines a server has logged."""
    return sum(1 for m in log_messages(server) if AUDIT_MORE.match(m))


def flood(server, clients, n: int) -> None:
    """n refused calls, shared among `clients` (client, exception) in turn."""
    x = np.arange(4, dtype=np.int32)
    for i in range(n):
        client, error = clients[i % len(clients)]
        with pytest.raises(error):
            client.call("copy", x, results=[x])
        server.refused += 1


@pytest.fixture(scope="module")
def audit_flood(stack):
    """1000 refused calls (an unknown token, a handler the token may not
    call) at a router and 1000 straight at an agent, under load, once for
    the two tests below. Returns the load, and for each of "router" and
    "agent": the server, how much its auth-refusals metric rose, and the
    audit lines it wrote since and the refusals they account for."""
    servers = {"router": stack.routers[0], "agent": stack.agents[0]}
    refused = {"router": "farcall_router_refused_calls_total",
               "agent": "farcall_agent_refused_calls_total"}
    before = {k: metric(s.metrics_port, refused[k], reason="auth") for k, s in servers.items()}
    audited_before = {k: audited(s) for k, s in servers.items()}
    bad = "not-a-token-" + secrets.token_hex(12)
    with Load(stack) as load:
        load.await_more(100)
        start = time.monotonic()
        for k, server in servers.items():
            via = {"via_router": True} if k == "router" else {}
            unknown = stack.client(server.address, bad, **via)
            limited = stack.client(server.address, stack.tokens["limited"], **via)
            flood(server, [(unknown, farcall.UnauthenticatedError),
                           (limited, farcall.PermissionDeniedError)], 1000)
        took = time.monotonic() - start
        counts_at_end = {k: count_lines(s) for k, s in servers.items()}
        load.await_more(100)
    # Count lines come when the audit's 10 s interval ends (or at exit): wait
    # until each server's lines account for every refusal, or it has written
    # the count lines of the interval in which the flood ended.
    lib.wait_for("the audit's count lines for the flood",
                 lambda: all(audited(s)[1] >= s.refused or count_lines(s) > counts_at_end[k]
                             for k, s in servers.items()), 20, 0.2)
    figures = {}
    for k, s in servers.items():
        lines, refusals = audited(s)
        figures[k] = {"server": s, "rose": metric(s.metrics_port, refused[k], reason="auth")
                      - before[k], "lines": lines - audited_before[k][0],
                      "accounted": refusals, "ledger": s.refused}
    figures["load"], figures["took"], figures["bad"] = load, took, bad
    return figures


def check_audit(figures, name: str) -> None:
    """The flood at `name` ("router" or "agent"): counted, and audited in a few lines."""
    f = figures[name]
    server = f["server"]
    assert f["rose"] == 1000, \
        f"the {name}'s auth refusals (metric) rose by {f['rose']:.0f} for 1000 refused calls"
    assert f["accounted"] == f["ledger"], (
        f"the {name}'s audit lines account for {f['accounted']} refusals of the "
        f"{f['ledger']} this test had it refuse:\n"
        + "\n".join(m for m in log_messages(server) if m.startswith("audit:")))
    # Two callers (unknown, and the limited token) from one address: a first
    # line and a count line each, per 10 s interval (the flood may straddle two).
    assert 2 <= f["lines"] <= 8, f"the {name} wrote {f['lines']} audit lines for 1000 refusals"
    text = server.output()
    assert figures["bad"] not in text and figures["load"].stack.tokens["limited"] not in text


def test_audit_flood_at_a_router(audit_flood, capsys):
    """The router counts every refusal, audits them in a few lines, and the
    load never notices."""
    f = audit_flood
    report(capsys, f["load"].summary("audit flood") + f"; 2000 refused calls in {f['took']:.1f} s; "
           + "; ".join(f"{k}: auth refusals +{f[k]['rose']:.0f}, {f[k]['lines']} audit lines "
                       f"accounting for {f[k]['accounted']} of {f[k]['ledger']}"
                       for k in ("router", "agent")))
    f["load"].assert_no_failures()
    check_audit(f, "router")


def test_audit_flood_at_an_agent(audit_flood):
    """So does the agent."""
    audit_flood["load"].assert_no_failures()
    check_audit(audit_flood, "agent")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-rs", "-p", "no:cacheprovider"]))
