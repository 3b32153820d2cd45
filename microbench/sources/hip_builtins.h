// The few HIP device-side names these benchmarks use, on clang builtins, so the
// sources compile with `clang -x hip --offload-arch=gfx942 -nogpulib -nogpuinc`
// where no ROCm headers are installed. With ROCm, <hip/hip_runtime.h> is used.
#pragma once

#if __has_include(<hip/hip_runtime.h>) && !defined(MICROBENCH_NO_HIP_HEADERS)
#include <hip/hip_runtime.h>
#else
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __host__ __attribute__((host))
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))

#define threadIdx_x (__builtin_amdgcn_workitem_id_x())
#define blockIdx_x (__builtin_amdgcn_workgroup_id_x())

__device__ static inline void __syncthreads() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
__device__ static inline unsigned long long clock64() { return __builtin_amdgcn_s_memtime(); }
__device__ static inline unsigned long long wall_clock64() { return __builtin_amdgcn_s_memrealtime(); }
#endif

#ifndef threadIdx_x
#define threadIdx_x (threadIdx.x)
#define blockIdx_x (blockIdx.x)
#endif

typedef unsigned int u32;
typedef unsigned long long u64;
typedef u32 u32x2 __attribute__((ext_vector_type(2)));
typedef u32 u32x4 __attribute__((ext_vector_type(4)));
