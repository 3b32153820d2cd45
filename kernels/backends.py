"""Which backends exist, which of them can run each op on this machine, and how.

A backend is a vendor's kernels (``nvidia``, ``amd``, ``tpu``, ``trainium``) or the
plain-framework ``reference``. Each runs in one of these modes:

* ``native``: on the vendor's device;
* ``interpreted``: the same Triton or Pallas source under its interpreter on the CPU;
* ``emulated``: the same NKI source on ``kernels.trainium.emulator``;
* ``unavailable``: it cannot run here; ``reason`` says why.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

BACKENDS = ("reference", "nvidia", "amd", "tpu", "trainium")

# op -> backend -> module implementing it. An op lists only the backends it has.
OPS: dict[str, dict[str, str]] = {
    "gemm": {
        "reference": "kernels.gemm.reference",
        "nvidia": "kernels.nvidia.gemm",
        "amd": "kernels.amd.gemm",
        "tpu": "kernels.tpu.gemm",
        "trainium": "kernels.trainium.gemm",
    },
    "scaled_gemm": {
        "reference": "kernels.scaled_gemm.reference",
        "nvidia": "kernels.nvidia.gemm_fp8",
        "amd": "kernels.amd.gemm_fp8",
    },
    "fp8_quantize": {
        "reference": "kernels.fp8.reference",
        "nvidia": "kernels.triton.fp8_quantize",
        "amd": "kernels.triton.fp8_quantize",
    },
    "attention": {
        "reference": "kernels.attention.reference",
        "nvidia": "kernels.nvidia.attention",
        "amd": "kernels.amd.attention",
        "tpu": "kernels.tpu.attention",
        "trainium": "kernels.trainium.attention",
    },
    "triangle_attention": {
        "reference": "kernels.triangle.reference",
        "nvidia": "kernels.nvidia.triangle_attention",
        "amd": "kernels.amd.triangle_attention",
        "tpu": "kernels.tpu.triangle_attention",
        "trainium": "kernels.trainium.triangle_attention",
    },
    "triangle_multiplicative_update": {
        "reference": "kernels.triangle.reference",
        "nvidia": "kernels.nvidia.triangle_multiplication",
        "amd": "kernels.amd.triangle_multiplication",
        "tpu": "kernels.tpu.triangle_multiplication",
        "trainium": "kernels.trainium.triangle_multiplication",
    },
}


# Why an op has no kernel on a backend, where the reason is more than "not written yet".
MISSING: dict[tuple[str, str], str] = {
    ("scaled_gemm", "tpu"): (
        "no FP8 kernel: the MXUs of the TPU generations targeted here (v5e, v5p, v6e) multiply FP8 only as "
        "e5m2 or e4m3b11fnuz (Mosaic's is_matmul_supported), and OCP e4m3fn, the operand format, only on "
        "TPU7x; backend='reference' runs the dequantized product through XLA"
    ),
    ("scaled_gemm", "trainium"): (
        "no FP8 kernel yet: trn2's TensorE multiplies e4m3/e5m2 (and the NKI emulator accepts them), but "
        "the fine-grained scales need a PSUM tile per 128-deep K step rescaled on VectorE, which is not "
        "written; backend='reference' runs the dequantized product"
    ),
    ("fp8_quantize", "tpu"): "the quantizers are Triton kernels; JAX callers get the jnp oracle (kernels.fp8.reference)",
    ("fp8_quantize", "trainium"): "the quantizers are Triton kernels; backend='reference' runs the float32 oracle",
}


@dataclass(frozen=True)
class Availability:
    backend: str
    mode: str  # "native", "interpreted", "emulated" or "unavailable"
    reason: str

    @property
    def runs(self) -> bool:
        return self.mode != "unavailable"


@functools.cache
def gpu_vendor() -> str | None:
    """'nvidia' or 'amd' when PyTorch sees a GPU of that vendor, else None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return "amd" if getattr(torch.version, "hip", None) else "nvidia"


@functools.cache
def gpu_name() -> str | None:
    if gpu_vendor() is None:
        return None
    import torch

    return torch.cuda.get_device_name()


def default_for_device(device: str) -> str:
    """Where an op runs when no backend is named: the device's vendor, else the reference."""
    kind = device.split(":")[0]
    if kind == "cuda":
        return gpu_vendor() or "reference"
    if kind == "gpu":  # JAX names CUDA and ROCm devices alike
        return gpu_vendor() or "nvidia"
    if kind == "tpu":
        return "tpu"
    return "reference"


def _has_module(name: str) -> tuple[bool, str]:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        return False, f"{name} is not installed ({exc.__class__.__name__}: {exc})"
    return True, ""


