/* custom.c: custom nodes (op CUSTOM), a layer above the core: the side
 * table that holds their inputs and rules (its hooks keep the core's
 * collector, rollback and checks right without the core naming custom
 * nodes: custom.h), the reverse sweep's call of a Python rule and .grad
 * inside it, and the check that keeps them out of the sweeps that cannot
 * run them.
 *
 * A custom node has any number of inputs and one of two rules: its local
 * partials (numbers, tapead.precomputed: backward adds p_k * g in C), or a
 * Python _backward (micrograd's Value(data, _children, _op) idiom), which
 * the reverse sweep calls through ta_custom_rule with the node's key.  The
 * node's x[] holds the index of its entry here; the entry dies with the
 * node (the layer's node_dead hook, which the collector and rollback call).  C never
 * touches a Python object: the rule lives in a Python object that the
 * Values depending on the node reference (tapead/custom.py), found by key.  The collector keeps a custom node's inputs
 * live exactly as it keeps an ordinary node's (tape.c: ta_gc, through the
 * layer's inputs hook).
 *
 * Replay, compile, jvp, the Wengert export and every higher-order sweep
 * recompute values or differentiate partials symbolically, which neither
 * rule allows: they call ta_plain first, which refuses a graph with a
 * custom node behind it (TA_ECUSTOM, naming the node) before anything is
 * touched, and costs nothing while the tape has no custom node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "custom.h"

#define TA_CNONE UINT32_MAX

int (*ta_rule_hook)(int64_t node, int64_t key) = NULL;

/* ------------------------------------------------------------ the layer */

static const uint32_t *ta_custom_inputs(const void *state, const ta_seg *s, uint32_t i, uint32_t *n)
{
    const struct ta_custom *C = (const struct ta_custom *)state;
    const ta_cnode *e;
    if (s->x[i] >= C->n || (e = &C->e[s->x[i]])->state != 1) return NULL;
    *n = e->n;
    return e->in;
}

/* An n-ary node dies: its entry goes back to the free list. */
static void ta_custom_dead(void *state, ta_seg *s, uint32_t i)
{
    struct ta_custom *C = (struct ta_custom *)state;
    uint32_t k = s->x[i];
    ta_cnode *e = &C->e[k];
    free(e->d ? (void *)e->d : (void *)e->in);
    e->d = NULL; e->in = NULL; e->name = NULL; e->n = 0;
    if ((s->op[i] & TA_OPMASK) == TA_CUSTOM) C->live--;
    else C->takes--;
    e->state = 0; e->key = 0; e->next = C->freehead; C->freehead = k;
}

/* The tape is freed: every entry with it. */
static void ta_custom_release(ta_tape *T, void *state)
{
    struct ta_custom *C = (struct ta_custom *)state;
    uint32_t k;
    (void)T;
    for (k = 0; k < C->n; k++)
        if (C->e[k].state == 1) free(C->e[k].d ? (void *)C->e[k].d : (void *)C->e[k].in);
    free(C->e);
    free(C);
}

const struct ta_layer ta_custom_layer = { .release = ta_custom_release, .inputs = ta_custom_inputs,
                                          .node_dead = ta_custom_dead };

/* T's custom nodes, attached with the first (NULL: out of memory). */
static struct ta_custom *ta_custom_of(ta_tape *T)
{
    struct ta_custom *C = ta_custom_if_any(T);
    if (!C && (C = (struct ta_custom *)ta_calloc(1, sizeof *C)) != NULL) {
        C->freehead = TA_CNONE;
        if (ta_attach(T, &ta_custom_layer, C) != TA_OK) { free(C); C = NULL; }
    }
    return C;
}

