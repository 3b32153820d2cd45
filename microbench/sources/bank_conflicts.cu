// Shared-memory bank conflicts: cycles per warp-wide access for any per-lane pattern.
//
// Every warp of the block (16 warps, one block per SM) issues the same access
// pattern (lane i uses byte offset offsets[i]) `iters * UNROLL` times, with
// independent loads so the shared-memory pipe, not latency, sets the pace. The pipe serves one
// wavefront per cycle per SM, so
//     cycles per warp access = elapsed SM cycles / (iters * UNROLL * warps)
// approaches the number of wavefronts the bank model predicts.
// One block per SM; each block reports its own clock64 interval.
#include "common.cuh"

#define SMEM_BYTES 40960  // patterns up to 32 KB plus 32 shift steps of 128 B
#define UNROLL 16

// The assembler may merge or hoist identical non-volatile loads, which asm
// volatile does not prevent (it only binds the front end). Plain loads and
// stores use the .volatile forms; ldmatrix has none, so its address moves by
// `shift` bytes per unrolled step and by 16*shift every other iteration. With
// shift a multiple of 128 B every lane keeps its bank, and the assembler
// cannot prove two addresses equal.
__device__ __forceinline__ u32 step_addr(u32 addr, int it, int j, u32 shift) {
    return addr + j * shift + (it & 1) * 16 * shift;
}

#define BANK_KERNEL_PROLOGUE                                                     \
    __shared__ __align__(128) u32 buf[SMEM_BYTES / 4];                           \
    for (int i = threadIdx.x; i < SMEM_BYTES / 4; i += blockDim.x) buf[i] = i;   \
    __syncthreads();                                                             \
    const u32 addr = smem_u32(buf) + offsets[threadIdx.x & 31];                  \
    u32 acc = threadIdx.x;                                                       \
    __syncthreads();                                                             \
    const u64 t0 = sm_clock64();

#define BANK_KERNEL_EPILOGUE                                                     \
    __syncthreads();                                                             \
    const u64 t1 = sm_clock64();                                                 \
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;                          \
    if (acc == 0x9e3779b9u) sink[threadIdx.x] = acc; /* keeps the loads live */

extern "C" __global__ void __launch_bounds__(1024)
lds_b32(const u32* __restrict__ offsets, int iters, u32 shift, u64* cycles, u32* sink) {
    BANK_KERNEL_PROLOGUE
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            u32 v;
            asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
            acc ^= v;
        }
    }
    BANK_KERNEL_EPILOGUE
}

extern "C" __global__ void __launch_bounds__(1024)
lds_b64(const u32* __restrict__ offsets, int iters, u32 shift, u64* cycles, u32* sink) {
    BANK_KERNEL_PROLOGUE
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            u32 a, b;
            asm volatile("ld.volatile.shared.v2.u32 {%0, %1}, [%2];" : "=r"(a), "=r"(b) : "r"(addr) : "memory");
            acc ^= a + b;
        }
    }
    BANK_KERNEL_EPILOGUE
}

extern "C" __global__ void __launch_bounds__(1024)
lds_b128(const u32* __restrict__ offsets, int iters, u32 shift, u64* cycles, u32* sink) {
    BANK_KERNEL_PROLOGUE
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            u32 a, b, c, d;
            asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr) : "memory");
            acc ^= (a + b) ^ (c + d);
        }
    }
    BANK_KERNEL_EPILOGUE
}

extern "C" __global__ void __launch_bounds__(1024)
sts_b32(const u32* __restrict__ offsets, int iters, u32 shift, u64* cycles, u32* sink) {
    BANK_KERNEL_PROLOGUE
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            asm volatile("st.volatile.shared.u32 [%0], %1;" :: "r"(addr), "r"(acc + j) : "memory");
        }
        acc += it;
    }
    BANK_KERNEL_EPILOGUE
}

extern "C" __global__ void __launch_bounds__(1024)
sts_b64(const u32* __restrict__ offsets, int iters, u32 shift, u64* cycles, u32* sink) {
    BANK_KERNEL_PROLOGUE
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            asm volatile("st.volatile.shared.v2.u32 [%0], {%1, %2};" :: "r"(addr), "r"(acc + j), "r"(acc ^ j) : "memory");
        }
        acc += it;
    }
    BANK_KERNEL_EPILOGUE
}

extern "C" __global__ void __launch_bounds__(1024)
sts_b128(const u32* __restrict__ offsets, int iters, u32 shift, u64* cycles, u32* sink) {
    BANK_KERNEL_PROLOGUE
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            asm volatile("st.volatile.shared.v4.u32 [%0], {%1, %2, %3, %4};"
                         :: "r"(addr), "r"(acc + j), "r"(acc ^ j), "r"(acc - j), "r"(acc * 3u) : "memory");
        }
        acc += it;
    }
    BANK_KERNEL_EPILOGUE
}

// ldmatrix.x4: lane 8*m + r gives the 16-byte row r of 8x8 b16 matrix m.
extern "C" __global__ void __launch_bounds__(1024)
ldsm_x4(const u32* __restrict__ offsets, int iters, u32 shift, u64* cycles, u32* sink) {
    BANK_KERNEL_PROLOGUE
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            u32 a, b, c, d;
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                         : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(step_addr(addr, it, j, shift)) : "memory");
            acc ^= (a + b) ^ (c + d);
        }
    }
    BANK_KERNEL_EPILOGUE
}

extern "C" __global__ void __launch_bounds__(1024)
ldsm_x4_trans(const u32* __restrict__ offsets, int iters, u32 shift, u64* cycles, u32* sink) {
    BANK_KERNEL_PROLOGUE
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            u32 a, b, c, d;
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                         : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(step_addr(addr, it, j, shift)) : "memory");
            acc ^= (a + b) ^ (c + d);
        }
    }
    BANK_KERNEL_EPILOGUE
}
