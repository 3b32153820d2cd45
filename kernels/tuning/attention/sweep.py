"""The tuning sweeps behind ``configs/attention.json`` (sm90) and ``configs/triangle_attention.json``
(H200): time every statically checked candidate (``kernels.nvidia.tune_space``) of each kernel on
this GPU, next to the baseline, and pick the fastest.

One run fits a lease of minutes:

1. **Compile and check in parallel.** A pool of worker processes (``spawn``) launches each
   candidate once on a small problem with the same Triton specialization as the timed one (same
   heads and head dim, lengths multiples of 16), so Triton's on-disk cache then holds every
   binary the timing needs, and compares its output with a float32 reference: a candidate whose
   error exceeds twice the error of the framework's own bf16 computation (plus a small floor) is
   dropped before it is timed.
2. **Time in one process.** CUDA-graph replay (``triton.testing.do_bench_cudagraph``, median and
   p20/p80) of the forward and of each backward kernel alone (the preprocess included, as it
   runs before either), per group in priority order, until ``budget_s`` is spent. The causal
   groups (and triangle N = 768) time only the fastest few of their base group plus the shipped
   config, since the ranking carries over and their compiles already ran in step 1.
3. **Baselines.** SDPA (forward by graph replay, backward by ``triton.testing.do_bench`` through
   autograd, which graph capture does not take), the eager triangle attention likewise, and our
   whole backward at the winners by the same method as the baseline's, so the speedup column
   compares like with like.

Rows are plain dicts (JSON); ``winners`` picks per group and kernel; ``apply_*`` writes them
into the config files with the provenance the caller measured.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing
import os
import time
from dataclasses import dataclass, field

from kernels.nvidia.tune import time_events, time_graph

ATTENTION_KERNELS = ("fwd", "dkdv", "dq")
# "dkdv_dq" is the dK/dV kernel with dQ accumulated in it ("dq_atomic"), which replaces dkdv + dq:
# timed as a kernel of its own, and chosen over the pair when it beats their sum.
SWEPT_ATTENTION_KERNELS = (*ATTENTION_KERNELS, "dkdv_dq")
TRIANGLE_KERNELS = ("fwd", "fwd_rows", "bwd_dkdv", "bwd_dq", "bwd_dbias")


@dataclass(frozen=True)
class Group:
    """One problem shape whose kernels are tuned together."""

    op: str  # "attention" | "triangle_attention"
    key: str  # the config key: padded head dim ("128") or the head-dim bucket's space key ("32")
    shape: tuple  # attention (batch, seq, heads, head_dim); triangle (batch, n, heads, head_dim)
    check_shape: tuple  # the same specialization, small
    causal: bool = False
    base: str | None = None  # the group whose ranking narrows this one's candidates
    kernels: tuple = ()

    @property
    def name(self) -> str:
        b, s, h, d = self.shape
        if self.op == "attention":
            return f"attention-b{b}-s{s}-h{h}-d{d}{'-causal' if self.causal else ''}"
        return f"triangle_attention-b{b}-n{s}-h{h}-d{d}"


def attention_groups() -> list[Group]:
    """Head dims 128 and 64 at S = 4096 (B * H * D fixed, as in the benchmark suite), then causal."""
    g128 = Group("attention", "128", (4, 4096, 16, 128), (1, 512, 16, 128), kernels=SWEPT_ATTENTION_KERNELS)
    g64 = Group("attention", "64", (4, 4096, 32, 64), (1, 512, 32, 64), kernels=SWEPT_ATTENTION_KERNELS)
    return [g128, g64,
            Group("attention", "128", g128.shape, g128.check_shape, True, g128.name, SWEPT_ATTENTION_KERNELS),
            Group("attention", "64", g64.shape, g64.check_shape, True, g64.name, SWEPT_ATTENTION_KERNELS)]


def triangle_groups() -> list[Group]:
    """AlphaFold 3's pair stack: 4 heads of 32, N = 384 (all candidates), then N = 768."""
    g384 = Group("triangle_attention", "32", (1, 384, 4, 32), (1, 384, 4, 32), kernels=TRIANGLE_KERNELS)
    return [g384, Group("triangle_attention", "32", (1, 768, 4, 32), (1, 384, 4, 32), base=g384.name,
                        kernels=TRIANGLE_KERNELS)]


