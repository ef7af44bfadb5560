"""A test bed of "hosts" made of network namespaces, for farcall between hosts.

    with TestBed(["client", "router", "agent-a", "agent-b"]) as bed:
        agent = bed.start("agent-a", AGENT_BIN)
        router = bed.start("router", ROUTER_BIN, "--agents=dns:///agent-a:50051")
        bed.call("client", router.target, "copy", size=1024)

Each host is a namespace with one interface, eth0, on a bridge that lives in
a namespace of its own (the "switch"), with an address from 10.213.N.0/24
(N from the process id): private addresses that exist only inside these
namespaces, never in the machine's own. Host names come from
/etc/netns/NAMESPACE/hosts, which `ip netns exec` puts in place of
/etc/hosts, so agents can be listed by name and `dns:///` works. Links can
be capped with tbf (each way), cut (link down) and healed, and a host's
traffic filtered with iptables inside its namespace.

Everything is removed on exit, pass or fail: processes, namespaces (and with
them interfaces, qdiscs and rules) and the hosts files. Needs root, iproute2
and iptables; `available()` says why not when they are missing.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from ready_process import ReadyProcess  # noqa: E402


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "the multi-host test bed needs root (network namespaces)"
    for tool in ("ip", "tc", "iptables"):
        if shutil.which(tool) is None:
            return f"the multi-host test bed needs {tool} (iproute2, iptables)"
    probe = f"fcprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot make a network namespace here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def sh(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
    return r


class Process(ReadyProcess):
    """A farcall server inside a host: its address on the bed, its port."""

    def __init__(self, bed: "TestBed", host: str, argv: list[str]):
        super().__init__(["ip", "netns", "exec", bed.ns(host), *argv], host=bed.ip(host))
        self.host = host
        self.ip = bed.ip(host)
        self.target = self.address


class TestBed:
    __test__ = False  # not a pytest class

    def __init__(self, hosts: list[str]):
        self.hosts = list(hosts)
        n = os.getpid() % 250
        self.tag = f"fc{os.getpid()}"
        self.subnet = f"10.213.{n}"
        self._ips = {h: f"{self.subnet}.{10 + i}" for i, h in enumerate(self.hosts)}
        self.processes: list[Process] = []
        self.made: list[str] = []

    # --- names ------------------------------------------------------------
    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def ip(self, host: str) -> str:
        return self._ips[host]

    def switch(self) -> str:
        return f"{self.tag}-switch"

    def port_of(self, host: str) -> str:
        """The host's link on the switch's side."""
        return f"p{self.hosts.index(host)}"

    # --- set up, tear down ------------------------------------------------
    def __enter__(self) -> "TestBed":
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _make(self) -> None:
        sw = self.switch()
        sh("ip", "netns", "add", sw)
        self.made.append(sw)
        sh("ip", "-n", sw, "link", "set", "lo", "up")
        sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "br0", "up")
        for h in self.hosts:
            ns = self.ns(h)
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
               self.port_of(h), "netns", sw)
            sh("ip", "-n", sw, "link", "set", self.port_of(h), "master", "br0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.ip(h)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
        for h in self.hosts:
            self.write_hosts(h, {x: [self.ip(x)] for x in self.hosts})

    def write_hosts(self, host: str, names: dict[str, list[str]]) -> None:
        """The host's /etc/hosts (as `ip netns exec` shows it): `names` maps
        a name to its addresses, each on a line of its own, so a name may
        stand for several hosts. Written in place: `ip netns exec` bind-mounts
        this file over /etc/hosts, so a process already running sees a new
        file only through the same inode (never a rename)."""
        d = pathlib.Path("/etc/netns") / self.ns(host)
        d.mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1 localhost"]
        for name, ips in names.items():
            lines += [f"{ip} {name}" for ip in ips]
        (d / "hosts").write_text("\n".join(lines) + "\n")

    def close(self) -> None:
        for p in self.processes:
            p.stop()
        self.processes.clear()
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(pathlib.Path("/etc/netns") / ns, ignore_errors=True)
        self.made.clear()

    # --- processes and calls ----------------------------------------------
    def start(self, host: str, binary: str, *flags: str, port: int = 0) -> Process:
        """A server on `host`, listening on its bed address and `port` (0:
        any; a fixed one is free, the namespace being the host's own)."""
        p = Process(self, host, [binary, f"--listen={self.ip(host)}:{port}",
                                 "--drain_seconds=2", *flags])
        self.processes.append(p)
        return p

    def run(self, host: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", self.ns(host), *argv, check=False, timeout=timeout)

    def call(self, host: str, target: str, **kw) -> dict:
        """One call from `host` (tests/hosts/call_from.py): its outcome as a
        dict with ok, code, message, via_router, transport and seconds."""
        r = self.run(host, *self.call_argv(target, **kw))
        if r.returncode != 0:
            raise RuntimeError(f"call_from.py on {host} exited {r.returncode}:\n{r.stderr}")
        return json.loads(r.stdout.strip().splitlines()[-1])

    def call_in_background(self, host: str, target: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns(host),
                                 *self.call_argv(target, **kw)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    @staticmethod
    def call_argv(target: str, **kw) -> list[str]:
        argv = [sys.executable, str(HERE / "call_from.py"), f"--target={target}"]
        return argv + [f"--{k}={v}" for k, v in kw.items()]

    def metric(self, process: Process, name: str) -> float:
        """A sample of `process`'s /metrics, read from inside its host."""
        r = self.run(process.host, sys.executable, "-c",
                     "import sys, urllib.request; print(urllib.request.urlopen("
                     f"'http://127.0.0.1:{process.metrics_port}/metrics', timeout=10)"
                     ".read().decode())")
        for line in r.stdout.splitlines():
            if line.split(" ", 1)[0] == name:  # the series, labels and all
                return float(line.rsplit(" ", 1)[1])
        return float("nan")

    # --- the network ------------------------------------------------------
    def cap(self, host: str, rate: str) -> None:
        """Caps `host`'s link at `rate` (tc syntax, e.g. 2gbit) each way."""
        for ns, dev in ((self.ns(host), "eth0"), (self.switch(), self.port_of(host))):
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
               "rate", rate, "burst", "1mb", "latency", "50ms")

    def link(self, host: str, up: bool) -> None:
        """Cuts (down) or heals (up) `host`'s link at the switch."""
        sh("ip", "-n", self.switch(), "link", "set", self.port_of(host), "up" if up else "down")

    def iptables(self, host: str, *rule: str) -> None:
        sh("ip", "netns", "exec", self.ns(host), "iptables", *rule)

    def unreachable(self, host: str, other: str) -> None:
        """`host` has no route to `other` (connections fail at once)."""
        sh("ip", "-n", self.ns(host), "route", "add", "unreachable", f"{self.ip(other)}/32")


def wait_until(predicate, timeout: float, what: str) -> float:
    """Polls `predicate` (each poll does real work: a call, a scrape) until
    it holds; the seconds it took. Raises when `timeout` passes."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
    raise AssertionError(f"{what}: not within {timeout} s")
