"""Python client and JAX drop-in against the C++ client, side by side.

Starts one CPU agent on loopback and measures, in one run:
  1. a 64 MiB aliased copy: farcall.Client from Python vs `farcall bench
     --alias` (the C++ client) with the same sizes and transport, over gRPC
     (streamed) and over shared memory (the input in a shared buffer);
     throughput ratios (target: >= 0.9x);
  2. a 64-byte call: the p50 of a jitted farcall.jax.buffer_callback on the
     XLA FFI path vs the C++ client's p50 over gRPC, both as they come
     (target: <= 1.2x), and the jax.pure_callback fallback's p50 next to
     them; for information, the same with polling on both sides or on
     neither (the FFI path polls for a quick handler's answer by default,
     the C++ client with --busy_poll_us);
  3. overlap: a jitted step holding a 60 ms remote call and independent
     local compute (tanh of matrix products, about half as long), against
     the sum of the two jitted alone (target: <= 0.75x: the asynchronous FFI
     handler lets XLA run the local work while the call is out), for the
     built-in `sleep` (no tensors) and for a pure call with an f32[4] input
     computed in the step and a result the step uses (bench/
     slow_copy_handlers.py on a Python agent; made in two halves, see
     docs/performance.md), and that callback in JAX's own buffer_callback;
  4. examples/jax_mlp.py's median step time: its optimizer step on a Python
     agent against the same callback in-process in JAX's own
     buffer_callback (reported).
Each figure is the median of FARCALL_BENCH_REPS repetitions (default 3).
Every measurement of a repetition runs in a fresh process, as the C++ CLI
does: a process that has just moved 64 MiB tensors answers small calls
30-50 us slower for a while, which would skew the small-call figures.

    .venv/bin/python bench/python_bench.py [--json]
"""

import json
import os
import re
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.buffer_callback import buffer_callback as jax_buffer_callback

import farcall
import farcall.jax as fj
from timing import p50_us

BUILD = os.environ.get("FARCALL_BUILD_DIR", "build")
REPS = int(os.environ.get("FARCALL_BENCH_REPS", "3"))
BIG = 64 << 20
BIG_CALLS = int(os.environ.get("FARCALL_BENCH_BIG_CALLS", "20"))
SMALL_CALLS = int(os.environ.get("FARCALL_BENCH_SMALL_CALLS", "2000"))
POLL_US = 500  # the FFI path's most, for the C++ client's polling row
MLP_STEPS = int(os.environ.get("FARCALL_BENCH_MLP_STEPS", "60"))
OVERLAP_STEPS = int(os.environ.get("FARCALL_BENCH_OVERLAP_STEPS", "15"))


def start_agent(command=None):
    """The C++ cpu agent, or `command` (a Python agent); returns it and its
    address."""
    r, w = os.pipe()
    command = command or [f"{BUILD}/device_agents/farcall-agent"]
    proc = subprocess.Popen(command + ["--listen=127.0.0.1:0", f"--ready_fd={w}"],
                            pass_fds=(w,), stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r) as f:
        line = f.read().split()
    if not line:
        sys.exit(f"{command[0]} failed to start")
    return proc, f"127.0.0.1:{line[0]}"


def cpp_bench(target, nbytes, calls, alias, shm=False, extra=()):
    argv = [f"{BUILD}/client/farcall", "bench", f"--target={target}", f"--bytes={nbytes}",
            f"--calls={calls}", "--json"] + (["--alias"] if alias else []) + (
                ["--shm"] if shm else []) + list(extra)
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def python_big_copy(client, shm):
    if shm:
        x = farcall.shared_array((BIG,), np.uint8, client)
        x[:] = np.random.default_rng(0).integers(0, 255, BIG, dtype=np.uint8)
    else:
        x = np.random.default_rng(0).integers(0, 255, BIG, dtype=np.uint8)
    rpc = "auto" if shm else "stream"
    client.call("copy", x, results=[x], input_output_aliases={0: 0}, rpc=rpc)  # warm up
    t0 = time.perf_counter()
    for _ in range(BIG_CALLS):
        client.call("copy", x, results=[x], input_output_aliases={0: 0}, rpc=rpc)
    return BIG * BIG_CALLS / (time.perf_counter() - t0) / 1e9


def jitted(target, host_callback, busy_poll=None):
    fj.prefer_host_callback(host_callback)
    try:
        f = jax.jit(fj.buffer_callback("copy", jax.ShapeDtypeStruct((16,), jnp.float32),
                                       target=target, busy_poll=busy_poll))
        x = jnp.ones(16, jnp.float32)
        f(x).block_until_ready()
        return lambda: f(x).block_until_ready()
    finally:
        fj.prefer_host_callback(False)


def _slow_copy_in_process(ctx, out, x):
    time.sleep(0.06)
    np.copyto(np.asarray(out), np.asarray(x))


