/* tapead.h: internal layout of the tape, shared by every C file.
 *
 * A tape is a list of fixed-size segments, each a struct-of-arrays of
 * TA_SEG nodes.  Slots in the segment table are reused; the creation order
 * of segments (order[]) is what makes the tape a topological order: every
 * argument of a node lives in the same segment at a lower offset or in an
 * earlier segment.  Nodes never move, so a node stays valid for as long as
 * its segment is held.
 *
 * Holds.  Whatever Python can reach a node through holds the node's
 * segment: a C Value holds it once, a cffi-front segment token once,
 * and a call that hands Python new node ids holds once per id, in a held
 * list Python owns (cdef.h), before it returns.  A hold is taken in the
 * same C call that makes the node, so a node is never visible to Python
 * unheld, and it moves between Python's owners only inside one C call, so
 * an exception between two bytecodes can neither leak nor repeat one.
 * Holds also keep the thread's tape alive: the tape is freed by C when its
 * thread has exited and the last hold on it is dropped, from any thread. */
#ifndef TAPEAD_H
#define TAPEAD_H

#include <stdint.h>
#include <stddef.h>
#include "cdef.h"

#define TA_SEG   (1u << TA_SHIFT)
#define TA_MASK  (TA_SEG - 1u)
#define TA_MAXREC 3u             /* most nodes one recording call appends to one
                                    segment: an op and its two inputs promoted
                                    from the no_grad arena (ta_record_at) */
#define TA_OPMASK 0x3Fu          /* low 6 bits of op[]: the op code        */
#define TA_LIVE   0x40u          /* set by the collector's liveness pass   */
#define TA_MARK   0x80u          /* set on nodes reached by a reverse sweep */
#define TA_MAXSLOTS (1u << (32 - TA_SHIFT))
/* a variable of each thread's own (the thread's tape: thread.c) */
#if defined(_MSC_VER)
#  define TA_TLS __declspec(thread)
#elif defined(__GNUC__) || defined(__clang__)
#  define TA_TLS __thread
#endif
#define TA_NLAYERS 4u            /* most layers attached to one tape (ta_attach) */

enum ta_kind { TA_K_LEAF, TA_K_UN, TA_K_BIN, TA_K_CST, TA_K_NARY };   /* (sweep.c relies on this order) */

enum ta_op {
#define TA_OP(NAME, KIND, SYM, ...) TA_##NAME,
#include "ops.def"
#undef TA_OP
    TA_NOPS
};

typedef union { double c; uint32_t y; } ta_aux;   /* constant or 2nd input */

struct ta_seg {          /* typedef'd in cdef.h, where Python sees it as opaque */
    uint8_t  op[TA_SEG];
    uint32_t x[TA_SEG];          /* first input (node ref)                  */
    ta_aux   aux[TA_SEG];        /* second input or constant                */
    double   val[TA_SEG];
    double   adj[TA_SEG];
    struct ta_tape *tape;        /* the tape (or no_grad arena) it is in    */
    uint32_t n;                  /* nodes filled                            */
    uint32_t pos;                /* index in tape->order                    */
    uint32_t slot;
    uint32_t owned;              /* holds on it (atomic: dropped from any thread) */
    uint32_t marked;             /* ta_backward: a node here awaits a visit */
    uint32_t kept;               /* ta_gc: how many nodes here the collection keeps */
    uint64_t stamp;              /* unique per segment opened on its tape: a
                                    node is (stamp, offset) for the tape's life,
                                    while its id is reused once the slot is */
};

/* Segments are aligned to TA_SEG_ALIGN so a (segment, offset) pair packs
 * into one word: the C Value stores a node as seg | off. */
#define TA_SEG_ALIGN 4096u

struct ta_layer;
/* A layer attached to a tape (ta_attach): its hooks and its state. */
struct ta_attached { const struct ta_layer *layer; void *state; };

