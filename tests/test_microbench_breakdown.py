"""kernel_times on the CPU: operator time summed per name, slowest first, shares adding to 1."""

from __future__ import annotations

import torch

from ceiling.microbench.breakdown import kernel_times


def test_kernel_times_ranks_the_operators_of_one_call():
    a = torch.randn(384, 384)
    v = torch.randn(384)

    def call():
        for _ in range(4):
            (a @ a).relu_()
        return v.sum()

    rows = kernel_times(call, device="cpu")
    names = [r["name"] for r in rows]
    assert names[0] == "aten::mm", names[:5]  # four 384^3 products outweigh everything else
    mm = rows[0]
    assert mm["calls"] == 4 and mm["total_ms"] > 0
    assert abs(sum(r["share"] for r in rows) - 1.0) < 1e-9
    assert [r["total_ms"] for r in rows] == sorted((r["total_ms"] for r in rows), reverse=True)
    assert len(kernel_times(call, device="cpu", top=2)) == 2