@functools.cache
def availability(backend: str) -> Availability:
    """How ``backend`` would run here, independent of any op."""
    if backend == "reference":
        return Availability(backend, "native", "plain PyTorch/JAX math on any device")
    if backend in ("nvidia", "amd"):
        ok, why = _has_module("triton")
        if not ok:
            return Availability(backend, "unavailable", why)
        vendor = gpu_vendor()
        if vendor == backend:
            if backend == "nvidia":
                import torch

                major, minor = torch.cuda.get_device_capability()
                if major < 9:
                    return Availability(
                        backend,
                        "unavailable",
                        f"the kernels target Hopper (sm_90) and later; this GPU is sm_{major}{minor}",
                    )
            return Availability(backend, "native", f"{gpu_name()}")
        seen = f"a {vendor} GPU is present" if vendor else "no GPU is visible to PyTorch"
        return Availability(backend, "interpreted", f"{seen}: the Triton interpreter runs the kernel on the CPU")
    if backend == "tpu":
        ok, why = _has_module("jax")
        if not ok:
            return Availability(backend, "unavailable", why)
        import jax

        if any(d.platform == "tpu" for d in jax.devices()):
            return Availability(backend, "native", jax.devices()[0].device_kind)
        return Availability(backend, "interpreted", "no TPU: Pallas interpret mode runs the kernel on the CPU")
    if backend == "trainium":
        from kernels.trainium import nki_compat

        if not nki_compat.EMULATED:
            return Availability(backend, "native", "the Neuron toolchain (nki) is importable")
        return Availability(
            backend,
            "emulated",
            "no working Neuron toolchain (its registry packages are empty): kernels run on kernels.trainium.emulator",
        )
    raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")


def op_availability(op: str, backend: str) -> Availability:
    """Availability of ``backend`` for ``op``, including whether the op has that backend."""
    impls = OPS.get(op)
    if impls is None:
        raise ValueError(f"op: expected one of {sorted(OPS)}, got {op!r}")
    if backend not in impls:
        return Availability(backend, "unavailable", MISSING.get((op, backend), f"{op} has no {backend} kernel yet"))
    base = availability(backend)
    if not base.runs:
        return base
    ok, why = _has_module(impls[backend])
    if not ok:
        return Availability(backend, "unavailable", why)
    return base


def implementation(op: str, backend: str):
    """The module that implements ``op`` on ``backend``; raises if it cannot run here."""
    from kernels.errors import BackendUnavailable

    avail = op_availability(op, backend)
    if not avail.runs:
        raise BackendUnavailable(f"{op} on backend={backend!r} cannot run here: {avail.reason}")
    return importlib.import_module(OPS[op][backend])


# (op, backend) -> a second implementation on that backend: (name, "module:function" giving its
# (mode, reason) here). Which one runs a given problem: the backend module's implementation_for.
SECOND_IMPLEMENTATIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("attention", "nvidia"): ("gluon", "kernels.nvidia.gluon.attention:availability"),
}


class Report(list):
    """The rows of :func:`report` (a list of dicts), shown as a table when printed or echoed by a REPL."""

    def table(self, width: int | None = None) -> str:
        import shutil

        from rich.console import Console
        from rich.table import Table

        table = Table(title="Backends on this machine")
        table.add_column("op", no_wrap=True)
        table.add_column("backend", no_wrap=True)
        table.add_column("mode", no_wrap=True)
        table.add_column("reason", overflow="fold")
        for row in self:
            table.add_row(row["op"], row["backend"], row["mode"], row["reason"])
        console = Console(width=width or shutil.get_terminal_size((120, 24)).columns, record=True,
                          force_terminal=False, color_system=None)
        with console.capture() as captured:
            console.print(table)
        return captured.get().rstrip("\n")

    def __str__(self) -> str:
        return self.table()

    __repr__ = __str__


def report() -> Report:
    """One row per (op, backend): mode and reason (``ceiling backends``), and one per second
    implementation of an op on a backend, named ``backend:implementation`` ("nvidia:gluon");
    prints as a table."""
    rows = Report(
        {"op": op, "backend": b, "mode": (a := op_availability(op, b)).mode, "reason": a.reason}
        for op in OPS
        for b in BACKENDS
    )
    for (op, backend), (name, where) in SECOND_IMPLEMENTATIONS.items():
        module, func = where.split(":")
        mode, reason = getattr(importlib.import_module(module), func)()
        rows.append({"op": op, "backend": f"{backend}:{name}", "mode": mode, "reason": reason})
    return rows
