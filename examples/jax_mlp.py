"""A small MLP trained under jax.jit, its optimizer step a buffer callback
on a farcall agent, which is killed and restarted halfway through.

The step (SGD with momentum, examples/mlp_handlers.py) is written as JAX's
documentation writes a buffer callback. The example starts its own Python
agent serving it, trains, kills the agent with SIGKILL mid-run and starts a
new one on the same port while the next step is already calling: the call
waits for it (``wait_for_ready``) and is sent again (``retries``), so the
run goes on with its state intact. It then times the step against the same
callback run in-process by ``jax.experimental.buffer_callback``.

    python examples/jax_mlp.py [--steps=200]
"""

import argparse
import concurrent.futures
import os
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
from jax.experimental.buffer_callback import buffer_callback as jax_buffer_callback
from jax.flatten_util import ravel_pytree

import farcall.jax as fj

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mlp_handlers import sgd_momentum  # noqa: E402  (the same function, in-process)


def start_agent(port: int = 0) -> tuple[subprocess.Popen, int]:
    """A Python agent serving examples/mlp_handlers.py; returns it and its port."""
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "farcall.agent", f"--handlers={HERE}/mlp_handlers.py",
         f"--listen=127.0.0.1:{port}", f"--ready_fd={w}", "--log_level=warning"],
        pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as f:
        words = f.read().split()
    if not words:
        raise SystemExit("the agent failed to start")
    return proc, int(words[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    # y = sin(3x) on [-1, 1], a 1-32-32-1 tanh MLP.
    kx, k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 4)
    x = jax.random.uniform(kx, (256, 1), jnp.float32, -1, 1)
    y = jnp.sin(3 * x)
    params = {"w1": jax.random.normal(k1, (1, 32)) * 0.5, "b1": jnp.zeros(32),
              "w2": jax.random.normal(k2, (32, 32)) * 0.2, "b2": jnp.zeros(32),
              "w3": jax.random.normal(k3, (32, 1)) * 0.2, "b3": jnp.zeros(1)}
    flat, unravel = ravel_pytree(params)

    def loss_fn(p):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        h = jnp.tanh(h @ p["w2"] + p["b2"])
        return jnp.mean((h @ p["w3"] + p["b3"] - y) ** 2)

    def make_step(update):
        @jax.jit
        def step(flat, velocity):
            loss, g = jax.value_and_grad(lambda f: loss_fn(unravel(f)))(flat)
            new_flat, new_velocity = update(flat, g, velocity)
            return new_flat, new_velocity, loss
        return step

    spec = jax.ShapeDtypeStruct(flat.shape, flat.dtype)
    agent, port = start_agent()
    target = f"127.0.0.1:{port}"
    remote = make_step(fj.buffer_callback(
        "sgd_momentum", (spec, spec), target=target, attributes={"lr": 0.05, "momentum": 0.9},
        input_output_aliases={0: 0, 2: 1}, wait_for_ready=True, retries=8, timeout=60))
    local = make_step(jax_buffer_callback(sgd_momentum, (spec, spec),
                                          input_output_aliases={0: 0, 2: 1}))
    path = "XLA FFI" if fj.uses_ffi(jax.default_backend()) else "host callback"
    print(f"training a 1-32-32-1 MLP on {jax.default_backend()}; the optimizer step runs on "
          f"the agent at {target} ({path})")
    velocity = jnp.zeros_like(flat)
    first = None
    try:
        for i in range(args.steps):
            if i == args.steps // 2:
                agent.kill()  # SIGKILL: no drain, calls in flight lost
                agent.wait()
                print(f"  step {i:3d}  agent killed; a new one starts on port {port} while "
                      "the step waits for it")
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    later = pool.submit(start_agent, port)
                    flat, velocity, loss = remote(flat, velocity)
                    agent, _ = later.result()
            else:
                flat, velocity, loss = remote(flat, velocity)
            first = float(loss) if first is None else first
            if i % 20 == 0 or i == args.steps - 1:
                print(f"  step {i:3d}  loss {float(loss):.5f}")
        final = float(loss_fn(unravel(flat)))
        print(f"loss {first:.4f} -> {final:.5f}")
        if not final < 0.25 * first:
            raise SystemExit("the loss did not go down")

        # The same step, remote against in-process, median of 50 each.
        def timed(step):
            f, v = flat, velocity
            f, v, _ = step(f, v)  # compiled
            times = []
            for _ in range(50):
                t = time.perf_counter()
                f, v, loss = step(f, v)
                loss.block_until_ready()
                times.append(time.perf_counter() - t)
            return statistics.median(times) * 1e6
        r, l = timed(remote), timed(local)
        print(f"median step: {r:.0f} us with the step on the agent, {l:.0f} us with JAX's "
              f"in-process buffer_callback ({r / l:.1f} x)")
    finally:
        agent.terminate()
        agent.wait()


if __name__ == "__main__":
    main()
