"""Ports of OpenFold's pair-stack layers, for the tests, under OpenFold's own module paths.

OpenFold cannot be pip-installed without its CUDA extensions, so the tests import these
instead (``tests/openfold_port.py`` puts this folder first on ``sys.path`` when no real
``openfold`` is installed). Each module follows the file of the same path in
aqlaboratory/openfold at commit ce0029e1199b65fd834fe822be50d936cfe57fd4: the same
class names, parameter names and shapes, forward signatures and default-path math.
What the tests do not need is left out and raises (the chunked and in-place inference
paths, DeepSpeed/LMA/FlashAttention kernels); the initialisers use torch's truncated
normal where OpenFold uses scipy's (the tests draw their own weights).
"""
