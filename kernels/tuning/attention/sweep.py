"""The sweep loop: check every candidate in worker processes, time the ones that passed in this
process, group by group within the budget, and time the baselines and our whole backward."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import time
from dataclasses import dataclass, field

from ceiling.tuning.attention.checks import check_candidate
from ceiling.tuning.attention.problems import (
    Group,
    attention_groups,
    attention_inputs,
    attention_saved,
    candidate_list,
    flops,
    full_backward,
    plain,
    same_config,
    shipped,
    thunk,
    triangle_groups,
    triangle_inputs,
    triangle_saved,
    triangle_table,
)
from ceiling.tuning.attention.results import TRIANGLE_DKDV, backward_choice, winners
from ceiling.timers import time_events, time_graph

def _pool(workers: int):
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def default_workers() -> int:
    return max(1, min(14, (os.cpu_count() or 2) - 2))


@dataclass
class Sweep:
    op: str
    budget_s: float
    rep_ms: int = 10
    workers: int = field(default_factory=default_workers)
    refine_top: int = 6
    log: object = print

    def groups(self) -> list[Group]:
        return attention_groups() if self.op == "attention" else triangle_groups()

    def run(self) -> list[dict]:
        """Check and time every group; rows in the order they were measured."""
        import torch

        start = time.perf_counter()
        self.deadline = start + self.budget_s
        groups = self.groups()
        self.plans = {(g.name, k): candidate_list(g, k) for g in groups for k in g.kernels}
        self.verdicts: dict = {}
        self.ranking: dict = {}
        rows: list[dict] = []
        with _pool(self.workers) as pool:
            # Base groups first: check all their candidates (the compiles fill Triton's cache while
            # the GPU is idle), then time them; derived groups (causal, longer N) then check and
            # time only the base group's fastest few and the shipped config.
            for phase in ([g for g in groups if g.base is None], [g for g in groups if g.base is not None]):
                # the kernels' candidates interleaved (each kernel's first, then each one's second, ...),
                # so that a check cut short by the budget has reached every kernel
                orders = {(g, k): self._order(g, k) for g in phase for k in g.kernels}
                todo = {(g.name, k, order[rank]): (g, k, plain(self.plans[(g.name, k)][order[rank]]))
                        for rank in range(max(map(len, orders.values())))
                        for (g, k), order in orders.items() if rank < len(order)}
                self._check(pool, todo, share=0.6 if phase[0].base is None else 0.8)
                for g in phase:
                    rows += self._time_group(g)
                    torch.cuda.empty_cache()
        self.log(f"sweep done in {time.perf_counter() - start:.1f} s")
        return rows

    def _order(self, g: Group, k: str) -> list[int]:
        """Indices into the group's plan to check and time: all of them, or for a derived group
        the shipped config and the base group's fastest ``refine_top``."""
        plan = self.plans[(g.name, k)]
        if g.base is None or (g.base, k) not in self.ranking:
            return list(range(len(plan)))
        base_plan = self.plans[(g.base, k)]
        picks = [0]
        for i in self.ranking[(g.base, k)]:
            match = next((j for j, c in enumerate(plan) if same_config(plain(c), plain(base_plan[i]))), None)
            if match is not None and match not in picks:
                picks.append(match)
            if len(picks) > self.refine_top:
                break
        return picks

    def _check(self, pool, todo: dict, share: float) -> None:
        """Run ``check_candidate`` on every item of ``todo`` until ``share`` of the time left."""
        t0 = time.perf_counter()
        limit = max(1.0, share * (self.deadline - t0))
        futures = {pool.submit(check_candidate, *item): key for key, item in todo.items()}
        try:
            for fut in cf.as_completed(futures, timeout=limit):
                self.verdicts[futures[fut]] = fut.result()
        except cf.TimeoutError:
            for fut in futures:
                fut.cancel()
        done = sum(1 for key in todo if key in self.verdicts)
        self.log(f"checked {done} of {len(todo)} candidates in {time.perf_counter() - t0:.1f} s")

    def _time_group(self, g: Group) -> list[dict]:
        make = attention_inputs if g.op == "attention" else triangle_inputs
        x = make(g.shape, seed=0)
        saved = attention_saved(x, g.causal) if g.op == "attention" else triangle_saved(x)
        rows = self._baselines(g, x, saved)
        for k in g.kernels:
            plan = self.plans[(g.name, k)]
            timed = []
            for i in self._order(g, k):
                row = dict(op=g.op, group=g.name, kernel=k, shape=list(g.shape), causal=g.causal,
                           dtype="bfloat16", impl="ceiling.nvidia", config=plain(plan[i]),
                           shipped=bool(plan[i].get("shipped")), static=plan[i].get("static"))
                verdict = self.verdicts.get((g.name, k, i))
                if time.perf_counter() > self.deadline:
                    rows.append({**row, "skipped": "the time budget ran out"})
                    continue
                if verdict is None:
                    rows.append({**row, "skipped": "not checked within the budget"})
                    continue
                row.update({key: verdict[key] for key in ("error", "bound", "exception") if key in verdict})
                if not verdict.get("ok"):
                    rows.append({**row, "skipped": "failed the check against float32"})
                    continue
                try:
                    ms, p20, p80 = time_graph(thunk(g, k, plan[i], x, saved), self.rep_ms)
                except Exception as exc:  # noqa: BLE001 - reported, not fatal
                    rows.append({**row, "exception": f"{type(exc).__name__}: {exc}"[:300]})
                    continue
                rows.append({**row, "method": "cuda-graph", "median_ms": ms, "p20_ms": p20, "p80_ms": p80,
                             "tflops": flops(g, k) / ms / 1e9})
                timed.append((ms, i))
            self.ranking[(g.name, k)] = [i for _, i in sorted(timed)]
            self.log(f"{g.name} {k}: timed {len(timed)} of {len(plan)}"
                     + (f", best {min(timed)[0]:.4f} ms" if timed else ""))
        return rows + self._whole_backward(g, x, saved, rows)

    # -- baselines ------------------------------------------------------------------------------

    def _baselines(self, g: Group, x: dict, saved) -> list[dict]:
        import torch

        rows = []
        base = dict(op=g.op, group=g.name, shape=list(g.shape), causal=g.causal, dtype="bfloat16", config=None)
        try:
            if g.op == "attention":
                import torch.nn.functional as F

                q, k, v = (x[n].transpose(1, 2) for n in ("q", "k", "v"))
                ms, p20, p80 = time_graph(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=g.causal),
                                          self.rep_ms)
                rows.append(dict(base, kernel="fwd", impl="sdpa", method="cuda-graph", median_ms=ms, p20_ms=p20,
                                 p80_ms=p80, tflops=flops(g, "fwd") / ms / 1e9))
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                with torch.enable_grad():
                    out = F.scaled_dot_product_attention(*leaves, is_causal=g.causal)
                do = x["do"].transpose(1, 2)
                ms, p20, p80 = time_events(lambda: torch.autograd.grad(out, leaves, do, retain_graph=True),
                                           self.rep_ms)
                rows.append(dict(base, kernel="bwd", impl="sdpa", method="cuda-events", median_ms=ms, p20_ms=p20,
                                 p80_ms=p80, tflops=2.5 * flops(g, "fwd") / ms / 1e9))
            else:
                from ceiling.triangle.bench import eager_triangle_attention

                ms, p20, p80 = time_graph(
                    lambda: eager_triangle_attention(x["q"], x["k"], x["v"], x["bias"], x["mask"]), self.rep_ms)
                rows.append(dict(base, kernel="fwd", impl="torch-eager", method="cuda-graph", median_ms=ms,
                                 p20_ms=p20, p80_ms=p80))
                leaves = [x[n].detach().requires_grad_() for n in ("q", "k", "v", "bias")]
                with torch.enable_grad():
                    out = eager_triangle_attention(*leaves, x["mask"])
                ms, p20, p80 = time_events(lambda: torch.autograd.grad(out, leaves, x["do"], retain_graph=True),
                                           self.rep_ms)
                rows.append(dict(base, kernel="bwd", impl="torch-eager", method="cuda-events", median_ms=ms,
                                 p20_ms=p20, p80_ms=p80))
        except Exception as exc:  # noqa: BLE001 - a baseline that fails is reported, not fatal
            rows.append(dict(base, kernel="baseline", impl="baseline", exception=f"{type(exc).__name__}: {exc}"[:300]))
        return rows

    def _whole_backward(self, g: Group, x: dict, saved, rows: list[dict]) -> list[dict]:
        """Our whole backward at the group's winners (and at the shipped configs), timed by events
        like the baseline's backward."""
        best = winners([r for r in rows if r["group"] == g.name])
        bwd_kernels = [k for k in g.kernels if k not in ("fwd", "fwd_rows", "dkdv_dq", "bwd_dkdv_dq")]
        out = []
        for label, pick in (("shipped", lambda k: shipped(g.op, g.key, k, g.causal)),
                            ("tuned", lambda k: best[k]["config"] if k in best else shipped(g.op, g.key, k, g.causal))):
            cfgs = {k: plain(pick(k)) for k in bwd_kernels}
            if g.op == "attention" and label == "tuned":
                cfgs["dkdv"] = backward_choice(best, cfgs["dkdv"])
            if g.op == "triangle_attention":  # the table's DQ_ATOMIC, or the tuned choice
                cfgs["bwd_dkdv"] = (backward_choice(best, cfgs["bwd_dkdv"], TRIANGLE_DKDV, "DQ_ATOMIC")
                                    if label == "tuned" else triangle_table(g.key)["bwd_dkdv"])
            try:
                fn = full_backward(g, cfgs, x, saved)
                ms, p20, p80 = time_events(fn, self.rep_ms)
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                out.append(dict(op=g.op, group=g.name, kernel="bwd", impl=f"ceiling.nvidia-{label}", config=cfgs,
                                exception=f"{type(exc).__name__}: {exc}"[:300]))
                continue
            out.append(dict(op=g.op, group=g.name, kernel="bwd", impl=f"ceiling.nvidia-{label}", shape=list(g.shape),
                            causal=g.causal, dtype="bfloat16", config=cfgs, method="cuda-events", median_ms=ms, p20_ms=p20,
                            p80_ms=p80, tflops=(2.5 * flops(g, "fwd") / ms / 1e9) if g.op == "attention" else None))
        return out
