/* subtape.c: the sub-tape behind some roots, marked and flattened.
 *
 * Forward mode and the Wengert export (tangent.c), grad, hvp, Hessians
 * and Jacobians (higher.c), recompute plans (recompute.c) and Programs
 * (program.c) all start the same way:
 * ta_sub_extract marks every node the roots depend on (ta_sub_replay:
 * plus the nodes of the guards that bind them), numbers the marked nodes in
 * tape order and copies them into flat arrays (a ta_sub: op, input rows,
 * constant, recorded value, and the tape ref for the callers that ask),
 * the way CppAD's player holds a recording; rows and row maps are one
 * allocation, which the tape keeps for the next sub-tape (up to
 * TA_SUB_KEEP bytes).  Everything after that is a loop over the rows; the
 * numeric reverse sweep over them is ta_sub_reverse, here.  (ta_backward,
 * sweep.c, is the one sweep that stays on the tape: it accumulates into
 * the nodes' adj[] in place.)
 *
 * Marks are TA_MARK bits in the op bytes (and, while ta_bind_guards
 * decides, TA_LIVE: the collector's bit).  Nothing here appends to the
 * tape, so no collection runs while they are held, and every mark is
 * cleared before ta_sub_extract returns, on success and on failure alike;
 * a failure (allocation) leaves nothing allocated. */
#include <stdlib.h>
#include <string.h>
#include "replay.h"
#include "custom.h"

/* Give `bit` to everything the `pending` nodes carrying `bit` depend on,
 * sweeping down from segment position hip; a node carrying a bit of
 * `stop` is not marked again (stop = bit: the first pass; stop = TA_MARK |
 * TA_LIVE: ta_bind_guards' passes, which leave the nodes marked already
 * alone: their cones are marked).  Returns the lowest position, *n = how
 * many nodes got `bit` (each is visited once) and *nseg = how many
 * segments hold one.  (Counts and pointers stay in locals: the stores into
 * op[] may alias anything, so the compiler would otherwise reload them
 * after each one.) */
static uint32_t ta_mark_down(ta_tape *T, uint32_t hip, uint64_t pending, uint8_t bit,
                             uint8_t stop, uint64_t *n, uint32_t *nseg)
{
    ta_seg *const *segs = T->segs;
    const uint32_t *order = T->order;
    const uint8_t *kinds = ta_kinds;
    uint64_t cnt = 0;
    uint32_t p, lowpos = hip, ns = 0;
    for (p = hip + 1; p-- > 0 && pending;) {
        ta_seg *s = segs[order[p]];
        uint8_t *op = s->op;
        const uint32_t *x = s->x;
        const ta_aux *aux = s->aux;
        uint64_t before = cnt;
        uint32_t i = s->n;
        lowpos = p;
        while (i-- > 0) {
            uint8_t b = op[i], *q;
            int kind;
            uint32_t r;
            if (!(b & bit)) continue;
            --pending; ++cnt;
            kind = kinds[b & TA_OPMASK];
            if (kind == TA_K_NARY) {      /* a custom or take node: x[i] is no ref, its
                                             inputs are (the layer's entry) */
                const ta_cnode *e = ta_cnode_of(T, s, i);
                uint32_t k;
                for (k = 0; k < e->n; k++) {
                    r = e->in[k]; q = &segs[r >> TA_SHIFT]->op[TA_OFF(r)];
                    if (!(*q & stop)) { *q |= bit; ++pending; }
                }
            } else if (kind != TA_K_LEAF) {
                r = x[i]; q = &segs[r >> TA_SHIFT]->op[TA_OFF(r)];
                if (!(*q & stop)) { *q |= bit; ++pending; }
                if (kind == TA_K_BIN) {
                    r = aux[i].y; q = &segs[r >> TA_SHIFT]->op[TA_OFF(r)];
                    if (!(*q & stop)) { *q |= bit; ++pending; }
                }
            }
            if (!pending) break;
        }
        ns += cnt != before;
    }
    *n = cnt; *nseg = ns;
    return lowpos;
}

