/* batch.c: a Program's code (code.c) run over rows.
 *
 * Values are stored [node][row] in chunks of ch rows, so each instruction
 * is a short loop over the chunk that the compiler vectorises (the
 * libm-backed ops, exp, log, tanh, pow, call libm per row: a vector libm
 * would change results in the last bit).  Per call, the uniform nodes are
 * computed once (ta_uniform_forward); per chunk: input columns in, the row
 * instructions, the guards, outputs out, then the reverse sweep.
 *
 * Gradients summed over rows are summed per block of TA_BLOCK rows, in a
 * fixed order (a chunk's rows in 4 interleaved lanes, chunks in order), so
 * a block's sums do not depend on which thread ran it.  Adjoints of
 * uniform nodes are then scalars summed over the block, swept back through
 * the uniform nodes once per block; per sample they are rows.
 *
 * A take node (tapead.take) picks, per row, the candidate its index's
 * value names (ta_take_index: the one rule); back, the row's adjoint goes
 * to that candidate alone, and a uniform candidate's sum over the rows
 * that picked it is a lane sum like any other (rows that picked another
 * add nothing). */
#include <string.h>
#include "replay.h"
#include "ops.h"

/* Sums over the rows of a chunk, in a fixed order: row s goes to lane
 * s % 4, in row order, and the lanes are added (l0 + l1) + (l2 + l3).  Four
 * lanes let the adds overlap (one chained sum waits ~4 cycles per add)
 * and vectorise; the order depends on the chunk only, never on threads. */
#define TA_LANES(expr)                                                          \
    double l0 = 0.0, l1 = 0.0, l2 = 0.0, l3 = 0.0;                              \
    uint32_t s = 0;                                                             \
    for (; s + 4u <= n; s += 4u) {                                              \
        l0 += TA_AT(s); l1 += TA_AT(s + 1u); l2 += TA_AT(s + 2u); l3 += TA_AT(s + 3u); \
    }                                                                           \
    if (s < n) l0 += TA_AT(s);                                                  \
    if (s + 1u < n) l1 += TA_AT(s + 1u);                                        \
    if (s + 2u < n) l2 += TA_AT(s + 2u);                                        \
    return (l0 + l1) + (l2 + l3)

static double ta_lanesum(const double *t, uint32_t n)
{
#define TA_AT(i) t[i]
    TA_LANES();
#undef TA_AT
}

/* the same sum of a[s] * b[s] (each product rounded, as a row would be) */
static double ta_lanedot(const double *a, const double *b, uint32_t n)
{
#define TA_AT(i) (a[i] * b[i])
    TA_LANES();
#undef TA_AT
}

#define ROW(base, slot, ch) ((base) + (size_t)(slot) * (ch))
/* a row instruction's constant (0.0 if its op has none: code.c); not for
 * a binary op (its vy is y's row) or a dot */
#define TA_CST(P, I) ((P)->code->ic[(I)->vy])

/* A value row as ta_ins.vx names it: a row slot, or TA_UNI | a broadcast row. */
static const double *ta_vrow(const ta_ws *W, uint32_t v)
{
    return (v & TA_UNI) ? ROW(W->Bc, v & ~TA_UNI, W->ch) : ROW(W->V, v, W->ch);
}

/* A node's value at row s of the chunk (uniform: the same for all). */
static double ta_val_at(const ta_code *C, const ta_ws *W, uint32_t k, uint32_t s)
{
    return C->uni[k] ? W->U[C->loc[k]] : ROW(W->V, C->loc[k], W->ch)[s];
}

/* ------------------------------------------------------------ uniform */

int ta_uniform_forward(const ta_prog *P, double *U, const double *params, ta_fail_t *f)
{
    const ta_code *C = P->code;
    /* (the tables in locals: with -fno-strict-aliasing each store to U would
     * reload them, three loads more per parameter) */
    const uint32_t *const loc = C->loc, *const par = P->par, npar = P->npar;
    uint32_t j;
    for (j = 0; j < npar; j++) U[loc[par[j]]] = params[j];
    for (j = 0; j < C->nuops; j++) {
        uint32_t k = C->uops[j];
        int op = P->op[k], st;
        double x = U[C->loc[P->a[k]]];
        double y = ta_kinds[op] == TA_K_BIN ? U[C->loc[P->b[k]]] : P->c[k];
        if (op == TA_TAKE) {
            const uint32_t *l = P->lst + P->b[k];
            uint32_t pick;
            if (ta_take_index(x, l[0], &pick) != TA_OK) {
                f->row = 0; f->op = op; f->x = x; f->y = (double)l[0];
                return TA_EINDEX;
            }
            U[C->loc[k]] = U[C->loc[l[1u + pick]]];
            continue;
        }
        if ((st = ta_forward(op, x, y, &U[C->loc[k]])) != TA_OK) {
            f->row = 0; f->op = op; f->x = x; f->y = y;
            return st;
        }
    }
    for (j = 0; j < P->ng; j++) {
        const ta_guard *g = &P->g[j];
        double x, y;
        if (!C->uni[g->a] || (!g->cst && !C->uni[g->b])) continue;
        x = U[C->loc[g->a]]; y = g->cst ? g->c : U[C->loc[g->b]];
        if (ta_compare(g->kind, x, y) != g->out) {
            f->row = 0; f->guard = j; f->kind = g->kind; f->outcome = g->out; f->x = x; f->y = y;
            return TA_EGUARD;
        }
    }
    return TA_OK;
}

/* ------------------------------------------------------------ forward */

