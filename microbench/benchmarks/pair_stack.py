"""The pair stack of one Boltz-2 ``PairformerLayer``, forward and backward: ours patched against Boltz.

What a user training Boltz would run: ``PairformerLayer(token_s=384, token_z=128, v2=True)``
(4 pair-attention heads of 32), its pair stack (triangle multiplication outgoing and
incoming, triangle attention starting and ending node, the pair transition, each with
its residual add) on a (1, N, N, 128) pair tensor, forward and backward with respect to
the pair tensor and every pair-stack parameter, under ``torch.autocast(bfloat16)`` with
float32 parameters (Boltz's bf16-mixed training). Dropout is off (eval mode) so that
every implementation computes the same function. The implementations:

* ``ceiling:<vendor>``: the layer after ``ceiling.triangle.patch`` (our triangle kernels,
  Boltz's own code for the rest), and ``ceiling:<vendor>+compile``: that under
  ``torch.compile`` (our ops stay opaque; inductor fuses the transition, norms and adds);
* ``boltz-eager`` and ``boltz-compile``: the unpatched layer, and under ``torch.compile``;
* ``cuequivariance``: the unpatched layer with Boltz's ``use_kernels=True`` (cuEquivariance's
  triangle kernels), skipped with the reason where ``cuequivariance_torch`` is not importable.

The oracle is Boltz's own layer in float32 without autocast. The pair mask has a few
random zeros but leaves key 0 valid in every row and column, so no attention row is fully
masked and every position is comparable (what padded rows get is tested in
``tests/test_triangle_models.py``). Each thunk returns the output, dz and the parameter
gradients (sorted by name). Peak memory is what the harness records per implementation.

Suites: ``device`` (N = 384 and 768; the default) and ``tiny`` (N = 6, c_z = 16, two heads
of 8, on the CPU: our layers on the reference backend, a smoke test of the case and the
harness; ``torch.compile`` and cuEquivariance are skipped there). Needs Boltz, installed
without its dependencies: ``pip install --no-deps boltz==2.2.1 einops``; without it there
are no cases and :func:`unavailable` says so.
"""

from __future__ import annotations

from typing import Any, Callable

from ceiling.microbench.benchmarks.cases import Case, Impl, skipped

BOLTZ_INSTALL = "pip install --no-deps boltz==2.2.1 einops"
PAIR_MODULES = ("tri_mul_out", "tri_mul_in", "tri_att_start", "tri_att_end", "transition_z")

# Layer widths and pair sizes per suite.
SUITES: dict[str, dict[str, Any]] = {
    "device": {"n": (384, 768), "token_s": 384, "s_heads": 16, "c_z": 128, "heads": 4, "head_dim": 32},
    "tiny": {"n": (6,), "token_s": 16, "s_heads": 2, "c_z": 16, "heads": 2, "head_dim": 8},
}
ALIASES = {"default": "device"}
DTYPE = "bfloat16"


def unavailable() -> str | None:
    try:
        import boltz.model.layers.pairformer  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - absent or broken: no cases, with the reason
        return f"Boltz is not importable ({exc.__class__.__name__}: {exc}); install it with: {BOLTZ_INSTALL}"
    return None


def suite_names() -> list[str]:
    return [] if unavailable() else sorted(SUITES) + sorted(ALIASES)


def boltz_pair_stack(layer, z, pair_mask, use_kernels: bool = False):
    """The pair half of ``PairformerLayer.forward``: line for line Boltz's ``PairformerNoSeqLayer.forward``,
    run here on the PairformerLayer's own submodules (both classes name them alike)."""
    from boltz.model.layers.pairformer import PairformerNoSeqLayer

    return PairformerNoSeqLayer.forward(layer, z, pair_mask, None, use_kernels)


def make_layer(token_s: int, s_heads: int, c_z: int, heads: int, head_dim: int, seed: int, device: str):
    """A PairformerLayer(v2=True) with fresh random weights (Boltz's init zeroes the output
    projections), in eval mode, float32, on ``device``."""
    import torch
    from boltz.model.layers.pairformer import PairformerLayer

    torch.manual_seed(seed)
    layer = PairformerLayer(token_s, c_z, num_heads=s_heads, pairwise_head_width=head_dim, pairwise_num_heads=heads,
                            v2=True)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
            else:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn(p.shape, generator=g))
    return layer.to(device).eval()


def pair_parameters(layer) -> list[tuple[str, Any]]:
    """The pair stack's parameters, by qualified name, sorted."""
    return sorted((f"{m}.{n}", p) for m in PAIR_MODULES for n, p in getattr(layer, m).named_parameters())


def flops(n: int, c_z: int, heads: int, head_dim: int) -> float:
    """Forward and backward FLOPs, the backward counted as twice the forward."""
    pairs = n * n
    trimul = 2 * pairs * (2 * c_z * 2 * c_z + c_z * c_z + c_z * c_z) + 2 * c_z * n**3
    width = heads * head_dim
    attention = 2 * pairs * (4 * c_z * width + width * c_z + c_z * heads) + 4 * n * heads * n * n * head_dim
    transition = 2 * pairs * (2 * c_z * 4 * c_z + 4 * c_z * c_z)
    return 3.0 * (2 * trimul + 2 * attention + transition)


