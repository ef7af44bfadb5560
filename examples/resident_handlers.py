"""The handler of examples/jax_resident.py: top-k gradient compression with
error feedback, written as a JAX buffer callback. Its residual is a
resident array on the agent (farcall.jax.buffer_callback(resident=...)),
updated in place, so a step sends only its gradient."""
import numpy as np

import farcall


def topk_error_feedback(out, grad, residual, k):
    """out = the k largest entries of grad + residual (the rest zero); the
    residual keeps what was not sent."""
    r = np.asarray(residual)
    r += np.asarray(grad)
    keep = np.argsort(-np.abs(r), kind="stable")[:k]
    o = np.asarray(out)
    o[...] = 0
    o[keep] = r[keep]
    r[keep] = 0


@farcall.handler("topk_ef")
def topk_ef(ctx, out, grad, *, residual):
    topk_error_feedback(out, grad, residual, ctx.attributes["k"])
