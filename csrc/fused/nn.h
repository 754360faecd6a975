/* nn.h: weighted sums recorded in one call (nn.c), shared by micrograd's
 * Layer (ta_layer), tapead.dot / tapead.linear on the cffi front (ta_dots)
 * and on the CPython front (dots.c).
 *
 * Row j is what Python's left-to-right sum records: either
 *     b[j] + w[j,0]*x[0] + w[j,1]*x[1] + ...        (micrograd's Neuron: b given)
 * or, with b NULL, what sum(w*x for w, x in zip(row, x)) records:
 *     c0[j] + p[from[j]] + p[from[j]+1] + ...
 * where terms before from[j] are plain numbers whose sum (Python's, taken
 * by the caller) is c0[j], and term from[j] has a node: it becomes
 * p + c0[j] (ADDC: `0 + p` is p.__radd__(0)).  A term is MUL for two nodes,
 * MULC for a node and a constant, and a term of two constants after from[j]
 * adds their product (wc * xc, as Python's float product) to the running
 * node with ADDC.  Then relu if asked.
 *
 * An operand entry >= 0 is a node whose ref is its low 32 bits (an id or a
 * bare ref), < 0 a constant (wc / xc at the same index).  w[j*wrow + i].
 * Every node must be resolved, on T's main tape, by the caller. */
#ifndef TAPEAD_NN_H
#define TAPEAD_NN_H
#include "tapead.h"

typedef struct {
    uint32_t nout, nin;
    const int64_t *w;  const double *wc;  size_t wrow;
    const int64_t *x;  const double *xc;
    const int64_t *b;                      /* a starting node per row, or NULL: */
    const double *c0;  const uint32_t *from;   /* ... then these (from[j] < nin) */
    int relu;
} ta_sums;

/* How many nodes ta_sums_record appends (for ta_bulk_begin). */
uint64_t ta_sums_count(const ta_sums *S);
/* Append the rows' nodes (inside ta_bulk_begin/end: the caller holds the
 * results, or rolls back on failure); out[j] gets row j's id.  TA_OK or a
 * status (out of memory, the node limit). */
int ta_sums_record(ta_tape *T, const ta_sums *S, int64_t *out);

#endif
