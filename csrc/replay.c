/* replay.c: the recorded tape as a program.
 *
 * ta_recompute(root): marks every node root depends on (as ta_backward
 * does) and copies them, in tape order, into a flat plan cached per root;
 * each recompute is then one ascending sweep over the plan from the leaves'
 * current values into a scratch buffer, a guard check, and a commit of the
 * new values to the tape.  An error (a domain error at the new point, or a
 * flipped guard) is found before anything is written, so the call leaves no
 * trace.
 *
 * Guards: a comparison of Values (<, <=, >, >=) returns a plain bool to
 * Python and is recorded here with its outcome.  Which guards bind a
 * recompute from root?  Control flow that shaped root's graph ran while
 * root's graph was recorded, so it compared nodes created no later than
 * root.  We therefore check every live guard whose nodes lie at or before
 * root in tape order (conservative: an unrelated earlier comparison whose
 * outcome also flips raises too; tapead.clear_guards() drops them all).
 * Those nodes are re-evaluated as extra roots, since a compared node need
 * not be an input of root (z = x*x; y = x if z > 1 else -x).  Guards die
 * with their nodes: ta_guards_gc drops any guard naming a node the
 * collector freed.
 *
 * Programs (ta_prog_*): the subgraph reaching some outputs copied into flat
 * arrays (op, a, b, c) so it no longer depends on the tape, evaluated for a
 * batch of rows.  Values are stored [node][row] in chunks of `ch` rows, so
 * each op is a short loop over the chunk that the compiler vectorises. */
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include "tapead.h"
#include "ops.h"

typedef struct {
    uint32_t a, b;      /* node refs (tape) or indices (program); b unused if cst */
    double   c;         /* constant operand when cst                           */
    uint8_t  kind, cst, out;
} ta_guard;

#define TA_NPLANS 4
typedef struct ta_plan ta_plan;

struct ta_guards {
    ta_guard *g;  uint32_t n, cap;
    uint64_t  ver;                  /* bumped whenever the list changes        */
    ta_plan  *plans[TA_NPLANS];     /* recompute plans, see below              */
    uint32_t  next;
    int64_t   failed;               /* guard index of the last TA_EGUARD       */
    double    fx, fy;               /* values that flipped it                  */
};

static void ta_plans_drop(struct ta_guards *G);

static int ta_compare(int kind, double x, double y)
{
    switch (kind) {
    case 0: return x < y;
    case 1: return x <= y;
    case 2: return x > y;
    default: return x >= y;
    }
}

static struct ta_guards *ta_guards_of(ta_tape *T)
{
    if (!T->guards) {
        T->guards = (struct ta_guards *)ta_calloc(1, sizeof *T->guards);
        if (T->guards) T->guards->failed = -1;
    }
    return T->guards;
}

void ta_guards_free(ta_tape *T)
{
    if (!T->guards) return;
    ta_plans_drop(T->guards);
    free(T->guards->g); free(T->guards);
    T->guards = NULL;
}

/* Alive = its segment is still held and the collector did not mark it DEAD. */
static int ta_ref_alive(ta_tape *T, uint32_t ref)
{
    ta_seg *s = (ref >> TA_SHIFT) < T->nslots ? TA_SEGOF(T, ref) : NULL;
    return s && TA_OFF(ref) < s->n && (s->op[TA_OFF(ref)] & TA_OPMASK) != TA_DEAD;
}

void ta_guards_gc(ta_tape *T)
{
    struct ta_guards *G = T->guards;
    uint32_t i, w = 0;
    if (!G) return;
    for (i = 0; i < G->n; i++) {
        ta_guard *g = &G->g[i];
        if (!ta_ref_alive(T, g->a) || (!g->cst && !ta_ref_alive(T, g->b))) continue;
        G->g[w++] = *g;
    }
    G->n = w;
    G->failed = -1;
    G->ver++;
    ta_plans_drop(G);   /* the collector may have freed nodes a plan points to */
}

