"""Where one call spends its time, kernel by kernel.

A tuning sweep says which config of a stage is fastest; it does not say which stage is worth
tuning. :func:`kernel_times` runs a call once under the PyTorch profiler and sums the device
time of every kernel it launched (Triton kernels appear under their function names, cuBLAS
and PyTorch kernels under theirs), so one call on the device shows where a multi-kernel op's
time goes. On a CPU it sums the operators' own CPU time instead, which is what there is to see.
"""

from __future__ import annotations

from typing import Any, Callable


def kernel_times(fn: Callable[[], Any], device: str = "cuda", warmup: int = 1, top: int | None = None) -> list[dict]:
    """[{"name", "calls", "total_ms", "share"}] of one ``fn()``, slowest first (``top`` of them)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_gpu = str(device).startswith("cuda") and torch.cuda.is_available()
    for _ in range(warmup):  # compile and allocate outside the profile
        fn()
    if on_gpu:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        fn()
        if on_gpu:
            torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        if on_gpu:
            # kernels carry device time; the CPU operators that launched them are left out
            us = getattr(event, "self_device_time_total", 0) or getattr(event, "self_cuda_time_total", 0)
            if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
                continue
        else:
            us = event.self_cpu_time_total
        if us > 0:
            rows.append({"name": event.key, "calls": int(event.count), "total_ms": us / 1e3})
    rows.sort(key=lambda r: -r["total_ms"])
    total = sum(r["total_ms"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["total_ms"] / total
    return rows[:top] if top else rows
