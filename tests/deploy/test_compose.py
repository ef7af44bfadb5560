"""deploy/compose.yaml, brought up with podman-compose as on Debian 12:

  - its router and cpu agent services come up from the images that
    deploy/build_images.sh --prebuilt builds (Prometheus and Grafana come
    from Docker Hub, which CI cannot reach, so they are left out);
  - both compose healthchecks pass: they run `farcall health` directly,
    with no shell, which the images do not have;
  - the router finds the agent by its service name (dns:///agent-cpu:50051,
    through podman's DNS on the compose network);
  - a call by service name from a container on the compose network
    (`--target=router:50050`), directly and through the router, and one
    from the host through the router's published port;
  - with the agent stopped, its name resolves to nothing and the router says
    so (farcall_router_agent_source_addresses is 0, and its log names the
    entry) while its own healthcheck still passes; started again, the agent
    is found and serves;
  - `podman-compose down`, then whatever is left of the project is removed,
    pass or fail.

Run: .venv/bin/python -m pytest -q tests/deploy/test_compose.py
Needs what test_containers.py needs, plus podman-compose 1.5 or later and,
for names on podman's CNI networks, Debian's
golang-github-containernetworking-plugin-dnsname (scripts/install_deps.sh
installs both; podman-compose goes in .venv). Debian 12's own podman-compose
(1.0.3), like every version before 1.5, runs a CMD healthcheck through
/bin/sh, so with these images its healthchecks fail. The ports compose.yaml
publishes on 127.0.0.1 (50050, 9150, 50051, 9151) must be free.
"""

from __future__ import annotations

import pathlib
import re
import socket
import subprocess
import sys
import time
import uuid

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploy_testlib as lib  # noqa: E402

TAG = "dev"  # the tag compose.yaml names
COMPOSE_FILE = lib.DEPLOY / "compose.yaml"
SERVICES = ["router", "agent-cpu"]
PUBLISHED = [50050, 9150, 50051, 9151]
AGENTS_ENTRY = "dns:///agent-cpu:50051"
DEADLINE_S = 60
HINT = ("podman-compose 1.5 or later: scripts/install_deps.sh installs it into .venv "
        "(.venv/bin/pip install podman-compose)")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([lib.cli_bin(), *args], capture_output=True, text=True, timeout=60)


AXPY = ["call", "axpy", "float32[8]:iota", "float32[8]:ones", "--results=float32[8]",
        "--aliases=1:0", "--attr=alpha=2.0"]
AXPY_RESULT = "[1, 3, 5, 7, 9, 11, 13, 15]"


class Compose:
    def __init__(self, podman: lib.Podman, tool: str, files: list[pathlib.Path],
                 env: dict[str, str] | None = None):
        self.podman, self.tool = podman, tool
        self.files = [a for f in files for a in ("-f", str(f))]
        self.env = {**podman.env, **(env or {})}
        self.project = f"farcall-test-{uuid.uuid4().hex[:8]}"
        self.network = f"{self.project}_default"

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run([self.tool, "-p", self.project, *self.files, *args],
                              capture_output=True, text=True, env=self.env, timeout=timeout)

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def logs(self) -> str:
        return "\n".join(f"--- {s}:\n" + self.podman.run("logs", self.container(s), check=False).stderr
                         for s in SERVICES)

    def remove_leftovers(self):
        label = f"label=io.podman.compose.project={self.project}"
        ids = self.podman.run("ps", "-a", "-q", "--filter", label, check=False).stdout.split()
        if ids:
            self.podman.run("rm", "-f", "-t", "0", *ids, check=False)
        self.podman.run("pod", "rm", "-f", "--ignore", f"pod_{self.project}", check=False)
        self.podman.run("network", "rm", "-f", self.network, check=False)
        vols = self.podman.run("volume", "ls", "-q", "--filter", label, check=False).stdout.split()
        if vols:
            self.podman.run("volume", "rm", "-f", *vols, check=False)


