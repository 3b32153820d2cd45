// Resident blocks counted on the device.
//
// Each block's thread 0 records the SM it runs on and the global-timer
// interval it stays resident (it spins for `spin_ns`, so every block that can
// be resident at once is). The host sweeps the intervals per SM: the largest
// overlap is the number of blocks the SM held together.
//
// NACC independent accumulators stay live across the spin, so the register
// count grows with NACC (compile with -DNACC=... and optionally
// --maxrregcount); the host reads the count the compiler chose from the
// function attributes. Dynamic shared memory sets the shared-memory limit.
#include "common.cuh"

#ifndef NACC
#define NACC 8
#endif

extern "C" __global__ void resident(u64 spin_ns, u32 dynamic_bytes, u64* start_ns, u64* end_ns, u32* sm, float* sink) {
    extern __shared__ float dyn[];
    float acc[NACC];
#pragma unroll
    for (int k = 0; k < NACC; ++k) acc[k] = threadIdx.x * (k + 1) * 1e-3f;

    __syncthreads();  // the whole block is resident from here
    const u64 t0 = globaltimer_ns();
    u64 now = t0;
    float a = 1.0f + 1e-7f * blockIdx.x;
    while (now - t0 < spin_ns) {
#pragma unroll
        for (int k = 0; k < NACC; ++k) acc[k] = fmaf(acc[k], a, 1e-6f);
        now = globaltimer_ns();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        start_ns[blockIdx.x] = t0;
        end_ns[blockIdx.x] = globaltimer_ns();
        sm[blockIdx.x] = smid();
        if (dynamic_bytes >= 4) dyn[0] = acc[0];  // touches the dynamic allocation
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < NACC; ++k) s += acc[k];
    if (s == -1.0f) sink[blockIdx.x] = s;
}
