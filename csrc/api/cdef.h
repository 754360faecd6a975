/* cdef.h: the C API that Python sees, read by build_ext.py as the cffi cdef
 * and included by the C sources, so the two cannot drift apart.
 *
 * Node ids are int64: (tape tag << 32) | (segment slot << TA_SHIFT) | offset.
 * A segment's key is id >> TA_SHIFT.  Functions that create a node return
 * its id (>= 0) or a negative status.  The recording calls of the cffi
 * front (ta_leaf, ta_op1, ta_op2, ta_opc) take the key of the segment the
 * caller holds (its current token, see ta_cur_hold): the node is recorded
 * only if it lands in that segment, else nothing happens and they return
 * TA_NEEDSEG (or TA_NEEDNG for the no_grad arena), so a node never exists
 * unheld.  Calls that return new nodes in bulk hold each returned id once,
 * in a held list (below). */

typedef struct ta_seg ta_seg;          /* a tape segment (opaque) */

typedef struct {
    uint64_t nodes;      /* nodes held in the arena (live or awaiting reclaim) */
    uint64_t capacity;   /* node slots allocated (segments * TA_SEG)           */
    uint64_t bytes;      /* bytes held by segments and tables                  */
    uint64_t segments;
    uint64_t collections;
    uint64_t limit;      /* node cap, 0 = none                                 */
    uint64_t peak_nodes;
} ta_stats_t;

/* status codes: one row each in status.def (build_ext.py writes them out
 * as #defines for cffi's cdef, which has no macros with arguments) */
/* <status> */
#define TA_ST(NAME, VALUE, EXC, MSG) enum { TA_##NAME = VALUE };
#include "status.def"
#undef TA_ST
/* </status> */
#define TA_SHIFT    11

/* Row k of the status table (status.def); TA_EARG past its end. */
int         ta_status_row(int k, int *st, const char **name, const char **exc, const char **msg);
int         ta_nops(void);
const char *ta_op_name(int op);        /* symbol, e.g. "+" */
const char *ta_op_ident(int op);       /* enum name, e.g. "ADD" */
int         ta_op_kind(int op);        /* 0 leaf, 1 unary, 2 binary, 3 const, 4 n-ary */

int64_t ta_leaf(double x, int64_t key);
int64_t ta_op1(int op, int64_t x, int64_t key);
int64_t ta_op2(int op, int64_t x, int64_t y, int64_t key);
int64_t ta_opc(int op, int64_t x, double c, int64_t key);

double  ta_val(int64_t id);            /* NaN if id is invalid (ta_check says why) */
double  ta_adj(int64_t id);
int     ta_set_val(int64_t id, double x);
int     ta_set_adj(int64_t id, double x);
int     ta_check(int64_t id);          /* TA_OK or why id is unusable here          */
int     ta_node(int64_t id, int *op, int64_t *x, int64_t *y, double *c);
/* The stamp of a node of this thread (tape or no_grad arena): > 0, the same
 * for as long as the node exists and never given to another node of that
 * tape, though its id is reused once its segment is reclaimed; or a
 * negative status (TA_ETHREAD, TA_EBADID, ...). */
int64_t ta_node_stamp(int64_t id);
/* The rebind count: how many times a weakly referenced Value has been
 * moved to another node (v.__init__(x) on a Value made already; the cffi
 * front reports its own with ta_rebound).  Python that keeps ids of Values
 * across user code holds their nodes (so an id never names another node)
 * and keeps a weak reference to each Value, so that when this count has
 * moved it takes the ids again from the Values (access.c). */
uint64_t ta_rebinds(void);
void     ta_rebound(void);

int     ta_backward(int64_t root);     /* seed root with 1, one reverse sweep */
/* v._backward(): node id's own local step once, plain accumulation into
 * its inputs' adjoints (TA_EPYRULE for a node with a Python rule: Python
 * runs that itself). */
int     ta_step(int64_t id);
/* v._local_grads: node id's local partial derivatives, one per input in
 * the order of its inputs (ta_node's x then y; a custom node's ta_custom_info
 * inputs), into d[0..min(n, cap)); returns n (0 for a leaf), TA_EPYRULE for
 * a node with a Python rule (it has none), or another negative status. */
