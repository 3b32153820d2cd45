// Resident workgroups counted on a CDNA3 device: each workgroup's first lane
// records where it ran (HW_ID: CU, shader engine; XCC_ID: the die) and the
// wall-clock interval it stayed resident while spinning. The host sweeps the
// intervals per (XCC, SE, CU): the largest overlap is what the CU held.
#include "hip_builtins.h"

#ifndef NACC
#define NACC 8
#endif

// s_getreg immediates: (size - 1) << 11 | offset << 6 | register id.
#define HWREG_HW_ID ((31 << 11) | 4)
#define HWREG_XCC_ID ((31 << 11) | 20)

extern "C" __global__ void __launch_bounds__(1024)
resident(u64 spin_ticks, u64* start, u64* end, u32* hw_id, u32* xcc_id, float* sink) {
    float acc[NACC];
#pragma unroll
    for (int k = 0; k < NACC; ++k) acc[k] = threadIdx_x * (k + 1) * 1e-3f;
    __syncthreads();
    const u64 t0 = wall_clock64();
    u64 now = t0;
    const float a = 1.0f + 1e-7f * blockIdx_x;
    while (now - t0 < spin_ticks) {
#pragma unroll
        for (int k = 0; k < NACC; ++k) acc[k] = __builtin_fmaf(acc[k], a, 1e-6f);
        now = wall_clock64();
    }
    __syncthreads();
    if (threadIdx_x == 0) {
        start[blockIdx_x] = t0;
        end[blockIdx_x] = wall_clock64();
        hw_id[blockIdx_x] = __builtin_amdgcn_s_getreg(HWREG_HW_ID);
        xcc_id[blockIdx_x] = __builtin_amdgcn_s_getreg(HWREG_XCC_ID);
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < NACC; ++k) s += acc[k];
    if (s == -1.0f) sink[blockIdx_x] = s;
}
