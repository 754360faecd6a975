/* program.c: compiled Programs, the flat form of a recorded graph.
 *
 * A Program is the sub-tape reaching some outputs copied into flat arrays
 * (op, a, b, c per node, in tape order, so every input index is below the
 * node's own), plus which leaves are input columns, which are parameters,
 * which are differentiated (wrt), and the guards that bind it (those
 * reading an input or a parameter: subtape.c, ta_bind_guards).
 * That flat form no longer depends on the tape, so it is also what pickling
 * carries: ta_prog_flat copies it out, ta_prog_load checks every field of
 * one handed in (from any bytes at all) and rebuilds the Program.
 *
 * Parameters: a Program compiled in-process reads its parameter leaves
 * from the tape at each run (live), so training updates are seen; once
 * parameter values are set (ta_prog_set_params, or a loaded Program) it
 * holds them instead.  Running is in parallel.c and batch.c, over the
 * execution code that code.c derives from the flat form. */
#include <stdlib.h>
#include <string.h>
#include "replay.h"
#include "custom.h"
#include "ops.h"

void ta_prog_drop(ta_prog **box)
{
    if (box && *box) { ta_prog_free(*box); *box = NULL; }
}

void ta_prog_free(ta_prog *P)
{
    if (!P) return;
    ta_ws_drop(P);
    ta_code_free(P->code);
    free(P->op); free(P->a); free(P->b); free(P->c); free(P->lst);
    free(P->in); free(P->out); free(P->wrt);
    free(P->par); free(P->parid); free(P->pv); free(P->g);
    free(P);
}

/* The flat arrays for P's sizes (one spare slot each: no zero-size
 * allocation).  TA_OK or TA_ENOMEM (the caller frees P). */
static int ta_prog_alloc(ta_prog *P)
{
    size_t n = (size_t)P->n + 1;
    P->op = (uint8_t *)ta_malloc(n); P->a = (uint32_t *)ta_malloc(n * 4);
    P->b = (uint32_t *)ta_malloc(n * 4); P->c = (double *)ta_malloc(n * 8);
    P->in = (uint32_t *)ta_malloc(((size_t)P->nin + 1) * 4);
    P->out = (uint32_t *)ta_malloc(((size_t)P->nout + 1) * 4);
    P->wrt = (uint32_t *)ta_malloc(((size_t)P->nwrt + 1) * 4);
    P->par = (uint32_t *)ta_malloc(((size_t)P->npar + 1) * 4);
    P->pv = (double *)ta_malloc(((size_t)P->npar + 1) * 8);
    P->g = (ta_guard *)ta_malloc(((size_t)P->ng + 1) * sizeof *P->g);
    P->lst = (uint32_t *)ta_malloc(((size_t)P->nlst + 1) * 4);
    if (!P->op || !P->a || !P->b || !P->c || !P->in || !P->out || !P->wrt || !P->par ||
        !P->pv || !P->g || !P->lst)
        return TA_ENOMEM;
    return TA_OK;
}

/* ------------------------------------------------------ from the tape */

/* ids -> refs of leaves; TA_EARG if one is not a leaf. */
static int ta_leaf_ref(ta_tape *T, int64_t id)
{
    ta_seg *s; uint32_t o; int st;
    if ((st = ta_resolve(T, id, &s, &o)) != TA_OK) return st;
    return (s->op[o] & TA_OPMASK) == TA_LEAF ? TA_OK : TA_EARG;
}

/* P from the sub-tape S behind the outputs; P's sizes are set.  TA_OK,
 * TA_ENOMEM, or TA_EARG (an input listed twice). */
