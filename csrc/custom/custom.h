/* custom.h: the n-ary nodes (kind NARY), a layer above the core
 * (custom.c): custom nodes (op CUSTOM: a value computed in Python, with
 * its partials or a Python rule) and take nodes (op TAKE: tapead.take,
 * take.c).  Their inputs live in a side table, the layer's state on each
 * tape (tapead.h: ta_attach), made with the tape's first such node; the
 * core reaches it only through the layer's hooks (a node's inputs, its
 * death, the tape's end).  Entries die with their nodes.  A node with a
 * Python rule has a key, never reused on its tape, by which Python finds
 * the rule (tapead/custom.py); C holds no Python object. */
#ifndef TAPEAD_CUSTOM_H
#define TAPEAD_CUSTOM_H
#include "tapead.h"

typedef struct ta_cnode {
    uint32_t n;                  /* inputs                                  */
    uint32_t namelen;            /* bytes of its name (UTF-8), at name      */
    uint32_t next;               /* free list link                          */
    uint32_t state;              /* 0 free, 1 live                          */
    int64_t  key;                /* its Python rule's key; 0: partials      */
    double  *d;                  /* n partials, or NULL (a Python rule)     */
    uint32_t *in;                /* n input refs                            */
    char    *name;               /* its op name, NUL-terminated; d (or in), in and
                                    name share one block, freed with the node */
} ta_cnode;

/* While backward() runs a custom node's Python rule: the node being
 * visited (tape order: ta_order) and the sweep's count of reached,
 * unvisited nodes.  .grad of an earlier node then reads and writes the
 * sweep's live adjoint (ta_adj_get / ta_adj_put); the collector (gc_off)
 * and every other sweep (ta_custom_busy) stay off. */
struct ta_sweep { uint64_t at; uint64_t *pending; int nan; };   /* nan: inside detect_anomaly(),
                                    the rule made an adjoint nan (ta_adj_put_sw) */

/* The layer's state on a tape. */
struct ta_custom {
    ta_cnode *e; uint32_t n, cap, freehead;   /* the side table, with its free list */
    int64_t   nextkey;
    uint64_t  live;              /* custom nodes alive (entries in use: live + takes) */
    uint64_t  takes;             /* take nodes alive                        */
    struct ta_sweep *sw;         /* set while backward() runs a Python rule */
    int64_t   err_node;          /* the custom node behind the last TA_ECUSTOM, or the
                                    one whose step gave the last sweep's TA_EANOMALY */
};
extern const struct ta_layer ta_custom_layer;

/* T's custom nodes, or NULL if it never had one. */
static inline struct ta_custom *ta_custom_if_any(const ta_tape *T)
{ return (struct ta_custom *)ta_attached(T, &ta_custom_layer); }
/* The entry of custom node i of s (T has custom nodes: it is one). */
static inline ta_cnode *ta_cnode_of(const ta_tape *T, const ta_seg *s, uint32_t i)
{ return &ta_custom_if_any(T)->e[s->x[i]]; }
/* Custom nodes alive on T. */
static inline uint64_t ta_custom_live(const ta_tape *T)
{ const struct ta_custom *C = ta_custom_if_any(T); return C ? C->live : 0; }
/* Whether backward() is running a Python rule on T (then no other sweep may start). */
static inline int ta_custom_busy(const ta_tape *T)
{ const struct ta_custom *C = ta_custom_if_any(T); return C && C->sw; }
/* Custom node ref is the one behind the status about to be returned
 * (TA_ECUSTOM, or a sweep's TA_EANOMALY): ta_custom_failed reports it. */
static inline void ta_custom_blame(ta_tape *T, uint32_t ref)
{ ta_custom_if_any(T)->err_node = TA_ID(T, ref); }

/* TA_EBUSY inside a Python rule; TA_ECUSTOM (ta_custom_blame) if a custom
 * node is behind the roots (one behind a guard that binds a replay:
 * ta_sub_replay); TA_ETAKE if a take node is and the caller has no case
 * for it (take = 0); TA_OK otherwise.  Free when the tape has none. */
int ta_plain(ta_tape *T, const int64_t *roots, size_t n, int take);
/* Append an n-ary node of op (TA_CUSTOM or TA_TAKE) with inputs in (n
 * refs of T's main tape, none of them a no_grad value) and its entry, all
 * or nothing: its id, or a status.  partials (n), key and name as
 * ta_custom_at; aux is the node's aux (TAKE: the candidate taken). */
int64_t ta_nary_append(ta_tape *T, int op, const uint32_t *in, uint32_t n, double value,
                       const double *partials, const char *name, uint32_t namelen, int64_t *key,
                       ta_aux aux);
/* A custom node: inputs are resolved refs of T's main tape.  Under
 * no_grad a leaf of the arena.  *where: its segment (not held).  seg:
 * TA_NOKEY, or the key of the segment the caller holds (ta_record_at's
 * rule: TA_NEEDSEG / TA_NEEDNG and nothing recorded if it would land
 * elsewhere). */
int64_t ta_custom_at(ta_tape *T, const uint32_t *in, uint32_t n, double value,
                     const double *partials, const char *name, uint32_t namelen, int64_t *key,
                     int64_t seg, ta_seg **where);
/* The reverse sweep at custom node i of s, whose rule is Python's: run it,
 * the sweep paused (struct ta_sweep; pending its count).  TA_OK,
 * TA_EPYTHON (it raised), or TA_EANOMALY (inside detect_anomaly(), it made
 * an adjoint nan). */
int ta_custom_rule_at(ta_tape *T, ta_seg *s, uint32_t i, uint64_t *pending);

/* .grad of node (s, o) as Python reads and sets it: the sweep's live
 * adjoint while a Python rule runs (struct ta_sweep), else adj[]. */
double ta_adj_get_sw(ta_tape *T, ta_seg *s, uint32_t o);
void   ta_adj_put_sw(ta_tape *T, ta_seg *s, uint32_t o, double v);
static inline double ta_adj_get(ta_tape *T, ta_seg *s, uint32_t o)
{ return ta_custom_busy(T) ? ta_adj_get_sw(T, s, o) : s->adj[o]; }
static inline void ta_adj_put(ta_tape *T, ta_seg *s, uint32_t o, double v)
{ if (ta_custom_busy(T)) ta_adj_put_sw(T, s, o, v); else s->adj[o] = v; }

/* The Python hook the sweep calls at a node with a Python rule (cffi
 * extern "Python+C", defined in tapead/custom.py): 0, or -1 if it raised. */
int ta_custom_rule(int64_t node, int64_t key);
/* The CPython front's direct route to the same Python function (set by
 * module.c's bind; NULL: use ta_custom_rule, the cffi callback). */
extern int (*ta_rule_hook)(int64_t node, int64_t key);

#endif
