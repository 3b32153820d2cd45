// SM clock frequency estimated in-kernel: clock64 (SM cycles) against
// %globaltimer (ns) over a window of milliseconds, one warp per block and
// one block per SM. f_SM[GHz] = delta cycles / delta ns, taken on one SM.
#include "common.cuh"

extern "C" __global__ void sm_frequency(u64 window_ns, u64* cycles, u64* nanoseconds, u32* sm) {
    __syncwarp();
    const u64 c0 = sm_clock64();
    const u64 t0 = globaltimer_ns();
    u64 t = t0;
    while (t - t0 < window_ns) t = globaltimer_ns();
    const u64 c1 = sm_clock64();
    const u64 t1 = globaltimer_ns();
    if (threadIdx.x == 0) {
        cycles[blockIdx.x] = c1 - c0;
        nanoseconds[blockIdx.x] = t1 - t0;
        sm[blockIdx.x] = smid();
    }
}
