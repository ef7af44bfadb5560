"""Resident arrays against calls that send every byte, in one run.

  1. A step that updates 64 MiB of resident state with a 1 MiB gradient
     (bench/resident_handlers.py on a Python agent), over gRPC and with
     transport auto (shared memory on this host): the tensor bytes it
     moves each way per step on the wire, from the agent's own counters
     (farcall_agent_received_bytes_total, farcall_agent_sent_bytes_total;
     target: at most 1.1 MiB each way; none over shared memory), and its
     p50 against a 1 MiB call with no resident to the same agent over the
     same transport (target: <= 1.2x).
  2. Client.put and Client.get of 256 MiB against a 256 MiB call over the
     same transport (gRPC, to the C++ cpu agent): the aliased copy moves
     256 MiB each way, as a put and a get together do (target: their time
     <= the call's / 0.9, a ratio >= 0.9x); and a put alone against `sum`
     of 256 MiB, which moves the same bytes in (reported).
Each figure is the median of FARCALL_BENCH_REPS repetitions (default 3),
each in fresh agents.

    .venv/bin/python bench/resident_bench.py [--json]
"""

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

import numpy as np

import farcall
from timing import p50_us

BUILD = os.environ.get("FARCALL_BUILD_DIR", "build")
REPS = int(os.environ.get("FARCALL_BENCH_REPS", "3"))
STEPS = int(os.environ.get("FARCALL_BENCH_RESIDENT_STEPS", "200"))
BIG_CALLS = int(os.environ.get("FARCALL_BENCH_RESIDENT_BIG_CALLS", "5"))
HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def start(command):
    """An agent on loopback with a metrics port: (process, address, metrics port)."""
    r, w = os.pipe()
    proc = subprocess.Popen(command + ["--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                       f"--ready_fd={w}"],
                            pass_fds=(w,), stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r) as f:
        ports = f.read().split()
    if len(ports) < 2:
        sys.exit(f"{command[0]} failed to start")
    return proc, f"127.0.0.1:{ports[0]}", int(ports[1])


def counter(metrics_port, name):
    """The sum of a counter's series on an agent's metrics page."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    total = 0.0
    for line in text.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def step_row(transport):
    proc, address, metrics = start([sys.executable, "-m", "farcall.agent",
                                    f"--handlers={HERE}/resident_handlers.py"])
    try:
        c = farcall.Client(address, transport=transport)
        grad = np.random.default_rng(0).standard_normal(MIB // 4).astype(np.float32)
        state = c.put(np.zeros(64 * MIB // 4, dtype=np.float32))
        gspec = farcall.Spec(grad.shape, grad.dtype)
        sspec = farcall.Spec(state.shape, state.dtype)

        def baseline():
            c.call("grad_echo", grad, results=[gspec])

        def step():
            c.call("state_step", grad, state, results=[gspec, sspec],
                   input_output_aliases={1: 1})

        base = p50_us(baseline, STEPS, warmup=20) / 1e6
        received0 = counter(metrics, "farcall_agent_received_bytes_total")
        sent0 = counter(metrics, "farcall_agent_sent_bytes_total")
        resident = p50_us(step, STEPS, warmup=20) / 1e6
        n = STEPS + 20
        received = (counter(metrics, "farcall_agent_received_bytes_total") - received0) / n
        sent = (counter(metrics, "farcall_agent_sent_bytes_total") - sent0) / n
        return {f"{transport}_step_in_mib": received / MIB,
                f"{transport}_step_out_mib": sent / MIB,
                f"{transport}_baseline_p50_us": base * 1e6,
                f"{transport}_step_p50_us": resident * 1e6,
                f"{transport}_step_p50_ratio": resident / base}
    finally:
        proc.terminate()
        proc.wait()


def big_row():
    proc, address, _ = start([f"{BUILD}/device_agents/farcall-agent"])
    try:
        c = farcall.Client(address, transport="grpc")
        x = np.random.default_rng(1).integers(0, 255, 256 * MIB, dtype=np.uint8)
        spec = farcall.Spec(x.shape, x.dtype)

        def timed(fn):
            fn()  # warm up
            times = []
            for _ in range(BIG_CALLS):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)

        copy = timed(lambda: c.call("copy", x, results=[x], input_output_aliases={0: 0}))
        total = timed(lambda: c.call("sum", x, results=[farcall.Spec((), np.uint8)]))
        r = c.put(x)
        put = timed(lambda: c.delete(c.put(x)))
        snapshot = np.empty_like(x)  # reused, as the copy's memory is
        get = timed(lambda: c.get(r, out=snapshot))
        assert np.array_equal(c.get(r), x)
        return {"copy_256mib_s": copy, "sum_256mib_s": total, "put_256mib_s": put,
                "get_256mib_s": get, "put_get_ratio": copy / (put + get),
                "put_ratio": total / put}
    finally:
        proc.terminate()
        proc.wait()


def main():
    reps = []
    for _ in range(REPS):
        row = step_row("grpc")
        row.update(step_row("auto"))
        row.update(big_row())
        reps.append(row)
    med = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
    targets = {
        "grpc_step_in_mib": med["grpc_step_in_mib"] <= 1.1,
        "grpc_step_out_mib": med["grpc_step_out_mib"] <= 1.1,
        "grpc_step_p50_ratio": med["grpc_step_p50_ratio"] <= 1.2,
        "auto_step_p50_ratio": med["auto_step_p50_ratio"] <= 1.2,
        "put_get_ratio": med["put_get_ratio"] >= 0.9,
    }
    if "--json" in sys.argv:
        print(json.dumps({"median": med, "reps": reps, "targets_met": targets}))
        return
    print(f"resident arrays, median of {REPS} runs (each: its own agents)")
    for t, how in (("grpc", "over gRPC"), ("auto", "transport auto (shared memory here)")):
        print(f"  step on 64 MiB resident state, 1 MiB gradient, {how}: "
              f"{med[t + '_step_in_mib']:.3f} MiB in, {med[t + '_step_out_mib']:.3f} MiB out "
              f"per step on the wire (target <= 1.1 each); p50 {med[t + '_step_p50_us']:.0f} us "
              f"vs a 1 MiB call's {med[t + '_baseline_p50_us']:.0f} us: "
              f"{med[t + '_step_p50_ratio']:.2f}x (target <= 1.2x)")
    print(f"  put+get 256 MiB {med['put_256mib_s'] * 1e3:.0f}+{med['get_256mib_s'] * 1e3:.0f} ms "
          f"vs a 256 MiB aliased copy {med['copy_256mib_s'] * 1e3:.0f} ms: "
          f"{med['put_get_ratio']:.2f}x (target >= 0.9x)")
    print(f"  put 256 MiB vs sum of 256 MiB ({med['sum_256mib_s'] * 1e3:.0f} ms): "
          f"{med['put_ratio']:.2f}x")
    for k, ok in targets.items():
        print(f"  {k}: {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
