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
 * tapead.clear_guards() drops them all.  ta_guard_apart puts the set aside
 * under a new empty one, which ta_guard_rejoin drops, putting the set back
 * (tapead.jit records with the thread's guards apart: its Programs bind the
 * comparisons its function makes, and only those).  A guard whose nodes the
 * collector frees can no longer be checked, but it binds what it bound
 * before: ta_guards_gc drops it, counts it as lost and keeps what it read
 * that lives on (the reach), so a replay it would have bound refuses
 * (TA_ELOST) until clear_guards() forgets it too.
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
 * outcomes), and a pair of nodes at most 8.  The lost guards leave a count
 * and their reach, a set of live nodes: no more than the tape holds. */
#include <math.h>
#include <stdlib.h>
#include "replay.h"

static void ta_guards_gc(ta_tape *T, void *state);
static void ta_guards_free(ta_tape *T, void *state);
const struct ta_layer ta_guard_layer = { .dying = ta_guards_gc, .release = ta_guards_free };

struct ta_guards *ta_guards_of(ta_tape *T)
{
    struct ta_guards *G = ta_guards_if_any(T);
    if (!G && (G = (struct ta_guards *)ta_calloc(1, sizeof *G)) != NULL) {
        G->failed = -1;
        if (ta_attach(T, &ta_guard_layer, G) != TA_OK) { free(G); G = NULL; }
    }
    return G;
}

static void ta_hash_drop(struct ta_guards *G)
{
    free(G->hash); G->hash = NULL; G->hcap = 0;
}

/* With the tape (ta_layer.release). */
static void ta_guards_free(ta_tape *T, void *state)
{
    struct ta_guards *G = (struct ta_guards *)state;
    (void)T;
    while (G) {
        struct ta_guards *under = G->apart;
        ta_hash_drop(G);
        free(G->g); free(G->reach); free(G);
        G = under;
    }
}

/* ------------------------------------------------------- lost guards
 *
 * A guard binds a replay that varies a leaf its operands read (subtape.c:
 * ta_bind_guards), whether or not its nodes are still on the tape.  Once
 * the collector frees them it can no longer be checked, so a replay it
 * would bind must refuse rather than replay the recorded branch at every
 * point.  Which replays those are is still known: every leaf a replay can
 * vary lives, so what matters of a lost guard is what its operands read
 * that lives on, reached through the dying nodes.  The reach is the set of
 * those live nodes over every guard lost since clear_guards() (an operand
 * that lives is one): a replay that varies a leaf one of them reads would
 * have bound a lost guard, and refuses; one whose lost guards read only
 * nodes that died with them can bind none of them, and is left alone (a
 * loop's comparisons over Values it made afresh, all freed).  A node of
 * the reach that dies in turn gives way to what it reads that lives on,
 * the same way, so the reach names live nodes only.  If it cannot grow
 * (memory), reach_all stands for every node: every replay refuses.
 *
 * Cost: nothing while no guard loses a node; else one walk down from the
 * dying operands over the dying nodes they read, each node visited once
 * (TA_MARK, which the collector clears after this hook). */

/* ref names a node of T that existed before this collection (refs are
 * dropped as their nodes die, so it always should); if not, what it read
 * is unknown, and the reach becomes everything. */
static int ta_ref_ok(const ta_tape *T, uint32_t ref)
{
    const ta_seg *s = (ref >> TA_SHIFT) < T->nslots ? TA_SEGOF(T, ref) : NULL;
    return s && TA_OFF(ref) < s->n;
}

/* The collector keeps ref (ta_layer.dying: it is marked TA_LIVE). */
static int ta_lives(const ta_tape *T, uint32_t ref)
{
    return (TA_SEGOF(T, ref)->op[TA_OFF(ref)] & TA_LIVE) != 0;
}

/* A lost guard reads ref: a live node joins the reach, once; a dying one
 * is walked (it counts in *pending, and *hip rises to its position). */
static void ta_lost_reads(ta_tape *T, struct ta_guards *G, uint32_t ref, uint64_t *pending,
                          uint32_t *hip)
{
    uint8_t *q;
    if (G->reach_all) return;
    if (!ta_ref_ok(T, ref)) { G->reach_all = 1; return; }
    q = &TA_SEGOF(T, ref)->op[TA_OFF(ref)];
    if (*q & TA_MARK) return;
    *q |= TA_MARK;
    if (!(*q & TA_LIVE)) {
        ++*pending;
        if (TA_SEGOF(T, ref)->pos > *hip) *hip = TA_SEGOF(T, ref)->pos;
        return;
    }
    if (G->nreach == G->capreach) {
        uint32_t cap = G->capreach ? 2u * G->capreach : 64u;
        void *p;
        if (G->capreach >= UINT32_MAX / 8u || !(p = ta_realloc(G->reach, (size_t)cap * sizeof *G->reach))) {
            G->reach_all = 1;
            return;
        }
        G->reach = (uint32_t *)p; G->capreach = cap;
    }
    G->reach[G->nreach++] = ref;
}