static int ta_prog_copy(ta_tape *T, ta_prog *P, const ta_sub *S, const int64_t *outs,
                        const int64_t *ins, const int64_t *wrt)
{
    const struct ta_guards *G;
    uint32_t j, k, gk = 0;
    uint64_t q;
    int st;
    if ((st = ta_prog_alloc(P)) != TA_OK) return st;
    if (!(P->parid = (int64_t *)ta_malloc(((size_t)P->npar + 1) * 8))) return TA_ENOMEM;
    memcpy(P->op, S->op, P->n); memcpy(P->a, S->a, (size_t)P->n * 4);
    memcpy(P->b, S->b, (size_t)P->n * 4);
    if (P->nlst) memcpy(P->lst, S->lst, (size_t)P->nlst * 4);
    for (k = 0; k < P->n; k++)   /* a leaf's c: its recorded value */
        P->c[k] = P->op[k] == TA_LEAF ? S->v[k] : ta_sub_c(S, k);
    for (j = 0; j < P->nout; j++) P->out[j] = ta_sub_row(S, (uint32_t)outs[j]);
    for (j = 0; j < P->nwrt; j++) P->wrt[j] = ta_sub_row(S, (uint32_t)wrt[j]);
    /* a leaf's column, if the outputs reach it (else TA_NONE); b = 1 marks
     * the inputs for now (a leaf has no b) */
    for (j = 0; j < P->nin; j++) {
        P->in[j] = ta_sub_row(S, (uint32_t)ins[j]);
        if (P->in[j] == TA_NONE) continue;
        if (P->b[P->in[j]]) return TA_EARG;   /* the same leaf twice */
        P->b[P->in[j]] = 1;
    }
    /* parameters: the other leaves, with their tape ids; first those in wrt,
     * in wrt's order (params= and .params follow it), then the rest in tape
     * order (b = 2 marks a parameter not yet placed) */
    for (k = 0; k < P->n; k++) if (P->op[k] == TA_LEAF && !P->b[k]) P->b[k] = 2;
    for (j = 0, q = 0; q < (uint64_t)P->nwrt + P->n; q++) {
        k = q < P->nwrt ? P->wrt[q] : (uint32_t)(q - P->nwrt);
        if (k == TA_NONE || P->op[k] != TA_LEAF || P->b[k] != 2) continue;
        P->b[k] = 3;
        P->par[j] = k; P->pv[j] = S->v[k];
        P->parid[j] = TA_ID(T, S->ref[k]); j++;
    }
    for (k = 0; k < P->n; k++) if (P->op[k] == TA_LEAF) P->b[k] = 0;
    if ((G = ta_guards_if_any(T)) != NULL) {
        uint32_t gi;
        for (gi = 0; gi < G->n; gi++) {
            ta_guard g = G->g[gi];
            if (!g.bind) continue;
            g.a = ta_sub_row(S, g.a);
            if (!g.cst) g.b = ta_sub_row(S, g.b);
            P->g[gk++] = g;
        }
    }
    return TA_OK;
}

int ta_prog_new(const int64_t *outs, uint32_t nout, const int64_t *ins, uint32_t nin,
                const int64_t *wrt, uint32_t nwrt, ta_prog **out)
{
    ta_tape *T = ta_self();
    ta_prog *P;
    ta_sub S;
    uint32_t j, k, nleaf = 0, nmarkin = 0;
    int st;
    *out = NULL;
    if (!T) return TA_ENOMEM;
    if (nout == 0 || !outs || (nin && !ins) || (nwrt && !wrt)) return TA_EARG;
    for (j = 0; j < nin; j++) if ((st = ta_leaf_ref(T, ins[j])) != TA_OK) return st;
    for (j = 0; j < nwrt; j++) if ((st = ta_leaf_ref(T, wrt[j])) != TA_OK) return st;
    if ((st = ta_plain(T, outs, nout, 1)) != TA_OK) return st;
    for (j = 0; j < nout; j++) {
        ta_seg *s; uint32_t o;
        if ((st = ta_resolve(T, outs[j], &s, &o)) != TA_OK) return st;
    }
    P = (ta_prog *)ta_calloc(1, sizeof *P);
    if (!P) return TA_ENOMEM;
    P->nin = nin; P->nout = nout; P->nwrt = nwrt; P->live = 1;
    if ((st = ta_sub_replay(T, outs, nout, ins, nin, 1, &S)) != TA_OK) {
        ta_prog_free(P);
        return st;
    }
    P->ng = S.ng;
    for (k = 0; k < S.n; k++) nleaf += S.op[k] == TA_LEAF;
    for (j = 0; j < nin; j++) nmarkin += ta_sub_row(&S, (uint32_t)ins[j]) != TA_NONE;
    P->n = S.n;
    P->nlst = (uint32_t)S.nlst;
    /* a duplicate input makes this too small, but then the copy stops
     * with TA_EARG before it writes a parameter */
    P->npar = nleaf > nmarkin ? nleaf - nmarkin : 0;
    st = ta_prog_copy(T, P, &S, outs, ins, wrt);
    ta_sub_free(&S);
    if (st == TA_OK) st = ta_code_new(P);
    if (st != TA_OK) { ta_prog_free(P); return st; }
    *out = P;
    return TA_OK;
}

/* ------------------------------------------------------------ access */

int64_t ta_prog_size(ta_prog *P, int what)
{
    if (!P) return TA_EARG;
    switch (what) {
    case TA_PS_NODES:   return P->n;
    case TA_PS_PARAMS:  return P->npar;
    case TA_PS_GUARDS:  return P->ng;
    case TA_PS_INPUTS:  return P->nin;
    case TA_PS_OUTPUTS: return P->nout;
    case TA_PS_WRT:     return P->nwrt;
    case TA_PS_LIVE:    return P->live;
    case TA_PS_BLOCK:   return TA_BLOCK;
    case TA_PS_KERNEL:  return P->kernel != NULL;
    case TA_PS_CHUNK:   return !P->code ? 1 : ta_run_chunk(P->code, 1);   /* a summed gradient's run */
    }
    return TA_EARG;
}

