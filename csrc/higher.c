/* higher.c: gradients that return instead of accumulate, gradients
 * recorded as tape nodes (create_graph), Hessian-vector products,
 * Hessians and Jacobians.
 *
 * Every sweep here keeps its adjoints in a scratch buffer of its own (one
 * lazily allocated block per tape segment it reaches, indexed by the
 * segment's position in T->order), never in the tape's adj[] and never in
 * the op bytes: leaves' .grad and intermediates' adjoints are untouched.
 * A block entry belongs to the current sweep when its epoch matches, so
 * one buffer serves many sweeps (a Hessian, a Jacobian) without clearing.
 *
 * The recording sweep (hi_emit) walks the tape down from the roots like
 * ta_backward, but each node's adjoint is a term: a constant or a node
 * that this sweep recorded; the rules in higher.h record g * partial as
 * nodes and ADD accumulates.  Collection is off while it records (gc_at
 * and the node limit are saved and restored): positions and refs must not
 * move under it.  Recorded nodes have no Python handle until the caller
 * wraps the returned ids (engine.handles); those not returned are garbage
 * the next collection frees.  A call that fails records nothing: the tape
 * is rolled back to where it started (ta_rollback).
 *
 * hvp = forward over reverse, numeric: one reverse sweep (adjoints and
 * each node's partials), one forward sweep of tangents from the inputs, one
 * reverse sweep of adjoint tangents using the second partials of higher.h.
 * Hessian = the first sweep once, then the other two per column. */
#include <stdlib.h>
#include <string.h>
#include "higher.h"

/* Every row of the op table (ops.def) has its four rules, forward and
 * partials (ops.h), derivative as ops and second partials (higher.h):
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

/* -------------------------------------------------------------- scratch */

typedef struct {
    uint32_t ep[TA_SEG];     /* == sweep epoch: entry belongs to this sweep */
    double   adj[TA_SEG];    /* numeric adjoint, or the constant of a term   */
    int64_t  gid[TA_SEG];    /* node of a term (0: the term is constant)     */
    double  *ext;            /* hvp only: HI_EXT doubles per node (below)    */
} hi_blk;

/* forward-over-reverse per node: partials px, py, tangent t, adjoint
 * tangent at, and whether the node is an input (tangent seeded) */
enum { HI_PX, HI_PY, HI_T, HI_AT, HI_IN, HI_EXT };
#define HI_X(b, o, f) ((b)->ext[(size_t)(o) * HI_EXT + (f)])

typedef struct {
    ta_tape *T;
    hi_blk **b;              /* by segment position; NULL = not reached      */
    uint32_t nb;
    uint32_t ep;
} hi_scr;

static void hi_scr_free(hi_scr *S)
{
    uint32_t k;
    for (k = 0; k < S->nb; k++) if (S->b[k]) { free(S->b[k]->ext); free(S->b[k]); }
    free(S->b);
    S->b = NULL; S->nb = 0;
}

static hi_blk *hi_blk_at(hi_scr *S, uint32_t pos)
{
    if (pos >= S->nb) {
        uint32_t nb = S->T->norder > pos ? S->T->norder : pos + 1u;
        hi_blk **p = (hi_blk **)ta_realloc(S->b, nb * sizeof *p);
        if (!p) return NULL;
        memset(p + S->nb, 0, (nb - S->nb) * sizeof *p);
        S->b = p; S->nb = nb;
    }
    if (!S->b[pos]) S->b[pos] = (hi_blk *)ta_calloc(1, sizeof(hi_blk));
    return S->b[pos];
}

static void hi_next_epoch(hi_scr *S)
{
    if (++S->ep == 0) {      /* wrapped: forget every old entry */
        uint32_t k;
        for (k = 0; k < S->nb; k++) if (S->b[k]) memset(S->b[k]->ep, 0, sizeof S->b[k]->ep);
        S->ep = 1;
    }
}