static int ta_guard_push(ta_tape *T, ta_guard g)
{
    struct ta_guards *G = ta_guards_of(T);
    if (!G) return TA_ENOMEM;
    if (G->n == G->cap) {
        uint32_t cap = G->cap ? 2u * G->cap : 64u;
        void *p;
        if (G->cap >= UINT32_MAX / 2u) return TA_ELIMIT;
        p = ta_realloc(G->g, (size_t)cap * sizeof *G->g);
        if (!p) return TA_ENOMEM;
        G->g = (ta_guard *)p; G->cap = cap;
    }
    G->g[G->n++] = g;
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
    g.a = (uint32_t)x; g.b = 0; g.c = c; g.cst = (uint8_t)cst; g.kind = (uint8_t)kind;
    if (!cst) {
        if ((st = ta_resolve(T, y, &sy, &oy)) != TA_OK) return st;
        yv = sy->val[oy]; g.b = (uint32_t)y; g.c = 0.0;
    }
    g.out = (uint8_t)ta_compare(kind, xv, yv);
    if ((st = ta_guard_push(T, g)) != TA_OK) return st;
    return g.out;
}

int ta_cmp2(int kind, int64_t x, int64_t y) { return ta_cmp(kind, x, y, 0.0, 0); }
int ta_cmpc(int kind, int64_t x, double c)  { return ta_cmp(kind, x, 0, c, 1); }

int64_t ta_guard_count(void)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    return T->guards ? (int64_t)T->guards->n : 0;
}

int ta_guard_clear(void)
{
    ta_tape *T = ta_self();
    if (!T) return TA_ENOMEM;
    if (T->guards) { T->guards->n = 0; T->guards->failed = -1; T->guards->ver++; }
    return TA_OK;
}

int64_t ta_guard_failed(void)
{
    ta_tape *T = ta_self();
    return (T && T->guards) ? T->guards->failed : -1;
}

int ta_guard_info(int64_t gi, int *kind, int64_t *x, int64_t *y, double *c,
                  int *outcome, double *xv, double *yv)
{
    ta_tape *T = ta_self();
    ta_guard *g;
    if (!T) return TA_ENOMEM;
    if (!T->guards || gi < 0 || (uint64_t)gi >= T->guards->n) return TA_EARG;
    g = &T->guards->g[gi];
    *kind = g->kind; *outcome = g->out; *c = g->c;
    *x = (int64_t)((T->tag << 32) | g->a);
    *y = g->cst ? -1 : (int64_t)((T->tag << 32) | g->b);
    *xv = T->guards->fx; *yv = T->guards->fy;
    return TA_OK;
}

/* ------------------------------------------------------------ marking */

/* Tape order of a ref: (segment position, offset) packed for comparison. */
static uint64_t ta_where(ta_tape *T, uint32_t ref)
{
    return ((uint64_t)TA_SEGOF(T, ref)->pos << 32) | TA_OFF(ref);
}

/* Marking uses TA_MARK, and TA_LIVE as a second colour: LIVE bits mean
 * something only inside ta_gc, which cannot run during these calls, and
 * every mark is cleared (ta_unmark) before returning. */
static inline void ta_mark(ta_seg *s, uint32_t o, uint8_t bit, uint64_t *pending)
{
    if (s->op[o] & bit) return;
    s->op[o] |= bit;
    ++*pending;
}

/* Is guard g (tape refs) recorded on nodes at or before `hi`? */
static int ta_guard_in(ta_tape *T, const ta_guard *g, uint64_t hi)
{
    return ta_where(T, g->a) <= hi && (g->cst || ta_where(T, g->b) <= hi);
}

/* Give `bit` to everything the `pending` nodes carrying it depend on,
 * sweeping down from segment position hip; returns the lowest position. */
static uint32_t ta_mark_down(ta_tape *T, uint32_t hip, uint8_t bit, uint64_t pending)
{
    uint32_t p, lowpos = hip;
    for (p = hip + 1; p-- > 0 && pending;) {
        ta_seg *s = T->segs[T->order[p]];
        uint32_t i = s->n;
        lowpos = p;
        while (i-- > 0) {
            uint8_t b = s->op[i];
            int kind;
            uint32_t r;
            if (!(b & bit)) continue;
            --pending;
            kind = ta_kinds[b & TA_OPMASK];
            if (kind != TA_K_LEAF) {
                r = s->x[i]; ta_mark(TA_SEGOF(T, r), TA_OFF(r), bit, &pending);
                if (kind == TA_K_BIN) { r = s->aux[i].y; ta_mark(TA_SEGOF(T, r), TA_OFF(r), bit, &pending); }
            }
            if (!pending) break;
        }
    }
    return lowpos;
}

