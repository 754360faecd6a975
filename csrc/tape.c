/* tape.c: the arena.  Per-thread tapes, segment allocation, node append,
 * lookups from Python ids, and reclamation of segments no handle can reach.
 *
 * Reclamation: Python holds one token object per segment, shared by every
 * Value whose node is in it; the token's death (one __del__ per segment,
 * not per Value) clears seg->owned.  A node is live if its segment is owned
 * or a live node uses it, and since inputs precede their users one pass
 * from newest to oldest decides it.  Segments with no live node are freed;
 * dead nodes in kept segments become DEAD so nothing ever follows their
 * (possibly dangling) inputs.  The pass runs when the number of segments
 * doubles since the last one, so it costs amortised O(1) per node. */
#include <stdlib.h>
#include <string.h>
#include "tapead.h"
#include "ops.h"

#if defined(_MSC_VER)
#  include <windows.h>
#  define TA_TLS __declspec(thread)
static volatile LONG ta_tagctr = 0;
static uint64_t ta_next_tag(void) { return (uint64_t)(uint32_t)InterlockedIncrement(&ta_tagctr); }
#elif defined(__GNUC__) || defined(__clang__)
#  define TA_TLS __thread
static uint32_t ta_tagctr = 0;
static uint64_t ta_next_tag(void) { return __atomic_add_fetch(&ta_tagctr, 1u, __ATOMIC_RELAXED); }
#else
#  error "tapead needs thread-local storage and an atomic increment for this compiler"
#endif

#define TA_GC_MIN 64u            /* never collect below this many segments */

static TA_TLS ta_tape *ta_tls = NULL;

/* The tag of the one tape whose thread may take Python's fast path (its
 * current token sits in a module global); every other thread's ops return
 * TA_NEWSEG codes and find their token in a threading.local. */
#if defined(_MSC_VER)
static volatile LONG ta_owner = 0;
#  define TA_OWNER() ((uint64_t)(uint32_t)ta_owner)
#  define TA_OWNER_CLAIM(t) (InterlockedCompareExchange(&ta_owner, (LONG)(t), 0))
#  define TA_OWNER_DROP(t) (InterlockedCompareExchange(&ta_owner, 0, (LONG)(t)))
#else
static uint32_t ta_owner = 0;
#  define TA_OWNER() ((uint64_t)__atomic_load_n(&ta_owner, __ATOMIC_RELAXED))
static void ta_owner_cas(uint32_t from, uint32_t to)
{ __atomic_compare_exchange_n(&ta_owner, &from, to, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED); }
#  define TA_OWNER_CLAIM(t) ta_owner_cas(0u, (uint32_t)(t))
#  define TA_OWNER_DROP(t) ta_owner_cas((uint32_t)(t), 0u)
#endif

/* ---------------------------------------------------------------- tapes */

static ta_tape *ta_tape_new(void)
{
    ta_tape *T = (ta_tape *)calloc(1, sizeof *T);
    if (!T) return NULL;
    T->tag = ta_next_tag() & 0x7FFFFFFFu;
    if (T->tag == 0) T->tag = ta_next_tag() & 0x7FFFFFFFu;
    T->limit = UINT64_MAX;
    T->gc_at = TA_GC_MIN;
    return T;
}

ta_tape *ta_self(void)
{
    if (!ta_tls) ta_tls = ta_tape_new();
    return ta_tls;
}

void *ta_tape_current(void) { return ta_self(); }

int64_t ta_tape_tag(void)
{
    ta_tape *T = ta_self();
    return T ? (int64_t)T->tag : TA_ENOMEM;
}

void ta_tape_free(void *tape)
{
    ta_tape *T = (ta_tape *)tape;
    uint32_t k;
    if (!T) return;
    for (k = 0; k < T->nslots; k++) free(T->segs[k]);
    free(T->spare);
    free(T->segs); free(T->freeslots); free(T->order);
    ta_guards_free(T);
    if (ta_tls == T) ta_tls = NULL;
    TA_OWNER_DROP(T->tag);
    free(T);
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
    p = realloc(T->segs, cap * sizeof *T->segs);      if (!p) return TA_ENOMEM; T->segs = (ta_seg **)p;
    p = realloc(T->freeslots, cap * sizeof(uint32_t)); if (!p) return TA_ENOMEM; T->freeslots = (uint32_t *)p;
    p = realloc(T->order, cap * sizeof(uint32_t));     if (!p) return TA_ENOMEM; T->order = (uint32_t *)p;
    memset(T->segs + T->capslots, 0, (cap - T->capslots) * sizeof *T->segs);
    T->capslots = cap;
    return TA_OK;
}

