/* subtape.c: the sub-tape behind some roots, marked and flattened.
 *
 * Forward mode and the Wengert export (tangent.c), grad, hvp, Hessians
 * and Jacobians (higher.c), recompute plans (recompute.c) and Programs
 * (program.c) all start the same way:
 * ta_sub_extract marks every node the roots depend on (plus, on request,
 * the nodes of the guards that bind them), numbers the marked nodes in
 * tape order and copies them into flat arrays (a ta_sub: op, input rows,
 * constant, recorded value, and the tape ref for the callers that ask),
 * the way CppAD's player holds a recording; rows and row maps are one
 * allocation, which the tape keeps for the next sub-tape (up to
 * TA_SUB_KEEP bytes).  Everything after that is a loop over the rows; the
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
 * *n = how many nodes are marked (each is visited once) and *nseg = how
 * many segments hold one.  (Counts and pointers stay in locals: the
 * stores into op[] may alias anything, so the compiler would otherwise
 * reload them after each one.) */
static uint32_t ta_mark_down(ta_tape *T, uint32_t hip, uint64_t pending, uint64_t *n,
                             uint32_t *nseg)
{
    ta_seg *const *segs = T->segs;
    const uint32_t *order = T->order;
    const uint8_t *kinds = ta_kinds;
    uint64_t cnt = 0;
    uint32_t p, lowpos = hip, ns = 0;
    for (p = hip + 1; p-- > 0 && pending;) {
        ta_seg *s = segs[order[p]];
        uint8_t *op = s->op;
        const uint32_t *x = s->x;
        const ta_aux *aux = s->aux;
        uint64_t before = cnt;
        uint32_t i = s->n;
        lowpos = p;
        while (i-- > 0) {
            uint8_t b = op[i], *q;
            int kind;
            uint32_t r;
            if (!(b & TA_MARK)) continue;
            --pending; ++cnt;
            kind = kinds[b & TA_OPMASK];
            if (kind != TA_K_LEAF) {
                r = x[i]; q = &segs[r >> TA_SHIFT]->op[TA_OFF(r)];
                if (!(*q & TA_MARK)) { *q |= TA_MARK; ++pending; }
                if (kind == TA_K_BIN) {
                    r = aux[i].y; q = &segs[r >> TA_SHIFT]->op[TA_OFF(r)];
                    if (!(*q & TA_MARK)) { *q |= TA_MARK; ++pending; }
                }
            }
            if (!pending) break;
        }
        ns += cnt != before;
    }
    *n = cnt; *nseg = ns;
    return lowpos;
}

