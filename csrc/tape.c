/* tape.c: the arena.  Per-thread tapes, segment allocation, holds, node
 * append, recording, lookups from Python ids, and reclamation of segments
 * nothing can reach.
 *
 * Reclamation: a segment is held while anything Python can reach a node
 * through holds it (tapead.h: holds).  A node is live if its segment is
 * held or a live node uses it, and since inputs precede their users one
 * pass from newest to oldest decides it.  Segments with no live node are
 * freed; dead nodes in kept segments become DEAD so nothing ever follows
 * their (possibly dangling) inputs.  The pass runs when the number of
 * segments doubles since the last one, so it costs amortised O(1) per node.
 *
 * Lifetime: C owns every tape.  A tape counts one reference for its thread
 * (dropped by a thread-exit destructor) and one per hold; whoever drops
 * the last frees it, in whatever thread that happens.  No Python object
 * owns a tape, so nothing in Python (greenlets sharing a thread, a module
 * reloaded, a thread-local cleared early) can free one under running code. */
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <float.h>
#include "tapead.h"
#include "ops.h"

#if defined(_MSC_VER)
#  define TA_TLS __declspec(thread)
static volatile LONG ta_tagctr = 0;
static uint64_t ta_next_tag(void) { return (uint64_t)(uint32_t)InterlockedIncrement(&ta_tagctr); }
static volatile LONG64 ta_alive = 0;
#  define TA_ALIVE(d) InterlockedAdd64(&ta_alive, (d))
#elif defined(__GNUC__) || defined(__clang__)
#  include <pthread.h>
#  define TA_TLS __thread
static uint32_t ta_tagctr = 0;
static uint64_t ta_next_tag(void) { return __atomic_add_fetch(&ta_tagctr, 1u, __ATOMIC_RELAXED); }
static int64_t ta_alive = 0;
#  define TA_ALIVE(d) __atomic_add_fetch(&ta_alive, (d), __ATOMIC_RELAXED)
#else
#  error "tapead needs thread-local storage and an atomic increment for this compiler"
#endif

#define TA_GC_MIN 4u             /* never collect below this many segments: a
                                    tiny live set keeps only a few segments */

static TA_TLS ta_tape *ta_tls = NULL;

static void ta_tape_free(ta_tape *T);
static int ta_new_seg(ta_tape *T);

/* Drop one reference to the thread's tape R; the last one frees it. */
static void ta_tape_unref(ta_tape *R)
{
    if (TA_ATOMIC_ADD64(&R->refs, -1) == 0) ta_tape_free(R);
}

/* ---------------------------------------------------------------- tapes */

/* The thread's reference: a POSIX thread-exit destructor drops it.  (MSVC
 * builds have no such destructor: an exited thread's tape is kept.) */
#if !defined(_MSC_VER)
static pthread_key_t ta_exit_key;
static pthread_once_t ta_exit_once = PTHREAD_ONCE_INIT;
static int ta_exit_ok = 0;
static void ta_thread_exit(void *tape)
{
    if (ta_tls == tape) ta_tls = NULL;
    TA_ATOMIC_ADD32(&((ta_tape *)tape)->exited, 1u);
    ta_tape_unref((ta_tape *)tape);
}
static void ta_exit_key_make(void) { ta_exit_ok = pthread_key_create(&ta_exit_key, ta_thread_exit) == 0; }
static void ta_exit_watch(ta_tape *T)
{
    pthread_once(&ta_exit_once, ta_exit_key_make);
    if (ta_exit_ok) pthread_setspecific(ta_exit_key, T);
}
#else
static void ta_exit_watch(ta_tape *T) { (void)T; }
#endif

static ta_tape *ta_tape_new(ta_tape *root)
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

ta_tape *ta_self(void)
{
    if (!ta_tls && (ta_tls = ta_tape_new(NULL)) != NULL) ta_exit_watch(ta_tls);
    return ta_tls;
}

int64_t ta_tapes_alive(void) { return TA_ALIVE(0); }