/* Down from position hip over the pending dying nodes (marked, not
 * TA_LIVE): what each reads joins the reach or the walk. */
static void ta_lost_walk(ta_tape *T, struct ta_guards *G, uint32_t hip, uint64_t pending)
{
    uint32_t p, k;
    for (p = hip + 1; p-- > 0 && pending && !G->reach_all;) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t i = s->n;
        while (i-- > 0 && pending) {
            uint8_t b = s->op[i];
            int kind;
            if ((b & (TA_MARK | TA_LIVE)) != TA_MARK) continue;
            --pending;
            kind = ta_kinds[b & TA_OPMASK];
            if (kind == TA_K_NARY) {           /* its inputs, as its layer holds them */
                const struct ta_attached *N = ta_nary(T);
                uint32_t n = 0;
                const uint32_t *in = N->layer->inputs(N->state, s, i, &n);
                for (k = 0; k < n; k++) ta_lost_reads(T, G, in[k], &pending, &hip);
            } else if (kind != TA_K_LEAF) {
                ta_lost_reads(T, G, s->x[i], &pending, &hip);
                if (kind == TA_K_BIN) ta_lost_reads(T, G, s->aux[i].y, &pending, &hip);
            }
        }
    }
}

/* In every collection, once it has decided what dies (ta_layer.dying):
 * drop the guards naming a dying node, counting them lost, and bring the
 * reach up to date. */
static void ta_guards_gc_one(ta_tape *T, struct ta_guards *G);
static void ta_guards_gc(ta_tape *T, void *state)
{
    struct ta_guards *G;
    for (G = (struct ta_guards *)state; G; G = G->apart) ta_guards_gc_one(T, G);   /* the set aside too */
}

static void ta_guards_gc_one(ta_tape *T, struct ta_guards *G)
{
    uint32_t i, w = 0, n, hip = 0;
    uint64_t pending = 0;
    n = G->nreach; G->nreach = 0;           /* the reach again: what lives stays (in place) */
    for (i = 0; i < n; i++) ta_lost_reads(T, G, G->reach[i], &pending, &hip);
    for (i = 0; i < G->n; i++) {
        ta_guard *g = &G->g[i];
        if (ta_ref_ok(T, g->a) && ta_lives(T, g->a) &&
            (g->cst || (ta_ref_ok(T, g->b) && ta_lives(T, g->b)))) {
            G->g[w++] = *g;
            continue;
        }
        G->lost++;
        ta_lost_reads(T, G, g->a, &pending, &hip);
        if (!g->cst) ta_lost_reads(T, G, g->b, &pending, &hip);
    }
    if (pending) ta_lost_walk(T, G, hip, pending);
    if (G->reach_all) G->nreach = 0;
    G->n = w;
    G->failed = -1;
    G->ver++;
    ta_hash_drop(G);    /* indices moved: rebuilt at the next comparison */
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
        G->lost = 0; G->nreach = 0; G->reach_all = 0;
        ta_hash_drop(G);
    }
    return TA_OK;
}

int ta_guard_apart(void)
{
    ta_tape *T = ta_self();
    struct ta_guards *G, *N;
    if (!T) return TA_ENOMEM;
    if (!(G = ta_guards_of(T))) return TA_ENOMEM;
    if (!(N = (struct ta_guards *)ta_calloc(1, sizeof *N))) return TA_ENOMEM;
    N->failed = -1;
    N->apart = G;
    ta_reattach(T, &ta_guard_layer, N);
    return TA_OK;
}

int ta_guard_rejoin(void)
{
    ta_tape *T = ta_self();
    struct ta_guards *N;
    if (!T) return TA_ENOMEM;
    if (!(N = ta_guards_if_any(T)) || !N->apart) return TA_EARG;
    ta_reattach(T, &ta_guard_layer, N->apart);
    N->apart = NULL;
    ta_guards_free(T, N);
    return TA_OK;
}

int64_t ta_guard_lost(void)
{
    ta_tape *T = ta_self_if_any();
    struct ta_guards *G = T ? ta_guards_if_any(T) : NULL;
    return G ? (int64_t)G->lost : 0;
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
