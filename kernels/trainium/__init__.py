"""Trainium kernels in NKI, and the NKI emulator they run on where no Neuron toolchain exists."""