static void ta_tape_free(ta_tape *T)
{
    uint32_t k;
    for (k = 0; k < T->nslots; k++) if (T->segs[k]) ta_seg_free(T->segs[k]);
    if (T->spare) ta_seg_free(T->spare);
    free(T->segs); free(T->freeslots); free(T->order);
    if (T->ng) ta_tape_free(T->ng);
    ta_guards_free(T);
    ta_custom_free_all(T);
    free(T);
    TA_ALIVE(-1);
}

/* ---------------------------------------------------------------- holds */

void ta_unhold_seg(ta_seg *s)
{
    ta_tape *R = s->tape->root;
    TA_ATOMIC_ADD32(&s->owned, (uint32_t)-1);
    ta_tape_unref(R);
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

int ta_cur_hold(int arena, ta_seg **box, int64_t *key)
{
    ta_tape *T = ta_self();
    int st;
    if (!box || *box || !key) return TA_EARG;
    if (!T) return TA_ENOMEM;
    if (arena) {
        if (!T->ng && !(T->ng = ta_tape_new(T))) return TA_ENOMEM;
        T = T->ng;
    }
    /* room for any one record, else ta_record_at would send the caller
     * back here for the same segment forever */
    if ((!T->cur || T->cur->n + TA_MAXREC > TA_SEG) && (st = ta_new_seg(T)) != TA_OK) return st;
    ta_hold(T->cur);
    *box = T->cur;
    *key = TA_KEY(T, T->cur);
    return TA_OK;
}

size_t ta_seg_bytes(void) { return sizeof(ta_seg); }

double ta_peek(ta_seg *s, uint32_t off, int what)
{
    if (!s || off >= TA_SEG) return NAN;
    return what ? s->adj[off] : s->val[off];
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

static void ta_free_seg(ta_tape *T, ta_seg *s)
{
    T->segs[s->slot] = NULL;
    T->freeslots[T->nfree++] = s->slot;
    T->nodes -= s->n;
    if (!T->spare) T->spare = s; else ta_seg_free(s);
}

int ta_gc(ta_tape *T)
{
    uint32_t p, w = 0, freed = 0;
    if (T->sw) return 0;          /* a Python rule is running inside backward() */
    for (p = T->norder; p-- > 0;) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t i, live = 0;
        int held = TA_ATOMIC_LOAD32(&s->owned) != 0;
        for (i = s->n; i-- > 0;) {
            uint8_t b = s->op[i];
            uint8_t op = (uint8_t)(b & TA_OPMASK);
            if (held || (b & TA_LIVE)) {
                uint8_t k = ta_kinds[op];
                live++;
                if (k == TA_K_NARY) {          /* a custom node keeps its inputs, too */
                    const ta_cnode *e = ta_cnode_of(T, s, i);
                    uint32_t a;
                    for (a = 0; a < e->n; a++) ta_mark_live(T, e->in[a]);
                } else if (k != TA_K_LEAF) ta_mark_live(T, s->x[i]);
                if (k == TA_K_BIN) ta_mark_live(T, s->aux[i].y);
                s->op[i] = op;
            } else {
                if (op == TA_CUSTOM) ta_custom_release(T, s, i);   /* its entry dies with it */
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

/* tapead.collect(): the tape and its no_grad arena, now */
int ta_collect(void)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    return ta_gc(T) + (T->ng ? ta_gc(T->ng) : 0);
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

int64_t ta_append(ta_tape *T, int op, uint32_t x, ta_aux aux, double val)
{
    ta_seg *s = T->cur;
    uint32_t o;
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
    return (int64_t)((T->tag << 32) | TA_REF(s, o));
}

/* --------------------------------------------------------------- lookup */

static int ta_resolve_in(ta_tape *T, int64_t id, ta_seg **ps, uint32_t *po)
{
    uint32_t ref = (uint32_t)id, k = ref >> TA_SHIFT;
    ta_seg *s;
    if (k >= T->nslots || !(s = T->segs[k]) || TA_OFF(ref) >= s->n) return TA_EBADID;
    *ps = s; *po = TA_OFF(ref);
    return TA_OK;
}

int ta_resolve(ta_tape *T, int64_t id, ta_seg **ps, uint32_t *po)
{
    uint64_t tag;
    if (id < 0) return TA_EBADID;
    tag = (uint64_t)id >> 32;
    if (tag == T->tag) return ta_resolve_in(T, id, ps, po);
    return (T->ng && tag == T->ng->tag) ? TA_ENOGRAD : TA_ETHREAD;
}

int ta_resolve_any(ta_tape *T, int64_t id, ta_seg **ps, uint32_t *po, int *ng)
{
    *ng = 0;
    if (id >= 0 && T->ng && ((uint64_t)id >> 32) == T->ng->tag) {
        *ng = 1;
        return ta_resolve_in(T->ng, id, ps, po);
    }
    return ta_resolve(T, id, ps, po);
}

int ta_check(int64_t id)
{
    ta_tape *T = ta_self();
    ta_seg *s; uint32_t o; int ng;
    return T ? ta_resolve_any(T, id, &s, &o, &ng) : TA_ENOMEM;
}

/* ------------------------------------------------------- recording ops */

static int ta_no_grad_arena(ta_tape *T)
{
    if (!T->ng && !(T->ng = ta_tape_new(T))) return TA_ENOMEM;
    return TA_OK;
}

/* May `need` nodes be appended to D for a caller holding segment `key`?
 * Only into D's current segment, if it is that one and has room. */
static int ta_dest_ok(const ta_tape *D, int64_t key, uint32_t need)
{
    const ta_seg *s = D->cur;
    return key == TA_NOKEY || (s && s->n + need <= TA_SEG && TA_KEY(D, s) == key);
}

/* An input from the no_grad arena enters the graph as a fresh leaf holding
 * its value (a constant, as a detached tensor would be).  *ref gets it. */
static int ta_promote(ta_tape *T, double v, uint32_t *ref)
{
    ta_aux aux;
    int64_t id;
    aux.c = 0.0;
    id = ta_append(T, TA_LEAF, 0, aux, v);
    if (id < 0) return (int)id;
    *ref = (uint32_t)id;
    return TA_OK;
}

/* The rare case of ta_record_at: inputs from the no_grad arena enter as
 * fresh leaves, appended with the op in one bulk step (the collector must
 * not see a promoted leaf before the op that uses it). */
static int64_t ta_record_promoted(ta_tape *T, int op, ta_seg *sx, uint32_t ox, ta_seg *sy,
                                  uint32_t oy, int xng, int yng, ta_aux aux, double r)
{
    uint32_t xref = TA_REF(sx, ox);
    ta_bulk bk;
    int st;
    int64_t id;
    if ((st = ta_bulk_begin(T, 3, &bk)) != TA_OK) return st;
    if (xng) st = ta_promote(T, sx->val[ox], &xref);
    if (st == TA_OK && yng) {
        if (sx == sy && ox == oy) aux.y = xref;
        else st = ta_promote(T, sy->val[oy], &aux.y);
    }
    id = st == TA_OK ? ta_append(T, op, xref, aux, r) : st;
    ta_bulk_end(T, &bk, id < 0);
    return id;
}

int64_t ta_record_at(ta_tape *T, int op, ta_seg *sx, uint32_t ox, ta_seg *sy, uint32_t oy,
                     double c, int64_t key, ta_seg **where)
{
    int kind = ta_kinds[op], xng = sx->tape != T, yng = 0, st;
    double vx = sx->val[ox], vy = c, r;
    ta_aux aux;
    ta_tape *D = T;
    int64_t id;
    if (op == TA_DIVC) {                  /* x / c is micrograd's x * c**-1, to the bit, */
        volatile double m1 = -1.0;        /* where c**-1 is a normal float (libm's pow: a */
        double k = pow(c, m1);            /* constant -1 would let the compiler use 1/c)  */
        if (isfinite(k) && fabs(k) >= DBL_MIN) { op = TA_MULC; c = k; }
    }
    vy = c;
    aux.c = c;
    if (kind == TA_K_BIN) {
        vy = sy->val[oy];
        yng = sy->tape != T;
        aux.y = TA_REF(sy, oy);
    }
    st = ta_forward(op, vx, vy, &r);
    if (st == TA_OK && T->anomaly && !isfinite(r)) st = TA_EANOMALY;
    if (st != TA_OK) {
        T->err_op = op; T->err_x = vx; T->err_y = vy;
        return st;
    }
    if (T->nograd) {                      /* compute, record nothing */
        if ((st = ta_no_grad_arena(T)) != TA_OK) return st;
        D = T->ng;
        if (!ta_dest_ok(D, key, 1)) return TA_NEEDNG;
        aux.c = 0.0;
        id = ta_append(D, TA_LEAF, 0, aux, r);
    } else {
        if (!ta_dest_ok(T, key, 1u + (uint32_t)xng + (uint32_t)yng)) return TA_NEEDSEG;   /* <= TA_MAXREC */
        id = (xng || yng) ? ta_record_promoted(T, op, sx, ox, sy, oy, xng, yng, aux, r)
                          : ta_append(T, op, TA_REF(sx, ox), aux, r);
    }
    if (id >= 0) *where = D->cur;         /* a new node is always in the current segment */
    return id;
}

int64_t ta_ng_leaf(ta_tape *T, double x, int64_t key, ta_seg **where)
{
    ta_aux aux;
    int64_t id;
    int st;
    if ((st = ta_no_grad_arena(T)) != TA_OK) return st;
    if (!ta_dest_ok(T->ng, key, 1)) return TA_NEEDNG;
    aux.c = 0.0;
    id = ta_append(T->ng, TA_LEAF, 0, aux, x);
    if (id >= 0) *where = T->ng->cur;
    return id;
}

int64_t ta_leaf_at(ta_tape *T, double x, int64_t key, ta_seg **where)
{
    ta_aux aux;
    int64_t id;
    if (!ta_dest_ok(T, key, 1)) return TA_NEEDSEG;
    aux.c = 0.0;
    id = ta_append(T, TA_LEAF, 0, aux, x);
    if (id >= 0) *where = T->cur;
    return id;
}

/* The cffi front's recording calls: resolve the ids, then ta_record_at. */
static int64_t ta_record_ids(int op, int kind, int64_t x, double c, int64_t y, int64_t key)
{
    ta_tape *T = ta_self();
    ta_seg *sx, *sy = NULL, *where;
    uint32_t ox, oy = 0;
    int st, ng;
    if (!T) return TA_ENOMEM;
    if (op < 0 || op >= TA_NOPS || ta_kinds[op] != kind) return TA_EBADOP;
    if ((st = ta_resolve_any(T, x, &sx, &ox, &ng)) != TA_OK) return st;
    if (kind == TA_K_BIN && (st = ta_resolve_any(T, y, &sy, &oy, &ng)) != TA_OK) return st;
    return ta_record_at(T, op, sx, ox, sy, oy, c, key, &where);
}

int64_t ta_op1(int op, int64_t x, int64_t key)            { return ta_record_ids(op, TA_K_UN, x, 0.0, 0, key); }
int64_t ta_op2(int op, int64_t x, int64_t y, int64_t key) { return ta_record_ids(op, TA_K_BIN, x, 0.0, y, key); }
int64_t ta_opc(int op, int64_t x, double c, int64_t key)  { return ta_record_ids(op, TA_K_CST, x, c, 0, key); }

int64_t ta_leaf(double x, int64_t key)
{
    ta_tape *T = ta_self();
    ta_seg *where;
    if (!T) return TA_ENOMEM;
    return ta_leaf_at(T, x, key, &where);
}

int ta_bulk_begin(ta_tape *T, uint64_t need, ta_bulk *bk)
{
    if (T->norder >= T->gc_at) ta_gc(T);
    if (T->nodes > T->limit || need > T->limit - T->nodes) {
        ta_gc(T);                 /* garbage does not count against the limit (as in ta_append) */
        if (T->nodes > T->limit || need > T->limit - T->nodes) return TA_ELIMIT;
    }
    bk->gc_at = T->gc_at;
    T->gc_at = UINT32_MAX;
    ta_tell(T, &bk->start);
    return TA_OK;
}

void ta_bulk_end(ta_tape *T, const ta_bulk *bk, int failed)
{
    if (failed) ta_rollback(T, &bk->start);
    T->gc_at = bk->gc_at;
}

void ta_tell(const ta_tape *T, ta_pos *p)
{
    p->norder = T->norder;
    p->cur_n = T->cur ? T->cur->n : 0;
    p->nodes = T->nodes;
}

/* Custom nodes among the nodes a rollback drops release their entries. */
static void ta_rollback_custom(ta_tape *T, ta_seg *s, uint32_t from)
{
    uint32_t i;
    if (!T->cn) return;
    for (i = from; i < s->n; i++)
        if ((s->op[i] & TA_OPMASK) == TA_CUSTOM) { ta_custom_release(T, s, i); s->op[i] = TA_DEAD; }
}

void ta_rollback(ta_tape *T, const ta_pos *p)
{
    uint32_t k;
    for (k = p->norder; k < T->norder; k++) ta_rollback_custom(T, T->segs[T->order[k]], 0);
    if (p->norder && p->norder <= T->norder)
        ta_rollback_custom(T, T->segs[T->order[p->norder - 1]], p->cur_n);
    while (T->norder > p->norder)           /* segments opened since: no token holds them */
        ta_free_seg(T, T->segs[T->order[--T->norder]]);
    T->cur = T->norder ? T->segs[T->order[T->norder - 1]] : NULL;
    if (T->cur) T->cur->n = p->cur_n;       /* the newest segment is always the current one */
    T->nodes = p->nodes;
}

int64_t ta_leaves(const double *x, size_t n, int64_t *h)
{
    ta_tape *T = ta_self();
    int64_t *ids;
    ta_aux aux;
    size_t i;
    ta_bulk bk;
    int st;
    if (!ta_held_fits(h, n) || (n && !x)) return TA_EARG;
    if (!T) return TA_ENOMEM;
    ids = TA_HELD_IDS(h);
    if ((st = ta_bulk_begin(T, n, &bk)) != TA_OK) return st;
    aux.c = 0.0;
    for (i = 0; i < n; i++) {
        int64_t id = ta_append(T, TA_LEAF, 0, aux, x[i]);
        if (id < 0) {                          /* out of memory: all or nothing */
            ta_bulk_end(T, &bk, 1);
            return id;
        }
        ids[i] = id;
    }
    ta_held_take(T, h, n);
    ta_bulk_end(T, &bk, 0);
    return (int64_t)n;
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
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int ng;
    return (T && ta_resolve_any(T, id, &s, &o, &ng) == TA_OK) ? s->val[o] : NAN;
}

double ta_adj(int64_t id)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int ng;
    return (T && ta_resolve_any(T, id, &s, &o, &ng) == TA_OK) ? ta_adj_get(T, s, o) : NAN;
}

int ta_set_val(int64_t id, double x)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int st, ng;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve_any(T, id, &s, &o, &ng)) == TA_OK) s->val[o] = x;
    return st;
}

int ta_set_adj(int64_t id, double x)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int st, ng;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve_any(T, id, &s, &o, &ng)) == TA_OK) ta_adj_put(T, s, o, x);
    return st;
}