def shipped(op: str, key: str, kernel: str, causal: bool = False) -> dict:
    """The config the kernels would use today, for the sweep to time first and compare with."""
    if op == "attention":
        from kernels.nvidia import attention as A
        from kernels.triton import attention as flash

        tuned = dict(A._tuned().get("sm90", {}).get(key, {}))
        tuned.pop("narrow", None)
        causal_only = tuned.pop("causal", None)
        cfg = flash.merge_config(A.heuristic(int(key)), tuned, causal_only if causal else None)
        section = {**cfg["dkdv"], "dq_atomic": True} if kernel == "dkdv_dq" else dict(cfg[kernel])
        if kernel == "fwd":
            knobs = flash.fwd_knobs(cfg)
            section.update(pre_load_v=knobs["PRE_LOAD_V"], warp_specialize=knobs["WARP_SPECIALIZE"],
                           exp2_split=knobs["EXP2_SPLIT"])
        return section
    from kernels.nvidia import triangle_attention as T

    return T.config_for("H200", int(key), "bfloat16")[kernel]


def _same(a: dict, b: dict) -> bool:
    keys = (set(a) | set(b)) - {"static"}
    return all(a.get(k, False) == b.get(k, False) for k in keys)


def candidate_list(group: Group, kernel: str) -> list[dict]:
    """The shipped config first (marked), then the statically checked candidates."""
    from kernels.nvidia.tune_space import candidates

    current = shipped(group.op, group.key, kernel, group.causal)
    rest = [c for c in candidates(group.op, group.key, kernel) if not _same(c, current)]
    return [{**current, "shipped": True}] + rest


def _plain(c: dict) -> dict:
    return {k: v for k, v in c.items() if k not in ("static", "shipped")}


# ---------------------------------------------------------------------------------------------
# Problems: inputs, one candidate's launch, the reference
# ---------------------------------------------------------------------------------------------


def attention_inputs(shape, seed: int = 0):
    import torch

    b, s, h, d = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(b, s, h, d, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)
                   for _ in range(4))
    return {"q": q, "k": k, "v": v, "do": do}


def triangle_inputs(shape, seed: int = 0):
    import torch

    b, n, h, d = shape
    g = torch.Generator(device="cuda").manual_seed(seed)

    def r(*s):
        return torch.randn(*s, generator=g, device="cuda", dtype=torch.float32)

    return {"q": r(b, n, h, n, d).bfloat16(), "k": r(b, n, h, n, d).bfloat16(), "v": r(b, n, h, n, d).bfloat16(),
            "bias": r(b, 1, h, n, n), "mask": torch.rand(b, n, 1, 1, n, generator=g, device="cuda") > 0.05,
            "do": r(b, n, h, n, d).bfloat16()}


def attention_saved(x, causal: bool):
    """(o, lse) of the shipped forward, which the backward kernels read."""
    from kernels.nvidia import attention as A

    d = x["q"].shape[-1]
    return A.attention_fwd(x["q"], x["k"], x["v"], None, None, causal, 1.0 / math.sqrt(d))


def triangle_saved(x):
    from kernels.nvidia import triangle_attention as T
    from kernels.triton import triangle_attention as triangle

    return T.triangle_attention_fwd(x["q"], x["k"], x["v"], x["bias"], x["mask"], triangle.default_scale(x["q"].shape[-1]))


def thunk(group: Group, kernel: str, cfg: dict, x: dict, saved):
    """A no-argument launch of ``kernel`` at ``cfg`` on inputs ``x``; returns what it computes."""
    cfg = _plain(cfg)
    if group.op == "attention":
        from kernels.nvidia import attention as A
        from kernels.triton import attention as flash

        d = x["q"].shape[-1]
        scale = 1.0 / math.sqrt(d)
        if kernel == "dkdv_dq":  # the dK/dV launch then writes dQ too
            kernel, cfg = "dkdv", {**cfg, "dq_atomic": True}
        full = flash.merge_config(A.select_config(d, x["q"].device, causal=group.causal), {kernel: cfg})
        if kernel == "fwd":
            return lambda: flash.forward(x["q"], x["k"], x["v"], None, None, group.causal, scale, full, True)
        o, lse = saved
        return lambda: flash.backward(x["do"], x["q"], x["k"], x["v"], o, lse, None, None, group.causal, scale, False,
                                  full, True, only=kernel)
    from kernels.nvidia import triangle_attention as T
    from kernels.triton import triangle_attention as triangle

    d = x["q"].shape[-1]
    full = T.config_for("H200", d, "bfloat16")
    if kernel in ("fwd", "fwd_rows"):
        full["fwd"] = cfg
        return lambda: T.triangle_attention_fwd(x["q"], x["k"], x["v"], x["bias"], x["mask"], triangle.default_scale(d), full)
    full[kernel] = cfg
    out, lse = saved
    return lambda: T.triangle_attention_bwd(x["q"], x["k"], x["v"], x["bias"], x["mask"], triangle.default_scale(d), out, lse,
                                            x["do"], full, only=kernel)


