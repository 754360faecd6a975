/* gpu_interp.cu: the CUDA interpreter of a Program, for programs of any size
 * (tapead/cuda.py).  Compiled once; the program is data.
 *
 * One thread per row; values and adjoints live in global memory as
 * [node][row] (V) and [slot][row] (D), so the threads of a warp, running
 * the same instruction, touch consecutive addresses.  The instruction of
 * node k is ins[k] = (op, a, b, dslot):
 *   op     the op code (ops.def)
 *   a, b   its input nodes; a leaf: a is its input column, or its
 *          parameter index when b is 1
 *   dslot  its adjoint's row in D, or -1 if no wrt leaf is behind it
 * and ads[k] its inputs' adjoint rows (a's, b's; -1: none), so the reverse
 * sweep reads one instruction pair per node.  The forward sweep runs every node in order, then the guards; the
 * reverse sweep runs the nodes with an adjoint, newest first, each adding
 * its partials times its adjoint into its inputs' (x first, then y), as
 * the CPU Program's sweep does.
 *
 * describe (the one-row rerun that names a failure, tapead/cuda.py): the
 * first failure of row row0 is written into detail as
 * [status, op, x, y, guard, kind, outcome], as the CPU Program reports it:
 * ops in node order first, then guards. */
#include "gpu.cuh"

#define IN_LEAF(N) r = I.z ? par[I.y] : X[row * nin + I.y];
#define IN_UN(N)   x = V[(long long)I.y * ld + i]; y = 0.0; st = fwd_##N(x, y, &r);
#define IN_BIN(N)  x = V[(long long)I.y * ld + i]; y = V[(long long)I.z * ld + i]; st = fwd_##N(x, y, &r);
#define IN_CST(N)  x = V[(long long)I.y * ld + i]; y = c[k]; st = fwd_##N(x, y, &r);
#define IN_NARY(N) st = TA_EBADOP;

/* Reverse: the values a rule reads are loaded in its call's arguments, so
 * after inlining the loads it ignores are gone (d_ADD reads none, d_MULC
 * only its constant), as ta_row_partials does on the CPU; an input with an
 * adjoint row gets partial * g. */
#define TA_VAL(node) V[(long long)(node) * ld + i]
#define TA_GPU_PUSH(s, p) if ((s) >= 0) D[(long long)(s) * ld + i] += (p) * g;
#define RV_LEAF(N)
#define RV_NARY(N)
#define RV_UN(N)  d_##N(TA_VAL(I.y), 0.0, TA_VAL(k), &dx, &dy); TA_GPU_PUSH(S.x, dx)
#define RV_CST(N) d_##N(TA_VAL(I.y), c[k], TA_VAL(k), &dx, &dy); TA_GPU_PUSH(S.x, dx)
#define RV_BIN(N) d_##N(TA_VAL(I.y), TA_VAL(I.z), TA_VAL(k), &dx, &dy); \
                  TA_GPU_PUSH(S.x, dx) TA_GPU_PUSH(S.y, dy)

extern "C" __global__ void ta_gpu_interp(
    const int4 *__restrict__ ins, const int2 *__restrict__ ads, const double *__restrict__ c, int n,
    const double *__restrict__ X, int nin, const double *__restrict__ par,
    const unsigned *__restrict__ out, int nout, const int *__restrict__ wslot, int nwrt,
    const unsigned *__restrict__ gab, const double *__restrict__ gc,
    const unsigned char *__restrict__ gk, int ng,
    const double *__restrict__ seed, int seedmode, int nd,
    double *V, double *D, long long ld, long long row0, long long rows, long long ldo,
    double *Y, double *G, ta_u64 *fail, double *detail, int describe)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long row = row0 + i;
    double x = 0.0, y = 0.0, r = 0.0, dx, dy;
    int k, j, st = TA_OK;
    if (i >= rows) return;
    int4 I = ins[0], next;    /* node k + 1's instruction is loaded while node k runs */
    for (k = 0; k < n; k++, I = next) {
        next = ins[k + 1 < n ? k + 1 : k];
        switch (I.x) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: IN_##KIND(NAME) break;
#include "ops.def"
#undef TA_OP
        default: st = TA_EBADOP;
        }
        if (st != TA_OK) {
            if (describe) {
                detail[0] = st; detail[1] = I.x; detail[2] = x; detail[3] = y;
                detail[4] = -1.0;
            }
            ta_gpu_fail(fail, row, st);
            return;
        }
        V[(long long)k * ld + i] = r;
    }
    for (j = 0; j < ng; j++) {
        const int kind = gk[j] & 3, cst = (gk[j] >> 2) & 1, outcome = (gk[j] >> 3) & 1;
        x = V[(long long)gab[2 * j] * ld + i];
        y = cst ? gc[j] : V[(long long)gab[2 * j + 1] * ld + i];
        if (ta_compare(kind, x, y) != outcome) {
            if (describe) {
                detail[0] = TA_EGUARD; detail[1] = 0; detail[2] = x; detail[3] = y;
                detail[4] = j; detail[5] = kind; detail[6] = outcome;
            }
            ta_gpu_fail(fail, row, TA_EGUARD);
            return;
        }
    }
    /* results as [column][row] (ldo rows): a warp writes consecutive addresses */
    for (j = 0; j < nout; j++) Y[(long long)j * ldo + row] = V[(long long)out[j] * ld + i];
    if (!seedmode) return;
    for (j = 0; j < nd; j++) D[(long long)j * ld + i] = 0.0;
    for (j = 0; j < nout; j++) {
        const int s = ins[out[j]].w;
        if (s >= 0) D[(long long)s * ld + i] += seedmode == 1 ? seed[j] : seed[row * nout + j];
    }
    I = ins[n - 1];
    for (k = n; k-- > 0; I = next) {
        int2 S;
        double g;
        next = ins[k > 0 ? k - 1 : 0];
        if (I.w < 0) continue;
        S = ads[k];
        g = D[(long long)I.w * ld + i];
        switch (I.x) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: RV_##KIND(NAME) break;
#include "ops.def"
#undef TA_OP
        }
    }
    for (j = 0; j < nwrt; j++)
        G[(long long)j * ldo + row] = wslot[j] >= 0 ? D[(long long)wslot[j] * ld + i] : 0.0;
}