int     ta_local_grads(int64_t id, double *d, uint32_t cap);

/* ---- custom nodes (custom.c) ---- */
/* A node of value `value` whose inputs are the n nodes ins (no_grad values
 * among them are constants and dropped).  partials: its n local partials
 * (tapead.precomputed: backward adds p_k * g to input k); or NULL: a node
 * with a Python rule (Value(data, _children, _op)), which backward()
 * calls through ta_custom_rule with its key (ta_custom_key).  name:
 * its op name, namelen bytes of UTF-8, kept with the node (and freed with
 * it: no table of names outlives the nodes).  Recorded only into the segment of key seg, as
 * ta_op1 (TA_NEEDSEG or TA_NEEDNG, nothing recorded, if it would land
 * elsewhere).  Returns its id (the caller's token holds it) or a negative
 * status. */
int64_t ta_custom_rec(const int64_t *ins, uint32_t n, double value, const double *partials,
                      const char *name, uint32_t namelen, int64_t seg);
/* The key of custom node id's Python rule (0: a node of partials), or
 * TA_ENOTCUSTOM if id is no custom node, or another negative status. */
int64_t ta_custom_key(int64_t id);
/* A custom node's inputs (ins[0..min(n, cap)), ids), name and key; *n
 * gets the count of inputs, *namelen the length of its name, of which the
 * first min(namelen, namecap) bytes go to name (copied: a call that needs
 * more asks again).  TA_ENOTCUSTOM if id is not a custom node. */
int     ta_custom_info(int64_t id, uint32_t *n, int64_t *ins, uint32_t cap, char *name,
                       uint32_t namecap, uint32_t *namelen, int64_t *key);
int64_t ta_custom_failed(void);        /* the custom node of the last TA_ECUSTOM */
int     ta_custom_plain(const int64_t *roots, size_t n);   /* ta_plain, for Python */

/* ---- tapead.take (take.c) ---- */
/* ncols take nodes, column j's the value of cands[k * ncols + j], where k
 * is the value of node idx (whole, -m <= k < m, counting from the end
 * below 0: Python's list indexing); cands are m rows of ncols node ids.
 * The nodes' holds go into the held list h (ncols).  All or nothing:
 * TA_EINDEX for a bad index (ta_last_error: op TAKE, the index's value
 * and m), TA_ENOGRAD where the index or a candidate is a no_grad value,
 * TA_EMODEPATH under no_grad() (Python indexes the list itself). */
int     ta_take(int64_t idx, const int64_t *cands, uint32_t m, uint32_t ncols, int64_t *h);
/* The candidate index value x picks among m (the rule every take node
 * replays with), or TA_EINDEX (ta_last_error as ta_take's): what take
 * does with an index that is a constant, or under no_grad(). */
int64_t ta_take_pick(double x, uint32_t m);

/* Holds (see tapead.h).  Python's share of a hold always sits in memory
 * that an ffi.gc object owns before the hold is taken, and it moves only
 * inside one C call, so an exception between two bytecodes (a Ctrl-C)
 * can neither leak a hold nor drop one twice.
 *
 * A box is a ta_seg *[1], zeroed, owned through ffi.gc(box, ta_unhold).
 * ta_cur_hold: hold the segment the next node goes to (arena 0: the tape,
 * for leaves and ops; 1: the no_grad arena, for ops under no_grad),
 * opening one if the current one has no room for any one record (an op
 * with two inputs promoted from the no_grad arena: 3 nodes), into the
 * empty box; gives its key.  ta_unhold: drop the hold in a box, if any, from any thread (the
 * last hold on an exited thread's tape frees the tape).  ta_orphaned:
 * whether the box holds a segment of a thread that has ended.
 *
 * A held list is what a bulk call hands to Python: int64_t h[1 + 2*cap],
 * zeroed, h[0] = cap, owned through ffi.gc(h, ta_held_drop).  h[1+k] is
 * the k-th node id; h[1+cap+k] the address of the segment that id's hold
 * is on, or 0 once the hold has moved on.  A bulk call first drops what
 * its list still holds (a list may be reused).  ta_held_move: the k-th
 * hold into an empty box (how the cffi front adopts them; the CPython
 * front's adopt moves them into Values); ta_held_drop: drop the holds
 * still in h, from any thread; ta_held_ids: one more hold for each of n
 * existing ids of this thread, into h (all checked first: a status, and
 * nothing held, if any is bad). */
