/* prog_ref.c: the reference bench_replay.py times loss.recompute() against,
 * compiled by the benchmark with cffi; not part of the library.
 *
 * A Program's forward arithmetic (its flat form, as pickling carries it:
 * op, a, b, c per node; a leaf's c is its value) as a plain scalar loop
 * over flat arrays: one value per node, no marks, no segments, reps times.
 * Returns 0, or -1 if an op failed (a domain error) or memory ran out. */
#include <stdlib.h>
#include "tapead.h"
#include "ops.h"

int prog_ref(uint32_t n, const uint8_t *op, const uint32_t *a, const uint32_t *b,
             const double *c, uint32_t reps)
{
    double *v;
    uint32_t r, k;
    int st = TA_OK;
    if (!(v = (double *)malloc(((size_t)n + 1) * sizeof *v))) return -1;
    for (k = 0; k < n; k++) if (op[k] == TA_LEAF) v[k] = c[k];
    for (r = 0; r < reps; r++)
        for (k = 0; k < n; k++) {
            int o = op[k];
            if (o == TA_LEAF) continue;
            st |= ta_forward(o, v[a[k]], ta_kinds[o] == TA_K_BIN ? v[b[k]] : c[k], &v[k]);
        }
    free(v);
    return st ? -1 : 0;
}
