/* optim.c: optimizer steps over many parameters in one call.
 *
 * Every function first resolves all ids (so a bad id changes nothing),
 * then updates val[] from adj[] in place.  Optimizer state (momentum, Adam
 * moments) lives in caller-owned arrays, one double per parameter. */
#include <math.h>
#include <stdlib.h>
#include "tapead.h"
#include "ops.h"

/* Resolve ids into (segment, offset) pairs; TA_OK or the first failure.
 * No_grad values resolve too: these calls read and write data and grads,
 * which such values have (as .data and .grad), not graphs. */
static int ta_resolve_all(ta_tape *T, const int64_t *ids, size_t n, ta_seg **segs, uint32_t *offs)
{
    size_t i;
    int ng;
    for (i = 0; i < n; i++) {
        int st = ta_resolve_any(T, ids[i], &segs[i], &offs[i], &ng);
        if (st != TA_OK) return st;
    }
    return TA_OK;
}

/* Scratch for resolved locations; NULL on allocation failure. */
static int ta_locate(const int64_t *ids, size_t n, ta_seg ***segs, uint32_t **offs)
{
    ta_tape *T = ta_self();
    int st;
    if (!T) return TA_ENOMEM;
    *segs = (ta_seg **)ta_malloc((n ? n : 1) * sizeof **segs);
    *offs = (uint32_t *)ta_malloc((n ? n : 1) * sizeof **offs);
    if (!*segs || !*offs) { free(*segs); free(*offs); return TA_ENOMEM; }
    st = ta_resolve_all(T, ids, n, *segs, *offs);
    if (st != TA_OK) { free(*segs); free(*offs); }
    return st;
}

int ta_fill_adj(const int64_t *ids, size_t n, double x)
{
    ta_seg **s; uint32_t *o; size_t i;
    int st = ta_locate(ids, n, &s, &o);
    if (st != TA_OK) return st;
    for (i = 0; i < n; i++) s[i]->adj[o[i]] = x;
    free(s); free(o);
    return TA_OK;
}

int ta_gather(const int64_t *ids, size_t n, int what, double *out)
{
    ta_seg **s; uint32_t *o; size_t i;
    int st = ta_locate(ids, n, &s, &o);
    if (st != TA_OK) return st;
    for (i = 0; i < n; i++) out[i] = what ? s[i]->adj[o[i]] : s[i]->val[o[i]];
    free(s); free(o);
    return TA_OK;
}

int ta_scatter(const int64_t *ids, size_t n, int what, const double *in)
{
    ta_seg **s; uint32_t *o; size_t i;
    int st = ta_locate(ids, n, &s, &o);
    if (st != TA_OK) return st;
    for (i = 0; i < n; i++) {
        if (what == 2) s[i]->adj[o[i]] += in[i];
        else if (what) s[i]->adj[o[i]] = in[i];
        else s[i]->val[o[i]] = in[i];
    }
    free(s); free(o);
    return TA_OK;
}

/* PyTorch's SGD: g = grad + wd p; buf = momentum buf + g (buf = g at t=1); p -= lr buf */
int ta_sgd_step(const int64_t *ids, size_t n, double lr, double momentum, double wd,
                double *buf, int first)
{
    ta_seg **s; uint32_t *o; size_t i;
    int st = ta_locate(ids, n, &s, &o);
    if (st != TA_OK) return st;
    for (i = 0; i < n; i++) {
        double *p = &s[i]->val[o[i]];
        double g = s[i]->adj[o[i]];
        if (wd != 0.0) g += wd * *p;
        if (momentum != 0.0) {
            buf[i] = first ? g : momentum * buf[i] + g;
            g = buf[i];
        }
        *p -= lr * g;
    }
    free(s); free(o);
    return TA_OK;
}

/* Adam with bias-corrected moments, spelled as Karpathy's microgpt spells
 * it in Python floats, so the two agree to the bit (PyTorch's rule is the
 * same number in exact arithmetic: tests/test_optim.py checks both):
 *     m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g**2
 *     p -= lr * (m / (1 - b1**t)) / ((v / (1 - b2**t))**0.5 + eps)
 * x**0.5 is libm's pow, as Python's float ** float is (pow_half: without
 * the call where that is certainly sqrt(x)); g**2 is what the
 * caller's interpreter computes for it: libm's pow on CPython (pow_sq:
 * without the call where that is certainly g*g), g*g on PyPy (sq_mul).
 * L2 weight decay, when asked, is added to the gradient first (PyTorch's). */
int ta_adam_step(const int64_t *ids, size_t n, double lr, double b1, double b2, double eps,
                 double wd, int64_t t, double *m, double *v, int sq_mul)
{
    ta_seg **s; uint32_t *o; size_t i;
    double c1, c2;
    int st;
    if (t < 1) return TA_EDOMAIN;
    st = ta_locate(ids, n, &s, &o);
    if (st != TA_OK) return st;
    c1 = 1.0 - pow(b1, (double)t);
    c2 = 1.0 - pow(b2, (double)t);
    for (i = 0; i < n; i++) {
        double *p = &s[i]->val[o[i]];
        double g = s[i]->adj[o[i]];
        if (wd != 0.0) g += wd * *p;
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * (sq_mul ? g * g : pow_sq(g));
        *p -= lr * (m[i] / c1) / (pow_half(v[i] / c2) + eps);
    }
    free(s); free(o);
    return TA_OK;
}
