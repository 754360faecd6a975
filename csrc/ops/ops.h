/* ops.h: each op's rules, side by side: what it computes, its partial
 * derivatives, its derivative as ops and its second partials (below, before
 * the first op).
 *
 * fwd_OP(x, y, &r) computes r with Python's float and math-module error
 * rules (it returns a TA_E* status instead of raising); d_OP(x, y, r, &dx,
 * &dy) gives dr/dx and dr/dy at that point.  For CST ops y is the constant.
 * The sweeps multiply partials by the output adjoint, which reproduces
 * micrograd's rounding: it computes (local partial) * out.grad too.
 * Static inline so the forward and reverse sweeps inline the switch. */
#ifndef TAPEAD_OPS_H
#define TAPEAD_OPS_H
#include <math.h>
#include <string.h>
#include "tapead.h"
#include "terms.h"

#define FIN(v) (isfinite(v))
#define UNUSED(v) (void)(v)

/* x, through a barrier the optimizer cannot see through: what a constant
 * written into code (a generated kernel's, tapead/codegen/: literal(); a
 * pow exponent below) passes through so that it is computed as at run time.
 * Given a constant, compilers rewrite libm calls even at -O1 without
 * fast-math: GCC makes pow(x, 2.0) x * x and pow(x, -1.0) 1.0 / x, and
 * folds log(c) into its correctly rounded value; libm is within an ulp but
 * not correctly rounded (glibc's pow and log: 0.52 ulp), so the rewrite has
 * other bits where the exact result lies near a midpoint.  The interpreter
 * gets its constants as data at run time (as Python's float ** does) and
 * calls libm, so the generated code must too.  GCC and Clang: an empty asm
 * taking and giving back the value in a register: no instruction, nothing
 * to fold through; not volatile, so it is hoisted out of loops and merged
 * like any pure expression.  CUDA: the same in PTX.  Other compilers: a
 * volatile copy (a store and a load each use). */
static inline double ta_opaque(double x)
{
#if defined(__CUDA_ARCH__)
    asm("" : "+d"(x));
#elif defined(__GNUC__) && (defined(__x86_64__) || defined(__SSE2_MATH__))
    __asm__("" : "+x"(x));
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__("" : "+w"(x));
#elif defined(__GNUC__)
    __asm__("" : "+m"(x));
#else
    volatile double v = x;
    x = v;
#endif
    return x;
}

/* Python's float ** float, less the complex results: those are ValueError,
 * as in math.pow.  0 ** negative is ZeroDivisionError, as float.__pow__. */
static inline int py_pow(double x, double y, double *r)
{
    if (FIN(x) && FIN(y)) {
        if (x == 0.0 && y < 0.0) return TA_EZERODIV;
        if (x < 0.0 && y != floor(y)) return TA_EDOMAIN;
    }
    *r = pow(x, y);
    if (FIN(x) && FIN(y) && isinf(*r)) return TA_ERANGE;
    return TA_OK;
}
/* 2^e for the e with 2^e <= |x| < 2^(e+1) (x normal and finite): x's
 * binade, whose ulp is 2^(e-52) */
static inline double ta_binade(double x)
{
    uint64_t bits;
    double b;
    memcpy(&bits, &x, sizeof bits);
    bits &= 0x7ff0000000000000u;
    memcpy(&b, &bits, sizeof b);
    return b;
}
/* x * x - p exactly, p the rounded x * x (Dekker's product with Veltkamp's
 * split, 2^27 + 1; exact for 2^-400 < |x| < 2^400; -ffp-contract=off keeps
 * it unfused) */
