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
    # Which operator ranks first is a timing, and another process preempting one relu_ can put it ahead of
    # the products: the test holds what is deterministic (each operator's calls, the order the times are
    # sorted in, the shares), not the rank.
    by_name = {r["name"]: r for r in rows}
    mm = by_name["aten::mm"]
    assert mm["calls"] == 4 and mm["total_ms"] > 0
    assert by_name["aten::sum"]["calls"] == 1
    assert abs(sum(r["share"] for r in rows) - 1.0) < 1e-9
    assert [r["total_ms"] for r in rows] == sorted((r["total_ms"] for r in rows), reverse=True)
    assert len(kernel_times(call, device="cpu", top=2)) == 2