int ta_node(int64_t id, int *op, int64_t *x, int64_t *y, double *c)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int st, k;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve(T, id, &s, &o)) != TA_OK) return st;
    *op = s->op[o] & TA_OPMASK; k = ta_kinds[*op];
    *x = (k == TA_K_LEAF || k == TA_K_NARY) ? -1 : (int64_t)((T->tag << 32) | s->x[o]);
    *y = k == TA_K_BIN ? (int64_t)((T->tag << 32) | s->aux[o].y) : -1;
    *c = k == TA_K_CST ? s->aux[o].c : 0.0;
    return TA_OK;
}

int64_t ta_node_stamp(int64_t id)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int st, ng;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve_any(T, id, &s, &o, &ng)) != TA_OK) return st;
    return (int64_t)(s->stamp & INT64_MAX);
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

/* ------------------------------------------------------------- modes */

int ta_nograd(int delta)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    if (T->nograd + delta < 0) return TA_EMODE;
    return T->nograd += delta;
}

int ta_anomaly(int delta)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    if (T->anomaly + delta < 0) return TA_EMODE;
    return T->anomaly += delta;
}

int ta_mode_enter(ta_mode_tok *tok, int mode)
{
    ta_tape *T = ta_self();
    int *depth;
    if (!T) return TA_ENOMEM;
    if (!tok || tok->mode || (mode != 1 && mode != 2)) return TA_EARG;
    depth = mode == 1 ? &T->nograd : &T->anomaly;
    if (*depth == INT_MAX) return TA_EARG;
    tok->tag = T->tag;
    tok->mode = mode;
    return ++*depth;
}