static void ta_unmark(ta_tape *T, uint32_t lo, uint32_t hi)
{
    uint32_t p, i;
    for (p = lo; p <= hi; p++) {
        ta_seg *s = T->segs[T->order[p]];
        for (i = 0; i < s->n; i++) s->op[i] &= (uint8_t)~(TA_MARK | TA_LIVE);
    }
}

/* Give `bit` to the nodes of guards at or before hi; returns pending. */
static uint64_t ta_mark_guards(ta_tape *T, uint64_t hi, uint8_t bit, uint64_t pending)
{
    struct ta_guards *G = T->guards;
    uint32_t k;
    if (!G) return pending;
    for (k = 0; k < G->n; k++) {
        ta_guard *g = &G->g[k];
        if (!ta_guard_in(T, g, hi)) continue;
        ta_mark(TA_SEGOF(T, g->a), TA_OFF(g->a), bit, &pending);
        if (!g->cst) ta_mark(TA_SEGOF(T, g->b), TA_OFF(g->b), bit, &pending);
    }
    return pending;
}

/* -------------------------------------------------------------- plans
 *
 * A recompute from root first builds a plan: the marked nodes in tape
 * order as flat arrays (op, input indices, constant, pointer to the node's
 * value on the tape), plus the guards that bind root.  The graph below a
 * node never changes, so the plan stays right until the collector runs
 * (nodes could move slots: all plans dropped) or the guard list changes
 * (version bump).  Later recomputes of the same root sweep the flat arrays
 * only.  A sweep computes into the plan's own buffer, checks the guards,
 * and only then writes the tape: an error leaves every value as it was. */
struct ta_plan {
    int64_t   root;  uint64_t ver;
    uint32_t  n, ng;
    uint8_t  *op, *reach;        /* reach: root depends on it (not only a guard) */
    uint32_t *a, *b;
    double   *c, **vp, *v, *d;   /* vp: the node's val on the tape            */
    ta_guard *g;                 /* a, b as plan indices                      */
    uint32_t *gidx;              /* each guard's index in the tape's list     */
};

#define TA_ADJP(vp) ((double *)((char *)(vp) + (offsetof(ta_seg, adj) - offsetof(ta_seg, val))))

static void ta_plan_free(ta_plan *L)
{
    if (!L) return;
    free(L->op); free(L->reach); free(L->a); free(L->b); free(L->c);
    free(L->vp); free(L->v); free(L->d); free(L->g); free(L->gidx); free(L);
}

static void ta_plans_drop(struct ta_guards *G)
{
    int k;
    for (k = 0; k < TA_NPLANS; k++) { ta_plan_free(G->plans[k]); G->plans[k] = NULL; }
}