/* --------------------------------------------------------- reclamation */

static void ta_mark_live(ta_tape *T, uint32_t ref)
{
    TA_SEGOF(T, ref)->op[TA_OFF(ref)] |= TA_LIVE;
}

static void ta_free_seg(ta_tape *T, ta_seg *s)
{
    T->segs[s->slot] = NULL;
    T->freeslots[T->nfree++] = s->slot;
    T->nodes -= s->n;
    if (!T->spare) T->spare = s; else free(s);
}

int ta_gc(ta_tape *T)
{
    uint32_t p, w = 0, freed = 0;
    for (p = T->norder; p-- > 0;) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t i, live = 0;
        for (i = s->n; i-- > 0;) {
            uint8_t b = s->op[i];
            uint8_t op = (uint8_t)(b & TA_OPMASK);
            if (s->owned || (b & TA_LIVE)) {
                uint8_t k = ta_kinds[op];
                live++;
                if (k != TA_K_LEAF) ta_mark_live(T, s->x[i]);
                if (k == TA_K_BIN) ta_mark_live(T, s->aux[i].y);
                s->op[i] = op;
            } else {
                s->op[i] = TA_DEAD;
            }
        }
        if (live == 0 && s != T->cur) { ta_free_seg(T, s); T->order[p] = UINT32_MAX; freed++; }
    }
    for (p = 0; p < T->norder; p++) {
        uint32_t k = T->order[p];
        if (k == UINT32_MAX) continue;
        T->segs[k]->pos = w;
        T->order[w++] = k;
    }
    T->norder = w;
    ta_guards_gc(T);
    T->collections++;
    T->gc_at = 2u * w > TA_GC_MIN ? 2u * w : TA_GC_MIN;
    return (int)freed;
}

int ta_collect(void)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    return ta_gc(T);
}

/* --------------------------------------------------------------- append */

static int ta_new_seg(ta_tape *T)
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
    s = T->spare ? T->spare : (ta_seg *)malloc(sizeof *s);
    if (!s) return TA_ENOMEM;
    /* nothing can fail from here on */
    T->spare = NULL;
    if (T->nfree) T->nfree--; else T->nslots++;
    s->n = 0; s->owned = 0; s->slot = k; s->pos = T->norder;
    T->segs[k] = s;
    T->order[T->norder++] = k;
    T->cur = s;
    T->cur_token = 0;
    return TA_OK;
}

int64_t ta_append(ta_tape *T, int op, uint32_t x, ta_aux aux, double val)
{
    ta_seg *s = T->cur;
    uint32_t o;
    int64_t id;
    if (T->nodes >= T->limit) {
        ta_gc(T);
        if (T->nodes >= T->limit) return TA_ELIMIT;
    }
    if (!s || s->n == TA_SEG) {
        int st = ta_new_seg(T);
        if (st != TA_OK) return st;
        s = T->cur;
    }
    o = s->n++;
    s->op[o] = (uint8_t)op; s->x[o] = x; s->aux[o] = aux;
    s->val[o] = val; s->adj[o] = 0.0;
    if (++T->nodes > T->peak) T->peak = T->nodes;
    id = (int64_t)((T->tag << 32) | TA_REF(s, o));
    return (T->cur_token && T->tag == TA_OWNER()) ? id : TA_NEWSEG - id;
}

/* --------------------------------------------------------------- lookup */

int ta_resolve(ta_tape *T, int64_t id, ta_seg **ps, uint32_t *po)
{
    uint32_t ref, k;
    ta_seg *s;
    if (id < 0) return TA_EBADID;
    if (((uint64_t)id >> 32) != T->tag) return TA_ETHREAD;
    ref = (uint32_t)id; k = ref >> TA_SHIFT;
    if (k >= T->nslots || !(s = T->segs[k]) || TA_OFF(ref) >= s->n) return TA_EBADID;
    *ps = s; *po = TA_OFF(ref);
    return TA_OK;
}

int ta_check(int64_t id)
{
    ta_tape *T = ta_self();
    ta_seg *s; uint32_t o;
    return T ? ta_resolve(T, id, &s, &o) : TA_ENOMEM;
}

/* ------------------------------------------------------- recording ops */

