"""@farcall.handler: Python handlers for ``python -m farcall.agent``."""

from __future__ import annotations

from typing import Callable

_REGISTRY: dict[str, Callable] = {}


def handler(name: str):
    """Registers a function as the agent handler ``name``; returns it unchanged.

    The function is called exactly as JAX calls a buffer callback,
    ``callback(ctx, out, *args)``: ``out`` is the list of result buffers to
    fill in place, and each arg is a read-only buffer. It must return None.

        @farcall.handler("add_one")
        def add_one(ctx, out, x):
            np.asarray(out[0])[...] = np.asarray(x) + 1
    """
    if not isinstance(name, str) or not name:
        raise ValueError("farcall.handler needs a non-empty handler name")

    def register(fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"@farcall.handler({name!r}) must decorate a callable")
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"handler {name!r} is already registered by {_REGISTRY[name]!r}")
        _REGISTRY[name] = fn
        return fn

    return register


def registered() -> dict[str, Callable]:
    return dict(_REGISTRY)