typedef struct ta_tape {
    ta_seg  **segs;              /* by slot; NULL = free slot               */
    uint32_t  nslots, capslots;
    uint32_t *freeslots;  uint32_t nfree;     /* capacity = capslots        */
    uint32_t *order;      uint32_t norder;    /* live segments, oldest first; capacity = capslots */
    ta_seg   *cur;               /* segment being appended to               */
    ta_seg   *spare;             /* one freed segment kept for reuse        */
    struct ta_tape *root;        /* the thread's tape: itself, or the owner of this no_grad arena */
    int64_t   refs;              /* root only (atomic): 1 while its thread lives, plus 1 per
                                    held segment, its own or its arena's */
    uint32_t  exited;            /* root only (atomic): its thread has ended */
    uint64_t  tag;
    uint64_t  stamps;            /* segments opened so far (ta_seg.stamp)   */
    uint64_t  nodes, peak, limit, collections;
    uint32_t  gc_at;             /* collect when norder reaches this        */
    int       err_op;  double err_x, err_y;   /* last forward error         */
    int       nograd;            /* > 0 inside tapead.no_grad()             */
    int       anomaly;           /* > 0 inside tapead.detect_anomaly()      */
    struct ta_tape *ng;          /* leaf-only arena for no_grad results     */
    uint32_t  gc_off;            /* > 0: a layer holds the collector off (a sweep
                                    paused to run Python): ta_gc frees nothing */
    uint32_t  nlayers;           /* layers attached (ta_attach), in layers[] */
    struct ta_attached layers[TA_NLAYERS];
    void     *spare_sub;         /* subtape.c: the last sub-tape's memory, kept for the next */
    size_t    spare_subcap;      /* (NULL while one holds it; at most TA_SUB_KEEP bytes) */
} ta_tape;

/* A node's place in tape order (segment position, offset), packed so that
 * earlier nodes compare smaller. */
static inline uint64_t ta_order(const ta_seg *s, uint32_t o)
{
    return ((uint64_t)s->pos << 32) | o;
}

extern const uint8_t ta_kinds[TA_NOPS];
extern const uint8_t ta_reads[TA_NOPS];    /* each op's RD_NAME (ops.h): what its d_ rule reads */

/* alloc.c: malloc, calloc, realloc and segments, failable on demand by tests. */
void *ta_malloc(size_t n);
void *ta_calloc(size_t k, size_t n);
void *ta_realloc(void *p, size_t n);
ta_seg *ta_seg_alloc(void);      /* aligned to TA_SEG_ALIGN */
void  ta_seg_free(ta_seg *s);

/* thread.c: the thread's tape. */
ta_tape *ta_self(void);          /* this thread's tape, created on demand  */
ta_tape *ta_self_if_any(void);   /* this thread's tape, or NULL: never creates one */

/* Atomic counters (holds are dropped from any thread): Windows' own on
 * Windows (MSVC has no __atomic builtins; mingw-w64 takes the same branch,
 * so that it is compiled where it can be checked), GCC's and Clang's
 * elsewhere. */
#if defined(_WIN32)
#  include <windows.h>
/* (functions, not expressions: a counter bumped as a statement leaves no unused value) */
static inline uint32_t ta_atomic_add32(volatile void *p, uint32_t d)
{ return (uint32_t)InterlockedExchangeAdd((volatile LONG *)p, (LONG)d) + d; }
static inline int64_t ta_atomic_add64(volatile void *p, int64_t d)
{ return (int64_t)InterlockedExchangeAdd64((volatile LONG64 *)p, (LONG64)d) + d; }
static inline uint32_t ta_atomic_load32(volatile void *p)
{ return (uint32_t)InterlockedCompareExchange((volatile LONG *)p, 0, 0); }
#  define TA_ATOMIC_ADD32(p, d) ta_atomic_add32((p), (uint32_t)(d))
#  define TA_ATOMIC_ADD64(p, d) ta_atomic_add64((p), (int64_t)(d))
#  define TA_ATOMIC_LOAD32(p) ta_atomic_load32(p)
#else
#  define TA_ATOMIC_ADD32(p, d) __atomic_add_fetch((p), (d), __ATOMIC_ACQ_REL)
#  define TA_ATOMIC_ADD64(p, d) __atomic_add_fetch((p), (d), __ATOMIC_ACQ_REL)
#  define TA_ATOMIC_LOAD32(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#endif

