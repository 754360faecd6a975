/* code.c: a Program's execution code, derived from its flat form.
 *
 * The flat form has one entry per recorded node; running it row by row
 * would store every node's value for every row, parameters included.
 * The code (struct ta_code in replay.h) stores less and does less:
 *   - uniform nodes (no input column behind them: parameters, and what is
 *     computed from parameters and constants alone) are computed once per
 *     call as scalars;
 *   - a dot, a chain acc + p0*q0 + p1*q1 + ... whose products and partial
 *     sums nothing else reads, is one instruction; its partial sums stay in
 *     registers and its products are never stored;
 *   - only nodes with a wrt leaf behind them get an adjoint.
 * The arithmetic, and its order, is the flat form's: results are the
 * same bits.  Deriving is linear in the number of nodes. */
#include <stdlib.h>
#include <string.h>
#include "replay.h"
#include "ops.h"

void ta_code_free(ta_code *C)
{
    if (!C) return;
    free(C->uni); free(C->need); free(C->loc); free(C->bloc); free(C->dloc);
    free(C->uops); free(C->ins); free(C->tp); free(C->tq); free(C->tf); free(C->bnode);
    free(C->tv); free(C->ic);
    free(C->dslot); free(C);
}

/* rows per chunk: the chunk's rows of values and adjoints near 256 KB */
static uint32_t ta_chunk_rows(uint64_t rows)
{
    uint32_t ch = 256u;
    while (ch > 4u && (uint64_t)ch * rows * sizeof(double) > 262144u) ch /= 2u;
    return ch;
}

/* DO(node) for each node instruction I reads, in this order: x, then a
 * dot's terms (p, q each), a take's candidates, or a binary op's y */
#define TA_EACH_OPERAND(P, C, I, t, DO) do {                                    \
        DO((I)->x);                                                              \
        if ((I)->op == TA_IDOT)                                                  \
            for (t = (I)->t0; t < (I)->t0 + (I)->nt; t++) { DO((C)->tp[t]); DO((C)->tq[t]); } \
        else if ((I)->op == TA_TAKE)                                             \
            for (t = 1; t <= (P)->lst[(I)->y]; t++) DO((P)->lst[(I)->y + t]);    \
        else if (ta_kinds[(I)->op] == TA_K_BIN) DO((I)->y);                      \
    } while (0)

/* Adjoint row slots for the row nodes, reused: the reverse sweep needs a
 * node's adjoint from the first write into it (its last reader, the sweep
 * going newest first) to its own instruction, which reads it; then its row
 * is zeroed (batch.c) and its slot freed for the next node that needs one.
 * So the rows of adjoints a chunk touches are as many as are live at once
 * (a few dozen for most graphs), not one per node: they stay in L1, and
 * zeroing them per chunk costs nothing.  The wrt nodes keep theirs (their
 * rows are read after the sweep).  Which rows are added to, and in which
 * order, is unchanged: the same bits.  TA_OK or TA_ENOMEM. */
static int ta_adjoint_slots(const ta_prog *P, ta_code *C)
{
    size_t n = (size_t)P->n + 1;
    uint32_t *stack = (uint32_t *)ta_malloc(n * 4), nfree = 0, i, j;
    uint8_t *keep = (uint8_t *)ta_calloc(n, 1);
    if (!stack || !keep) { free(stack); free(keep); return TA_ENOMEM; }
    for (i = 0; i < P->n; i++) C->dslot[i] = TA_NONE;
    for (j = 0; j < P->nwrt; j++) if (P->wrt[j] != TA_NONE) keep[P->wrt[j]] = 1;
#define TA_SLOT(k) do {                                                          \
        uint32_t k_ = (k);                                                       \
        if (C->dloc[k_] != TA_NONE && !C->uni[k_] && C->dslot[k_] == TA_NONE)    \
            C->dslot[k_] = nfree ? stack[--nfree] : C->nds++;                    \
    } while (0)
    for (j = 0; j < P->nwrt; j++) if (P->wrt[j] != TA_NONE) TA_SLOT(P->wrt[j]);
    for (j = 0; j < P->nout; j++) TA_SLOT(P->out[j]);            /* seeded first */
    for (i = C->nins; i-- > 0;) {
        ta_ins *I = &C->ins[i];
        uint32_t t;
        I->rel = 0;
        if (C->dloc[I->k] == TA_NONE) continue;                  /* batch.c skips it */
        TA_SLOT(I->k);
        TA_EACH_OPERAND(P, C, I, t, TA_SLOT);
        if (!keep[I->k]) { I->rel = 1; stack[nfree++] = C->dslot[I->k]; }
    }