static inline double ta_square_error(double x, double p)
{
    double t = 134217729.0 * x;
    double hi = t - (t - x), lo = x - hi;
    return ((hi * hi - p) + 2.0 * hi * lo) + lo * lo;
}
/* pow(x, 2.0) and pow(x, 0.5), libm's numbers, without the call where that
 * number is certainly x * x, or sqrt(x) (Adam's step takes both per
 * parameter: the calls were most of its time).  Those are the power
 * correctly rounded; libm's pow rounds an approximation of it, within
 * 0.011 ulp plus |ln(result)| * 1.5 * 2^-15 ulp (exp's error, and log's
 * relative 1.5 * 2^-68 carried through it: glibc's and musl's pow, FMA or
 * not; 0.54 ulp in all over every x and y), so under 0.016 ulp for
 * results between 2^-128 and 2^128, the range taken here.  The two part only where the exact power s lies that close
 * to a midpoint between doubles -- which happens (x with a mantissa of 27
 * bits or fewer squares to an exact midpoint, and there glibc's pow and
 * ties-to-even part ways).  So the rounded power is kept where s is within
 * 0.47 ulp of it, pow's approximation then within 0.486 ulp: it rounds to
 * the same double (where that is a power of two, the next double below is
 * half an ulp away: there within 0.235).  Elsewhere, and out of the range,
 * pow decides, called with an opaque constant (compilers fold pow(x, 2.0)
 * into x * x).  s - p is exact: for the square, ta_square_error; for the
 * root r, (x - r*r) / (s + r), where x - r*r is exact (x - p by Sterbenz's
 * lemma, p the rounded r*r, less ta_square_error).  A parameter that
 * nothing reaches has g = v = 0: +0 both, no call. */
static inline double pow_sq(double x)
{
    const double two = ta_opaque(2.0);
    double p = x * x, e2;
    if (x == 0.0) return 0.0;            /* pow(±0, 2.0) is +0 (C99 F.9.4.4) */
    if (!(fabs(x) > 0x1p-64 && fabs(x) < 0x1p+64)) return pow(x, two);
    e2 = ta_binade(p);                   /* p's ulp: e2 * 2^-52 */
    if (fabs(ta_square_error(x, p)) <= (p == e2 ? 0.235 : 0.47) * 0x1p-52 * e2) return p;
    return pow(x, two);
}
static inline double pow_half(double x)
{
    const double half = ta_opaque(0.5);
    double r, p, b;
    if (x == 0.0) return 0.0;            /* pow(±0, 0.5) is +0 (C99 F.9.4.4) */
    if (!(x > 0x1p-128 && x < 0x1p+128)) return pow(x, half);
    r = sqrt(x);
    p = r * r;
    b = ta_binade(r);                    /* r's ulp: b * 2^-52; |s - r| = |x - r*r| / (s + r) */
    if (r != b && fabs((x - p) - ta_square_error(r, p)) <= 0.94 * r * (b * 0x1p-52)) return r;
    return pow(x, half);
}
/* d(x^y)/dx = y x^(y-1), written as micrograd does: (y * x**(y-1)).  The
 * commonest powers skip the call to pow, which took a third of the README
 * expression's backward: for x**2 that is pow(x, 1.0), which is x exactly
 * for every x (±0, ±inf and nan included: a result within an ulp of an
 * exact, representable x is x); for x**3, pow(x, 2.0), pow_sq's.  For
 * y = 0, x**0 is the constant 1: its derivative is 0 everywhere, also at
 * x = 0 where 0 * 0**-1 would be nan (micrograd raises ZeroDivisionError
 * there; PyTorch gives 0). */
static inline double dpow_dx(double x, double y)
{
    double e = y - 1.0;
    if (y == 0.0) return 0.0;
    return y * (e == 1.0 ? x : e == 2.0 ? pow_sq(x) : pow(x, e));
}
/* d(x^y)/dy = x^y ln x; 0 where x == 0 and y >= 0 (the limit), as PyTorch */
static inline double dpow_dy(double x, double y, double r)
{
    if (x == 0.0 && y >= 0.0) return 0.0;
    return r * log(x);
}

/* A partial times a tangent, for every forward-mode sweep (jvp, Wengert
 * tangents, the tangent passes of hvp/hessian): an exact zero factor makes
 * the product 0, even against an infinite or nan one (a "strong zero").
 * A zero tangent means the input does not move along the seeds: a branch
 * they do not reach (sqrt(z) at z = 0, x**n with x < 0 where d/dn is
 * undefined) must add nothing, not 0 * inf = nan.  A zero partial means
 * the output does not move with that input (a linear op's second partial,
 * a flat relu): an infinite tangent there adds nothing either.  The
 * reverse sweep keeps plain IEEE products, as micrograd. */
static inline double ta_tmul(double partial, double tangent)
{
    return (tangent == 0.0 || partial == 0.0) ? 0.0 : partial * tangent;
}

