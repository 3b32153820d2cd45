// Ceilings: memory bandwidth (HBM, L2, shared), FP32 FMA and tensor-core peaks,
// and a latency ladder by pointer chase.
//
// Throughput kernels run one grid over the whole device and are timed with
// CUDA events on the host; each also records (clock64, globaltimer) deltas on
// thread 0 of block 0 so the SM clock during the measurement is known.
#include "common.cuh"

struct __align__(16) f4 { float x, y, z, w; };

// ---------------------------------------------------------------- HBM / L2

// Grid-stride read of n float4; the sum is stored only if it hits an
// impossible value, so the loads stay but no write traffic is added.
extern "C" __global__ void read_f4(const f4* __restrict__ a, u64 n, int reps, float* sink) {
    float s = 0.0f;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (int r = 0; r < reps; ++r) {
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
            f4 v;
            // .cg: cache in L2 only, so a working set that fits L2 measures L2, not L1.
            asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                         : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(a + i));
            s += (v.x + v.y) + (v.z + v.w);
        }
    }
    if (s == -1.2345f) sink[blockIdx.x] = s;
}

extern "C" __global__ void write_f4(f4* __restrict__ a, u64 n, float value) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        f4 v = {value, value, value, value};
        a[i] = v;
    }
}

extern "C" __global__ void copy_f4(const f4* __restrict__ src, f4* __restrict__ dst, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

// ---------------------------------------------------------------- shared memory

// Conflict-free 16-byte reads: every warp reads 512 contiguous bytes per
// instruction. Reports per-block SM cycles for a bytes-per-clock figure.
extern "C" __global__ void __launch_bounds__(1024) smem_read(int iters, u64* cycles, float* sink) {
    __shared__ __align__(16) float buf[8192];  // 32 KB
    for (int i = threadIdx.x; i < 8192; i += blockDim.x) buf[i] = (float)i;
    __syncthreads();
    const u32 base = smem_u32(buf);
    const u32 lane_off = (threadIdx.x & 31) * 16;
    const u32 warp_off = ((threadIdx.x >> 5) * 512) & 32767;
    float s = 0.0f;
    const u64 c0 = sm_clock64();
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            float a, b, c, d;
            const u32 addr = base + ((warp_off + j * 2048 + lane_off) & 32767);
            asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                         : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "r"(addr) : "memory");
            s += (a + b) + (c + d);
        }
    }
    __syncthreads();
    const u64 c1 = sm_clock64();
    if (threadIdx.x == 0) cycles[blockIdx.x] = c1 - c0;
    if (s == -1.2345f) sink[blockIdx.x] = s;
}

// ---------------------------------------------------------------- FP32 FMA peak

// 8 independent FMA chains per thread hide the FMA latency; FLOPs =
// 2 * 8 * CHAIN_UNROLL * iters per thread.
#define CHAINS 8
#define CHAIN_UNROLL 64
extern "C" __global__ void fma_f32(int iters, float* out, u64* clk) {
    float x[CHAINS];
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) x[k] = threadIdx.x * 1e-3f + k;
    const float a = 0.999999f, b = 1e-7f;
    const u64 c0 = sm_clock64(), t0 = globaltimer_ns();
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int u = 0; u < CHAIN_UNROLL; ++u) {
#pragma unroll
            for (int k = 0; k < CHAINS; ++k) x[k] = fmaf(x[k], a, b);
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) s += x[k];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        clk[0] = sm_clock64() - c0;
        clk[1] = globaltimer_ns() - t0;
    }
    if (s == -1.2345f) out[blockIdx.x] = s;
}

// ---------------------------------------------------------------- tensor cores (mma.sync)

// HMMA m16n8k16 bf16 -> f32 from registers; 4 independent accumulators per
// warp. FLOPs per instruction per warp = 2 * 16 * 8 * 16 = 4096.
#define MMA_CHAINS 4
#define MMA_UNROLL 16
extern "C" __global__ void mma_bf16(int iters, float* out, u64* clk) {
    u32 a0 = threadIdx.x * 0x00010001u, a1 = a0 ^ 0x3f803f80u, a2 = a0 + 7u, a3 = a0 ^ 0x3c003c00u;
    u32 b0 = a0 ^ 0x40004000u, b1 = a0 + 0x00030003u;
    float d[MMA_CHAINS][4];
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; ++c)
#pragma unroll
        for (int k = 0; k < 4; ++k) d[c][k] = 0.0f;
    const u64 c0 = sm_clock64(), t0 = globaltimer_ns();
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int u = 0; u < MMA_UNROLL; ++u) {
#pragma unroll
            for (int c = 0; c < MMA_CHAINS; ++c) {
                asm volatile(
                    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                    : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            }
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; ++c) s += (d[c][0] + d[c][1]) + (d[c][2] + d[c][3]);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        clk[0] = sm_clock64() - c0;
        clk[1] = globaltimer_ns() - t0;
    }
    if (s == -1.2345f) out[blockIdx.x] = s;
}

// ---------------------------------------------------------------- latency ladder

// One thread follows a cycle of raw pointers (p = *p), so each step's address
// is the previous load's value: cycles per step = load-to-use latency.
// `warm` steps first bring the working set into the caches; `steps` are timed.
extern "C" __global__ void pointer_chase(const u64* start, int warm, int steps, u64* out) {
    const u64* p = start;
    for (int i = 0; i < warm; ++i) p = (const u64*)__ldca((const unsigned long long*)p);
    const u64 c0 = sm_clock64(), t0 = globaltimer_ns();
    for (int i = 0; i < steps; ++i) p = (const u64*)__ldca((const unsigned long long*)p);
    const u64 c1 = sm_clock64(), t1 = globaltimer_ns();
    out[0] = c1 - c0;
    out[1] = t1 - t0;
    out[2] = smid();
    out[3] = (u64)p;  // the chain's end: keeps every load
}
