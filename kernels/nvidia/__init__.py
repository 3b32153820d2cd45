"""NVIDIA kernels in Triton, written for Hopper (sm_90a) first."""
