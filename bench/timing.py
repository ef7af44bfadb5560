"""Timing helpers the Python benchmarks share."""
import statistics
import time


def p50_us(fn, calls, warmup=50):
    """The median time of `calls` calls of fn(), in microseconds, after
    `warmup` calls that are not timed."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6
