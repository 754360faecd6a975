/* replay.h: what the replay files share.
 *
 *   guard.c      comparisons of Values recorded as guards (bounded: see there)
 *   recompute.c  v.recompute(): plans over the tape, in place
 *   program.c    compiled Programs: copied out of the tape, or loaded (pickle)
 *   code.c       a Program's execution code: uniform values, fused dots, slots
 *   batch.c      one chunk of rows through the code, forward and reverse
 *   parallel.c   a batch split into blocks over threads, reduced in block order
 */
#ifndef TAPEAD_REPLAY_H
#define TAPEAD_REPLAY_H
#include "tapead.h"
#include "ops.h"
#include "subtape.h"

/* ------------------------------------------------------------ guards */
typedef struct {
    uint32_t a, b;      /* node refs (tape) or indices (program); b unused if cst */
    double   c;         /* constant operand when cst                           */
    uint8_t  kind, cst, out;
    uint8_t  bind;      /* (the tape's list) it binds the last ta_sub_replay's sub-tape */
} ta_guard;

struct ta_guards {
    ta_guard *g;  uint32_t n, cap;
    uint32_t *hash; uint32_t hcap;  /* index + 1 of each guard by its key (0: empty) */
    uint64_t  ver;                  /* bumped whenever a guard is added or changed */
    int64_t   failed;               /* guard index of the last TA_EGUARD       */
    double    fx, fy;               /* values that flipped it                  */
    /* guard.c: guards lost to the collector since ta_guard_clear */
    uint64_t  lost;                 /* how many                                */
    uint32_t *reach; uint32_t nreach, capreach;   /* the live nodes they read  */
    int       reach_all;            /* the reach is every node (it could not grow) */
    struct ta_guards *apart;        /* the set ta_guard_apart put aside, under this one */
};

/* A guard's comparison: kind 0 <, 1 <=, 2 >, 3 >= (cdef.h: ta_cmp2). */
static inline int ta_compare(int kind, double x, double y)
{
    switch (kind) {
    case 0: return x < y;
    case 1: return x <= y;
    case 2: return x > y;
    default: return x >= y;
    }
}
/* T's guards, created on first use (NULL: out of memory); they are a
 * layer's state attached to the tape (tapead.h: ta_attach). */
extern const struct ta_layer ta_guard_layer;
struct ta_guards *ta_guards_of(ta_tape *T);
/* T's guards, or NULL if none were ever recorded: creates nothing. */
static inline struct ta_guards *ta_guards_if_any(const ta_tape *T)
{ return (struct ta_guards *)ta_attached(T, &ta_guard_layer); }

/* ---------------------------------------------------------- programs */
#define TA_BLOCK 1024u              /* rows per block: gradients are summed per block */
#define TA_NWS  8                   /* workspaces a Program keeps for reuse */

typedef struct ta_code ta_code;

struct ta_prog {
    /* the flat program: what compile copies from the tape and pickle carries */
    uint32_t  n, nin, nout, nwrt, npar, ng;
    uint8_t  *op;
    uint32_t *a, *b;        /* input indices (b for BIN), < the node's own; TAKE:
                               a its index, b where its list starts in lst     */
    double   *c;            /* constants (CST)                                 */
    uint32_t *lst, nlst;    /* operand lists: a TAKE node's m, then its m candidates */
    uint32_t *in, *out, *wrt;   /* node per column; TA_NONE: not reached       */
    uint32_t *par;          /* the parameter leaves                            */
    double   *pv;           /* their values, when the program holds them       */
    int64_t  *parid;        /* their tape ids (compiled in-process), or NULL   */
    int       live;         /* read parameters from the tape (parid) at a run  */
    ta_guard *g;            /* a, b are node indices here                      */
    ta_code  *code;         /* derived by ta_code_new (code.c)                 */
    ta_kernel_fn kernel;    /* generated code for its blocks, or NULL (cdef.h) */
    ta_uniform_fn ukernel;  /* generated code for its uniform values, or NULL  */
    uint64_t  nscratch;     /* doubles of scratch the kernel needs             */
    void     *ws[TA_NWS];   /* idle workspaces (parallel.c)                    */
};

/* -------------------------------------------------------------- code
 * What code.c derives from the flat form, for batch.c to run.  A node is
 * uniform if no input column reaches it (the parameters, and everything
 * computed from parameters and constants alone): it is computed once per
 * call, as a scalar.  The other nodes are row nodes: one value per row,
 * kept in a row slot of the chunk (ch rows).  A dot is a run of
 * ADD(acc, MUL(p, q)) nodes whose products and partial sums nothing else
 * uses (micrograd's neuron, sum(w*x, b)), run as one instruction with the
 * same arithmetic in the same order (fwd_MUL, fwd_ADD), so the partial
 * sums never touch memory. */
#define TA_IDOT 0xFFu               /* ta_ins.op of a dot                      */

