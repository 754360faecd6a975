/* tangent.c: forward (tangent) mode and the Wengert-list export.
 *
 * Both work on the sub-tape behind one root: a descending pass marks the
 * nodes reachable from the root (as ta_backward does), then an ascending
 * pass numbers the marked nodes 0..n-1 in tape order ("rows").  The row
 * numbers live in a scratch map allocated per call (one TA_SEG block of
 * uint32 per segment that holds a marked node), so the tape itself carries
 * no extra per-node array.  Tangents and adjoints are then plain loops over
 * rows into per-call buffers: neither touches the nodes' val[] or adj[], so
 * a jvp or a table never changes any Value's data or grad.
 *
 * Nothing here appends to the tape, so no collection can run while marks
 * are held.  Every failure (bad id, allocation) happens before any mark is
 * set or after every mark is cleared, so a failed call changes nothing. */
#include <stdlib.h>
#include "tapead.h"
#include "ops.h"

/* The sub-tape behind a root: its segment range and the row map. */
typedef struct {
    ta_tape   *T;
    ta_seg    *rs;               /* root's segment, and offset            */
    uint32_t   ro;
    uint32_t   lowpos;           /* oldest segment holding a marked node  */
    uint32_t   n;                /* rows (marked nodes)                   */
    uint32_t   span;             /* segments lowpos..root's pos           */
    uint32_t **rowof;            /* by pos - lowpos: row of each offset
                                    (one malloc each), NULL for segments
                                    with no marked node                   */
} ta_sub;

/* Mark every node reachable from the root (TA_MARK) and set lowpos. */
static void ta_sub_mark(ta_sub *S)
{
    ta_tape *T = S->T;
    uint64_t pending = 1;
    uint32_t p;
    S->rs->op[S->ro] |= TA_MARK;
    S->lowpos = S->rs->pos;
    for (p = S->rs->pos + 1; p-- > 0 && pending;) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t i = (s == S->rs) ? S->ro + 1 : s->n;
        S->lowpos = p;
        while (i-- > 0 && pending) {
            uint8_t b = s->op[i];
            int kind;
            uint32_t r;
            ta_seg *sa;
            if (!(b & TA_MARK)) continue;
            --pending;
            kind = ta_kinds[b & TA_OPMASK];
            if (kind == TA_K_LEAF) continue;
            r = s->x[i]; sa = TA_SEGOF(T, r);
            if (!(sa->op[TA_OFF(r)] & TA_MARK)) { sa->op[TA_OFF(r)] |= TA_MARK; ++pending; }
            if (kind == TA_K_BIN) {
                r = s->aux[i].y; sa = TA_SEGOF(T, r);
                if (!(sa->op[TA_OFF(r)] & TA_MARK)) { sa->op[TA_OFF(r)] |= TA_MARK; ++pending; }
            }
        }
    }
}

static void ta_sub_unmark(ta_sub *S)
{
    uint32_t p;
    for (p = S->lowpos; p <= S->rs->pos; p++) {
        ta_seg *s = S->T->segs[S->T->order[p]];
        uint32_t i;
        for (i = 0; i < s->n; i++) s->op[i] &= (uint8_t)~TA_MARK;
    }
}

static void ta_sub_free(ta_sub *S)
{
    uint32_t k;
    if (!S->rowof) return;
    for (k = 0; k < S->span; k++) free(S->rowof[k]);
    free(S->rowof);
    S->rowof = NULL;
}

/* Resolve the root, mark its sub-tape and number the rows.  On failure
 * nothing stays marked and nothing stays allocated. */
static int ta_sub_open(ta_sub *S, int64_t root)
{
    uint32_t p, row = 0;
    int st;
    S->rowof = NULL; S->n = 0; S->span = 0;
    if (!(S->T = ta_self())) return TA_ENOMEM;
    if ((st = ta_plain(S->T, &root, 1, 0)) != TA_OK) return st;
    if ((st = ta_resolve(S->T, root, &S->rs, &S->ro)) != TA_OK) return st;
    ta_sub_mark(S);
    S->span = S->rs->pos - S->lowpos + 1;
    if (!(S->rowof = (uint32_t **)ta_calloc(S->span, sizeof *S->rowof))) goto nomem;
    for (p = S->lowpos; p <= S->rs->pos; p++) {
        ta_seg *s = S->T->segs[S->T->order[p]];
        uint32_t i, *m = NULL;
        for (i = 0; i < s->n; i++) {
            if (!(s->op[i] & TA_MARK)) continue;
            if (!m && !(m = S->rowof[p - S->lowpos] = (uint32_t *)ta_malloc(TA_SEG * sizeof *m)))
                goto nomem;
            m[i] = row++;
        }
    }
    S->n = row;
    return TA_OK;
nomem:
    ta_sub_unmark(S); ta_sub_free(S);
    return TA_ENOMEM;
}

static void ta_sub_close(ta_sub *S)
{
    ta_sub_unmark(S);
    ta_sub_free(S);
}

/* Row of a marked node, given its ref. */
static inline uint32_t ta_rowof(const ta_sub *S, uint32_t ref)
{
    ta_seg *s = TA_SEGOF(S->T, ref);
    return S->rowof[s->pos - S->lowpos][TA_OFF(ref)];
}

/* Check every seed id before anything is marked. */
static int ta_check_seeds(ta_tape *T, int nin, const int64_t *inputs)
{
    int j, st;
    ta_seg *s; uint32_t o;
    if (nin < 0) return TA_EBADID;
    for (j = 0; j < nin; j++)
        if ((st = ta_resolve(T, inputs[j], &s, &o)) != TA_OK) return st;
    return TA_OK;
}

