/* ops_higher.h: the dispatch from an op code to its e_ and d2_ rules (ops.h),
 * for higher.c (grad with create_graph, hvp, hessian, jacobian). */
#ifndef TAPEAD_HIGHER_H
#define TAPEAD_HIGHER_H
#include "tapead.h"
#include "ops.h"

static inline void hi_partials2(int op, double x, double y, double r, double *xx, double *xy, double *yy)
{
    switch (op) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: d2_##NAME(x, y, r, xx, xy, yy); return;
#include "ops.def"
#undef TA_OP
    }
    *xx = *xy = *yy = 0.0;
}

static inline void hi_rule(hi_em *E, int op, hi_arg *a)
{
    switch (op) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: e_##NAME(E, a); return;
#include "ops.def"
#undef TA_OP
    }
}

#endif
