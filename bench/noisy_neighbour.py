"""Two tenants on one cpu agent: tenant B's 256 KiB copies, alone and while
tenant C keeps 8 slow calls (the built-in sleep, 2 s each) in flight. Reports
B's p50 and throughput loaded against unloaded, measured in the same run,
for the agent as it is by default (tenants share the workers, with spare
threads for a tenant that holds none), with --tenant_spare_workers=0 (turns
alone: B waits for one of C's calls to end) and with --tenant_max_calls=1.
The agent has 2 workers, so that the figures do not depend on the machine's
cores. The target: B's p50 within 2x of alone, its throughput within 0.5x.

Run: .venv/bin/python bench/noisy_neighbour.py   (from the repository
root, after a build; FARCALL_BENCH_REPS rounds, 3 by default). It calls
through the Python package in build/python (bash scripts/build.sh puts it
there), so it needs .venv's numpy and ml_dtypes.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (bench/run.py: start, last_json)

sys.path.insert(0, os.path.join(run.B, "python"))
import farcall  # noqa: E402

B_TOKEN = "tenant-b-token-0123456789"
C_TOKEN = "tenant-c-token-0123456789"
LOADED_DEADLINE_S = 30


def bench_b(port, token_file, calls, timeout_s):
    """B's copies; None when they did not finish within timeout_s."""
    argv = [f"{run.B}/client/farcall", "bench", f"--target=127.0.0.1:{port}", "--json",
            f"--token_file={token_file}", "--bytes=262144", f"--calls={calls}", "--transport=grpc"]
    try:
        return run.last_json(argv) if timeout_s is None else json_within(argv, timeout_s)
    except subprocess.TimeoutExpired:
        return None


def json_within(argv, timeout_s):
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=timeout_s)
    return json.loads(out.stdout.strip().splitlines()[-1])


def one_round(flags, d):
    agent, port = run.start("agent", [f"{run.B}/device_agents/farcall-agent",
                                      "--listen=127.0.0.1:0", "--workers=2",
                                      f"--tokens_file={d}/tokens"] + flags)
    stop = threading.Event()
    threads = []
    try:
        alone = bench_b(port, f"{d}/b", 200, None)
        c = farcall.Client(f"127.0.0.1:{port}", token=C_TOKEN)

        def keep_calling():
            while not stop.is_set():
                try:
                    c.call("sleep", results=[], attributes={"ms": 2000}, timeout=30)
                except farcall.Error:
                    time.sleep(0.05)  # refused (over its quota): C tries again
        for _ in range(8):
            threads.append(threading.Thread(target=keep_calling, daemon=True))
            threads[-1].start()
        # C's calls are on the agent before B is measured (bounded wait).
        watcher = farcall.Client(f"127.0.0.1:{port}", token=B_TOKEN)
        end = time.monotonic() + 20
        while watcher.describe().inflight_calls < 1 and time.monotonic() < end:
            pass
        loaded = bench_b(port, f"{d}/b", 50, LOADED_DEADLINE_S)
        return alone, loaded
    finally:
        stop.set()
        agent.terminate()
        agent.wait()
        for t in threads:
            t.join(timeout=35)


def main():
    d = tempfile.mkdtemp(prefix="farcall-nn-")
    with open(f"{d}/tokens", "w") as f:
        f.write(f"{B_TOKEN} * tenant=b\n{C_TOKEN} * tenant=c\n")
    with open(f"{d}/b", "w") as f:
        f.write(B_TOKEN + "\n")
    print("tenant B's 256 KiB copies while tenant C keeps 8 sleep calls (2 s) in flight;"
          " agent with 2 workers")
    for name, flags in (("default", []), ("--tenant_spare_workers=0", ["--tenant_spare_workers=0"]),
                        ("--tenant_max_calls=1", ["--tenant_max_calls=1"])):
        p50, tput = [], []
        for _ in range(run.REPS):
            alone, loaded = one_round(flags, d)
            if loaded is None:
                p50.append(float("inf"))
                tput.append(0.0)
            else:
                p50.append(loaded["p50_us"] / alone["p50_us"])
                tput.append(loaded["gbps"] / alone["gbps"])
        shown = ", ".join("no 50 calls in %d s" % LOADED_DEADLINE_S if r == float("inf")
                          else f"{r:.2f}" for r in p50)
        print(f"  {name:25} B's p50 loaded/alone: {shown}; "
              f"throughput loaded/alone: {', '.join(f'{t:.2f}' for t in tput)} "
              f"(median p50 ratio {statistics.median(p50):.2f})")


if __name__ == "__main__":
    main()