def overlap(target, kind):
    """The step's median time over the sum of its two halves' (each jitted
    alone), in one process. The remote half: the built-in `sleep` (no
    tensors; kind "sleep"), or slow_copy on a Python agent (kind "tensor"),
    a pure call whose f32[4] input is computed in the step and whose result
    the step adds to the local work's, or the same callback in-process in
    JAX's own buffer_callback (kind "tensor_jax")."""
    s4 = jax.ShapeDtypeStruct((4,), jnp.float32)
    if kind == "sleep":
        sleep = fj.buffer_callback("sleep", [], target=target, attributes={"ms": 60},
                                   has_side_effect=True)

        def remote(x):
            return (sleep(), jnp.full((4,), x))[1]
    else:
        slow = (fj.buffer_callback("slow_copy", s4, target=target) if kind == "tensor"
                else jax_buffer_callback(_slow_copy_in_process, s4))

        def remote(x):
            return slow(jnp.full((4,), x * 2))

    def local(a):
        for _ in range(6):
            a = jnp.tanh(a @ a)
        return a

    a = jnp.full((700, 700), 0.001, jnp.float32)
    x = jnp.ones((), jnp.float32)
    remote_only = jax.jit(remote)
    local_only = jax.jit(local)
    step = jax.jit(lambda x, a: local(a) + remote(x)[0])

    def median_s(f, *args):
        jax.block_until_ready(f(*args))
        times = []
        for _ in range(OVERLAP_STEPS):
            start = time.perf_counter()
            jax.block_until_ready(f(*args))
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    remote_s, local_s = median_s(remote_only, x), median_s(local_only, a)
    return median_s(step, x, a) / (remote_s + local_s)


def mlp_step_us():
    """examples/jax_mlp.py's median step times, remote and in-process (us)."""
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                           "jax_mlp.py")
    out = subprocess.run([sys.executable, example, f"--steps={MLP_STEPS}"], check=True,
                         capture_output=True, text=True).stdout
    m = re.search(r"median step: (\d+) us with the step on the agent, (\d+) us", out)
    if m is None:
        sys.exit(f"examples/jax_mlp.py printed no median step:\n{out}")
    return float(m.group(1)), float(m.group(2))


