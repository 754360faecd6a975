/* access.c: the tape as Python reads and sets it.  Ids from Python
 * resolved to nodes (ta_resolve), node values by id (adjoints by id live
 * with the layer that can pause a sweep to run Python), a node's
 * inputs and stamp, raw reads of a held segment, the no_grad and anomaly
 * modes, the node limit, stats, and ta_validate, the check of every
 * invariant the sweeps rely on. */
#include <limits.h>
#include "tapead.h"
#include "ops.h"

size_t ta_seg_bytes(void) { return sizeof(ta_seg); }

double ta_peek(ta_seg *s, uint32_t off, int what)
{
    if (!s || off >= TA_SEG) return NAN;
    return what ? s->adj[off] : s->val[off];
}
/* --------------------------------------------------------------- lookup */

int ta_resolve_miss(const ta_tape *T, int64_t id)
{
    if (id < 0) return TA_EBADID;
    return (T->ng && ((uint64_t)id >> 32) == T->ng->tag) ? TA_ENOGRAD : TA_ETHREAD;
}

int ta_check(int64_t id)
{
    ta_tape *T = ta_self();
    ta_seg *s; uint32_t o; int ng;
    return T ? ta_resolve_any(T, id, &s, &o, &ng) : TA_ENOMEM;
}
/* ------------------------------------------------------ node accessors */

double ta_val(int64_t id)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int ng;
    return (T && ta_resolve_any(T, id, &s, &o, &ng) == TA_OK) ? s->val[o] : NAN;
}

int ta_set_val(int64_t id, double x)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int st, ng;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve_any(T, id, &s, &o, &ng)) == TA_OK) s->val[o] = x;
    return st;
}

/* The rebind count (cdef.h), one for every thread: a holder watches ids
 * in its thread, while __init__ may move a Value in any.  Only weakly
 * referenced Values count: a holder keeps a weak reference to each of its
 * Values, and on the cffi front that is the one cheap test in __init__
 * (whether the Value had a node already is seen only through an
 * exception, so the cffi front also counts the rare first __init__ of a
 * Value weakly referenced before it; a count too many only makes holders
 * take their ids again).  The CPython front counts the same moves. */
static int64_t ta_rebind_n = 0;       /* (atomic) */
uint64_t ta_rebinds(void) { return (uint64_t)TA_ATOMIC_ADD64(&ta_rebind_n, 0); }
void ta_rebound(void) { TA_ATOMIC_ADD64(&ta_rebind_n, 1); }

int ta_node(int64_t id, int *op, int64_t *x, int64_t *y, double *c)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int st, k;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve(T, id, &s, &o)) != TA_OK) return st;
    *op = s->op[o] & TA_OPMASK; k = ta_kinds[*op];
    *x = (k == TA_K_LEAF || k == TA_K_NARY) ? -1 : TA_ID(T, s->x[o]);
    *y = k == TA_K_BIN ? TA_ID(T, s->aux[o].y) : -1;
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
    ta_tape *T = ta_self_if_any();      /* never creates a tape */
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
            if (kind == TA_K_NARY) {       /* its inputs, as its layer holds them */
                const uint32_t *in = NULL;
                uint32_t n = 0, k;
                for (k = 0; k < T->nlayers && !in; k++)
                    if (T->layers[k].layer->inputs)
                        in = T->layers[k].layer->inputs(T->layers[k].state, s, i, &n);
                if (!in) return TA_ECORRUPT;
                for (a = 0; a < (int)n; a++) {
                    uint32_t r = in[a], rk = r >> TA_SHIFT;
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