int     ta_cur_hold(int arena, ta_seg **box, int64_t *key);
void    ta_unhold(ta_seg **box);
int     ta_orphaned(ta_seg *const *box);
int     ta_held_move(int64_t *h, size_t k, ta_seg **box);
void    ta_held_drop(int64_t *h);
int     ta_held_ids(const int64_t *ids, size_t n, int64_t *h);
/* val (what 0) or adj (1) of node `off` of a held segment, from any thread:
 * what pickling a Value needs, wherever the pickler runs. */
double  ta_peek(ta_seg *seg, uint32_t off, int what);
size_t  ta_seg_bytes(void);             /* the memory one segment takes */
int64_t ta_tapes_alive(void);          /* tapes (and no_grad arenas) not yet freed   */
/* The tag of this thread's tape (made if need be), or TA_ENOMEM: what
 * Python keys what it keeps per tape by (tapead/_c: Tape), the OS thread
 * being what a tape is per, which threading.local need not be (gevent
 * makes it per greenlet). */
int64_t ta_tape_tag(void);
/* module.c: put the CPython front (module tapead._cpython) into sys.modules;
 * TA_OK, or a status if this build has none (PyPy) or it failed. */
int     ta_cpython_install(void);
int     ta_collect(void);
int     ta_stats(ta_stats_t *out);
int     ta_set_limit(uint64_t max_nodes);
int     ta_last_error(int *op, double *x, double *y);
int     ta_nograd(int delta);          /* enter (+1) / leave (-1) no_grad; returns depth */
int     ta_anomaly(int delta);         /* enter (+1) / leave (-1) detect_anomaly         */
/* A no_grad() / detect_anomaly() block's hold on its mode: the mode is on
 * while any armed token of it lives.  enter arms tok (mode 1 no_grad, 2
 * detect_anomaly) and returns the new depth, or a status (TA_EARG: already
 * armed, bad mode); leave disarms it and counts the mode down, once, and
 * is the token's ffi.gc destructor, so a block that never got to its
 * __exit__ (KeyboardInterrupt) ends when its token is freed.  A token freed
 * in a thread other than its tape's is only disarmed. */
typedef struct { uint64_t tag; int mode; } ta_mode_tok;
int     ta_mode_enter(ta_mode_tok *tok, int mode);
void    ta_mode_leave(ta_mode_tok *tok);
uint64_t ta_nograd_nodes(void);        /* leaves held by the no_grad arena              */
int     ta_validate(void);             /* TA_OK, or TA_ECORRUPT if an invariant fails   */
int     ta_fail_alloc(int64_t n);      /* tests: make the n-th allocation from now fail,
                                          once (-1 disarms); returns 1 if one was armed  */

/* n new leaves holding x[0..n); their ids in the held list h.
 * Returns n or a negative status (the node limit is checked first; if
 * memory runs out midway nothing is added). */
int64_t ta_leaves(const double *x, size_t n, int64_t *h);

/* optim.c: bulk access and optimizer steps; every id is checked before
 * anything is written.  what: 0 = data (val), 1 = grad (adj); ta_scatter
 * also 2 = added to grad. */
int ta_fill_adj(const int64_t *ids, size_t n, double x);
int ta_gather(const int64_t *ids, size_t n, int what, double *out);
int ta_scatter(const int64_t *ids, size_t n, int what, const double *in);
int ta_sgd_step(const int64_t *ids, size_t n, double lr, double momentum, double wd,
                double *buf, int first);
/* sq_mul: g**2 as g*g (PyPy's float ** 2), else as libm's pow (CPython's) */
int ta_adam_step(const int64_t *ids, size_t n, double lr, double b1, double b2, double eps,
                 double wd, int64_t t, double *m, double *v, int sq_mul);

/* ---- forward mode and the Wengert-list export (tangent.c) ---- */

/* Directional derivative of root along `tangents` seeded on `inputs` (any
 * nodes; seeds add, inputs not behind root contribute 0): one ascending
 * tangent sweep.  Writes *out; returns TA_OK or a status.  Changes no
 * node's value or adjoint. */