static ta_plan *ta_plan_build(ta_tape *T, ta_seg *rs, uint32_t ro, int64_t root, int *st)
{
    struct ta_guards *G = T->guards;
    uint64_t hi = ((uint64_t)rs->pos << 32) | ro, pending, n = 0;
    uint32_t lowpos, lowg, p, i, k, gi;
    uint32_t *idx = NULL;
    ta_plan *L;

    rs->op[ro] |= TA_MARK;
    lowpos = ta_mark_down(T, rs->pos, TA_MARK, 1);
    pending = ta_mark_guards(T, hi, TA_LIVE, 0);
    lowg = ta_mark_down(T, rs->pos, TA_LIVE, pending);
    if (lowg < lowpos) lowpos = lowg;
    for (p = lowpos; p <= rs->pos; p++) {
        ta_seg *s = T->segs[T->order[p]];
        for (i = 0; i < s->n; i++) n += (s->op[i] & (TA_MARK | TA_LIVE)) != 0;
    }
    *st = TA_ENOMEM;
    L = (ta_plan *)ta_calloc(1, sizeof *L);
    idx = (uint32_t *)ta_malloc((size_t)(rs->pos - lowpos + 1) * TA_SEG * sizeof *idx);
    if (!L || !idx) goto fail;
    L->root = root; L->ver = G->ver; L->n = (uint32_t)n;
    L->op = (uint8_t *)ta_malloc(n); L->reach = (uint8_t *)ta_malloc(n);
    L->a = (uint32_t *)ta_malloc(n * 4); L->b = (uint32_t *)ta_malloc(n * 4);
    L->c = (double *)ta_malloc(n * 8); L->v = (double *)ta_malloc(n * 8); L->d = (double *)ta_malloc(n * 8);
    L->vp = (double **)ta_malloc(n * sizeof(double *));
    L->g = (ta_guard *)ta_malloc(((size_t)G->n + 1) * sizeof *L->g);
    L->gidx = (uint32_t *)ta_malloc(((size_t)G->n + 1) * sizeof *L->gidx);
    if (!L->gidx || !L->op || !L->reach || !L->a || !L->b || !L->c || !L->v || !L->d || !L->vp || !L->g) goto fail;
#define IDX(ref) idx[(size_t)(TA_SEGOF(T, ref)->pos - lowpos) * TA_SEG + TA_OFF(ref)]
    for (k = 0, p = lowpos; p <= rs->pos; p++) {
        ta_seg *s = T->segs[T->order[p]];
        for (i = 0; i < s->n; i++) {
            uint8_t bits = s->op[i];
            int op = bits & TA_OPMASK, kind = ta_kinds[op];
            if (!(bits & (TA_MARK | TA_LIVE))) continue;
            idx[(size_t)(p - lowpos) * TA_SEG + i] = k;
            L->op[k] = (uint8_t)op; L->reach[k] = (bits & TA_MARK) != 0;
            L->vp[k] = &s->val[i];
            L->a[k] = kind == TA_K_LEAF ? 0 : IDX(s->x[i]);
            L->b[k] = kind == TA_K_BIN ? IDX(s->aux[i].y) : 0;
            L->c[k] = kind == TA_K_CST ? s->aux[i].c : 0.0;
            k++;
        }
    }
    for (gi = 0; gi < G->n; gi++) {
        ta_guard g = G->g[gi];
        if (!ta_guard_in(T, &g, hi)) continue;
        g.a = IDX(g.a);
        if (!g.cst) g.b = IDX(g.b);
        L->gidx[L->ng] = gi;
        L->g[L->ng++] = g;
    }
#undef IDX
    *st = TA_OK;
    free(idx);
    ta_unmark(T, lowpos, rs->pos);
    return L;
fail:
    free(idx);
    ta_plan_free(L);
    ta_unmark(T, lowpos, rs->pos);
    return NULL;
}

/* The cached plan for root, or NULL. */
static ta_plan *ta_plan_find(struct ta_guards *G, int64_t root)
{
    int k;
    for (k = 0; k < TA_NPLANS; k++) {
        ta_plan *L = G->plans[k];
        if (L && L->root == root && L->ver == G->ver) return L;
    }
    return NULL;
}

int ta_recompute(int64_t root)
{
    ta_tape *T = ta_self();
    struct ta_guards *G;
    ta_seg *rs;
    uint32_t ro, k, n;
    ta_plan *L;
    double *v;
    int st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_resolve(T, root, &rs, &ro)) != TA_OK) return st;
    if (!(G = ta_guards_of(T))) return TA_ENOMEM;
    if (!(L = ta_plan_find(G, root))) {
        if (!(L = ta_plan_build(T, rs, ro, root, &st))) return st;
        ta_plan_free(G->plans[G->next]);
        G->plans[G->next] = L;
        G->next = (G->next + 1) % TA_NPLANS;
    }
    n = L->n; v = L->v;
    for (k = 0; k < n; k++) {
        int op = L->op[k], kind = ta_kinds[op];
        if (kind == TA_K_LEAF) { v[k] = *L->vp[k]; continue; }
        st = ta_forward(op, v[L->a[k]], kind == TA_K_BIN ? v[L->b[k]] : L->c[k], &v[k]);
        if (st != TA_OK) {
            T->err_op = op; T->err_x = v[L->a[k]];
            T->err_y = kind == TA_K_BIN ? v[L->b[k]] : L->c[k];
            return st;
        }
    }
    for (k = 0; k < L->ng; k++) {
        const ta_guard *g = &L->g[k];
        double xv = v[g->a], yv = g->cst ? g->c : v[g->b];
        if (ta_compare(g->kind, xv, yv) != g->out) {
            G->failed = L->gidx[k];
            G->fx = xv; G->fy = yv;
            return TA_EGUARD;
        }
    }
    for (k = 0; k < n; k++) *L->vp[k] = v[k];   /* commit */
    return TA_OK;
}

/* ============================================================ programs */

