/* nn.c: weighted sums recorded in one call (nn.h): micrograd's Layer
 * (ta_layer), tapead.dot and tapead.linear (ta_dots; the CPython front
 * calls the core directly).
 *
 * micrograd's Neuron computes sum((wi*xi for ...), b), and a model's
 * sum(w*x for ...) starts from 0: per term one product node then one sum
 * node, left to right (then relu for a Neuron).  The core records exactly
 * those nodes, in that order, with the same arithmetic, so the tape (and
 * every value and gradient) is the one the Python loop would record; only
 * the per-node Python calls are gone. */
#include "tapead.h"
#include "ops.h"
#include "nn.h"

/* Resolve n ids (ids < 0 allowed where `constants` says so). */
static int nn_refs(ta_tape *T, const int64_t *ids, size_t n, int constants)
{
    size_t i;
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
    ta_forward(op, vx, vy, r);            /* MUL, MULC, ADD, ADDC, RELU: cannot fail */
    return ta_put(T, op, x, aux, *r, ref);
}

static uint32_t nn_first(const ta_sums *S, uint32_t j)
{
    return S->b ? 0u : S->from[j];
}

uint64_t ta_sums_count(const ta_sums *S)
{
    uint64_t n = 0;
    uint32_t j, i;
    for (j = 0; j < S->nout; j++) {
        const int64_t *w = S->w + (size_t)j * S->wrow;
        for (i = nn_first(S, j); i < S->nin; i++)
            n += (w[i] < 0 && S->x[i] < 0) ? 1u : 2u;   /* a number's product: one ADDC */
        n += S->relu ? 1u : 0u;
    }
    return n;
}

int ta_sums_record(ta_tape *T, const ta_sums *S, int64_t *out)
{
    uint32_t j, i;
    int st = TA_OK;
    for (j = 0; j < S->nout && st == TA_OK; j++) {
        const int64_t *w = S->w + (size_t)j * S->wrow;
        const double *wc = S->wc ? S->wc + (size_t)j * S->wrow : NULL;
        uint32_t acc = 0;
        double vacc = 0.0;
        int have = S->b != NULL;           /* is there a running node yet? */
        if (have) { acc = (uint32_t)S->b[j]; vacc = nn_val(T, S->b[j]); }
        for (i = nn_first(S, j); i < S->nin && st == TA_OK; i++) {
            int64_t wi = w[i], xi = S->x[i];
            double vprod;
            uint32_t prod = 0;
            ta_aux aux;
            if (wi >= 0 && xi >= 0) {
                aux.y = (uint32_t)xi;
                st = nn_node(T, TA_MUL, (uint32_t)wi, aux, nn_val(T, wi), nn_val(T, xi), &prod, &vprod);
            } else if (wi >= 0) {
                aux.c = S->xc[i];
                st = nn_node(T, TA_MULC, (uint32_t)wi, aux, nn_val(T, wi), aux.c, &prod, &vprod);
            } else if (xi >= 0) {                    /* c * x is x.__rmul__(c) */
                aux.c = wc[i];
                st = nn_node(T, TA_MULC, (uint32_t)xi, aux, nn_val(T, xi), aux.c, &prod, &vprod);
            } else {                                 /* two numbers: acc + their product */
                aux.c = wc[i] * S->xc[i];
                st = nn_node(T, TA_ADDC, acc, aux, vacc, aux.c, &acc, &vacc);
                continue;
            }
            if (st != TA_OK) break;
            if (have) {
                aux.y = prod;
                st = nn_node(T, TA_ADD, acc, aux, vacc, vprod, &acc, &vacc);
            } else {                                 /* c0 + p is p.__radd__(c0) */
                aux.c = S->c0[j];
                st = nn_node(T, TA_ADDC, prod, aux, vprod, aux.c, &acc, &vacc);
                have = 1;
            }
        }
        if (st == TA_OK && S->relu) {
            ta_aux aux;
            aux.c = 0.0;
            st = nn_node(T, TA_RELU, acc, aux, vacc, 0.0, &acc, &vacc);
        }
        out[j] = TA_ID(T, acc);
    }
    return st;
}

/* Resolve every node id of S (w, x, b; a constant only where S has them). */
static int nn_resolve(ta_tape *T, const ta_sums *S)
{
    int st;
    if ((st = nn_refs(T, S->w, (size_t)S->nout * S->nin, S->wc != NULL)) != TA_OK ||
        (st = nn_refs(T, S->x, S->nin, S->xc != NULL)) != TA_OK)
        return st;
    return S->b ? nn_refs(T, S->b, S->nout, 0) : TA_OK;
}

/* Record S's rows, holding them in h: all or nothing.  The ids are resolved
 * after ta_bulk_begin, which may collect: no collection runs between
 * resolving them and reading their nodes. */
static int nn_record_held(ta_tape *T, const ta_sums *S, int64_t *h)
{
    ta_bulk bk;
    int st = ta_bulk_begin(T, ta_sums_count(S), &bk);
    if (st != TA_OK) return st;
    st = nn_resolve(T, S);
    if (st == TA_OK) st = ta_sums_record(T, S, TA_HELD_IDS(h));
    if (st == TA_OK) ta_held_take(T, h, S->nout);
    ta_bulk_end(T, &bk, st != TA_OK);      /* out of memory midway: all or nothing */
    return st;
}

int ta_layer(const int64_t *w, const int64_t *b, uint32_t nout, uint32_t nin,
             const int64_t *xid, const double *xc, int relu, int64_t *h)
{
    ta_tape *T = ta_self();
    ta_sums S;
    if (!T) return TA_ENOMEM;
    if (T->nograd || T->anomaly) return TA_EMODEPATH;   /* those modes take the op-by-op path */
    /* whatever Python hands over: no NULL array read, no count that wraps,
     * and an input id < 0 (a constant) only where there are constants */
    if ((uint64_t)nout * nin > UINT32_MAX || (nout && (!b || !ta_held_fits(h, nout) || (nin && !w))) ||
        (nin && !xid))
        return TA_EARG;
    S.nout = nout; S.nin = nin; S.w = w; S.wc = NULL; S.wrow = nin; S.x = xid; S.xc = xc;
    S.b = b; S.c0 = NULL; S.from = NULL; S.relu = relu;
    return nn_record_held(T, &S, h);
}

int ta_dots(const int64_t *w, const double *wc, uint32_t nout, uint32_t nin,
            const int64_t *x, const double *xc, const double *c0, const uint32_t *from, int64_t *h)
{
    ta_tape *T = ta_self();
    ta_sums S;
    uint32_t j;
    if (!T) return TA_ENOMEM;
    if (T->nograd || T->anomaly) return TA_EMODEPATH;   /* those modes take the op-by-op path */
    if ((uint64_t)nout * nin > UINT32_MAX ||
        (nout && (!w || !wc || !c0 || !from || !x || !xc || !ta_held_fits(h, nout))))
        return TA_EARG;
    for (j = 0; j < nout; j++) {                        /* each row starts at a term with a node */
        uint32_t f = from[j];
        if (f >= nin || (w[(size_t)j * nin + f] < 0 && x[f] < 0)) return TA_EARG;
    }
    S.nout = nout; S.nin = nin; S.w = w; S.wc = wc; S.wrow = nin; S.x = x; S.xc = xc;
    S.b = NULL; S.c0 = c0; S.from = from; S.relu = 0;
    return nn_record_held(T, &S, h);
}
