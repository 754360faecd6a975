/* higher.c: gradients that return instead of accumulate, gradients
 * recorded as tape nodes (create_graph), Hessian-vector products,
 * Hessians and Jacobians.
 *
 * Every sweep here runs over the sub-tape behind its roots, flat in tape
 * order (ta_sub_extract, subtape.c), and keeps its adjoints in per-call
 * arrays by row, never in the tape's adj[]: leaves' .grad and
 * intermediates' adjoints are untouched.  The numeric reverse sweep is
 * the one in subtape.c (ta_sub_reverse, also the Wengert table's).
 *
 * The recording sweep (hi_emit) walks the rows down from the roots like
 * ta_backward, but each node's adjoint is a term: a constant or a node
 * that this sweep recorded; the rules in ops_higher.h record g * partial as
 * nodes and ADD accumulates.  It records as one bulk call, unsized
 * (ta_bulk_begin: the collector is held off and the node limit lifted,
 * which the emitter checks itself): the refs the rows hold must not move
 * under it (the rows are a copy: what it records is not among them).
 * Recorded nodes have no Python handle until the caller wraps the
 * returned ids (engine.handles); those not returned are garbage the next
 * collection frees.  A call that fails records nothing: ta_bulk_end rolls
 * the tape back to where it started.
 *
 * hvp = forward over reverse, numeric: one reverse sweep (adjoints and
 * each node's partials), one forward sweep of tangents from the inputs, one
 * reverse sweep of adjoint tangents using the second partials of ops_higher.h.
 * Hessian = the first sweep once, then the other two per column. */
#include <stdlib.h>
#include <string.h>
#include "ops_higher.h"
#include "subtape.h"
#include "custom.h"

/* Every row of the op table (ops.def) has its four rules, forward and
 * partials (ops.h), derivative as ops and second partials (ops_higher.h):
 * each is named here, not called, so a row without one is an undeclared
 * identifier, a compile error on every C compiler naming the missing rule
 * (a call to an undeclared function is only a warning on some compilers,
 * and the build then fails at import with an undefined symbol). */
typedef struct {
    int  (*fwd)(double, double, double *);
    void (*d)(double, double, double, double *, double *);
    void (*e)(hi_em *, hi_arg *);
    void (*d2)(double, double, double, double *, double *, double *);
} ta_rules_t;
const ta_rules_t ta_rule_table[TA_NOPS] = {
#define TA_OP(NAME, KIND, SYM, ...) { fwd_##NAME, d_##NAME, e_##NAME, d2_##NAME },
#include "ops.def"
#undef TA_OP
};

/* Validate ids. */
static int hi_check(ta_tape *T, const int64_t *ids, int n)
{
    int k, st;
    for (k = 0; k < n; k++) {
        ta_seg *s; uint32_t o;
        if ((st = ta_resolve(T, ids[k], &s, &o)) != TA_OK) return st;
    }
    return TA_OK;
}

/* The sub-tape behind roots (nr >= 1, checked; flags: ta_sub_extract's)
 * and per-row adjoints, each root's seeded with its weight (1 without w).
 * TA_OK or TA_ENOMEM (then nothing is held). */
static int hi_open(ta_tape *T, const int64_t *roots, const double *w, int nr, int flags,
                   ta_sub *S, double **adj)
{
    int k, st;
    if ((st = ta_sub_extract(T, roots, (uint32_t)nr, flags, S)) != TA_OK) return st;
    if (!(*adj = (double *)ta_calloc((size_t)S->n, sizeof **adj))) {
        ta_sub_free(S);
        return TA_ENOMEM;
    }
    for (k = 0; k < nr; k++) (*adj)[ta_sub_row(S, (uint32_t)roots[k])] += w ? w[k] : 1.0;
    return TA_OK;
}

/* ------------------------------------------------------- numeric sweep */

/* d(sum_k w_k roots_k)/d ins_j into out[j]; ids checked by the caller. */
static int hi_sweep(ta_tape *T, const int64_t *roots, const double *w, int nr,
                    const int64_t *ins, int nin, double *out)
{
    ta_sub S;
    double *adj = NULL;
    int k, st;
    if (nr > 0) {
        if ((st = hi_open(T, roots, w, nr, 0, &S, &adj)) != TA_OK) return st;
        ta_sub_reverse(&S, adj, NULL, NULL);
    }
    for (k = 0; k < nin; k++) {
        uint32_t r = nr > 0 ? ta_sub_row(&S, (uint32_t)ins[k]) : TA_NONE;
        out[k] = r != TA_NONE ? adj[r] : 0.0;
    }
    if (nr > 0) { free(adj); ta_sub_free(&S); }
    return TA_OK;
}

/* ----------------------------------------------------- recording sweep */

