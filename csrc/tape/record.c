/* record.c: appending nodes.  One node appended to a tape (ta_append);
 * recording one op of either front, with no_grad() results going to the
 * leaf-only arena and arena inputs promoted to fresh leaves (ta_record_at);
 * the cffi front's recording calls by id and its hold on the current
 * segment (ta_cur_hold); and recording many nodes in one call, all or
 * nothing (ta_bulk_begin/end, ta_tell/ta_rollback, ta_leaves). */
#include <stdlib.h>
#include <float.h>
#include "tapead.h"
#include "ops.h"

/* ta_put, the one body of every append, is in tapead.h (inline here and in nn.c). */

/* ta_append's body, inline also in ta_record_at, the hot path of both fronts */
static inline int64_t ta_put_id(ta_tape *T, int op, uint32_t x, ta_aux aux, double val)
{
    uint32_t ref;
    int st = ta_put(T, op, x, aux, val, &ref);
    return st != TA_OK ? st : TA_ID(T, ref);
}

int64_t ta_append(ta_tape *T, int op, uint32_t x, ta_aux aux, double val)
{
    return ta_put_id(T, op, x, aux, val);
}

/* (The hot path is ta_append: recording ops hands ids to Python.) */
int ta_push(ta_tape *T, int op, uint32_t x, ta_aux aux, double val, uint32_t *ref)
{
    return ta_put(T, op, x, aux, val, ref);
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
    aux.c = 0.0;
    return ta_push(T, TA_LEAF, 0, aux, v, ref);
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
    if (op == TA_DIVC) {   /* x / c is micrograd's x * c**-1, to the bit, where c**-1 is a
                            * normal float (libm's pow: a visible -1 lets the compiler use 1/c) */
        double k = pow(c, ta_opaque(-1.0));
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
                          : ta_put_id(T, op, TA_REF(sx, ox), aux, r);
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
    if (need != TA_BULK_UNSIZED && (T->nodes > T->limit || need > T->limit - T->nodes)) {
        ta_gc(T);                 /* garbage does not count against the limit (as in ta_append) */
        if (T->nodes > T->limit || need > T->limit - T->nodes) return TA_ELIMIT;
    }
    bk->gc_at = T->gc_at;
    bk->limit = T->limit;
    T->gc_at = UINT32_MAX;
    if (need == TA_BULK_UNSIZED) T->limit = UINT64_MAX;
    ta_tell(T, &bk->start);
    return TA_OK;
}

void ta_bulk_end(ta_tape *T, const ta_bulk *bk, int failed)
{
    if (failed) ta_rollback(T, &bk->start);
    T->gc_at = bk->gc_at;
    T->limit = bk->limit;
}

void ta_tell(const ta_tape *T, ta_pos *p)
{
    p->norder = T->norder;
    p->cur_n = T->cur ? T->cur->n : 0;
    p->nodes = T->nodes;
}

/* A layer's NARY nodes among the nodes a rollback drops: the layer lets
 * go of them (tapead.h: ta_layer.node_dead). */
static void ta_rollback_nary(ta_tape *T, ta_seg *s, uint32_t from)
{
    uint32_t i, k;
    for (k = 0; k < T->nlayers; k++) {
        const struct ta_attached *N = &T->layers[k];
        if (!N->layer->node_dead) continue;
        for (i = from; i < s->n; i++)
            if (ta_kinds[s->op[i] & TA_OPMASK] == TA_K_NARY) {
                N->layer->node_dead(N->state, s, i);
                s->op[i] = TA_DEAD;
            }
    }
}

void ta_rollback(ta_tape *T, const ta_pos *p)
{
    uint32_t k;
    for (k = p->norder; k < T->norder; k++) ta_rollback_nary(T, T->segs[T->order[k]], 0);
    if (p->norder && p->norder <= T->norder)
        ta_rollback_nary(T, T->segs[T->order[p->norder - 1]], p->cur_n);
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