struct ta_prog {
    uint32_t n, nin, nout, nwrt, npar, ng, ch;
    uint8_t  *op;
    uint32_t *a, *b;      /* input indices (b for BIN)              */
    double   *c;          /* constants (CST)                        */
    uint32_t *in, *out, *wrt;   /* node index per column; TA_NONE if unreachable */
    uint32_t *par;  int64_t *parid;  double *pv;
    ta_guard *g;          /* a, b are node indices here             */
    uint64_t  tag;
    double   *v, *d;      /* n x ch values and adjoints             */
    int64_t   failed; double fx, fy;
};

#define TA_NONE UINT32_MAX

void ta_prog_free(ta_prog *P)
{
    if (!P) return;
    free(P->op); free(P->a); free(P->b); free(P->c);
    free(P->in); free(P->out); free(P->wrt);
    free(P->par); free(P->parid); free(P->pv); free(P->g);
    free(P->v); free(P->d);
    free(P);
}

int64_t ta_prog_size(ta_prog *P, int what)
{
    return what == 0 ? P->n : what == 1 ? P->npar : P->ng;
}

int ta_prog_params(ta_prog *P, int64_t *ids)
{
    if (P->npar) memcpy(ids, P->parid, P->npar * sizeof *ids);
    return TA_OK;
}

int64_t ta_prog_failed_guard(ta_prog *P, int *kind, int *outcome, double *xv, double *yv)
{
    if (P->failed < 0) return -1;
    *kind = P->g[P->failed].kind; *outcome = P->g[P->failed].out;
    *xv = P->fx; *yv = P->fy;
    return P->failed;
}

/* ids -> (seg, off) of leaves; TA_EARG if one is not a leaf. */
static int ta_leaf_ref(ta_tape *T, int64_t id, uint32_t *ref)
{
    ta_seg *s; uint32_t o; int st;
    if ((st = ta_resolve(T, id, &s, &o)) != TA_OK) return st;
    if ((s->op[o] & TA_OPMASK) != TA_LEAF) return TA_EARG;
    *ref = (uint32_t)id;
    return TA_OK;
}

static int ta_prog_build(ta_tape *T, ta_prog *P, const int64_t *outs, const int64_t *ins,
                         const int64_t *wrt, uint32_t *idx, uint32_t lowpos, uint32_t hipos,
                         uint64_t hi)
{
    uint32_t p, i, j, k = 0, gk = 0;
    size_t n = P->n;
#define IDX(ref) idx[(size_t)(TA_SEGOF(T, ref)->pos - lowpos) * TA_SEG + TA_OFF(ref)]
    P->op = (uint8_t *)ta_malloc(n); P->a = (uint32_t *)ta_malloc(n * 4); P->b = (uint32_t *)ta_malloc(n * 4);
    P->c = (double *)ta_malloc(n * 8);
    P->in = (uint32_t *)ta_malloc((P->nin + 1) * 4); P->out = (uint32_t *)ta_malloc((P->nout + 1) * 4);
    P->wrt = (uint32_t *)ta_malloc((P->nwrt + 1) * 4);
    P->g = (ta_guard *)ta_malloc((P->ng + 1) * sizeof *P->g);
    if (!P->op || !P->a || !P->b || !P->c || !P->in || !P->out || !P->wrt || !P->g) return TA_ENOMEM;
    for (p = lowpos; p <= hipos; p++) {
        ta_seg *s = T->segs[T->order[p]];
        for (i = 0; i < s->n; i++) {
            uint8_t b = s->op[i];
            int op = b & TA_OPMASK, kind = ta_kinds[op];
            if (!(b & TA_MARK)) continue;
            idx[(size_t)(p - lowpos) * TA_SEG + i] = k;
            P->op[k] = (uint8_t)op; P->a[k] = 0; P->b[k] = 0; P->c[k] = 0.0;
            if (kind == TA_K_LEAF) P->c[k] = s->val[i];   /* recorded value */
            else {
                P->a[k] = IDX(s->x[i]);
                if (kind == TA_K_BIN) P->b[k] = IDX(s->aux[i].y);
                else if (kind == TA_K_CST) P->c[k] = s->aux[i].c;
            }
            k++;
        }
    }
    for (j = 0; j < P->nout; j++) P->out[j] = IDX((uint32_t)outs[j]);
    /* a leaf's column: inputs are marked by a temporary b = 1 */
    for (j = 0; j < P->nin; j++) {
        uint32_t r = (uint32_t)ins[j];
        int marked = (TA_SEGOF(T, r)->op[TA_OFF(r)] & TA_MARK) != 0;
        P->in[j] = marked ? IDX(r) : TA_NONE;
        if (marked) {
            if (P->b[P->in[j]]) return TA_EARG;   /* the same leaf twice */
            P->b[P->in[j]] = 1;
        }
    }
    for (j = 0; j < P->nwrt; j++) {
        uint32_t r = (uint32_t)wrt[j];
        P->wrt[j] = (TA_SEGOF(T, r)->op[TA_OFF(r)] & TA_MARK) ? IDX(r) : TA_NONE;
    }
    for (k = 0, P->npar = 0; k < P->n; k++)
        if (P->op[k] == TA_LEAF && !P->b[k]) P->npar++;
    P->par = (uint32_t *)ta_malloc((P->npar + 1) * 4); P->parid = (int64_t *)ta_malloc((P->npar + 1) * 8);
    P->pv = (double *)ta_malloc((P->npar + 1) * 8);
    if (!P->par || !P->parid || !P->pv) return TA_ENOMEM;
    /* parameter leaves' tape ids, found again in tape order */
    j = 0;
    for (p = lowpos; p <= hipos; p++) {
        ta_seg *s = T->segs[T->order[p]];
        for (i = 0; i < s->n; i++) {
            uint32_t q;
            if (!(s->op[i] & TA_MARK) || (s->op[i] & TA_OPMASK) != TA_LEAF) continue;
            q = idx[(size_t)(p - lowpos) * TA_SEG + i];
            if (P->b[q]) continue;
            P->par[j] = q; P->parid[j] = (int64_t)((T->tag << 32) | TA_REF(s, i)); j++;
        }
    }
    for (k = 0; k < P->n; k++) if (P->op[k] == TA_LEAF) P->b[k] = 0;
    if (T->guards) {
        uint32_t gi;
        for (gi = 0; gi < T->guards->n; gi++) {
            ta_guard g = T->guards->g[gi];
            if (!ta_guard_in(T, &g, hi)) continue;
            g.a = IDX(g.a);
            if (!g.cst) g.b = IDX(g.b);
            P->g[gk++] = g;
        }
    }
#undef IDX
    return TA_OK;
}