/* Each op's four rules, side by side, one block per row of ops.def (a row
 * without one does not compile: higher.c, ta_rule_table):
 *
 * fwd_NAME, d_NAME: above.
 *
 * RD_NAME: which of its arguments d_NAME reads, TA_RD_X | TA_RD_Y |
 * TA_RD_R (x; y, a BIN op's other operand; r, its own result; a CST op's
 * constant is always at hand).  A Program keeps a value row for the reverse
 * sweep only where some rule reads it (code.c) and hands the others' rules
 * a nan (batch.c), so a bit missing here makes gradients nan in the tests.
 *
 * e_NAME(E, a): its derivative written as ops, for create_graph
 * (reverse-over-reverse), in the term algebra of terms.h.  It reads the
 * op's adjoint term a->g, its inputs a->x, a->y (node refs; a->c is the
 * constant of CST ops), its own node a->r and their values xv, yv (= c for
 * CST ops), rv, and sets a->dx, a->dy to the contributions g * dr/dx,
 * g * dr/dy, recorded as new tape nodes.  Because the partials are built
 * from ops of this same table, their derivatives are correct to any order
 * by induction.  Kinks (RELU, ABS, MAX, MIN): the first derivative is the
 * one backward() uses (relu'(0) = 0, abs'(0) = 0, a tie splits g/2, g/2)
 * and is piecewise constant, so every higher derivative is 0, at the kink
 * too.  Where a partial cannot be written as ops at this point (x**y or c/x
 * style factors that would divide by zero, log of x <= 0: sqrt at 0, 0**c
 * with c < 1), it falls back to the numeric partial as a constant factor:
 * the first derivative equals backward()'s (inf or nan there) and its own
 * derivative is taken as 0.
 *
 * d2_NAME(x, y, r, &xx, &xy, &yy): second partials for forward-over-reverse
 * (hvp, hessian): d2r/dx2, d2r/dxdy, d2r/dy2 (y = c for CST ops: only xx).
 * They agree with e_NAME, fallbacks included: where e_NAME falls back to a
 * constant partial, the second partial is 0. */
#define TA_RD_X 1u
#define TA_RD_Y 2u
#define TA_RD_R 4u
/* TA_RD_STOP: its partials are zero by definition (DETACH): no reverse step
 * reads anything for it or gives its inputs anything (not even 0 * g, which
 * an infinite adjoint would make nan); a Program gives it no adjoint. */
#define TA_RD_STOP 8u
#define E_(NAME) static inline void e_##NAME(hi_em *E, hi_arg *a)
#define D2_(NAME) static inline void d2_##NAME(double x, double y, double r, double *xx, double *xy, double *yy)
#define D2_NONE(NAME) D2_(NAME) { UNUSED(x); UNUSED(y); UNUSED(r); *xx = *xy = *yy = 0.0; }

static inline int fwd_LEAF(double x, double y, double *r) { UNUSED(y); *r = x; return TA_OK; }
static inline void d_LEAF(double x, double y, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(y); UNUSED(r); *dx = 0; *dy = 0; }
#define RD_LEAF 0
E_(LEAF) { UNUSED(E); UNUSED(a); }
D2_NONE(LEAF)
#define fwd_DEAD fwd_LEAF
#define d_DEAD d_LEAF
#define RD_DEAD RD_LEAF
E_(DEAD) { UNUSED(E); UNUSED(a); }
D2_NONE(DEAD)

static inline int fwd_ADD(double x, double y, double *r) { *r = x + y; return TA_OK; }
static inline void d_ADD(double x, double y, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(y); UNUSED(r); *dx = 1.0; *dy = 1.0; }
#define RD_ADD 0
E_(ADD)  { UNUSED(E); a->dx = a->g; a->dy = a->g; }
D2_NONE(ADD)

static inline int fwd_SUB(double x, double y, double *r) { *r = x - y; return TA_OK; }
static inline void d_SUB(double x, double y, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(y); UNUSED(r); *dx = 1.0; *dy = -1.0; }
#define RD_SUB 0
E_(SUB)  { a->dx = a->g; a->dy = hi_mulc(E, a->g, -1.0); }
D2_NONE(SUB)

static inline int fwd_MUL(double x, double y, double *r) { *r = x * y; return TA_OK; }
static inline void d_MUL(double x, double y, double r, double *dx, double *dy)
{ UNUSED(r); *dx = y; *dy = x; }
#define RD_MUL (TA_RD_X | TA_RD_Y)
E_(MUL)  { a->dx = hi_scale(E, a->g, a->y); a->dy = hi_scale(E, a->g, a->x); }
D2_(MUL)  { UNUSED(x); UNUSED(y); UNUSED(r); *xx = 0.0; *xy = 1.0; *yy = 0.0; }

