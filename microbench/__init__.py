"""Hardware characterization: device sources, runners, timing, analytic models, records.

- ``ceiling.microbench.bankconf``: shared-memory / LDS bank-conflict model (NVIDIA, CDNA3).
- ``ceiling.microbench.occupancy``: occupancy calculator (sm_80..sm_100, gfx90a, gfx942).
- ``ceiling.microbench.clocks``: NVML clock and throttle sampler for any measurement.
- ``ceiling.microbench.runtimes``: the GPU runtime the CUDA suites run on (CuPy or PyCUDA).
- ``ceiling.microbench.run_suites(suites, out_dir, device=None, runtime="auto")``: run the
  suites (bank-conflicts, occupancy, clocks, ceilings, host) and write records.
"""

from __future__ import annotations

from typing import Any


def run_suites(suites, out_dir, device=None, **kwargs: Any):
    """Run microbenchmark suites and append their records to ``out_dir``; returns the records."""
    from .runner import run_suites as _run_suites

    return _run_suites(suites, out_dir, device, **kwargs)


__all__ = ["run_suites"]