/* Clear `bit` at positions lo..hi. */
static void ta_unmark(ta_tape *T, uint32_t lo, uint32_t hi, uint8_t bit)
{
    uint32_t p, i;
    for (p = lo; p <= hi; p++) {
        ta_seg *s = T->segs[T->order[p]];
        uint8_t *op = s->op;
        uint32_t n = s->n;   /* in locals, so the loop vectorizes */
        for (i = 0; i < n; i++) op[i] &= (uint8_t)~bit;
    }
}

/* ------------------------------------------------ which guards bind
 *
 * A guard binds a replay (a Program, a recompute plan) if the replay's
 * result can depend on it: if its operands read, through their cones, a
 * leaf the replay varies.  A Program varies its inputs (every input
 * column, whether or not the outputs read it) and its parameters (the
 * other leaves it holds); a recompute varies the leaves it re-reads.
 * Where the comparison sits on the tape does not matter: Python may have
 * compared anything recorded so far before it chose, among Values that
 * already existed, which became an output (max(a, b), a if a > b else b,
 * sorted), so a comparison of nodes recorded after the newest output can
 * have chosen it as well as one made before it, and the tape cannot tell
 * such a choice from bookkeeping.  A comparison over Values outside what
 * the replay varies can never flip when its inputs or parameters change,
 * so it does not bind: it is taken as fixed, like the rest of the Python
 * that ran while the graph was recorded.  The cases:
 *   - operands in the outputs' cone (y = x*2 if x > 0 else ...): bind;
 *   - operands not in the outputs' cone but reading an input or a leaf of
 *     that cone, recorded before or after the outputs (z = x*x; y = x if
 *     z < 3 else -x; or a = 2*x; b = 1 - x; y = max(a, b), which compares
 *     b, made after a, with a): bind, and their nodes join the replay (z,
 *     b are computed at each row / recompute, to check it), wherever they
 *     lie on the tape;
 *   - operands over leaves the replay never reads (a running best, a loss
 *     logged earlier in the thread): do not bind, add nothing;
 *   - operands reading a parameter and an unrelated leaf u (p < u): bind;
 *     u joins as a parameter (a Program reads every leaf as an input or a
 *     parameter: u is read from its node at each run, or given in params=,
 *     as a recompute reads it from the tape).  So the replay now varies u,
 *     and a guard reading u (u < 5) binds too: the rule is closed, applied
 *     again until no guard brings in a new leaf (each round binds at least
 *     one more guard; almost always there is one round).  (Freezing u as
 *     a constant at its recorded value would be sound too, without the
 *     closure, but the flat form has no such leaf: every leaf is an input
 *     column or a parameter, which pickling, code.c and the generated
 *     kernels rely on; and a parameter is read the way a recompute reads
 *     u, from the tape now.)
 * A comparison that reads a parameter binds even if it was bookkeeping
 * (if loss < best, loss still held and computed from the same weights;
 * or a later step's comparison over the same weights, at a recompute of
 * an earlier step's loss): it could have chosen the graph, and nothing
 * here can tell.  Guards live until tapead.clear_guards(); one whose
 * nodes the collector frees is lost, not forgotten: it can no longer be
 * checked, so a replay it would bind refuses (TA_ELOST).  guard.c keeps
 * the reach of the lost guards, the live nodes they read, and they bind
 * a replay as operands would: a node of the reach that is in the replay
 * or reads a varied leaf means a lost guard binds it.  So what binds
 * (and what refuses) is bounded by what is live on the tape.
 *
 * Cost: nothing without guards; a guard whose operands are all in the
 * sub-tape binds at once; otherwise one forward pass over the positions
 * from the lowest varied leaf to the highest undecided guard's operand
 * (or node of the reach),
 * giving TA_LIVE ("varies") to every node that reads a varied leaf
 * (TA_LIVE is the collector's bit, free while nothing is recorded), then
 * a mark pass down from the new guards' operands. */

/* Give TA_LIVE to every node at positions lo..hi reading a node that has
 * it (or TA_MARK, for a leaf: the leaves of the sub-tape; the inputs are
 * given TA_LIVE by the caller). */