/* One op over rows [off, off + cb) of the chunk; kinds expand differently.
 * `bad` collects error statuses without a branch, so the loops vectorise. */
#define FW_LEAF(N)
#define FW_NARY(N)             /* TAKE: ta_fw_take; CUSTOM: ta_plain refuses it */
#define FW_UN(N)  for (s = 0; s < cb; s++) bad |= fwd_##N(xv[s], 0.0, &rv[s]);
#define FW_BIN(N) for (s = 0; s < cb; s++) bad |= fwd_##N(xv[s], yv[s], &rv[s]);
#define FW_CST(N) for (s = 0; s < cb; s++) bad |= fwd_##N(xv[s], c, &rv[s]);

static int ta_fw_op(const ta_prog *P, ta_ws *W, const ta_ins *I, uint32_t off, uint32_t cb)
{
    const double *xv = ta_vrow(W, I->vx) + off;
    const double *yv = ta_kinds[I->op] == TA_K_BIN ? ta_vrow(W, I->vy) + off : xv;
    double *rv = ROW(W->V, I->vk, W->ch) + off;
    double c = ta_kinds[I->op] == TA_K_BIN ? 0.0 : TA_CST(P, I);
    uint32_t s;
    int bad = 0;
    UNUSED(yv); UNUSED(c);
    switch (I->op) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: FW_##KIND(NAME) break;
#include "ops.def"
#undef TA_OP
    }
    return bad;
}

/* A take over rows [off, off + cb): each row's value is the candidate its
 * index picks (a uniform candidate's scalar, or the row's own); a bad
 * index gives nonzero (the row is replayed alone to name it). */
static int ta_fw_take(const ta_prog *P, ta_ws *W, const ta_ins *I, uint32_t off, uint32_t cb)
{
    const ta_code *C = P->code;
    const uint32_t *l = P->lst + I->y;
    const double *xv = ta_vrow(W, I->vx) + off;
    double *rv = ROW(W->V, I->vk, W->ch) + off;
    uint32_t s, pick;
    for (s = 0; s < cb; s++) {
        if (ta_take_index(xv[s], l[0], &pick) != TA_OK) return 1;
        rv[s] = ta_val_at(C, W, l[1u + pick], off + s);
    }
    return 0;
}

/* r = start + p0*q0 + p1*q1 + ..., left to right, as the recorded nodes
 * did it (fwd_MUL, fwd_ADD: neither can fail); four w * x terms per pass
 * over the rows, so the partial sum stays in a register. */
static void ta_fw_dot(const ta_prog *P, ta_ws *W, const ta_ins *I, uint32_t off, uint32_t cb)
{
    const ta_code *C = P->code;
    double *rv = ROW(W->V, C->loc[I->k], W->ch) + off;
    uint32_t t = I->t0, end = I->t0 + I->nt, s;
    if (C->uni[I->x]) { double u = W->U[C->loc[I->x]]; for (s = 0; s < cb; s++) rv[s] = u; }
    else memcpy(rv, ROW(W->V, C->loc[I->x], W->ch) + off, cb * sizeof *rv);
    while (t < end) {
        uint32_t p = C->tp[t], q = C->tq[t];
        if (t + 4u <= end && (C->tf[t] & TA_UR4)) {
            const double w0 = W->U[C->loc[p]], w1 = W->U[C->loc[C->tp[t + 1]]];
            const double w2 = W->U[C->loc[C->tp[t + 2]]], w3 = W->U[C->loc[C->tp[t + 3]]];
            const double *q0 = ROW(W->V, C->loc[q], W->ch) + off;
            const double *q1 = ROW(W->V, C->loc[C->tq[t + 1]], W->ch) + off;
            const double *q2 = ROW(W->V, C->loc[C->tq[t + 2]], W->ch) + off;
            const double *q3 = ROW(W->V, C->loc[C->tq[t + 3]], W->ch) + off;
            for (s = 0; s < cb; s++) {
                double r = rv[s], m;
                fwd_MUL(w0, q0[s], &m); fwd_ADD(r, m, &r);
                fwd_MUL(w1, q1[s], &m); fwd_ADD(r, m, &r);
                fwd_MUL(w2, q2[s], &m); fwd_ADD(r, m, &r);
                fwd_MUL(w3, q3[s], &m); fwd_ADD(r, m, &r);
                rv[s] = r;
            }
            t += 4u;
            continue;
        }
        if (C->uni[p]) {
            const double w = W->U[C->loc[p]], *qv = ROW(W->V, C->loc[q], W->ch) + off;
            for (s = 0; s < cb; s++) { double m; fwd_MUL(w, qv[s], &m); fwd_ADD(rv[s], m, &rv[s]); }
        } else if (C->uni[q]) {
            const double w = W->U[C->loc[q]], *pv = ROW(W->V, C->loc[p], W->ch) + off;
            for (s = 0; s < cb; s++) { double m; fwd_MUL(pv[s], w, &m); fwd_ADD(rv[s], m, &rv[s]); }
        } else {
            const double *pv = ROW(W->V, C->loc[p], W->ch) + off, *qv = ROW(W->V, C->loc[q], W->ch) + off;
            for (s = 0; s < cb; s++) { double m; fwd_MUL(pv[s], qv[s], &m); fwd_ADD(rv[s], m, &rv[s]); }
        }
        t++;
    }
}

