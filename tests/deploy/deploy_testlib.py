"""Shared helpers of the deploy/ tests (tests/deploy/test_*.py).

Tools: a tool that is missing fails the test in CI (CI=true) and skips it,
saying why, elsewhere. Binaries come from FARCALL_AGENT_BIN,
FARCALL_ROUTER_BIN and FARCALL_CLI_BIN (ctest sets them), else build/; they
are copied first, since the build tree may be relinked while a test runs.
Servers bind port 0 and report their ports on --ready_fd: nothing sleeps.
"""

from __future__ import annotations

import atexit
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from ready_process import ReadyProcess  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
PROMETHEUS_DIR = DEPLOY / "prometheus"
RULES_FILE = PROMETHEUS_DIR / "farcall.rules.yml"
DASHBOARD_FILE = DEPLOY / "grafana" / "farcall.json"



def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def unavailable(what: str, hint: str):
    """Fails in CI, skips elsewhere, naming what is missing and how to get it."""
    message = f"{what} is not available ({hint})"
    if in_ci():
        pytest.fail(f"{message}; CI=true, so this fails instead of skipping")
    pytest.skip(message)


def find_tool(name: str) -> str | None:
    # .venv's tools (yamllint, kubernetes-validate) sit next to its python.
    extra = [pathlib.Path(sys.executable).parent, ROOT / ".venv" / "bin"]
    for d in extra:
        p = d / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which(name)


def require_tool(name: str, hint: str) -> str:
    path = find_tool(name)
    if path is None:
        unavailable(f"`{name}`", hint)
    return path


def require_module(name: str, hint: str):
    try:
        return __import__(name)
    except ImportError:
        unavailable(f"the Python module `{name}`", hint)


_BIN_DIR: pathlib.Path | None = None


def binary(env: str, rel: str) -> str:
    """A private copy of one of farcall's binaries."""
    global _BIN_DIR
    src = os.environ.get(env) or str(ROOT / "build" / rel)
    if not os.access(src, os.X_OK):
        unavailable(f"{src} ({env})", "build first: bash scripts/build.sh")
    if _BIN_DIR is None:
        _BIN_DIR = pathlib.Path(tempfile.mkdtemp(prefix="farcall-deploy-test-bin-"))
        atexit.register(shutil.rmtree, _BIN_DIR, True)
    dst = _BIN_DIR / pathlib.Path(src).name
    if not dst.exists():
        shutil.copy2(src, dst)
    return str(dst)


def agent_bin() -> str:
    return binary("FARCALL_AGENT_BIN", "device_agents/farcall-agent")


def router_bin() -> str:
    return binary("FARCALL_ROUTER_BIN", "server/farcall-router")


def cli_bin() -> str:
    return binary("FARCALL_CLI_BIN", "client/farcall")


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when this test process dies, even
    killed by ctest's timeout, so that no server outlives its test."""
    import ctypes
    import signal
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


class Server(ReadyProcess):
    """A farcall-agent or farcall-router on loopback ports the OS picks,
    killed if this process dies."""

    def __init__(self, cmd: list[str]):
        super().__init__(cmd, preexec_fn=die_with_parent)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def http_json(url: str, timeout: float = 10):
    return json.loads(http_get(url, timeout))


def wait_for(what: str, check, deadline_s: float, interval_s: float = 0.25):
    """Polls check() until it returns something true, or fails after
    deadline_s: waiting on a condition with a bound, not a blind sleep."""
    deadline = time.monotonic() + deadline_s
    last_error = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - reported if the deadline passes
            last_error = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}"
                                 + (f" (last error: {last_error!r})" if last_error else ""))
        time.sleep(interval_s)


# --- podman and the images (test_containers.py, test_compose.py) ------------

PODMAN_HINT = ("apt-get install podman buildah runc uidmap slirp4netns fuse-overlayfs mmdebstrap "
               "(scripts/install_deps.sh)")