/* Room for one more entry (grown by doubling; nothing changes on failure). */
static int ta_cnodes_room(struct ta_custom *C)
{
    uint32_t cap;
    void *p;
    if (C->freehead != TA_CNONE || C->n < C->cap) return TA_OK;
    if (C->cap >= (UINT32_MAX >> 2)) return TA_ELIMIT;
    cap = C->cap ? C->cap * 2u : 64u;
    p = ta_realloc(C->e, (size_t)cap * sizeof *C->e);
    if (!p) return TA_ENOMEM;
    C->e = (ta_cnode *)p;
    C->cap = cap;
    return TA_OK;
}

int64_t ta_nary_append(ta_tape *T, int op, const uint32_t *in, uint32_t n, double value,
                       const double *partials, const char *name, uint32_t namelen, int64_t *key,
                       ta_aux aux)
{
    struct ta_custom *C;
    ta_cnode *e;
    uint32_t k;
    char *mem;
    size_t ds, is;
    int64_t id;
    int st;
    if (!(C = ta_custom_of(T))) return TA_ENOMEM;
    if ((st = ta_cnodes_room(C)) != TA_OK) return st;
    /* one block: partials, inputs, name (its bytes live and die with the node) */
    ds = partials ? (size_t)n * sizeof(double) : 0;
    is = (size_t)n * sizeof(uint32_t);
    if (!(mem = (char *)ta_malloc(ds + is + namelen + 1))) return TA_ENOMEM;
    /* the slot is taken after the append: the append may run the collector,
     * which frees entries (but never uses up the room made above) */
    id = ta_append(T, op, 0, aux, value);
    if (id < 0) { free(mem); return id; }
    if (C->freehead != TA_CNONE) { k = C->freehead; C->freehead = C->e[k].next; }
    else k = C->n++;
    e = &C->e[k];
    e->n = n; e->next = TA_CNONE; e->state = 1;
    e->d = partials ? (double *)mem : NULL;
    e->in = (uint32_t *)(mem + ds);
    e->name = mem + ds + is; e->namelen = namelen;
    if (partials) memcpy(e->d, partials, ds);
    memcpy(e->in, in, is);
    if (namelen) memcpy(e->name, name, namelen);
    e->name[namelen] = 0;
    e->key = (op == TA_CUSTOM && !partials) ? ++C->nextkey : 0;
    if (key) *key = e->key;
    if (op == TA_CUSTOM) C->live++;
    else C->takes++;
    T->cur->x[TA_OFF((uint32_t)id)] = k;
    return id;
}

int64_t ta_custom_at(ta_tape *T, const uint32_t *in, uint32_t n, double value,
                     const double *partials, const char *name, uint32_t namelen, int64_t *key,
                     int64_t seg, ta_seg **where)
{
    ta_aux aux;
    int64_t id;
    if (T->nograd) return ta_ng_leaf(T, value, seg, where);
    if (!partials && !key) return TA_EARG;
    if (namelen && !name) return TA_EARG;
    if (seg != TA_NOKEY && !(T->cur && T->cur->n < TA_SEG && TA_KEY(T, T->cur) == seg))
        return TA_NEEDSEG;                 /* (ta_dest_ok: then ta_append stays in T->cur) */
    aux.c = 0.0;
    id = ta_nary_append(T, TA_CUSTOM, in, n, value, partials, name, namelen, key, aux);
    if (id >= 0) *where = T->cur;
    return id;
}

/* Resolve ins (no_grad values among them are dropped: constants here),
 * then ta_custom_at.  Up to 8 inputs need no allocation here. */
static int64_t ta_custom_ids(ta_tape *T, const int64_t *ins, uint32_t n, double value,
                             const double *partials, const char *name, uint32_t namelen,
                             int64_t *key, int64_t seg, ta_seg **where)
{
    uint32_t rbuf[8], *refs = rbuf, m = 0, k;
    double pbuf[8], *ps = NULL;
    ta_seg *s;
    uint32_t o;
    int st, ng;
    int64_t id;
    if (n > 8) {
        if (!(refs = (uint32_t *)ta_malloc((size_t)n * sizeof *refs))) return TA_ENOMEM;
        if (partials && !(ps = (double *)ta_malloc((size_t)n * sizeof *ps))) { free(refs); return TA_ENOMEM; }
    } else if (partials) ps = pbuf;
    for (k = 0; k < n; k++) {
        if ((st = ta_resolve_any(T, ins[k], &s, &o, &ng)) != TA_OK) { id = st; goto out; }
        if (ng) continue;                  /* a no_grad value is a constant here */
        if (ps) ps[m] = partials[k];
        refs[m++] = TA_REF(s, o);
    }
    id = ta_custom_at(T, refs, m, value, ps, name, namelen, key, seg, where);
out:
    if (refs != rbuf) { free(refs); free(ps); }
    return id;
}