/* Every row instruction over rows [off, off + cb); nonzero if an op failed. */
static int ta_fw_rows(const ta_prog *P, ta_ws *W, uint32_t off, uint32_t cb, const ta_ins **failed)
{
    const ta_code *C = P->code;
    uint32_t i;
    int bad = 0;
    for (i = 0; i < C->nins; i++) {
        const ta_ins *I = &C->ins[i];
        if (I->op == TA_IDOT) { ta_fw_dot(P, W, I, off, cb); continue; }
        if (I->op == TA_TAKE ? ta_fw_take(P, W, I, off, cb) : ta_fw_op(P, W, I, off, cb)) {
            bad = 1;
            if (failed) { *failed = I; return 1; }
        }
    }
    return bad;
}

/* ------------------------------------------------------------ one row
 * A call of one row (tapead.jit's step) runs each instruction on scalars:
 * the loops, pointers and lane sums of the chunked path cost more than its
 * one row's arithmetic, which here is the same operations on the same
 * values, so the same bits (a lane sum of one value is that value, or +0.0
 * for -0.0, which changes no sum: the sums start at +0.0 and never become
 * -0.0).  Uniform operands are read from their broadcast rows, as there. */
#define TA_V1(v) (((v) & TA_UNI) ? W->Bc[(size_t)((v) & ~TA_UNI) * W->ch] : W->V[(size_t)(v) * W->ch])
/* (a dot term's operand: ta_code.tv) */
#define TA_U1(v) (((v) & TA_UNI) ? U[(v) & ~TA_UNI] : V[(size_t)(v) * ch])
#define F1_LEAF(N) break;
#define F1_NARY(N) break;        /* (TAKE: above; CUSTOM: never in a Program) */
#define F1_UN(N)  bad = fwd_##N(TA_V1(I->vx), 0.0, &r); break;
#define F1_CST(N) bad = fwd_##N(TA_V1(I->vx), TA_CST(P, I), &r); break;
#define F1_BIN(N) bad = fwd_##N(TA_V1(I->vx), TA_V1(I->vy), &r); break;

/* Every row instruction on the chunk's one row; nonzero if one failed. */
static int ta_fw_rows1(const ta_prog *P, ta_ws *W)
{
    const ta_code *C = P->code;
    uint32_t i, t;
    for (i = 0; i < C->nins; i++) {
        const ta_ins *I = &C->ins[i];
        double r = 0.0;
        int bad = 0;
        if (I->op == TA_IDOT) {     /* start + p0*q0 + ..., left to right (fwd_MUL, fwd_ADD) */
            const uint32_t *tv = C->tv + (size_t)4 * I->t0;
            const double *U = W->U, *V = W->V;
            const uint32_t ch = W->ch;
            r = TA_U1(I->vx);
            for (t = 0; t < I->nt;) {
                double m;
                if (t + 4u <= I->nt && (C->tf[I->t0 + t] & TA_UR4)) {   /* (uniform p, row q) x 4 */
                    uint32_t j;
                    for (j = 0; j < 16u; j += 4u) {
                        fwd_MUL(U[tv[j] & ~TA_UNI], V[(size_t)tv[j + 1u] * ch], &m);
                        fwd_ADD(r, m, &r);
                    }
                    t += 4u; tv += 16;
                    continue;
                }
                fwd_MUL(TA_U1(tv[0]), TA_U1(tv[1]), &m);
                fwd_ADD(r, m, &r);
                t++; tv += 4;
            }
        } else if (I->op == TA_TAKE) {
            const uint32_t *l = P->lst + I->y;
            uint32_t pick, q;
            if (ta_take_index(TA_V1(I->vx), l[0], &pick) != TA_OK) return 1;
            q = l[1u + pick];
            r = C->uni[q] ? W->U[C->loc[q]] : W->V[(size_t)C->loc[q] * W->ch];
        } else {
            switch (I->op) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: F1_##KIND(NAME)
#include "ops.def"
#undef TA_OP
            }
        }
        if (bad) return 1;
        W->V[(size_t)I->vk * W->ch] = r;
    }
    return 0;
}
#undef F1_LEAF
#undef F1_NARY
#undef F1_UN
#undef F1_CST
#undef F1_BIN

/* The row guards at row s; the index of the first that flips, or -1. */
static int64_t ta_guards_at(const ta_prog *P, const ta_ws *W, uint32_t s, double *x, double *y)
{
    const ta_code *C = P->code;
    uint32_t j;
    for (j = 0; j < P->ng; j++) {
        const ta_guard *g = &P->g[j];
        if (C->uni[g->a] && (g->cst || C->uni[g->b])) continue;   /* checked per call */
        *x = ta_val_at(C, W, g->a, s);
        *y = g->cst ? g->c : ta_val_at(C, W, g->b, s);
        if (ta_compare(g->kind, *x, *y) != g->out) return j;
    }
    return -1;
}

/* Something failed in this chunk: replay it row by row, as a row at a time
 * would have run, to name the first failing row and what failed there. */
static int ta_first_failure(const ta_prog *P, ta_ws *W, uint32_t cb, uint64_t b0, ta_fail_t *f)
{
    uint32_t s;
    for (s = 0; s < cb; s++) {
        const ta_ins *I = NULL;
        int64_t gj;
        double x, y;
        if (ta_fw_rows(P, W, s, 1, &I)) {
            const ta_code *C = P->code;
            int op = I->op, st;
            if (op == TA_TAKE) {
                f->row = b0 + s; f->op = op; f->x = ta_val_at(C, W, I->x, s);
                f->y = (double)P->lst[I->y];
                return TA_EINDEX;
            }
            st = ta_forward(op, ta_val_at(C, W, I->x, s),
                                ta_kinds[op] == TA_K_BIN ? ta_val_at(C, W, I->y, s) : TA_CST(P, I), &x);
            f->row = b0 + s; f->op = op; f->x = ta_val_at(C, W, I->x, s);
            f->y = ta_kinds[op] == TA_K_BIN ? ta_val_at(C, W, I->y, s) : TA_CST(P, I);
            return st != TA_OK ? st : TA_EDOMAIN;
        }
        if ((gj = ta_guards_at(P, W, s, &x, &y)) >= 0) {
            f->row = b0 + s; f->guard = gj; f->kind = P->g[gj].kind; f->outcome = P->g[gj].out;
            f->x = x; f->y = y;
            return TA_EGUARD;
        }
    }
    return TA_EDOMAIN;   /* not reached: the chunk failed somewhere */
}

