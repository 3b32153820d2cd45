"""Attention cases: ``ceiling.attention`` against PyTorch SDPA and FlashAttention.

Layout (batch, seq, heads, head_dim) for ``q``, ``k``, ``v`` and the output, as
FlashAttention takes them; SDPA gets transposed views of the same tensors, as a
model in that layout would pass them. Forward and backward are separate cases:
the backward case runs the forward once and times only the gradient computation.

FLOPs are counted the FlashAttention way: ``4 * B * H * S^2 * D`` for the
forward (two matmuls), half of it when causal, and 2.5x the forward for the
backward (five matmuls, one of them recomputing the scores).

Shape suites, with the total tokens fixed at 16k and hidden size 2048 (so
``B = 16384 / S`` and ``H = 2048 / D``), as in FlashAttention's own benchmarks:

* ``attention``: S in 512..16k, D in 64 and 128, causal and not, fwd and bwd;
* ``attention-subset``: S in 1k, 4k, 16k (what ``ceiling device-check`` runs);
* ``attention-gluon``: the subset's shapes with both Hopper implementations (the Triton kernels
  and the Gluon kernels, ``config={"implementation": "gluon"}``) against SDPA with its own
  backend choice and with each backend pinned (``torch.nn.attention.sdpa_kernel``: flash,
  cuDNN, efficient), as the Gluon device check times them;
* ``check``: odd sequence lengths, for correctness on the device;
* ``tiny``: small enough for the Triton interpreter on a CPU.
"""

from __future__ import annotations

import math

from ceiling.microbench.benchmarks.cases import Case, Impl, our_impls, skipped

TOKENS, HIDDEN = 16384, 2048


def _full(lengths) -> list[tuple[int, int, int, int, bool, str]]:
    return [
        (TOKENS // s, s, HIDDEN // d, d, causal, direction)
        for s in lengths
        for d in (64, 128)
        for causal in (False, True)
        for direction in ("fwd", "bwd")
    ]


# (batch, seq, heads, head_dim, causal, direction)
SUITES: dict[str, list[tuple[int, int, int, int, bool, str]]] = {
    "attention": _full((512, 1024, 2048, 4096, 8192, 16384)),
    "attention-subset": _full((1024, 4096, 16384)),
    "attention-gluon": _full((1024, 4096, 16384)),
    "check": [
        (b, s, h, d, causal, direction)
        for (b, s, h, d) in ((2, 37, 3, 64), (1, 1000, 2, 128), (3, 129, 4, 64))
        for causal in (False, True)
        for direction in ("fwd", "bwd")
    ],
    "tiny": [(1, 48, 2, 64, causal, direction) for causal in (False, True) for direction in ("fwd", "bwd")],
}
ALIASES = {"default": "attention", "device": "attention-subset"}
DTYPE = "bfloat16"
# The reference covers the first batch entry and these many heads: the oracle's
# S x S scores in float32 would not fit for every head at 16k.
REFERENCE_HEADS = 2


def suite_names() -> list[str]:
    return sorted(SUITES) + sorted(ALIASES)


def flops(b: int, s: int, h: int, d: int, causal: bool, direction: str) -> float:
    fwd = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    return fwd * (2.5 if direction == "bwd" else 1.0)


def _forward_thunk(forward, direction: str):
    """The timed thunk for ``forward(q, k, v) -> out``: the op itself, or only its backward."""

    def make(inputs):
        import torch

        if direction == "fwd":
            q, k, v = inputs
            return lambda: forward(q, k, v)
        q, k, v, do = inputs
        out = forward(q, k, v)
        return lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)

    return make


def _ours(device: str, causal: bool, direction: str) -> list[Impl]:
    import ceiling

    def thunk_for(backend: str):
        return _forward_thunk(lambda q, k, v: ceiling.attention(q, k, v, causal=causal, backend=backend), direction)

    return our_impls("attention", device, thunk_for)


def _ours_gluon(device: str, causal: bool, direction: str) -> list[Impl]:
    """The Gluon implementation of the nvidia backend, asked for by config, where it runs."""
    import ceiling
    from ceiling.attention.op import ATTENTION

    name = "ceiling:nvidia-gluon"
    if not device.startswith("cuda"):
        return [skipped(name, "ours", "Gluon has no interpreter: it runs on Hopper GPUs only", backend="nvidia")]
    mode, why = ATTENTION.implementation("nvidia", "gluon").load().availability()
    if mode != "native":
        return [skipped(name, "ours", why, backend="nvidia")]
    config = {"implementation": "gluon"}
    make = _forward_thunk(
        lambda q, k, v: ceiling.attention(q, k, v, causal=causal, backend="nvidia", config=config), direction)
    return [Impl(name, "ours", make, backend="nvidia", library="ceiling Gluon (native)")]


