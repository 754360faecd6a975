/* sweep.c: the reverse sweep.
 *
 * One descending loop over the tape from the root: a node's adjoint is
 * final once every later node has been visited, so no sort, no recursion
 * and no Python.  Nodes reached from the root carry TA_MARK; an
 * intermediate's adjoint is zeroed when it is first reached (it holds this
 * pass's adjoint afterwards), a leaf's is not (leaves accumulate across
 * passes, as micrograd's zero_grad loop expects).  Each segment counts its
 * reached-but-unvisited nodes, so segments the pass never reached (an
 * earlier step's graph awaiting reclamation) cost one test each.  Inside detect_anomaly() the first
 * nan adjoint contribution stops the sweep with TA_EANOMALY (adjoints then
 * hold the partial sums of the aborted pass). */
#include <math.h>
#include "tapead.h"
#include "ops.h"

/* Add v to the adjoint of node o of segment s.  On first arrival the node
 * is marked, its segment flagged, and an intermediate's adjoint is set
 * rather than added to (it holds only this pass's adjoint). */
static inline void ta_accum(ta_seg *s, uint32_t o, double v, uint64_t *pending)
{
    uint8_t b = s->op[o];
    if (b & TA_MARK || (b & TA_OPMASK) == TA_LEAF) { s->adj[o] += v; return; }
    s->op[o] = (uint8_t)(b | TA_MARK);
    s->marked = 1;
    ++*pending;
    s->adj[o] = 0.0 + v;  /* 0.0 + v: -0.0 becomes 0.0, as micrograd's 0 + v */
}

int ta_backward(int64_t root)
{
    ta_tape *T = ta_self();
    ta_seg *rs;
    uint32_t ro, p;
    uint64_t pending = 1;               /* marked nodes not yet visited, all segments */
    int st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve(T, root, &rs, &ro)) != TA_OK) return st;

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
        while (pending && i-- > 0) {
            uint8_t b = s->op[i];
            int op, kind;
            uint32_t xr;
            double g, dx, dy;
            if (!(b & TA_MARK)) continue;
            s->op[i] = (uint8_t)(b & ~TA_MARK);
            pending--;
            op = b & TA_OPMASK;
            kind = ta_kinds[op];
            if (kind == TA_K_LEAF) continue;
            g = s->adj[i];
            ta_partials_at(T, s, i, op, &dx, &dy);
            if (T->anomaly && (isnan(dx * g) || (kind == TA_K_BIN && isnan(dy * g)))) {
                ta_local L;                    /* cold: the values, for the message */
                ta_local_at(T, s, i, &L);
                T->err_op = L.op; T->err_x = L.xv; T->err_y = L.yv;
                st = TA_EANOMALY;
                break;
            }
            xr = s->x[i];
            ta_accum(TA_SEGOF(T, xr), TA_OFF(xr), dx * g, &pending);
            if (kind == TA_K_BIN) {
                uint32_t yr = s->aux[i].y;
                ta_accum(TA_SEGOF(T, yr), TA_OFF(yr), dy * g, &pending);
            }
        }
        if (st == TA_OK) s->marked = 0;
        else p++;                          /* revisit this segment to clear its marks */
    }
    return st;
}