/* ------------------------------------------------------------ reverse */

/* Where an operand's adjoint goes, as ta_ins.ax names it: its row, or (a
 * uniform operand summed over rows) a scratch row summed into W->A
 * afterwards (ta_settle); NULL if it needs none. */
static double *ta_dest(const ta_code *C, ta_ws *W, uint32_t a, int per_sample, double *tmp,
                       uint32_t cb)
{
    if (a == TA_NONE) return NULL;
    if (!(a & TA_UNI)) return ROW(W->D, a, W->ch);
    if (per_sample) return ROW(W->D, C->nds + (a & ~TA_UNI), W->ch);
    memset(tmp, 0, cb * sizeof *tmp);
    return tmp;
}

static void ta_settle(ta_ws *W, uint32_t a, int per_sample, const double *tmp, uint32_t cb)
{
    if (a != TA_NONE && (a & TA_UNI) && !per_sample) W->A[a & ~TA_UNI] += ta_lanesum(tmp, cb);
}

/* The same for node k */
static double *ta_target(const ta_code *C, ta_ws *W, uint32_t k, int per_sample, double *tmp,
                         uint32_t cb)
{
    return ta_dest(C, W, TA_ADJ_ROW(C, k), per_sample, tmp, cb);
}

/* x and y may be the same node (x * x): two loops, each adding one side.
 * A rule gets the values it reads (RD_NAME, ops.h) and nan for the others:
 * their rows may hold other nodes' values by now (code.c: ta_value_slots). */
#define RV_X(N) ((RD_##N & TA_RD_X) ? xv[s] : NAN)
#define RV_Y(N) ((RD_##N & TA_RD_Y) ? yv[s] : NAN)
#define RV_R(N) ((RD_##N & TA_RD_R) ? rv[s] : NAN)
#define RV_LEAF(N)
#define RV_NARY(N)
#define RV_UN(N)  if (ax) for (s = 0; s < cb; s++) { double dx, dy; d_##N(RV_X(N), 0.0, RV_R(N), &dx, &dy); ax[s] += dx * g[s]; }
#define RV_CST(N) if (ax) for (s = 0; s < cb; s++) { double dx, dy; d_##N(RV_X(N), c, RV_R(N), &dx, &dy); ax[s] += dx * g[s]; }
#define RV_BIN(N) \
    if (ax) for (s = 0; s < cb; s++) { double dx, dy; d_##N(RV_X(N), RV_Y(N), RV_R(N), &dx, &dy); ax[s] += dx * g[s]; } \
    if (ay) for (s = 0; s < cb; s++) { double dx, dy; d_##N(RV_X(N), RV_Y(N), RV_R(N), &dx, &dy); ay[s] += dy * g[s]; }

static void ta_rv_op(const ta_prog *P, ta_ws *W, const ta_ins *I, uint32_t cb, int ps)
{
    const ta_code *C = P->code;
    int bin = ta_kinds[I->op] == TA_K_BIN;
    const double *xv = ta_vrow(W, I->vx), *yv = bin ? ta_vrow(W, I->vy) : xv;
    const double *rv = ROW(W->V, I->vk, W->ch), *g = ROW(W->D, I->gk, W->ch);
    double *ax = ta_dest(C, W, I->ax, ps, W->T1, cb);
    double *ay = bin ? ta_dest(C, W, I->ay, ps, W->T2, cb) : NULL;
    double c = bin ? 0.0 : TA_CST(P, I);
    uint32_t s;
    UNUSED(yv); UNUSED(c);
    switch (I->op) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: RV_##KIND(NAME) break;
#include "ops.def"
#undef TA_OP
    }
    if (ax) ta_settle(W, I->ax, ps, W->T1, cb);
    if (ay) ta_settle(W, I->ay, ps, W->T2, cb);
}

/* A take's reverse step: each row's adjoint to the candidate it picked.
 * Row candidates get theirs in place; a uniform candidate per sample on
 * its row, summed as a lane sum over the rows that picked it (W->T1: the
 * row's g or nothing). */
static void ta_rv_take(const ta_prog *P, ta_ws *W, const ta_ins *I, uint32_t cb, int ps)
{
    const ta_code *C = P->code;
    const uint32_t *l = P->lst + I->y, m = l[0];
    const double *xv = ta_vrow(W, I->vx), *g = ROW(W->D, I->gk, W->ch);
    uint32_t s, j, pick = 0;
    for (s = 0; s < cb; s++) {         /* (each index was checked going forward) */
        uint32_t q;
        if (ta_take_index(xv[s], m, &pick) != TA_OK) continue;
        q = l[1u + pick];
        if (C->dloc[q] == TA_NONE || (C->uni[q] && !ps)) continue;
        (C->uni[q] ? ROW(W->D, C->nds + C->dloc[q], W->ch) : ROW(W->D, C->dslot[q], W->ch))[s] += g[s];
    }
    if (ps) return;
    for (j = 0; j < m; j++) {
        uint32_t q = l[1u + j];
        int any = 0;
        if (!C->uni[q] || C->dloc[q] == TA_NONE) continue;
        for (s = 0; s < cb; s++) {
            int mine = ta_take_index(xv[s], m, &pick) == TA_OK && pick == j;
            W->T1[s] = mine ? g[s] : 0.0;
            any |= mine;
        }
        if (any) W->A[C->dloc[q]] += ta_lanesum(W->T1, cb);
    }
}

/* Add v to the adjoint ta_ins.ax names (as ta_dest and ta_settle do for
 * one row). */
static void ta_give1(ta_ws *W, const ta_code *C, uint32_t a, double v, int ps)
{
    if (!(a & TA_UNI)) W->D[(size_t)a * W->ch] += v;
    else if (ps) W->D[(size_t)(C->nds + (a & ~TA_UNI)) * W->ch] += v;
    else W->A[a & ~TA_UNI] += v;
}

/* A rule gets the values it reads (RD_NAME) and nan for the others, as ta_rv_op. */
#define R1_X(N) ((RD_##N & TA_RD_X) ? TA_V1(I->vx) : NAN)
#define R1_Y(N) ((RD_##N & TA_RD_Y) ? TA_V1(I->vy) : NAN)
#define R1_R(N) ((RD_##N & TA_RD_R) ? W->V[(size_t)I->vk * W->ch] : NAN)
#define R1_LEAF(N) break;
#define R1_NARY(N) break;        /* (TAKE: above) */
#define R1_UN(N)  d_##N(R1_X(N), 0.0, R1_R(N), &dx, &dy); break;
#define R1_CST(N) d_##N(R1_X(N), TA_CST(P, I), R1_R(N), &dx, &dy); break;
#define R1_BIN(N) d_##N(R1_X(N), R1_Y(N), R1_R(N), &dx, &dy); break;

/* One instruction's reverse step on the chunk's one row (not a dot). */
static void ta_rv_op1(const ta_prog *P, ta_ws *W, const ta_ins *I, int ps)
{
    const double g = W->D[(size_t)I->gk * W->ch];
    double dx = 0.0, dy = 0.0;
    if (I->op == TA_TAKE) {
        const uint32_t *l = P->lst + I->y;
        uint32_t pick, q;
        if (ta_take_index(TA_V1(I->vx), l[0], &pick) != TA_OK) return;   /* (checked going forward) */
        q = l[1u + pick];
        if (P->code->dloc[q] != TA_NONE) ta_give1(W, P->code, TA_ADJ_ROW(P->code, q), g, ps);
        return;
    }
    switch (I->op) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: R1_##KIND(NAME)
#include "ops.def"
#undef TA_OP
    }
    if (I->ax != TA_NONE) ta_give1(W, P->code, I->ax, dx * g, ps);
    if (I->ay != TA_NONE && ta_kinds[I->op] == TA_K_BIN) ta_give1(W, P->code, I->ay, dy * g, ps);
}
#undef R1_X
#undef R1_Y
#undef R1_R
#undef R1_LEAF
#undef R1_NARY
#undef R1_UN
#undef R1_CST
#undef R1_BIN
#undef TA_V1