int ta_prog_params(ta_prog *P, int64_t *ids)
{
    if (!P || !ids) return TA_EARG;
    if (P->parid && P->npar) memcpy(ids, P->parid, (size_t)P->npar * sizeof *ids);
    return TA_OK;
}

/* The parameter values a run uses when none are given: read from the
 * tape (this thread's) if live, else held. */
int ta_prog_param_values(ta_prog *P, double *out, uint32_t npar)
{
    uint32_t j;
    if (!P || !out || npar != P->npar) return TA_EARG;
    if (!P->live) { memcpy(out, P->pv, (size_t)npar * sizeof *out); return TA_OK; }
    {
        ta_tape *T = ta_self();
        if (!T) return TA_ENOMEM;
        for (j = 0; j < npar; j++) {
            ta_seg *s; uint32_t o; int st;
            if ((st = ta_resolve(T, P->parid[j], &s, &o)) != TA_OK) return st;
            out[j] = s->val[o];
        }
    }
    return TA_OK;
}

int ta_prog_set_params(ta_prog *P, const double *v, uint32_t npar)
{
    if (!P || npar != P->npar || (npar && !v)) return TA_EARG;
    if (npar) memcpy(P->pv, v, (size_t)npar * sizeof *v);
    P->live = 0;
    return TA_OK;
}

int ta_prog_follow(ta_prog *P)
{
    if (!P) return TA_EARG;
    if (!P->parid) return TA_EARG;     /* loaded: there are no Values to follow */
    P->live = 1;
    return TA_OK;
}

int ta_prog_set_kernel(ta_prog *P, void *fn, void *ufn, uint64_t nscratch, int abi)
{
    if (!P || abi != TA_KERNEL_ABI || nscratch > ((uint64_t)1 << 40) || (ufn && !fn)) return TA_EARG;
    P->kernel = (ta_kernel_fn)fn;    /* (a data to function pointer cast: POSIX allows it) */
    P->ukernel = (ta_uniform_fn)ufn;
    P->nscratch = fn ? nscratch : 0;
    return TA_OK;
}

/* ------------------------------------------------ flat form (pickling) */

int ta_prog_flat(ta_prog *P, ta_flat_t *f)
{
    uint32_t j;
    if (!P || !f) return TA_EARG;
    if (!f->op) {      /* sizes only */
        f->n = P->n; f->nin = P->nin; f->nout = P->nout; f->nwrt = P->nwrt;
        f->npar = P->npar; f->ng = P->ng; f->nlst = P->nlst;
        return TA_OK;
    }
    if (f->n != P->n || f->nin != P->nin || f->nout != P->nout || f->nwrt != P->nwrt ||
        f->npar != P->npar || f->ng != P->ng || f->nlst != P->nlst || !f->a || !f->b || !f->c ||
        !f->in || !f->out || !f->wrt || !f->par || !f->gab || !f->gc || !f->gkind || !f->lst)
        return TA_EARG;
    memcpy(f->lst, P->lst, (size_t)P->nlst * 4);
    memcpy(f->op, P->op, P->n); memcpy(f->a, P->a, (size_t)P->n * 4);
    memcpy(f->b, P->b, (size_t)P->n * 4); memcpy(f->c, P->c, (size_t)P->n * 8);
    memcpy(f->in, P->in, (size_t)P->nin * 4); memcpy(f->out, P->out, (size_t)P->nout * 4);
    memcpy(f->wrt, P->wrt, (size_t)P->nwrt * 4); memcpy(f->par, P->par, (size_t)P->npar * 4);
    for (j = 0; j < P->ng; j++) {
        const ta_guard *g = &P->g[j];
        f->gab[2 * j] = g->a; f->gab[2 * j + 1] = g->cst ? 0 : g->b;
        f->gc[j] = g->cst ? g->c : 0.0;
        f->gkind[j] = (uint8_t)(g->kind | (g->cst << 2) | (g->out << 3));
    }
    return TA_OK;
}

/* Every field of f checked: op codes known (not DEAD), inputs below the
 * node, a TAKE node's list inside lst with at least one candidate, every
 * leaf exactly one input column or one parameter, columns and guards
 * naming nodes that exist.  TA_EARG names nothing more. */