# SDPA's fused backends, each pinned with torch.nn.attention.sdpa_kernel.
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


def _sdpa_pinned(device: str, causal: bool, direction: str) -> list[Impl]:
    impls = []
    for short, member in SDPA_BACKENDS.items():
        name = f"sdpa-{short}"
        if not device.startswith("cuda"):
            impls.append(skipped(name, "baseline", "SDPA's fused backends run on CUDA GPUs only"))
            continue

        def forward(q, k, v, member=member):
            import torch.nn.functional as F
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(getattr(SDPBackend, member)):
                out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                     is_causal=causal)
            return out.transpose(1, 2)

        impls.append(Impl(name, "baseline", _forward_thunk(forward, direction), library=f"torch SDPA ({member})"))
    return impls


def _sdpa(causal: bool, direction: str) -> Impl:
    import torch.nn.functional as F

    def forward(q, k, v):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
        return out.transpose(1, 2)

    return Impl("sdpa", "baseline", _forward_thunk(forward, direction), library="torch SDPA (its own backend choice)")


def _flash_attn(device: str, causal: bool, direction: str) -> list[Impl]:
    impls = []
    for name, module in (("flash_attn", "flash_attn"), ("flash_attn3", "flash_attn_interface")):
        if not device.startswith("cuda"):
            impls.append(skipped(name, "baseline", f"{module} runs on CUDA GPUs only"))
            continue
        try:
            fn = __import__(module).flash_attn_func
        except Exception as exc:  # noqa: BLE001 - a missing or broken install is a skip, with its reason
            impls.append(skipped(name, "baseline", f"{module} is not installed ({exc.__class__.__name__}: {exc})"))
            continue

        def forward(q, k, v, fn=fn):
            out = fn(q, k, v, causal=causal)
            return out[0] if isinstance(out, tuple) else out  # FA3 may also return the logsumexp

        impls.append(Impl(name, "baseline", _forward_thunk(forward, direction), library=module))
    return impls


def case(b: int, s: int, h: int, d: int, causal: bool, direction: str, *, suite: str, device: str) -> Case:
    import torch

    dtype = DTYPE
    tdtype = getattr(torch, dtype)
    heads = min(h, REFERENCE_HEADS)

    def make_inputs(seed: int, dev: str):
        g = torch.Generator(device=dev).manual_seed(seed)
        q, k, v = (torch.randn(b, s, h, d, generator=g, device=dev, dtype=torch.float32).to(tdtype) for _ in range(3))
        if direction == "fwd":
            return q, k, v
        do = torch.randn(b, s, h, d, generator=g, device=dev, dtype=torch.float32).to(tdtype)
        return tuple(t.requires_grad_() for t in (q, k, v)) + (do,)

    def select(out):
        if isinstance(out, (tuple, list)):
            return tuple(t[:1, :, :heads] for t in out)
        return out[:1, :, :heads]

    def reference(inputs):
        compute = torch.float64 if inputs[0].device.type == "cpu" else torch.float32
        q, k, v = (t.detach()[:1, :, :heads].to(compute).transpose(1, 2).requires_grad_() for t in inputs[:3])
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        if causal:
            mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        if direction == "fwd":
            return out.transpose(1, 2).detach()
        do = inputs[3][:1, :, :heads].to(compute).transpose(1, 2)
        grads = torch.autograd.grad(out, (q, k, v), do)
        return tuple(g.transpose(1, 2).detach() for g in grads)

    impls = (*_ours(device, causal, direction), _sdpa(causal, direction), *_flash_attn(device, causal, direction))
    if suite == "attention-gluon":
        impls = (*_ours(device, causal, direction), *_ours_gluon(device, causal, direction), _sdpa(causal, direction),
                 *_sdpa_pinned(device, causal, direction))
    size = torch.finfo(tdtype).bits // 8
    tensor_bytes = b * s * h * d * size
    return Case(
        op="attention",
        suite=suite,
        label=f"b{b}-s{s}-h{h}-d{d}",
        shape={"batch": b, "seq": s, "heads": h, "head_dim": d},
        dtype=dtype,
        config={"causal": causal, "direction": direction},
        make_inputs=make_inputs,
        impls=impls,
        reference=reference,
        select=select,
        flops=flops(b, s, h, d, causal, direction),
        # fwd reads q, k, v and writes o; bwd reads q, k, v, o, do and writes dq, dk, dv.
        bytes=float((4 if direction == "fwd" else 8) * tensor_bytes),
        graphable=direction == "fwd",
    )


def cases(suite: str, device: str) -> list[Case]:
    name = ALIASES.get(suite, suite)
    if name not in SUITES:
        raise KeyError(f"attention has no shape suite {suite!r}; it has {suite_names()}")
    return [case(*shape, suite=name, device=device) for shape in SUITES[name]]
