// Helpers shared by the microbenchmark kernels. No standard headers, so the
// sources compile unchanged with NVRTC (CuPy RawModule) and with nvcc.
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;

// Shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ u32 smem_u32(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// Nanoseconds from the global timer (one clock for all SMs; coarse update step on some parts).
__device__ __forceinline__ u64 globaltimer_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ u32 smid() {
    u32 id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

// SM cycle counter; only differences taken on one SM mean anything.
__device__ __forceinline__ u64 sm_clock64() {
    u64 c;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
    return c;
}
