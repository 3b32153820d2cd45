// Ceilings on CDNA3: HBM read/write/copy, FP32 FMA and MFMA (bf16) peaks, and
// a pointer-chase latency ladder; the same measurements as ceilings.cu.
#include "hip_builtins.h"

typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef float f32x16 __attribute__((ext_vector_type(16)));
typedef short i16x4 __attribute__((ext_vector_type(4)));

#define GRID_STRIDE_LOOP(i, n) \
    for (u64 i = (u64)blockIdx_x * 256 + threadIdx_x; i < (n); i += (u64)__builtin_amdgcn_grid_size_x())

extern "C" __global__ void __launch_bounds__(256) read_f4(const f32x4* __restrict__ a, u64 n, float* sink) {
    f32x4 s = {0.f, 0.f, 0.f, 0.f};
    GRID_STRIDE_LOOP(i, n) s += a[i];
    if (s.x + s.y + s.z + s.w == -1.2345f) sink[blockIdx_x] = s.x;
}

extern "C" __global__ void __launch_bounds__(256) write_f4(f32x4* __restrict__ a, u64 n, float value) {
    const f32x4 v = {value, value, value, value};
    GRID_STRIDE_LOOP(i, n) a[i] = v;
}

extern "C" __global__ void __launch_bounds__(256) copy_f4(const f32x4* __restrict__ src, f32x4* __restrict__ dst, u64 n) {
    GRID_STRIDE_LOOP(i, n) dst[i] = src[i];
}

// 8 independent FMA chains per lane; FLOPs = 2 * 8 * 64 * iters per lane.
extern "C" __global__ void __launch_bounds__(256) fma_f32(int iters, float* out) {
    float x[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = threadIdx_x * 1e-3f + k;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int u = 0; u < 64; ++u) {
#pragma unroll
            for (int k = 0; k < 8; ++k) x[k] = __builtin_fmaf(x[k], 0.999999f, 1e-7f);
        }
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) s += x[k];
    if (s == -1.2345f) out[blockIdx_x] = s;
}

// MFMA 32x32x8 bf16 -> f32, 4 independent accumulators per wave.
// FLOPs per instruction per wave = 2 * 32 * 32 * 8.
extern "C" __global__ void __launch_bounds__(256) mfma_bf16(int iters, float* out) {
    const i16x4 a = {(short)threadIdx_x, 0x3f80, 0x3c00, 7};
    const i16x4 b = {0x4000, (short)threadIdx_x, 3, 0x3f00};
    f32x16 d[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) d[c] = (f32x16){};
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int u = 0; u < 16; ++u) {
#pragma unroll
            for (int c = 0; c < 4; ++c) d[c] = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, d[c], 0, 0, 0);
        }
    }
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < 4; ++c) s += d[c][0] + d[c][15];
    if (s == -1.2345f) out[blockIdx_x] = s;
}

// One lane follows a cycle of raw pointers: cycles per step = load-to-use latency.
extern "C" __global__ void __launch_bounds__(64) pointer_chase(const u64* start, int warm, int steps, u64* out) {
    const u64* p = start;
    for (int i = 0; i < warm; ++i) p = (const u64*)*(const volatile u64*)p;
    const u64 c0 = clock64(), t0 = wall_clock64();
    for (int i = 0; i < steps; ++i) p = (const u64*)*(const volatile u64*)p;
    const u64 c1 = clock64(), t1 = wall_clock64();
    if (threadIdx_x == 0) {
        out[0] = c1 - c0;
        out[1] = t1 - t0;
        out[2] = (u64)p;
    }
}
