"""An emulator of AWS Trainium NeuronCores (trn1, trn2) for NKI kernels, for machines without the
Neuron toolchain: the NKI 0.6.0 API over HBM, SBUF and PSUM with their capacities, every read checked
to be of written memory, instructions computed in fp32 and cast on output (bf16 via ml_dtypes), the
chips' hardware rules (:mod:`rules`) and a cost model over the trace (:mod:`cost`). What it checks,
its files and how to use it are in ``kernels/trainium/README.md``.
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