static inline int fwd_DIV(double x, double y, double *r)
{ if (y == 0.0) return TA_EZERODIV; *r = x / y; return TA_OK; }
static inline void d_DIV(double x, double y, double r, double *dx, double *dy)
{ UNUSED(x); *dx = 1.0 / y; *dy = -r / y; }
#define RD_DIV (TA_RD_Y | TA_RD_R)
/* x/y: dx = g/y, dy = -(g/y) r */
E_(DIV)  { a->dx = hi_div(E, a->g, a->y); a->dy = hi_mulc(E, hi_scale(E, a->dx, a->r), -1.0); }
/* x/y: xy = -1/y^2, yy = 2r/y^2 */
D2_(DIV)  { UNUSED(x); *xx = 0.0; *xy = -1.0 / (y * y); *yy = 2.0 * r / (y * y); }

static inline int fwd_POW(double x, double y, double *r) { return py_pow(x, y, r); }
static inline void d_POW(double x, double y, double r, double *dx, double *dy)
{ *dx = dpow_dx(x, y); *dy = dpow_dy(x, y, r); }
#define RD_POW (TA_RD_X | TA_RD_Y | TA_RD_R)
/* x**y: dx = g y x**(y-1); dy = g r ln x (x > 0; else the numeric constant).
 * At x < 0 and y = 0, x**(y-1) is recorded as x**-1: as a POW node its
 * partial in y is nan, and the adjoint y = 0 would carry 0 * nan into
 * d2/dxdy, which is 1/x there (d2_POW) */
E_(POW)
{
    uint32_t p1 = (a->xv < 0.0 && a->yv == 0.0) ? NC(POWC, a->x, -1.0)
                                               : N2(POW, a->x, NC(ADDC, a->y, -1.0));
    a->dx = hi_scale(E, hi_scale(E, a->g, a->y), p1);
    if (a->xv > 0.0) a->dy = hi_scale(E, a->g, N2(MUL, a->r, N1(LOG, a->x)));
    else a->dy = hi_mulc(E, a->g, dpow_dy(a->xv, a->yv, a->rv));
}
/* x**y: xx = y(y-1)x^(y-2); xy = x^(y-1) + y d(x^(y-1))/dy; yy = r ln^2 x (x > 0).
 * xy at y = 0 is x^-1, for x < 0 too: the factor y is exactly 0, as in
 * dpow_dx (x**0 is the constant 1), so the term with d(x^(y-1))/dy, nan at
 * x < 0, adds nothing.  The value is no convention: every smooth g with
 * g(x, n) = x**n on the integers, |x|^y h(y), has d2g/dxdy = 1/x at y = 0
 * (only d/dy itself depends on h, hence nan).  It was 0 * nan = nan, so
 * the Hessian's (x, y) entry was nan where hvp along a v that keeps y fixed
 * (v_a = v_b in x ** (a - b)) gives 0, and H v != hvp(v). */
D2_(POW)
{
    double p1;
    if (x == 0.0 && y - 1.0 < 0.0) { *xx = *xy = *yy = 0.0; return; }   /* e_POW's fallback */
    p1 = pow(x, y - 1.0);
    *xx = y * dpow_dx(x, y - 1.0);
    *xy = y == 0.0 ? p1 : p1 + y * dpow_dy(x, y - 1.0, p1);
    *yy = x > 0.0 ? r * log(x) * log(x) : 0.0;
}

static inline int fwd_ADDC(double x, double c, double *r) { *r = x + c; return TA_OK; }
static inline void d_ADDC(double x, double c, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(c); UNUSED(r); *dx = 1.0; *dy = 0; }
#define RD_ADDC 0
E_(ADDC)  { UNUSED(E); a->dx = a->g; }
D2_NONE(ADDC)

static inline int fwd_RSUBC(double x, double c, double *r) { *r = c - x; return TA_OK; }
static inline void d_RSUBC(double x, double c, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(c); UNUSED(r); *dx = -1.0; *dy = 0; }
#define RD_RSUBC 0
E_(RSUBC) { a->dx = hi_mulc(E, a->g, -1.0); }
D2_NONE(RSUBC)