int     ta_jvp(int64_t root, int nin, const int64_t *inputs, const double *tangents,
               double *out);

/* Rows of the sub-tape behind a root, in tape order (the root is last).
 * x, y: argument rows, -1 if none; c: the constant of a CST op, else 0;
 * id: node id.  tan (optional, may be NULL): forward tangents seeded as in
 * ta_jvp; adj (optional): adjoints of root from a separate reverse sweep
 * (no node's grad changes). */
typedef struct {
    int     *op;
    int64_t *x;
    int64_t *y;
    double  *c;
    double  *val;
    int64_t *id;
    double  *tan;
    double  *adj;
} ta_rows_t;

/* Returns the number of rows n; fills *out only if out != NULL and
 * n <= cap (call once with out = NULL to size the arrays).  Negative
 * status on error. */
int64_t ta_trace(int64_t root, int64_t cap, int nin, const int64_t *inputs,
                 const double *tangents, ta_rows_t *out);

/* ---- replay: recompute, guards (guard.c, recompute.c), programs (program.c ...) ---- */

/* Comparison kinds: 0 <, 1 <=, 2 >, 3 >= */
int     ta_cmp2(int kind, int64_t x, int64_t y);   /* 0/1 outcome, records a guard; <0 status */
int     ta_cmpc(int kind, int64_t x, double c);
int64_t ta_guard_count(void);
int     ta_guard_clear(void);
/* Put this thread's guards aside under a new empty set / drop that set and
 * put them back (TA_EARG: none aside): what ta_guard_apart has put aside,
 * ta_guard_rejoin restores as it was, collections in between included. */
int     ta_guard_apart(void);
int     ta_guard_rejoin(void);
/* Describe guard number g (from the last TA_EGUARD): its comparison, the
 * recorded outcome, and the values that flipped it. */
int     ta_guard_info(int64_t g, int *kind, int *outcome, double *xv, double *yv);
int64_t ta_guard_failed(void);                     /* guard index of the last TA_EGUARD */
/* Comparisons the collector dropped (their nodes freed) since the last
 * ta_guard_clear: a replay one of them would bind gives TA_ELOST. */
int64_t ta_guard_lost(void);

/* Re-evaluate every node root depends on (and the nodes of guards recorded
 * up to root) from the leaves' current values, in place.  On any error the
 * values are as before the call. */
int     ta_recompute(int64_t root);

typedef struct ta_prog ta_prog;
/* Copy the subgraph reaching outs into a self-contained program.  ins are
 * leaves fed from X's columns; the other leaves are its parameters, read
 * from the tape at each run (the caller keeps them alive) until values
 * are set for them (ta_prog_set_params); wrt are leaves to differentiate. */
int     ta_prog_new(const int64_t *outs, uint32_t nout, const int64_t *ins, uint32_t nin,
                    const int64_t *wrt, uint32_t nwrt, ta_prog **out);
void    ta_prog_free(ta_prog *P);
/* Python's programs: ta_prog_new/ta_prog_load write into an empty box
 * (ta_prog *[1]) that Python owns through ffi.gc(box, ta_prog_drop)
 * before the call, so no exception can come between a program's making
 * and its owner.  ta_prog_drop frees the program in a box, if any. */
void    ta_prog_drop(ta_prog **box);
#define TA_PS_NODES   0
#define TA_PS_PARAMS  1
#define TA_PS_GUARDS  2
#define TA_PS_INPUTS  3
#define TA_PS_OUTPUTS 4
#define TA_PS_WRT     5
#define TA_PS_LIVE    6     /* 1: parameters are read from the tape at each run */
#define TA_PS_BLOCK   7     /* rows per block: gradients are summed per block, then over blocks */
#define TA_PS_KERNEL  8     /* 1: blocks run a generated kernel (ta_prog_set_kernel) */
#define TA_PS_CHUNK   9     /* rows the interpreter runs together in a call for summed gradients */
int64_t ta_prog_size(ta_prog *P, int what);        /* TA_PS_*; TA_EARG for another what */
int     ta_prog_params(ta_prog *P, int64_t *ids);  /* the tape leaves it reads (npar ids) */
/* The parameter values a run uses by default (read from this thread's tape
 * if live); set: hold these values from now on; follow: read the tape
 * again.  TA_EARG if npar is not the program's. */
