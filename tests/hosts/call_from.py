"""One farcall call, run inside a test-bed host (`ip netns exec`); prints
its outcome as one JSON line: ok, code, message, via_router, transport,
seconds. A failed call is an outcome, not an error (exit 0).

    call_from.py --target=IP:PORT [--handler=copy] [--bytes=N] [--ms=N]
                 [--timeout=S] [--transport=auto] [--via_router=0]
"""

import argparse
import json
import time

import numpy as np

import farcall

p = argparse.ArgumentParser()
p.add_argument("--target", required=True)
p.add_argument("--handler", default="copy")
p.add_argument("--bytes", type=int, default=64)
p.add_argument("--ms", type=int, default=0)  # for sleep
p.add_argument("--timeout", type=float, default=20)
p.add_argument("--transport", default="auto")
p.add_argument("--via_router", type=int, default=0)
a = p.parse_args()

client = farcall.Client(a.target, transport=a.transport, via_router=bool(a.via_router))
start = time.monotonic()
out = {"ok": False, "code": "", "message": "", "via_router": None, "transport": ""}
try:
    if a.handler == "sleep":
        _, info = client.call_with_info("sleep", results=[], attributes={"ms": a.ms},
                                        timeout=a.timeout)
    else:
        x = np.arange(a.bytes // 4, dtype=np.float32)
        (y,), info = client.call_with_info(a.handler, x, results=[x], timeout=a.timeout)
        if not np.array_equal(y, x):
            raise AssertionError("the copy came back different")
    out.update(ok=True, via_router=info.via_router, transport=info.transport)
except farcall.Error as e:
    out.update(code=e.code, message=e.message)
out["seconds"] = time.monotonic() - start
print(json.dumps(out))