static inline int fwd_MULC(double x, double c, double *r) { *r = x * c; return TA_OK; }
static inline void d_MULC(double x, double c, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(r); *dx = c; *dy = 0; }
#define RD_MULC 0
E_(MULC)  { a->dx = hi_mulc(E, a->g, a->c); }
D2_NONE(MULC)

/* Recorded only where 1/c is not a normal float (c subnormal, |c| > ~4.5e307,
 * inf, nan): elsewhere x / c is MULC by 1/c, micrograd's x * c**-1 */
static inline int fwd_DIVC(double x, double c, double *r)
{ if (c == 0.0) return TA_EZERODIV; *r = x / c; return TA_OK; }
static inline void d_DIVC(double x, double c, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(r); *dx = 1.0 / c; *dy = 0; }
#define RD_DIVC 0
E_(DIVC)  { a->dx = hi_mulc(E, a->g, 1.0 / a->c); }
D2_NONE(DIVC)

static inline int fwd_RDIVC(double x, double c, double *r)
{ if (x == 0.0) return TA_EZERODIV; *r = c / x; return TA_OK; }
static inline void d_RDIVC(double x, double c, double r, double *dx, double *dy)
{ UNUSED(c); *dx = -r / x; *dy = 0; }
#define RD_RDIVC (TA_RD_X | TA_RD_R)
/* c/x: dx = -(g r)/x */
E_(RDIVC) { a->dx = hi_mulc(E, hi_div(E, hi_scale(E, a->g, a->r), a->x), -1.0); }
D2_(RDIVC) { UNUSED(y); *xx = 2.0 * r / (x * x); *xy = *yy = 0.0; }

static inline int fwd_POWC(double x, double c, double *r) { return py_pow(x, c, r); }
static inline void d_POWC(double x, double c, double r, double *dx, double *dy)
{ UNUSED(r); *dx = dpow_dx(x, c); *dy = 0; }
#define RD_POWC (TA_RD_X)
/* x**c: dx = g (c x**(c-1)); c = 0 and c = 1 need no node */
E_(POWC)
{
    if (a->c == 1.0) a->dx = a->g;
    else if (a->c == 0.0) a->dx = hi_mulc(E, a->g, dpow_dx(a->xv, 0.0));
    else a->dx = hi_scale(E, a->g, NC(MULC, NC(POWC, a->x, a->c - 1.0), a->c));
}
D2_(POWC)
{
    UNUSED(r);
    *xy = *yy = 0.0;
    if (y == 0.0 || y == 1.0 || (x == 0.0 && y - 1.0 < 0.0)) *xx = 0.0;
    else *xx = y * (y - 1.0) * pow(x, y - 2.0);
}

static inline int fwd_RPOWC(double x, double c, double *r) { return py_pow(c, x, r); }
static inline void d_RPOWC(double x, double c, double r, double *dx, double *dy)
{ *dx = dpow_dy(c, x, r); *dy = 0; }
#define RD_RPOWC (TA_RD_X | TA_RD_R)
/* c**x: dx = g r ln c (c > 0; else the numeric constant) */
E_(RPOWC)
{
    if (a->c > 0.0) a->dx = hi_scale(E, a->g, NC(MULC, a->r, log(a->c)));
    else a->dx = hi_mulc(E, a->g, dpow_dy(a->c, a->xv, a->rv));
}
D2_(RPOWC) { UNUSED(x); *xx = y > 0.0 ? r * log(y) * log(y) : 0.0; *xy = *yy = 0.0; }

/* micrograd: 0 if x < 0 else x; so relu(nan) = nan and relu(-0.0) = -0.0 */
static inline int fwd_RELU(double x, double y, double *r)
{ UNUSED(y); *r = x < 0.0 ? 0.0 : x; return TA_OK; }
static inline void d_RELU(double x, double y, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(y); *dx = r > 0.0 ? 1.0 : 0.0; *dy = 0; }
#define RD_RELU (TA_RD_R)
E_(RELU)  { UNUSED(E); a->dx = a->rv > 0.0 ? a->g : hi_zero; }
D2_NONE(RELU)

static inline int fwd_TANH(double x, double y, double *r)
{ UNUSED(y); *r = tanh(x); return TA_OK; }
static inline void d_TANH(double x, double y, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(y); *dx = 1.0 - r * r; *dy = 0; }
#define RD_TANH (TA_RD_R)
/* dx = g (1 - r r) */
E_(TANH)  { a->dx = hi_scale(E, a->g, NC(RSUBC, N2(MUL, a->r, a->r), 1.0)); }
D2_(TANH)  { UNUSED(x); UNUSED(y); *xx = -2.0 * r * (1.0 - r * r); *xy = *yy = 0.0; }