#undef TA_SLOT
    free(stack); free(keep);
    return TA_OK;
}

/* Value row slots for the row nodes, reused where the reverse sweep never
 * reads the value.  A value is kept (its own row, for the whole chunk)
 * when it is an input column, an output or a guard's operand (read after
 * the forward sweep), or when a reverse step that runs reads it: an op's
 * rule reads its operands and result as RD_NAME says (ADD, SUB, the
 * constant shifts and scalings read none), a dot's term reads the other
 * factor.  Any other value is read only by the forward sweep: its slot is
 * freed after its last reader and goes to the next such node (newest
 * freed first, so the rows in flight stay in L1).  A result never shares
 * a slot with its own operands.  The operations and their order are
 * unchanged: the same bits, with fewer rows of values stored and streamed
 * back.  TA_OK or TA_ENOMEM. */
static int ta_value_slots(const ta_prog *P, ta_code *C, const uint8_t *pin)
{
    size_t n = (size_t)P->n + 1;
    uint32_t *last = (uint32_t *)ta_malloc(n * 4), *stack = (uint32_t *)ta_malloc(n * 4);
    uint32_t nfree = 0, i, k, t;
    uint8_t *keep = (uint8_t *)ta_malloc(n);
    if (!last || !stack || !keep) { free(last); free(stack); free(keep); return TA_ENOMEM; }
    for (k = 0; k < P->n; k++) { keep[k] = pin[k] || P->op[k] == TA_LEAF; last[k] = TA_NONE; }
    for (i = 0; i < C->nins; i++) {
        ta_ins *I = &C->ins[i];
        int bin = I->op != TA_IDOT && ta_kinds[I->op] == TA_K_BIN;
#define TA_LAST(o) (last[o] = i)
        TA_EACH_OPERAND(P, C, I, t, TA_LAST);
#undef TA_LAST
        I->rd = 0;
        if (C->dloc[I->k] == TA_NONE) continue;              /* no reverse step */
        if (I->op == TA_IDOT) {
            for (t = I->t0; t < I->t0 + I->nt; t++) {
                if (C->dloc[C->tp[t]] != TA_NONE) keep[C->tq[t]] = 1;
                if (C->dloc[C->tq[t]] != TA_NONE) keep[C->tp[t]] = 1;
            }
            I->rd = TA_RD_X;
            continue;
        }
        I->rd = ta_reads[I->op] & (bin ? 7u : TA_RD_X | TA_RD_R);
        if (I->rd & TA_RD_X) keep[I->x] = 1;
        if (I->rd & TA_RD_Y) keep[I->y] = 1;
        if (I->rd & TA_RD_R) keep[I->k] = 1;
    }
    C->nv = 0;
    for (k = 0; k < P->n; k++)                               /* the input columns */
        if (C->loc[k] != TA_NONE && !C->uni[k] && P->op[k] == TA_LEAF) C->loc[k] = C->nv++;
#define TA_FREE(o) do {                                                          \
        uint32_t o_ = (o);                                                       \
        if (!C->uni[o_] && !keep[o_] && last[o_] == i) {                         \
            stack[nfree++] = C->loc[o_]; last[o_] = TA_NONE;  /* once */          \
        }                                                                        \
    } while (0)
    for (i = 0; i < C->nins; i++) {
        const ta_ins *I = &C->ins[i];
        C->loc[I->k] = keep[I->k] || !nfree ? C->nv++ : stack[--nfree];
        TA_EACH_OPERAND(P, C, I, t, TA_FREE);
        if (!keep[I->k] && last[I->k] == TA_NONE) stack[nfree++] = C->loc[I->k];   /* unread */
    }
#undef TA_FREE
    free(last); free(stack); free(keep);
    return TA_OK;
}

/* Each instruction's rows, looked up once here rather than per chunk
 * (batch.c reads them: ta_fw_op, ta_rv_op) */
