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

/* Forward: the last eight values are kept in registers (r1: node k - 1 ...
 * r8: node k - 8), and the operands of the next node, when older, are
 * loaded one node early (px, node py; pz, node pq): most operands are
 * recent, so most nodes wait for no memory round trip.  The same doubles
 * as in V: the same bits. */
#define TA_FV(node) ((node) == k - 1 ? r1 : (node) == k - 2 ? r2 : (node) == k - 3 ? r3 : \
                     (node) == k - 4 ? r4 : (node) == k - 5 ? r5 : (node) == k - 6 ? r6 : \
                     (node) == k - 7 ? r7 : (node) == k - 8 ? r8 : (node) == cpy ? cx : \
                     (node) == cpq ? cz : V[(long long)(node) * ld + i])
#define IN_LEAF(N) r = I.z ? par[I.y] : X[row * nin + I.y];
#define IN_UN(N)   x = TA_FV(I.y); y = 0.0; st = fwd_##N(x, y, &r);
#define IN_BIN(N)  x = TA_FV(I.y); y = TA_FV(I.z); st = fwd_##N(x, y, &r);
#define IN_CST(N)  x = TA_FV(I.y); y = c[k]; st = fwd_##N(x, y, &r);
#define IN_NARY(N) st = TA_EBADOP;

/* Reverse: the three values a rule may read (x, y, the node's own) are
 * loaded while the node before it in the sweep runs (vx, vy, vr), whether
 * the rule reads them or not: with few rows the sweep is bound by the
 * latency of its loads, not by memory bandwidth, and V is only read here.
 * An input with an adjoint row gets partial * g.  A push into node k - 1's row (the next
 * node's: every push into it is done by then) also keeps the sum in a
 * register (gn), which the next node takes as its g instead of reading it
 * back: the same double, one memory round trip fewer. */
#define TA_VAL(node) V[(long long)(node) * ld + i]
#define TA_RV_LOAD(J, node, X_, Y_, R_) { \
        R_ = TA_VAL(node); \
        X_ = (unsigned)(J).y < (unsigned)n ? TA_VAL((J).y) : 0.0; \
        Y_ = (unsigned)(J).z < (unsigned)n ? TA_VAL((J).z) : 0.0; }
#define TA_GPU_PUSH(s, p) if ((s) >= 0) { \
        double *q_ = &D[(long long)(s) * ld + i]; \
        const double t_ = *q_ + (p) * g; \
        *q_ = t_; \
        if ((s) == next.w) { gn = t_; fw = 1; } }
#define RV_LEAF(N)
#define RV_NARY(N)
#define RV_UN(N)  d_##N(vx, 0.0, vr, &dx, &dy); TA_GPU_PUSH(S.x, dx)
#define RV_CST(N) d_##N(vx, c[k], vr, &dx, &dy); TA_GPU_PUSH(S.x, dx)
#define RV_BIN(N) d_##N(vx, vy, vr, &dx, &dy); \
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
    double r1 = 0.0, r2 = 0.0, r3 = 0.0, r4 = 0.0, r5 = 0.0, r6 = 0.0, r7 = 0.0, r8 = 0.0;
    double px = 0.0, cx, pz = 0.0, cz;
    int py = -1, cpy, pq = -1, cpq;
    if (i >= rows) return;
    /* node k + 2's instruction is loaded while node k runs, and node k + 1's
     * older operands */
    int4 I = ins[0], next = ins[n > 1 ? 1 : 0], after;
    for (k = 0; k < n; k++, I = next, next = after) {
        after = ins[k + 2 < n ? k + 2 : k];
        cx = px; cpy = py; cz = pz; cpq = pq;
        py = pq = -1;
        if (next.y >= 0 && next.y <= k - 8) {       /* (a leaf's column: loaded, not used) */
            px = V[(long long)next.y * ld + i];
            py = next.y;
        }
        if (next.z >= 0 && next.z <= k - 8) {
            pz = V[(long long)next.z * ld + i];
            pq = next.z;
        }
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
        r8 = r7; r7 = r6; r6 = r5; r5 = r4; r4 = r3; r3 = r2; r2 = r1; r1 = r;
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
    /* node k - 1's instruction was loaded a node before, node k - 2's now */
    I = ins[n > 0 ? n - 1 : 0];
    next = ins[n > 1 ? n - 2 : 0];
    double gn = 0.0, vx = 0.0, vy = 0.0, vr = 0.0, nx = 0.0, ny = 0.0, nr = 0.0;
    int fw = 0;
    if (n > 0) TA_RV_LOAD(I, n - 1, vx, vy, vr)
    for (k = n; k-- > 0; I = next, next = after, vx = nx, vy = ny, vr = nr) {
        int2 S;
        double g;
        const int have = fw;
        fw = 0;
        after = ins[k > 1 ? k - 2 : 0];
        if (k > 0 && next.w >= 0) TA_RV_LOAD(next, k - 1, nx, ny, nr)
        if (I.w < 0) continue;
        S = ads[k];
        g = have ? gn : D[(long long)I.w * ld + i];
        switch (I.x) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: RV_##KIND(NAME) break;
#include "ops.def"
#undef TA_OP
        }
    }
    for (j = 0; j < nwrt; j++)
        G[(long long)j * ldo + row] = wslot[j] >= 0 ? D[(long long)wslot[j] * ld + i] : 0.0;
}