/* First arrival at (s, o) in this sweep: zero its entry, count it pending. */
static int hi_reach(hi_scr *S, ta_seg *s, uint32_t o, uint64_t *pending, hi_blk **out)
{
    hi_blk *b = hi_blk_at(S, s->pos);
    if (!b) return TA_ENOMEM;
    if (b->ep[o] != S->ep) { b->ep[o] = S->ep; b->adj[o] = 0.0; b->gid[o] = 0; ++*pending; }
    *out = b;
    return TA_OK;
}

/* Push adjoint g of a node through its local partials L into its inputs'
 * adjoints (reaching them first). */
static int hi_push(hi_scr *S, double g, const ta_local *L, uint64_t *pending)
{
    ta_tape *T = S->T;
    hi_blk *bx;
    int st;
    if ((st = hi_reach(S, TA_SEGOF(T, L->xr), TA_OFF(L->xr), pending, &bx)) != TA_OK) return st;
    bx->adj[TA_OFF(L->xr)] += L->dx * g;
    if (L->kind == TA_K_BIN) {
        if ((st = hi_reach(S, TA_SEGOF(T, L->yr), TA_OFF(L->yr), pending, &bx)) != TA_OK) return st;
        bx->adj[TA_OFF(L->yr)] += L->dy * g;
    }
    return TA_OK;
}

/* Validate ids; hipos, hioff = the newest of them (the sweep's start). */
static int hi_check(ta_tape *T, const int64_t *ids, int n, uint32_t *hipos, uint32_t *hioff)
{
    int k, st;
    for (k = 0; k < n; k++) {
        ta_seg *s; uint32_t o;
        if ((st = ta_resolve(T, ids[k], &s, &o)) != TA_OK) return st;
        if (hipos && (k == 0 || s->pos > *hipos || (s->pos == *hipos && o > *hioff))) {
            *hipos = s->pos; *hioff = o;
        }
    }
    return TA_OK;
}

/* This sweep's entry of node id, or NULL if the sweep did not reach it. */
static hi_blk *hi_entry(hi_scr *S, int64_t id, uint32_t *o)
{
    ta_seg *s;
    hi_blk *b;
    if (ta_resolve(S->T, id, &s, o) != TA_OK || s->pos >= S->nb) return NULL;
    b = S->b[s->pos];
    return (b && b->ep[*o] == S->ep) ? b : NULL;
}

/* ------------------------------------------------------- numeric sweep */

/* The descending pass of both numeric sweeps: from node (hipos, hioff)
 * down, each node this epoch reached pushes its adjoint to its inputs,
 * until `pending` reached nodes are done.  With lowpos (forward over
 * reverse), each node's partials are also kept in its block's ext, and
 * *lowpos gets the oldest segment reached. */
static int hi_reverse(hi_scr *S, uint32_t hipos, uint32_t hioff, uint64_t pending, uint32_t *lowpos)
{
    ta_tape *T = S->T;
    uint32_t p;
    int st;
    for (p = hipos + 1; p-- > 0 && pending;) {
        ta_seg *s = T->segs[T->order[p]];
        hi_blk *b = p < S->nb ? S->b[p] : NULL;
        uint32_t i = (p == hipos) ? hioff + 1 : s->n;
        if (!b) continue;
        if (lowpos) {
            *lowpos = p;
            if (!b->ext && !(b->ext = (double *)ta_malloc((size_t)TA_SEG * HI_EXT * sizeof(double))))
                return TA_ENOMEM;
        }
        while (i-- > 0) {
            ta_local L;
            if (b->ep[i] != S->ep) continue;
            --pending;
            ta_local_at(T, s, i, &L);
            if (L.kind != TA_K_LEAF && (st = hi_push(S, b->adj[i], &L, &pending)) != TA_OK)
                return st;
            if (lowpos) { HI_X(b, i, HI_PX) = L.dx; HI_X(b, i, HI_PY) = L.dy; HI_X(b, i, HI_IN) = 0.0; }
            if (!pending) break;
        }
    }
    return TA_OK;
}