static int ta_ins_rows(const ta_prog *P, ta_code *C, uint32_t nt)
{
    uint32_t i, t, nc = 0, k = 0;
#define TA_HAS_CST(I) ((I)->op != TA_IDOT && ta_kinds[(I)->op] == TA_K_CST)
    for (i = 0; i < C->nins; i++) nc += TA_HAS_CST(&C->ins[i]);
    if (!(C->tv = (uint32_t *)ta_malloc(((size_t)nt + 1) * 16))) return TA_ENOMEM;
    if (!(C->ic = (double *)ta_malloc(((size_t)nc + 1) * sizeof(double)))) return TA_ENOMEM;
    C->ic[nc] = 0.0;
    for (t = 0; t < nt; t++) {
        uint32_t p = C->tp[t], q = C->tq[t], *v = C->tv + (size_t)4 * t;
        v[0] = C->uni[p] ? TA_UNI | C->loc[p] : C->loc[p];
        v[1] = C->uni[q] ? TA_UNI | C->loc[q] : C->loc[q];
        v[2] = TA_ADJ_ROW(C, p);
        v[3] = TA_ADJ_ROW(C, q);
    }
    for (i = 0; i < C->nins; i++) {
        ta_ins *I = &C->ins[i];
        int bin = I->op != TA_IDOT && ta_kinds[I->op] == TA_K_BIN;
        I->vk = C->loc[I->k];
        I->gk = C->dloc[I->k] == TA_NONE ? TA_NONE : C->dslot[I->k];
        I->vx = I->vy = 0; I->ax = I->ay = TA_NONE;
        if (!bin) {                  /* its constant (0.0 if it has none) */
            I->vy = TA_HAS_CST(I) ? k : nc;
            if (TA_HAS_CST(I)) C->ic[k++] = P->c[I->k];
        }
        if (I->op == TA_IDOT) {      /* its start, as a term's operand (tv) and its adjoint */
            I->vx = C->uni[I->x] ? TA_UNI | C->loc[I->x] : C->loc[I->x];
            I->ax = TA_ADJ_ROW(C, I->x);
            continue;
        }
        I->vx = TA_VAL_ROW(C, I->x);
        I->ax = I->op == TA_TAKE ? TA_NONE : TA_ADJ_ROW(C, I->x);   /* (an index gets nothing) */
        if (bin) { I->vy = TA_VAL_ROW(C, I->y); I->ay = TA_ADJ_ROW(C, I->y); }
    }
#undef TA_HAS_CST
    return TA_OK;
}

/* rows per chunk where no sum runs across rows (values, per-sample
 * gradients: the chunk changes no result): at least 32 rows while the
 * chunk's rows stay within TA_WIDE_BYTES, since below that each
 * instruction's dispatch is spread over too few rows (measured on a 50k-node
 * graph: docs/native.md) */
#define TA_WIDE_BYTES ((uint64_t)16 << 20)
static uint32_t ta_wide_rows(uint64_t rows)
{
    uint32_t ch = ta_chunk_rows(rows);
    while (ch < 32u && (uint64_t)ch * 2u * rows * sizeof(double) <= TA_WIDE_BYTES) ch *= 2u;
    return ch;
}