static void ta_vary(ta_tape *T, uint32_t lo, uint32_t hi)
{
    ta_seg *const *segs = T->segs;
    const uint8_t *kinds = ta_kinds;
    uint32_t p, i, k;
#define OPAT(r) (segs[(r) >> TA_SHIFT]->op[TA_OFF(r)])
    for (p = lo; p <= hi; p++) {
        ta_seg *s = segs[T->order[p]];
        uint8_t *op = s->op;
        const uint32_t *x = s->x;
        const ta_aux *aux = s->aux;
        uint32_t n = s->n;
        for (i = 0; i < n; i++) {
            uint8_t b = op[i], v = 0;
            switch (kinds[b & TA_OPMASK]) {
            case TA_K_LEAF: v = b & (TA_MARK | TA_LIVE); break;   /* DEAD: never marked */
            case TA_K_BIN:  v = OPAT(aux[i].y); /* fall through */
            case TA_K_UN:
            case TA_K_CST:  v = (uint8_t)((v | OPAT(x[i])) & TA_LIVE); break;
            default: {                                            /* NARY */
                const ta_cnode *e = ta_cnode_of(T, s, i);
                for (k = 0; k < e->n; k++) v |= OPAT(e->in[k]);
                v &= TA_LIVE;
            }
            }
            if (v) op[i] = (uint8_t)(b | TA_LIVE);
        }
    }
#undef OPAT
}

/* TA_LIVE -> TA_MARK at positions lo..hi; returns whether a leaf moved. */
static int ta_promote(ta_tape *T, uint32_t lo, uint32_t hi)
{
    uint32_t p, i;
    int leaf = 0;
    for (p = lo; p <= hi; p++) {
        ta_seg *s = T->segs[T->order[p]];
        uint8_t *op = s->op;
        uint32_t n = s->n;
        for (i = 0; i < n; i++) {
            uint8_t b = op[i];
            if (!(b & TA_LIVE)) continue;
            op[i] = (uint8_t)((b & ~TA_LIVE) | TA_MARK);
            leaf |= ta_kinds[b & TA_OPMASK] == TA_K_LEAF;
        }
    }
    return leaf;
}

static uint32_t ta_posof(ta_tape *T, uint32_t ref) { return TA_SEGOF(T, ref)->pos; }

/* With S's nodes marked (TA_MARK) and counted (*n nodes in *nseg segments
 * from S->lowpos): set each guard's bind, give TA_MARK to the nodes of the
 * guards that bind and count them in (S->lowpos and S->hipos widen to
 * take them in); S->ng = how many bind.  TA_ELOST if a lost guard would
 * bind (a node of the reach reads a varied leaf), with the marks between
 * S->lowpos and S->hipos left for the caller to clear. */
