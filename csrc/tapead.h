/* tapead.h: internal layout of the tape, shared by tape.c, ops.c, sweep.c.
 *
 * A tape is a list of fixed-size segments, each a struct-of-arrays of
 * TA_SEG nodes.  Slots in the segment table are reused; the creation order
 * of segments (order[]) is what makes the tape a topological order: every
 * argument of a node lives in the same segment at a lower offset or in an
 * earlier segment.  Nodes never move, so a node id stays valid for as long
 * as its segment is held, and a Python token holds the segment. */
#ifndef TAPEAD_H
#define TAPEAD_H

#include <stdint.h>
#include <stddef.h>
#include "cdef.h"

#define TA_SEG   (1u << TA_SHIFT)
#define TA_MASK  (TA_SEG - 1u)
#define TA_OPMASK 0x3Fu          /* low 6 bits of op[]: the op code        */
#define TA_LIVE   0x40u          /* set by the collector's liveness pass   */
#define TA_MARK   0x80u          /* set on nodes reached by a reverse sweep */
#define TA_MAXSLOTS (1u << (32 - TA_SHIFT))

enum ta_kind { TA_K_LEAF, TA_K_UN, TA_K_BIN, TA_K_CST };

enum ta_op {
#define TA_OP(NAME, KIND, SYM) TA_##NAME,
#include "ops.def"
#undef TA_OP
    TA_NOPS
};

typedef union { double c; uint32_t y; } ta_aux;   /* constant or 2nd input */

typedef struct ta_seg {
    uint8_t  op[TA_SEG];
    uint32_t x[TA_SEG];          /* first input (node ref)                  */
    ta_aux   aux[TA_SEG];        /* second input or constant                */
    double   val[TA_SEG];
    double   adj[TA_SEG];
    uint32_t n;                  /* nodes filled                            */
    uint32_t pos;                /* index in tape->order                    */
    uint32_t slot;
    int      owned;              /* a Python token holds this segment       */
    uint32_t marked;             /* ta_backward: a node here awaits a visit */
} ta_seg;

typedef struct ta_tape {
    ta_seg  **segs;              /* by slot; NULL = free slot               */
    uint32_t  nslots, capslots;
    uint32_t *freeslots;  uint32_t nfree;     /* capacity = capslots        */
    uint32_t *order;      uint32_t norder;    /* live segments, oldest first; capacity = capslots */
    ta_seg   *cur;               /* segment being appended to               */
    ta_seg   *spare;             /* one freed segment kept for reuse        */
    int       cur_token;         /* Python's current token is for cur: new
                                    nodes in cur may take the fast path     */
    uint64_t  tag;
    uint64_t  nodes, peak, limit, collections;
    uint32_t  gc_at;             /* collect when norder reaches this        */
    int       err_op;  double err_x, err_y;   /* last forward error         */
    int       nograd;            /* > 0 inside tapead.no_grad()             */
    int       anomaly;           /* > 0 inside tapead.detect_anomaly()      */
    struct ta_tape *ng;          /* leaf-only arena for no_grad results     */
    struct ta_guards *guards;  /* replay.c: comparisons recorded as guards */
} ta_tape;

extern const uint8_t ta_kinds[TA_NOPS];

/* alloc.c: malloc, calloc and realloc, failable on demand by tests. */
void *ta_malloc(size_t n);
void *ta_calloc(size_t k, size_t n);
void *ta_realloc(void *p, size_t n);
ta_tape *ta_self(void);          /* this thread's tape, created on demand  */

/* ref <-> segment/offset; refs come from the tape itself, so unchecked. */
#define TA_SEGOF(T, ref) ((T)->segs[(ref) >> TA_SHIFT])
#define TA_OFF(ref)      ((ref) & TA_MASK)
#define TA_REF(s, off)   (((s)->slot << TA_SHIFT) | (uint32_t)(off))

/* Look up an id from Python: checks tag, slot and offset.  Only nodes of
 * T itself resolve; an id of T's no_grad arena gives TA_ENOGRAD. */
int ta_resolve(ta_tape *T, int64_t id, ta_seg **s, uint32_t *off);
/* As ta_resolve, but no_grad values resolve too (*ng set to 1 for them). */
int ta_resolve_any(ta_tape *T, int64_t id, ta_seg **s, uint32_t *off, int *ng);

int ta_gc(ta_tape *T);        /* reclaim; returns segments freed */

/* Append one node; returns its id or a negative status. */
int64_t ta_append(ta_tape *T, int op, uint32_t x, ta_aux aux, double val);

/* A place on the tape to go back to: a call that records many nodes and
 * fails midway (out of memory, a forward error) drops every node it
 * appended, so the tape is as it was (the house rule).  Only while the
 * collector is held off, and only for nodes no Python token holds yet. */
typedef struct { uint32_t norder, cur_n; uint64_t nodes; int cur_token; } ta_pos;
void ta_tell(const ta_tape *T, ta_pos *p);
void ta_rollback(ta_tape *T, const ta_pos *p);
/* Recording many nodes in one call: the nodes have no Python token until
 * the call returns, so the collector must not run meanwhile.  begin checks
 * that `need` more nodes fit under the limit (collecting first if not),
 * holds the collector off and notes where the tape ends; end lets the
 * collector run again and, if the call failed, rolls back to that end. */
typedef struct { uint32_t gc_at; ta_pos start; } ta_bulk;
int  ta_bulk_begin(ta_tape *T, uint64_t need, ta_bulk *bk);
void ta_bulk_end(ta_tape *T, const ta_bulk *bk, int failed);

/* replay.c: guards die with their nodes (called at the end of ta_gc) and
 * with the tape. */
void ta_guards_gc(ta_tape *T);
void ta_guards_free(ta_tape *T);

#endif