int ta_code_new(ta_prog *P)
{
    size_t n = (size_t)P->n + 1;
    uint32_t k, j, nt = 0, nins = 0;
    uint8_t *pin = NULL, *uses = NULL, *dotadd = NULL, *gone = NULL;
    ta_code *C = (ta_code *)ta_calloc(1, sizeof *C);
    int st = TA_ENOMEM;
    if (!C) return TA_ENOMEM;
    C->uni = (uint8_t *)ta_calloc(n, 1); C->need = (uint8_t *)ta_calloc(n, 1);
    C->loc = (uint32_t *)ta_malloc(n * 4); C->bloc = (uint32_t *)ta_malloc(n * 4);
    C->dloc = (uint32_t *)ta_malloc(n * 4); C->uops = (uint32_t *)ta_malloc(n * 4);
    C->ins = (ta_ins *)ta_malloc(n * sizeof *C->ins);
    C->tp = (uint32_t *)ta_malloc(n * 4); C->tq = (uint32_t *)ta_malloc(n * 4);
    C->tf = (uint8_t *)ta_calloc(n, 1); C->bnode = (uint32_t *)ta_malloc(n * 4);
    C->dslot = (uint32_t *)ta_malloc(n * 4);
    pin = (uint8_t *)ta_calloc(n, 1); uses = (uint8_t *)ta_calloc(n, 1);
    dotadd = (uint8_t *)ta_calloc(n, 1); gone = (uint8_t *)ta_calloc(n, 1);
    if (!C->uni || !C->need || !C->loc || !C->bloc || !C->dloc || !C->uops || !C->ins ||
        !C->tp || !C->tq || !C->tf || !C->bnode || !C->dslot || !pin || !uses || !dotadd || !gone)
        goto out;

    /* uniform: parameters, and nodes whose inputs are all uniform */
    for (k = 0; k < P->npar; k++) C->uni[P->par[k]] = 1;
    for (k = 0; k < P->nwrt; k++) if (P->wrt[k] != TA_NONE) C->need[P->wrt[k]] = 1;
    for (k = 0; k < P->n; k++) {
        int kind = ta_kinds[P->op[k]];
        if (kind == TA_K_LEAF) continue;
        if (P->op[k] == TA_TAKE) {         /* its index, then its candidates */
            const uint32_t *l = P->lst + P->b[k];
            C->uni[k] = C->uni[P->a[k]];
            if (uses[P->a[k]] < 2) uses[P->a[k]]++;
            for (j = 1; j <= l[0]; j++) {
                C->uni[k] &= C->uni[l[j]];
                C->need[k] |= C->need[l[j]];      /* (the index gets no adjoint) */
                if (uses[l[j]] < 2) uses[l[j]]++;
            }
            continue;
        }
        C->uni[k] = C->uni[P->a[k]] && (kind != TA_K_BIN || C->uni[P->b[k]]);
        C->need[k] = !(ta_reads[P->op[k]] & TA_RD_STOP)      /* DETACH: nothing flows back */
                     && (C->need[P->a[k]] || (kind == TA_K_BIN && C->need[P->b[k]]));
        if (uses[P->a[k]] < 2) uses[P->a[k]]++;
        if (kind == TA_K_BIN && uses[P->b[k]] < 2) uses[P->b[k]]++;
    }
    /* outputs and guard operands are read from outside: never inside a dot */
    for (j = 0; j < P->nout; j++) pin[P->out[j]] = 1;
    for (j = 0; j < P->ng; j++) { pin[P->g[j].a] = 1; if (!P->g[j].cst) pin[P->g[j].b] = 1; }

    /* dots: ADD(acc, MUL) whose MUL only it reads; an ADD of that shape
     * that only the next one reads (as its acc) is absorbed into it */
    for (k = 0; k < P->n; k++) {
        uint32_t m = P->b[k], x = P->a[k];
        if (P->op[k] != TA_ADD || C->uni[k] || P->op[m] != TA_MUL || C->uni[m] ||
            uses[m] != 1 || pin[m] || m == x)
            continue;
        dotadd[k] = 1; gone[m] = 1;
        if (dotadd[x] && uses[x] == 1 && !pin[x]) gone[x] = 1;
    }

    /* slots, instructions and terms, in node order */
    for (k = 0; k < P->n; k++) {
        C->loc[k] = C->bloc[k] = C->dloc[k] = TA_NONE;
        if (gone[k]) continue;
        if (C->uni[k]) {
            C->loc[k] = C->nu++;
            if (ta_kinds[P->op[k]] != TA_K_LEAF) C->uops[C->nuops++] = k;
            if (C->need[k]) C->dloc[k] = C->ndu++;
            continue;
        }
        C->loc[k] = C->nv++;
        if (C->need[k]) C->dloc[k] = C->ndr++;
        if (P->op[k] == TA_LEAF) continue;          /* an input column */
        {
            ta_ins *I = &C->ins[nins++];
            I->k = k; I->x = P->a[k]; I->y = P->b[k]; I->op = P->op[k]; I->t0 = I->nt = 0;
            if (dotadd[k]) {          /* walk the chain back to its start */
                uint32_t x = k, t;
                I->op = TA_IDOT; I->t0 = nt;
                do {
                    C->tp[nt] = P->a[P->b[x]]; C->tq[nt] = P->b[P->b[x]]; nt++;
                    x = P->a[x];
                } while (gone[x] && dotadd[x]);
                I->x = x; I->nt = nt - I->t0;
                for (t = 0; t < I->nt / 2; t++) {   /* terms in recording order */
                    uint32_t a = I->t0 + t, b = I->t0 + I->nt - 1 - t, s;
                    s = C->tp[a]; C->tp[a] = C->tp[b]; C->tp[b] = s;
                    s = C->tq[a]; C->tq[a] = C->tq[b]; C->tq[b] = s;
                }
            } else if (P->op[k] == TA_TAKE) {
                I->y = P->b[k];   /* where its list starts; uniform operands are read from U */
                if (C->uni[I->x] && C->bloc[I->x] == TA_NONE) {
                    C->bnode[C->nb] = I->x; C->bloc[I->x] = C->nb++;
                }
            } else {
                /* a uniform operand of a row op is read from a broadcast row */
                int kind = ta_kinds[P->op[k]];
                if (C->uni[I->x] && C->bloc[I->x] == TA_NONE) {
                    C->bnode[C->nb] = I->x; C->bloc[I->x] = C->nb++;
                }
                if (kind == TA_K_BIN && C->uni[I->y] && C->bloc[I->y] == TA_NONE) {
                    C->bnode[C->nb] = I->y; C->bloc[I->y] = C->nb++;
                }
            }
        }
    }
    C->nins = nins;
    /* the shapes batch.c runs four terms at a time (a window may cross from
     * one dot into the next: batch.c keeps within a dot) */
    for (k = 0; k + 4u <= nt; k++) {
        uint32_t j, i, rows = 0, ok = 1, need = 1;
        for (j = k; j < k + 4u; j++) {
            ok &= C->uni[C->tp[j]] && !C->uni[C->tq[j]];
            need &= C->need[C->tp[j]];
            rows += C->need[C->tq[j]];
            for (i = k; i < j; i++) ok &= C->tq[i] != C->tq[j];
        }
        if (!ok) continue;
        C->tf[k] = TA_UR4;
        if (need && (rows == 0 || rows == 4)) C->tf[k] |= TA_RV4;
    }
    if ((st = ta_adjoint_slots(P, C)) != TA_OK) goto out;
    /* (the chunk summed gradients run is counted with a value row per row
     * node, as before the rows were reused: it sets their sums' order) */
    C->ch = ta_chunk_rows((uint64_t)C->nv + C->nb + C->ndr + C->ndu + 3u);
    if ((st = ta_value_slots(P, C, pin)) != TA_OK) goto out;
    if ((st = ta_ins_rows(P, C, nt)) != TA_OK) goto out;
    C->wch = ta_wide_rows((uint64_t)C->nv + C->nb + C->nds + C->ndu + 3u);
out:
    free(pin); free(uses); free(dotadd); free(gone);
    if (st != TA_OK) { ta_code_free(C); return st; }
    P->code = C;
    return TA_OK;
}

