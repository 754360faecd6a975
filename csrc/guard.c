/* guard.c: comparisons of Values recorded as guards.
 *
 * A comparison of Values (<, <=, >, >=) returns a plain bool to Python and
 * is recorded here with its outcome, so a recompute or a Program can tell
 * when the recorded graph no longer holds.  Which guards bind a recompute
 * from root, or a Program?  Those whose operands read a leaf the replay
 * varies (its inputs, its parameters, the leaves a recompute re-reads),
 * wherever they sit on the tape: a comparison made before root may have
 * steered its recording, one made after it may have chosen root among
 * Values that existed already (max(a, b)); a comparison of other Values
 * cannot flip when the replay's inputs change (subtape.c: ta_bind_guards,
 * with the cases).
 * tapead.clear_guards() drops them all.  Guards die with their nodes:
 * ta_guards_gc drops any guard naming a node the collector frees.
 *
 * Bounded: a long-lived Value (a parameter) compared every step must not
 * grow the list without end.  So
 *   - under no_grad() nothing is recorded (no graph is being shaped);
 *   - a comparison already held is not recorded again: guards are keyed by
 *     (nodes, kind, outcome) in a hash table;
 *   - comparisons of one node with constants, of one kind and outcome,
 *     keep only the tightest constant: x > 1 and x > 2 both True hold
 *     exactly when x > 2 does (also for nan x: both sides are False);
 *   - a comparison with a nan constant is False whatever x is: it can
 *     never flip, so it is not recorded.
 * A node therefore carries at most 8 constant guards (4 kinds x 2
 * outcomes), and a pair of nodes at most 8. */
#include <math.h>
#include <stdlib.h>
#include "replay.h"

static void ta_guards_gc(ta_tape *T);
static void ta_guards_free(ta_tape *T);
static const struct ta_attach ta_guard_hooks = { ta_guards_gc, ta_guards_free };

struct ta_guards *ta_guards_of(ta_tape *T)
{
    struct ta_guards *G = ta_guards_if_any(T);
    if (!G && (G = (struct ta_guards *)ta_calloc(1, sizeof *G)) != NULL) {
        G->failed = -1;
        T->attached = G;
        T->hooks = &ta_guard_hooks;
    }
    return G;
}

static void ta_hash_drop(struct ta_guards *G)
{
    free(G->hash); G->hash = NULL; G->hcap = 0;
}

/* With the tape (ta_attach.release). */
static void ta_guards_free(ta_tape *T)
{
    struct ta_guards *G = ta_guards_if_any(T);
    if (!G) return;
    ta_plans_drop(G);
    ta_hash_drop(G);
    free(G->g); free(G);
    T->attached = NULL;
    T->hooks = NULL;
}

/* The collector keeps ref (ta_attach.dying: it is marked TA_LIVE). */
static int ta_lives(const ta_tape *T, uint32_t ref)
{
    const ta_seg *s = (ref >> TA_SHIFT) < T->nslots ? TA_SEGOF(T, ref) : NULL;
    return s && TA_OFF(ref) < s->n && (s->op[TA_OFF(ref)] & TA_LIVE) != 0;
}

/* In every collection, once it has decided what dies (ta_attach.dying). */
static void ta_guards_gc(ta_tape *T)
{
    struct ta_guards *G = ta_guards_if_any(T);
    uint32_t i, w = 0;
    if (!G) return;
    for (i = 0; i < G->n; i++) {
        ta_guard *g = &G->g[i];
        if (!ta_lives(T, g->a) || (!g->cst && !ta_lives(T, g->b))) continue;
        G->g[w++] = *g;
    }
    G->n = w;
    G->failed = -1;
    G->ver++;
    ta_hash_drop(G);    /* indices moved: rebuilt at the next comparison */
    ta_plans_drop(G);   /* the collector is about to free nodes a plan points to */
}

/* ------------------------------------------------------ the key table */

static uint32_t ta_guard_hash(const ta_guard *g)
{
    uint64_t h = (uint64_t)g->a * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)g->kind | (uint64_t)g->cst << 2 | (uint64_t)g->out << 3) * 0xC2B2AE3D27D4EB4Full;
    if (!g->cst) h ^= (uint64_t)g->b * 0x165667B19E3779F9ull;
    h ^= h >> 31;
    return (uint32_t)(h ^ (h >> 17));
}

static int ta_guard_key_eq(const ta_guard *x, const ta_guard *y)
{
    return x->a == y->a && x->kind == y->kind && x->cst == y->cst && x->out == y->out &&
           (x->cst || x->b == y->b);
}

/* The slot of g's key in the table: holding it, or the empty one to use. */
static uint32_t *ta_hash_slot(struct ta_guards *G, const ta_guard *g)
{
    uint32_t m = G->hcap - 1u, i = ta_guard_hash(g) & m;
    while (G->hash[i] && !ta_guard_key_eq(&G->g[G->hash[i] - 1u], g)) i = (i + 1u) & m;
    return &G->hash[i];
}