/* Add the seeds of marked inputs into tdot (by row); others reach nothing. */
static void ta_seed(const ta_sub *S, int nin, const int64_t *inputs,
                    const double *tangents, double *tdot)
{
    int j;
    for (j = 0; j < nin; j++) {
        ta_seg *s; uint32_t o;
        ta_resolve(S->T, inputs[j], &s, &o);
        if (s->pos < S->lowpos || s->pos > S->rs->pos || !(s->op[o] & TA_MARK)) continue;
        tdot[S->rowof[s->pos - S->lowpos][o]] += tangents[j];
    }
}

/* One ascending tangent sweep: tdot[row] += dx tdot[x] + dy tdot[y]
 * (an exact zero factor adds nothing: ta_tmul).
 * clear: also clear each node's mark once visited (the sweep reads only
 * the node's own mark; arguments are found through the row map), which
 * saves the separate unmarking pass. */
static void ta_tangent_sweep(const ta_sub *S, double *tdot, int clear)
{
    ta_tape *T = S->T;
    uint32_t p;
    for (p = S->lowpos; p <= S->rs->pos; p++) {
        ta_seg *s = T->segs[T->order[p]];
        const uint32_t *m = S->rowof[p - S->lowpos];
        uint32_t i, end = (s == S->rs) ? S->ro + 1 : s->n;
        if (!m) continue;
        for (i = 0; i < end; i++) {
            uint8_t b = s->op[i];
            ta_local L;
            double t;
            if (!(b & TA_MARK)) continue;
            if (clear) s->op[i] = (uint8_t)(b & ~TA_MARK);
            ta_local_at(T, s, i, &L);
            if (L.kind == TA_K_LEAF) continue;
            t = ta_tmul(L.dx, tdot[ta_rowof(S, L.xr)]);
            if (L.kind == TA_K_BIN) t += ta_tmul(L.dy, tdot[ta_rowof(S, L.yr)]);
            tdot[m[i]] += t;
        }
    }
}

int ta_jvp(int64_t root, int nin, const int64_t *inputs, const double *tangents, double *out)
{
    ta_sub S;
    double *tdot;
    int st;
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    if ((st = ta_check_seeds(T, nin, inputs)) != TA_OK) return st;
    if ((st = ta_sub_open(&S, root)) != TA_OK) return st;
    tdot = (double *)ta_calloc(S.n, sizeof *tdot);
    if (!tdot) { ta_sub_close(&S); return TA_ENOMEM; }
    ta_seed(&S, nin, inputs, tangents, tdot);
    ta_tangent_sweep(&S, tdot, 1);   /* clears every mark: marks exist only
                                        on nodes up to the root, all visited */
    *out = tdot[S.n - 1];   /* the root is the last row */
    free(tdot);
    ta_sub_free(&S);
    return TA_OK;
}

int64_t ta_trace(int64_t root, int64_t cap, int nin, const int64_t *inputs,
                 const double *tangents, ta_rows_t *out)
{
    ta_sub S;
    ta_tape *T = ta_self();
    uint32_t p, k;
    int st;
    if (!T) return TA_ENOMEM;
    if (out && out->tan && (st = ta_check_seeds(T, nin, inputs)) != TA_OK) return st;
    if ((st = ta_sub_open(&S, root)) != TA_OK) return st;
    if (!out || (int64_t)S.n > cap) {     /* just report the size */
        int64_t n = S.n;
        ta_sub_close(&S);
        return n;
    }
    for (p = S.lowpos; p <= S.rs->pos; p++) {
        ta_seg *s = T->segs[T->order[p]];
        const uint32_t *m = S.rowof[p - S.lowpos];
        uint32_t i, end = (s == S.rs) ? S.ro + 1 : s->n;
        if (!m) continue;
        for (i = 0; i < end; i++) {
            uint8_t b = s->op[i];
            int op, kind;
            if (!(b & TA_MARK)) continue;
            k = m[i];
            op = b & TA_OPMASK;
            kind = ta_kinds[op];
            out->op[k] = op;
            out->id[k] = (int64_t)((T->tag << 32) | TA_REF(s, i));
            out->val[k] = s->val[i];
            out->x[k] = kind == TA_K_LEAF ? -1 : (int64_t)ta_rowof(&S, s->x[i]);
            out->y[k] = kind == TA_K_BIN ? (int64_t)ta_rowof(&S, s->aux[i].y) : -1;
            out->c[k] = kind == TA_K_CST ? s->aux[i].c : 0.0;
        }
    }
    if (out->tan) {
        for (k = 0; k < S.n; k++) out->tan[k] = 0.0;
        ta_seed(&S, nin, inputs, tangents, out->tan);
        ta_tangent_sweep(&S, out->tan, 0);
    }
    ta_sub_close(&S);
    if (out->adj) {   /* a reverse sweep over the rows, into out->adj only */
        double *a = out->adj;
        for (k = 0; k < S.n; k++) a[k] = 0.0;
        a[S.n - 1] = 1.0;
        for (k = S.n; k-- > 0;) {
            int op = out->op[k], kind = ta_kinds[op];
            double xv, yv, dx, dy;
            if (kind == TA_K_LEAF) continue;
            xv = out->val[out->x[k]];
            yv = kind == TA_K_BIN ? out->val[out->y[k]] : out->c[k];
            ta_partials(op, xv, yv, out->val[k], &dx, &dy);
            a[out->x[k]] += dx * a[k];
            if (kind == TA_K_BIN) a[out->y[k]] += dy * a[k];
        }
    }
    return S.n;
}
