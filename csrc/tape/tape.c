/* tape.c: the arena.  Tape lifetime, holds and held lists, segments and
 * their slot tables, reclamation of segments nothing can reach, and the
 * layers attached to a tape.
 *
 * Reclamation: a segment is held while anything Python can reach a node
 * through holds it (tapead.h: holds).  A node is live if its segment is
 * held or a live node uses it, and since inputs precede their users one
 * pass from newest to oldest decides it.  Segments with no live node are
 * freed; dead nodes in kept segments become DEAD so nothing ever follows
 * their (possibly dangling) inputs.  The pass runs when the number of
 * segments doubles since the last one, so it costs amortised O(1) per node.
 * The pass leaves TA_LIVE on every node that lives, and the sweep that
 * frees the rest comes after it.  A layer above the core that keeps
 * per-tape state naming nodes attaches it with hooks (tapead.h:
 * ta_attach): the collector asks the layer of NARY nodes for their inputs,
 * lets every layer see what dies while the dying nodes are still whole,
 * tells the NARY layer which of its nodes die, and tells every layer when
 * it is done.
 *
 * Lifetime: C owns every tape.  A tape counts one reference for its thread
 * (dropped by a thread-exit destructor, thread.c) and one per held segment
 * (taken by a segment's first hold, dropped with its last: one atomic
 * operation per hold and per release, not two); whoever drops the last
 * frees it, in whatever thread that happens.  (A segment's holds go from 0
 * to 1 only in the tape's own thread, which holds a reference itself while
 * it lives, so a release in another thread racing with it frees nothing.)  No
 * Python object owns a tape, so nothing in Python (greenlets sharing a
 * thread, a module reloaded, a thread-local cleared early) can free one
 * under running code. */
#include <stdlib.h>
#include <string.h>
#include "tapead.h"
#include "ops.h"

static uint32_t ta_tagctr = 0;            /* (atomic) tags handed out so far */
static uint64_t ta_next_tag(void) { return TA_ATOMIC_ADD32(&ta_tagctr, 1u); }
static int64_t ta_alive = 0;              /* (atomic) tapes not yet freed    */
#define TA_ALIVE(d) TA_ATOMIC_ADD64(&ta_alive, (d))

#define TA_GC_MIN 4u             /* never collect below this many segments: a
                                    tiny live set keeps only a few segments */



static void ta_tape_free(ta_tape *T);

/* ---------------------------------------------------------------- tapes */

/* Drop one reference to the thread's tape R; the last one frees it. */
void ta_tape_unref(ta_tape *R)
{
    if (TA_ATOMIC_ADD64(&R->refs, -1) == 0) ta_tape_free(R);
}


ta_tape *ta_tape_new(ta_tape *root)
{
    ta_tape *T = (ta_tape *)ta_calloc(1, sizeof *T);
    if (!T) return NULL;
    TA_ALIVE(1);
    T->tag = ta_next_tag() & 0x7FFFFFFFu;
    if (T->tag == 0) T->tag = ta_next_tag() & 0x7FFFFFFFu;
    T->limit = UINT64_MAX;
    T->gc_at = TA_GC_MIN;
    T->root = root ? root : T;
    T->refs = 1;                          /* root: its thread */
    return T;
}

int64_t ta_tapes_alive(void) { return TA_ALIVE(0); }

static void ta_tape_free(ta_tape *T)
{
    uint32_t k;
    for (k = 0; k < T->nslots; k++) if (T->segs[k]) ta_seg_free(T->segs[k]);
    if (T->spare) ta_seg_free(T->spare);
    free(T->spare_sub);
    free(T->segs); free(T->freeslots); free(T->order);
    if (T->ng) ta_tape_free(T->ng);
    for (k = 0; k < T->nlayers; k++)
        if (T->layers[k].layer->release) T->layers[k].layer->release(T, T->layers[k].state);
    free(T);
    TA_ALIVE(-1);
}

/* --------------------------------------------------------------- layers */

int ta_attach(ta_tape *T, const struct ta_layer *L, void *state)
{
    if (T->nlayers == TA_NLAYERS) return TA_ELIMIT;
    T->layers[T->nlayers].layer = L;
    T->layers[T->nlayers].state = state;
    T->nlayers++;
    return TA_OK;
}

/* ---------------------------------------------------------------- holds */

