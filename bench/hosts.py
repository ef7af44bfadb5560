"""Bulk bytes between hosts: 256 MiB aliased copies from a client host to an
agent host (network namespaces on a bridge, tests/hosts/testbed.py) over
links capped with tbf at 2, 10 and 25 Gbit/s each way, and uncapped; over
gRPC and UCX (TCP), at concurrency 1 and 2. Each figure is reported against
its ceiling: for one sequential round trip (the upload, then the download)
half the link rate; at concurrency 2, where one call's upload overlaps
another's download, the link rate. A raw TCP stream (bench/tcp_echo) and
`ucx_perftest` (tag_bw, 16 MiB messages) run over the same link in the
same run. Uncapped, the ceiling is the raw TCP stream's figure.

    sudo bash bench/hosts.sh [--caps=2gbit,10gbit,25gbit,none] [--json]

Root (network namespaces). The figures are arg bytes per second (GB/s,
10^9), as `farcall bench` reports them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "hosts"))
from testbed import Process, TestBed, available  # noqa: E402

BUILD = pathlib.Path(os.environ.get("FARCALL_BUILD_DIR", ROOT / "build"))
AGENT = BUILD / "device_agents" / "farcall-agent"
CLI = BUILD / "client" / "farcall"
TCP_ECHO = BUILD / "bench" / "tcp_echo"
BYTES = 256 << 20
RATES = {"2gbit": 2e9, "10gbit": 10e9, "25gbit": 25e9, "none": None}


def farcall_bench(bed, target, transport, concurrency, calls):
    r = bed.run("client", "env", "UCX_TLS=tcp", str(CLI), "bench", f"--target={target}",
                f"--bytes={BYTES}", "--alias", f"--calls={calls}", "--warmup=1",
                f"--concurrency={concurrency}", "--stagger", f"--transport={transport}", "--json",
                "--timeout_s=120", timeout=600)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def raw_tcp(bed, server):
    r = bed.run("client", str(TCP_ECHO), "oneway", f"--host={server.ip}",
                f"--port={server.port}", f"--bytes={4 * BYTES}")
    return json.loads(r.stdout.strip().splitlines()[-1])["gbps"] if r.returncode == 0 else 0.0


def ucx_perftest(bed):
    env = ["env", "UCX_TLS=tcp"]
    srv = subprocess.Popen(["ip", "netns", "exec", bed.ns("agent"), *env, "ucx_perftest",
                            "-t", "tag_bw", "-s", str(16 << 20), "-n", "40"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):  # the server takes a moment to listen
            r = bed.run("client", *env, "ucx_perftest", bed.ip("agent"), "-t", "tag_bw", "-s",
                        str(16 << 20), "-n", "40", timeout=120)
            m = re.search(r"^Final:\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S+)", r.stdout, re.M)
            if m:
                return float(m.group(1)) * (1 << 20) / 1e9
        return 0.0
    finally:
        srv.kill()
        srv.wait()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--caps", default="2gbit,10gbit,25gbit,none")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    why = available()
    if why:
        sys.exit(f"bench/hosts.sh: {why}")
    rows = []
    with TestBed(["client", "agent"]) as bed:
        agent = bed.start("agent", str(AGENT), "--ucx_transports=tcp", port=50051)
        echo = Process(bed, "agent", [str(TCP_ECHO), "server", f"--host={bed.ip('agent')}"])
        bed.processes.append(echo)
        for cap in a.caps.split(","):
            rate = RATES[cap]
            if rate is None:
                for ns, dev in ((bed.ns("client"), "eth0"), (bed.switch(), bed.port_of("client")),
                                (bed.ns("agent"), "eth0"), (bed.switch(), bed.port_of("agent"))):
                    subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev,
                                    "root"], capture_output=True)
            else:
                bed.cap("client", cap)
                bed.cap("agent", cap)
            tcp = raw_tcp(bed, echo)
            perf = ucx_perftest(bed)
            link = rate / 8 / 1e9 if rate else tcp
            row = {"cap": cap, "link_gbps": link, "tcp_gbps": tcp, "ucx_perftest_gbps": perf}
            for transport in ("grpc", "ucx"):
                for c in (1, 2):
                    r = farcall_bench(bed, agent.target, transport, c, calls=2 * c + 1)
                    ceiling = link / 2 if c == 1 else link
                    g = r.get("gbps", 0.0)
                    row[f"{transport}_c{c}"] = {"gbps": g, "of_ceiling": g / ceiling,
                                                 "p50_ms": r.get("p50_us", 0) / 1e3,
                                                 **({"error": r["error"]} if "error" in r else {})}
            rows.append(row)
            if not a.json:
                print_row(row)
    if a.json:
        print(json.dumps(rows))


def print_row(row):
    link = row["link_gbps"]
    print(f"link {row['cap']:>6}: ceiling {link:.3f} GB/s each way (uncapped: the raw TCP "
          f"stream); raw TCP {row['tcp_gbps']:.3f}, ucx_perftest {row['ucx_perftest_gbps']:.3f}")
    for key in ("grpc_c1", "grpc_c2", "ucx_c1", "ucx_c2"):
        r = row[key]
        transport, c = key.split("_c")
        ceiling = "half the link" if c == "1" else "the link"
        err = f"  ERROR {r['error']}" if "error" in r else ""
        print(f"  {transport:4} concurrency {c}: {r['gbps']:.3f} GB/s = {r['of_ceiling']:.2f}x "
              f"{ceiling} (p50 {r['p50_ms']:.0f} ms){err}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
