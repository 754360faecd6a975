/* cuda_emu.h: enough of CUDA for the C++ compiler to build tapead's kernels
 * for the CPU (tests/test_gpu.py runs them one thread at a time, setting
 * blockIdx, threadIdx, blockDim and gridDim before each call).  Not for
 * ta_gpu_rowsum, whose threads meet at barriers: the test sums in numpy. */
#include <stdint.h>
#include <math.h>
#include <string.h>
struct ta_dim3 { unsigned x, y, z; };
extern "C" { ta_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1}; }
#define __global__
#define __device__
#define __shared__ static
#define __restrict__
static inline void __syncthreads(void) {}
struct int4 { int x, y, z, w; };
struct int2 { int x, y; };
static inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, sizeof d); return d; }
static inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v)
{ unsigned long long o = *p; if (v > o) *p = v; return o; }