static int ta_flat_check(const ta_flat_t *f, uint8_t *role)
{
    uint32_t k, j;
    for (k = 0; k < f->n; k++) {
        int op = f->op[k], kind;
        if (op >= TA_NOPS || op == TA_DEAD || op == TA_CUSTOM) return TA_EARG;
        kind = ta_kinds[op];
        if (kind != TA_K_LEAF && f->a[k] >= k) return TA_EARG;
        if (kind == TA_K_BIN && f->b[k] >= k) return TA_EARG;
        if (op == TA_TAKE) {
            uint32_t at = f->b[k], m;
            if (at >= f->nlst || (m = f->lst[at]) == 0 || m > f->nlst - at - 1u) return TA_EARG;
            for (j = 1; j <= m; j++) if (f->lst[at + j] >= k) return TA_EARG;
        }
    }
    memset(role, 0, f->n);                /* 1 input, 2 parameter */
    for (j = 0; j < f->nin; j++) {
        uint32_t q = f->in[j];
        if (q == TA_NONE) continue;
        if (q >= f->n || f->op[q] != TA_LEAF || role[q]) return TA_EARG;
        role[q] = 1;
    }
    for (j = 0; j < f->npar; j++) {
        uint32_t q = f->par[j];
        if (q >= f->n || f->op[q] != TA_LEAF || role[q]) return TA_EARG;
        role[q] = 2;
    }
    for (k = 0; k < f->n; k++) if (f->op[k] == TA_LEAF && !role[k]) return TA_EARG;
    for (j = 0; j < f->nout; j++) if (f->out[j] >= f->n) return TA_EARG;
    for (j = 0; j < f->nwrt; j++)
        if (f->wrt[j] != TA_NONE && (f->wrt[j] >= f->n || f->op[f->wrt[j]] != TA_LEAF))
            return TA_EARG;
    for (j = 0; j < f->ng; j++) {
        int cst = (f->gkind[j] >> 2) & 1;
        if (f->gkind[j] >> 4 || f->gab[2 * j] >= f->n || (!cst && f->gab[2 * j + 1] >= f->n))
            return TA_EARG;
    }
    return TA_OK;
}

int ta_prog_load(const ta_flat_t *f, const double *params, ta_prog **out)
{
    ta_prog *P;
    uint8_t *role;
    uint32_t k, j;
    int st;
    if (!out) return TA_EARG;
    *out = NULL;
    if (!f || !f->op || !f->a || !f->b || !f->c || !f->in || !f->out || !f->wrt || !f->par ||
        !f->gab || !f->gc || !f->gkind || (f->nlst && !f->lst) || (f->npar && !params) || f->nout == 0 ||
        f->n == TA_NONE || f->npar > f->n || f->ng > UINT32_MAX / 2u)
        return TA_EARG;
    if (!(role = (uint8_t *)ta_malloc((size_t)f->n + 1))) return TA_ENOMEM;
    st = ta_flat_check(f, role);
    free(role);
    if (st != TA_OK) return st;
    if (!(P = (ta_prog *)ta_calloc(1, sizeof *P))) return TA_ENOMEM;
    P->n = f->n; P->nin = f->nin; P->nout = f->nout; P->nwrt = f->nwrt;
    P->npar = f->npar; P->ng = f->ng; P->nlst = f->nlst;
    if ((st = ta_prog_alloc(P)) != TA_OK) { ta_prog_free(P); return st; }
    if (P->nlst) memcpy(P->lst, f->lst, (size_t)P->nlst * 4);
    for (k = 0; k < P->n; k++) {   /* unused fields zeroed: a loaded program equals its source */
        int kind = ta_kinds[f->op[k]];
        P->op[k] = f->op[k];
        P->a[k] = kind == TA_K_LEAF ? 0 : f->a[k];
        P->b[k] = (kind == TA_K_BIN || f->op[k] == TA_TAKE) ? f->b[k] : 0;
        P->c[k] = (kind == TA_K_CST || kind == TA_K_LEAF) ? f->c[k] : 0.0;
    }
    memcpy(P->in, f->in, (size_t)P->nin * 4); memcpy(P->out, f->out, (size_t)P->nout * 4);
    memcpy(P->wrt, f->wrt, (size_t)P->nwrt * 4); memcpy(P->par, f->par, (size_t)P->npar * 4);
    if (P->npar) memcpy(P->pv, params, (size_t)P->npar * 8);
    for (j = 0; j < P->ng; j++) {
        ta_guard *g = &P->g[j];
        uint8_t gk = f->gkind[j];
        g->kind = gk & 3u; g->cst = (gk >> 2) & 1u; g->out = (gk >> 3) & 1u;
        g->a = f->gab[2 * j]; g->b = g->cst ? 0 : f->gab[2 * j + 1];
        g->c = g->cst ? f->gc[j] : 0.0;
    }
    if ((st = ta_code_new(P)) != TA_OK) { ta_prog_free(P); return st; }
    *out = P;
    return TA_OK;
}