/* One operand of a product: adds other * g (d_MUL: each side's partial
 * is the other side) to k's adjoint. */
static void ta_rv_factor(const ta_code *C, ta_ws *W, uint32_t k, uint32_t other, const double *g,
                         uint32_t cb, int ps)
{
    uint32_t s;
    if (C->dloc[k] == TA_NONE) return;
    if (C->uni[k] && !ps) {              /* a summed parameter: one lane sum */
        if (C->uni[other]) W->A[C->dloc[k]] += W->U[C->loc[other]] * ta_lanesum(g, cb);
        else W->A[C->dloc[k]] += ta_lanedot(ROW(W->V, C->loc[other], W->ch), g, cb);
        return;
    }
    {
        double *a = C->uni[k] ? ROW(W->D, C->nds + C->dloc[k], W->ch) : ROW(W->D, C->dslot[k], W->ch);
        if (C->uni[other]) {
            const double w = W->U[C->loc[other]];
            for (s = 0; s < cb; s++) a[s] += w * g[s];
        } else {
            const double *o = ROW(W->V, C->loc[other], W->ch);
            for (s = 0; s < cb; s++) a[s] += o[s] * g[s];
        }
    }
}

/* Four doubles as one value, for the lanes of a sum: a GCC/Clang vector
 * (SSE2 or AVX: elementwise IEEE, the same bits as four scalars), or a
 * plain struct elsewhere. */
#if defined(__GNUC__)
typedef double ta_v4 __attribute__((vector_size(32)));
#define TA_V4_LANE(v, l) ((v)[l])
#define TA_V4_MULADD(acc, a, b) ((acc) + (a) * (b))
#define TA_V4_SPLAT(v, x) ((v) = (ta_v4){(x), (x), (x), (x)})
#else
typedef struct { double l[4]; } ta_v4;
#define TA_V4_LANE(v, l) ((v).l[l])
#define TA_V4_SPLAT(v, x) do { int i_; for (i_ = 0; i_ < 4; i_++) (v).l[i_] = (x); } while (0)
static ta_v4 TA_V4_MULADD(ta_v4 acc, ta_v4 a, ta_v4 b)
{
    int i;
    for (i = 0; i < 4; i++) acc.l[i] += a.l[i] * b.l[i];
    return acc;
}
#endif
/* (macros, not functions: a function returning a 32-byte vector changes
 * the ABI without AVX, and GCC says so) */
