"""The problems the attention and triangle-attention sweeps tune: groups of shapes, the shipped
config and the candidates of each kernel, inputs, and one candidate's launch."""

from __future__ import annotations

import math
from dataclasses import dataclass

ATTENTION_KERNELS = ("fwd", "dkdv", "dq")
# "dkdv_dq" is the dK/dV kernel with dQ accumulated in it ("dq_atomic"), which replaces dkdv + dq:
# timed as a kernel of its own, and chosen over the pair when it beats their sum.
SWEPT_ATTENTION_KERNELS = (*ATTENTION_KERNELS, "dkdv_dq")
TRIANGLE_KERNELS = ("fwd", "fwd_rows", "bwd_dkdv", "bwd_dq", "bwd_dbias")
# "bwd_dkdv_dq": the same for triangle attention (its config key "DQ_ATOMIC").
SWEPT_TRIANGLE_KERNELS = (*TRIANGLE_KERNELS, "bwd_dkdv_dq")


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
    g384 = Group("triangle_attention", "32", (1, 384, 4, 32), (1, 384, 4, 32), kernels=SWEPT_TRIANGLE_KERNELS)
    return [g384, Group("triangle_attention", "32", (1, 768, 4, 32), (1, 384, 4, 32), base=g384.name,
                        kernels=SWEPT_TRIANGLE_KERNELS)]


def shipped(op: str, key: str, kernel: str, causal: bool = False) -> dict:
    """The config the kernels would use today, for the sweep to time first and compare with."""
    if op == "attention":
        from ceiling.triton import attention as flash

        cfg = hopper_config(int(key), causal)
        section = {**cfg["dkdv"], "dq_atomic": True} if kernel == "dkdv_dq" else dict(cfg[kernel])
        if kernel == "fwd":
            knobs = flash.fwd_knobs(cfg)
            section.update(pre_load_v=knobs["PRE_LOAD_V"], warp_specialize=knobs["WARP_SPECIALIZE"],
                           exp2_split=knobs["EXP2_SPLIT"])
        return section
    table = triangle_table(key)
    if kernel in ("bwd_dkdv", "bwd_dkdv_dq"):  # DQ_ATOMIC is pinned by the sweep kernel (see thunk)
        return {k: v for k, v in table["bwd_dkdv"].items() if k != "DQ_ATOMIC"}
    return table[kernel]


def hopper_config(head_dim: int, causal: bool) -> dict:
    """The config the nvidia backend resolves on an H200 for a benchmark-shaped problem at
    ``head_dim`` (bf16, no bias or mask: TMA, so the table's ``narrow`` entries do not hold)."""
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import shipped_problem
    from ceiling.nvidia.attention_specs import H200
    from ceiling.op import resolve_config

    problem = shipped_problem(head_dim, "bfloat16", causal=causal, **H200)
    return resolve_config(problem, ATTENTION.implementation("nvidia"), None).as_dict()


def attention_config(x: dict, causal: bool) -> dict:
    """The config the nvidia backend resolves for the problem of the inputs ``x`` on this GPU."""
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import check
    from ceiling.op import resolve_config

    problem = check(x["q"], x["k"], x["v"], causal=causal, backend="nvidia")
    return resolve_config(problem, ATTENTION.implementation("nvidia"), None).as_dict()


def triangle_problem(shape, dtype: str = "bfloat16"):
    """The triangle-attention problem of ``shape`` (batch, n, heads, head_dim) on an H200, masked."""
    from ceiling.triangle.spec import shipped_attention_problem

    b, n, h, d = shape
    return shipped_attention_problem(d, dtype, target="sm_90a", batch=b, n=n, heads=h)


def triangle_table(key: str, dtype: str = "bfloat16", gpu: str | None = None) -> dict:
    """The triangle-attention configs the tables give an H200 (or the GPU named ``gpu``) at head
    dim ``key``, as shipped."""
    import dataclasses

    from ceiling.op import get, resolve_config

    problem = triangle_problem((1, 384, 4, int(key)), dtype)
    problem = dataclasses.replace(problem, gpu=gpu) if gpu else problem
    return resolve_config(problem, get("triangle_attention").implementation("nvidia"), None).as_dict()


def triangle_config(cfgs: dict):
    """``cfgs`` (every kernel's section) as the launcher takes a config: on sm_90a."""
    from ceiling.spaces.config import Config

    return Config(cfgs, "triangle_attention", "sm_90a", "a sweep candidate")


def same_config(a: dict, b: dict) -> bool:
    keys = (set(a) | set(b)) - {"static"}
    return all(a.get(k, False) == b.get(k, False) for k in keys)


def candidate_list(group: Group, kernel: str) -> list[dict]:
    """The shipped config first (marked), then the statically checked candidates, nearest the
    shipped config first (fewest keys that differ), so that a short budget times each knob's
    step away from what ships before the far corners of the grid."""
    from ceiling.tuning.space import candidates

    current = shipped(group.op, group.key, kernel, group.causal)
    rest = [c for c in candidates(group.op, group.key, kernel) if not same_config(c, current)]
    rest.sort(key=lambda c: sum(plain(c).get(k, False) != current.get(k, False) for k in set(plain(c)) | set(current)))
    return [{**current, "shipped": True}] + rest