def _version(tool: str) -> tuple[int, ...]:
    out = subprocess.run([tool, "version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"podman-compose version (\d+)\.(\d+)", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def start(files: list[pathlib.Path] | None = None, env: dict[str, str] | None = None,
          token_file: str | None = None) -> Compose:
    """Brings up the router and cpu agent of FILES (compose.yaml alone by
    default) and waits until the router serves the agent; the caller
    stops it (stop) and removes what is left (remove_leftovers)."""
    tool = lib.require_tool("podman-compose", HINT)
    if _version(tool) < (1, 5):
        lib.unavailable(f"podman-compose 1.5 or later ({tool} is {'.'.join(map(str, _version(tool)))}, "
                        "which runs CMD healthchecks through /bin/sh)", HINT)
    for port in PUBLISHED:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                lib.unavailable(f"127.0.0.1:{port}, which compose.yaml publishes,",
                                "something else listens there")
    podman = lib.Podman()
    print(lib.build_images(podman, SERVICES, TAG))
    c = Compose(podman, tool, files or [COMPOSE_FILE], env)
    start_s = time.monotonic()
    try:
        # --no-build: the images are there; compose would otherwise compile
        # the binaries from source.
        r = c.run("up", "-d", "--no-build", *SERVICES)
        assert r.returncode == 0, f"podman-compose up exited {r.returncode}:\n{r.stdout}{r.stderr}"
        token = [f"--token_file={token_file}"] if token_file else []
        try:
            lib.wait_for("the router to find the agent by its service name SERVING",
                         lambda: "SERVING" in cli("agents", "--target=127.0.0.1:50050",
                                                  *token).stdout,
                         DEADLINE_S)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{c.logs()}")
    except BaseException:
        c.remove_leftovers()
        raise
    print(f"up in {time.monotonic() - start_s:.1f} s")
    return c


def stop(c: Compose):
    """podman-compose down, which must leave no container behind."""
    start_s = time.monotonic()
    r = c.run("down", "-t", "45")
    assert r.returncode == 0, f"podman-compose down exited {r.returncode}:\n{r.stdout}{r.stderr}"
    print(f"down in {time.monotonic() - start_s:.1f} s")
    left = c.podman.run("ps", "-a", "-q", "--filter",
                        f"label=io.podman.compose.project={c.project}").stdout.split()
    assert not left, f"podman-compose down left containers: {left}"


@pytest.fixture(scope="module")
def compose():
    c = start()
    try:
        yield c
        stop(c)
    finally:
        c.remove_leftovers()


def test_healthchecks_pass_without_a_shell(compose):
    for s in SERVICES:
        r = compose.podman.run("healthcheck", "run", compose.container(s), check=False)
        assert r.returncode == 0, f"{s}: {r.stdout}{r.stderr}\n{compose.logs()}"


@pytest.mark.parametrize("via_router", [False, True], ids=["named-agent", "via-router"])
def test_call_by_service_name_inside_the_network(compose, via_router):
    r = compose.podman.run(
        "run", "--rm", "--read-only", "--network", compose.network,
        "--entrypoint", "/usr/local/bin/farcall", f"localhost/farcall-router:{TAG}",
        *AXPY, "--target=router:50050", *(["--via_router"] if via_router else []), check=False)
    assert r.returncode == 0 and AXPY_RESULT in r.stdout, r.stdout + r.stderr + compose.logs()
    print(r.stdout)


def test_call_through_the_published_port(compose):
    r = cli(*AXPY, "--target=127.0.0.1:50050")
    assert r.returncode == 0 and AXPY_RESULT in r.stdout, r.stdout + r.stderr + compose.logs()


def _source_addresses() -> float | None:
    text = lib.http_get("http://127.0.0.1:9150/metrics")
    m = re.search(r'^farcall_router_agent_source_addresses\{source="%s"\} (\S+)$'
                  % re.escape(AGENTS_ENTRY), text, re.M)
    return float(m.group(1)) if m else None


def test_a_name_that_resolves_to_nothing_is_reported_as_such(compose):
    # Last: it stops the agent and starts it again.
    assert _source_addresses() == 1
    agent = compose.container("agent-cpu")
    compose.podman.run("stop", "-t", "45", agent, timeout=120)
    lib.wait_for("the router to see agent-cpu resolve to nothing",
                 lambda: _source_addresses() == 0, DEADLINE_S)
    router_log = compose.podman.run("logs", compose.container("router")).stderr
    said = [l for l in router_log.splitlines() if AGENTS_ENTRY in l and "warn" in l]
    assert said, router_log
    print(f"the router's log: {said[-1]}")
    r = cli(*AXPY, "--target=127.0.0.1:50050")
    assert r.returncode != 0 and "UNAVAILABLE" in r.stderr, r.stdout + r.stderr
    # The router itself is fine: its healthcheck passes.
    r = compose.podman.run("healthcheck", "run", compose.container("router"), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    compose.podman.run("start", agent)
    lib.wait_for("the router to find the restarted agent", lambda: _source_addresses() == 1,
                 DEADLINE_S)
    lib.wait_for("a call to succeed again",
                 lambda: cli(*AXPY, "--target=127.0.0.1:50050").returncode == 0, DEADLINE_S)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-rs", "-p", "no:cacheprovider"]))