uint32_t hi_node(hi_em *E, int op, uint32_t x, uint32_t y, double c)
{
    ta_tape *T = E->T;
    double xv, yv = c, r;
    ta_aux aux;
    uint32_t ref;
    int st;
    if (E->st) return 0;
    xv = TA_SEGOF(T, x)->val[TA_OFF(x)];
    aux.c = c;
    if (ta_kinds[op] == TA_K_BIN) {
        yv = TA_SEGOF(T, y)->val[TA_OFF(y)];
        aux.y = y;
    }
    if ((st = ta_forward(op, xv, yv, &r)) != TA_OK) {
        T->err_op = op; T->err_x = xv; T->err_y = yv;
        E->st = st;
        return 0;
    }
    if (T->nodes >= E->limit) { E->st = TA_ELIMIT; return 0; }
    if ((st = ta_push(T, op, x, aux, r, &ref)) != TA_OK) { E->st = st; return 0; }
    return ref;
}

static uint32_t hi_leaf(hi_em *E, double v)
{
    ta_aux aux;
    uint32_t ref;
    int st;
    if (E->st) return 0;
    if (E->T->nodes >= E->limit) { E->st = TA_ELIMIT; return 0; }
    aux.c = 0.0;
    if ((st = ta_push(E->T, TA_LEAF, 0, aux, v, &ref)) != TA_OK) { E->st = st; return 0; }
    return ref;
}

static int hi_is_op_error(int st) { return st == TA_EZERODIV || st == TA_EDOMAIN || st == TA_ERANGE; }

/* Record the gradient of sum_k w_k roots_k w.r.t. every node it reaches;
 * res[j] = the term for ins[j].  Collection must be off (the callers' job). */
static int hi_emit(ta_tape *T, hi_em *E, const int64_t *roots, const double *w, int nr,
                   const int64_t *ins, int nin, hi_t *res)
{
    ta_sub S;
    double *adj = NULL;
    hi_t *g = NULL;     /* by row: the adjoint term */
    uint32_t k, x, y;
    int j, st = TA_OK;
    if (nr <= 0) {
        for (j = 0; j < nin; j++) res[j] = hi_zero;
        return TA_OK;
    }
    if ((st = hi_open(T, roots, w, nr, TA_SUB_REFS, &S, &adj)) != TA_OK) return st;
    if (!(g = (hi_t *)ta_malloc((size_t)S.n * sizeof *g))) { st = TA_ENOMEM; goto done; }
    for (k = 0; k < S.n; k++) g[k] = hi_const(adj[k]);   /* the roots' weights */
    for (k = S.n; k-- > 0;) {
        int op = S.op[k], kind = ta_kinds[op];
        hi_arg a;
        if (kind == TA_K_LEAF || kind == TA_K_NARY) continue;   /* NARY: ta_plain keeps it out */
        a.g = g[k];
        if (hi_is_zero(a.g)) continue;
        x = S.a[k]; y = S.b[k];
        a.x = S.ref[x];
        a.xv = S.v[x];
        a.r = S.ref[k];
        a.rv = S.v[k];
        a.y = 0; a.c = 0.0; a.yv = 0.0;
        if (kind == TA_K_BIN) {
            a.y = S.ref[y];
            a.yv = S.v[y];
        } else if (kind == TA_K_CST) a.c = a.yv = S.c[k];
        a.dx = a.dy = hi_zero;
        hi_rule(E, op, &a);
        if (hi_is_op_error(E->st)) {
            /* the partial is not expressible here: numeric constant */
            double dx, dy;
            E->st = TA_OK;
            ta_partials(op, a.xv, a.yv, a.rv, &dx, &dy);
            a.dx = hi_mulc(E, a.g, dx);
            a.dy = kind == TA_K_BIN ? hi_mulc(E, a.g, dy) : hi_zero;
        }
        g[x] = hi_add(E, g[x], a.dx);
        if (kind == TA_K_BIN) g[y] = hi_add(E, g[y], a.dy);
        if ((st = E->st) != TA_OK) goto done;
    }
    for (j = 0; j < nin; j++) {
        uint32_t r = ta_sub_row(&S, (uint32_t)ins[j]);
        res[j] = r != TA_NONE ? g[r] : hi_zero;
    }
done:
    free(g); free(adj);
    ta_sub_free(&S);
    return st;
}

/* ------------------------------------------------------------- public */

int ta_grad(const int64_t *outs, const double *w, int nout,
            const int64_t *ins, int nin, double *g)
{
    ta_tape *T = ta_self();
    int st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, outs, (size_t)(nout > 0 ? nout : 0), 1)) != TA_OK) return st;
    if ((st = hi_check(T, outs, nout)) != TA_OK) return st;
    if ((st = hi_check(T, ins, nin)) != TA_OK) return st;
    return hi_sweep(T, outs, w, nout, ins, nin, g);
}