/* d(sum_k w_k roots_k)/d ins_j into out[j], in S's buffer; ids checked by
 * the caller.  Roots with a zero id are skipped (constant gradients). */
static int hi_sweep(hi_scr *S, const int64_t *roots, const double *w, int nr,
                    const int64_t *ins, int nin, double *out)
{
    ta_tape *T = S->T;
    uint64_t pending = 0;
    uint32_t hipos = 0, hioff = 0;
    int k, st, any = 0;
    hi_next_epoch(S);
    for (k = 0; k < nr; k++) {
        ta_seg *s; uint32_t o; hi_blk *b;
        if (!roots[k]) continue;
        ta_resolve(T, roots[k], &s, &o);
        if ((st = hi_reach(S, s, o, &pending, &b)) != TA_OK) return st;
        b->adj[o] += w ? w[k] : 1.0;
        if (!any || s->pos > hipos || (s->pos == hipos && o > hioff)) { hipos = s->pos; hioff = o; }
        any = 1;
    }
    if (any && (st = hi_reverse(S, hipos, hioff, pending, NULL)) != TA_OK) return st;
    for (k = 0; k < nin; k++) {
        uint32_t o;
        hi_blk *b = hi_entry(S, ins[k], &o);
        out[k] = b ? b->adj[o] : 0.0;
    }
    return TA_OK;
}

/* ----------------------------------------------------- recording sweep */

int64_t hi_node(hi_em *E, int op, int64_t x, int64_t y, double c)
{
    ta_tape *T = E->T;
    ta_seg *s;
    uint32_t o;
    double xv, yv = c, r;
    ta_aux aux;
    int64_t id;
    int st;
    if (E->st) return 0;
    ta_resolve(T, x, &s, &o);
    xv = s->val[o];
    aux.c = c;
    if (ta_kinds[op] == TA_K_BIN) {
        ta_resolve(T, y, &s, &o);
        yv = s->val[o];
        aux.y = (uint32_t)y;
    }
    if ((st = ta_forward(op, xv, yv, &r)) != TA_OK) {
        T->err_op = op; T->err_x = xv; T->err_y = yv;
        E->st = st;
        return 0;
    }
    if (T->nodes >= E->limit) { E->st = TA_ELIMIT; return 0; }
    id = ta_append(T, op, (uint32_t)x, aux, r);
    if (id < 0) { E->st = (int)id; return 0; }
    return id;
}

static int64_t hi_leaf(hi_em *E, double v)
{
    ta_aux aux;
    int64_t id;
    if (E->st) return 0;
    if (E->T->nodes >= E->limit) { E->st = TA_ELIMIT; return 0; }
    aux.c = 0.0;
    id = ta_append(E->T, TA_LEAF, 0, aux, v);
    if (id < 0) { E->st = (int)id; return 0; }
    return id;
}

static int hi_is_op_error(int st) { return st == TA_EZERODIV || st == TA_EDOMAIN || st == TA_ERANGE; }

/* Add term t to the adjoint entry (b, o). */
static void hi_accum(hi_em *E, hi_blk *b, uint32_t o, hi_t t)
{
    hi_t cur;
    cur.id = b->gid[o]; cur.c = cur.id ? 0.0 : b->adj[o];
    cur = hi_add(E, cur, t);
    b->gid[o] = cur.id; b->adj[o] = cur.id ? 0.0 : cur.c;
}

/* Record the gradient of sum_k w_k roots_k w.r.t. every node it reaches;
 * gids[j] (or gcs[j] when gids[j] == 0) = the term for ins[j].  Collection
 * must be off (the callers' job). */