/* A table with room for one more guard (at most half full); TA_ENOMEM
 * leaves the old one. */
static int ta_hash_reserve(struct ta_guards *G)
{
    uint32_t cap = 64u, i;
    uint32_t *old = G->hash;
    if (G->hash && 2u * ((uint64_t)G->n + 1u) <= G->hcap) return TA_OK;
    while ((uint64_t)cap < 2u * ((uint64_t)G->n + 1u)) {
        if (cap >= (1u << 31)) return TA_ELIMIT;
        cap *= 2u;
    }
    G->hash = (uint32_t *)ta_calloc(cap, sizeof *G->hash);
    if (!G->hash) { G->hash = old; return TA_ENOMEM; }
    G->hcap = cap;
    for (i = 0; i < G->n; i++) *ta_hash_slot(G, &G->g[i]) = i + 1u;
    free(old);
    return TA_OK;
}

/* The constant that binds both `x kind c == out` and `x kind d == out`. */
static double ta_tighter(int kind, int out, double c, double d)
{
    int lower = (kind >= 2) == (out != 0);     /* a lower bound on x: keep the larger */
    return lower ? (d > c ? d : c) : (d < c ? d : c);
}

static int ta_guard_push(ta_tape *T, ta_guard g)
{
    struct ta_guards *G = ta_guards_of(T);
    uint32_t *slot;
    int st;
    if (!G) return TA_ENOMEM;
    if ((st = ta_hash_reserve(G)) != TA_OK) return st;
    slot = ta_hash_slot(G, &g);
    if (*slot) {                                /* held already, or merged */
        ta_guard *h = &G->g[*slot - 1u];
        double c = g.cst ? ta_tighter(g.kind, g.out, h->c, g.c) : h->c;
        if (c != h->c) { h->c = c; G->ver++; }
        return TA_OK;
    }
    if (G->n == G->cap) {
        uint32_t cap = G->cap ? 2u * G->cap : 64u;
        void *p;
        if (G->cap >= UINT32_MAX / 4u) return TA_ELIMIT;
        p = ta_realloc(G->g, (size_t)cap * sizeof *G->g);
        if (!p) return TA_ENOMEM;
        G->g = (ta_guard *)p; G->cap = cap;
    }
    G->g[G->n++] = g;
    *slot = G->n;
    G->ver++;
    return TA_OK;
}

static int ta_cmp(int kind, int64_t x, int64_t y, double c, int cst)
{
    ta_tape *T = ta_self();
    ta_seg *sx, *sy; uint32_t ox, oy;
    double xv, yv = c;
    ta_guard g;
    int st;
    if (!T) return TA_ENOMEM;
    if (kind < 0 || kind > 3) return TA_EARG;
    if ((st = ta_resolve(T, x, &sx, &ox)) != TA_OK) return st;
    xv = sx->val[ox];
    g.a = (uint32_t)x; g.b = 0; g.c = c; g.cst = (uint8_t)cst; g.kind = (uint8_t)kind; g.bind = 0;
    if (!cst) {
        if ((st = ta_resolve(T, y, &sy, &oy)) != TA_OK) return st;
        yv = sy->val[oy]; g.b = (uint32_t)y; g.c = 0.0;
    }
    g.out = (uint8_t)ta_compare(kind, xv, yv);
    if (T->nograd || (cst && isnan(c))) return g.out;   /* nothing to guard */
    if ((st = ta_guard_push(T, g)) != TA_OK) return st;
    return g.out;
}

int ta_cmp2(int kind, int64_t x, int64_t y) { return ta_cmp(kind, x, y, 0.0, 0); }
int ta_cmpc(int kind, int64_t x, double c)  { return ta_cmp(kind, x, 0, c, 1); }

int64_t ta_guard_count(void)
{
    ta_tape *T = ta_self();
    struct ta_guards *G;
    if (!T) return TA_ENOMEM;
    G = ta_guards_if_any(T);
    return G ? (int64_t)G->n : 0;
}

int ta_guard_clear(void)
{
    ta_tape *T = ta_self();
    struct ta_guards *G;
    if (!T) return TA_ENOMEM;
    if ((G = ta_guards_if_any(T)) != NULL) {
        G->n = 0; G->failed = -1; G->ver++;
        ta_hash_drop(G);
    }
    return TA_OK;
}

int64_t ta_guard_failed(void)
{
    ta_tape *T = ta_self();
    struct ta_guards *G = T ? ta_guards_if_any(T) : NULL;
    return G ? G->failed : -1;
}

int ta_guard_info(int64_t gi, int *kind, int *outcome, double *xv, double *yv)
{
    ta_tape *T = ta_self();
    struct ta_guards *G;
    ta_guard *g;
    if (!T) return TA_ENOMEM;
    if (!(G = ta_guards_if_any(T)) || gi < 0 || (uint64_t)gi >= G->n) return TA_EARG;
    g = &G->g[gi];
    *kind = g->kind; *outcome = g->out;
    *xv = G->fx; *yv = G->fy;
    return TA_OK;
}