int64_t ta_custom_rec(const int64_t *ins, uint32_t n, double value, const double *partials,
                      const char *name, uint32_t namelen, int64_t seg)
{
    ta_tape *T = ta_self();
    ta_seg *where;
    int64_t key;
    if (!T) return TA_ENOMEM;
    if (n && !ins) return TA_EARG;
    return ta_custom_ids(T, ins, n, value, partials, name, namelen, partials ? NULL : &key, seg,
                         &where);
}

int ta_custom_info(int64_t id, uint32_t *n, int64_t *ins, uint32_t cap, char *name,
                   uint32_t namecap, uint32_t *namelen, int64_t *key)
{
    ta_tape *T = ta_self();
    ta_seg *s;
    uint32_t o, k;
    ta_cnode *e;
    int st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve(T, id, &s, &o)) != TA_OK) return st;
    if (ta_kinds[s->op[o] & TA_OPMASK] != TA_K_NARY) return TA_ENOTCUSTOM;
    e = ta_cnode_of(T, s, o);
    *n = e->n; *namelen = e->namelen; *key = e->key;
    for (k = 0; ins && k < e->n && k < cap; k++) ins[k] = TA_ID(T, e->in[k]);
    if (name) memcpy(name, e->name, e->namelen < namecap ? e->namelen : namecap);
    return TA_OK;
}

int64_t ta_custom_key(int64_t id)
{
    ta_tape *T;
    ta_seg *s;
    uint32_t o;
    int st;
    if ((st = ta_resolve_here(id, &T, &s, &o)) != TA_OK) return st;
    if ((s->op[o] & TA_OPMASK) != TA_CUSTOM) return TA_ENOTCUSTOM;
    return ta_cnode_of(T, s, o)->key;
}

int64_t ta_custom_failed(void)
{
    ta_tape *T = ta_self();
    const struct ta_custom *C;
    if (!T) return TA_ENOMEM;
    return (C = ta_custom_if_any(T)) != NULL ? C->err_node : 0;
}

/* ------------------------------------------------------------ ta_plain */

static void ta_plain_mark(ta_tape *T, uint32_t ref, uint64_t *pending)
{
    ta_mark(TA_SEGOF(T, ref), TA_OFF(ref), TA_MARK, pending);
}

int ta_plain(ta_tape *T, const int64_t *roots, size_t n, int take)
{
    uint64_t pending = 0, hi = 0;
    uint32_t hip = 0, p;
    size_t j;
    int st = TA_OK;
    const struct ta_custom *C = ta_custom_if_any(T);
    if (!C) return TA_OK;                  /* (no custom node: no rule can be running) */
    if (C->sw) return TA_EBUSY;
    if ((!C->live && (take || !C->takes)) || !roots) return TA_OK;
    for (j = 0; j < n; j++) {
        ta_seg *s; uint32_t o; uint64_t w;
        if (ta_resolve(T, roots[j], &s, &o) != TA_OK) continue;   /* the caller reports it */
        ta_mark(s, o, TA_MARK, &pending);
        w = ta_order(s, o);
        if (w >= hi) { hi = w; hip = s->pos; }
    }
    if (!pending) return TA_OK;
    for (p = hip + 1; pending && p-- > 0;) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t i = s->n;
        while (pending && i-- > 0) {
            uint8_t b = s->op[i];
            int kind;
            if (!(b & TA_MARK)) continue;
            s->op[i] = (uint8_t)(b & ~TA_MARK);
            pending--;
            kind = ta_kinds[b & TA_OPMASK];
            if (kind == TA_K_NARY) {
                ta_cnode *e = ta_cnode_of(T, s, i);
                uint32_t k;
                if (st == TA_OK && (b & TA_OPMASK) == TA_CUSTOM) {
                    st = TA_ECUSTOM;
                    ta_custom_blame(T, TA_REF(s, i));
                } else if (st == TA_OK && !take) st = TA_ETAKE;
                for (k = 0; k < e->n; k++) ta_plain_mark(T, e->in[k], &pending);
            } else if (kind != TA_K_LEAF) {
                ta_plain_mark(T, s->x[i], &pending);
                if (kind == TA_K_BIN) ta_plain_mark(T, s->aux[i].y, &pending);
            }
        }
    }
    return st;
}