static int ta_bind_guards(ta_tape *T, ta_sub *S, const int64_t *ins, uint32_t nins,
                          uint64_t *n, uint32_t *nseg)
{
    struct ta_guards *G = ta_guards_if_any(T);
    uint32_t k, j, inlo = UINT32_MAX;
#define OPAT(r) (TA_SEGOF(T, r)->op[TA_OFF(r)])
    if (!G) return TA_OK;
    if (G->reach_all) return TA_ELOST;
    for (k = 0; k < G->n; k++) G->g[k].bind = 0;
    for (j = 0; j < nins; j++) {
        uint32_t p = ta_posof(T, (uint32_t)ins[j]);
        if (p < inlo) inlo = p;
    }
    for (;;) {
        uint32_t lo = S->lowpos < inlo ? S->lowpos : inlo, top = 0, p3 = 0, low3, ns3;
        uint64_t pending = 0, n3;
        int cand = 0;
        for (k = 0; k < G->n; k++) {
            ta_guard *g = &G->g[k];
            uint32_t pa, pb;
            if (g->bind) continue;
            if ((OPAT(g->a) & TA_MARK) && (g->cst || (OPAT(g->b) & TA_MARK))) {
                g->bind = 1;                    /* on the sub-tape's own nodes */
                continue;
            }
            pa = ta_posof(T, g->a); pb = g->cst ? 0 : ta_posof(T, g->b);
            if (pb > pa) pa = pb;
            if (pa < lo) continue;              /* below every varied leaf */
            cand = 1;
            if (pa > top) top = pa;
        }
        for (k = 0; k < G->nreach; k++) {       /* the lost guards', as their operands */
            uint32_t r = G->reach[k], pr = ta_posof(T, r);
            if (OPAT(r) & TA_MARK) return TA_ELOST;   /* read by the replay: reads its leaves */
            if (pr < lo) continue;
            cand = 1;
            if (pr > top) top = pr;
        }
        if (!cand) break;
        for (j = 0; j < nins; j++) {
            uint32_t r = (uint32_t)ins[j], p = ta_posof(T, r);
            if (p >= lo && p <= top) OPAT(r) |= TA_LIVE;
        }
        ta_vary(T, lo, top);
        for (k = 0; k < G->n; k++) {            /* TA_LIVE is clear outside lo..top */
            ta_guard *g = &G->g[k];
            if (g->bind) continue;
            if ((OPAT(g->a) & TA_LIVE) || (!g->cst && (OPAT(g->b) & TA_LIVE))) g->bind = 2;
        }
        for (k = 0; k < G->nreach && !(OPAT(G->reach[k]) & TA_LIVE); k++) {}
        ta_unmark(T, lo, top, TA_LIVE);
        if (k < G->nreach) return TA_ELOST;
        for (k = 0; k < G->n; k++) {            /* the new ones' nodes join, as TA_LIVE */
            ta_guard *g = &G->g[k];
            if (g->bind != 2) continue;
            g->bind = 1;
            if (!(OPAT(g->a) & TA_MARK)) {
                ta_mark(TA_SEGOF(T, g->a), TA_OFF(g->a), TA_LIVE, &pending);
                if (ta_posof(T, g->a) > p3) p3 = ta_posof(T, g->a);
            }
            if (!g->cst && !(OPAT(g->b) & TA_MARK)) {
                ta_mark(TA_SEGOF(T, g->b), TA_OFF(g->b), TA_LIVE, &pending);
                if (ta_posof(T, g->b) > p3) p3 = ta_posof(T, g->b);
            }
        }
        if (!pending) break;
        low3 = ta_mark_down(T, p3, pending, TA_LIVE, TA_MARK | TA_LIVE, &n3, &ns3);
        *n += n3; *nseg += ns3;                 /* (segments counted twice: a bound) */
        if (low3 < S->lowpos) S->lowpos = low3;
        if (p3 > S->hipos) S->hipos = p3;       /* a guard on nodes after the newest root */
        if (!ta_promote(T, low3, p3)) break;    /* no new leaf: nothing more varies */
    }
    for (k = 0; k < G->n; k++) S->ng += G->g[k].bind;
    return TA_OK;
#undef OPAT
}

/* Memory for a sub-tape: the tape's spare block if it is big enough
 * (taken until ta_sub_free gives it back: a sub-tape taken meanwhile gets
 * its own), else a new one. */
static void *ta_sub_mem(ta_tape *T, size_t need, size_t *cap)
{
    void *m = T->spare_sub;
    if (m && T->spare_subcap >= need) {
        T->spare_sub = NULL;
        *cap = T->spare_subcap;
        return m;
    }
    *cap = need;
    return ta_malloc(need);
}

void ta_sub_free(ta_sub *S)
{
    ta_tape *T = S->T;
    if (S->mem && S->cap <= TA_SUB_KEEP && (!T->spare_sub || T->spare_subcap < S->cap)) {
        free(T->spare_sub);             /* keep the bigger block */
        T->spare_sub = S->mem; T->spare_subcap = S->cap;
    } else free(S->mem);
    free(S->lst);
    S->mem = NULL; S->map = NULL; S->op = NULL; S->a = S->b = S->ref = NULL; S->c = S->v = NULL;
    S->lst = NULL; S->nlst = S->caplst = 0;
}

/* Room for n more entries in S's operand lists. */
static int ta_sub_lst_room(ta_sub *S, size_t n)
{
    size_t cap;
    void *p;
    if (S->nlst + n <= S->caplst) return TA_OK;
    if (n > (UINT32_MAX - S->nlst) / 2u) return TA_ENOMEM;   /* a list starts at a uint32_t */
    cap = S->caplst ? S->caplst : 64u;
    while (cap < S->nlst + n) cap *= 2u;
    if (!(p = ta_realloc(S->lst, cap * sizeof *S->lst))) return TA_ENOMEM;
    S->lst = (uint32_t *)p;
    S->caplst = cap;
    return TA_OK;
}

