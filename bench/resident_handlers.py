"""The handlers of bench/resident_bench.py, served by a Python agent."""
import numpy as np

import farcall


@farcall.handler("grad_echo")
def grad_echo(ctx, out, grad):
    """The baseline: a 1 MiB gradient in, the same bytes back."""
    np.copyto(np.asarray(out[0]), np.asarray(grad))


@farcall.handler("state_step")
def state_step(ctx, out, grad, state):
    """Called with state aliased to out[1] (a resident): adds the gradient
    into the first rows of the state, and answers those rows."""
    s = np.asarray(out[1]).reshape(-1)
    g = np.asarray(grad).reshape(-1)
    s[:g.size] += g
    np.copyto(np.asarray(out[0]).reshape(-1), s[:g.size])