#define TA_V4_LOAD(v, p) memcpy(&(v), (p), sizeof(v))
#define TA_V4_STORE(p, v) memcpy((p), &(v), sizeof(v))
#define TA_V4_SUM(v) ((TA_V4_LANE(v, 0) + TA_V4_LANE(v, 1)) + (TA_V4_LANE(v, 2) + TA_V4_LANE(v, 3)))

/* The rows of ta_rv_dot4, four rows at a time (row s in lane s % 4). */
static void ta_rows4(uint32_t n, const double *g, const double *const *x, double *const *a,
                     const double *w, double *sums)
{
    ta_v4 L[4], gs, v, u, wj;
    uint32_t s, l;
    int j;
    for (j = 0; j < 4; j++) TA_V4_SPLAT(L[j], 0.0);
    for (s = 0; s + 4u <= n; s += 4u) {
        TA_V4_LOAD(gs, g + s);
        for (j = 3; j >= 0; j--) { TA_V4_LOAD(v, x[j] + s); L[j] = TA_V4_MULADD(L[j], v, gs); }
        if (a[0])
            for (j = 3; j >= 0; j--) {
                TA_V4_LOAD(u, a[j] + s);
                TA_V4_SPLAT(wj, w[j]);
                u = TA_V4_MULADD(u, wj, gs);
                TA_V4_STORE(a[j] + s, u);
            }
    }
    for (l = 0; s < n; s++, l++) {
        const double gr = g[s];
        for (j = 3; j >= 0; j--) TA_V4_LANE(L[j], l) += x[j][s] * gr;
        if (a[0]) for (j = 3; j >= 0; j--) a[j][s] += w[j] * gr;
    }
    for (j = 0; j < 4; j++) sums[j] = TA_V4_SUM(L[j]);
}

/* Four (uniform p, row q) terms t+3, t+2, t+1, t of a dot, summed over
 * rows, in one pass over the rows: each p gets its lane sum of q g (as
 * ta_lanedot), each q that needs it gets p g.  Per row the additions are
 * in the order term by term would make them, so the bits are the same. */
static void ta_rv_dot4(const ta_code *C, ta_ws *W, uint32_t t, const double *g, uint32_t n)
{
    const uint32_t *tp = C->tp + t, *tq = C->tq + t;
    double w[4], sums[4], *a[4];
    const double *x[4];
    int j;
    for (j = 0; j < 4; j++) {
        w[j] = W->U[C->loc[tp[j]]];
        x[j] = ROW(W->V, C->loc[tq[j]], W->ch);
        a[j] = C->dloc[tq[j]] == TA_NONE ? NULL : ROW(W->D, C->dslot[tq[j]], W->ch);
    }
    ta_rows4(n, g, x, a, w, sums);
    for (j = 4; j-- > 0;) W->A[C->dloc[tp[j]]] += sums[j];
}

/* The dot's adjoint g reaches every product and partial sum unchanged
 * (d_ADD: 1), so each term adds q g to p and p g to q.  Order as the
 * recorded nodes' reverse sweep: the last term first; the start just
 * before the first term. */
/* One row (a call's single row: tapead.jit), each term in scalars: the
 * same additions into the same sums in the same order as the rows' loops
 * and lane sums make with one row (a lane sum of one value is that value,
 * but -0.0, which changes no sum here: a sum that starts at 0.0 is never
 * -0.0).  The operand's value and adjoint, by where code.c put them. */
static void ta_rv_dot1(const ta_code *C, ta_ws *W, const ta_ins *I, double g, int ps)
{
    const uint32_t *tv = C->tv + (size_t)4 * (I->t0 + I->nt);
    const double *U = W->U, *V = W->V;
    const uint32_t ch = W->ch;
    uint32_t t;
    if (!I->nt) return;
    for (t = I->nt; t-- > 1;) {
        if (!ps && t >= 4u && (C->tf[I->t0 + t - 3u] & TA_RV4)) {
            /* terms t .. t-3: (uniform p, its adjoint in A; row q, its adjoint
             * a row or none for all four), in the same order */
            double *A = W->A, *D = W->D;
            uint32_t j;
            for (j = 0; j < 4u; j++) {
                tv -= 4;
                A[tv[2] & ~TA_UNI] += V[(size_t)tv[1] * ch] * g;
                if (tv[3] != TA_NONE) D[(size_t)tv[3] * ch] += U[tv[0] & ~TA_UNI] * g;
            }
            t -= 3u;
            continue;
        }
        tv -= 4;
        if (tv[2] != TA_NONE) ta_give1(W, C, tv[2], TA_U1(tv[1]) * g, ps);
        if (tv[3] != TA_NONE) ta_give1(W, C, tv[3], TA_U1(tv[0]) * g, ps);
    }
    tv -= 4;                         /* the start, then term 0 */
    if (I->ax != TA_NONE) {
        double dx, dy;
        d_ADD(0.0, 0.0, 0.0, &dx, &dy);
        ta_give1(W, C, I->ax, dx * g, ps);
    }
    if (tv[2] != TA_NONE) ta_give1(W, C, tv[2], TA_U1(tv[1]) * g, ps);
    if (tv[3] != TA_NONE) ta_give1(W, C, tv[3], TA_U1(tv[0]) * g, ps);
}

