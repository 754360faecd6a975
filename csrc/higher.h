/* higher.h: each op's derivative written as ops, the table behind
 * create_graph (reverse-over-reverse).  One e_NAME per row of ops.def: a
 * row without one fails to compile, naming it (higher.c: ta_rule_table).
 *
 * e_NAME(E, a) reads the op's adjoint term a->g, its inputs a->x, a->y
 * (node ids; a->c is the constant of CST ops), its own node a->r and their
 * values xv, yv (= c for CST ops), rv, and sets a->dx, a->dy to the
 * contributions g * dr/dx, g * dr/dy, recorded as new tape nodes.  Because
 * the partials are built from ops of this same table, their derivatives
 * are correct to any order by induction.
 *
 * A term (hi_t) is a node id, or a constant when id == 0: adjoints that
 * are still constants (the seed, a MULC of it) cost no node.
 *
 * Kinks (RELU, ABS, MAX, MIN): the first derivative is the one backward()
 * uses (relu'(0) = 0, abs'(0) = 0, a tie splits g/2, g/2) and is piecewise
 * constant, so every higher derivative is 0, at the kink too.
 *
 * Where a partial cannot be written as ops at this point (x**y or c/x
 * style factors that would divide by zero, log of x <= 0: sqrt at 0, 0**c
 * with c < 1), higher.c falls back to the numeric partial as a constant
 * factor: the first derivative equals backward()'s (inf or nan there) and
 * its own derivative is taken as 0. */
#ifndef TAPEAD_HIGHER_H
#define TAPEAD_HIGHER_H
#include "tapead.h"
#include "ops.h"

typedef struct { int64_t id; double c; } hi_t;   /* node id, or constant c if id == 0 */

typedef struct {
    ta_tape *T;
    uint64_t limit;     /* the tape's node cap (its own check is disabled while emitting) */
    int st;             /* first error; later emits do nothing */
} hi_em;

typedef struct {
    hi_t g;                     /* adjoint of r */
    int64_t x, y, r;            /* node ids (y only for BIN) */
    double c, xv, yv, rv;       /* c = constant of CST ops; yv = c for them */
    hi_t dx, dy;                /* out: contributions to x's and y's adjoints */
} hi_arg;

/* record one node (defined in higher.c); return its id, 0 after an error */
int64_t hi_node(hi_em *E, int op, int64_t x, int64_t y, double c);
#define N1(op, a)    hi_node(E, TA_##op, (a), 0, 0.0)
#define N2(op, a, b) hi_node(E, TA_##op, (a), (b), 0.0)
#define NC(op, a, k) hi_node(E, TA_##op, (a), 0, (k))

static const hi_t hi_zero = {0, 0.0};
static inline hi_t hi_node_t(int64_t id) { hi_t t; t.id = id; t.c = 0.0; return t; }
static inline hi_t hi_const(double c) { hi_t t; t.id = 0; t.c = c; return t; }
static inline int hi_is_zero(hi_t t) { return t.id == 0 && t.c == 0.0; }

/* g * n, n a node */
static inline hi_t hi_scale(hi_em *E, hi_t g, int64_t n)
{
    if (g.id) return hi_node_t(N2(MUL, g.id, n));
    if (g.c == 0.0) return hi_zero;
    if (g.c == 1.0) return hi_node_t(n);
    return hi_node_t(NC(MULC, n, g.c));
}
/* g * k, k a constant */
static inline hi_t hi_mulc(hi_em *E, hi_t g, double k)
{
    if (!g.id) return hi_const(g.c * k);
    if (k == 1.0) return g;
    return hi_node_t(NC(MULC, g.id, k));
}
/* g / n, n a node */
static inline hi_t hi_div(hi_em *E, hi_t g, int64_t n)
{
    if (g.id) return hi_node_t(N2(DIV, g.id, n));
    if (g.c == 0.0) return hi_zero;
    return hi_node_t(NC(RDIVC, n, g.c));
}
/* a + b */
static inline hi_t hi_add(hi_em *E, hi_t a, hi_t b)
{
    if (hi_is_zero(a)) return b;
    if (hi_is_zero(b)) return a;
    if (a.id && b.id) return hi_node_t(N2(ADD, a.id, b.id));
    if (a.id) return hi_node_t(NC(ADDC, a.id, b.c));
    if (b.id) return hi_node_t(NC(ADDC, b.id, a.c));
    return hi_const(a.c + b.c);
}

