// Shader clock on CDNA3, estimated in-kernel: s_memtime (shader cycles)
// against s_memrealtime (a constant-rate counter, 100 MHz on MI300X; the
// host reads the rate from hipDeviceAttributeWallClockRate). One wave per
// workgroup, one workgroup per CU.
#include "hip_builtins.h"

extern "C" __global__ void __launch_bounds__(64)
sm_frequency(u64 window_ticks, u64* cycles, u64* ticks) {
    const u64 c0 = clock64();
    const u64 t0 = wall_clock64();
    u64 t = t0;
    while (t - t0 < window_ticks) t = wall_clock64();
    const u64 c1 = clock64();
    const u64 t1 = wall_clock64();
    if (threadIdx_x == 0) {
        cycles[blockIdx_x] = c1 - c0;
        ticks[blockIdx_x] = t1 - t0;
    }
}