/* Number the n marked nodes of positions lowpos..hipos (nseg segments
 * hold them) and copy them into S's rows, then clear the marks (on
 * failure too).  Rows, the map by slot and the row maps of the
 * nseg segments are one allocation, made before any mark is cleared. */
static int ta_sub_flat(ta_tape *T, ta_sub *S, uint64_t n, uint32_t nseg, int refs)
{
    ta_seg *const *segs = T->segs;
    const uint32_t *order = T->order;
    const uint8_t *kinds = ta_kinds;
    uint32_t p, i, k = 0, lowpos = S->lowpos, hipos = S->hipos;
    uint32_t **map, *maps, *ra, *rb, *rref = NULL;
    uint8_t *rop;
    double *rc, *rv;
    size_t m1, row = 2 * sizeof(double) + (refs ? 3 : 2) * sizeof(uint32_t) + 1, fixed;
    /* the map by slot (pointers), then the segments' row maps: every part
     * starts aligned for what it holds (doubles first) */
    fixed = (size_t)T->nslots * sizeof *map + (size_t)nseg * TA_SEG * sizeof *maps;
    if (n >= TA_NONE || (uint64_t)n + 1 > (SIZE_MAX - fixed) / row) goto nomem;
    m1 = (size_t)n + 1;      /* one spare row: no zero-size allocation */
    if (!(S->mem = ta_sub_mem(T, m1 * row + fixed, &S->cap))) goto nomem;
    rc = S->c = (double *)S->mem;
    rv = S->v = rc + m1;
    map = S->map = (uint32_t **)(rv + m1);
    maps = (uint32_t *)(map + T->nslots);
    ra = S->a = maps + (size_t)nseg * TA_SEG;
    rb = S->b = ra + m1;
    if (refs) rref = S->ref = rb + m1;
    rop = S->op = (uint8_t *)(rb + (refs ? 2 : 1) * m1);
    S->lst = NULL; S->nlst = S->caplst = 0;
    /* the row of a marked ref: its segment comes no later than this one */
#define ROW(ref) (map[(ref) >> TA_SHIFT][TA_OFF(ref)])
    for (p = lowpos; p <= hipos; p++) {
        ta_seg *s = segs[order[p]];
        uint8_t *op = s->op;
        const uint32_t *x = s->x;
        const ta_aux *aux = s->aux;
        const double *val = s->val;
        uint32_t end = s->n, base = TA_REF(s, 0), *m;
        for (i = 0; i < end && !(op[i] & TA_MARK); i++) {}
        if (i == end) { map[s->slot] = NULL; continue; }
        /* (slots past s->n are never looked up: no ref names them) */
        m = map[s->slot] = maps; maps += TA_SEG;
        memset(m, 0xFF, i * sizeof *m);           /* TA_NONE: not in the sub-tape */
        for (; i < end; i++) {
            uint8_t bits = op[i];
            int o = bits & TA_OPMASK;
            if (!(bits & TA_MARK)) { m[i] = TA_NONE; continue; }
            m[i] = k;
            rop[k] = (uint8_t)o;
            rv[k] = val[i];
            switch (kinds[o]) {
            case TA_K_BIN: ra[k] = ROW(x[i]); rb[k] = ROW(aux[i].y); break;
            case TA_K_CST: ra[k] = ROW(x[i]); rb[k] = 0; rc[k] = aux[i].c; break;
            case TA_K_UN:  ra[k] = ROW(x[i]); rb[k] = 0; break;
            default:       ra[k] = 0; rb[k] = 0; break;   /* LEAF, CUSTOM */
            }
            if (o == TA_TAKE) {           /* its index's row, and its list */
                const ta_cnode *e = ta_cnode_of(T, s, i);
                uint32_t j;
                if (ta_sub_lst_room(S, e->n) != TA_OK) goto nomem;
                ra[k] = ROW(e->in[0]);
                rb[k] = (uint32_t)S->nlst;
                rc[k] = (double)aux[i].y;
                S->lst[S->nlst++] = e->n - 1u;
                for (j = 1; j < e->n; j++) S->lst[S->nlst++] = ROW(e->in[j]);
            }
            if (rref) rref[k] = base | i;
            k++;
        }
        /* the marks go in a loop of their own, which vectorizes, while
         * op[] is still in cache */
        for (i = 0; i < end; i++) op[i] &= (uint8_t)~TA_MARK;
    }
#undef ROW
    S->n = k;
    return TA_OK;
nomem:
    ta_unmark(T, lowpos, hipos, TA_MARK);
    ta_sub_free(S);
    return TA_ENOMEM;
}