def measure_in_child(target, what):
    """Runs one Python measurement in a fresh interpreter; returns its figure."""
    out = subprocess.run([sys.executable, __file__, "--measure", what, target], check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def measure(what, target):
    if what == "ffi_p50":
        return p50_us(jitted(target, False), SMALL_CALLS)
    if what == "ffi_nopoll_p50":
        return p50_us(jitted(target, False, busy_poll=0), SMALL_CALLS)
    if what == "cb_p50":
        return p50_us(jitted(target, True), SMALL_CALLS)
    if what.startswith("overlap"):
        return overlap(target, {"overlap": "sleep", "overlap_tensor": "tensor",
                                "overlap_tensor_jax": "tensor_jax"}[what])
    return python_big_copy(farcall.Client(target), shm=(what == "py_shm_gbps"))


def main():
    if "--measure" in sys.argv:
        what, target = sys.argv[sys.argv.index("--measure") + 1:][:2]
        print(measure(what, target))
        return
    proc, target = start_agent()
    py_proc, py_target = start_agent(
        [sys.executable, "-m", "farcall.agent", "--log_level=warning",
         f"--handlers={os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slow_copy_handlers.py')}"])
    try:
        rows = {k: [] for k in ("py_gbps", "cpp_gbps", "py_shm_gbps", "cpp_shm_gbps",
                                "ffi_p50", "cpp_p50", "ffi_nopoll_p50", "cpp_poll_p50",
                                "cb_p50", "overlap", "overlap_tensor", "overlap_tensor_jax",
                                "mlp_remote_us", "mlp_local_us")}
        for _ in range(REPS):
            rows["cpp_gbps"].append(cpp_bench(target, BIG, BIG_CALLS, True)["gbps"])
            rows["py_gbps"].append(measure_in_child(target, "py_gbps"))
            rows["cpp_shm_gbps"].append(cpp_bench(target, BIG, BIG_CALLS, True, shm=True)["gbps"])
            rows["py_shm_gbps"].append(measure_in_child(target, "py_shm_gbps"))
            rows["cpp_p50"].append(
                cpp_bench(target, 64, SMALL_CALLS, False, extra=["--transport=grpc"])["p50_us"])
            rows["ffi_p50"].append(measure_in_child(target, "ffi_p50"))
            rows["cpp_poll_p50"].append(
                cpp_bench(target, 64, SMALL_CALLS, False,
                          extra=["--transport=grpc", f"--busy_poll_us={POLL_US}"])["p50_us"])
            rows["ffi_nopoll_p50"].append(measure_in_child(target, "ffi_nopoll_p50"))
            rows["cb_p50"].append(measure_in_child(target, "cb_p50"))
            rows["overlap"].append(measure_in_child(target, "overlap"))
            rows["overlap_tensor"].append(measure_in_child(py_target, "overlap_tensor"))
            rows["overlap_tensor_jax"].append(measure_in_child(py_target, "overlap_tensor_jax"))
            remote_us, local_us = mlp_step_us()
            rows["mlp_remote_us"].append(remote_us)
            rows["mlp_local_us"].append(local_us)
    finally:
        for p in (proc, py_proc):
            p.terminate()
            p.wait()
    med = {k: statistics.median(v) for k, v in rows.items()}
    result = {
        "reps": REPS,
        "copy_64mib_aliased": {
            "python_gbps": med["py_gbps"], "cpp_gbps": med["cpp_gbps"],
            "ratio": med["py_gbps"] / med["cpp_gbps"],
            "shm_python_gbps": med["py_shm_gbps"], "shm_cpp_gbps": med["cpp_shm_gbps"],
            "shm_ratio": med["py_shm_gbps"] / med["cpp_shm_gbps"], "target": ">= 0.9"},
        "call_64_bytes_p50_us": {
            "jax_ffi": med["ffi_p50"], "cpp_client": med["cpp_p50"],
            "ratio": med["ffi_p50"] / med["cpp_p50"], "target": "<= 1.2",
            "jax_ffi_no_polling": med["ffi_nopoll_p50"],
            "cpp_client_polling": med["cpp_poll_p50"],
            "ratio_neither_polls": med["ffi_nopoll_p50"] / med["cpp_p50"],
            "ratio_both_poll": med["ffi_p50"] / med["cpp_poll_p50"],
            "jax_pure_callback": med["cb_p50"],
            "pure_callback_ratio": med["cb_p50"] / med["cpp_p50"]},
        "step_60ms_remote_with_local_compute": {
            "ratio_to_sum": med["overlap"], "target": "<= 0.75",
            "tensor_ratio_to_sum": med["overlap_tensor"], "tensor_target": "<= 0.75",
            "tensor_jax_in_process_ratio_to_sum": med["overlap_tensor_jax"]},
        "mlp_example_median_step_us": {
            "remote": med["mlp_remote_us"], "in_process": med["mlp_local_us"],
            "ratio": med["mlp_remote_us"] / med["mlp_local_us"]},
        "all_reps": rows,
    }
    if "--json" in sys.argv:
        print(json.dumps(result))
        return
    c, s = result["copy_64mib_aliased"], result["call_64_bytes_p50_us"]
    print(f"64 MiB aliased copy, {BIG_CALLS} calls, median of {REPS}:")
    print(f"  gRPC: farcall.Client (Python) {c['python_gbps']:.3f} GB/s, farcall bench (C++) "
          f"{c['cpp_gbps']:.3f} GB/s: {c['ratio']:.2f}x   (target >= 0.9x)")
    print(f"  shm:  farcall.Client (Python) {c['shm_python_gbps']:.3f} GB/s, farcall bench (C++) "
          f"{c['shm_cpp_gbps']:.3f} GB/s: {c['shm_ratio']:.2f}x   (target >= 0.9x)")
    print(f"64-byte call p50, {SMALL_CALLS} calls, median of {REPS}:")
    print(f"  jitted, XLA FFI path     {s['jax_ffi']:.1f} us")
    print(f"  C++ client               {s['cpp_client']:.1f} us")
    print(f"  ratio                    {s['ratio']:.2f}x   (target <= 1.2x)")
    print(f"  neither polls: FFI {s['jax_ffi_no_polling']:.1f} us, "
          f"{s['ratio_neither_polls']:.2f}x the C++ client")
    print(f"  both poll: C++ client --busy_poll_us={POLL_US} {s['cpp_client_polling']:.1f} us, "
          f"FFI {s['ratio_both_poll']:.2f}x it")
    print(f"  jitted, pure_callback    {s['jax_pure_callback']:.1f} us "
          f"({s['pure_callback_ratio']:.2f}x the C++ client)")
    o = result["step_60ms_remote_with_local_compute"]
    print(f"jitted step, a 60 ms remote call beside independent local compute, median of {REPS}:")
    print(f"  step / (remote alone + local alone), built-in sleep, no tensors  "
          f"{o['ratio_to_sum']:.2f}x   (target <= 0.75x; "
          f"all: {', '.join(f'{v:.2f}' for v in rows['overlap'])})")
    print(f"  the same, a pure call with an f32[4] input and result            "
          f"{o['tensor_ratio_to_sum']:.2f}x   (target <= 0.75x; "
          f"all: {', '.join(f'{v:.2f}' for v in rows['overlap_tensor'])})")
    print(f"  that callback in-process in JAX's own buffer_callback            "
          f"{o['tensor_jax_in_process_ratio_to_sum']:.2f}x")
    m = result["mlp_example_median_step_us"]
    print(f"examples/jax_mlp.py median step, median of {REPS}:")
    print(f"  optimizer step on the agent {m['remote']:.0f} us, in-process (JAX's "
          f"buffer_callback) {m['in_process']:.0f} us: {m['ratio']:.1f}x")


if __name__ == "__main__":
    main()
