/* fa_ref.c: a hand-written C tape interpreter of the "Fastest Autograd in
 * the West" workload (arogozhnikov, 2023), the reference bench_native.py
 * times a tapead Program of the same graph against; not part of the library.
 *
 * The graph: 100 inputs, then n_ops ops cycling softplus(v[-10]), the sum
 * v[-30] + v[-25] + v[-20] + v[-15], the product v[-20] * v[-10], and a
 * softmax of v[-4:] (4 outputs, shifted by their maximum); the last node's
 * gradient with respect to the inputs.  Its tape is one entry per op (a
 * softmax is one entry of 4 outputs), run one row at a time: forward, then
 * reverse, in doubles with libm, as a careful hand-written engine would.
 *
 *   fa_run(n_ops, B, X, Y, G): rows X (B x 100) -> last node Y (B), its
 *   gradient G (B x 100).  Returns 0, or -1 if memory ran out. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { SPLUS, SUM4, PROD, SMAX4 };
typedef struct { int op; int32_t in[4]; int32_t out; } fa_op;   /* outputs: out .. out + 3 */

int fa_run(int n_ops, int64_t B, const double *X, double *Y, double *G)
{
    int64_t r;
    int n = 100, k, i;
    fa_op *ops = (fa_op *)malloc((size_t)n_ops * sizeof *ops);
    double *v = (double *)malloc(((size_t)100 + 4 * (size_t)n_ops) * sizeof *v);
    double *g = (double *)malloc(((size_t)100 + 4 * (size_t)n_ops) * sizeof *g);
    if (!ops || !v || !g) { free(ops); free(v); free(g); return -1; }
    for (k = 0; k < n_ops; k++) {          /* the tape: node indices of each op */
        fa_op *o = &ops[k];
        o->op = k % 4; o->out = n;
        switch (o->op) {
        case SPLUS: o->in[0] = n - 10; n += 1; break;
        case SUM4: for (i = 0; i < 4; i++) o->in[i] = n - 30 + 5 * i; n += 1; break;
        case PROD: o->in[0] = n - 20; o->in[1] = n - 10; n += 1; break;
        default: for (i = 0; i < 4; i++) o->in[i] = n - 4 + i; n += 4; break;
        }
    }
    for (r = 0; r < B; r++) {
        memcpy(v, X + r * 100, 100 * sizeof *v);
        for (k = 0; k < n_ops; k++) {
            const fa_op *o = &ops[k];
            switch (o->op) {
            case SPLUS: v[o->out] = log1p(exp(v[o->in[0]])); break;
            case SUM4: v[o->out] = v[o->in[0]] + v[o->in[1]] + v[o->in[2]] + v[o->in[3]]; break;
            case PROD: v[o->out] = v[o->in[0]] * v[o->in[1]]; break;
            default: {
                double m = v[o->in[0]], e[4], s = 0.0;
                for (i = 1; i < 4; i++) if (v[o->in[i]] > m) m = v[o->in[i]];
                for (i = 0; i < 4; i++) { e[i] = exp(v[o->in[i]] - m); s += e[i]; }
                for (i = 0; i < 4; i++) v[o->out + i] = e[i] / s;
            }
            }
        }
        memset(g, 0, (size_t)n * sizeof *g);
        g[n - 1] = 1.0;
        for (k = n_ops; k-- > 0;) {
            const fa_op *o = &ops[k];
            switch (o->op) {
            case SPLUS: { double e = exp(v[o->in[0]]); g[o->in[0]] += g[o->out] * e / (1.0 + e); break; }
            case SUM4: for (i = 0; i < 4; i++) g[o->in[i]] += g[o->out]; break;
            case PROD:
                g[o->in[0]] += v[o->in[1]] * g[o->out];
                g[o->in[1]] += v[o->in[0]] * g[o->out];
                break;
            default: {
                double avg = 0.0;
                for (i = 0; i < 4; i++) avg += v[o->out + i] * g[o->out + i];
                for (i = 0; i < 4; i++) g[o->in[i]] += v[o->out + i] * (g[o->out + i] - avg);
            }
            }
        }
        Y[r] = v[n - 1];
        memcpy(G + r * 100, g, 100 * sizeof *g);
    }
    free(ops); free(v); free(g);
    return 0;
}
