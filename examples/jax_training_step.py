"""A jax.jit training loop whose step calls a remote handler.

Linear regression with SGD. The gradient is computed by JAX; the update
``w <- w - lr * g`` runs on a farcall agent as the built-in ``axpy`` handler
(``alpha * x + y`` with ``y`` aliased to the result, so it is updated in
place), through farcall.jax.buffer_callback.

    python examples/jax_training_step.py --target=127.0.0.1:50050
"""

import argparse

import jax
import jax.numpy as jnp

from farcall.jax import buffer_callback, uses_ffi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="router or agent, HOST:PORT")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    key_x, key_noise = jax.random.split(jax.random.PRNGKey(0))
    true_w = jnp.array([2.0, -3.0, 0.5, 1.0], jnp.float32)
    x = jax.random.normal(key_x, (256, 4), jnp.float32)
    y = x @ true_w + 0.01 * jax.random.normal(key_noise, (256,), jnp.float32)

    # w_new = (-lr) * g + w, computed by the agent; w is updated in place.
    sgd_update = buffer_callback(
        "axpy", jax.ShapeDtypeStruct(true_w.shape, true_w.dtype), target=args.target,
        input_output_aliases={1: 0}, attributes={"alpha": -args.lr})

    def loss_fn(w):
        return jnp.mean((x @ w - y) ** 2)

    @jax.jit
    def step(w):
        loss, g = jax.value_and_grad(loss_fn)(w)
        return sgd_update(g, w), loss

    path = "XLA FFI" if uses_ffi(jax.default_backend()) else "host callback"
    print(f"training on {jax.default_backend()}; the update runs remotely at "
          f"{args.target} ({path})")
    w = jnp.zeros(4, jnp.float32)
    for i in range(args.steps):
        w, loss = step(w)
        if i % 10 == 0 or i == args.steps - 1:
            print(f"  step {i:3d}  loss {float(loss):.6f}")
    print(f"learned w = {[round(float(v), 3) for v in w]} (true {true_w.tolist()})")
    if not float(loss_fn(w)) < 0.01:
        raise SystemExit("the loss did not go down")


if __name__ == "__main__":
    main()