def outputs_of(group: Group, kernel: str, result) -> tuple:
    """The tensors ``kernel`` writes, from what its thunk returned."""
    if group.op == "attention":
        return {"fwd": lambda r: r, "dkdv": lambda r: (r[1], r[2]), "dq": lambda r: (r[0],),
                "dkdv_dq": lambda r: (r[0], r[1], r[2])}[kernel](result)
    if kernel in ("fwd", "fwd_rows"):
        return result
    return {"bwd_dkdv": lambda r: (r[1], r[2]), "bwd_dq": lambda r: (r[0],), "bwd_dbias": lambda r: (r[3],)}[kernel](result)


def references(group: Group, x: dict, saved) -> dict:
    """kernel -> (float32 reference outputs, the framework's own bf16 outputs)."""
    import torch

    if group.op == "attention":
        import torch.nn.functional as F

        from kernels.attention import reference as R

        d = x["q"].shape[-1]
        scale = 1.0 / math.sqrt(d)
        f32 = {n: x[n].float() for n in ("q", "k", "v", "do")}
        o32, lse32 = R.attention_fwd(f32["q"], f32["k"], f32["v"], None, None, group.causal, scale)
        dq32, dk32, dv32, _ = R.attention_bwd(f32["do"], f32["q"], f32["k"], f32["v"], o32, lse32, None, None,
                                              group.causal, scale, False)
        leaves = [x[n].detach().transpose(1, 2).requires_grad_() for n in ("q", "k", "v")]
        with torch.enable_grad():
            o16 = F.scaled_dot_product_attention(*leaves, is_causal=group.causal, scale=scale)
            g16 = torch.autograd.grad(o16, leaves, x["do"].transpose(1, 2))
        o16 = o16.detach().transpose(1, 2)
        dq16, dk16, dv16 = (g.transpose(1, 2) for g in g16)
        return {"fwd": ((o32, lse32), (o16, None)), "dkdv": ((dk32, dv32), (dk16, dv16)), "dq": ((dq32,), (dq16,)),
                "dkdv_dq": ((dq32, dk32, dv32), (dq16, dk16, dv16))}
    from kernels.triangle import reference as R
    from kernels.triangle.bench import eager_triangle_attention

    scale = 1.0 / math.sqrt(x["q"].shape[-1])
    f32 = {n: x[n].float() for n in ("q", "k", "v", "bias", "do")}
    o32, lse32 = R.attention(f32["q"], f32["k"], f32["v"], f32["bias"], x["mask"], scale)
    dq32, dk32, dv32, db32 = R.attention_bwd(f32["q"], f32["k"], f32["v"], f32["bias"], x["mask"], scale, o32, lse32,
                                             f32["do"])
    leaves = [x[n].detach().requires_grad_() for n in ("q", "k", "v", "bias")]
    with torch.enable_grad():
        o16 = eager_triangle_attention(*leaves, x["mask"])
        g16 = torch.autograd.grad(o16, leaves, x["do"])
    fwd = ((o32, lse32), (o16.detach(), None))
    return {"fwd": fwd, "fwd_rows": fwd, "bwd_dkdv": ((dk32, dv32), (g16[1], g16[2])),
            "bwd_dq": ((dq32,), (g16[0],)), "bwd_dbias": ((db32,), (g16[3],))}