int     ta_prog_param_values(ta_prog *P, double *out, uint32_t npar);
int     ta_prog_set_params(ta_prog *P, const double *v, uint32_t npar);
int     ta_prog_follow(ta_prog *P);

/* One run over B rows.  Every count is the caller's idea of the array it
 * hands over and is checked against the program's (TA_EARG if one
 * differs).  X: B x nin, row-major.  Y: B x nout.  seedmode 0: no
 * gradients; 1: seed (nout) for every row; 2: seed (B x nout).  Per sample,
 * G gets B x nwrt; summed, parts gets the sums of each block of
 * TA_PS_BLOCK rows (nblocks x nwrt) and G (nwrt) is added those, in block
 * order, so the result does not depend on threads.  params: npar values,
 * or NULL for the program's own.  threads: at most this many (1 = the
 * calling thread only). */
typedef struct {
    const double *X;  uint64_t B;  uint32_t nin;
    double       *Y;  uint32_t nout;
    const double *seed;  int seedmode;
    double       *G;  uint32_t nwrt;  int per_sample;
    double       *parts;  uint64_t nblocks;
    const double *params;  uint32_t npar;
    int           threads;
} ta_run_t;
/* Why a run failed: the first failing row; for an op error its op and
 * inputs; for a flipped guard its index (else -1), kind, recorded outcome
 * and the values compared (x, y). */
typedef struct {
    uint64_t row;
    int      op;  double x, y;
    int64_t  guard;  int kind, outcome;
} ta_fail_t;
int     ta_prog_run(ta_prog *P, const ta_run_t *R, ta_fail_t *f);
/* n runs at once, over at most `threads` threads taking them in order:
 * st[i] = ta_prog_run(P[i], &R[i], &f[i]) with R[i].threads taken as 1
 * (the same bits as that call alone); a run without params gets its
 * Program's own, read first on the calling thread.  TA_OK once every run
 * has its status; else (TA_EARG, TA_ENOMEM, a parameter that cannot be
 * read) none ran. */
int     ta_prog_run_many(ta_prog *const *P, const ta_run_t *R, ta_fail_t *f, int *st,
                         uint32_t n, int threads);

/* The flat form, for pickling: sizes, then per node op, a, b, c (a leaf's
 * c: its recorded value), the node of each input / output / wrt column
 * (0xFFFFFFFF: not reached) and of each parameter, per guard its two
 * nodes (gab, 2 per guard), constant, and kind | cst << 2 | outcome << 3,
 * and the operand lists (lst, nlst entries): a TAKE node's a is its
 * index's node and its b where its list starts, its number of candidates
 * m, then their m nodes.
 * flat with f->op NULL fills the sizes only; else copies into f's arrays
 * (sized as the sizes say).  load checks everything (TA_EARG if anything
 * is out of place) and makes a program holding params. */
typedef struct {
    uint32_t  n, nin, nout, nwrt, npar, ng;
    uint8_t  *op;  uint32_t *a, *b;  double *c;
    uint32_t *in, *out, *wrt, *par;
    uint32_t *gab;  double *gc;  uint8_t *gkind;
    uint32_t  nlst;  uint32_t *lst;
} ta_flat_t;
int     ta_prog_flat(ta_prog *P, ta_flat_t *f);
int     ta_prog_load(const ta_flat_t *f, const double *params, ta_prog **out);

/* A Program's execution code (code.c, replay.h: struct ta_code), for the
 * code generator (tapead/codegen/): per node uniform / needs an adjoint /
 * value slot / adjoint slot (0xFFFFFFFF: none; a uniform node's slots index
 * the uniform values and the uniform adjoints), the uniform non-leaf nodes
 * in order, the row instructions in order (result, operands, op code or 255
 * for a dot: start x, terms t0 .. t0 + nt - 1) and the dot terms (p, q, and
 * the shape flags of replay.h: TA_UR4, TA_RV4).  With v->uni NULL, the
 * sizes only; else copies into v's arrays, sized as the sizes say. */
typedef struct {
    uint32_t  n, nins, nterms, nuops, nu, ndu, ch;
    uint8_t  *uni, *need;  uint32_t *loc, *dloc;
    uint32_t *uops;
    uint32_t *ik, *ix, *iy, *it0, *int_;  uint8_t *iop;
    uint32_t *tp, *tq;  uint8_t *tf;
} ta_codeview_t;
int     ta_prog_code(ta_prog *P, ta_codeview_t *v);

