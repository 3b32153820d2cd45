"""An emulator of AWS Trainium NeuronCores for NKI kernels, for machines without the Neuron toolchain.

It follows the NKI 0.6.0 API (Neuron SDK 2.32: ``import nki``, ``nki.language as nl``,
``nki.isa as nisa``, explicit ``dst`` on every ISA call) and models:

* HBM, SBUF and PSUM as distinct memories, partition axis first; on-chip capacity per target
  (SBUF bytes per partition, 8 PSUM banks of 2 KiB) checked as tensors are created and freed;
* uninitialized memory: every element read must have been written (``UninitializedReadError``);
* the instructions GEMM, attention and layer norm need (``isa``), computing in fp32 and casting
  on output (bf16 via ml_dtypes), with ``nc_matmul``'s PSUM accumulation rule;
* the hardware rules of trn1 and trn2 (``rules``; one ``HardwareRuleError`` naming the rule);
* a cost model over the instruction trace (``cost``).

Usage::

    from ceiling.trainium.emulator import emulate, jit, language as nl, isa as nisa

    with emulate(target="trn2") as ctx:
        out = kernel(a, b)
    report = cost.estimate(ctx.trace, ctx.target, flops=...)
"""

from ceiling.trainium.emulator import cost, isa, language, targets
from ceiling.trainium.emulator.errors import EmulatorError, HardwareRuleError, NoTargetError, UninitializedReadError
from ceiling.trainium.emulator.jit import Kernel, ShapeDtype, jit
from ceiling.trainium.emulator.state import Context, emulate

__all__ = [
    "Context",
    "EmulatorError",
    "HardwareRuleError",
    "Kernel",
    "NoTargetError",
    "ShapeDtype",
    "UninitializedReadError",
    "cost",
    "emulate",
    "isa",
    "jit",
    "language",
    "targets",
]
