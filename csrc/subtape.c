/* subtape.c: the sub-tape behind some roots, marked and flattened.
 *
 * Forward mode and the Wengert export (tangent.c), recompute plans
 * (recompute.c) and Programs (program.c) all start the same way:
 * ta_sub_extract marks every node the roots depend on (plus, on request,
 * the nodes of the guards that bind them), numbers the marked nodes in
 * tape order and copies them into flat arrays (a ta_sub: op, input rows,
 * constant, recorded value, tape ref), the way CppAD's player holds a
 * recording.  Everything after that is a loop over the rows.
 *
 * Marks are TA_MARK bits in the op bytes.  Nothing here appends to the
 * tape, so no collection runs while they are held, and every mark is
 * cleared before ta_sub_extract returns, on success and on failure alike;
 * a failure (allocation) leaves nothing allocated.
 *
 * higher.c does not use this: its sweeps stamp the nodes they reach in a
 * scratch buffer of their own instead (see its opening comment for why). */
#include <stdlib.h>
#include <string.h>
#include "replay.h"

/* Tape order of a ref: (segment position, offset) packed for comparison. */
uint64_t ta_where(ta_tape *T, uint32_t ref)
{
    return ((uint64_t)TA_SEGOF(T, ref)->pos << 32) | TA_OFF(ref);
}

void ta_mark(ta_seg *s, uint32_t o, uint8_t bit, uint64_t *pending)
{
    if (s->op[o] & bit) return;
    s->op[o] |= bit;
    ++*pending;
}

/* Is guard g (tape refs) recorded on nodes at or before `hi`? */
int ta_guard_in(ta_tape *T, const ta_guard *g, uint64_t hi)
{
    return ta_where(T, g->a) <= hi && (g->cst || ta_where(T, g->b) <= hi);
}

/* Give TA_MARK to everything the `pending` marked nodes depend on,
 * sweeping down from segment position hip; returns the lowest position. */
static uint32_t ta_mark_down(ta_tape *T, uint32_t hip, uint64_t pending)
{
    uint32_t p, lowpos = hip;
    for (p = hip + 1; p-- > 0 && pending;) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t i = s->n;
        lowpos = p;
        while (i-- > 0) {
            uint8_t b = s->op[i];
            int kind;
            uint32_t r;
            if (!(b & TA_MARK)) continue;
            --pending;
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
    struct ta_guards *G = T->guards;
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
    free(S->rowof); free(S->op); free(S->a); free(S->b);
    free(S->c); free(S->v); free(S->ref);
    S->rowof = NULL; S->op = NULL; S->a = S->b = S->ref = NULL; S->c = S->v = NULL;
}

/* Number the marked nodes of positions lowpos..hipos and copy them into
 * S's rows, clearing each mark as it goes (all of them on failure). */
static int ta_sub_flat(ta_tape *T, ta_sub *S)
{
    uint32_t p, i, k = 0, lowpos = S->lowpos, hipos = S->hipos;
    uint64_t n = 0;
    size_t m1;
    for (p = lowpos; p <= hipos; p++) {
        ta_seg *s = T->segs[T->order[p]];
        for (i = 0; i < s->n; i++) n += (s->op[i] & TA_MARK) != 0;
    }
    if (n >= TA_NONE) goto nomem;
    m1 = (size_t)n + 1;      /* one spare row: no zero-size allocation */
    S->rowof = (uint32_t **)ta_calloc((size_t)(hipos - lowpos) + 1, sizeof *S->rowof);
    S->op = (uint8_t *)ta_malloc(m1);
    S->a = (uint32_t *)ta_malloc(m1 * 4); S->b = (uint32_t *)ta_malloc(m1 * 4);
    S->c = (double *)ta_malloc(m1 * 8); S->v = (double *)ta_malloc(m1 * 8);
    S->ref = (uint32_t *)ta_malloc(m1 * 4);
    if (!S->rowof || !S->op || !S->a || !S->b || !S->c || !S->v || !S->ref) goto nomem;
    for (p = lowpos; p <= hipos; p++) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t *m = NULL;
        for (i = 0; i < s->n; i++) {
            uint8_t bits = s->op[i];
            int op = bits & TA_OPMASK, kind = ta_kinds[op];
            if (!(bits & TA_MARK)) continue;
            if (!m) {
                if (!(m = S->rowof[p - lowpos] = (uint32_t *)ta_malloc(TA_SEG * sizeof *m))) goto nomem;
                memset(m, 0xFF, TA_SEG * sizeof *m);      /* TA_NONE: not in the sub-tape */
            }
            s->op[i] = (uint8_t)op;
            m[i] = k;
            S->op[k] = (uint8_t)op;
            S->ref[k] = TA_REF(s, i);
            S->v[k] = s->val[i];
            S->a[k] = kind == TA_K_LEAF || kind == TA_K_NARY ? 0 : ta_sub_row(S, s->x[i]);
            S->b[k] = kind == TA_K_BIN ? ta_sub_row(S, s->aux[i].y) : 0;
            S->c[k] = kind == TA_K_CST ? s->aux[i].c : 0.0;
            k++;
        }
    }
    S->n = k;
    return TA_OK;
nomem:
    ta_unmark(T, lowpos, hipos);
    ta_sub_free(S);
    return TA_ENOMEM;
}

int ta_sub_extract(ta_tape *T, const int64_t *roots, uint32_t nroots, int guards, ta_sub *S)
{
    uint64_t pending = 0;
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
    S->lowpos = ta_mark_down(T, S->hipos, pending);
    return ta_sub_flat(T, S);
}
