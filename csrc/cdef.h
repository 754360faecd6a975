/* cdef.h: the C API that Python sees, read by build_ext.py as the cffi cdef
 * and included by the C sources, so the two cannot drift apart.
 *
 * Node ids are int64: (tape tag << 32) | (segment slot << TA_SHIFT) | offset.
 * Functions that create a node return its id (>= 0), or a negative status:
 * -1..-15 are errors (TA_E*), and id <= TA_NEWSEG means "this node opened a
 * segment that has no Python owner yet, or the calling thread is not the
 * fast-path owner": the id is TA_NEWSEG - code, and Python must make sure
 * it holds the segment's token (ta_ack) before returning a Value. */

typedef struct {
    uint64_t nodes;      /* nodes held in the arena (live or awaiting reclaim) */
    uint64_t capacity;   /* node slots allocated (segments * TA_SEG)           */
    uint64_t bytes;      /* bytes held by segments and tables                  */
    uint64_t segments;
    uint64_t collections;
    uint64_t limit;      /* node cap, 0 = none                                 */
    uint64_t peak_nodes;
} ta_stats_t;

/* status codes */
#define TA_OK        0
#define TA_EZERODIV -1    /* ZeroDivisionError                        */
#define TA_EDOMAIN  -2    /* ValueError: math domain error             */
#define TA_ERANGE   -3    /* OverflowError: result out of range        */
#define TA_ENOMEM   -4    /* MemoryError: allocation failed            */
#define TA_ELIMIT   -5    /* MemoryError: node limit reached           */
#define TA_EBADID   -6    /* id names no node of this tape             */
#define TA_ETHREAD  -7    /* id belongs to another thread's tape       */
#define TA_EBADOP   -8    /* op code unknown or of the wrong kind      */
#define TA_NEWSEG   -16
#define TA_SHIFT    11

int         ta_nops(void);
const char *ta_op_name(int op);        /* symbol, e.g. "+" */
const char *ta_op_ident(int op);       /* enum name, e.g. "ADD" */
int         ta_op_kind(int op);        /* 0 leaf, 1 unary, 2 binary, 3 const */

int64_t ta_leaf(double x);
int64_t ta_op1(int op, int64_t x);
int64_t ta_op2(int op, int64_t x, int64_t y);
int64_t ta_opc(int op, int64_t x, double c);

double  ta_val(int64_t id);            /* NaN if id is invalid (ta_check says why) */
double  ta_adj(int64_t id);
int     ta_set_val(int64_t id, double x);
int     ta_set_adj(int64_t id, double x);
int     ta_check(int64_t id);          /* TA_OK or why id is unusable here          */
int     ta_node(int64_t id, int *op, int64_t *x, int64_t *y, double *c);

int     ta_backward(int64_t root);     /* seed root with 1, one reverse sweep       */

/* Python made a token for segment `slot`; current = it is the token new
 * nodes in the current segment will share.  Returns 1 if this thread may
 * take the fast path, 0 if not, or a negative status. */
int     ta_ack(uint32_t slot, int current);
int     ta_release(uint32_t slot, int current);   /* that token died       */
void   *ta_tape_current(void);
int64_t ta_tape_tag(void);
void    ta_tape_free(void *tape);      /* after its thread and all tokens are gone   */
int     ta_collect(void);
int     ta_stats(ta_stats_t *out);
int     ta_set_limit(uint64_t max_nodes);
int     ta_last_error(int *op, double *x, double *y);

/* higher.c: higher-order derivatives.  None of these touches any node's
 * adjoint (.grad): they return their results.  ids must be this thread's. */
int ta_grad(const int64_t *outs, const double *w, int nout,
            const int64_t *ins, int nin, double *g);        /* g[j] = d(sum w_k outs_k)/d ins_j; w NULL = ones */
int ta_grad_graph(const int64_t *outs, const double *w, int nout,
                  const int64_t *ins, int nin, int64_t *gids); /* same, recorded: gids[j] = node ids (no owner yet) */
int ta_hvp(int64_t out, const int64_t *ins, int nin, const double *v, double *hv); /* hv = H v */
int ta_hessian(int64_t out, const int64_t *ins, int nin, double *H);  /* H: nin x nin, row-major */
int ta_jacobian(const int64_t *outs, int nout, const int64_t *ins, int nin, double *J); /* nout x nin */
