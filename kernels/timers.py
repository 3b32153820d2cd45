"""Device timers for ``config="autotune"`` and the tuning sweeps: CUDA-graph replay where a call can be
captured, CUDA events where not."""

from __future__ import annotations


def time_graph(fn, rep_ms: int) -> tuple[float, float, float]:
    """Median (p20, p80) milliseconds of CUDA-graph replays: device time without host launch gaps,
    which would otherwise dominate kernels of a few microseconds."""
    import triton.testing

    fn()  # compile outside the capture
    p20, p50, p80 = triton.testing.do_bench_cudagraph(fn, rep=rep_ms, quantiles=[0.2, 0.5, 0.8])
    return p50, p20, p80


def time_events(fn, rep_ms: int) -> tuple[float, float, float]:
    """Median (p20, p80) milliseconds by CUDA events around eager calls (``triton.testing.do_bench``,
    which flushes the L2 between calls), for calls that cannot be graph-captured."""
    import triton.testing

    fn()
    p20, p50, p80 = triton.testing.do_bench(fn, rep=rep_ms, quantiles=[0.2, 0.5, 0.8])
    return p50, p20, p80
