/* recompute.c: v.recompute(), the recorded graph re-evaluated in place.
 *
 * ta_recompute(root) takes the sub-tape behind root, plus the nodes of the
 * guards that bind root (those reading a leaf it re-reads: guard.c), flat
 * in tape order (ta_sub_replay, subtape.c), into a plan cached per root; each recompute is
 * then one ascending sweep over the plan from the leaves' current values
 * into a scratch buffer, a guard check, and a commit of the new values to
 * the tape.  An error (a domain error at the new point, or a flipped
 * guard) is found before anything is written, so the call leaves no
 * trace.  A compared node need not be an input of root (z = x*x; y = x if
 * z > 1 else -x), so guard nodes are re-evaluated as extra roots. */
#include <stdlib.h>
#include <string.h>
#include "replay.h"
#include "custom.h"
#include "ops.h"

/* -------------------------------------------------------------- plans
 *
 * A recompute from root first builds a plan: the marked nodes in tape
 * order as flat arrays (op, input indices, constant, pointer to the node's
 * value on the tape), plus the guards that bind root.  The graph below a
 * node never changes, so the plan stays right until the collector runs
 * (nodes could move slots: all plans dropped) or the guard list changes
 * (version bump).  A tape's plans are a layer of their own (tapead.h:
 * ta_attach), dropped at every collection and with the tape.  Later recomputes of the same root sweep the flat arrays
 * only.  A sweep computes into the plan's own buffer, checks the guards,
 * and only then writes the tape: an error leaves every value as it was. */
typedef struct ta_plan ta_plan;
#define TA_NPLANS 4
struct ta_plan {
    int64_t   root;  uint64_t ver;
    uint32_t  n, ng;
    uint8_t  *op;
    uint32_t *a, *b;
    double   *c, **vp, *v;       /* vp: the node's val on the tape            */
    ta_guard *g;                 /* a, b as plan indices                      */
    uint32_t *gidx;              /* each guard's index in the tape's list     */
};

static void ta_plan_free(ta_plan *L)
{
    if (!L) return;
    free(L->op); free(L->a); free(L->b); free(L->c);
    free(L->vp); free(L->v); free(L->g); free(L->gidx); free(L);
}

/* A tape's plans, the most recent TA_NPLANS (next: the one to replace). */
struct ta_plans { ta_plan *p[TA_NPLANS]; uint32_t next; };

/* At every collection (ta_layer.collected): the collector may have freed
 * nodes a plan points to. */
static void ta_plans_drop(ta_tape *T, void *state)
{
    struct ta_plans *P = (struct ta_plans *)state;
    int k;
    (void)T;
    for (k = 0; k < TA_NPLANS; k++) { ta_plan_free(P->p[k]); P->p[k] = NULL; }
}

/* With the tape (ta_layer.release). */
static void ta_plans_free(ta_tape *T, void *state)
{
    ta_plans_drop(T, state);
    free(state);
}

static const struct ta_layer ta_plans_layer = { .collected = ta_plans_drop, .release = ta_plans_free };

/* T's plans, attached with the first (NULL: out of memory). */
static struct ta_plans *ta_plans_of(ta_tape *T)
{
    struct ta_plans *P = (struct ta_plans *)ta_attached(T, &ta_plans_layer);
    if (!P && (P = (struct ta_plans *)ta_calloc(1, sizeof *P)) != NULL &&
        ta_attach(T, &ta_plans_layer, P) != TA_OK) {
        free(P);
        P = NULL;
    }
    return P;
}

static ta_plan *ta_plan_build(ta_tape *T, int64_t root, int *st)
{
    struct ta_guards *G = ta_guards_if_any(T);
    uint32_t k, gi;
    size_t n;
    ta_sub S;
    ta_plan *L;

    if ((*st = ta_sub_replay(T, &root, 1, NULL, 0, 0, &S)) != TA_OK) return NULL;
    *st = TA_ENOMEM;
    if (!(L = (ta_plan *)ta_calloc(1, sizeof *L))) goto fail;
    L->root = root; L->ver = G->ver; L->n = n = S.n;
    L->op = (uint8_t *)ta_malloc(n + 1);
    L->a = (uint32_t *)ta_malloc((n + 1) * 4); L->b = (uint32_t *)ta_malloc((n + 1) * 4);
    L->c = (double *)ta_malloc((n + 1) * 8); L->v = (double *)ta_malloc((n + 1) * 8);
    L->vp = (double **)ta_malloc((n + 1) * sizeof(double *));
    L->g = (ta_guard *)ta_malloc(((size_t)S.ng + 1) * sizeof *L->g);
    L->gidx = (uint32_t *)ta_malloc(((size_t)S.ng + 1) * sizeof *L->gidx);
    if (!L->gidx || !L->op || !L->a || !L->b || !L->c || !L->v || !L->vp || !L->g) goto fail;
    memcpy(L->op, S.op, n); memcpy(L->a, S.a, n * 4); memcpy(L->b, S.b, n * 4);
    for (k = 0; k < S.n; k++) L->c[k] = ta_sub_c(&S, k);
    for (k = 0; k < S.n; k++) L->vp[k] = &TA_SEGOF(T, S.ref[k])->val[TA_OFF(S.ref[k])];
    for (gi = 0; gi < G->n; gi++) {
        ta_guard g = G->g[gi];
        if (!g.bind) continue;
        g.a = ta_sub_row(&S, g.a);
        if (!g.cst) g.b = ta_sub_row(&S, g.b);
        L->gidx[L->ng] = gi;
        L->g[L->ng++] = g;
    }
    *st = TA_OK;
    ta_sub_free(&S);
    return L;
fail:
    ta_sub_free(&S);
    ta_plan_free(L);
    return NULL;
}

/* The cached plan for root, or NULL. */
static ta_plan *ta_plan_find(const struct ta_plans *P, const struct ta_guards *G, int64_t root)
{
    int k;
    for (k = 0; k < TA_NPLANS; k++) {
        ta_plan *L = P->p[k];
        if (L && L->root == root && L->ver == G->ver) return L;
    }
    return NULL;
}

int ta_recompute(int64_t root)
{
    ta_tape *T = ta_self();
    struct ta_guards *G;
    struct ta_plans *P;
    ta_seg *rs;
    uint32_t ro, k, n;
    ta_plan *L;
    double *v;
    int st;
    if (!T) return TA_ENOMEM;
    if ((st = ta_plain(T, &root, 1, 0)) != TA_OK) return st;
    if ((st = ta_resolve(T, root, &rs, &ro)) != TA_OK) return st;
    if (!(G = ta_guards_of(T)) || !(P = ta_plans_of(T))) return TA_ENOMEM;
    if (!(L = ta_plan_find(P, G, root))) {
        if (!(L = ta_plan_build(T, root, &st))) return st;
        ta_plan_free(P->p[P->next]);
        P->p[P->next] = L;
        P->next = (P->next + 1) % TA_NPLANS;
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