int ta_grad_graph(const int64_t *outs, const double *w, int nout,
                  const int64_t *ins, int nin, int64_t *h)
{
    ta_tape *T = ta_self();
    int64_t *gids;
    hi_em E;
    ta_bulk bk;
    hi_t *res;
    int st, k;
    if (nin < 0 || !ta_held_fits(h, (size_t)nin)) return TA_EARG;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, outs, (size_t)(nout > 0 ? nout : 0), 0)) != TA_OK) return st;
    if ((st = hi_check(T, outs, nout)) != TA_OK) return st;
    if ((st = hi_check(T, ins, nin)) != TA_OK) return st;
    gids = TA_HELD_IDS(h);
    memset(gids, 0, (size_t)nin * sizeof *gids);   /* 0: no node yet (a list may be reused) */
    res = (hi_t *)ta_malloc((size_t)(nin > 0 ? nin : 1) * sizeof *res);
    if (!res) return TA_ENOMEM;
    if ((st = ta_bulk_begin(T, TA_BULK_UNSIZED, &bk)) != TA_OK) { free(res); return st; }
    E.T = T; E.limit = bk.limit; E.st = TA_OK;   /* the emitter checks the limit (bulk lifted it) */
    st = hi_emit(T, &E, outs, w, nout, ins, nin, res);
    /* constant gradients become leaves, so every result is a node */
    for (k = 0; st == TA_OK && k < nin; k++)
        if (!res[k].node) { res[k] = hi_node_t(hi_leaf(&E, res[k].c)); st = E.st; }
    if (st == TA_OK) {
        for (k = 0; k < nin; k++) gids[k] = TA_ID(T, res[k].ref);   /* ids only here, for Python */
        ta_held_take(T, h, (size_t)nin);
    }
    ta_bulk_end(T, &bk, st != TA_OK);          /* a failed call records nothing */
    free(res);
    return st;
}

/* ------------------------------------------- forward over reverse */

/* Per row: the adjoint, the partials px, py, the tangent t, the adjoint
 * tangent at, and whether the row is an input (tangent seeded). */
typedef struct {
    ta_sub   S;
    double  *adj, *px, *py, *t, *at;
    uint8_t *in;
} hi_for;

static void hi_for_free(hi_for *F)
{
    free(F->adj); free(F->px); free(F->py); free(F->t); free(F->at); free(F->in);
    ta_sub_free(&F->S);
}

/* Pass A: the reverse sweep from out (adjoints), keeping each row's
 * partials.  TA_OK or TA_ENOMEM (then F holds nothing). */
static int hi_for_setup(ta_tape *T, hi_for *F, int64_t out)
{
    size_t n;
    int st;
    F->px = F->py = F->t = F->at = NULL; F->in = NULL;
    if ((st = hi_open(T, &out, NULL, 1, 0, &F->S, &F->adj)) != TA_OK) return st;
    n = (size_t)F->S.n;
    F->px = (double *)ta_malloc(n * sizeof *F->px); F->py = (double *)ta_malloc(n * sizeof *F->py);
    F->t = (double *)ta_malloc(n * sizeof *F->t); F->at = (double *)ta_malloc(n * sizeof *F->at);
    F->in = (uint8_t *)ta_calloc(n, 1);
    if (!F->px || !F->py || !F->t || !F->at || !F->in) { hi_for_free(F); return TA_ENOMEM; }
    ta_sub_reverse(&F->S, F->adj, F->px, F->py);
    return TA_OK;
}

/* Passes B and C for one direction v: tangents forward from the inputs,
 * then adjoint tangents back; hv[j] = (H v)_j.  Needs hi_for_setup. */