void ta_unhold_seg(ta_seg *s)
{
    ta_tape *R = s->tape->root;          /* read first: once unheld, s may be freed */
    if (TA_ATOMIC_ADD32(&s->owned, (uint32_t)-1) == 0) ta_tape_unref(R);   /* its last hold */
}

int ta_orphaned(ta_seg *const *box)
{
    return box && *box && TA_ATOMIC_LOAD32(&(*box)->tape->root->exited) != 0;
}

void ta_unhold(ta_seg **box)
{
    ta_seg *s;
    if (!box || !(s = *box)) return;
    *box = NULL;
    ta_unhold_seg(s);
}

/* ------------------------------------------------------- held lists */

#define TA_HELD_SEG(h, k) ((h)[1 + (h)[0] + (int64_t)(k)])

int ta_held_fits(const int64_t *h, size_t n)
{
    return h && h[0] >= 0 && (uint64_t)h[0] >= n && (uint64_t)h[0] < ((uint64_t)1 << 60);
}

void ta_held_drop(int64_t *h)
{
    int64_t k;
    if (!ta_held_fits(h, 0)) return;
    for (k = 0; k < h[0]; k++) {
        int64_t p = TA_HELD_SEG(h, k);
        if (p) {
            TA_HELD_SEG(h, k) = 0;
            ta_unhold_seg((ta_seg *)(intptr_t)p);
        }
    }
}

void ta_held_take(ta_tape *T, int64_t *h, size_t n)
{
    size_t k;
    ta_held_drop(h);
    for (k = 0; k < n; k++) {
        ta_seg *s = TA_SEGOF(T, (uint32_t)TA_HELD_IDS(h)[k]);
        ta_hold(s);
        TA_HELD_SEG(h, k) = (int64_t)(intptr_t)s;
    }
}

int ta_held_move(int64_t *h, size_t k, ta_seg **box)
{
    if (!ta_held_fits(h, k + 1) || !TA_HELD_SEG(h, k) || !box || *box) return TA_EARG;
    *box = (ta_seg *)(intptr_t)TA_HELD_SEG(h, k);
    TA_HELD_SEG(h, k) = 0;
    return TA_OK;
}

int ta_held_ids(const int64_t *ids, size_t n, int64_t *h)
{
    ta_tape *T = ta_self();
    ta_seg *s; uint32_t o; int st, ng;
    size_t i;
    if (!ta_held_fits(h, n) || (n && !ids)) return TA_EARG;
    if (!T) return TA_ENOMEM;
    for (i = 0; i < n; i++)
        if ((st = ta_resolve_any(T, ids[i], &s, &o, &ng)) != TA_OK) return st;
    ta_held_drop(h);
    for (i = 0; i < n; i++) {
        ta_resolve_any(T, ids[i], &s, &o, &ng);
        ta_hold(s);
        TA_HELD_IDS(h)[i] = ids[i];
        TA_HELD_SEG(h, i) = (int64_t)(intptr_t)s;
    }
    return TA_OK;
}

/* --------------------------------------------------------------- growth */

/* Double the slot tables (segs, freeslots, order share one capacity).
 * Each realloc lands in its pointer only on success; capslots changes only
 * when all three have grown, so a failure leaves the tape consistent. */
static int ta_grow_slots(ta_tape *T)
{
    uint32_t cap = T->capslots ? T->capslots * 2u : 16u;
    void *p;
    if (T->capslots >= TA_MAXSLOTS / 2u) return TA_ELIMIT;
    p = ta_realloc(T->segs, cap * sizeof *T->segs);      if (!p) return TA_ENOMEM; T->segs = (ta_seg **)p;
    p = ta_realloc(T->freeslots, cap * sizeof(uint32_t)); if (!p) return TA_ENOMEM; T->freeslots = (uint32_t *)p;
    p = ta_realloc(T->order, cap * sizeof(uint32_t));     if (!p) return TA_ENOMEM; T->order = (uint32_t *)p;
    memset(T->segs + T->capslots, 0, (cap - T->capslots) * sizeof *T->segs);
    T->capslots = cap;
    return TA_OK;
}

/* --------------------------------------------------------- reclamation */

static void ta_mark_live(ta_tape *T, uint32_t ref)
{
    TA_SEGOF(T, ref)->op[TA_OFF(ref)] |= TA_LIVE;
}

