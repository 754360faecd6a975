/* gpu.cuh: what every CUDA kernel of tapead shares (tapead/cuda.py compiles
 * them at run time with NVRTC; tests compile them with nvcc too).
 *
 * One CUDA thread runs one row.  The op rules are ops.h's, compiled as
 * device functions: the same fwd_ and d_ code as the CPU Program, so the
 * same IEEE operations in the same order.  Built without FMA contraction
 * (--fmad=false) and without fast math, +, -, *, / and sqrt are correctly
 * rounded as on the CPU; exp, log, log1p, tanh, pow, sin and cos are
 * CUDA's double-precision math library (within 1-2 ulp of the exact
 * result), not the C library's: docs/gpu.md gives the measured difference.
 *
 * Also here: how a failing row is reported (the lowest failing row wins),
 * and the fixed-order sums over rows (no atomics: every launch adds the
 * same numbers in the same order, so gives the same bits). */
#ifndef TAPEAD_GPU_CUH
#define TAPEAD_GPU_CUH

#ifdef __CUDACC_RTC__
/* NVRTC has no C library: tapead/cuda.py hands it an empty math.h and
 * string.h, a stddef.h with size_t and a stdint.h of typedefs (CUDA's math
 * functions and memcpy are built in), and compiles with -default-device so that the
 * headers' function declarations are device ones.  The host-only inline
 * functions of tapead.h (segment holds) must still compile; they are
 * never called here. */
#define __atomic_add_fetch(p, d, o) (*(p) += (d))
#define __atomic_load_n(p, o) (*(p))
#endif

/* ops.h's static inline rules become device functions */
#define inline __device__ inline
#include "replay.h"
#undef inline

typedef unsigned long long ta_u64;

/* A row failed (an op's domain or range error, or a flipped guard): keep
 * the lowest failing row.  *fail starts at 0 (none: a zeroed word, no
 * upload) and holds the complement of the lowest (row << 8 | status) (the
 * largest complement); the status is the low byte (the generated kernels
 * only know that some op failed). */
__device__ static inline void ta_gpu_fail(ta_u64 *fail, long long row, int st)
{
    atomicMax(fail, ~(((ta_u64)row << 8) | (ta_u64)(unsigned char)st));
}

/* Sums over rows in a fixed order.  A (rows, ncol), element (r, j) at
 * A[r * rs + j * cs] (the kernels' [column][row] results: rs 1, cs rows;
 * the parts: rs ncol, cs 1) -> parts
 * (ceil(rows / TA_GPU_SUMROWS), ncol): block b adds rows
 * [b TA_GPU_SUMROWS, (b + 1) TA_GPU_SUMROWS); its thread t first adds rows
 * t, t + 256, t + 512, t + 768 of the block in that order, then the 256
 * threads' sums are added pairwise (t + w into t, w = 128, 64, ..., 1).
 * Launched with TA_GPU_SUMTHREADS threads per block, again on its own
 * output until one row is left: the order depends on the number of rows
 * only, never on timing. */
#define TA_GPU_SUMTHREADS 256
#define TA_GPU_SUMROWS 1024

extern "C" __global__ void ta_gpu_rowsum(const double *A, long long rows, int ncol, long long rs,
                                         long long cs, double *parts)
{
    __shared__ double sh[TA_GPU_SUMTHREADS];
    const int t = threadIdx.x;
    const long long r0 = (long long)blockIdx.x * TA_GPU_SUMROWS;
    int j, q, w;
    for (j = 0; j < ncol; j++) {
        double s = 0.0;
        for (q = 0; q < TA_GPU_SUMROWS / TA_GPU_SUMTHREADS; q++) {
            long long r = r0 + (long long)q * TA_GPU_SUMTHREADS + t;
            if (r < rows) s += A[r * rs + (long long)j * cs];
        }
        sh[t] = s;
        __syncthreads();
        for (w = TA_GPU_SUMTHREADS / 2; w > 0; w >>= 1) {
            if (t < w) sh[t] += sh[t + w];
            __syncthreads();
        }
        if (t == 0) parts[(long long)blockIdx.x * ncol + j] = sh[0];
        __syncthreads();
    }
}

#endif
