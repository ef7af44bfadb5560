"""Top-k gradient compression with error feedback, its residual kept on a
farcall agent as a resident array, through a router with two agents; the
agent that holds the residual is killed mid-run, and the run recovers from
its last snapshot.

Each jitted step sends only its gradient: the residual stays on the agent
that holds it, and every step goes there (sticky routing). Every
--snapshot_every steps the loop takes a snapshot (Client.get). When the
holder dies, the next step fails; the client says why with a typed error
(farcall.ResidentLostError), the loop puts the snapshot back on the other
agent (Client.put) and goes on. Each step's output is checked against the
same computation in-process, with the residual rolled back the same way.

    python examples/jax_resident.py [--steps=60] [--kill_at=25]
"""

import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import farcall
import farcall.jax as fj

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from resident_handlers import topk_error_feedback  # noqa: E402  (the same function, in-process)

N, K = 4096, 64


def start(command: list) -> tuple[subprocess.Popen, str]:
    """A server on loopback; returns it and its address."""
    r, w = os.pipe()
    proc = subprocess.Popen(command + ["--listen=127.0.0.1:0", f"--ready_fd={w}",
                                       "--log_level=warning"], pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as f:
        words = f.read().split()
    if not words:
        raise SystemExit(f"{command[0]} failed to start")
    return proc, f"127.0.0.1:{words[0]}"


def router_binary() -> str:
    return (os.environ.get("FARCALL_ROUTER_BIN") or shutil.which("farcall-router")
            or str(HERE.parent / "build" / "server" / "farcall-router"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--kill_at", type=int, default=25)
    parser.add_argument("--snapshot_every", type=int, default=10)
    args = parser.parse_args()

    agents = [start([sys.executable, "-m", "farcall.agent",
                     f"--handlers={HERE}/resident_handlers.py"]) for _ in range(2)]
    router, target = start([router_binary(), "--agents=" + ",".join(a for _, a in agents)])
    procs = [p for p, _ in agents] + [router]
    try:
        client = farcall.Client(target)
        ids = {farcall.Client(a).describe().agent_id: p for p, a in agents}

        def make_step(residual):
            return jax.jit(fj.buffer_callback(
                "topk_ef", jax.ShapeDtypeStruct((N,), jnp.float32), target=target,
                has_side_effect=True, attributes={"k": K}, resident={"residual": residual}))

        residual = client.put(np.zeros(N, np.float32))
        step = make_step(residual)
        snapshot, snapshot_step = client.get(residual), 0
        local = np.zeros(N, np.float32)  # the in-process residual
        local_snapshot = local.copy()
        rng = np.random.default_rng(0)
        sent_total = np.zeros(N, np.float32)
        s = 0
        while s < args.steps:
            if s == args.kill_at:
                victim = ids[residual.agent_id]
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                print(f"step {s}: killed the agent that held the residual "
                      f"({residual.agent_id})")
            g = rng.standard_normal(N).astype(np.float32)
            try:
                out = np.asarray(step(jnp.asarray(g)))
            except jax.errors.JaxRuntimeError:
                try:
                    client.get(residual, timeout=10)  # why: a typed answer
                except farcall.ResidentLostError:
                    # The recipe: put the last snapshot back (on a live
                    # agent), and go on from it.
                    residual = client.put(snapshot)
                    step = make_step(residual)
                    local = local_snapshot.copy()
                    print(f"step {s}: resident lost with its agent; restored the snapshot of "
                          f"step {snapshot_step} on {residual.agent_id}")
                    out = np.asarray(step(jnp.asarray(g)))
                else:
                    raise
            want = np.zeros(N, np.float32)
            topk_error_feedback(want, g, local, K)
            if not np.array_equal(out, want):
                raise SystemExit(f"step {s}: the remote step differs from the in-process one")
            sent_total += out
            s += 1
            if s % args.snapshot_every == 0:
                snapshot, snapshot_step = client.get(residual), s
                local_snapshot = local.copy()
        np.testing.assert_array_equal(client.get(residual), local)
        print(f"{args.steps} steps: every output equals the in-process computation; each step "
              f"sent {N * 4} bytes of gradient, the {N * 4}-byte residual stayed on the agent")
        client.delete(residual)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait()


if __name__ == "__main__":
    main()
