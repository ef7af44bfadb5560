"""Call trees: the structure of a call's result specs, as JAX gives
``out`` to a buffer callback (a single buffer for one spec, a list for a
list, a dict for a dict, nested as the specs are), and of its inputs, as
JAX gives them (``callback(ctx, out, *args, **kwargs)``, each argument a
tree).

A call whose results are not a plain list carries their structure in the
reserved attribute ``_farcall.out_tree`` (JSON, below); the Python agent
rebuilds ``out`` from it, and the client returns results of the same
structure. A ``farcall.jax`` call whose inputs are not plain arrays (a
tuple, a dict, ``None``, keyword arguments) carries the structure of
``(args, kwargs)`` in ``_farcall.in_tree``, and the agent calls the handler
with them rebuilt. Leaves are in JAX's order: lists and tuples in order,
dicts by sorted key, ``None`` holding none.

    leaf  0          list   ["l", [child, ...]]     tuple  ["t", [child, ...]]
    None  ["n"]      dict   ["d", [[key, child], ...]]   (keys: str or int)
"""

from __future__ import annotations

import json

ATTRIBUTE = "_farcall.out_tree"
IN_ATTRIBUTE = "_farcall.in_tree"
# Reserved attribute names: the handlers' ctx.attributes leaves them out.
RESERVED_PREFIX = "_farcall."
_MAX_BYTES = 64 << 10
_MAX_DEPTH = 64


def flatten(tree) -> tuple[list, object]:
    """The leaves of ``tree`` in JAX's order, and its structure."""
    leaves = []

    def walk(t, depth):
        if depth > _MAX_DEPTH:
            raise ValueError(f"results nest deeper than {_MAX_DEPTH} levels")
        if t is None:
            return ["n"]
        if isinstance(t, dict):
            for k in t:
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TypeError(f"result dict keys must be str or int; got {k!r}")
            return ["d", [[k, walk(t[k], depth + 1)] for k in sorted(t)]]
        if isinstance(t, tuple):
            return ["t", [walk(c, depth + 1) for c in t]]
        if isinstance(t, list):
            return ["l", [walk(c, depth + 1) for c in t]]
        leaves.append(t)
        return 0

    return leaves, walk(tree, 0)


def is_flat_list(structure) -> bool:
    """Whether ``structure`` is a plain list of leaves (the wire's own form,
    which needs no attribute)."""
    return structure != 0 and structure[0] == "l" and all(c == 0 for c in structure[1])


def encode(structure) -> str:
    return json.dumps(structure, separators=(",", ":"))


def decode(text: str, name: str = ATTRIBUTE):
    """The structure in ``text`` (the attribute ``name``); ValueError when it
    is not one."""
    if len(text) > _MAX_BYTES:
        raise ValueError(f"{name} is {len(text)} bytes, over {_MAX_BYTES}")
    try:
        structure = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{name} is not a tree: {e}") from None
    _check(structure, 0, name)
    return structure


def _check(s, depth, name):
    if depth > _MAX_DEPTH:
        raise ValueError(f"{name} nests deeper than {_MAX_DEPTH} levels")
    if s == 0 and not isinstance(s, bool):
        return
    ok = isinstance(s, list) and s and s[0] in ("l", "t", "d", "n")
    if ok and s[0] == "n":
        ok = len(s) == 1
    elif ok:
        ok = len(s) == 2 and isinstance(s[1], list)
    if not ok:
        raise ValueError(f"{name} is not a tree")
    for c in s[1] if s[0] != "n" else ():
        if s[0] == "d":
            if not (isinstance(c, list) and len(c) == 2 and isinstance(c[0], (str, int))):
                raise ValueError(f"{name} has a malformed dict entry")
            _check(c[1], depth + 1, name)
        else:
            _check(c, depth + 1, name)


def input_structure(args: tuple, kwargs: dict, n_leaves: int):
    """The structure of a call's ``(args, kwargs)`` to carry in
    IN_ATTRIBUTE, or None when none is needed (positional arrays only) or
    it cannot be carried (a pytree node of another kind than JAX's
    built-in containers: then the handler gets the leaves as they are)."""
    try:
        leaves, structure = flatten((tuple(args), dict(kwargs)))
    except (TypeError, ValueError):
        return None
    if len(leaves) != n_leaves:
        return None
    arg_trees, kwarg_tree = structure[1]
    if all(c == 0 for c in arg_trees[1]) and not kwarg_tree[1]:
        return None
    return structure


def unflatten_inputs(structure, leaves) -> tuple[tuple, dict]:
    """``(args, kwargs)`` rebuilt from input_structure's ``structure``."""
    args, kwargs = unflatten(structure, leaves)
    return tuple(args), dict(kwargs)


def count(structure) -> int:
    if structure == 0:
        return 1
    if structure[0] == "n":
        return 0
    if structure[0] == "d":
        return sum(count(c) for _, c in structure[1])
    return sum(count(c) for c in structure[1])


def unflatten(structure, leaves):
    """``leaves`` (exactly count(structure) of them) in ``structure``."""
    it = iter(leaves)

    def build(s):
        if s == 0:
            return next(it)
        kind = s[0]
        if kind == "n":
            return None
        if kind == "d":
            return {k: build(c) for k, c in s[1]}
        children = [build(c) for c in s[1]]
        return tuple(children) if kind == "t" else children

    return build(structure)