int ta_prog_new(const int64_t *outs, uint32_t nout, const int64_t *ins, uint32_t nin,
                const int64_t *wrt, uint32_t nwrt, ta_prog **out)
{
    ta_tape *T = ta_self();
    ta_prog *P;
    uint32_t j, ref, hipos = 0, lowpos, gi;
    uint64_t hi = 0, pending = 0, nmark = 0;
    uint32_t *idx = NULL;
    int st;
    *out = NULL;
    if (!T) return TA_ENOMEM;
    if (nout == 0) return TA_EARG;
    for (j = 0; j < nin; j++) if ((st = ta_leaf_ref(T, ins[j], &ref)) != TA_OK) return st;
    for (j = 0; j < nwrt; j++) if ((st = ta_leaf_ref(T, wrt[j], &ref)) != TA_OK) return st;
    for (j = 0; j < nout; j++) {
        ta_seg *s; uint32_t o; uint64_t w;
        if ((st = ta_resolve(T, outs[j], &s, &o)) != TA_OK) return st;
        w = ((uint64_t)s->pos << 32) | o;
        if (w > hi) { hi = w; hipos = s->pos; }
    }
    P = (ta_prog *)ta_calloc(1, sizeof *P);
    if (!P) return TA_ENOMEM;
    P->nin = nin; P->nout = nout; P->nwrt = nwrt; P->tag = T->tag; P->failed = -1;
    for (j = 0; j < nout; j++) {
        uint32_t r = (uint32_t)outs[j];
        ta_mark(TA_SEGOF(T, r), TA_OFF(r), TA_MARK, &pending);
    }
    pending = ta_mark_guards(T, hi, TA_MARK, pending);
    if (T->guards)
        for (gi = 0; gi < T->guards->n; gi++) P->ng += ta_guard_in(T, &T->guards->g[gi], hi);
    lowpos = ta_mark_down(T, hipos, TA_MARK, pending);
    /* count marked nodes, leaves included */
    {
        uint32_t p, i;
        for (p = lowpos; p <= hipos; p++) {
            ta_seg *s = T->segs[T->order[p]];
            for (i = 0; i < s->n; i++) nmark += (s->op[i] & TA_MARK) != 0;
        }
    }
    P->n = (uint32_t)nmark;
    idx = (uint32_t *)ta_malloc((size_t)(hipos - lowpos + 1) * TA_SEG * sizeof *idx);
    st = idx ? ta_prog_build(T, P, outs, ins, wrt, idx, lowpos, hipos, hi) : TA_ENOMEM;
    free(idx);
    ta_unmark(T, lowpos, hipos);
    if (st == TA_OK) {
        /* rows per chunk: values and adjoints of a chunk stay near 256 KB */
        uint32_t ch = (uint32_t)(16384u / (P->n ? P->n : 1));
        ch = ch < 16u ? 16u : ch > 256u ? 256u : (ch & ~7u);
        P->ch = ch;
        P->v = (double *)ta_malloc((size_t)P->n * ch * sizeof(double));
        P->d = (double *)ta_malloc((size_t)P->n * ch * sizeof(double));
        if (!P->v || !P->d) st = TA_ENOMEM;
    }
    if (st != TA_OK) { ta_prog_free(P); return st; }
    *out = P;
    return TA_OK;
}

