/* terms.h: the term algebra the e_ rules (ops.h) write derivatives in:
 * a term is a node (its tape ref: the id encoding, TA_ID, is only for the
 * entry points that hand ids to Python) or a constant, and each helper
 * records the fewest nodes (a constant 0 or 1 factor records none).
 * hi_node, defined in higher.c, records one node. */
#ifndef TAPEAD_TERMS_H
#define TAPEAD_TERMS_H
#include "tapead.h"

typedef struct { uint32_t ref; int node; double c; } hi_t;   /* node ref if node, else constant c */

typedef struct {
    ta_tape *T;
    uint64_t limit;     /* the tape's node cap (its own check is disabled while emitting) */
    int st;             /* first error; later emits do nothing */
} hi_em;

typedef struct {
    hi_t g;                     /* adjoint of r */
    uint32_t x, y, r;           /* node refs (y only for BIN) */
    double c, xv, yv, rv;       /* c = constant of CST ops; yv = c for them */
    hi_t dx, dy;                /* out: contributions to x's and y's adjoints */
} hi_arg;

/* record one node (defined in higher.c); return its ref, 0 after an error */
uint32_t hi_node(hi_em *E, int op, uint32_t x, uint32_t y, double c);
#define N1(op, a)    hi_node(E, TA_##op, (a), 0, 0.0)
#define N2(op, a, b) hi_node(E, TA_##op, (a), (b), 0.0)
#define NC(op, a, k) hi_node(E, TA_##op, (a), 0, (k))

static const hi_t hi_zero = {0, 0, 0.0};
static inline hi_t hi_node_t(uint32_t ref) { hi_t t; t.ref = ref; t.node = 1; t.c = 0.0; return t; }
static inline hi_t hi_const(double c) { hi_t t; t.ref = 0; t.node = 0; t.c = c; return t; }
static inline int hi_is_zero(hi_t t) { return !t.node && t.c == 0.0; }

/* g * n, n a node */
static inline hi_t hi_scale(hi_em *E, hi_t g, uint32_t n)
{
    if (g.node) return hi_node_t(N2(MUL, g.ref, n));
    if (g.c == 0.0) return hi_zero;
    if (g.c == 1.0) return hi_node_t(n);
    return hi_node_t(NC(MULC, n, g.c));
}
/* g * k, k a constant */
static inline hi_t hi_mulc(hi_em *E, hi_t g, double k)
{
    if (!g.node) return hi_const(g.c * k);
    if (k == 1.0) return g;
    return hi_node_t(NC(MULC, g.ref, k));
}
/* g / n, n a node */
static inline hi_t hi_div(hi_em *E, hi_t g, uint32_t n)
{
    if (g.node) return hi_node_t(N2(DIV, g.ref, n));
    if (g.c == 0.0) return hi_zero;
    return hi_node_t(NC(RDIVC, n, g.c));
}
/* a + b */
static inline hi_t hi_add(hi_em *E, hi_t a, hi_t b)
{
    if (hi_is_zero(a)) return b;
    if (hi_is_zero(b)) return a;
    if (a.node && b.node) return hi_node_t(N2(ADD, a.ref, b.ref));
    if (a.node) return hi_node_t(NC(ADDC, a.ref, b.c));
    if (b.node) return hi_node_t(NC(ADDC, b.ref, a.c));
    return hi_const(a.c + b.c);
}

#endif