class Podman:
    """podman with the CONTAINERS_CONF that works in sandboxes (the one
    deploy/build_images.sh writes, unless one is set)."""

    def __init__(self):
        self.tool = require_tool("podman", PODMAN_HINT)
        if os.geteuid() != 0:
            unavailable("root", "these tests run podman as root, as CI does")
        self.env = dict(os.environ)
        if not self.env.get("CONTAINERS_CONF"):
            r = subprocess.run(["bash", str(DEPLOY / "build_images.sh"), "--containers-conf"],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            self.env["CONTAINERS_CONF"] = r.stdout.strip().splitlines()[-1]

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        r = subprocess.run([self.tool, *args], capture_output=True, text=True, env=self.env,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
        return r

    def inspect(self, what: str, fmt: str) -> str:
        return self.run("inspect", "--format", fmt, what).stdout.strip()


def build_images(podman: Podman, images: list[str], tag: str) -> str:
    """deploy/build_images.sh --prebuilt for `images`, from the binaries
    ctest names (FARCALL_*_BIN) or build/; returns its progress lines. With
    the base image and packages cached, about a minute for all five, seconds
    when only the binaries' layers are new or nothing changed."""
    for env, rel in (("FARCALL_AGENT_BIN", "device_agents/farcall-agent"),
                     ("FARCALL_ROUTER_BIN", "server/farcall-router"),
                     ("FARCALL_CLI_BIN", "client/farcall")):
        path = os.environ.get(env) or str(ROOT / "build" / rel)
        if not os.access(path, os.X_OK):
            unavailable(f"{path} ({env})", "build first: bash scripts/build.sh")
    start = time.monotonic()
    r = subprocess.run(["bash", str(DEPLOY / "build_images.sh"), "--prebuilt",
                        "--images=" + ",".join(images), f"--tag={tag}"],
                       capture_output=True, text=True, env=podman.env, timeout=840)
    progress = "\n".join(l for l in r.stderr.splitlines() if l.startswith("== build_images"))
    assert r.returncode == 0, f"build_images.sh failed:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}"
    return f"{progress}\nbuilt {len(images)} images in {time.monotonic() - start:.0f} s"


# --- Prometheus exposition and PromQL ---------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{| )")
_TYPE = re.compile(r"^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def exposed_names(text: str) -> set[str]:
    """Every sample name and metric family name in a /metrics page."""
    names = set()
    for line in text.splitlines():
        m = _TYPE.match(line)
        if m:
            names.add(m.group(1))
            continue
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            names.add(m.group(1))
    return names


def name_is_exposed(name: str, exposed: set[str]) -> bool:
    if name in exposed:
        return True
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in exposed:
            return True
    return False


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_METRIC = re.compile(r"(?<![a-zA-Z0-9_:])(farcall_[a-zA-Z0-9_]*[a-zA-Z0-9])(?![a-zA-Z0-9_:(])")
_RECORDED = re.compile(r"(?<![a-zA-Z0-9_:])([a-zA-Z_]+:farcall_[a-zA-Z0-9_]+:[a-zA-Z0-9_:]+)")


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, recording-rule names) an expression reads. Strings
    (label values, regexes) are left out first."""
    bare = _STRING.sub('""', expr)
    recorded = set(_RECORDED.findall(bare))
    bare = _RECORDED.sub(" ", bare)
    return set(_METRIC.findall(bare)), recorded


def grafana_exprs(dashboard: dict) -> list[tuple[str, str]]:
    """(where, expr) for every PromQL query in a dashboard: panel targets,
    rows' nested panels and query variables."""
    out = []

    def panels(ps):
        for p in ps:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"panel {p.get('title')!r} {t.get('refId')}", t["expr"]))
            panels(p.get("panels", []))

    panels(dashboard.get("panels", []))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            if isinstance(q, dict):
                q = q.get("query")
            if q:
                out.append((f"variable ${v['name']}", q))
    return out


GRAFANA_SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
}


def concrete_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables filled in, so that
    Prometheus can parse it: interval macros become durations and template
    variables match everything."""
    for k, v in GRAFANA_SUBSTITUTIONS.items():
        expr = expr.replace(k, v)
    expr = re.sub(r"\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?", ".*", expr)
    return expr


def label_values_query(expr: str) -> str | None:
    """The series selector of a Grafana label_values(SELECTOR, LABEL) query."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*", expr, re.S)
    return m.group(1) if m else None