int ta_custom_plain(const int64_t *roots, size_t n)
{
    ta_tape *T = ta_self();
    return T ? ta_plain(T, roots, n, 0) : TA_ENOMEM;
}

/* --------------------------------------------- a Python rule, in the sweep */

int ta_custom_rule_at(ta_tape *T, ta_seg *s, uint32_t i, uint64_t *pending)
{
    struct ta_custom *C = ta_custom_if_any(T);
    struct ta_sweep sw;
    int rc;
    sw.at = ta_order(s, i);
    sw.pending = pending;
    sw.nan = 0;
    C->sw = &sw;
    T->gc_off++;                           /* nodes must neither move nor die meanwhile */
    rc = (ta_rule_hook ? ta_rule_hook : ta_custom_rule)(TA_ID(T, TA_REF(s, i)),
                                                       ta_cnode_of(T, s, i)->key);
    T->gc_off--;
    C->sw = NULL;
    return rc != 0 ? TA_EPYTHON : sw.nan ? TA_EANOMALY : TA_OK;
}

/* ---------------------------------------- .grad as Python reads and sets it */

static int ta_before_current(ta_tape *T, ta_seg *s, uint32_t o)
{
    return s->tape == T && ta_order(s, o) < ta_custom_if_any(T)->sw->at;
}

double ta_adj_get_sw(ta_tape *T, ta_seg *s, uint32_t o)
{
    uint8_t b = s->op[o];
    /* an intermediate the sweep has not reached yet: this pass's adjoint is 0 */
    if (ta_before_current(T, s, o) && !(b & TA_MARK) && ta_kinds[b & TA_OPMASK] != TA_K_LEAF)
        return 0.0;
    return s->adj[o];
}

void ta_adj_put_sw(ta_tape *T, ta_seg *s, uint32_t o, double v)
{
    uint8_t b = s->op[o];
    struct ta_sweep *sw = ta_custom_if_any(T)->sw;
    if (T->anomaly && isnan(v) && !isnan(ta_adj_get_sw(T, s, o))) sw->nan = 1;   /* newly nan */
    if (ta_before_current(T, s, o) && !(b & TA_MARK) && ta_kinds[b & TA_OPMASK] != TA_K_LEAF) {
        s->op[o] = (uint8_t)(b | TA_MARK);   /* reached now: the sweep will visit it */
        s->marked = 1;
        ++*sw->pending;
        s->adj[o] = 0.0 + v;
        return;
    }
    s->adj[o] = v;
}

/* By id (cdef.h): a node of T or of its no_grad arena. */
double ta_adj(int64_t id)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int ng;
    return (T && ta_resolve_any(T, id, &s, &o, &ng) == TA_OK) ? ta_adj_get(T, s, o) : NAN;
}

int ta_set_adj(int64_t id, double x)
{
    ta_tape *T = ta_self(); ta_seg *s; uint32_t o; int st, ng;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve_any(T, id, &s, &o, &ng)) == TA_OK) ta_adj_put(T, s, o, x);
    return st;
}
