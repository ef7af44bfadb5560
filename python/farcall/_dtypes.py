"""numpy dtypes <-> the wire's DType numbers (XLA's PrimitiveType)."""

from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16 and the float8 types with numpy)
import numpy as np

from farcall import _farcall

# "float32" -> 11, "bfloat16" -> 16, ...: the names numpy and ml_dtypes use.
_CODES: dict[str, int] = dict(_farcall.dtype_codes())
_DTYPES: dict[int, np.dtype] = {c: np.dtype(n) for n, c in _CODES.items()}


def code_of(dtype) -> int:
    """The wire DType number of a numpy-compatible dtype."""
    d = np.dtype(dtype)
    try:
        return _CODES[d.name]
    except KeyError:
        raise ValueError(
            f"dtype {d} has no farcall wire type; supported: {', '.join(_CODES)}"
        ) from None


def dtype_of(code: int) -> np.dtype:
    return _DTYPES[code]