def error_check(ours: tuple, ref32: tuple, ref16: tuple) -> dict:
    """Worst error of each output against float32, against 2x the framework's bf16 error plus a
    floor of 1e-3 of the reference's scale; NaN never passes. The LSE (no bf16 counterpart) must
    agree within 1e-3 of its scale."""
    import torch

    worst, bound, ok = 0.0, 0.0, True
    for mine, r32, r16 in zip(ours, ref32, ref16):
        finite = torch.isfinite(r32)
        mine = mine.float()
        err = (mine - r32).abs()[finite].max().item() if finite.any() else 0.0
        if not torch.equal(torch.isfinite(mine), finite):
            err = float("nan")
        scale = r32[finite].abs().max().item() if finite.any() else 1.0
        if r16 is None:
            b = 1e-3 * max(scale, 1.0)
        else:
            b = 2.0 * (r16.float() - r32).abs()[finite].max().item() + 1e-3 * scale
        worst, bound = max(worst, err) if err == err else float("nan"), max(bound, b)
        ok = ok and err == err and err <= b
    return {"error": worst, "bound": bound, "ok": bool(ok)}


# ---------------------------------------------------------------------------------------------
# Step 1: compile and check, in worker processes
# ---------------------------------------------------------------------------------------------

_worker_cache: dict = {}


def _worker_problem(group: Group):
    """Inputs, saved forward and references on the check shape, built once per worker."""
    key = (group.op, group.check_shape, group.causal)
    if key not in _worker_cache:
        make = attention_inputs if group.op == "attention" else triangle_inputs
        x = make(group.check_shape, seed=1)
        saved = attention_saved(x, group.causal) if group.op == "attention" else triangle_saved(x)
        _worker_cache[key] = (x, saved, references(group, x, saved))
    return _worker_cache[key]


def check_candidate(group: Group, kernel: str, cfg: dict) -> dict:
    """Compile ``cfg`` (filling Triton's cache) and compare its output with the references."""
    import torch

    t0 = time.perf_counter()
    try:
        x, saved, refs = _worker_problem(group)
        out = outputs_of(group, kernel, thunk(group, kernel, cfg, x, saved)())
        torch.cuda.synchronize()
        ref32, ref16 = refs[kernel]
        verdict = error_check(out, ref32, ref16)
    except Exception as exc:  # noqa: BLE001 - a config that fails on the device is reported, not fatal
        verdict = {"ok": False, "exception": f"{type(exc).__name__}: {exc}"[:300]}
    verdict["check_s"] = round(time.perf_counter() - t0, 3)
    return verdict


def _pool(workers: int):
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def default_workers() -> int:
    return max(1, min(14, (os.cpu_count() or 2) - 2))


# ---------------------------------------------------------------------------------------------
# Step 2 and 3: timing
# ---------------------------------------------------------------------------------------------


def flops(group: Group, kernel: str) -> float:
    """Matmul FLOPs each kernel runs: 2 per multiply-add, D per score element per dot; the forward
    has 2 dots (QK^T, PV), dK/dV 4 (QK^T, dV, dP, dK), dQ 3 (QK^T, dP, dQ), dK/dV with dQ 5, dBias 2.
    Causal halves."""
    b, s, h, d = group.shape
    if group.op == "attention":
        scores = b * h * s * s * (0.5 if group.causal else 1.0)
        per = {"fwd": 4, "dkdv": 8, "dq": 6, "dkdv_dq": 10}[kernel]  # 2 FLOPs per MAC x (2, 4, 3, 5) dots of D
        return per * scores * d
    scores = b * s * h * s * s
    per = {"fwd": 4, "fwd_rows": 4, "bwd_dkdv": 8, "bwd_dq": 6, "bwd_dbias": 4}[kernel]  # dbias: QK^T, dP
    return per * scores * d


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
                todo = {(g.name, k, i): (g, k, _plain(self.plans[(g.name, k)][i]))
                        for g in phase for k in g.kernels for i in self._order(g, k)}
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
            match = next((j for j, c in enumerate(plan) if _same(_plain(c), _plain(base_plan[i]))), None)
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
                           dtype="bfloat16", impl="ceiling.nvidia", config=_plain(plan[i]),
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
                from kernels.triangle.bench import eager_triangle_attention

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
        bwd_kernels = [k for k in g.kernels if k not in ("fwd", "fwd_rows", "dkdv_dq")]
        out = []
        for label, pick in (("shipped", lambda k: shipped(g.op, g.key, k, g.causal)),
                            ("tuned", lambda k: best[k]["config"] if k in best else shipped(g.op, g.key, k, g.causal))):
            cfgs = {k: _plain(pick(k)) for k in bwd_kernels}
            if g.op == "attention" and label == "tuned":
                cfgs["dkdv"] = backward_choice(best, cfgs["dkdv"])
            try:
                fn = _full_backward(g, cfgs, x, saved)
                ms, p20, p80 = time_events(fn, self.rep_ms)
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                out.append(dict(op=g.op, group=g.name, kernel="bwd", impl=f"ceiling.nvidia-{label}", config=cfgs,
                                exception=f"{type(exc).__name__}: {exc}"[:300]))
                continue
            out.append(dict(op=g.op, group=g.name, kernel="bwd", impl=f"ceiling.nvidia-{label}", shape=list(g.shape),
                            causal=g.causal, dtype="bfloat16", config=cfgs, method="cuda-events", median_ms=ms, p20_ms=p20,
                            p80_ms=p80, tflops=(2.5 * flops(g, "fwd") / ms / 1e9) if g.op == "attention" else None))
        return out