#define E_(NAME) static inline void e_##NAME(hi_em *E, hi_arg *a)

E_(LEAF) { UNUSED(E); UNUSED(a); }
E_(DEAD) { UNUSED(E); UNUSED(a); }
E_(CUSTOM) { UNUSED(E); UNUSED(a); }   /* never reached: ta_plain refuses first */
E_(ADD)  { UNUSED(E); a->dx = a->g; a->dy = a->g; }
E_(SUB)  { a->dx = a->g; a->dy = hi_mulc(E, a->g, -1.0); }
E_(MUL)  { a->dx = hi_scale(E, a->g, a->y); a->dy = hi_scale(E, a->g, a->x); }
/* x/y: dx = g/y, dy = -(g/y) r */
E_(DIV)  { a->dx = hi_div(E, a->g, a->y); a->dy = hi_mulc(E, hi_scale(E, a->dx, a->r), -1.0); }
/* x**y: dx = g y x**(y-1); dy = g r ln x (x > 0; else the numeric constant) */
E_(POW)
{
    a->dx = hi_scale(E, hi_scale(E, a->g, a->y), N2(POW, a->x, NC(ADDC, a->y, -1.0)));
    if (a->xv > 0.0) a->dy = hi_scale(E, a->g, N2(MUL, a->r, N1(LOG, a->x)));
    else a->dy = hi_mulc(E, a->g, dpow_dy(a->xv, a->yv, a->rv));
}
E_(ADDC)  { UNUSED(E); a->dx = a->g; }
E_(RSUBC) { a->dx = hi_mulc(E, a->g, -1.0); }
E_(MULC)  { a->dx = hi_mulc(E, a->g, a->c); }
E_(DIVC)  { a->dx = hi_mulc(E, a->g, 1.0 / a->c); }
/* c/x: dx = -(g r)/x */
E_(RDIVC) { a->dx = hi_mulc(E, hi_div(E, hi_scale(E, a->g, a->r), a->x), -1.0); }
/* x**c: dx = g (c x**(c-1)); c = 0 and c = 1 need no node */
E_(POWC)
{
    if (a->c == 1.0) a->dx = a->g;
    else if (a->c == 0.0) a->dx = hi_mulc(E, a->g, dpow_dx(a->xv, 0.0));
    else a->dx = hi_scale(E, a->g, NC(MULC, NC(POWC, a->x, a->c - 1.0), a->c));
}
/* c**x: dx = g r ln c (c > 0; else the numeric constant) */
E_(RPOWC)
{
    if (a->c > 0.0) a->dx = hi_scale(E, a->g, NC(MULC, a->r, log(a->c)));
    else a->dx = hi_mulc(E, a->g, dpow_dy(a->c, a->xv, a->rv));
}
E_(RELU)  { UNUSED(E); a->dx = a->rv > 0.0 ? a->g : hi_zero; }
/* dx = g (1 - r r) */
E_(TANH)  { a->dx = hi_scale(E, a->g, NC(RSUBC, N2(MUL, a->r, a->r), 1.0)); }
E_(EXP)   { a->dx = hi_scale(E, a->g, a->r); }
E_(LOG)   { a->dx = hi_div(E, a->g, a->x); }
/* dx = g r (1 - r) */
E_(SIGMOID) { a->dx = hi_scale(E, a->g, N2(MUL, a->r, NC(RSUBC, a->r, 1.0))); }
E_(SIN)   { a->dx = hi_scale(E, a->g, N1(COS, a->x)); }
E_(COS)   { a->dx = hi_mulc(E, hi_scale(E, a->g, N1(SIN, a->x)), -1.0); }
/* dx = (g / r) 0.5 */
E_(SQRT)  { a->dx = hi_mulc(E, hi_div(E, a->g, a->r), 0.5); }
E_(ABS)
{
    UNUSED(E);
    a->dx = a->xv > 0.0 ? a->g : (a->xv < 0.0 ? hi_mulc(E, a->g, -1.0) : hi_zero);
}
E_(MAX)
{
    if (a->xv == a->yv) { a->dx = a->dy = hi_mulc(E, a->g, 0.5); }
    else if (a->yv > a->xv) a->dy = a->g;
    else a->dx = a->g;
}
E_(MIN)
{
    if (a->xv == a->yv) { a->dx = a->dy = hi_mulc(E, a->g, 0.5); }
    else if (a->yv < a->xv) a->dy = a->g;
    else a->dx = a->g;
}
#undef E_