void ta_free_seg(ta_tape *T, ta_seg *s)
{
    T->segs[s->slot] = NULL;
    T->freeslots[T->nfree++] = s->slot;
    T->nodes -= s->n;
    if (!T->spare) T->spare = s; else ta_seg_free(s);
}

int ta_gc(ta_tape *T)
{
    uint32_t p, l, w = 0, freed = 0;
    const struct ta_attached *N = ta_nary(T);
    if (T->gc_off) return 0;      /* a layer holds it off (a sweep paused to run Python) */
    /* which nodes live: every node of a held segment, and every input of a
     * live node; each keeps TA_LIVE until the sweep below */
    for (p = T->norder; p-- > 0;) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t i, live = 0;
        int held = TA_ATOMIC_LOAD32(&s->owned) != 0;
        for (i = s->n; i-- > 0;) {
            uint8_t b = s->op[i];
            uint8_t k = ta_kinds[b & TA_OPMASK];
            if (!held && !(b & TA_LIVE)) continue;
            live++;
            if (k == TA_K_NARY) {              /* a layer's node keeps its inputs, too */
                uint32_t a, n;
                const uint32_t *in = N->layer->inputs(N->state, s, i, &n);
                for (a = 0; a < n; a++) ta_mark_live(T, in[a]);
            } else if (k != TA_K_LEAF) ta_mark_live(T, s->x[i]);
            if (k == TA_K_BIN) ta_mark_live(T, s->aux[i].y);
            s->op[i] = (uint8_t)(b | TA_LIVE);
        }
        s->kept = live;
    }
    /* the layers see what dies (no TA_LIVE) while it is all still there */
    for (l = 0; l < T->nlayers; l++)
        if (T->layers[l].layer->dying) T->layers[l].layer->dying(T, T->layers[l].state);
    /* the sweep: live nodes keep their op code alone (every mark goes), dead
     * ones in kept segments become DEAD, segments with no live node go */
    for (p = T->norder; p-- > 0;) {
        ta_seg *s = T->segs[T->order[p]];
        uint8_t *op = s->op;
        uint32_t i, n = s->n;             /* in locals, so the loop vectorizes */
        if (N && s->kept < n)             /* a dying NARY node: what its layer holds for it goes */
            for (i = 0; i < n; i++)
                if (!(op[i] & TA_LIVE) && ta_kinds[op[i] & TA_OPMASK] == TA_K_NARY)
                    N->layer->node_dead(N->state, s, i);
        if (s->kept == 0 && s != T->cur) { ta_free_seg(T, s); T->order[p] = UINT32_MAX; freed++; continue; }
        for (i = 0; i < n; i++) {
            uint8_t b = op[i];
            op[i] = (uint8_t)(b & TA_LIVE ? b & TA_OPMASK : TA_DEAD);
        }
    }
    for (p = 0; p < T->norder; p++) {
        uint32_t k = T->order[p];
        if (k == UINT32_MAX) continue;
        T->segs[k]->pos = w;
        T->order[w++] = k;
    }
    T->norder = w;
    for (l = 0; l < T->nlayers; l++)
        if (T->layers[l].layer->collected) T->layers[l].layer->collected(T, T->layers[l].state);
    T->collections++;
    T->gc_at = 2u * w > TA_GC_MIN ? 2u * w : TA_GC_MIN;
    return (int)freed;
}

/* tapead.collect(): the tape and its no_grad arena, now */
int ta_collect(void)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    return ta_gc(T) + (T->ng ? ta_gc(T->ng) : 0);
}

/* ------------------------------------------------------------- segments */

int ta_new_seg(ta_tape *T)
{
    ta_seg *s;
    uint32_t k;
    int st;
    if (T->norder >= T->gc_at) ta_gc(T);
    if (T->nfree) k = T->freeslots[T->nfree - 1];
    else {
        if (T->nslots == T->capslots && (st = ta_grow_slots(T)) != TA_OK) return st;
        k = T->nslots;
    }
    s = T->spare ? T->spare : ta_seg_alloc();
    if (!s) return TA_ENOMEM;
    /* nothing can fail from here on */
    T->spare = NULL;
    if (T->nfree) T->nfree--; else T->nslots++;
    s->tape = T; s->n = 0; s->owned = 0; s->marked = 0; s->slot = k; s->pos = T->norder;
    s->stamp = ++T->stamps;
    T->segs[k] = s;
    T->order[T->norder++] = k;
    T->cur = s;
    return TA_OK;
}
