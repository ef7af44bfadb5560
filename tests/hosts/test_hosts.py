"""farcall between hosts: network namespaces (tests/hosts/testbed.py) for a
client, a router and two agents on one bridge, each test against real
processes. Skipped, saying why, where namespaces cannot be made (not root).

    sudo PYTHONPATH=build/python FARCALL_AGENT_BIN=... FARCALL_ROUTER_BIN=... \\
        .venv/bin/python -m pytest -q tests/hosts
"""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from testbed import TestBed, available, wait_until  # noqa: E402

AGENT_BIN = os.environ.get("FARCALL_AGENT_BIN", "build/device_agents/farcall-agent")
ROUTER_BIN = os.environ.get("FARCALL_ROUTER_BIN", "build/server/farcall-router")

why_not = available()
pytestmark = pytest.mark.skipif(why_not is not None, reason=why_not or "")


@pytest.fixture
def bed():
    with TestBed(["client", "router", "agent-a", "agent-b"]) as b:
        yield b


def agents_and_router(bed, *router_flags, agent_flags=()):
    a = bed.start("agent-a", AGENT_BIN, "--metrics_listen=127.0.0.1:0", *agent_flags)
    b = bed.start("agent-b", AGENT_BIN, "--metrics_listen=127.0.0.1:0", *agent_flags)
    router = bed.start("router", ROUTER_BIN, "--metrics_listen=127.0.0.1:0",
                       *(router_flags or (f"--agents={a.target},{b.target}",)))
    return a, b, router


def calls_on(bed, agent) -> float:
    n = bed.metric(agent, 'farcall_agent_calls_total{code="OK",handler="copy",platform="cpu",tenant="-"}')
    return 0 if n != n else n  # no series before its first call


def test_lookaside_calls_go_straight_from_the_client_to_the_agents(bed):
    a, b, router = agents_and_router(bed)
    for _ in range(4):
        r = bed.call("client", router.target)
        assert r["ok"], r
        assert r["via_router"] is False, r  # the router only named the agent
    assert calls_on(bed, a) + calls_on(bed, b) == 4
    # The router named the agents and forwarded none of the calls.
    assert bed.metric(router, "farcall_router_resolves_total"
                              '{code="OK",handler="copy",platform="cpu"}') >= 1
    assert not bed.metric(router, 'farcall_router_calls_total{code="OK",handler="copy",'
                                  'platform="cpu",tenant="-"}') >= 1


def test_a_client_with_no_route_to_the_agents_goes_through_the_router(bed):
    a, b, router = agents_and_router(bed)
    bed.unreachable("client", "agent-a")
    bed.unreachable("client", "agent-b")
    for _ in range(3):
        r = bed.call("client", router.target)
        assert r["ok"], r
        assert r["via_router"] is True, r
    assert calls_on(bed, a) + calls_on(bed, b) == 3


def test_an_agent_cut_off_mid_call_fails_cleanly_within_the_deadline_and_calls_recover(bed):
    a = bed.start("agent-a", AGENT_BIN, "--metrics_listen=127.0.0.1:0")
    held = bed.call_in_background("client", a.target, handler="sleep", ms=20000, timeout=6)
    wait_until(lambda: bed.metric(a, "farcall_agent_inflight_calls") >= 1, 30,
               "the call reaching the agent")
    bed.link("agent-a", up=False)
    out, err = held.communicate(timeout=60)
    assert out.strip(), err
    r = json.loads(out.strip().splitlines()[-1])
    assert not r["ok"], r
    assert r["code"] in ("DEADLINE_EXCEEDED", "UNAVAILABLE"), r
    assert r["seconds"] < 6 + 2, r  # the deadline, not a hang
    failed = bed.call("client", a.target, timeout=2)
    assert not failed["ok"] and failed["seconds"] < 4, failed
    bed.link("agent-a", up=True)
    took = wait_until(lambda: bed.call("client", a.target, timeout=5)["ok"], 60,
                      "a call after the link healed")
    print(f"cut mid-call: {r['code']} after {r['seconds']:.2f} s; calls again {took:.1f} s "
          "after the link healed")