/* tape.c: the arena.  A new tape (root: NULL for a thread's own tape, else
 * the thread tape that owns this no_grad arena); dropping a reference to a
 * thread's tape, which frees it with the last. */
ta_tape *ta_tape_new(ta_tape *root);
void ta_tape_unref(ta_tape *R);

/* Holds (see the top of this file).  ta_hold: only in the tape's own
 * thread; ta_unhold: from any thread, and may free the whole tape. */
static inline void ta_hold(ta_seg *s)
{
    if (TA_ATOMIC_ADD32(&s->owned, 1u) == 1u)      /* the segment's first hold */
        TA_ATOMIC_ADD64(&s->tape->root->refs, 1);
}
void ta_unhold_seg(ta_seg *s);

/* Give node (s, o) `bit`, counting it in *pending if it had none. */
static inline void ta_mark(ta_seg *s, uint32_t o, uint8_t bit, uint64_t *pending)
{
    if (s->op[o] & bit) return;
    s->op[o] |= bit;
    ++*pending;
}

/* Held lists (cdef.h: what a bulk call hands to Python).  TA_HELD_IDS:
 * where a bulk call writes its ids; ta_held_fits: h can take n of them;
 * ta_held_take: drop what h still holds, then hold h's first n ids (fresh
 * nodes of T). */
#define TA_HELD_IDS(h) ((h) + 1)
int  ta_held_fits(const int64_t *h, size_t n);
void ta_held_take(ta_tape *T, int64_t *h, size_t n);

/* Open a new current segment for T (collecting first if due); free one
 * (its slot is reused; no hold may remain on it). */
int  ta_new_seg(ta_tape *T);
void ta_free_seg(ta_tape *T, ta_seg *s);
int  ta_gc(ta_tape *T);          /* reclaim; returns segments freed */

/* Layers.  A layer above the core that keeps per-tape state naming nodes
 * attaches it to the tape with its hooks, once, in the tape's own thread
 * (ta_attach; the layer's own lookup is ta_attached); the core calls them
 * at the moments below and never looks inside the state.  One registry,
 * one call site per moment, as CppAD's atomic functions reach its sweeps.
 * A hook may be NULL.
 *   dying      in every collection of T once it has decided what dies,
 *              before it frees anything: a node dies iff its op byte lacks
 *              TA_LIVE, and the dying nodes are still whole (op codes,
 *              inputs, their layer's entries), to drop what names them and
 *              read what they were; TA_MARK is the hook's to use (the
 *              collector clears every mark after it);
 *   collected  at the end of every collection of T;
 *   release    when T is freed, in whatever thread drops the last hold;
 *   inputs     the layer whose nodes are of kind NARY (at most one per
 *              tape): node i of s's inputs (refs, n of them), which the
 *              collector keeps live and ta_validate checks; NULL if the
 *              node has no sound entry;
 *   node_dead  node i of s, of kind NARY, dies (the collector, or a
 *              rollback): what the layer holds for it goes. */
