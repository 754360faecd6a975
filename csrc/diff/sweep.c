/* sweep.c: the reverse sweep.
 *
 * One descending loop over the tape from the root: a node's adjoint is
 * final once every later node has been visited, so no sort, no recursion
 * and no Python.  Nodes reached from the root carry TA_MARK; an
 * intermediate's adjoint is zeroed when it is first reached (it holds this
 * pass's adjoint afterwards), a leaf's is not (leaves accumulate across
 * passes, as micrograd's zero_grad loop expects).  A segment is flagged
 * (ta_seg.marked) when a node in it is reached, so segments the pass never
 * reached (an earlier step's graph awaiting reclamation) cost one test
 * each.  Inside detect_anomaly() the first nan adjoint contribution stops
 * the sweep with TA_EANOMALY (adjoints then hold the partial sums of the
 * aborted pass).
 *
 * A node's local chain-rule step is its op's d_ rule (ops.h) times its
 * adjoint, given to its inputs: in the sweep by a case generated from the op
 * table (accumulating with marks, as above); in ta_step (v._backward(): one
 * node's step with plain accumulation, the lecture's manual backprop) by
 * ta_node_step.
 * An n-ary node (custom.h) is the sweep's one call into the layer above:
 * a take node gives its adjoint to the candidate it took; a custom node
 * with partials is stepped here in C; one with a Python rule makes
 * the sweep call ta_custom_rule_at, which tells the layer where the
 * sweep is, so that .grad inside the rule reads and writes this pass's
 * adjoints; if the rule raises, the sweep aborts as an anomaly does, and
 * inside detect_anomaly() so it does if the rule made an adjoint nan. */
#include <math.h>
#include "tapead.h"
#include "ops.h"
#include "custom.h"

/* Add v to the adjoint of node o of segment s.  On first arrival the node
 * is marked, its segment flagged, and an intermediate's adjoint is set
 * rather than added to (it holds only this pass's adjoint); returns 1 then,
 * else 0: the sweep adds it to its count of marked nodes in a register
 * (counted through a pointer, gcc kept the count on the stack, and every
 * node waited on a store and a reload of it). */
/* "Marked, or a leaf" in one compare: b - 1 wraps below for 0 (an unmarked
 * leaf) and is TA_MARK - 1 or more for a marked node, since the only other
 * bit, TA_LIVE, is clear outside the collector (which never runs inside a
 * sweep) and a leaf's op code is 0. */
typedef char ta_arrive_needs_leaf_zero[(TA_LEAF == 0 && (TA_OPMASK | TA_LIVE) == TA_MARK - 1u) ? 1 : -1];
static inline unsigned ta_arrive(ta_seg *s, uint32_t o, double v)
{
    uint8_t b = s->op[o];
    if ((uint8_t)(b - 1u) >= TA_MARK - 1u) { s->adj[o] += v; return 0; }
    s->op[o] = (uint8_t)(b | TA_MARK);
    s->marked = 1;
    s->adj[o] = 0.0 + v;  /* 0.0 + v: -0.0 becomes 0.0, as micrograd's 0 + v */
    return 1;
}

#if defined(__GNUC__) || defined(__clang__)
#  define TA_HOT_GIVE static inline __attribute__((always_inline))
#else
#  define TA_HOT_GIVE static inline
#endif
/* Add v to the adjoint of node ref: as the sweep does (pending non-NULL)
 * or plainly (ta_step). */
TA_HOT_GIVE void ta_give(ta_tape *T, uint32_t ref, double v, uint64_t *pending)
{
    ta_seg *s = TA_SEGOF(T, ref);
    if (pending) *pending += ta_arrive(s, TA_OFF(ref), v);
    else s->adj[TA_OFF(ref)] += v;
}

#if defined(__GNUC__) || defined(__clang__)
#  define TA_COLD static __attribute__((noinline))
#else
#  define TA_COLD static
#endif

/* The local step of built-in node i of segment s (kind UN, BIN or CST),
 * plainly accumulated (ta_step): each input's adjoint gets its partial
 * times g.  The partials are ops.h's, the same the other sweeps use. */
static void ta_node_step(ta_tape *T, ta_seg *s, uint32_t i, int op, int kind, double g)
{
    double dx, dy;
    if (ta_reads[op] & TA_RD_STOP) return;
    ta_partials_at(T, s, i, op, &dx, &dy);
    ta_give(T, s->x[i], dx * g, NULL);
    if (kind == TA_K_BIN) ta_give(T, s->aux[i].y, dy * g, NULL);
}

/* The same for a custom node with partials (custom.c): input k gets d_k g. */
TA_COLD int ta_cnode_step(ta_tape *T, const ta_cnode *e, double g, uint64_t *pending)
{
    uint32_t k;
    if (pending && T->anomaly)
        for (k = 0; k < e->n; k++) if (isnan(e->d[k] * g)) return TA_EANOMALY;
    for (k = 0; k < e->n; k++) ta_give(T, e->in[k], e->d[k] * g, pending);
    return TA_OK;
}