/* ------------------------------------------------------- batch sweeps */

/* One op over a chunk of rows; kinds expand differently.  `bad` collects
 * error statuses without a branch, so the loops stay vectorisable. */
#define FW_LEAF(N)
#define FW_UN(N)  for (s = 0; s < cb; s++) bad |= fwd_##N(xv[s], 0.0, &rv[s]);
#define FW_BIN(N) for (s = 0; s < cb; s++) bad |= fwd_##N(xv[s], yv[s], &rv[s]);
#define FW_CST(N) for (s = 0; s < cb; s++) bad |= fwd_##N(xv[s], c, &rv[s]);

#define RV_LEAF(N)
#define RV_UN(N)  for (s = 0; s < cb; s++) { double dx, dy; d_##N(xv[s], 0.0, rv[s], &dx, &dy); ax[s] += dx * g[s]; }
#define RV_CST(N) for (s = 0; s < cb; s++) { double dx, dy; d_##N(xv[s], c, rv[s], &dx, &dy); ax[s] += dx * g[s]; }
/* x and y may be the same node (x * x): two loops, each adding one side */
#define RV_BIN(N) \
    for (s = 0; s < cb; s++) { double dx, dy; d_##N(xv[s], yv[s], rv[s], &dx, &dy); ax[s] += dx * g[s]; } \
    for (s = 0; s < cb; s++) { double dx, dy; d_##N(xv[s], yv[s], rv[s], &dx, &dy); ay[s] += dy * g[s]; }

static int ta_prog_forward(ta_prog *P, uint32_t cb, uint32_t *badrow)
{
    uint32_t k, s, ch = P->ch;
    double *V = P->v;
    for (k = 0; k < P->n; k++) {
        int op = P->op[k], bad = 0;
        const double *xv = V + (size_t)P->a[k] * ch, *yv = V + (size_t)P->b[k] * ch;
        double *rv = V + (size_t)k * ch, c = P->c[k];
        switch (op) {
#define TA_OP(NAME, KIND, SYM) case TA_##NAME: FW_##KIND(NAME) break;
#include "ops.def"
#undef TA_OP
        }
        if (bad) {   /* find the first failing row and report it */
            int kind = ta_kinds[op];
            for (s = 0; s < cb; s++) {
                double y = kind == TA_K_BIN ? yv[s] : kind == TA_K_CST ? c : 0.0, r;
                int st = ta_forward(op, xv[s], y, &r);
                if (st != TA_OK) {
                    ta_tape *T = ta_self();
                    if (T) { T->err_op = op; T->err_x = xv[s]; T->err_y = y; }
                    *badrow = s;
                    return st;
                }
            }
        }
    }
    return TA_OK;
}

static void ta_prog_reverse(ta_prog *P, uint32_t cb)
{
    uint32_t k, s, ch = P->ch;
    double *V = P->v, *D = P->d;
    for (k = P->n; k-- > 0;) {
        int op = P->op[k];
        const double *xv = V + (size_t)P->a[k] * ch, *yv = V + (size_t)P->b[k] * ch;
        const double *rv = V + (size_t)k * ch, *g = D + (size_t)k * ch;
        double *ax = D + (size_t)P->a[k] * ch, *ay = D + (size_t)P->b[k] * ch, c = P->c[k];
        UNUSED(yv); UNUSED(ay); UNUSED(c);
        switch (op) {
#define TA_OP(NAME, KIND, SYM) case TA_##NAME: RV_##KIND(NAME) break;
#include "ops.def"
#undef TA_OP
        }
    }
}

int ta_prog_run(ta_prog *P, const double *X, uint64_t B, double *Y,
                const double *seed, int seedmode, double *G, int per_sample, uint64_t *row)
{
    ta_tape *T = ta_self();
    uint64_t b0;
    uint32_t j, s, ch = P->ch, cb;
    int st;
    P->failed = -1;
    *row = 0;
    if (!T) return TA_ENOMEM;
    for (j = 0; j < P->npar; j++) {   /* parameters: their current tape values */
        ta_seg *sg; uint32_t o;
        if ((st = ta_resolve(T, P->parid[j], &sg, &o)) != TA_OK) return st;
        P->pv[j] = sg->val[o];
    }
    for (b0 = 0; b0 < B; b0 += cb) {
        uint32_t badrow = 0;
        cb = (B - b0) < ch ? (uint32_t)(B - b0) : ch;
        for (j = 0; j < P->npar; j++) {
            double *r = P->v + (size_t)P->par[j] * ch, x = P->pv[j];
            for (s = 0; s < cb; s++) r[s] = x;
        }
        for (j = 0; j < P->nin; j++) {
            double *r;
            if (P->in[j] == TA_NONE) continue;
            r = P->v + (size_t)P->in[j] * ch;
            for (s = 0; s < cb; s++) r[s] = X[(b0 + s) * P->nin + j];
        }
        if ((st = ta_prog_forward(P, cb, &badrow)) != TA_OK) { *row = b0 + badrow; return st; }
        for (j = 0; j < P->ng; j++) {
            const ta_guard *g = &P->g[j];
            const double *xv = P->v + (size_t)g->a * ch, *yv = P->v + (size_t)g->b * ch;
            for (s = 0; s < cb; s++) {
                double y = g->cst ? g->c : yv[s];
                if (ta_compare(g->kind, xv[s], y) != g->out) {
                    P->failed = j; P->fx = xv[s]; P->fy = y;
                    *row = b0 + s;
                    return TA_EGUARD;
                }
            }
        }
        for (j = 0; j < P->nout; j++) {
            const double *r = P->v + (size_t)P->out[j] * ch;
            for (s = 0; s < cb; s++) Y[(b0 + s) * P->nout + j] = r[s];
        }
        if (!seedmode) continue;
        memset(P->d, 0, (size_t)P->n * ch * sizeof(double));
        for (j = 0; j < P->nout; j++) {
            double *r = P->d + (size_t)P->out[j] * ch;
            for (s = 0; s < cb; s++) r[s] += seedmode == 1 ? seed[j] : seed[(b0 + s) * P->nout + j];
        }
        ta_prog_reverse(P, cb);
        for (j = 0; j < P->nwrt; j++) {
            const double *r;
            if (P->wrt[j] == TA_NONE) continue;
            r = P->d + (size_t)P->wrt[j] * ch;
            if (per_sample) for (s = 0; s < cb; s++) G[(b0 + s) * P->nwrt + j] = r[s];
            else { double acc = 0.0; for (s = 0; s < cb; s++) acc += r[s]; G[j] += acc; }
        }
    }
    return TA_OK;
}

/* The reference for the forward sweep's cost: the same arithmetic as a
 * plain loop over flat arrays, one value per node, no marks, no segments. */
int ta_prog_ref(ta_prog *P, uint32_t reps)
{
    double *v = P->v;   /* first n doubles: reused as scalar storage */
    uint32_t r, k;
    int st = TA_OK;
    if (P->ch < 1) return TA_EARG;
    for (k = 0; k < P->n; k++) if (P->op[k] == TA_LEAF) v[k] = P->c[k];
    for (r = 0; r < reps; r++)
        for (k = 0; k < P->n; k++) {
            int op = P->op[k];
            if (op == TA_LEAF) continue;
            st |= ta_forward(op, v[P->a[k]], ta_kinds[op] == TA_K_BIN ? v[P->b[k]] : P->c[k], &v[k]);
        }
    return st ? TA_EDOMAIN : TA_OK;
}

