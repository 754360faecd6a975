/* subtape.c: the sub-tape behind some roots, marked and flattened.
 *
 * Forward mode and the Wengert export (tangent.c), grad, hvp, Hessians
 * and Jacobians (higher.c), recompute plans (recompute.c) and Programs
 * (program.c) all start the same way:
 * ta_sub_extract marks every node the roots depend on (plus, on request,
 * the nodes of the guards that bind them), numbers the marked nodes in
 * tape order and copies them into flat arrays (a ta_sub: op, input rows,
 * constant, recorded value, tape ref), the way CppAD's player holds a
 * recording.  Everything after that is a loop over the rows; the
 * numeric reverse sweep over them is ta_sub_reverse, here.  (ta_backward,
 * sweep.c, is the one sweep that stays on the tape: it accumulates into
 * the nodes' adj[] in place.)
 *
 * Marks are TA_MARK bits in the op bytes.  Nothing here appends to the
 * tape, so no collection runs while they are held, and every mark is
 * cleared before ta_sub_extract returns, on success and on failure alike;
 * a failure (allocation) leaves nothing allocated. */
#include <stdlib.h>
#include <string.h>
#include "replay.h"

/* Tape order of a ref: (segment position, offset) packed for comparison. */
uint64_t ta_where(ta_tape *T, uint32_t ref)
{
    return ta_order(TA_SEGOF(T, ref), TA_OFF(ref));
}

/* Is guard g (tape refs) recorded on nodes at or before `hi`? */
int ta_guard_in(ta_tape *T, const ta_guard *g, uint64_t hi)
{
    return ta_where(T, g->a) <= hi && (g->cst || ta_where(T, g->b) <= hi);
}

/* Give TA_MARK to everything the `pending` marked nodes depend on,
 * sweeping down from segment position hip; returns the lowest position,
 * and *n = how many nodes are marked (each is visited once). */
static uint32_t ta_mark_down(ta_tape *T, uint32_t hip, uint64_t pending, uint64_t *n)
{
    uint32_t p, lowpos = hip;
    *n = 0;
    for (p = hip + 1; p-- > 0 && pending;) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t i = s->n;
        lowpos = p;
        while (i-- > 0) {
            uint8_t b = s->op[i];
            int kind;
            uint32_t r;
            if (!(b & TA_MARK)) continue;
            --pending; ++*n;
            kind = ta_kinds[b & TA_OPMASK];
            if (kind != TA_K_LEAF) {
                r = s->x[i]; ta_mark(TA_SEGOF(T, r), TA_OFF(r), TA_MARK, &pending);
                if (kind == TA_K_BIN) { r = s->aux[i].y; ta_mark(TA_SEGOF(T, r), TA_OFF(r), TA_MARK, &pending); }
            }
            if (!pending) break;
        }
    }
    return lowpos;
}

static void ta_unmark(ta_tape *T, uint32_t lo, uint32_t hi)
{
    uint32_t p, i;
    for (p = lo; p <= hi; p++) {
        ta_seg *s = T->segs[T->order[p]];
        for (i = 0; i < s->n; i++) s->op[i] &= (uint8_t)~TA_MARK;
    }
}

/* Give `bit` to the nodes of guards at or before hi; returns pending. */
uint64_t ta_mark_guards(ta_tape *T, uint64_t hi, uint8_t bit, uint64_t pending)
{
    struct ta_guards *G = ta_guards_if_any(T);
    uint32_t k;
    if (!G) return pending;
    for (k = 0; k < G->n; k++) {
        ta_guard *g = &G->g[k];
        if (!ta_guard_in(T, g, hi)) continue;
        ta_mark(TA_SEGOF(T, g->a), TA_OFF(g->a), bit, &pending);
        if (!g->cst) ta_mark(TA_SEGOF(T, g->b), TA_OFF(g->b), bit, &pending);
    }
    return pending;
}

void ta_sub_free(ta_sub *S)
{
    uint32_t k;
    if (S->rowof)
        for (k = 0; k <= S->hipos - S->lowpos; k++) free(S->rowof[k]);
    free(S->rowof); free(S->c);
    S->rowof = NULL; S->op = NULL; S->a = S->b = S->ref = NULL; S->c = S->v = NULL;
}

/* Number the n marked nodes of positions lowpos..hipos and copy them into
 * S's rows, clearing each mark as it goes (all of them on failure).  The
 * rows are one allocation (c first: its start is what is freed). */