def _full_backward(g: Group, cfgs: dict, x: dict, saved):
    if g.op == "attention":
        from kernels.nvidia import attention as A
        from kernels.triton import attention as flash

        d = x["q"].shape[-1]
        full = flash.merge_config(A.select_config(d, x["q"].device, causal=g.causal), cfgs)
        o, lse = saved
        return lambda: flash.backward(x["do"], x["q"], x["k"], x["v"], o, lse, None, None, g.causal, 1.0 / math.sqrt(d),
                                  False, full, True)
    from kernels.nvidia import triangle_attention as T
    from kernels.triton import triangle_attention as triangle

    d = x["q"].shape[-1]
    full = {**T.config_for("H200", d, "bfloat16"), **cfgs}
    out, lse = saved
    return lambda: T.triangle_attention_bwd(x["q"], x["k"], x["v"], x["bias"], x["mask"], triangle.default_scale(d), out, lse,
                                            x["do"], full)


# ---------------------------------------------------------------------------------------------
# Winners and the config files
# ---------------------------------------------------------------------------------------------


def winners(rows: list[dict]) -> dict:
    """kernel -> the fastest checked, timed row of our kernels among ``rows`` (one group)."""
    best: dict = {}
    for r in rows:
        if r.get("impl") != "ceiling.nvidia" or "median_ms" not in r:
            continue
        if r["kernel"] not in best or r["median_ms"] < best[r["kernel"]]["median_ms"]:
            best[r["kernel"]] = r
    return best


def backward_choice(best: dict, dkdv: dict) -> dict:
    """The dK/dV config to ship: the fastest ``dkdv_dq`` (dQ accumulated in the dK/dV kernel)
    when it beats the fastest dkdv plus the fastest dq, else ``dkdv``; ``dq_atomic`` always set,
    so a causal override cannot inherit the other choice's."""
    pair = [best[k]["median_ms"] for k in ("dkdv", "dq") if k in best]
    if "dkdv_dq" in best and len(pair) == 2 and best["dkdv_dq"]["median_ms"] < sum(pair):
        return {**_plain(best["dkdv_dq"]["config"]), "dq_atomic": True}
    return {**_plain(dkdv), "dq_atomic": False}


def winners_by_group(rows: list[dict]) -> dict:
    groups: dict = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    return {name: winners(rs) for name, rs in groups.items()}


def speedups(rows: list[dict]) -> list[dict]:
    """Per group and direction: shipped, tuned and baseline milliseconds."""
    out = []
    for name, rs in _by_group(rows).items():
        best = winners(rs)
        base = {r["kernel"]: r for r in rs if r.get("impl") in ("sdpa", "torch-eager") and "median_ms" in r}
        shipped_rows = {r["kernel"]: r for r in rs if r.get("shipped") and "median_ms" in r}
        for k, r in best.items():
            ref = base.get("fwd") if k in ("fwd", "fwd_rows") else None
            out.append(dict(group=name, kernel=k, tuned_ms=r["median_ms"],
                            shipped_ms=shipped_rows.get(k, {}).get("median_ms"),
                            baseline=ref and ref["impl"], baseline_ms=ref and ref["median_ms"], tflops=r.get("tflops"),
                            config=r["config"]))
        whole = {r["impl"]: r for r in rs if r["kernel"] == "bwd" and "median_ms" in r}
        ref = base.get("bwd")
        for label in ("ceiling.nvidia-shipped", "ceiling.nvidia-tuned"):
            if label in whole:
                out.append(dict(group=name, kernel=f"bwd ({label.split('-')[-1]})", tuned_ms=whole[label]["median_ms"],
                                shipped_ms=None, baseline=ref and ref["impl"], baseline_ms=ref and ref["median_ms"],
                                tflops=whole[label].get("tflops"), config=whole[label]["config"]))
    return out