static void ta_rv_dot(const ta_prog *P, ta_ws *W, const ta_ins *I, uint32_t cb, int ps)
{
    const ta_code *C = P->code;
    const double *g = ROW(W->D, C->dslot[I->k], W->ch);
    uint32_t t = I->t0 + I->nt;
    while (t-- > I->t0) {
        /* terms t0 + 1 ... in blocks of four (the singles at the top first) */
        if (!ps && t > I->t0 && (t - I->t0) % 4u == 0 && (C->tf[t - 3u] & TA_RV4)) {
            ta_rv_dot4(C, W, t - 3u, g, cb);
            t -= 3u;
            continue;
        }
        if (t == I->t0) {
            double *ax = ta_target(C, W, I->x, ps, W->T1, cb);
            uint32_t s;
            if (ax) {
                for (s = 0; s < cb; s++) { double dx, dy; d_ADD(0.0, 0.0, 0.0, &dx, &dy); ax[s] += dx * g[s]; }
                ta_settle(W, TA_ADJ_ROW(C, I->x), ps, W->T1, cb);
            }
        }
        ta_rv_factor(C, W, C->tp[t], C->tq[t], g, cb, ps);
        ta_rv_factor(C, W, C->tq[t], C->tp[t], g, cb, ps);
    }
}

/* Back through the uniform nodes: their partials are the same for every
 * row.  Per sample, on the uniform adjoint rows; summed, on W->A. */
static void ta_rv_uniform(const ta_prog *P, ta_ws *W, uint32_t cb, int ps)
{
    const ta_code *C = P->code;
    uint32_t j, s;
    for (j = C->nuops; j-- > 0;) {
        uint32_t k = C->uops[j], x = P->a[k], y = P->b[k];
        int op = P->op[k], bin = ta_kinds[op] == TA_K_BIN;
        double dx, dy;
        if (C->dloc[k] == TA_NONE) continue;
        if (op == TA_TAKE) {               /* to the candidate picked (checked going forward) */
            uint32_t pick = 0, q;
            if (ta_take_index(W->U[C->loc[x]], P->lst[y], &pick) != TA_OK) continue;
            q = P->lst[y + 1u + pick];
            if (C->dloc[q] == TA_NONE) continue;
            if (!ps) W->A[C->dloc[q]] += W->A[C->dloc[k]];
            else {
                const double *g = ROW(W->D, C->nds + C->dloc[k], W->ch);
                double *a = ROW(W->D, C->nds + C->dloc[q], W->ch);
                for (s = 0; s < cb; s++) a[s] += g[s];
            }
            continue;
        }
        ta_partials(op, W->U[C->loc[x]], bin ? W->U[C->loc[y]] : P->c[k], W->U[C->loc[k]], &dx, &dy);
        if (!ps) {
            double gk = W->A[C->dloc[k]];
            if (C->dloc[x] != TA_NONE) W->A[C->dloc[x]] += dx * gk;
            if (bin && C->dloc[y] != TA_NONE) W->A[C->dloc[y]] += dy * gk;
        } else {
            const double *g = ROW(W->D, C->nds + C->dloc[k], W->ch);
            if (C->dloc[x] != TA_NONE) {
                double *a = ROW(W->D, C->nds + C->dloc[x], W->ch);
                for (s = 0; s < cb; s++) a[s] += dx * g[s];
            }
            if (bin && C->dloc[y] != TA_NONE) {
                double *a = ROW(W->D, C->nds + C->dloc[y], W->ch);
                for (s = 0; s < cb; s++) a[s] += dy * g[s];
            }
        }
    }
}

/* The adjoint row of wrt column j's node (its uniform row per sample). */
static const double *ta_wrt_row(const ta_prog *P, const ta_ws *W, uint32_t k)
{
    const ta_code *C = P->code;
    return C->uni[k] ? ROW(W->D, C->nds + C->dloc[k], W->ch) : ROW(W->D, C->dslot[k], W->ch);
}

/* -------------------------------------------------------------- a block */

/* The value rows instruction I's reverse step will read, prefetched a few
 * steps ahead of the sweep (it walks the rows newest first, which the
 * hardware's prefetchers follow poorly). */
#define TA_PF 8
#if defined(__GNUC__) || defined(__clang__)
#  define TA_PREFETCH(p) __builtin_prefetch(p)
#else
#  define TA_PREFETCH(p) ((void)(p))
#endif
static void ta_prefetch_row(const double *r, uint32_t ch)
{
    uint32_t s;
    for (s = 0; s < ch; s += 8u) TA_PREFETCH(r + s);
}
static void ta_prefetch(const ta_code *C, const ta_ws *W, const ta_ins *I)
{
    uint32_t t;
    if (I->rd & TA_RD_R) ta_prefetch_row(ROW(W->V, I->vk, W->ch), W->ch);
    if (I->op == TA_IDOT) {
        if (I->rd)
            for (t = I->t0; t < I->t0 + I->nt; t++) {
                if (!C->uni[C->tp[t]]) ta_prefetch_row(ROW(W->V, C->loc[C->tp[t]], W->ch), W->ch);
                if (!C->uni[C->tq[t]]) ta_prefetch_row(ROW(W->V, C->loc[C->tq[t]], W->ch), W->ch);
            }
        return;
    }
    if ((I->rd & TA_RD_X) && !(I->vx & TA_UNI)) ta_prefetch_row(ROW(W->V, I->vx, W->ch), W->ch);
    if ((I->rd & TA_RD_Y) && !(I->vy & TA_UNI)) ta_prefetch_row(ROW(W->V, I->vy, W->ch), W->ch);
}

