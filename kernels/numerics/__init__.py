"""Bit-exact models of the tensor cores' arithmetic, their published parameters, and the probes
that reveal each feature on a device (``ceiling microbench numerics``)."""

from ceiling.numerics.model import mma, run
from ceiling.numerics.parameters import Unpublished, canonical_target, kinds, lookup, targets

__all__ = ["mma", "run", "lookup", "targets", "kinds", "canonical_target", "Unpublished"]