static int hi_emit(hi_scr *S, hi_em *E, const int64_t *roots, const double *w, int nr,
                   const int64_t *ins, int nin, int64_t *gids, double *gcs)
{
    ta_tape *T = S->T;
    uint64_t pending = 0;
    uint32_t hipos = 0, hioff = 0, p;
    int k, st;
    hi_next_epoch(S);
    for (k = 0; k < nr; k++) {
        ta_seg *s; uint32_t o; hi_blk *b;
        ta_resolve(T, roots[k], &s, &o);
        if ((st = hi_reach(S, s, o, &pending, &b)) != TA_OK) return st;
        b->adj[o] += w ? w[k] : 1.0;
        if (k == 0 || s->pos > hipos || (s->pos == hipos && o > hioff)) { hipos = s->pos; hioff = o; }
    }
    /* the segment at hipos may be T->cur and grow as we record: start below
     * hioff + 1, and read every other bound before recording can touch it */
    for (p = hipos + 1; nr > 0 && p-- > 0 && pending;) {
        ta_seg *s = T->segs[T->order[p]];
        hi_blk *b = p < S->nb ? S->b[p] : NULL;
        uint32_t i = (p == hipos) ? hioff + 1 : s->n;
        if (!b) continue;
        while (i-- > 0) {
            int op, kind;
            hi_arg a;
            uint32_t xr, yr = 0;
            hi_blk *bx, *by = NULL;
            if (b->ep[i] != S->ep) continue;
            --pending;
            op = s->op[i] & TA_OPMASK;
            kind = ta_kinds[op];
            if (kind == TA_K_LEAF) { if (!pending) break; continue; }
            a.g.id = b->gid[i]; a.g.c = a.g.id ? 0.0 : b->adj[i];
            xr = s->x[i];
            a.x = (int64_t)((T->tag << 32) | xr);
            a.xv = TA_SEGOF(T, xr)->val[TA_OFF(xr)];
            a.r = (int64_t)((T->tag << 32) | TA_REF(s, i));
            a.rv = s->val[i];
            a.y = 0; a.c = 0.0; a.yv = 0.0;
            if (kind == TA_K_BIN) {
                yr = s->aux[i].y;
                a.y = (int64_t)((T->tag << 32) | yr);
                a.yv = TA_SEGOF(T, yr)->val[TA_OFF(yr)];
            } else if (kind == TA_K_CST) a.c = a.yv = s->aux[i].c;
            if ((st = hi_reach(S, TA_SEGOF(T, xr), TA_OFF(xr), &pending, &bx)) != TA_OK) return st;
            if (kind == TA_K_BIN &&
                (st = hi_reach(S, TA_SEGOF(T, yr), TA_OFF(yr), &pending, &by)) != TA_OK) return st;
            a.dx = a.dy = hi_zero;
            if (!hi_is_zero(a.g)) {
                hi_rule(E, op, &a);
                if (hi_is_op_error(E->st)) {
                    /* the partial is not expressible here: numeric constant */
                    double dx, dy;
                    E->st = TA_OK;
                    ta_partials(op, a.xv, a.yv, a.rv, &dx, &dy);
                    a.dx = hi_mulc(E, a.g, dx);
                    a.dy = kind == TA_K_BIN ? hi_mulc(E, a.g, dy) : hi_zero;
                }
                hi_accum(E, bx, TA_OFF(xr), a.dx);
                if (kind == TA_K_BIN) hi_accum(E, by, TA_OFF(yr), a.dy);
                if (E->st) return E->st;
            }
            if (!pending) break;
        }
    }
    for (k = 0; k < nin; k++) {
        uint32_t o;
        hi_blk *b = hi_entry(S, ins[k], &o);
        gids[k] = b ? b->gid[o] : 0;
        gcs[k] = (b && !gids[k]) ? b->adj[o] : 0.0;
    }
    return TA_OK;
}