struct ta_layer {
    void (*dying)(ta_tape *T, void *state);
    void (*collected)(ta_tape *T, void *state);
    void (*release)(ta_tape *T, void *state);
    const uint32_t *(*inputs)(const void *state, const ta_seg *s, uint32_t i, uint32_t *n);
    void (*node_dead)(void *state, ta_seg *s, uint32_t i);
};
/* Attach state to T for layer L: TA_OK, or TA_ELIMIT (TA_NLAYERS taken). */
int ta_attach(ta_tape *T, const struct ta_layer *L, void *state);
/* The layer whose nodes are of kind NARY, or NULL. */
static inline const struct ta_attached *ta_nary(const ta_tape *T)
{
    uint32_t k;
    for (k = 0; k < T->nlayers; k++)
        if (T->layers[k].layer->inputs) return &T->layers[k];
    return NULL;
}
/* The state layer L attached to T, or NULL. */
static inline void *ta_attached(const ta_tape *T, const struct ta_layer *L)
{
    uint32_t k;
    for (k = 0; k < T->nlayers; k++)
        if (T->layers[k].layer == L) return T->layers[k].state;
    return NULL;
}
/* Layer L's state on T replaced by state (L attached already). */
static inline void ta_reattach(ta_tape *T, const struct ta_layer *L, void *state)
{
    uint32_t k;
    for (k = 0; k < T->nlayers; k++)
        if (T->layers[k].layer == L) T->layers[k].state = state;
}

/* ref <-> segment/offset; refs come from the tape itself, so unchecked. */
#define TA_SEGOF(T, ref) ((T)->segs[(ref) >> TA_SHIFT])
#define TA_OFF(ref)      ((ref) & TA_MASK)
#define TA_REF(s, off)   (((s)->slot << TA_SHIFT) | (uint32_t)(off))

/* access.c: ids from Python.  Internal C works with refs; an id is what
 * Python sees: the tape's tag above a ref (cdef.h).  TA_ID makes one;
 * ta_resolve looks one up, checking tag, slot and offset.  Only nodes of
 * T itself resolve; an id of T's no_grad arena gives TA_ENOGRAD. */
#define TA_ID(T, ref) ((int64_t)(((uint64_t)(T)->tag << 32) | (uint32_t)(ref)))
/* (inline: callers loop over many ids; access.c: ta_resolve_miss, the
 * status of an id of no node of T) */
int ta_resolve_miss(const ta_tape *T, int64_t id);
static inline int ta_resolve_in(const ta_tape *T, int64_t id, ta_seg **ps, uint32_t *po)
{
    uint32_t ref = (uint32_t)id, k = ref >> TA_SHIFT;
    ta_seg *s;
    *ps = NULL; *po = 0;      /* (set on every path: the compiler sees them set) */
    if (k >= T->nslots || !(s = T->segs[k]) || TA_OFF(ref) >= s->n) return TA_EBADID;
    *ps = s; *po = TA_OFF(ref);
    return TA_OK;
}
static inline int ta_resolve(ta_tape *T, int64_t id, ta_seg **ps, uint32_t *po)
{
    if (id >= 0 && ((uint64_t)id >> 32) == T->tag) return ta_resolve_in(T, id, ps, po);
    *ps = NULL; *po = 0;
    return ta_resolve_miss(T, id);
}
/* As ta_resolve, on this thread's tape (*T): TA_ENOMEM where there is none. */
static inline int ta_resolve_here(int64_t id, ta_tape **T, ta_seg **ps, uint32_t *po)
{
    if (!(*T = ta_self())) { *ps = NULL; *po = 0; return TA_ENOMEM; }
    return ta_resolve(*T, id, ps, po);
}
/* As ta_resolve, but no_grad values resolve too (*ng set to 1 for them). */
static inline int ta_resolve_any(ta_tape *T, int64_t id, ta_seg **ps, uint32_t *po, int *ng)
{
    *ng = 0;
    if (id >= 0 && ((uint64_t)id >> 32) == T->tag) return ta_resolve_in(T, id, ps, po);
    if (id >= 0 && T->ng && ((uint64_t)id >> 32) == T->ng->tag) {
        *ng = 1;
        return ta_resolve_in(T->ng, id, ps, po);
    }
    *ps = NULL; *po = 0;
    return ta_resolve_miss(T, id);
}