/* On x86-64 Linux with GCC, ta_block and everything it calls (flatten) is
 * also compiled for AVX2, picked at load time by the CPU (an ifunc): the
 * same operations four doubles wide, so the same bits (no FMA: it would
 * round once where the recorded ops round twice). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(TA_NO_CLONES)
#  define TA_WIDE __attribute__((target_clones("avx2", "default"), flatten))
#else
#  define TA_WIDE
#endif

TA_WIDE int ta_block(const ta_prog *P, ta_ws *W, const ta_run_t *R, uint64_t r0, uint64_t r1,
             double *parts, ta_fail_t *f)
{
    const ta_code *C = P->code;
    const uint32_t ch = W->ch;
    const int ps = R->per_sample, grad = R->seedmode != 0;
    uint64_t b0;
    uint32_t j, s, i, cb;
    if (grad && !ps) {
        if (C->ndu) memset(W->A, 0, C->ndu * sizeof *W->A);
        if (P->nwrt) memset(W->Gb, 0, P->nwrt * sizeof *W->Gb);
    }
    for (b0 = r0; b0 < r1; b0 += cb) {
        cb = (r1 - b0) < ch ? (uint32_t)(r1 - b0) : ch;
        for (j = 0; j < P->nin; j++) {
            const double *x = R->X + b0 * P->nin + j;
            double *r;
            if (P->in[j] == TA_NONE) continue;
            r = ROW(W->V, C->loc[P->in[j]], ch);
            for (s = 0; s < cb; s++) r[s] = x[(size_t)s * P->nin];
        }
        if (cb == 1 ? ta_fw_rows1(P, W) : ta_fw_rows(P, W, 0, cb, NULL))
            return ta_first_failure(P, W, cb, b0, f);
        for (s = 0; s < cb; s++) {
            double x, y;
            if (ta_guards_at(P, W, s, &x, &y) >= 0) return ta_first_failure(P, W, cb, b0, f);
        }
        for (j = 0; j < P->nout; j++) {
            uint32_t o = P->out[j];
            double *y = R->Y + b0 * P->nout + j;
            if (C->uni[o]) { double u = W->U[C->loc[o]]; for (s = 0; s < cb; s++) y[(size_t)s * P->nout] = u; }
            else { const double *r = ROW(W->V, C->loc[o], ch); for (s = 0; s < cb; s++) y[(size_t)s * P->nout] = r[s]; }
        }
        if (!grad) continue;
        memset(W->D, 0, ((size_t)C->nds + (ps ? C->ndu : 0)) * ch * sizeof *W->D);
        for (j = 0; j < P->nout; j++) {      /* seeds */
            uint32_t o = P->out[j];
            double *d = ta_target(C, W, o, ps, W->T1, cb);
            if (!d) continue;
            if (R->seedmode == 1) { double sd = R->seed[j]; for (s = 0; s < cb; s++) d[s] += sd; }
            else for (s = 0; s < cb; s++) d[s] += R->seed[(b0 + s) * P->nout + j];
            ta_settle(W, TA_ADJ_ROW(C, o), ps, W->T1, cb);
        }
        for (i = C->nins; cb == 1 && i-- > 0;) {     /* one row */
            const ta_ins *I = &C->ins[i];
            if (I->gk == TA_NONE) continue;
            if (I->op == TA_IDOT) ta_rv_dot1(C, W, I, W->D[(size_t)I->gk * ch], ps);
            else ta_rv_op1(P, W, I, ps);
            if (I->rel) W->D[(size_t)I->gk * ch] = 0.0;
        }
        for (i = C->nins; cb > 1 && i-- > 0;) {
            const ta_ins *I = &C->ins[i];
            if (i >= TA_PF) ta_prefetch(C, W, &C->ins[i - TA_PF]);
            if (I->gk == TA_NONE) continue;
            if (I->op == TA_IDOT) ta_rv_dot(P, W, I, cb, ps);
            else if (I->op == TA_TAKE) ta_rv_take(P, W, I, cb, ps);
            else ta_rv_op(P, W, I, cb, ps);
            if (I->rel) { double *d = ROW(W->D, I->gk, ch); for (s = 0; s < cb; s++) d[s] = 0.0; }
        }
        if (ps) {
            ta_rv_uniform(P, W, cb, 1);
            for (j = 0; j < P->nwrt; j++) {
                uint32_t k = P->wrt[j];
                double *gr = R->G + b0 * P->nwrt + j;
                if (k == TA_NONE) { for (s = 0; s < cb; s++) gr[(size_t)s * P->nwrt] = 0.0; continue; }
                {
                    const double *r = ta_wrt_row(P, W, k);
                    for (s = 0; s < cb; s++) gr[(size_t)s * P->nwrt] = r[s];
                }
            }
        } else {
            /* each wrt input's sum: per C->ch rows (the chunk the order is
             * defined by) even where this chunk is wider (no uniform
             * adjoints: parallel.c), in row order */
            for (j = 0; j < P->nwrt; j++) {
                uint32_t k = P->wrt[j], o;
                if (k == TA_NONE || C->uni[k]) continue;
                for (o = 0; o < cb; o += C->ch)
                    W->Gb[j] += ta_lanesum(ROW(W->D, C->dslot[k], ch) + o, cb - o < C->ch ? cb - o : C->ch);
            }
        }
    }
    if (grad && !ps) {
        ta_rv_uniform(P, W, 0, 0);
        for (j = 0; j < P->nwrt; j++) {
            uint32_t k = P->wrt[j];
            parts[j] = k == TA_NONE ? 0.0 : C->uni[k] ? W->A[C->dloc[k]] : W->Gb[j];
        }
    }
    return TA_OK;
}
