// LDS bank conflicts on CDNA3: cycles per wave-wide ds_read/ds_write for any
// per-lane pattern (lane i uses byte offset offsets[i], i < 64).
//
// Every wave of the workgroup issues the same access `iters * UNROLL` times;
// the LDS serves one phase per cycle, so cycles per wave access approach the
// bank-cycles the model (microbench.bankconf.cdna3_wavefronts) predicts.
// clock64() is the shader clock (s_memtime).
#include "hip_builtins.h"

#define LDS_BYTES 40960
#define UNROLL 16
// Pointers into LDS (address space 3) so the accesses compile to ds_* instructions.
#define LDS(T) __attribute__((address_space(3))) T

#define LDS_PROLOGUE                                                             \
    __shared__ __attribute__((aligned(16))) u32 buf[LDS_BYTES / 4];              \
    for (u32 i = threadIdx_x; i < LDS_BYTES / 4; i += 256) buf[i] = i;           \
    __syncthreads();                                                             \
    const u32 off = offsets[threadIdx_x & 63];                                   \
    u32 acc = threadIdx_x;                                                       \
    __syncthreads();                                                             \
    const u64 t0 = clock64();

#define LDS_EPILOGUE                                                             \
    __syncthreads();                                                             \
    const u64 t1 = clock64();                                                    \
    if (threadIdx_x == 0) cycles[blockIdx_x] = t1 - t0;                          \
    if (acc == 0x9e3779b9u) sink[threadIdx_x] = acc;

#define READ_KERNEL(NAME, T, FOLD)                                               \
    extern "C" __global__ void __launch_bounds__(256)                            \
    NAME(const u32* __restrict__ offsets, int iters, u64* cycles, u32* sink) {   \
        LDS_PROLOGUE                                                             \
        volatile LDS(T)* p = (volatile LDS(T)*)((LDS(char)*)buf + off);                         \
        for (int it = 0; it < iters; ++it) {                                     \
            _Pragma("unroll")                                                    \
            for (int j = 0; j < UNROLL; ++j) { T v = *p; acc ^= FOLD; }          \
        }                                                                        \
        LDS_EPILOGUE                                                             \
    }

#define WRITE_KERNEL(NAME, T, MAKE)                                              \
    extern "C" __global__ void __launch_bounds__(256)                            \
    NAME(const u32* __restrict__ offsets, int iters, u64* cycles, u32* sink) {   \
        LDS_PROLOGUE                                                             \
        volatile LDS(T)* p = (volatile LDS(T)*)((LDS(char)*)buf + off);                         \
        for (int it = 0; it < iters; ++it) {                                     \
            _Pragma("unroll")                                                    \
            for (int j = 0; j < UNROLL; ++j) { *p = MAKE; }                      \
            acc += it;                                                           \
        }                                                                        \
        LDS_EPILOGUE                                                             \
    }

READ_KERNEL(ds_read_b32, u32, v)
READ_KERNEL(ds_read_b64, u32x2, (v.x + v.y))
READ_KERNEL(ds_read_b128, u32x4, ((v.x + v.y) ^ (v.z + v.w)))
WRITE_KERNEL(ds_write_b32, u32, acc + j)
WRITE_KERNEL(ds_write_b64, u32x2, ((u32x2){acc + j, acc ^ j}))
WRITE_KERNEL(ds_write_b128, u32x4, ((u32x4){acc + j, acc ^ j, acc - j, acc * 3u}))
