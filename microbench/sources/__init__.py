"""CUDA (.cu/.cuh) and HIP (.hip/.h) sources of the microbenchmarks, shipped as package data."""
