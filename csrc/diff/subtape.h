/* subtape.h: the sub-tape behind some roots, flat (subtape.c), which the
 * sweeps over a graph's rows share: forward mode and the Wengert export
 * (tangent.c), grad, hvp, Hessians and Jacobians (higher.c), recompute
 * plans and Programs (replay.h).
 *
 * ta_sub_replay reads the guards that bind a replay (replay.h), the one
 * thing here a floor above decides. */
#ifndef TAPEAD_SUBTAPE_H
#define TAPEAD_SUBTAPE_H
#include "tapead.h"
#include "ops.h"

#define TA_NONE UINT32_MAX

/* A sub-tape, flat: the nodes behind some roots in tape order (rows
 * 0..n-1, every input row below its node's own).  From ta_sub_extract the
 * newest root is the last row; ta_sub_replay adds the nodes of the guards
 * that bind, which may come after it. */
typedef struct {
    ta_tape   *T;
    uint32_t   n;
    uint32_t   lowpos, hipos;   /* the segment positions it spans          */
    uint32_t   ng;              /* ta_sub_replay: how many guards bind it  */
    uint8_t   *op;              /* op codes, marks cleared                 */
    uint32_t  *a, *b;           /* input rows (0 where the op has none); a TAKE row:
                                   a its index's row, b where its list starts in lst */
    double    *c;               /* the constant of a CST op; a TAKE row: the candidate it
                                   took when recorded; else unset: ta_sub_c */
    uint32_t  *lst;             /* operand lists: at b of a TAKE row, m, then the rows of
                                   its m candidates (NULL: no TAKE row)    */
    size_t     nlst, caplst;
    double    *v;               /* recorded values                         */
    uint32_t  *ref;             /* the node on the tape (TA_SUB_REFS), else NULL */
    uint32_t **map;             /* by slot, for the segments lowpos..hipos:
                                   the row of each offset, TA_NONE if not
                                   in; NULL: none there (other slots unset) */
    void      *mem;             /* the one allocation behind all of these  */
    size_t     cap;             /* its size                                */
} ta_sub;

/* The most memory a tape keeps from one sub-tape for the next (so a loop
 * of grads or jvps on one graph reuses it: fresh pages from the system
 * cost a fault each); bigger ones are freed. */
#define TA_SUB_KEEP ((size_t)4 << 20)

/* ta_sub_extract's flags */
#define TA_SUB_REFS   2     /* fill ref[] (the other columns always are)        */

/* roots: nroots >= 1 ids, already resolved (ta_resolve).  TA_OK or
 * TA_ENOMEM (then S holds nothing); either way no mark is left.  Each
 * array has n + 1 slots; ta_sub_free releases them. */
int      ta_sub_extract(ta_tape *T, const int64_t *roots, uint32_t nroots, int flags, ta_sub *S);
/* The same for a replay (a Program with inputs ins, or a recompute: nins
 * 0), with refs: plus the nodes of the guards that bind it (subtape.c says
 * which), each guard's bind set and S->ng counted; TA_ECUSTOM
 * (ta_custom_blame) if one of those guards reads a custom node, TA_ETAKE
 * if one reads a take node and the replay has no case for it (take 0). */
int      ta_sub_replay(ta_tape *T, const int64_t *roots, uint32_t nroots, const int64_t *ins,
                       uint32_t nins, int take, ta_sub *S);
void     ta_sub_free(ta_sub *S);

/* Row k's constant: a CST op's, else 0. */
static inline double ta_sub_c(const ta_sub *S, uint32_t k)
{
    return ta_kinds[S->op[k]] == TA_K_CST ? S->c[k] : 0.0;
}

/* The row of a tape ref, or TA_NONE if it is not in S. */
static inline uint32_t ta_sub_row(const ta_sub *S, uint32_t ref)
{
    const ta_seg *s = TA_SEGOF(S->T, ref);
    const uint32_t *m;
    if (s->pos < S->lowpos || s->pos > S->hipos) return TA_NONE;
    m = S->map[ref >> TA_SHIFT];
    return m ? m[TA_OFF(ref)] : TA_NONE;
}

/* The local partials of row k at the recorded values (0 for a leaf),
 * from a sub-tape's columns (a sweep keeps them in locals: its stores
 * would otherwise make the compiler reload them from S after each one).
 * As ta_partials_at (ops.h) does on the tape, each case loads only the
 * values its d_ rule reads (ADD none, MULC only its constant). */
#define TA_RXV_LEAF 0.0
#define TA_RXV_UN   v[a[k]]
#define TA_RXV_BIN  TA_RXV_UN
#define TA_RXV_CST  TA_RXV_UN
#define TA_RXV_NARY 0.0
#define TA_RYV_LEAF 0.0
#define TA_RYV_UN   0.0
#define TA_RYV_BIN  v[b[k]]
#define TA_RYV_CST  c[k]
#define TA_RYV_NARY 0.0
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))     /* each sweep's hot loop needs it inline */
#endif
static inline void ta_row_partials(int op, const uint32_t *a, const uint32_t *b, const double *c,
                                   const double *v, uint32_t k, double *dx, double *dy)
{
    switch (op) {
#define TA_OP(NAME, KIND, SYM, ...) \
    case TA_##NAME: d_##NAME(TA_RXV_##KIND, TA_RYV_##KIND, v[k], dx, dy); return;
#include "ops.def"
#undef TA_OP
    }
    *dx = 0; *dy = 0;
}
#undef TA_RXV_LEAF
#undef TA_RXV_UN
#undef TA_RXV_BIN
#undef TA_RXV_CST
#undef TA_RXV_NARY
#undef TA_RYV_LEAF
#undef TA_RYV_UN
#undef TA_RYV_BIN
#undef TA_RYV_CST
#undef TA_RYV_NARY

/* The reverse sweep over S's rows, newest first: each row pushes its
 * adjoint times its local partials into its inputs' (adj: n, seeded by
 * the caller); a TAKE row gives its adjoint to the candidate it took.
 * px, py (or NULL): each row's partials (0 for a leaf, a TAKE row). */
void     ta_sub_reverse(const ta_sub *S, double *adj, double *px, double *py);

#endif