static int64_t ta_record(int op, int kind, int64_t x, double y, int64_t yid)
{
    ta_tape *T = ta_self();
    ta_seg *sx, *sy;
    uint32_t ox, oy;
    double vx, vy = y, r;
    ta_aux aux;
    int st;
    if (!T) return TA_ENOMEM;
    if (op < 0 || op >= TA_NOPS || ta_kinds[op] != kind) return TA_EBADOP;
    if ((st = ta_resolve(T, x, &sx, &ox)) != TA_OK) return st;
    vx = sx->val[ox];
    aux.c = y;
    if (kind == TA_K_BIN) {
        if ((st = ta_resolve(T, yid, &sy, &oy)) != TA_OK) return st;
        vy = sy->val[oy];
        aux.y = (uint32_t)yid;
    }
    if ((st = ta_forward(op, vx, vy, &r)) != TA_OK) {
        T->err_op = op; T->err_x = vx; T->err_y = vy;
        return st;
    }
    return ta_append(T, op, (uint32_t)x, aux, r);
}

int64_t ta_op1(int op, int64_t x)           { return ta_record(op, TA_K_UN, x, 0.0, 0); }
int64_t ta_op2(int op, int64_t x, int64_t y) { return ta_record(op, TA_K_BIN, x, 0.0, y); }
int64_t ta_opc(int op, int64_t x, double c)  { return ta_record(op, TA_K_CST, x, c, 0); }

int64_t ta_leaf(double x)
{
    ta_tape *T = ta_self();
    ta_aux aux;
    if (!T) return TA_ENOMEM;
    aux.c = 0.0;
    return ta_append(T, TA_LEAF, 0, aux, x);
}

int ta_last_error(int *op, double *x, double *y)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    *op = T->err_op; *x = T->err_x; *y = T->err_y;
    return TA_OK;
}

/* ------------------------------------------------------ node accessors */

double ta_val(int64_t id)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o;
    return (T && ta_resolve(T, id, &s, &o) == TA_OK) ? s->val[o] : NAN;
}

double ta_adj(int64_t id)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o;
    return (T && ta_resolve(T, id, &s, &o) == TA_OK) ? s->adj[o] : NAN;
}

int ta_set_val(int64_t id, double x)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve(T, id, &s, &o)) == TA_OK) s->val[o] = x;
    return st;
}

int ta_set_adj(int64_t id, double x)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve(T, id, &s, &o)) == TA_OK) s->adj[o] = x;
    return st;
}

int ta_node(int64_t id, int *op, int64_t *x, int64_t *y, double *c)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int st, k;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve(T, id, &s, &o)) != TA_OK) return st;
    *op = s->op[o] & TA_OPMASK; k = ta_kinds[*op];
    *x = k == TA_K_LEAF ? -1 : (int64_t)((T->tag << 32) | s->x[o]);
    *y = k == TA_K_BIN ? (int64_t)((T->tag << 32) | s->aux[o].y) : -1;
    *c = k == TA_K_CST ? s->aux[o].c : 0.0;
    return TA_OK;
}

/* ------------------------------------------------------ Python tokens */

int ta_ack(uint32_t slot, int current)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    if (slot >= T->nslots || !T->segs[slot]) return TA_EBADID;
    T->segs[slot]->owned++;
    if (current && T->segs[slot] == T->cur) T->cur_token = 1;
    TA_OWNER_CLAIM(T->tag);
    return T->tag == TA_OWNER();
}

int ta_release(uint32_t slot, int current)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    if (slot >= T->nslots || !T->segs[slot] || T->segs[slot]->owned <= 0) return TA_EBADID;
    T->segs[slot]->owned--;
    if (current && T->segs[slot] == T->cur) T->cur_token = 0;
    return TA_OK;
}

/* --------------------------------------------------------------- stats */

int ta_stats(ta_stats_t *out)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    out->nodes = T->nodes;
    out->segments = T->norder;
    out->capacity = (uint64_t)T->norder * TA_SEG;
    out->bytes = (uint64_t)(T->norder + (T->spare != NULL)) * sizeof(ta_seg)
               + (uint64_t)T->capslots * (sizeof(ta_seg *) + 2 * sizeof(uint32_t))
               + sizeof *T;
    out->collections = T->collections;
    out->limit = T->limit == UINT64_MAX ? 0 : T->limit;
    out->peak_nodes = T->peak;
    return TA_OK;
}

int ta_set_limit(uint64_t max_nodes)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    T->limit = max_nodes ? max_nodes : UINT64_MAX;
    return TA_OK;
}