static inline int fwd_EXP(double x, double y, double *r)
{ UNUSED(y); *r = exp(x); return (FIN(x) && isinf(*r)) ? TA_ERANGE : TA_OK; }
static inline void d_EXP(double x, double y, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(y); *dx = r; *dy = 0; }
#define RD_EXP (TA_RD_R)
E_(EXP)   { a->dx = hi_scale(E, a->g, a->r); }
D2_(EXP)   { UNUSED(x); UNUSED(y); *xx = r; *xy = *yy = 0.0; }

static inline int fwd_LOG(double x, double y, double *r)
{ UNUSED(y); if (x <= 0.0) return TA_EDOMAIN; *r = log(x); return TA_OK; }
static inline void d_LOG(double x, double y, double r, double *dx, double *dy)
{ UNUSED(y); UNUSED(r); *dx = 1.0 / x; *dy = 0; }
#define RD_LOG (TA_RD_X)
E_(LOG)   { a->dx = hi_div(E, a->g, a->x); }
D2_(LOG)   { UNUSED(y); UNUSED(r); *xx = -1.0 / (x * x); *xy = *yy = 0.0; }

static inline int fwd_LOG1P(double x, double y, double *r)
{ UNUSED(y); if (x <= -1.0) return TA_EDOMAIN; *r = log1p(x); return TA_OK; }
static inline void d_LOG1P(double x, double y, double r, double *dx, double *dy)
{ UNUSED(y); UNUSED(r); *dx = 1.0 / (1.0 + x); *dy = 0; }
#define RD_LOG1P (TA_RD_X)
E_(LOG1P) { a->dx = hi_div(E, a->g, NC(ADDC, a->x, 1.0)); }
D2_(LOG1P) { UNUSED(y); UNUSED(r); *xx = -1.0 / ((1.0 + x) * (1.0 + x)); *xy = *yy = 0.0; }

/* evaluated so that neither branch can overflow */
static inline int fwd_SIGMOID(double x, double y, double *r)
{
    UNUSED(y);
    if (x >= 0.0) *r = 1.0 / (1.0 + exp(-x));
    else { double e = exp(x); *r = e / (1.0 + e); }
    return TA_OK;
}
static inline void d_SIGMOID(double x, double y, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(y); *dx = r * (1.0 - r); *dy = 0; }
#define RD_SIGMOID (TA_RD_R)
/* dx = g r (1 - r) */
E_(SIGMOID) { a->dx = hi_scale(E, a->g, N2(MUL, a->r, NC(RSUBC, a->r, 1.0))); }
D2_(SIGMOID) { UNUSED(x); UNUSED(y); *xx = r * (1.0 - r) * (1.0 - 2.0 * r); *xy = *yy = 0.0; }

static inline int fwd_SIN(double x, double y, double *r)
{ UNUSED(y); if (isinf(x)) return TA_EDOMAIN; *r = sin(x); return TA_OK; }
static inline void d_SIN(double x, double y, double r, double *dx, double *dy)
{ UNUSED(y); UNUSED(r); *dx = cos(x); *dy = 0; }
#define RD_SIN (TA_RD_X)
E_(SIN)   { a->dx = hi_scale(E, a->g, N1(COS, a->x)); }
D2_(SIN)   { UNUSED(x); UNUSED(y); *xx = -r; *xy = *yy = 0.0; }

static inline int fwd_COS(double x, double y, double *r)
{ UNUSED(y); if (isinf(x)) return TA_EDOMAIN; *r = cos(x); return TA_OK; }
static inline void d_COS(double x, double y, double r, double *dx, double *dy)
{ UNUSED(y); UNUSED(r); *dx = -sin(x); *dy = 0; }
#define RD_COS (TA_RD_X)
E_(COS)   { a->dx = hi_mulc(E, hi_scale(E, a->g, N1(SIN, a->x)), -1.0); }
D2_(COS)   { UNUSED(x); UNUSED(y); *xx = -r; *xy = *yy = 0.0; }