/* sweep.c: ta_backward from node ro of segment rs, a node of T itself
 * (resolved, or held by the caller: the CPython front's Value). */
int ta_backward_at(ta_tape *T, ta_seg *rs, uint32_t ro);

/* record.c: appending nodes.  Append one node: ta_push gives its ref and
 * returns a status; ta_append, for callers that hand the node to Python,
 * returns its id or a negative status. */
int     ta_push(ta_tape *T, int op, uint32_t x, ta_aux aux, double val, uint32_t *ref);
int64_t ta_append(ta_tape *T, int op, uint32_t x, ta_aux aux, double val);
/* The one body of ta_append and ta_push, inline in each (and in
 * ta_record_at and nn.c's weighted sums): a call per recorded node is what
 * it saves. */
static inline int ta_put(ta_tape *T, int op, uint32_t x, ta_aux aux, double val, uint32_t *ref)
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
    *ref = TA_REF(s, o);
    return TA_OK;
}

/* The key of a segment: the id of its first node >> TA_SHIFT (tape tag
 * and slot).  A front pins a hold on a segment and passes its key; a node
 * is appended only if it lands in that very segment. */
#define TA_KEY(T, s) ((int64_t)(((T)->tag << (32 - TA_SHIFT)) | (s)->slot))
#define TA_NOKEY (-1)

/* Record one op of either front.  Inputs are resolved: (sx, ox) and, for
 * a binary op, (sy, oy); c is the constant of a CST op.  An input from
 * T's no_grad arena enters as a fresh leaf.  Under no_grad() the result is
 * a leaf of the arena.  key: TA_NOKEY, or the key of the segment the
 * caller holds; if the node would land elsewhere nothing is recorded and
 * the result is TA_NEEDSEG (main tape) or TA_NEEDNG (arena).  On success
 * *where is the result's segment (not held: the caller holds it).  On an
 * op error T->err_* say which op and inputs. */
int64_t ta_record_at(ta_tape *T, int op, ta_seg *sx, uint32_t ox, ta_seg *sy, uint32_t oy,
                     double c, int64_t key, ta_seg **where);
/* A new leaf on T's main tape (never the arena), with the same key rule. */
int64_t ta_leaf_at(ta_tape *T, double x, int64_t key, ta_seg **where);
/* A new leaf of T's no_grad arena (what an op gives under no_grad). */
int64_t ta_ng_leaf(ta_tape *T, double x, int64_t key, ta_seg **where);

/* A place on the tape to go back to: a call that records many nodes and
 * fails midway (out of memory, a forward error) drops every node it
 * appended, so the tape is as it was (the house rule).  Only while the
 * collector is held off, and only for nodes no Python token holds yet. */
typedef struct { uint32_t norder, cur_n; uint64_t nodes; } ta_pos;
void ta_tell(const ta_tape *T, ta_pos *p);
void ta_rollback(ta_tape *T, const ta_pos *p);
/* Recording many nodes in one call: the nodes are held only when the call
 * returns, so the collector must not run meanwhile.  begin collects if
 * the tape is due for it (a loop that records only through bulk calls
 * must still reclaim), checks that `need` more nodes fit under the limit
 * (collecting first if not), holds the collector off and notes where the
 * tape ends; end lets the collector run again and, if the call failed,
 * rolls back to that end.  A call that cannot tell its count beforehand
 * (higher.c) passes TA_BULK_UNSIZED: the limit is then lifted until end
 * (reaching it would collect) and the call checks bk->limit itself. */
typedef struct { uint32_t gc_at; uint64_t limit; ta_pos start; } ta_bulk;
#define TA_BULK_UNSIZED UINT64_MAX
int  ta_bulk_begin(ta_tape *T, uint64_t need, ta_bulk *bk);
void ta_bulk_end(ta_tape *T, const ta_bulk *bk, int failed);

#endif
