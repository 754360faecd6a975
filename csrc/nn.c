/* nn.c: one layer of micrograd's MLP recorded in one call.
 *
 * micrograd's Neuron computes sum((wi*xi for ...), b): per input one
 * product node then one sum node, left to right, then relu.  ta_layer
 * records exactly those nodes, in that order, with the same arithmetic, so
 * the tape (and every value and gradient) is the one the Python loop would
 * record; only the per-node Python calls are gone. */
#include "tapead.h"
#include "ops.h"

/* Resolve n ids into refs (ids < 0 allowed where `constants` says so). */
static int nn_refs(ta_tape *T, const int64_t *ids, uint32_t n, int constants)
{
    uint32_t i;
    for (i = 0; i < n; i++) {
        ta_seg *s; uint32_t o; int st;
        if (constants && ids[i] < 0) continue;
        if ((st = ta_resolve(T, ids[i], &s, &o)) != TA_OK) return st;
    }
    return TA_OK;
}

static double nn_val(ta_tape *T, int64_t id)
{
    uint32_t ref = (uint32_t)id;
    return TA_SEGOF(T, ref)->val[TA_OFF(ref)];
}

/* Append op(x, y-or-c); the inputs are valid refs.  Gives the new node's
 * ref and value, returns TA_OK or a status. */
static int nn_node(ta_tape *T, int op, uint32_t x, ta_aux aux, double vx, double vy,
                   uint32_t *ref, double *r)
{
    ta_forward(op, vx, vy, r);            /* MUL, MULC, ADD, RELU: cannot fail */
    return ta_push(T, op, x, aux, *r, ref);
}

int ta_layer(const int64_t *w, const int64_t *b, uint32_t nout, uint32_t nin,
             const int64_t *xid, const double *xc, int relu, int64_t *h)
{
    ta_tape *T = ta_self();
    uint32_t j, i;
    ta_bulk bk;
    uint64_t need;
    int st;
    if (!T) return TA_ENOMEM;
    if (T->nograd || T->anomaly) return TA_EMODEPATH;   /* those modes take the op-by-op path */
    /* whatever Python hands over: no NULL array read, no count that wraps,
     * and an input id < 0 (a constant) only where there are constants */
    if ((uint64_t)nout * nin > UINT32_MAX || (nout && (!b || !ta_held_fits(h, nout) || (nin && !w))) ||
        (nin && !xid))
        return TA_EARG;
    if ((st = nn_refs(T, w, nout * nin, 0)) != TA_OK || (st = nn_refs(T, b, nout, 0)) != TA_OK ||
        (st = nn_refs(T, xid, nin, xc != NULL)) != TA_OK)
        return st;
    need = (uint64_t)nout * (2u * (uint64_t)nin + (relu ? 1u : 0u));
    if ((st = ta_bulk_begin(T, need, &bk)) != TA_OK) return st;
    for (j = 0; j < nout && st == TA_OK; j++) {
        uint32_t acc = (uint32_t)b[j];
        double vacc = nn_val(T, b[j]);
        for (i = 0; i < nin && st == TA_OK; i++) {
            int64_t wi = w[(size_t)j * nin + i];
            double vw = nn_val(T, wi), vx, vprod;
            uint32_t prod = 0;
            ta_aux aux;
            if (xid[i] >= 0) {
                aux.y = (uint32_t)xid[i]; vx = nn_val(T, xid[i]);
                st = nn_node(T, TA_MUL, (uint32_t)wi, aux, vw, vx, &prod, &vprod);
            } else {
                aux.c = xc[i]; vx = xc[i];
                st = nn_node(T, TA_MULC, (uint32_t)wi, aux, vw, vx, &prod, &vprod);
            }
            if (st != TA_OK) break;
            aux.y = prod;
            st = nn_node(T, TA_ADD, acc, aux, vacc, vprod, &acc, &vacc);
        }
        if (st == TA_OK && relu) {
            ta_aux aux;
            aux.c = 0.0;
            st = nn_node(T, TA_RELU, acc, aux, vacc, 0.0, &acc, &vacc);
        }
        TA_HELD_IDS(h)[j] = TA_ID(T, acc);
    }
    if (st == TA_OK) ta_held_take(T, h, nout);
    ta_bulk_end(T, &bk, st != TA_OK);      /* out of memory midway: all or nothing */
    return st;
}
