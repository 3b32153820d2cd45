"""Hardware rules, checked per instruction for the active target. Each check raises
``HardwareRuleError(rule, instruction, detail)``. Rule names are stable strings so tests and callers
can tell the rules apart. Values come from ``targets`` and the ``nki.isa`` docstrings (NKI 0.6.0).
"""

from __future__ import annotations

import math

import numpy as np

from ceiling.trainium.emulator import state
from ceiling.trainium.emulator.errors import HardwareRuleError
from ceiling.trainium.emulator.memory import ON_CHIP, Tensor, dtype_name

# nc_matmul input dtypes on NeuronCore-v2/-v3 (fp8 e4m3/e5m2, bf16, fp16, tf32, fp32).
MATMUL_INPUT_DTYPES = ("float8_e4m3fn", "float8_e5m2", "bfloat16", "float16", "float32")
FP32_CLASS = ("float32",)  # tfloat32 is stored as float32 by the emulator


def fail(rule: str, instruction: str, detail: str):
    raise HardwareRuleError(rule, instruction, detail, state.current().target.name)


def tensor(x, instruction: str, role: str) -> Tensor:
    if not isinstance(x, Tensor):
        fail("operand-type", instruction, f"{role} must be an NKI tensor, got {type(x).__name__}")
    return x


def buffer_in(t: Tensor, allowed: tuple[str, ...], instruction: str, role: str) -> None:
    if t.buffer not in allowed:
        fail("memory", instruction, f"{role} {t.name!r} is in {t.buffer}; expected one of {allowed} (shape {t.shape})")


def partition(t: Tensor, instruction: str, role: str) -> None:
    """Partition count and start: a tile of 64 < P <= 128 starts at partition 0, 32 < P <= 64 at
    0 or 64, P <= 32 at a multiple of 32 (Trainium arch guide)."""
    if t.buffer not in ON_CHIP:
        return
    tgt = state.current().target
    p, start = t.shape[0], t.partition_start
    if p > tgt.partitions:
        fail("partition-dim", instruction, f"{role} {t.name!r} spans {p} partitions > {tgt.partitions} (shape {t.shape})")
    quantum = 128 if p > 64 else 64 if p > 32 else 32
    if start % quantum != 0:
        fail(
            "partition-start",
            instruction,
            f"{role} {t.name!r} spans {p} partitions starting at {start}; it must start at a multiple of {quantum}",
        )


def psum_bank(t: Tensor, instruction: str, role: str) -> None:
    """A PSUM operand lives in one 2 KiB bank per partition."""
    if t.buffer != "psum":
        return
    tgt = state.current().target
    nbytes = t.free_size * t.dtype.itemsize
    start = t.free_offset_bytes()
    if nbytes > tgt.psum_bank_bytes or start // tgt.psum_bank_bytes != (start + nbytes - 1) // tgt.psum_bank_bytes:
        fail(
            "psum-bank",
            instruction,
            f"{role} {t.name!r} covers {nbytes} B per partition from byte {start}; a PSUM tile must fit one "
            f"{tgt.psum_bank_bytes} B bank (shape {t.shape}, {dtype_name(t.dtype)})",
        )


def engine_operand(t: Tensor, instruction: str, role: str, engine: str) -> None:
    """Common checks for a Vector/Scalar/GpSimd operand."""
    buffer_in(t, ON_CHIP, instruction, role)
    partition(t, instruction, role)
    psum_bank(t, instruction, role)
    tgt = state.current().target
    if engine == "gpsimd" and t.buffer == "psum":
        fail("gpsimd-psum", instruction, f"GpSimd cannot access PSUM ({role} {t.name!r})")
    limit = tgt.engine_free_max_psum if t.buffer == "psum" else tgt.engine_free_max_sbuf
    if t.free_size > limit:
        fail("engine-free-size", instruction, f"{role} {t.name!r} has {t.free_size} elements per partition > {limit} in {t.buffer}")


def same_layout(a: Tensor, b: Tensor, instruction: str, what: str) -> None:
    if a.shape[0] != b.shape[0] or a.free_size != b.free_size:
        fail("shape", instruction, f"{what}: shapes {a.shape} and {b.shape} differ in partitions or elements per partition")