/* Second partials for forward-over-reverse (hvp): d2_NAME(x, y, r, &xx,
 * &xy, &yy) = d2r/dx2, d2r/dxdy, d2r/dy2 (y = c for CST ops: only xx).
 * They agree with the e_NAME rules above, fallbacks included: where e_NAME
 * falls back to a constant partial, the second partial here is 0. */
#define D2_(NAME) static inline void d2_##NAME(double x, double y, double r, double *xx, double *xy, double *yy)
#define D2_NONE(NAME) D2_(NAME) { UNUSED(x); UNUSED(y); UNUSED(r); *xx = *xy = *yy = 0.0; }
D2_NONE(LEAF) D2_NONE(DEAD) D2_NONE(CUSTOM) D2_NONE(ADD) D2_NONE(SUB)
D2_NONE(ADDC) D2_NONE(RSUBC) D2_NONE(MULC) D2_NONE(DIVC) D2_NONE(RELU) D2_NONE(ABS) D2_NONE(MAX) D2_NONE(MIN)
D2_(MUL)  { UNUSED(x); UNUSED(y); UNUSED(r); *xx = 0.0; *xy = 1.0; *yy = 0.0; }
/* x/y: xy = -1/y^2, yy = 2r/y^2 */
D2_(DIV)  { UNUSED(x); *xx = 0.0; *xy = -1.0 / (y * y); *yy = 2.0 * r / (y * y); }
/* x**y: xx = y(y-1)x^(y-2); xy = x^(y-1) + y d(x^(y-1))/dy; yy = r ln^2 x (x > 0) */
D2_(POW)
{
    double p1;
    if (x == 0.0 && y - 1.0 < 0.0) { *xx = *xy = *yy = 0.0; return; }   /* e_POW's fallback */
    p1 = pow(x, y - 1.0);
    *xx = y * dpow_dx(x, y - 1.0);
    *xy = p1 + y * dpow_dy(x, y - 1.0, p1);
    *yy = x > 0.0 ? r * log(x) * log(x) : 0.0;
}
D2_(RDIVC) { UNUSED(y); *xx = 2.0 * r / (x * x); *xy = *yy = 0.0; }
D2_(POWC)
{
    UNUSED(r);
    *xy = *yy = 0.0;
    if (y == 0.0 || y == 1.0 || (x == 0.0 && y - 1.0 < 0.0)) *xx = 0.0;
    else *xx = y * (y - 1.0) * pow(x, y - 2.0);
}
D2_(RPOWC) { UNUSED(x); *xx = y > 0.0 ? r * log(y) * log(y) : 0.0; *xy = *yy = 0.0; }
D2_(TANH)  { UNUSED(x); UNUSED(y); *xx = -2.0 * r * (1.0 - r * r); *xy = *yy = 0.0; }
D2_(EXP)   { UNUSED(x); UNUSED(y); *xx = r; *xy = *yy = 0.0; }
D2_(LOG)   { UNUSED(y); UNUSED(r); *xx = -1.0 / (x * x); *xy = *yy = 0.0; }
D2_(SIGMOID) { UNUSED(x); UNUSED(y); *xx = r * (1.0 - r) * (1.0 - 2.0 * r); *xy = *yy = 0.0; }
D2_(SIN)   { UNUSED(x); UNUSED(y); *xx = -r; *xy = *yy = 0.0; }
D2_(COS)   { UNUSED(x); UNUSED(y); *xx = -r; *xy = *yy = 0.0; }
/* sqrt: xx = -1/(4 r^3); 0 at r = 0 (e_SQRT's fallback) */
D2_(SQRT)  { UNUSED(x); UNUSED(y); *xx = r == 0.0 ? 0.0 : -0.25 / (r * r * r); *xy = *yy = 0.0; }
#undef D2_
#undef D2_NONE

static inline void hi_partials2(int op, double x, double y, double r, double *xx, double *xy, double *yy)
{
    switch (op) {
#define TA_OP(NAME, KIND, SYM) case TA_##NAME: d2_##NAME(x, y, r, xx, xy, yy); return;
#include "ops.def"
#undef TA_OP
    }
    *xx = *xy = *yy = 0.0;
}

static inline void hi_rule(hi_em *E, int op, hi_arg *a)
{
    switch (op) {
#define TA_OP(NAME, KIND, SYM) case TA_##NAME: e_##NAME(E, a); return;
#include "ops.def"
#undef TA_OP
    }
}

#endif
