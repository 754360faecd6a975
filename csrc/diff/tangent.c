/* tangent.c: forward (tangent) mode and the Wengert-list export.
 *
 * Both work on the sub-tape behind one root, flat in tape order
 * (ta_sub_extract, subtape.c): rows 0..n-1, the root last.  Tangents and
 * adjoints are then plain loops over the rows into per-call buffers:
 * neither touches the nodes' val[] or adj[], so a jvp or a table never
 * changes any Value's data or grad.  Every failure (bad id, allocation)
 * happens before the extraction or leaves no mark (the extraction clears
 * its own), so a failed call changes nothing. */
#include <stdlib.h>
#include "subtape.h"
#include "custom.h"

/* Resolve the root and take its sub-tape (flags: ta_sub_extract's).  On
 * failure S holds nothing. */
static int ta_sub_open(ta_tape *T, ta_sub *S, int64_t root, int flags)
{
    ta_seg *s; uint32_t o;
    int st;
    if ((st = ta_plain(T, &root, 1, 0)) != TA_OK) return st;
    if ((st = ta_resolve(T, root, &s, &o)) != TA_OK) return st;
    return ta_sub_extract(T, &root, 1, flags, S);
}

/* Check every seed id before anything is marked. */
static int ta_check_seeds(ta_tape *T, int nin, const int64_t *inputs)
{
    int j, st;
    ta_seg *s; uint32_t o;
    if (nin < 0) return TA_EBADID;
    for (j = 0; j < nin; j++)
        if ((st = ta_resolve(T, inputs[j], &s, &o)) != TA_OK) return st;
    return TA_OK;
}

/* Add the seeds of inputs in the sub-tape into tdot (by row); others
 * reach nothing. */
static void ta_seed(const ta_sub *S, int nin, const int64_t *inputs,
                    const double *tangents, double *tdot)
{
    int j;
    for (j = 0; j < nin; j++) {
        uint32_t k = ta_sub_row(S, (uint32_t)inputs[j]);
        if (k != TA_NONE) tdot[k] += tangents[j];
    }
}

/* One ascending tangent sweep: tdot[k] += dx tdot[a] + dy tdot[b]
 * (an exact zero factor adds nothing: ta_tmul).  A row whose inputs'
 * tangents are all zero would add +0.0, which changes no tdot (none is
 * -0.0: seeds are added to +0.0), so its partials are not computed. */
static void ta_tangent_sweep(const ta_sub *S, double *tdot)
{
    const uint8_t *op = S->op;
    const uint32_t *a = S->a, *b = S->b;
    const double *c = S->c, *v = S->v;
    uint32_t k, n = S->n;
    for (k = 0; k < n; k++) {
        int kind = ta_kinds[op[k]];
        double dx, dy, tx, ty = 0.0, t;
        if (kind == TA_K_LEAF || kind == TA_K_NARY) continue;   /* NARY: ta_plain keeps it out */
        tx = tdot[a[k]];
        if (kind == TA_K_BIN) ty = tdot[b[k]];
        if (tx == 0.0 && ty == 0.0) continue;
        ta_row_partials(op[k], a, b, c, v, k, &dx, &dy);
        t = ta_tmul(dx, tx);
        if (kind == TA_K_BIN) t += ta_tmul(dy, ty);
        tdot[k] += t;
    }
}

int ta_jvp(int64_t root, int nin, const int64_t *inputs, const double *tangents, double *out)
{
    ta_sub S;
    double *tdot;
    int st;
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    if ((st = ta_check_seeds(T, nin, inputs)) != TA_OK) return st;
    if ((st = ta_sub_open(T, &S, root, 0)) != TA_OK) return st;
    tdot = (double *)ta_calloc(S.n, sizeof *tdot);
    if (!tdot) { ta_sub_free(&S); return TA_ENOMEM; }
    ta_seed(&S, nin, inputs, tangents, tdot);
    ta_tangent_sweep(&S, tdot);
    *out = tdot[S.n - 1];   /* the root is the last row */
    free(tdot);
    ta_sub_free(&S);
    return TA_OK;
}

int64_t ta_trace(int64_t root, int64_t cap, int nin, const int64_t *inputs,
                 const double *tangents, ta_rows_t *out)
{
    ta_sub S;
    ta_tape *T = ta_self();
    uint32_t k;
    int64_t n;
    int st;
    if (!T) return TA_ENOMEM;
    if (out && out->tan && (st = ta_check_seeds(T, nin, inputs)) != TA_OK) return st;
    if ((st = ta_sub_open(T, &S, root, TA_SUB_REFS)) != TA_OK) return st;
    n = S.n;
    if (!out || n > cap) {     /* just report the size */
        ta_sub_free(&S);
        return n;
    }
    for (k = 0; k < S.n; k++) {
        int op = S.op[k], kind = ta_kinds[op];
        out->op[k] = op;
        out->id[k] = TA_ID(T, S.ref[k]);
        out->val[k] = S.v[k];
        out->x[k] = kind == TA_K_LEAF ? -1 : (int64_t)S.a[k];
        out->y[k] = kind == TA_K_BIN ? (int64_t)S.b[k] : -1;
        out->c[k] = ta_sub_c(&S, k);
    }
    if (out->tan) {
        for (k = 0; k < S.n; k++) out->tan[k] = 0.0;
        ta_seed(&S, nin, inputs, tangents, out->tan);
        ta_tangent_sweep(&S, out->tan);
    }
    if (out->adj) {   /* a reverse sweep over the rows, into out->adj only */
        for (k = 0; k < S.n; k++) out->adj[k] = 0.0;
        out->adj[S.n - 1] = 1.0;
        ta_sub_reverse(&S, out->adj, NULL, NULL);
    }
    ta_sub_free(&S);
    return n;
}