/* A kernel generated from a Program's code (tapead/codegen/): rows
 * [r0, r1) of one block of R (r1 - r0 <= TA_PS_BLOCK), with U the uniform
 * values (batch.c: ta_uniform_forward); per sample it writes R->Y and R->G,
 * summed R->Y and parts (the block's nwrt sums); scratch: the kernel's own,
 * nscratch doubles.  The same bits as the interpreter (batch.c: ta_block).
 * TA_OK, or nonzero when an op or a guard failed in some row: the block is
 * then run again by the interpreter, which names the first failure. */
typedef int (*ta_kernel_fn)(const ta_run_t *R, const double *U, uint64_t r0, uint64_t r1,
                            double *parts, double *scratch);
/* The uniform values generated from the same code: U as batch.c's
 * ta_uniform_forward computes it (every uniform node's value, the same
 * bits) from the parameters' values.  TA_OK, or nonzero when an op or a
 * guard failed: ta_uniform_forward then runs instead and names it. */
typedef int (*ta_uniform_fn)(double *U, const double *params);
/* Run P's blocks with fn and its uniform values with ufn from now on (NULL:
 * the interpreter again; ufn may be NULL alone); TA_EARG if abi is not
 * TA_KERNEL_ABI.  Set them before P runs anywhere. */
#define TA_KERNEL_ABI 2
int     ta_prog_set_kernel(ta_prog *P, void *fn, void *ufn, uint64_t nscratch, int abi);

/* higher.c: higher-order derivatives.  None of these touches any node's
 * adjoint (.grad): they return their results.  ids must be this thread's. */
int ta_grad(const int64_t *outs, const double *w, int nout,
            const int64_t *ins, int nin, double *g);        /* g[j] = d(sum w_k outs_k)/d ins_j; w NULL = ones */
int ta_grad_graph(const int64_t *outs, const double *w, int nout,
                  const int64_t *ins, int nin, int64_t *h); /* same, recorded: the held list h gets the gradients' node ids */
int ta_hvp(int64_t out, const int64_t *ins, int nin, const double *v, double *hv); /* hv = H v */
int ta_hessian(int64_t out, const int64_t *ins, int nin, double *H);  /* H: nin x nin, row-major */
int ta_jacobian(const int64_t *outs, int nout, const int64_t *ins, int nin, double *J); /* nout x nin */

/* nn.c: one layer of micrograd's MLP in one call: for each neuron j,
 * b[j] + w[j,0]*x0 + ... (left to right), then relu if asked; x_i is node
 * xid[i], or the constant xc[i] where xid[i] < 0 and xc is not NULL (with
 * xc NULL every xid must be a node).  Records the same nodes as micrograd's
 * Python loop, in the same order; the held list h gets the neurons' ids.
 * TA_EMODEPATH inside no_grad / detect_anomaly (use the op-by-op path); TA_EARG
 * for a NULL array or nout * nin over 2**32 - 1; TA_EBADID for a bad id. */
int ta_layer(const int64_t *w, const int64_t *b, uint32_t nout, uint32_t nin,
             const int64_t *xid, const double *xc, int relu, int64_t *h);
/* nn.c: tapead.dot / tapead.linear in one call: row j is what
 * sum(w * x for w, x in zip(W[j], x)) records from term from[j] on (the
 * first with a node), c0[j] being the sum of the plain-number terms before
 * it (csrc/fused/nn.h).  w: nout x nin, x: nin; an id < 0 is the constant wc /
 * xc at its index.  The held list h gets the rows' ids.  TA_EMODEPATH
 * inside no_grad / detect_anomaly; TA_ENOGRAD for a no_grad Value (both:
 * the op-by-op path); TA_EARG for a NULL array, a count over 2**32 - 1 or a
 * row whose term from[j] has no node; TA_EBADID / TA_ETHREAD for a bad id. */
int ta_dots(const int64_t *w, const double *wc, uint32_t nout, uint32_t nin,
            const int64_t *x, const double *xc, const double *c0, const uint32_t *from, int64_t *h);