/* ---------------------------------------------------- for the generator */

int ta_prog_code(ta_prog *P, ta_codeview_t *v)
{
    const ta_code *C;
    uint32_t i, nt = 0;
    if (!P || !v || !P->code) return TA_EARG;
    C = P->code;
    for (i = 0; i < C->nins; i++) nt += C->ins[i].nt;
    if (!v->uni) {      /* sizes only */
        v->n = P->n; v->nins = C->nins; v->nterms = nt; v->nuops = C->nuops;
        v->nu = C->nu; v->ndu = C->ndu; v->ch = C->ch;
        return TA_OK;
    }
    if (v->n != P->n || v->nins != C->nins || v->nterms != nt || v->nuops != C->nuops ||
        !v->need || !v->loc || !v->dloc || !v->uops || !v->ik || !v->ix || !v->iy || !v->it0 ||
        !v->int_ || !v->iop || !v->tp || !v->tq || !v->tf)
        return TA_EARG;
    memcpy(v->uni, C->uni, P->n); memcpy(v->need, C->need, P->n);
    memcpy(v->loc, C->loc, (size_t)P->n * 4); memcpy(v->dloc, C->dloc, (size_t)P->n * 4);
    memcpy(v->uops, C->uops, (size_t)C->nuops * 4);
    for (i = 0; i < C->nins; i++) {
        const ta_ins *I = &C->ins[i];
        v->ik[i] = I->k; v->ix[i] = I->x; v->iy[i] = I->y; v->it0[i] = I->t0; v->int_[i] = I->nt;
        v->iop[i] = I->op;
    }
    memcpy(v->tp, C->tp, (size_t)nt * 4); memcpy(v->tq, C->tq, (size_t)nt * 4);
    memcpy(v->tf, C->tf, nt);
    return TA_OK;
}
