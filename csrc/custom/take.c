/* take.c: tapead.take, an element of a list chosen by a Value.
 *
 * take(seq, i) is seq[i] where the index i is a node: the node records
 * the index and every candidate as its inputs (an n-ary node, custom.h:
 * inputs in[0] = the index, in[1 + k] = candidate k) and which candidate
 * its value is (aux.y = k).  The value is that candidate's, bit for bit;
 * the reverse sweep gives the node's adjoint to that candidate alone
 * (sweep.c: ta_take_step), none to the index, which is a whole number.  A
 * replay (a Program, its generated code) picks again by the index's value
 * at each run, with the one rule ta_take_index (ops.h): so a graph whose
 * structure depended only on which token came next depends on the
 * token's position instead, and replays for every sequence of tokens.
 *
 * Recorded as a bulk call (rows of candidates give one node per column,
 * an embedding row's worth at once), all or nothing. */
#include <stdlib.h>
#include "custom.h"
#include "ops.h"

int ta_take(int64_t idx, const int64_t *cands, uint32_t m, uint32_t ncols, int64_t *h)
{
    ta_tape *T = ta_self();
    uint32_t *in, j, i, k = 0, xr = 0;
    uint64_t cells = (uint64_t)m * ncols;
    ta_bulk bk;
    ta_aux aux;
    int st;
    if (!T) return TA_ENOMEM;
    if (T->nograd) return TA_EMODEPATH;      /* under no_grad: Python indexes the list itself */
    if (!m || !ncols || !cands || m >= UINT32_MAX - 1u || cells > UINT32_MAX ||
        !ta_held_fits(h, ncols))
        return TA_EARG;
    if (!(in = (uint32_t *)ta_malloc(((size_t)m + 1u) * sizeof *in))) return TA_ENOMEM;
    if ((st = ta_bulk_begin(T, ncols, &bk)) != TA_OK) { free(in); return st; }
    /* resolved after ta_bulk_begin, which may collect; nothing collects
     * until ta_bulk_end */
    {
        ta_seg *s; uint32_t o;
        if ((st = ta_resolve(T, idx, &s, &o)) == TA_OK) xr = TA_REF(s, o);
        for (i = 0; st == TA_OK && i < cells; i++) st = ta_resolve(T, cands[i], &s, &o);
        if (st == TA_OK) {
            double x = TA_SEGOF(T, xr)->val[TA_OFF(xr)];
            if ((st = ta_take_index(x, m, &k)) != TA_OK) {
                T->err_op = TA_TAKE; T->err_x = x; T->err_y = (double)m;
            }
        }
    }
    aux.c = 0.0;
    aux.y = k;
    in[0] = xr;
    for (j = 0; st == TA_OK && j < ncols; j++) {
        uint32_t r = (uint32_t)cands[(size_t)k * ncols + j];
        int64_t id;
        for (i = 0; i < m; i++) in[1u + i] = (uint32_t)cands[(size_t)i * ncols + j];
        id = ta_nary_append(T, TA_TAKE, in, m + 1u, TA_SEGOF(T, r)->val[TA_OFF(r)], NULL, NULL, 0,
                            NULL, aux);
        if (id < 0) st = (int)id;
        else TA_HELD_IDS(h)[j] = id;
    }
    if (st == TA_OK) ta_held_take(T, h, ncols);
    ta_bulk_end(T, &bk, st != TA_OK);        /* all or nothing */
    free(in);
    return st;
}

int64_t ta_take_pick(double x, uint32_t m)
{
    uint32_t k;
    ta_tape *T;
    if (ta_take_index(x, m, &k) == TA_OK) return (int64_t)k;
    if ((T = ta_self()) != NULL) { T->err_op = TA_TAKE; T->err_x = x; T->err_y = (double)m; }
    return TA_EINDEX;
}