def _by_group(rows):
    groups: dict = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    return groups


def attention_entries(rows: list[dict]) -> dict:
    """{padded head dim: {"fwd": ..., "dkdv": ..., "dq": ..., "causal": {...}}} from the winners.
    A causal winner that equals the non-causal one is not repeated."""
    entries: dict = {}
    for g in attention_groups():
        best = winners([r for r in rows if r["group"] == g.name])
        entry = entries.setdefault(g.key, {})
        picked = {k: r["config"] for k, r in best.items() if k in ATTENTION_KERNELS}
        if "dkdv" in picked:
            picked["dkdv"] = backward_choice(best, picked["dkdv"])
        for k, cfg in picked.items():
            if g.causal:
                if not _same(cfg, entry.get(k, {})):
                    entry.setdefault("causal", {})[k] = cfg
            else:
                entry[k] = cfg
    return entries


def apply_attention(rows: list[dict], provenance: str, path=None) -> dict:
    """Write the winners into the sm90 entries of ``configs/attention.json``. The ``"narrow"``
    overrides (bias, mask, pointer loads) are pinned to what they resolved to before, so the
    untimed biased/masked kernels keep the configs that were checked for spills."""
    import json

    from kernels.nvidia import attention as A
    from kernels.triton import attention as flash

    path = path or A.CONFIG_FILE
    table = json.loads(path.read_text())
    sm90 = table.setdefault("sm90", {})
    for key, fresh in attention_entries(rows).items():
        old = sm90.get(key, {})
        old_narrow = flash.merge_config(A.heuristic(int(key)), A.heuristic_narrow(int(key)),
                                    {k: v for k, v in old.items() if k not in ("narrow", "causal")}, old.get("narrow"))
        entry = {k: v for k, v in old.items() if k not in ("narrow", "causal")}
        for k in ATTENTION_KERNELS:
            if k in fresh:
                entry[k] = fresh[k]
        if fresh.get("causal"):
            entry["causal"] = fresh["causal"]
        narrow = {k: dict(old_narrow[k]) for k in ATTENTION_KERNELS}
        narrow["fwd"].update({"pre_load_v": bool(old_narrow.get("pre_load_v", False)), "warp_specialize": False,
                              "exp2_split": False})
        narrow["dkdv"]["dq_atomic"] = False  # its narrow tiles were never checked with the extra dot
        entry["narrow"] = narrow
        sm90[key] = entry
    table["_about"] = provenance
    _write_json(path, table, indent=2)
    A._tuned.cache_clear()
    return table


def apply_triangle(rows: list[dict], provenance: str, device_key: str = "H200", path=None) -> dict:
    """Write the winners of N = 384 into ``configs/triangle_attention.json`` under ``device_key``
    (head dims up to 32). ``fwd`` takes the faster of the plain and the row-sharing forward. Each
    section keeps its float32 overrides, and where the bf16 config changed they are pinned to the
    float32 config that was in force, which the sweep did not measure."""
    import json

    from kernels.nvidia import triangle_attention as T
    from kernels.triton import triangle_attention as triangle

    path = path or T.CONFIG_FILE
    table = json.loads(path.read_text())
    g = triangle_groups()[0]
    best = winners([r for r in rows if r["group"] == g.name])
    if "fwd_rows" in best and ("fwd" not in best or best["fwd_rows"]["median_ms"] < best["fwd"]["median_ms"]):
        best = {**best, "fwd": best["fwd_rows"]}
    entry = table.setdefault(device_key, {}).setdefault("d<=32", {})
    old_f32 = T.config_for(device_key, 32, "float32", path)
    for k, r in best.items():
        f32 = dict(old_f32[k])
        if "ROWS" in r["config"]:  # the float32 entry overrides key by key: say ROWS even where it was 1
            f32.setdefault("ROWS", 1)
        entry[k] = {**r["config"], "float32": f32}
    key = "_doc" if "_doc" in table else "_about"
    table[key] = provenance
    _write_json(path, table, indent=1)
    triangle._table.cache_clear()
    return table


def _write_json(path, table: dict, indent: int) -> None:
    import json

    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=indent) + "\n")
    tmp.replace(path)