void ta_mode_leave(ta_mode_tok *tok)
{
    ta_tape *T = ta_tls;               /* never creates a tape */
    int mode;
    if (!tok || !tok->mode) return;
    mode = tok->mode;
    tok->mode = 0;
    if (!T || T->tag != tok->tag) return;    /* another thread's count: not ours to touch */
    if (mode == 1 && T->nograd > 0) T->nograd--;
    if (mode == 2 && T->anomaly > 0) T->anomaly--;
}

uint64_t ta_nograd_nodes(void)
{
    ta_tape *T = ta_self();
    return (T && T->ng) ? T->ng->nodes : 0;
}

/* Every invariant the sweeps rely on: order[]/pos consistent, counts add up,
 * and each input of a non-DEAD node exists and precedes it. */
int ta_validate(void)
{
    ta_tape *T = ta_self();
    uint32_t p, i;
    uint64_t nodes = 0;
    if (!T) return TA_ENOMEM;
    for (p = 0; p < T->norder; p++) {
        uint32_t k = T->order[p];
        ta_seg *s;
        if (k >= T->nslots || !(s = T->segs[k]) || s->pos != p || s->slot != k || s->n > TA_SEG)
            return TA_ECORRUPT;
        nodes += s->n;
        for (i = 0; i < s->n; i++) {
            int op = s->op[i] & TA_OPMASK, kind, a;
            uint32_t refs[2];
            if (op >= TA_NOPS || (s->op[i] & (TA_MARK | TA_LIVE))) return TA_ECORRUPT;
            kind = ta_kinds[op];
            if (kind == TA_K_NARY) {
                const ta_cnode *e;
                if (!T->cn || s->x[i] >= T->cn->n || (e = ta_cnode_of(T, s, i))->state != 1) return TA_ECORRUPT;
                for (a = 0; a < (int)e->n; a++) {
                    uint32_t r = e->in[a], rk = r >> TA_SHIFT;
                    ta_seg *rs;
                    if (rk >= T->nslots || !(rs = T->segs[rk]) || TA_OFF(r) >= rs->n) return TA_ECORRUPT;
                    if (rs->pos > p || (rs == s && TA_OFF(r) >= i)) return TA_ECORRUPT;
                }
                continue;
            }
            refs[0] = s->x[i]; refs[1] = s->aux[i].y;
            for (a = 0; a < (kind == TA_K_BIN ? 2 : kind == TA_K_LEAF ? 0 : 1); a++) {
                uint32_t r = refs[a], rk = r >> TA_SHIFT;
                ta_seg *rs;
                if (rk >= T->nslots || !(rs = T->segs[rk]) || TA_OFF(r) >= rs->n) return TA_ECORRUPT;
                if (rs->pos > p || (rs == s && TA_OFF(r) >= i)) return TA_ECORRUPT;
            }
        }
    }
    if (nodes != T->nodes || (T->cur && T->segs[T->cur->slot] != T->cur)) return TA_ECORRUPT;
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
