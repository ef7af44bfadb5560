"""The optimizer step of examples/jax_mlp.py, written as JAX's documentation
writes a buffer callback (``np.asarray(out)[...] = ...``): the same function
runs in-process under ``jax.experimental.buffer_callback`` and, decorated,
on a farcall agent (``python -m farcall.agent --handlers=THIS_FILE``)."""

import numpy as np

import farcall


def sgd_momentum(ctx, out, params, grads, velocity):
    """params, velocity <- SGD with momentum; ``lr`` and ``momentum`` are the
    call's attributes on an agent (fixed here when run in-process)."""
    attrs = getattr(ctx, "attributes", None) or {"lr": 0.05, "momentum": 0.9}
    v = attrs["momentum"] * np.asarray(velocity) + np.asarray(grads)
    np.asarray(out[1])[...] = v
    np.asarray(out[0])[...] = np.asarray(params) - attrs["lr"] * v


farcall.handler("sgd_momentum")(sgd_momentum)
