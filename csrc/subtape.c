/* subtape.c: marking the sub-tape behind some roots.
 *
 * Recompute plans (recompute.c) and Programs (program.c) both start by
 * marking every node a set of roots depends on, plus the nodes of the
 * guards that bind them, then copy the marked nodes out in tape order.
 * Marking uses TA_MARK, and TA_LIVE as a second colour: LIVE bits mean
 * something only inside ta_gc, which cannot run during these calls, and
 * every mark is cleared (ta_unmark) before the call returns. */
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

/* Give `bit` to everything the `pending` nodes carrying it depend on,
 * sweeping down from segment position hip; returns the lowest position. */
uint32_t ta_mark_down(ta_tape *T, uint32_t hip, uint8_t bit, uint64_t pending)
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
            if (!(b & bit)) continue;
            --pending;
            kind = ta_kinds[b & TA_OPMASK];
            if (kind != TA_K_LEAF) {
                r = s->x[i]; ta_mark(TA_SEGOF(T, r), TA_OFF(r), bit, &pending);
                if (kind == TA_K_BIN) { r = s->aux[i].y; ta_mark(TA_SEGOF(T, r), TA_OFF(r), bit, &pending); }
            }
            if (!pending) break;
        }
    }
    return lowpos;
}

void ta_unmark(ta_tape *T, uint32_t lo, uint32_t hi)
{
    uint32_t p, i;
    for (p = lo; p <= hi; p++) {
        ta_seg *s = T->segs[T->order[p]];
        for (i = 0; i < s->n; i++) s->op[i] &= (uint8_t)~(TA_MARK | TA_LIVE);
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