/* The same for a take node: the candidate it took gets g (its partial is
 * 1, the others' and the index's 0: nothing is given to them, not even
 * 0 * g, which an infinite g would make nan). */
TA_COLD int ta_take_step(ta_tape *T, const ta_seg *s, uint32_t i, const ta_cnode *e, double g,
                         uint64_t *pending)
{
    ta_give(T, e->in[1u + s->aux[i].y], g, pending);
    return TA_OK;
}

/* The sweep's step for each op, generated from the op table: one switch
 * on the op code does the dispatch and the step together, so the kind is a
 * constant in each case (no kind lookup, no second test for BIN) and each
 * case loads only the values its d_ rule reads.  g is node i's adjoint;
 * inside detect_anomaly() a nan contribution stops before any input is
 * given anything, as ta_node_step. */
#define TA_SW_IN(ref, sp, op_)  ta_seg *sp = segs[(ref) >> TA_SHIFT]; uint32_t op_ = TA_OFF(ref)
#define TA_SW_LEAF(NAME) continue;
#define TA_SW_NARY(NAME) goto stop;
#define TA_SW_UN(NAME) {                                                      \
        uint32_t xr = s->x[i]; TA_SW_IN(xr, sx, ox);                          \
        if (RD_##NAME & TA_RD_STOP) continue;                                 \
        d_##NAME(sx->val[ox], 0.0, s->val[i], &dx, &dy);                      \
        if (anomaly && isnan(dx * g)) goto stop;                              \
        pending += ta_arrive(sx, ox, dx * g);                                 \
        continue; }
#define TA_SW_CST(NAME) {                                                     \
        uint32_t xr = s->x[i]; TA_SW_IN(xr, sx, ox);                          \
        if (RD_##NAME & TA_RD_STOP) continue;                                 \
        d_##NAME(sx->val[ox], s->aux[i].c, s->val[i], &dx, &dy);              \
        if (anomaly && isnan(dx * g)) goto stop;                              \
        pending += ta_arrive(sx, ox, dx * g);                                 \
        continue; }
#define TA_SW_BIN(NAME) {                                                     \
        uint32_t xr = s->x[i], yr = s->aux[i].y;                              \
        if (RD_##NAME & TA_RD_STOP) continue;                                 \
        TA_SW_IN(xr, sx, ox); TA_SW_IN(yr, sy, oy);                           \
        d_##NAME(sx->val[ox], sy->val[oy], s->val[i], &dx, &dy);              \
        if (anomaly && (isnan(dx * g) || isnan(dy * g))) goto stop;           \
        pending += ta_arrive(sx, ox, dx * g);                                 \
        pending += ta_arrive(sy, oy, dy * g);                                 \
        continue; }