/* The sub-tape behind roots (and, for a replay, the guards that bind it:
 * ins, nins are its inputs). */
static int ta_sub_take(ta_tape *T, const int64_t *roots, uint32_t nroots, const int64_t *ins,
                       uint32_t nins, int flags, int replay, int take, ta_sub *S)
{
    uint64_t pending = 0, n;
    uint32_t j, nseg;
    int st;
    memset(S, 0, sizeof *S);
    S->T = T;
    for (j = 0; j < nroots; j++) {
        uint32_t r = (uint32_t)roots[j], p = TA_SEGOF(T, r)->pos;
        if (p > S->hipos) S->hipos = p;
        ta_mark(TA_SEGOF(T, r), TA_OFF(r), TA_MARK, &pending);
    }
    S->lowpos = ta_mark_down(T, S->hipos, pending, TA_MARK, TA_MARK, &n, &nseg);
    if (replay) {
        if ((st = ta_bind_guards(T, S, ins, nins, &n, &nseg)) != TA_OK) {
            ta_unmark(T, S->lowpos, S->hipos, TA_MARK);
            return st;
        }
        if (nseg > S->hipos - S->lowpos + 1) nseg = S->hipos - S->lowpos + 1;
    }
    if ((st = ta_sub_flat(T, S, n, nseg, flags & TA_SUB_REFS)) != TA_OK || !replay) return st;
    /* a custom node that a bound guard reads (ta_plain checked the roots'
     * own cone): its value cannot be recomputed; a take node, where the
     * replay has no case for it */
    if (ta_custom_live(T) || (!take && S->lst)) {
        for (j = S->n; j-- > 0;) {
            if (S->op[j] == TA_CUSTOM) {
                ta_custom_blame(T, S->ref[j]);
                ta_sub_free(S);
                return TA_ECUSTOM;
            }
            if (S->op[j] == TA_TAKE && !take) {
                ta_sub_free(S);
                return TA_ETAKE;
            }
        }
    }
    return TA_OK;
}

int ta_sub_extract(ta_tape *T, const int64_t *roots, uint32_t nroots, int flags, ta_sub *S)
{
    return ta_sub_take(T, roots, nroots, NULL, 0, flags, 0, 1, S);
}

int ta_sub_replay(ta_tape *T, const int64_t *roots, uint32_t nroots, const int64_t *ins,
                  uint32_t nins, int take, ta_sub *S)
{
    return ta_sub_take(T, roots, nroots, ins, nins, TA_SUB_REFS, 1, take, S);
}

void ta_sub_reverse(const ta_sub *S, double *adj, double *px, double *py)
{
    const uint8_t *op = S->op;
    const uint32_t *a = S->a, *b = S->b;
    const double *c = S->c, *v = S->v;
    uint32_t k;
    for (k = S->n; k-- > 0;) {
        int kind = ta_kinds[op[k]];
        double dx = 0.0, dy = 0.0;
        if (op[k] == TA_TAKE)             /* the candidate it took: its adjoint, unchanged */
            adj[S->lst[b[k] + 1u + (uint32_t)c[k]]] += adj[k];
        else if (kind != TA_K_LEAF && kind != TA_K_NARY && !(ta_reads[op[k]] & TA_RD_STOP)) {
            /* (CUSTOM: ta_plain keeps it out) */
            ta_row_partials(op[k], a, b, c, v, k, &dx, &dy);
            adj[a[k]] += dx * adj[k];
            if (kind == TA_K_BIN) adj[b[k]] += dy * adj[k];
        }
        if (px) { px[k] = dx; py[k] = dy; }
    }
}