/* Collection off while recording (gc would clear and move what we hold). */
typedef struct { uint32_t gc_at; uint64_t limit; } hi_saved;
static hi_saved hi_gc_off(ta_tape *T, hi_em *E)
{
    hi_saved sv;
    if (T->norder >= T->gc_at) ta_gc(T);   /* due: a loop of these calls must still reclaim */
    sv.gc_at = T->gc_at; sv.limit = T->limit;
    T->gc_at = UINT32_MAX; T->limit = UINT64_MAX;
    E->T = T; E->limit = sv.limit; E->st = TA_OK;
    return sv;
}
static void hi_gc_on(ta_tape *T, hi_saved sv) { T->gc_at = sv.gc_at; T->limit = sv.limit; }

/* ------------------------------------------------------------- public */

int ta_grad(const int64_t *outs, const double *w, int nout,
            const int64_t *ins, int nin, double *g)
{
    ta_tape *T = ta_self();
    hi_scr S;
    uint32_t hp = 0, ho = 0;
    int st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, outs, (size_t)(nout > 0 ? nout : 0), 0)) != TA_OK) return st;
    if ((st = hi_check(T, outs, nout, &hp, &ho)) != TA_OK) return st;
    if ((st = hi_check(T, ins, nin, NULL, NULL)) != TA_OK) return st;
    memset(&S, 0, sizeof S); S.T = T;
    st = hi_sweep(&S, outs, w, nout, ins, nin, g);
    hi_scr_free(&S);
    return st;
}

int ta_grad_graph(const int64_t *outs, const double *w, int nout,
                  const int64_t *ins, int nin, int64_t *h)
{
    ta_tape *T = ta_self();
    int64_t *gids;
    hi_scr S;
    hi_em E;
    hi_saved sv;
    ta_pos start;
    double *gcs;
    uint32_t hp = 0, ho = 0;
    int st, k;
    if (nin < 0 || !ta_held_fits(h, (size_t)nin)) return TA_EARG;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, outs, (size_t)(nout > 0 ? nout : 0), 0)) != TA_OK) return st;
    if ((st = hi_check(T, outs, nout, &hp, &ho)) != TA_OK) return st;
    if ((st = hi_check(T, ins, nin, NULL, NULL)) != TA_OK) return st;
    gids = TA_HELD_IDS(h);
    memset(gids, 0, (size_t)nin * sizeof *gids);   /* 0: no node yet (a list may be reused) */
    gcs = (double *)ta_malloc((size_t)(nin > 0 ? nin : 1) * sizeof *gcs);
    if (!gcs) return TA_ENOMEM;
    memset(&S, 0, sizeof S); S.T = T;
    sv = hi_gc_off(T, &E);
    ta_tell(T, &start);
    st = hi_emit(&S, &E, outs, w, nout, ins, nin, gids, gcs);
    /* constant gradients become leaves, so every result is a node */
    for (k = 0; st == TA_OK && k < nin; k++)
        if (!gids[k]) { gids[k] = hi_leaf(&E, gcs[k]); st = E.st; }
    if (st != TA_OK) ta_rollback(T, &start);   /* a failed call records nothing */
    else ta_held_take(T, h, (size_t)nin);
    hi_gc_on(T, sv);
    hi_scr_free(&S);
    free(gcs);
    return st;
}

/* ------------------------------------------- forward over reverse */

/* Pass A: the reverse sweep from out (adjoints), storing each reached
 * node's partials; *lowpos = the oldest segment it reached. */
static int hi_for_setup(hi_scr *S, int64_t out, uint32_t *lowpos, uint32_t *hipos, uint32_t *hioff)
{
    uint64_t pending = 0;
    ta_seg *rs; uint32_t ro;
    hi_blk *b;
    int st;
    hi_next_epoch(S);
    ta_resolve(S->T, out, &rs, &ro);
    if ((st = hi_reach(S, rs, ro, &pending, &b)) != TA_OK) return st;
    b->adj[ro] = 1.0;
    *hipos = *lowpos = rs->pos; *hioff = ro;
    return hi_reverse(S, rs->pos, ro, pending, lowpos);
}