static int ta_sub_flat(ta_tape *T, ta_sub *S, uint64_t n)
{
    uint32_t p, i, k = 0, lowpos = S->lowpos, hipos = S->hipos;
    uint32_t **rowof, *ra, *rb, *rref;
    uint8_t *rop;
    double *rc, *rv;
    size_t m1;
    if (n >= TA_NONE) goto nomem;
    m1 = (size_t)n + 1;      /* one spare row: no zero-size allocation */
    S->rowof = (uint32_t **)ta_calloc((size_t)(hipos - lowpos) + 1, sizeof *S->rowof);
    S->c = (double *)ta_malloc(m1 * (2 * sizeof(double) + 3 * sizeof(uint32_t) + 1));
    if (!S->rowof || !S->c) goto nomem;
    /* locals: stores through the uint8_t op array would otherwise make
     * the compiler reload every pointer of S after each one */
    rowof = S->rowof; rc = S->c;
    rv = S->v = rc + m1;
    ra = S->a = (uint32_t *)(rv + m1); rb = S->b = ra + m1; rref = S->ref = rb + m1;
    rop = S->op = (uint8_t *)(rref + m1);
    /* the row of a ref in S; most inputs are in the node's own segment */
#define ROW(ref) (((ref) >> TA_SHIFT) == slot ? m[TA_OFF(ref)] \
                  : rowof[T->segs[(ref) >> TA_SHIFT]->pos - lowpos][TA_OFF(ref)])
    for (p = lowpos; p <= hipos; p++) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t *m = NULL, slot = s->slot;
        for (i = 0; i < s->n; i++) {
            uint8_t bits = s->op[i];
            int op = bits & TA_OPMASK, kind = ta_kinds[op];
            if (!(bits & TA_MARK)) {
                if (m) m[i] = TA_NONE;                    /* not in the sub-tape */
                continue;
            }
            if (!m) {   /* (slots past s->n are never looked up: no ref names them) */
                if (!(m = rowof[p - lowpos] = (uint32_t *)ta_malloc(TA_SEG * sizeof *m))) goto nomem;
                memset(m, 0xFF, i * sizeof *m);           /* TA_NONE for the unmarked before i */
            }
            s->op[i] = (uint8_t)op;
            m[i] = k;
            rop[k] = (uint8_t)op;
            rref[k] = TA_REF(s, i);
            rv[k] = s->val[i];
            ra[k] = kind == TA_K_LEAF || kind == TA_K_NARY ? 0 : ROW(s->x[i]);
            rb[k] = kind == TA_K_BIN ? ROW(s->aux[i].y) : 0;
            rc[k] = kind == TA_K_CST ? s->aux[i].c : 0.0;
            k++;
        }
    }
#undef ROW
    S->n = k;
    return TA_OK;
nomem:
    ta_unmark(T, lowpos, hipos);
    ta_sub_free(S);
    return TA_ENOMEM;
}

int ta_sub_extract(ta_tape *T, const int64_t *roots, uint32_t nroots, int guards, ta_sub *S)
{
    uint64_t pending = 0, n;
    uint32_t j;
    memset(S, 0, sizeof *S);
    S->T = T;
    for (j = 0; j < nroots; j++) {
        uint32_t r = (uint32_t)roots[j];
        uint64_t w = ta_where(T, r);
        if (j == 0 || w > S->hi) { S->hi = w; S->hipos = TA_SEGOF(T, r)->pos; }
        ta_mark(TA_SEGOF(T, r), TA_OFF(r), TA_MARK, &pending);
    }
    if (guards) pending = ta_mark_guards(T, S->hi, TA_MARK, pending);
    S->lowpos = ta_mark_down(T, S->hipos, pending, &n);
    return ta_sub_flat(T, S, n);
}

void ta_sub_reverse(const ta_sub *S, double *adj, double *px, double *py)
{
    uint32_t k;
    for (k = S->n; k-- > 0;) {
        int kind = ta_kinds[S->op[k]];
        double dx = 0.0, dy = 0.0;
        if (kind != TA_K_LEAF && kind != TA_K_NARY) {   /* NARY: ta_plain keeps it out */
            ta_sub_partials(S, k, kind, &dx, &dy);
            adj[S->a[k]] += dx * adj[k];
            if (kind == TA_K_BIN) adj[S->b[k]] += dy * adj[k];
        }
        if (px) { px[k] = dx; py[k] = dy; }
    }
}