/* Sweep segment s down from node *at (exclusive) while marked nodes are
 * pending: returns 0 when the segment is done or nothing is pending, 1
 * with *at on a custom node (its mark cleared, its step not taken), 2 with
 * *at on the node whose contribution is nan (anomaly only; nothing given).
 * Instantiated twice, anomaly constant (ta_sweep_plain, ta_sweep_anomaly),
 * so the common sweep tests nothing for it; its few live values (segs, s,
 * i, pending) then stay in registers. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))
#endif
static inline int ta_sweep_seg(ta_seg *const *segs, ta_seg *s, uint32_t *at,
                               uint64_t *pendingp, const int anomaly)
{
    uint32_t i = *at;
    uint64_t pending = *pendingp;
    int ev = 0;
    while (pending && i-- > 0) {
        uint8_t b = s->op[i];
        double g, dx, dy;
        if (!(b & TA_MARK)) continue;
        s->op[i] = (uint8_t)(b & ~TA_MARK);
        pending--;
        g = s->adj[i];
        switch (b & TA_OPMASK) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: TA_SW_##KIND(NAME)
#include "ops.def"
#undef TA_OP
        default: continue;             /* (no such op is ever recorded) */
        }
    stop:
        ev = ta_kinds[b & TA_OPMASK] == TA_K_NARY ? 1 : 2;
        break;
    }
    *at = i;
    *pendingp = pending;
    return ev;
}
/* The two instances, out of line: inlined into ta_backward_at, they made
 * the deep chain's sweep 10% slower (gcc's allocation of the whole). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
static int ta_sweep_plain(ta_seg *const *segs, ta_seg *s, uint32_t *at, uint64_t *pending)
{
    return ta_sweep_seg(segs, s, at, pending, 0);
}
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
static int ta_sweep_anomaly(ta_seg *const *segs, ta_seg *s, uint32_t *at, uint64_t *pending)
{
    return ta_sweep_seg(segs, s, at, pending, 1);
}
#undef TA_SW_IN
#undef TA_SW_LEAF
#undef TA_SW_NARY
#undef TA_SW_UN
#undef TA_SW_CST
#undef TA_SW_BIN

int ta_backward(int64_t root)
{
    ta_tape *T;
    ta_seg *rs;
    uint32_t ro;
    int st;
    if ((st = ta_resolve_here(root, &T, &rs, &ro)) != TA_OK) return st;
    return ta_backward_at(T, rs, ro);
}

int ta_backward_at(ta_tape *T, ta_seg *rs, uint32_t ro)
{
    uint32_t p;
    uint64_t pending = 1;               /* marked nodes not yet visited, all segments */
    int st = TA_OK;
    if (ta_custom_busy(T)) return TA_EBUSY;   /* backward() inside a Python rule */

    rs->op[ro] |= TA_MARK;
    rs->marked = 1;
    rs->adj[ro] = 1.0;
    /* A node's mark is cleared when it is visited (no later node can reach
     * it again); a segment no reached node lives in is skipped whole (its
     * flag is clear: only nodes of its own or of later segments can flag
     * it, so once it is swept it stays clear); the sweep ends when no marked
     * node is left.  (A flag, not a count: a store per arrival instead of a
     * read-modify-write chain on the segment header.) */
    for (p = rs->pos + 1; pending && p-- > 0;) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t i = (s == rs) ? ro + 1 : s->n;
        if (!s->marked) continue;
        if (st != TA_OK) {                 /* aborted: only clear marks */
            for (i = 0; i < s->n; i++)
                if (s->op[i] & TA_MARK) { s->op[i] &= (uint8_t)~TA_MARK; pending--; }
            s->marked = 0;
            continue;
        }
        for (;;) {
            /* T->segs and T->anomaly read again each time: a Python rule
             * may record (growing segs) or enter detect_anomaly() */
            int ev = T->anomaly ? ta_sweep_anomaly(T->segs, s, &i, &pending)
                                : ta_sweep_plain(T->segs, s, &i, &pending);
            if (ev == 0) break;
            if (ev == 1) {                 /* node i of s is an n-ary node */
                const ta_cnode *e = ta_cnode_of(T, s, i);
                uint64_t left = pending;   /* a copy: pending's address must not escape */
                st = (s->op[i] & TA_OPMASK) == TA_TAKE ? ta_take_step(T, s, i, e, s->adj[i], &left)
                     : e->d ? ta_cnode_step(T, e, s->adj[i], &left) : ta_custom_rule_at(T, s, i, &left);
                pending = left;
                if (st == TA_OK) continue;
                if (st == TA_EANOMALY) {
                    T->err_op = TA_CUSTOM; T->err_x = T->err_y = 0.0;
                    ta_custom_blame(T, TA_REF(s, i));
                }
            } else {                       /* cold: the values, for the message */
                ta_local L;
                ta_local_at(T, s, i, &L);
                T->err_op = L.op; T->err_x = L.xv; T->err_y = L.yv;
                st = TA_EANOMALY;
            }
            break;
        }
        if (st == TA_OK) s->marked = 0;
        else p++;                          /* revisit this segment to clear its marks */
    }
    return st;
}

int ta_step(int64_t id)
{
    ta_tape *T = ta_self();
    ta_seg *s;
    uint32_t o;
    int op, kind, st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve(T, id, &s, &o)) != TA_OK) return st;
    op = s->op[o] & TA_OPMASK;
    kind = ta_kinds[op];
    if (kind == TA_K_LEAF) return TA_OK;
    if (kind == TA_K_NARY) {
        const ta_cnode *e = ta_cnode_of(T, s, o);
        if (op == TA_TAKE) return ta_take_step(T, s, o, e, s->adj[o], NULL);
        return e->d ? ta_cnode_step(T, e, s->adj[o], NULL) : TA_EPYRULE;
    }
    ta_node_step(T, s, o, op, kind, s->adj[o]);
    return TA_OK;
}

int ta_local_grads(int64_t id, double *d, uint32_t cap)
{
    ta_tape *T = ta_self();
    ta_seg *s;
    uint32_t o, k;
    int op, kind, st;
    double dx, dy;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve(T, id, &s, &o)) != TA_OK) return st;
    op = s->op[o] & TA_OPMASK;
    kind = ta_kinds[op];
    if (kind == TA_K_LEAF) return 0;
    if (kind == TA_K_NARY) {
        const ta_cnode *e = ta_cnode_of(T, s, o);
        if (op == TA_TAKE) {               /* 1 for the candidate taken, 0 for the rest */
            for (k = 0; d && k < e->n && k < cap; k++) d[k] = k == 1u + s->aux[o].y ? 1.0 : 0.0;
            return (int)e->n;
        }
        if (!e->d) return TA_EPYRULE;
        for (k = 0; d && k < e->n && k < cap; k++) d[k] = e->d[k];
        return (int)e->n;
    }
    ta_partials_at(T, s, o, op, &dx, &dy);
    if (d && cap > 0) d[0] = dx;
    if (d && cap > 1 && kind == TA_K_BIN) d[1] = dy;
    return kind == TA_K_BIN ? 2 : 1;
}