def test_an_agent_host_cut_off_is_left_out_by_the_router_and_taken_back(bed):
    a, b, router = agents_and_router(bed)
    bed.link("agent-a", up=False)
    # Calls keep working: the router names agent-b (its probe of agent-a
    # fails), and a direct call that cannot reach agent-a goes elsewhere.
    for _ in range(4):
        r = bed.call("client", router.target, timeout=10)
        assert r["ok"], r
    up = f'farcall_router_agent_up{{agent="{a.target}",platform="cpu"}}'
    assert bed.metric(router, up) == 0
    bed.link("agent-a", up=True)
    took = wait_until(lambda: bed.metric(router, up) == 1, 30, "the router taking agent-a back")
    print(f"the router took a healed agent back after {took:.2f} s")


def test_ucx_between_hosts_and_grpc_when_its_port_is_blocked(bed):
    a = bed.start("agent-a", AGENT_BIN)
    big = 4 << 20  # auto sends calls of 1 MiB or more over UCX to an agent offering it
    r = bed.call("client", a.target, bytes=big, transport="ucx")
    if not r["ok"] and r["code"] == "FAILED_PRECONDITION":
        pytest.skip(f"this build or agent offers no UCX: {r['message']}")
    assert r["ok"] and r["transport"] == "ucx", r
    r = bed.call("client", a.target, bytes=big)
    assert r["ok"] and r["transport"] == "ucx", r
    # Only the agent's gRPC port stays open: UCX's own connections, which
    # either side may open, are refused on both.
    bed.iptables("agent-a", "-A", "INPUT", "-p", "tcp", "--dport", str(a.port), "-j", "ACCEPT")
    for host in ("agent-a", "client"):
        bed.iptables(host, "-A", "INPUT", "-p", "tcp", "-m", "conntrack", "--ctstate",
                     "ESTABLISHED,RELATED", "-j", "ACCEPT")
        bed.iptables(host, "-A", "INPUT", "-p", "tcp", "-j", "REJECT", "--reject-with",
                     "tcp-reset")
    r = bed.call("client", a.target, bytes=big, timeout=30)
    assert r["ok"], r
    assert r["transport"] == "grpc", r


def test_the_router_finds_agents_by_name_and_notices_one_removed(bed):
    bed.write_hosts("router", {"agents": [bed.ip("agent-a"), bed.ip("agent-b")]})
    a = bed.start("agent-a", AGENT_BIN, "--metrics_listen=127.0.0.1:0", port=50051)
    b = bed.start("agent-b", AGENT_BIN, "--metrics_listen=127.0.0.1:0", port=50051)
    router = bed.start("router", ROUTER_BIN, "--metrics_listen=127.0.0.1:0",
                       "--agents=dns:///agents:50051")
    assert bed.metric(router, 'farcall_router_agent_source_addresses'
                              '{source="dns:///agents:50051"}') == 2
    for agent in (a, b):
        assert bed.metric(router, f'farcall_router_agent_up{{agent="{agent.target}",'
                                  'platform="cpu"}') == 1
    r = bed.call("client", router.target)
    assert r["ok"], r
    # agent-b leaves the name (a pod removed from a headless Service).
    bed.write_hosts("router", {"agents": [bed.ip("agent-a")]})
    took = wait_until(lambda: bed.metric(
        router, f'farcall_router_agent_up{{agent="{b.target}",platform="cpu"}}') != 1, 10,
        "the router dropping agent-b")
    before = calls_on(bed, b)
    for _ in range(4):
        r = bed.call("client", router.target)
        assert r["ok"], r
    assert calls_on(bed, b) == before  # named no more
    print(f"the router dropped a removed agent after {took:.2f} s")