/* Passes B and C for one direction v: tangents forward from the inputs,
 * then adjoint tangents back; hv[j] = (H v)_j.  Needs hi_for_setup. */
static void hi_for_column(hi_scr *S, const int64_t *ins, int nin, const double *v, double *hv,
                          uint32_t lowpos, uint32_t hipos, uint32_t hioff)
{
    ta_tape *T = S->T;
    uint32_t p, i, o;
    int k;
    hi_blk *b;
    for (k = 0; k < nin; k++)
        if ((b = hi_entry(S, ins[k], &o))) { HI_X(b, o, HI_IN) = 1.0; HI_X(b, o, HI_T) = 0.0; }
    for (k = 0; k < nin; k++)
        if ((b = hi_entry(S, ins[k], &o))) HI_X(b, o, HI_T) += v[k];
    /* B: tangents, oldest first */
    for (p = lowpos; p <= hipos; p++) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t n = (p == hipos) ? hioff + 1 : s->n;
        b = S->b[p];
        if (!b) continue;
        for (i = 0; i < n; i++) {
            int kind;
            double t;
            if (b->ep[i] != S->ep) continue;
            HI_X(b, i, HI_AT) = 0.0;
            if (HI_X(b, i, HI_IN) != 0.0) continue;
            kind = ta_kinds[s->op[i] & TA_OPMASK];
            t = 0.0;
            if (kind != TA_K_LEAF) {
                uint32_t xr = s->x[i];
                t = ta_tmul(HI_X(b, i, HI_PX), HI_X(S->b[TA_SEGOF(T, xr)->pos], TA_OFF(xr), HI_T));
                if (kind == TA_K_BIN) {
                    uint32_t yr = s->aux[i].y;
                    t += ta_tmul(HI_X(b, i, HI_PY), HI_X(S->b[TA_SEGOF(T, yr)->pos], TA_OFF(yr), HI_T));
                }
            }
            HI_X(b, i, HI_T) = t;
        }
    }
    /* C: adjoint tangents, newest first */
    for (p = hipos + 1; p-- > lowpos;) {
        ta_seg *s = T->segs[T->order[p]];
        b = S->b[p];
        if (!b) continue;
        for (i = (p == hipos) ? hioff + 1 : s->n; i-- > 0;) {
            int op, kind;
            double a, at, xv, yv, xx, xy, yy, tx, ty = 0.0, cx, cy = 0.0;
            uint32_t xr, yr = 0;
            hi_blk *bx, *by = NULL;
            if (b->ep[i] != S->ep) continue;
            op = s->op[i] & TA_OPMASK;
            kind = ta_kinds[op];
            if (kind == TA_K_LEAF) continue;
            a = b->adj[i]; at = HI_X(b, i, HI_AT);
            xr = s->x[i]; bx = S->b[TA_SEGOF(T, xr)->pos];
            xv = TA_SEGOF(T, xr)->val[TA_OFF(xr)];
            tx = HI_X(bx, TA_OFF(xr), HI_T);
            yv = 0.0;
            if (kind == TA_K_BIN) {
                yr = s->aux[i].y; by = S->b[TA_SEGOF(T, yr)->pos];
                yv = TA_SEGOF(T, yr)->val[TA_OFF(yr)];
                ty = HI_X(by, TA_OFF(yr), HI_T);
            } else if (kind == TA_K_CST) yv = s->aux[i].c;
            /* tangent products go through ta_tmul: an exact zero factor adds nothing */
            cx = ta_tmul(HI_X(b, i, HI_PX), at);
            if (kind == TA_K_BIN) cy = ta_tmul(HI_X(b, i, HI_PY), at);
            if (a != 0.0) {     /* as create_graph: a zero adjoint records nothing */
                hi_partials2(op, xv, yv, s->val[i], &xx, &xy, &yy);
                cx += ta_tmul(a, kind == TA_K_BIN ? ta_tmul(xx, tx) + ta_tmul(xy, ty) : ta_tmul(xx, tx));
                if (kind == TA_K_BIN) cy += ta_tmul(a, ta_tmul(xy, tx) + ta_tmul(yy, ty));
            }
            HI_X(bx, TA_OFF(xr), HI_AT) += cx;
            if (kind == TA_K_BIN) HI_X(by, TA_OFF(yr), HI_AT) += cy;
        }
    }
    for (k = 0; k < nin; k++)
        hv[k] = (b = hi_entry(S, ins[k], &o)) ? HI_X(b, o, HI_AT) : 0.0;
}