typedef struct {
    uint32_t k, x, y;               /* result and operand nodes (a dot: x is the start) */
    uint32_t t0, nt;                /* a dot: its terms, [t0, t0 + nt)         */
    uint8_t  op;                    /* op code, or TA_IDOT                     */
    uint8_t  rel;                   /* after it, k's adjoint row is zeroed, its slot reused */
    uint8_t  rd;                    /* the value rows its reverse step reads: TA_RD_X (x; a
                                       dot: its row factors), TA_RD_Y, TA_RD_R (ops.h) */
    /* its rows, looked up once (code.c: ta_ins_rows): */
    uint32_t vk, vx, vy;            /* value rows of k, x, y: a row slot, or TA_UNI | the
                                       broadcast row of a uniform operand (a dot: vx its
                                       start as ta_code.tv gives a term's operand; not
                                       binary: vy its constant's place in ta_code.ic) */
    uint32_t gk, ax, ay;            /* adjoint of k (its row slot, TA_NONE: none); where x's
                                       and y's go: a row slot, TA_UNI | the uniform
                                       adjoint's index, or TA_NONE (a dot: ax its start's) */
} ta_ins;
#define TA_UNI 0x80000000u

/* (code.c, batch.c) node k's value row as ta_ins.vx says it, and where its
 * adjoint goes as ta_ins.ax says it (uni, loc, bloc, dloc, dslot as below) */
#define TA_VAL_ROW(C, k) ((C)->uni[k] ? TA_UNI | (C)->bloc[k] : (C)->loc[k])
#define TA_ADJ_ROW(C, k) ((C)->dloc[k] == TA_NONE ? TA_NONE : \
                          (C)->uni[k] ? TA_UNI | (C)->dloc[k] : (C)->dslot[k])

struct ta_code {
    uint32_t  ch;                   /* rows per chunk: a power of two dividing TA_BLOCK;
                                       a run summing gradients over rows runs
                                       chunks of ch (its sums' order)       */
    uint32_t  wch;                  /* the same (>= ch), for runs without such sums, and summed
                                       runs without uniform adjoints (batch.c still sums
                                       each wrt input per ch rows) */
    uint8_t  *uni, *need;           /* per node: uniform; a wrt leaf is behind it */
    uint32_t *loc;                  /* value: row slot, or index in the scalars U; TA_NONE inside a dot */
    uint32_t *bloc;                 /* uniform operand of a row op: its broadcast row */
    uint32_t *dloc;                 /* adjoint, if needed: row slot (row nodes), index of
                                       the uniform adjoint (uniform nodes)    */
    uint32_t  nv, nu, nb, ndr, ndu; /* value rows, scalars, broadcast rows, row adjoints,
                                       uniform adjoints                        */
    uint32_t *uops, nuops;          /* uniform non-leaf nodes, in order        */
    ta_ins   *ins;  uint32_t nins;  /* row instructions, in order              */
    uint32_t *tp, *tq;              /* dot terms: the operands of each product */
    uint32_t *tv;                   /* per term, for one row (batch.c): the values of p and q
                                       (a row slot, or TA_UNI | the index in U) and where
                                       their adjoints go (TA_ADJ_ROW), 4 words a term */
    uint8_t  *tf;                   /* per term t: TA_UR4 | TA_RV4 for terms t..t+3 */
    double   *ic;                   /* the row instructions' constants in their order, then
                                       0.0: ta_ins.vy of an instruction that is not binary
                                       indexes it (batch.c: TA_CST) */
    uint32_t *bnode;                /* the node of each broadcast row          */
    uint32_t *dslot, nds;           /* row nodes' adjoint rows, reused (code.c:
                                       ta_adjoint_slots), and how many      */
};
#define TA_UR4 1u   /* terms t..t+3 are all (uniform p, row q): one pass forward  */
#define TA_RV4 2u   /* ... and every p needs its adjoint, the q are distinct, and
                       all or none of the q need one: one pass back, summed     */

/* The rows a run's chunks take: ch where gradients summed over rows meet
 * uniform adjoints (ch sets their sums' order), wch otherwise. */
static inline uint32_t ta_run_chunk(const ta_code *C, int summed)
{
    return summed && C->ndu ? C->ch : C->wch;
}

/* code.c: derive / drop P->code.  TA_OK or TA_ENOMEM. */
int  ta_code_new(ta_prog *P);
void ta_code_free(ta_code *C);

/* ------------------------------------------------------------- running
 * A workspace: what one thread needs to run chunks of a Program.  Rows
 * are max(ch, wch) doubles each. */
typedef struct {
    double *V;      /* nv value rows                                         */
    double *D;      /* nds row adjoints, then ndu uniform adjoints (per sample) */
    double *Bc;     /* nb broadcast rows of uniform values                   */
    double *T1, *T2;/* scratch rows                                          */
    double *A;      /* ndu uniform adjoints summed over a block              */
    double *Gb;     /* nwrt: a block's sums for wrt columns that are inputs  */
    double *U;      /* nu uniform values (the calling thread's workspace's)  */
    double *K;  uint64_t kcap;   /* a kernel's scratch (parallel.c), kcap doubles */
    uint32_t ch;    /* this run's rows per chunk (ch or wch), the rows' stride */
} ta_ws;

/* batch.c.  The uniform values for one call into U (params: the parameter
 * values), their guards checked: TA_OK, or a status with *f filled (row 0). */
int  ta_uniform_forward(const ta_prog *P, double *U, const double *params, ta_fail_t *f);
/* Rows [r0, r1) of R (r1 - r0 <= TA_BLOCK), with W->U set: outputs into
 * R->Y, gradients into R->G (per sample) or into parts (nwrt sums of the
 * block).  TA_OK, or a status with *f filled (its row absolute). */
int  ta_block(const ta_prog *P, ta_ws *W, const ta_run_t *R, uint64_t r0, uint64_t r1,
              double *parts, ta_fail_t *f);
/* parallel.c: drop the idle workspaces */
void ta_ws_drop(ta_prog *P);

#endif
