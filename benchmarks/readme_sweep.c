/* readme_sweep.c: the C reverse sweep alone (no Python, no cffi) on
 * micrograd's README expression, against a plain C loop on the same machine.
 *
 * It records 4,166 README expressions through the C API (100,000 ops, as
 * python -m tapead.bench does), then times ta_backward from each root, and
 * a backward from a lone leaf (the fixed cost of one call).  The peer is a
 * plain reverse loop over five arrays of 100,000 entries (op byte, input
 * index, two doubles read, one written), timed in the same rounds.
 * Medians of 41 rounds.  Build and run from the repository root:
 */
// cc -O3 -std=gnu99 -pthread -fno-strict-aliasing -ffp-contract=off -DTA_NO_CPYTHON $(printf -- '-I%s ' csrc/*/) benchmarks/readme_sweep.c csrc/*/*.c -lm -o /tmp/readme_sweep
// /tmp/readme_sweep
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "tapead.h"

#define ROOTS 4166
#define ROUNDS 41
#define N 100000

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Record through the cffi front's calls: each takes the key of the segment
 * the caller holds; TA_NEEDSEG asks for a hold on the next one (Python's
 * job; here the holds are simply kept until exit). */
static int64_t key = -1;
static int64_t hold_next(void)
{
    ta_seg *box = NULL;
    if (ta_cur_hold(0, &box, &key) != TA_OK) { fprintf(stderr, "no segment\n"); exit(1); }
    return key;
}
#define REC(call) ({ int64_t id_ = key < 0 ? TA_NEEDSEG : (call); \
    if (id_ == TA_NEEDSEG) { hold_next(); id_ = (call); } \
    if (id_ < 0) { fprintf(stderr, "recording failed: %lld\n", (long long)id_); exit(1); } id_; })
#define LEAF(x)      REC(ta_leaf(x, key))
#define OP2(o, a, b) REC(ta_op2(TA_##o, a, b, key))
#define OPC(o, a, c) REC(ta_opc(TA_##o, a, c, key))
#define OP1(o, a)    REC(ta_op1(TA_##o, a, key))

/* micrograd's README expression, op for op as tapead.bench records it. */
static int64_t readme(void)
{
    int64_t a = LEAF(-4.0), b = LEAF(2.0), c, d, e, f, g;
    c = OP2(ADD, a, b);
    d = OP2(ADD, OP2(MUL, a, b), OPC(POWC, b, 3));
    c = OP2(ADD, c, OPC(ADDC, c, 1));
    c = OP2(ADD, c, OP2(ADD, OPC(ADDC, c, 1), OPC(MULC, a, -1)));
    d = OP2(ADD, d, OP2(ADD, OPC(MULC, d, 2), OP1(RELU, OP2(ADD, b, a))));
    d = OP2(ADD, d, OP2(ADD, OPC(MULC, d, 3), OP1(RELU, OP2(SUB, b, a))));
    e = OP2(SUB, c, d);
    f = OPC(POWC, e, 2);
    g = OPC(MULC, f, 0.5);
    return OP2(ADD, g, OPC(RDIVC, f, 10.0));
}

/* The Python hook of custom nodes (cffi defines it in the module); none here. */
int ta_custom_rule(int64_t node, int64_t k) { (void)node; (void)k; return -1; }

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v)
{
    qsort(v, ROUNDS, sizeof *v, cmp);
    return v[ROUNDS / 2];
}

int main(void)
{
    static int64_t roots[ROOTS];
    static double sweep[ROUNDS], fixed[ROUNDS], plain[ROUNDS];
    static unsigned char op[N];
    static uint32_t in[N];
    static double val[N], part[N], adj[N];
    int64_t leaf = LEAF(1.0);
    double sink = 0.0;
    int k, r, i;
    uint64_t nodes;
    ta_stats_t st;

    ta_stats(&st); nodes = st.nodes;
    for (k = 0; k < ROOTS; k++) roots[k] = readme();
    ta_stats(&st); nodes = st.nodes - nodes;
    for (i = 0; i < N; i++) { op[i] = (unsigned char)(i & 3); in[i] = i ? (uint32_t)(i - 1) : 0; val[i] = i; part[i] = 0.5; }

    for (r = 0; r < ROUNDS; r++) {
        double t0 = now();
        for (k = 0; k < ROOTS; k++)
            { int st_ = ta_backward(roots[k]); if (st_ != TA_OK) { fprintf(stderr, "backward failed: %d\n", st_); return 1; } }
        sweep[r] = (now() - t0) / ROOTS;
        t0 = now();
        for (k = 0; k < ROOTS; k++) ta_backward(leaf);
        fixed[r] = (now() - t0) / ROOTS;
        t0 = now();
        for (i = 0; i < N; i++) adj[i] = 0.0;
        adj[N - 1] = 1.0;
        for (i = N; i-- > 1;)                 /* one "node" per entry, descending */
            if (op[i] != 0xFF) adj[in[i]] += adj[i] * part[i] + 1e-9 * val[i];
        plain[r] = (now() - t0) / N;
        sink += adj[0];
    }
    printf("README expression, C only: %d roots, %.1f nodes each, medians of %d rounds\n",
           ROOTS, (double)nodes / ROOTS, ROUNDS);
    printf("  ta_backward from a root     %7.0f ns per call  %5.1f ns per node\n",
           median(sweep), median(sweep) / ((double)nodes / ROOTS));
    printf("  ta_backward from a leaf     %7.0f ns per call  (the fixed cost)\n", median(fixed));
    printf("  plain C reverse loop        %7.1f ns per entry (5 arrays, no marks, no dispatch)\n",
           median(plain));
    return sink == 12345.0;   /* keeps the loop; never true */
}