int ta_hvp(int64_t out, const int64_t *ins, int nin, const double *v, double *hv)
{
    ta_tape *T = ta_self();
    hi_scr S;
    uint32_t lp = 0, hp = 0, ho = 0;
    int st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, &out, 1, 0)) != TA_OK) return st;
    if ((st = hi_check(T, &out, 1, &hp, &ho)) != TA_OK) return st;
    if ((st = hi_check(T, ins, nin, NULL, NULL)) != TA_OK) return st;
    memset(&S, 0, sizeof S); S.T = T;
    st = hi_for_setup(&S, out, &lp, &hp, &ho);
    if (st == TA_OK) hi_for_column(&S, ins, nin, v, hv, lp, hp, ho);
    hi_scr_free(&S);
    return st;
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
    hi_scr S;
    uint32_t lp = 0, hp = 0, ho = 0;
    double *e;
    int st, k;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, &out, 1, 0)) != TA_OK) return st;
    if ((st = hi_check(T, &out, 1, &hp, &ho)) != TA_OK) return st;
    if ((st = hi_check(T, ins, nin, NULL, NULL)) != TA_OK) return st;
    if (nin <= 0) return TA_OK;
    if (!(e = (double *)ta_calloc((size_t)nin, sizeof *e))) return TA_ENOMEM;
    memset(&S, 0, sizeof S); S.T = T;
    st = hi_for_setup(&S, out, &lp, &hp, &ho);
    for (k = 0; st == TA_OK && k < nin; k++) {
        e[k] = 1.0;
        hi_for_column(&S, ins, nin, e, H + (size_t)k * nin, lp, hp, ho);
        e[k] = 0.0;
    }
    for (k = 0; st == TA_OK && k < nin; k++) {
        int j;
        for (j = 0; j < k; j++) {
            double *a = &H[(size_t)k * nin + j], *b = &H[(size_t)j * nin + k];
            double ca = *a, cb = *b;       /* hvp(e_k)[j], entry (j, k); hvp(e_j)[k], (k, j) */
            if (isfinite(ca) && isfinite(cb)) *a = *b = 0.5 * (ca + cb);
            else { *a = cb; *b = ca; }     /* from rows to columns */
        }
    }
    hi_scr_free(&S);
    free(e);
    return st;
}

int ta_jacobian(const int64_t *outs, int nout, const int64_t *ins, int nin, double *J)
{
    ta_tape *T = ta_self();
    hi_scr S;
    uint32_t hp = 0, ho = 0;
    int st = TA_OK, k;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, outs, (size_t)(nout > 0 ? nout : 0), 0)) != TA_OK) return st;
    if ((st = hi_check(T, outs, nout, &hp, &ho)) != TA_OK) return st;
    if ((st = hi_check(T, ins, nin, NULL, NULL)) != TA_OK) return st;
    memset(&S, 0, sizeof S); S.T = T;
    for (k = 0; st == TA_OK && k < nout; k++)
        st = hi_sweep(&S, &outs[k], NULL, 1, ins, nin, J + (size_t)k * nin);
    hi_scr_free(&S);
    return st;
}