def _thunk(stack: Callable, layer, inputs, autocast: bool):
    """Forward + backward of ``stack(z, pair_mask)``: (output, dz, *parameter gradients)."""
    import torch

    z, mask, dout = inputs["z"], inputs["pair_mask"], inputs["dout"]
    params = [p for _, p in pair_parameters(layer)]
    kind = z.device.type

    def run():
        with torch.autocast(kind, dtype=torch.bfloat16, enabled=autocast):
            out = stack(z, mask)
        return (out, *torch.autograd.grad(out, [z, *params], dout.to(out.dtype)))

    return run


def _our_backend(device: str) -> str:
    if not device.startswith("cuda"):
        return "reference"  # the interpreter would take minutes here; the kernels are tested elsewhere
    from ceiling import backends

    return backends.gpu_vendor() or "reference"


def case(n: int, token_s: int, s_heads: int, c_z: int, heads: int, head_dim: int, device: str, suite: str) -> Case:
    import torch

    cache: dict[tuple, Any] = {}
    on_cuda = device.startswith("cuda")
    backend = _our_backend(device)

    def layer(dev: str, patched: bool):
        key = (dev, patched)
        if key not in cache:
            base = make_layer(token_s, s_heads, c_z, heads, head_dim, seed=n, device=dev)
            if patched:
                import ceiling.triangle

                ceiling.triangle.patch(base, backend=backend)
            cache[key] = base
        return cache[key]

    def compiled(dev: str, patched: bool):
        key = (dev, patched, "compiled")
        if key not in cache:
            target = layer(dev, patched)
            cache[key] = torch.compile(lambda z, m: boltz_pair_stack(target, z, m), dynamic=False)
        return cache[key]

    def make_inputs(seed: int, dev: str):
        g = torch.Generator(device=dev).manual_seed(seed)
        z = torch.randn(1, n, n, c_z, generator=g, device=dev).requires_grad_()
        mask = (torch.rand(1, n, n, generator=g, device=dev) > 0.05).float()
        mask[:, 0, :] = 1  # key 0 valid in every row and column: no fully masked attention row
        mask[:, :, 0] = 1
        dout = torch.randn(1, n, n, c_z, generator=g, device=dev)
        return {"z": z, "pair_mask": mask, "dout": dout}

    def impl(name: str, role: str, stack_for: Callable[[str], Callable], library: str, **kw) -> Impl:
        def make(inputs):
            dev = str(inputs["z"].device)
            target = layer(dev, name.startswith("ceiling"))
            return _thunk(stack_for(dev), target, inputs, autocast=True)

        return Impl(name=name, role=role, make=make, library=library, **kw)

    impls = [impl(f"ceiling:{backend}", "ours", lambda d: lambda z, m: boltz_pair_stack(layer(d, True), z, m),
                  f"ceiling.triangle.patch (backend {backend})", backend=backend)]
    if on_cuda:
        impls.append(impl(f"ceiling:{backend}+compile", "ours", lambda d: compiled(d, True),
                          "ceiling.triangle.patch + torch.compile", backend=backend))
    impls.append(impl("boltz-eager", "baseline", lambda d: lambda z, m: boltz_pair_stack(layer(d, False), z, m),
                      "boltz 2.2.1"))
    if on_cuda:
        impls.append(impl("boltz-compile", "baseline", lambda d: compiled(d, False), "boltz 2.2.1 + torch.compile"))
    else:
        impls.append(skipped("boltz-compile", "baseline", "torch.compile is benchmarked on the GPU only"))
    why = _cueq_missing(device)
    if why:
        impls.append(skipped("cuequivariance", "baseline", why))
    else:
        impls.append(impl("cuequivariance", "baseline",
                          lambda d: lambda z, m: boltz_pair_stack(layer(d, False), z, m, use_kernels=True),
                          "boltz 2.2.1 use_kernels=True (cuequivariance_torch)"))

    def reference(inputs):
        dev = str(inputs["z"].device)
        out = _thunk(lambda z, m: boltz_pair_stack(layer(dev, False), z, m), layer(dev, False), inputs,
                     autocast=False)()
        return tuple(t.detach() for t in out)

    pair_bytes = n * n * c_z * 4
    return Case(
        op="pair_stack", suite=suite, label=f"b1-n{n}-c{c_z}-h{heads}x{head_dim}",
        shape={"batch": 1, "n": n, "c_z": c_z, "heads": heads, "head_dim": head_dim, "token_s": token_s},
        dtype=DTYPE, make_inputs=make_inputs, impls=tuple(impls), reference=reference,
        flops=flops(n, c_z, heads, head_dim), bytes=float(4 * pair_bytes),
        config={"direction": "fwdbwd", "autocast": True}, graphable=False,
    )


def _cueq_missing(device: str) -> str | None:
    if not device.startswith("cuda"):
        return "cuEquivariance runs on NVIDIA GPUs only"
    try:
        import cuequivariance_torch  # noqa: F401
        import cuequivariance_ops_torch  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a missing install is a skip, with its reason
        return f"cuequivariance_torch is not importable ({exc.__class__.__name__}: {exc})"
    return None


def cases(suite: str, device: str) -> list[Case]:
    why = unavailable()
    if why:
        raise KeyError(f"pair_stack has no benchmark cases here: {why}")
    name = ALIASES.get(suite, suite)
    if name not in SUITES:
        raise KeyError(f"pair_stack has no shape suite {suite!r}; it has {suite_names()}")
    s = SUITES[name]
    return [case(n, s["token_s"], s["s_heads"], s["c_z"], s["heads"], s["head_dim"], device, name) for n in s["n"]]