def plain(c: dict) -> dict:
    return {k: v for k, v in c.items() if k not in ("static", "shipped")}


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
    import ceiling

    return ceiling.attention(x["q"], x["k"], x["v"], causal=causal, backend="nvidia", return_lse=True)


def _triangle_shape(x) -> tuple:
    b, n, h, _, d = x["q"].shape
    return (b, n, h, d)


def triangle_saved(x):
    """(out, lse) of the shipped forward, which the backward kernels read."""
    from ceiling.triton import triangle_attention as T

    shape = _triangle_shape(x)
    return T.forward(triangle_problem(shape), triangle_config(triangle_table(str(shape[3]))), x["q"], x["k"], x["v"],
                     x["bias"], x["mask"])


def _triangle_backward(x, saved, cfgs: dict, only: str | None = None):
    from ceiling.triton import triangle_attention as T

    out, lse = saved
    arrays = {"q": x["q"], "k": x["k"], "v": x["v"], "bias": x["bias"], "mask": x["mask"], "out": out, "lse": lse}
    needs = {"q": True, "k": True, "v": True, "bias": True}
    return lambda: T.backward(triangle_problem(_triangle_shape(x)), triangle_config(cfgs), arrays, {"out": x["do"]},
                              needs, only=only)


def thunk(group: Group, kernel: str, cfg: dict, x: dict, saved):
    """A no-argument launch of ``kernel`` at ``cfg`` on inputs ``x``; returns what it computes."""
    cfg = plain(cfg)
    if group.op == "attention":
        from ceiling.triton import attention as flash

        d = x["q"].shape[-1]
        scale = 1.0 / math.sqrt(d)
        if kernel == "dkdv_dq":  # the dK/dV launch then writes dQ too
            kernel, cfg = "dkdv", {**cfg, "dq_atomic": True}
        full = flash.merge_config(attention_config(x, group.causal), {kernel: cfg})
        if kernel == "fwd":
            return lambda: flash.forward(x["q"], x["k"], x["v"], None, None, group.causal, scale, full, True)
        o, lse = saved
        return lambda: flash.backward(x["do"], x["q"], x["k"], x["v"], o, lse, None, None, group.causal, scale, False,
                                      full, True, only=kernel)
    from ceiling.triton import triangle_attention as T

    shape = _triangle_shape(x)
    full = triangle_table(str(shape[3]))
    if kernel in ("fwd", "fwd_rows"):
        full["fwd"] = cfg
        problem, config = triangle_problem(shape), triangle_config(full)
        return lambda: T.forward(problem, config, x["q"], x["k"], x["v"], x["bias"], x["mask"])
    if kernel in ("bwd_dkdv", "bwd_dkdv_dq"):  # with DQ_ATOMIC the dK/dV launch writes dQ too
        kernel, cfg = "bwd_dkdv", {**cfg, "DQ_ATOMIC": kernel == "bwd_dkdv_dq"}
    full[kernel] = cfg
    return _triangle_backward(x, saved, full, only=kernel)


def outputs_of(group: Group, kernel: str, result) -> tuple:
    """The tensors ``kernel`` writes, from what its thunk returned."""
    if group.op == "attention":
        return {"fwd": lambda r: r, "dkdv": lambda r: (r[1], r[2]), "dq": lambda r: (r[0],),
                "dkdv_dq": lambda r: (r[0], r[1], r[2])}[kernel](result)
    if kernel in ("fwd", "fwd_rows"):
        return result
    return {"bwd_dkdv": lambda r: (r[1], r[2]), "bwd_dq": lambda r: (r[0],), "bwd_dbias": lambda r: (r[3],),
            "bwd_dkdv_dq": lambda r: (r[0], r[1], r[2])}[kernel](result)


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
    per = {"fwd": 4, "fwd_rows": 4, "bwd_dkdv": 8, "bwd_dq": 6, "bwd_dbias": 4,  # dbias: QK^T, dP
           "bwd_dkdv_dq": 10}[kernel]
    return per * scores * d


def full_backward(g: Group, cfgs: dict, x: dict, saved):
    """A no-argument launch of the whole backward of group ``g`` at the kernel configs ``cfgs``."""
    if g.op == "attention":
        from ceiling.triton import attention as flash

        d = x["q"].shape[-1]
        full = flash.merge_config(attention_config(x, g.causal), cfgs)
        o, lse = saved
        return lambda: flash.backward(x["do"], x["q"], x["k"], x["v"], o, lse, None, None, g.causal,
                                      1.0 / math.sqrt(d), False, full, True)
    return _triangle_backward(x, saved, {**triangle_table(str(_triangle_shape(x)[3])), **cfgs})
