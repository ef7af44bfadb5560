"""Resident arrays: arrays left on an agent between calls (``Client.put``)."""

from __future__ import annotations

import numpy as np


class Resident:
    """An array that stays on one agent between calls, in its memory (device
    memory on GPU agents). ``Client.put`` makes one; so does a call's result
    named in ``keep_results=``.

    Pass it wherever an array argument goes: its bytes do not travel. A
    result aliased to it (``input_output_aliases``) updates it on the agent,
    and the call returns this same object for that result. Calls that name
    it go to the agent that holds it; when that agent is gone they raise
    ``farcall.ResidentLostError``. ``Client.get`` copies it back (a snapshot
    that ``Client.put`` restores on any agent); ``Client.delete`` frees it.
    It belongs to the caller (token) that made it, and lives for its ``ttl``
    after its last use. ``.handle`` is a secret: whoever holds it, with the
    same token, can use the array. ``repr`` never shows it whole.
    """

    __slots__ = ("handle", "shape", "dtype", "platform")

    def __init__(self, handle: str, shape, dtype, platform: str = "cpu"):
        self.handle = str(handle)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.platform = str(platform)

    @property
    def agent_id(self) -> str:
        """The id of the agent that holds it."""
        return self.handle.partition("@")[2]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __eq__(self, other) -> bool:
        return isinstance(other, Resident) and other.handle == self.handle

    def __hash__(self) -> int:
        return hash(self.handle)

    def __repr__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        head, _, agent = self.handle.partition("@")
        return f"farcall.Resident({self.dtype.name}[{dims}] on {agent!r}, {head[:12]}…)"


# farcall.jax's residents (buffer_callback(..., resident=)) travel to the
# call's maker in RESIDENTS_ATTRIBUTE: per resident, its place among the
# call's wire args, its dtype code, its dims and its handle, as
# "POS/DTYPE/D0,D1/LEN:HANDLE". The maker (the XLA FFI handler, or the
# host-callback path below) puts the residents there, each aliased to a
# result of its own after the call's, and tells the agent in
# RESIDENT_IN_ATTRIBUTE ("POS,POS"), so that a Python handler gets each as
# a writable buffer, by name.
RESIDENTS_ATTRIBUTE = "_farcall.residents"
RESIDENT_IN_ATTRIBUTE = "_farcall.resident_in"


def encode_residents(placed) -> str:
    """``placed``: (position, dtype code, Resident) triples."""
    parts = []
    for pos, code, r in placed:
        dims = ",".join(str(d) for d in r.shape)
        parts.append(f"{pos}/{code}/{dims}/{len(r.handle)}:{r.handle}")
    return "".join(parts)


def decode_residents(text: str) -> list:
    """encode_residents' (position, dtype code, shape, handle) tuples."""
    out = []
    i = 0
    while i < len(text):
        pos, code, dims, rest = text[i:].split("/", 3)
        n, _, rest = rest.partition(":")
        handle = rest[:int(n)]
        shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        out.append((int(pos), int(code), shape, handle))
        i += len(pos) + len(code) + len(dims) + 3 + len(n) + 1 + int(n)
    return out