static void hi_for_column(hi_for *F, const int64_t *ins, int nin, const double *v, double *hv)
{
    const ta_sub *S = &F->S;
    double *t = F->t, *at = F->at;
    uint32_t k, r;
    int j;
    for (j = 0; j < nin; j++)
        if ((r = ta_sub_row(S, (uint32_t)ins[j])) != TA_NONE) { F->in[r] = 1; t[r] = 0.0; }
    for (j = 0; j < nin; j++)
        if ((r = ta_sub_row(S, (uint32_t)ins[j])) != TA_NONE) t[r] += v[j];
    /* B: tangents, oldest first */
    for (k = 0; k < S->n; k++) {
        int kind;
        double tk;
        at[k] = 0.0;
        if (F->in[k]) continue;
        kind = ta_kinds[S->op[k]];
        tk = 0.0;
        if (kind != TA_K_LEAF) {
            tk = ta_tmul(F->px[k], t[S->a[k]]);
            if (kind == TA_K_BIN) tk += ta_tmul(F->py[k], t[S->b[k]]);
        }
        t[k] = tk;
    }
    /* C: adjoint tangents, newest first */
    for (k = S->n; k-- > 0;) {
        int op = S->op[k], kind = ta_kinds[op];
        double a, atk, xv, yv, xx, xy, yy, tx, ty = 0.0, cx, cy = 0.0;
        uint32_t x = S->a[k], y = S->b[k];
        if (kind == TA_K_LEAF) continue;
        a = F->adj[k]; atk = at[k];
        xv = S->v[x];
        tx = t[x];
        yv = 0.0;
        if (kind == TA_K_BIN) {
            yv = S->v[y];
            ty = t[y];
        } else if (kind == TA_K_CST) yv = S->c[k];
        /* tangent products go through ta_tmul: an exact zero factor adds nothing */
        cx = ta_tmul(F->px[k], atk);
        if (kind == TA_K_BIN) cy = ta_tmul(F->py[k], atk);
        if (a != 0.0) {     /* as create_graph: a zero adjoint records nothing */
            hi_partials2(op, xv, yv, S->v[k], &xx, &xy, &yy);
            cx += ta_tmul(a, kind == TA_K_BIN ? ta_tmul(xx, tx) + ta_tmul(xy, ty) : ta_tmul(xx, tx));
            if (kind == TA_K_BIN) cy += ta_tmul(a, ta_tmul(xy, tx) + ta_tmul(yy, ty));
        }
        at[x] += cx;
        if (kind == TA_K_BIN) at[y] += cy;
    }
    for (j = 0; j < nin; j++)
        hv[j] = (r = ta_sub_row(S, (uint32_t)ins[j])) != TA_NONE ? at[r] : 0.0;
}

int ta_hvp(int64_t out, const int64_t *ins, int nin, const double *v, double *hv)
{
    ta_tape *T = ta_self();
    hi_for F;
    int st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, &out, 1, 0)) != TA_OK) return st;
    if ((st = hi_check(T, &out, 1)) != TA_OK) return st;
    if ((st = hi_check(T, ins, nin)) != TA_OK) return st;
    if ((st = hi_for_setup(T, &F, out)) != TA_OK) return st;
    hi_for_column(&F, ins, nin, v, hv);
    hi_for_free(&F);
    return TA_OK;
}

/* n forward-over-reverse columns over one adjoint sweep: column k is
 * hvp(e_k), so H v is hvp(v).  Column k is computed into row k, then each
 * pair of entries (j, k), (k, j) is made exactly symmetric (their mean:
 * the two agree to rounding) where both are finite.  Where one is not,
 * the derivative is undefined one way (a zero tangent skips a branch whose
 * reverse partial is nan or inf, e.g. x * (-1)**(y - y)) and each entry
 * stays its own column's, as hvp gives it. */
int ta_hessian(int64_t out, const int64_t *ins, int nin, double *H)
{
    ta_tape *T = ta_self();
    hi_for F;
    double *e;
    int st, k;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, &out, 1, 0)) != TA_OK) return st;
    if ((st = hi_check(T, &out, 1)) != TA_OK) return st;
    if ((st = hi_check(T, ins, nin)) != TA_OK) return st;
    if (nin <= 0) return TA_OK;
    if (!(e = (double *)ta_calloc((size_t)nin, sizeof *e))) return TA_ENOMEM;
    if ((st = hi_for_setup(T, &F, out)) != TA_OK) { free(e); return st; }
    for (k = 0; k < nin; k++) {
        e[k] = 1.0;
        hi_for_column(&F, ins, nin, e, H + (size_t)k * nin);
        e[k] = 0.0;
    }
    for (k = 0; k < nin; k++) {
        int j;
        for (j = 0; j < k; j++) {
            double *a = &H[(size_t)k * nin + j], *b = &H[(size_t)j * nin + k];
            double ca = *a, cb = *b;       /* hvp(e_k)[j], entry (j, k); hvp(e_j)[k], (k, j) */
            if (isfinite(ca) && isfinite(cb)) *a = *b = 0.5 * (ca + cb);
            else { *a = cb; *b = ca; }     /* from rows to columns */
        }
    }
    hi_for_free(&F);
    free(e);
    return TA_OK;
}

int ta_jacobian(const int64_t *outs, int nout, const int64_t *ins, int nin, double *J)
{
    ta_tape *T = ta_self();
    int st = TA_OK, k;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, outs, (size_t)(nout > 0 ? nout : 0), 1)) != TA_OK) return st;
    if ((st = hi_check(T, outs, nout)) != TA_OK) return st;
    if ((st = hi_check(T, ins, nin)) != TA_OK) return st;
    for (k = 0; st == TA_OK && k < nout; k++)
        st = hi_sweep(T, &outs[k], NULL, 1, ins, nin, J + (size_t)k * nin);
    return st;
}
