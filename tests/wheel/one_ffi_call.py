"""One jitted call through the XLA FFI path, with farcall as a wheel
installs it: starts the given farcall-agent on a loopback port the OS picks,
calls its built-in `axpy` under jax.jit and checks the numbers.

    python one_ffi_call.py PATH/TO/farcall-agent
"""
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import farcall.jax as fj


def main() -> None:
    agent_bin = sys.argv[1]
    if not fj.uses_ffi("cpu"):
        raise SystemExit("wheel_test: farcall.jax does not take the XLA FFI path on cpu")
    r, w = os.pipe()
    agent = subprocess.Popen([agent_bin, "--platform=cpu", "--listen=127.0.0.1:0",
                              f"--ready_fd={w}", "--log_level=warning"], pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as f:
        words = f.read().split()
    try:
        if not words:
            raise SystemExit(f"wheel_test: {agent_bin} did not start")
        target = f"127.0.0.1:{words[0]}"
        x = jnp.arange(8, dtype=jnp.float32)
        y = jnp.ones(8, jnp.float32)
        axpy = fj.buffer_callback("axpy", jax.ShapeDtypeStruct(y.shape, y.dtype),
                                  target=target, attributes={"alpha": 3.0})
        got = np.asarray(jax.jit(axpy)(x, y))
        want = 3.0 * np.arange(8, dtype=np.float32) + 1.0
        if not np.array_equal(got, want):
            raise SystemExit(f"wheel_test: axpy gave {got}, not {want}")
        print(f"== wheel_test: a jitted axpy on the FFI path through {target}: {got.tolist()}")
    finally:
        agent.terminate()
        agent.wait(timeout=30)


if __name__ == "__main__":
    main()