static inline int fwd_SQRT(double x, double y, double *r)
{ UNUSED(y); if (x < 0.0) return TA_EDOMAIN; *r = sqrt(x); return TA_OK; }
static inline void d_SQRT(double x, double y, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(y); *dx = 0.5 / r; *dy = 0; }
#define RD_SQRT (TA_RD_R)
/* dx = (g / r) 0.5 */
E_(SQRT)  { a->dx = hi_mulc(E, hi_div(E, a->g, a->r), 0.5); }
/* sqrt: xx = -1/(4 r^3); 0 at r = 0 (e_SQRT's fallback) */
D2_(SQRT)  { UNUSED(x); UNUSED(y); *xx = r == 0.0 ? 0.0 : -0.25 / (r * r * r); *xy = *yy = 0.0; }

static inline int fwd_ABS(double x, double y, double *r)
{ UNUSED(y); *r = fabs(x); return TA_OK; }
static inline void d_ABS(double x, double y, double r, double *dx, double *dy)
{ UNUSED(y); UNUSED(r); *dx = x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0); *dy = 0; }
#define RD_ABS (TA_RD_X)
E_(ABS)
{
    UNUSED(E);
    a->dx = a->xv > 0.0 ? a->g : (a->xv < 0.0 ? hi_mulc(E, a->g, -1.0) : hi_zero);
}
D2_NONE(ABS)

/* Python's max(x, y) returns x unless y > x; nan follows that rule too */
static inline int fwd_MAX(double x, double y, double *r)
{ *r = (y > x) ? y : x; return TA_OK; }
static inline void d_MAX(double x, double y, double r, double *dx, double *dy)
{ UNUSED(r); if (x == y) { *dx = *dy = 0.5; } else if (y > x) { *dx = 0; *dy = 1.0; } else { *dx = 1.0; *dy = 0; } }
#define RD_MAX (TA_RD_X | TA_RD_Y)
E_(MAX)
{
    if (a->xv == a->yv) { a->dx = a->dy = hi_mulc(E, a->g, 0.5); }
    else if (a->yv > a->xv) a->dy = a->g;
    else a->dx = a->g;
}
D2_NONE(MAX)

static inline int fwd_MIN(double x, double y, double *r)
{ *r = (y < x) ? y : x; return TA_OK; }
static inline void d_MIN(double x, double y, double r, double *dx, double *dy)
{ UNUSED(r); if (x == y) { *dx = *dy = 0.5; } else if (y < x) { *dx = 0; *dy = 1.0; } else { *dx = 1.0; *dy = 0; } }
#define RD_MIN (TA_RD_X | TA_RD_Y)
E_(MIN)
{
    if (a->xv == a->yv) { a->dx = a->dy = hi_mulc(E, a->g, 0.5); }
    else if (a->yv < a->xv) a->dy = a->g;
    else a->dx = a->g;
}
D2_NONE(MIN)

/* A custom node's value comes from outside: replay cannot recompute it
 * (ta_plain refuses such graphs first); its partials live in custom.c. */
static inline int fwd_DETACH(double x, double y, double *r) { UNUSED(y); *r = x; return TA_OK; }
static inline void d_DETACH(double x, double y, double r, double *dx, double *dy)
{ UNUSED(x); UNUSED(y); UNUSED(r); *dx = 0.0; *dy = 0.0; }
#define RD_DETACH TA_RD_STOP
E_(DETACH) { UNUSED(E); UNUSED(a); }
D2_NONE(DETACH)

static inline int fwd_CUSTOM(double x, double y, double *r) { UNUSED(x); UNUSED(y); UNUSED(r); return TA_ECUSTOM; }
#define d_CUSTOM d_LEAF
#define RD_CUSTOM RD_LEAF
E_(CUSTOM) { UNUSED(E); UNUSED(a); }   /* never reached: ta_plain refuses first */
D2_NONE(CUSTOM)

/* tapead.take: the candidate the index picks (ta_take_index), with the
 * partial 1 to it and nothing to the index; its inputs live in custom.c's
 * side table, and each sweep that runs it has its own case (a partial per
 * input, not a pair).  The rules here are never reached through the table:
 * ta_plain keeps take out of the sweeps that have no case for it. */
static inline int fwd_TAKE(double x, double y, double *r) { UNUSED(x); UNUSED(y); UNUSED(r); return TA_ETAKE; }
#define d_TAKE d_LEAF
#define RD_TAKE TA_RD_X
E_(TAKE) { UNUSED(E); UNUSED(a); }
D2_NONE(TAKE)
#undef E_
#undef D2_
#undef D2_NONE

