"""Two builds of farcall side by side on the same scenario, alternating, so
that a change's cost is measured against the code before it in one run on
one (noisy) machine. Each round starts each build's agent and router and
runs that build's `farcall bench` on them, the builds taking turns.

    python3 bench/compare_builds.py BASE_BUILD NEW_BUILD [--rounds=3] \\
        [--key=gbps|p50_us] [--new_flags="..."] -- BENCH_FLAGS...

BENCH_FLAGS are `farcall bench`'s (--bytes, --calls, --alias, ...). Prints
each round's figure per build and target (the agent directly; the router,
whose agents the client calls directly unless --via_router), the medians,
and NEW / BASE. With --new_flags, those flags go to the new build's bench
only (the cost of an option that the base build has not got).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import start  # noqa: E402: bench/run.py's, beside this file


def one_round(build, flags, key):
    """{target: figure} for one build: its agent, and its router in front."""
    procs = []
    try:
        agent, ap = start("agent", [f"{build}/device_agents/farcall-agent",
                                    "--listen=127.0.0.1:0", f"--max_call_bytes={4 << 30}"])
        procs.append(agent)
        router, rp = start("router", [f"{build}/server/farcall-router",
                                      "--listen=127.0.0.1:0", f"--agents=127.0.0.1:{ap}"])
        procs.append(router)
        out = {}
        for name, port in (("direct", ap), ("router", rp)):
            run = subprocess.run([f"{build}/client/farcall", "bench",
                                  f"--target=127.0.0.1:{port}", "--json"] + flags,
                                 check=True, capture_output=True, text=True)
            out[name] = json.loads(run.stdout.strip().splitlines()[-1])[key]
        return out
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--key", default="gbps", help="the bench JSON's figure: gbps or p50_us")
    ap.add_argument("--new_flags", default="", help="bench flags for the new build only")
    argv = sys.argv[1:]
    bench_flags = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    a.bench_flags = bench_flags
    figures = {b: {"direct": [], "router": []} for b in ("base", "new")}
    for i in range(a.rounds):
        for b, build in (("base", a.base), ("new", a.new)):
            flags = a.bench_flags + (a.new_flags.split() if b == "new" and a.new_flags else [])
            got = one_round(build, flags, a.key)
            for t, v in got.items():
                figures[b][t].append(v)
            print(f"round {i + 1} {b:4}: " +
                  ", ".join(f"{t} {v:.3f}" for t, v in got.items()), flush=True)
    for t in ("direct", "router"):
        base = statistics.median(figures["base"][t])
        new = statistics.median(figures["new"][t])
        print(f"{t:6} median {a.key}: base {base:.3f}, new {new:.3f}, new/base {new / base:.3f}")


if __name__ == "__main__":
    main()