static void ta_unmark(ta_tape *T, uint32_t lo, uint32_t hi)
{
    uint32_t p, i;
    for (p = lo; p <= hi; p++) {
        ta_seg *s = T->segs[T->order[p]];
        uint8_t *op = s->op;
        uint32_t n = s->n;   /* in locals, so the loop vectorizes */
        for (i = 0; i < n; i++) op[i] &= (uint8_t)~TA_MARK;
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

/* Memory for a sub-tape: the tape's spare block if it is big enough
 * (taken until ta_sub_free gives it back: a sub-tape taken meanwhile gets
 * its own), else a new one. */
static void *ta_sub_mem(ta_tape *T, size_t need, size_t *cap)
{
    void *m = T->spare_sub;
    if (m && T->spare_subcap >= need) {
        T->spare_sub = NULL;
        *cap = T->spare_subcap;
        return m;
    }
    *cap = need;
    return ta_malloc(need);
}

void ta_sub_free(ta_sub *S)
{
    ta_tape *T = S->T;
    if (S->mem && S->cap <= TA_SUB_KEEP && (!T->spare_sub || T->spare_subcap < S->cap)) {
        free(T->spare_sub);             /* keep the bigger block */
        T->spare_sub = S->mem; T->spare_subcap = S->cap;
    } else free(S->mem);
    S->mem = NULL; S->map = NULL; S->op = NULL; S->a = S->b = S->ref = NULL; S->c = S->v = NULL;
}

/* Number the n marked nodes of positions lowpos..hipos (nseg segments
 * hold them) and copy them into S's rows, then clear the marks (on
 * failure too).  Rows, the map by slot and the row maps of the
 * nseg segments are one allocation, made before any mark is cleared. */
static int ta_sub_flat(ta_tape *T, ta_sub *S, uint64_t n, uint32_t nseg, int refs)
{
    ta_seg *const *segs = T->segs;
    const uint32_t *order = T->order;
    const uint8_t *kinds = ta_kinds;
    uint32_t p, i, k = 0, lowpos = S->lowpos, hipos = S->hipos;
    uint32_t **map, *maps, *ra, *rb, *rref = NULL;
    uint8_t *rop;
    double *rc, *rv;
    size_t m1, row = 2 * sizeof(double) + (refs ? 3 : 2) * sizeof(uint32_t) + 1, fixed;
    /* the map by slot (pointers), then the segments' row maps: every part
     * starts aligned for what it holds (doubles first) */
    fixed = (size_t)T->nslots * sizeof *map + (size_t)nseg * TA_SEG * sizeof *maps;
    if (n >= TA_NONE || (uint64_t)n + 1 > (SIZE_MAX - fixed) / row) goto nomem;
    m1 = (size_t)n + 1;      /* one spare row: no zero-size allocation */
    if (!(S->mem = ta_sub_mem(T, m1 * row + fixed, &S->cap))) goto nomem;
    rc = S->c = (double *)S->mem;
    rv = S->v = rc + m1;
    map = S->map = (uint32_t **)(rv + m1);
    maps = (uint32_t *)(map + T->nslots);
    ra = S->a = maps + (size_t)nseg * TA_SEG;
    rb = S->b = ra + m1;
    if (refs) rref = S->ref = rb + m1;
    rop = S->op = (uint8_t *)(rb + (refs ? 2 : 1) * m1);
    /* the row of a marked ref: its segment comes no later than this one */
#define ROW(ref) (map[(ref) >> TA_SHIFT][TA_OFF(ref)])
    for (p = lowpos; p <= hipos; p++) {
        ta_seg *s = segs[order[p]];
        uint8_t *op = s->op;
        const uint32_t *x = s->x;
        const ta_aux *aux = s->aux;
        const double *val = s->val;
        uint32_t end = s->n, base = TA_REF(s, 0), *m;
        for (i = 0; i < end && !(op[i] & TA_MARK); i++) {}
        if (i == end) { map[s->slot] = NULL; continue; }
        /* (slots past s->n are never looked up: no ref names them) */
        m = map[s->slot] = maps; maps += TA_SEG;
        memset(m, 0xFF, i * sizeof *m);           /* TA_NONE: not in the sub-tape */
        for (; i < end; i++) {
            uint8_t bits = op[i];
            int o = bits & TA_OPMASK;
            if (!(bits & TA_MARK)) { m[i] = TA_NONE; continue; }
            m[i] = k;
            rop[k] = (uint8_t)o;
            rv[k] = val[i];
            switch (kinds[o]) {
            case TA_K_BIN: ra[k] = ROW(x[i]); rb[k] = ROW(aux[i].y); break;
            case TA_K_CST: ra[k] = ROW(x[i]); rb[k] = 0; rc[k] = aux[i].c; break;
            case TA_K_UN:  ra[k] = ROW(x[i]); rb[k] = 0; break;
            default:       ra[k] = 0; rb[k] = 0; break;   /* LEAF, NARY */
            }
            if (rref) rref[k] = base | i;
            k++;
        }
        /* the marks go in a loop of their own, which vectorizes, while
         * op[] is still in cache */
        for (i = 0; i < end; i++) op[i] &= (uint8_t)~TA_MARK;
    }
#undef ROW
    S->n = k;
    return TA_OK;
nomem:
    ta_unmark(T, lowpos, hipos);
    ta_sub_free(S);
    return TA_ENOMEM;
}

int ta_sub_extract(ta_tape *T, const int64_t *roots, uint32_t nroots, int flags, ta_sub *S)
{
    uint64_t pending = 0, n;
    uint32_t j, nseg;
    memset(S, 0, sizeof *S);
    S->T = T;
    for (j = 0; j < nroots; j++) {
        uint32_t r = (uint32_t)roots[j];
        uint64_t w = ta_where(T, r);
        if (j == 0 || w > S->hi) { S->hi = w; S->hipos = TA_SEGOF(T, r)->pos; }
        ta_mark(TA_SEGOF(T, r), TA_OFF(r), TA_MARK, &pending);
    }
    if (flags & TA_SUB_GUARDS) pending = ta_mark_guards(T, S->hi, TA_MARK, pending);
    S->lowpos = ta_mark_down(T, S->hipos, pending, &n, &nseg);
    return ta_sub_flat(T, S, n, nseg, flags & TA_SUB_REFS);
}

void ta_sub_reverse(const ta_sub *S, double *adj, double *px, double *py)
{
    const uint8_t *op = S->op;
    const uint32_t *a = S->a, *b = S->b;
    const double *c = S->c, *v = S->v;
    uint32_t k;
    for (k = S->n; k-- > 0;) {
        int kind = ta_kinds[op[k]];
        double dx = 0.0, dy = 0.0;
        if (kind != TA_K_LEAF && kind != TA_K_NARY) {   /* NARY: ta_plain keeps it out */
            ta_row_partials(op[k], a, b, c, v, k, &dx, &dy);
            adj[a[k]] += dx * adj[k];
            if (kind == TA_K_BIN) adj[b[k]] += dy * adj[k];
        }
        if (px) { px[k] = dx; py[k] = dy; }
    }
}