/* The candidate tapead.take's index value x picks among m, as Python
 * indexes a list of m (x whole, -m <= x < m, a negative x counting from
 * the end): TA_OK with *k set, or TA_EINDEX (a nan, an inf, a fraction,
 * out of range).  Every replay of take decides with this one rule. */
static inline int ta_take_index(double x, uint32_t m, uint32_t *k)
{
    double fm = (double)m;
    if (!(x >= -fm && x < fm) || x != floor(x)) return TA_EINDEX;
    *k = (uint32_t)(int64_t)(x < 0.0 ? x + fm : x);
    return TA_OK;
}

static inline int ta_forward(int op, double x, double y, double *r)
{
    switch (op) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: return fwd_##NAME(x, y, r);
#include "ops.def"
#undef TA_OP
    }
    return TA_EBADOP;
}

static inline void ta_partials(int op, double x, double y, double r, double *dx, double *dy)
{
    switch (op) {
#define TA_OP(NAME, KIND, SYM, ...) case TA_##NAME: d_##NAME(x, y, r, dx, dy); return;
#include "ops.def"
#undef TA_OP
    }
    *dx = 0; *dy = 0;
}

/* The partials of node i of segment s alone, for the reverse sweep's hot
 * loop.  Each case loads only the values its d_ rule reads: the loads sit
 * inside the case as arguments of a static inline function, so the
 * compiler drops the ones the rule ignores (ADD and SUB read no value at
 * all, MULC only its constant).  Same table, same rules as ta_partials. */
#define TA_XV_LEAF 0.0
#define TA_XV_UN   TA_SEGOF(T, s->x[i])->val[TA_OFF(s->x[i])]
#define TA_XV_BIN  TA_XV_UN
#define TA_XV_CST  TA_XV_UN
#define TA_XV_NARY 0.0
#define TA_YV_LEAF 0.0
#define TA_YV_UN   0.0
#define TA_YV_BIN  TA_SEGOF(T, s->aux[i].y)->val[TA_OFF(s->aux[i].y)]
#define TA_YV_CST  s->aux[i].c
#define TA_YV_NARY 0.0
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))     /* the sweep's hot loop needs it inline (it has two callers now) */
#endif
static inline void ta_partials_at(const ta_tape *T, const ta_seg *s, uint32_t i, int op,
                                  double *dx, double *dy)
{
    switch (op) {
#define TA_OP(NAME, KIND, SYM, ...) \
    case TA_##NAME: d_##NAME(TA_XV_##KIND, TA_YV_##KIND, s->val[i], dx, dy); return;
#include "ops.def"
#undef TA_OP
    }
    *dx = 0; *dy = 0;
}
#undef TA_XV_LEAF
#undef TA_XV_UN
#undef TA_XV_BIN
#undef TA_XV_CST
#undef TA_XV_NARY
#undef TA_YV_LEAF
#undef TA_YV_UN
#undef TA_YV_BIN
#undef TA_YV_CST
#undef TA_YV_NARY

/* Everything a sweep needs about node i of segment s: its op and kind, its
 * inputs (refs and values; yv is the constant of a CST op, 0 otherwise) and
 * the local partials dr/dx, dr/dy at the recorded values.  Every sweep
 * (reverse, tangent, recording, forward-over-reverse) starts from this. */
typedef struct { int op, kind; uint32_t xr, yr; double xv, yv, dx, dy; } ta_local;

static inline void ta_local_at(const ta_tape *T, const ta_seg *s, uint32_t i, ta_local *L)
{
    L->op = s->op[i] & TA_OPMASK;
    L->kind = ta_kinds[L->op];
    L->xr = L->yr = 0;
    L->xv = L->yv = L->dx = L->dy = 0.0;
    if (L->kind == TA_K_LEAF || L->kind == TA_K_NARY) return;   /* NARY: ta_plain keeps it out */
    L->xr = s->x[i];
    L->xv = TA_SEGOF(T, L->xr)->val[TA_OFF(L->xr)];
    if (L->kind == TA_K_BIN) {
        L->yr = s->aux[i].y;
        L->yv = TA_SEGOF(T, L->yr)->val[TA_OFF(L->yr)];
    } else if (L->kind == TA_K_CST) {
        L->yv = s->aux[i].c;
    }
    ta_partials(L->op, L->xv, L->yv, s->val[i], &L->dx, &L->dy);
}

#endif