def matmul(dst: Tensor, stationary: Tensor, moving: Tensor, instruction: str = "nisa.nc_matmul") -> None:
    tgt = state.current().target
    buffer_in(stationary, ("sbuf",), instruction, "stationary")
    buffer_in(moving, ("sbuf",), instruction, "moving")
    buffer_in(dst, ("psum",), instruction, "dst")
    for t, role in ((stationary, "stationary"), (moving, "moving"), (dst, "dst")):
        partition(t, instruction, role)
    if stationary.ndim != 2 or moving.ndim != 2 or dst.ndim != 2:
        fail("shape", instruction, f"2-D tiles expected, got stationary {stationary.shape}, moving {moving.shape}, dst {dst.shape}")
    k, m = stationary.shape
    k2, n = moving.shape
    shapes = f"stationary {stationary.shape}, moving {moving.shape}, dst {dst.shape}"
    if k != k2:
        fail("matmul-contraction", instruction, f"partition (contraction) axes differ: {shapes}")
    if k > tgt.matmul_contraction_max:
        fail("matmul-contraction", instruction, f"contraction {k} > {tgt.matmul_contraction_max}: {shapes}")
    if m > tgt.matmul_stationary_free_max:
        fail("matmul-stationary-free", instruction, f"stationary free size {m} > {tgt.matmul_stationary_free_max}: {shapes}")
    if n > tgt.matmul_moving_free_max:
        fail("matmul-moving-free", instruction, f"moving free size {n} > {tgt.matmul_moving_free_max}: {shapes}")
    if dst.shape != (m, n):
        fail("shape", instruction, f"dst must be (stationary free, moving free) = {(m, n)}: {shapes}")
    for t, role in ((stationary, "stationary"), (moving, "moving")):
        if dtype_name(t.dtype) not in MATMUL_INPUT_DTYPES:
            fail("matmul-dtype", instruction, f"{role} dtype {dtype_name(t.dtype)} not in {MATMUL_INPUT_DTYPES}")
    s32, m32 = dtype_name(stationary.dtype) in FP32_CLASS, dtype_name(moving.dtype) in FP32_CLASS
    if s32 != m32:
        fail(
            "matmul-dtype-mix",
            instruction,
            f"stationary {dtype_name(stationary.dtype)} with moving {dtype_name(moving.dtype)}: if one is fp32/tf32 both must be",
        )
    if dtype_name(dst.dtype) != "float32":
        fail("matmul-dst-dtype", instruction, f"dst must be float32 on NeuronCore-v{tgt.nc_version}, got {dtype_name(dst.dtype)}")
    psum_bank(dst, instruction, "dst")


def transpose_tensor_engine(dst: Tensor, data: Tensor, instruction: str = "nisa.nc_transpose") -> None:
    tgt = state.current().target
    buffer_in(data, ("sbuf",), instruction, "data")
    buffer_in(dst, ("psum",), instruction, "dst")
    partition(data, instruction, "data")
    partition(dst, instruction, "dst")
    if data.ndim != 2 or data.shape[0] > tgt.partitions or data.shape[1] > tgt.matmul_stationary_free_max:
        fail("transpose-size", instruction, f"TensorE transposes at most [128, 128], got {data.shape}")
    if dst.shape != data.shape[::-1]:
        fail("shape", instruction, f"dst {dst.shape} must be the transpose of data {data.shape}")
    if dst.dtype != data.dtype:
        fail("transpose-dtype", instruction, f"dst dtype {dtype_name(dst.dtype)} must equal data dtype {dtype_name(data.dtype)}")
    psum_bank(dst, instruction, "dst")


def transpose_vector_engine(dst: Tensor, data: Tensor, instruction: str = "nisa.nc_transpose") -> None:
    engine_operand(data, instruction, "data", "vector")
    engine_operand(dst, instruction, "dst", "vector")
    if data.ndim != 2 or data.shape[0] > 32 or data.shape[1] > 32:
        fail("transpose-size", instruction, f"VectorE transposes at most [32, 32], got {data.shape}")
    if dst.shape != data.shape[::-1]:
        fail("shape", instruction, f"dst {dst.shape} must be the transpose of data {data.shape}")


def dma(dst: Tensor, src: Tensor, instruction: str = "nisa.dma_copy") -> None:
    for t, role in ((dst, "dst"), (src, "src")):
        if t.buffer == "psum":
            fail("dma-psum", instruction, f"DMA cannot access PSUM ({role} {t.name!r}); copy PSUM to SBUF with an engine first")
        partition(t, instruction, role)
    if math.prod(dst.shape) != math.prod(src.shape):
        fail("dma-elements", instruction, f"element counts differ: dst {dst.shape}, src {src.shape}")


def bias_vector(bias, data: Tensor, instruction: str) -> None:
    tgt = state.current().target
    if bias is None:
        return
    if isinstance(bias, (int, float, np.floating)):
        if not tgt.activation_scalar_bias:
            fail("activation-bias", instruction, f"a scalar bias needs NeuronCore-v3+; on {tgt.name} pass an [{data.shape[0]}, 1] tile")
        return
    engine_operand(bias, instruction, "bias", "scalar")
    if bias.shape[0] != data.shape[0] or bias.free_size != 1:
        fail("activation-bias", instruction, f"bias must be [{data.shape[0]}, 1], got {bias.shape}")


def hbm_output(t: Tensor, instruction: str = "nki.jit") -> None:
    if t.buffer != "shared_hbm":
        fail("output-buffer", instruction, f"kernel output {t.name!r} is in {t.buffer}; outputs must be nl.shared_hbm")


def axis(data: Tensor, axes: tuple[int, ...], instruction: str) -> None:
    nd = data.ndim
    norm = sorted(a % nd for a in axes)
    if not norm or 0 in norm or norm != list(range(nd - len(norm), nd)):
        fail("reduce-axis", instruction, f"reduce over the last free axes only, never the partition axis 0; got axis={axes} for shape {data.shape}")


