/* parallel.c: one run of a Program, its rows split over threads.
 *
 * Rows are grouped in blocks of TA_BLOCK; each thread runs a contiguous
 * range of blocks (batch.c: ta_block), with the GIL released (cffi
 * releases it around every call).  Gradients summed over rows are summed
 * per block, then the block sums are added in block order by the calling
 * thread: the result is the same bits for any number of threads.  A
 * failing block stops the threads that run later blocks; the earliest
 * failure (the first failing row) is the one reported.
 *
 * A run's workspaces (the chunk's rows of values and adjoints) are taken
 * by its calling thread, before any of its threads starts (so an injected
 * allocation failure is deterministic), and kept on the Program for the
 * next call; two calls at once (Dask runs tasks in threads) each take
 * their own.  (ta_prog_run_many's runs are each such a call, on the
 * thread that runs it.)  Without POSIX threads everything runs on the
 * calling thread.
 *
 * A Program with a generated kernel (cdef.h: ta_kernel_fn) runs each block
 * with it instead of the interpreter (batch.c); a block where it reports
 * a failure runs again through the interpreter, which names the row.
 *
 * Several runs at once (ta_prog_run_many: the Programs of tapead.jit's
 * shapes) are each one ta_prog_run on one thread; the threads take them in
 * the order given, so each run's results are the bits it gives alone. */
#include <stdlib.h>
#include <string.h>
#include "replay.h"

#if defined(__unix__) || defined(__APPLE__)
#  include <pthread.h>
#  define TA_THREADS 1
#else
#  define TA_THREADS 0
#endif
#if defined(__GNUC__) || defined(__clang__)
#  define TA_XCHG(p, v)      __atomic_exchange_n((p), (v), __ATOMIC_ACQ_REL)
#  define TA_CAS(p, old, v)  __atomic_compare_exchange_n((p), (old), (v), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#  define TA_LOAD(p)         __atomic_load_n((p), __ATOMIC_ACQUIRE)
#  define TA_FADD(p, v)      __atomic_fetch_add((p), (v), __ATOMIC_ACQ_REL)
#else                        /* no atomics: no reuse, and one thread */
#  undef  TA_THREADS
#  define TA_THREADS 0
#endif
#define TA_MAXTHREADS 64      /* more cores than this: 64 threads */

/* -------------------------------------------------------- workspaces */

static void ta_ws_free(ta_ws *W)
{
    if (!W) return;
    free(W->V); free(W->D); free(W->Bc); free(W->T1); free(W->T2);
    free(W->A); free(W->Gb); free(W->U); free(W->K); free(W);
}

static ta_ws *ta_ws_new(const ta_prog *P)
{
    const ta_code *C = P->code;
    size_t ch = C->wch > C->ch ? C->wch : C->ch;
    ta_ws *W = (ta_ws *)ta_calloc(1, sizeof *W);
    if (!W) return NULL;
    W->V = (double *)ta_malloc(((size_t)C->nv + 1) * ch * sizeof(double));
    W->D = (double *)ta_malloc(((size_t)C->nds + C->ndu + 1) * ch * sizeof(double));
    W->Bc = (double *)ta_malloc(((size_t)C->nb + 1) * ch * sizeof(double));
    W->T1 = (double *)ta_malloc(ch * sizeof(double));
    W->T2 = (double *)ta_malloc(ch * sizeof(double));
    W->A = (double *)ta_malloc(((size_t)C->ndu + 1) * sizeof(double));
    W->Gb = (double *)ta_malloc(((size_t)P->nwrt + 1) * sizeof(double));
    W->U = (double *)ta_malloc(((size_t)C->nu + 1) * sizeof(double));
    if (!W->V || !W->D || !W->Bc || !W->T1 || !W->T2 || !W->A || !W->Gb || !W->U) {
        ta_ws_free(W);
        return NULL;
    }
    return W;
}

/* W's kernel scratch at least n doubles (kept for the next run).  TA_OK or
 * TA_ENOMEM (W unchanged). */
static int ta_ws_scratch(ta_ws *W, uint64_t n)
{
    double *k;
    if (n <= W->kcap) return TA_OK;
    if (n > SIZE_MAX / sizeof(double) || !(k = (double *)ta_malloc((size_t)n * sizeof(double))))
        return TA_ENOMEM;
    free(W->K);
    W->K = k; W->kcap = n;
    return TA_OK;
}

static ta_ws *ta_ws_take(ta_prog *P)
{
#if defined(TA_XCHG)
    int k;
    for (k = 0; k < TA_NWS; k++) {
        ta_ws *W = (ta_ws *)TA_XCHG(&P->ws[k], NULL);
        if (W) return W;
    }
#endif
    return ta_ws_new(P);
}

static void ta_ws_give(ta_prog *P, ta_ws *W)
{
#if defined(TA_XCHG)
    int k;
    for (k = 0; k < TA_NWS; k++) {
        void *none = NULL;
        if (TA_CAS(&P->ws[k], &none, (void *)W)) return;
    }
#else
    (void)P;
#endif
    ta_ws_free(W);
}

void ta_ws_drop(ta_prog *P)
{
    int k;
    for (k = 0; k < TA_NWS; k++) { ta_ws_free((ta_ws *)P->ws[k]); P->ws[k] = NULL; }
}

/* ---------------------------------------------------------------- jobs */

typedef struct {
    const ta_prog *P;  const ta_run_t *R;
    ta_ws   *W;
    uint64_t b0, b1;          /* blocks [b0, b1)                       */
    uint64_t *stop;           /* the first failing block so far        */
    ta_kernel_fn kernel;      /* P's, read once per run, or NULL       */
    int       st;  ta_fail_t f;
} ta_job;

static void *ta_job_run(void *arg)
{
    ta_job *J = (ta_job *)arg;
    const ta_prog *P = J->P; const ta_code *C = P->code;
    uint64_t b, B = J->R->B;
    uint32_t j, s;
    /* summed gradients with uniform adjoints run chunks of ch: their sums'
     * order (batch.c sums wrt inputs per ch rows within a wider chunk) */
    J->W->ch = ta_run_chunk(C, J->R->seedmode && !J->R->per_sample);
    for (j = 0; j < C->nb; j++) {   /* this thread's broadcast rows */
        double u = J->W->U[C->loc[C->bnode[j]]], *r = J->W->Bc + (size_t)j * J->W->ch;
        for (s = 0; s < J->W->ch; s++) r[s] = u;
    }
    for (b = J->b0; b < J->b1; b++) {
        uint64_t r0 = b * TA_BLOCK, r1 = r0 + TA_BLOCK < B ? r0 + TA_BLOCK : B;
#if defined(TA_LOAD)
        if (b > TA_LOAD(J->stop)) break;        /* an earlier block failed */
#endif
        double *parts = J->R->parts ? J->R->parts + b * P->nwrt : NULL;
        /* a generated kernel runs the block; where it fails, the interpreter
         * runs it again and names the failure */
        J->st = J->kernel ? J->kernel(J->R, J->W->U, r0, r1, parts, J->W->K) : 1;
        if (J->st != TA_OK) J->st = ta_block(P, J->W, J->R, r0, r1, parts, &J->f);
        if (J->st != TA_OK) {
#if defined(TA_LOAD)
            uint64_t seen = TA_LOAD(J->stop);
            while (b < seen && !TA_CAS(J->stop, &seen, b)) {}
#endif
            break;
        }
    }
    return NULL;
}

/* ----------------------------------------------------------------- run */

static int ta_run_check(const ta_prog *P, const ta_run_t *R)
{
    uint64_t wide = P->nin > P->nout ? P->nin : P->nout;
    if (P->nwrt > wide) wide = P->nwrt;
    if (R->nin != P->nin || R->nout != P->nout || R->nwrt != P->nwrt) return TA_EARG;
    if (R->params && R->npar != P->npar) return TA_EARG;
    if (R->seedmode < 0 || R->seedmode > 2 || R->threads < 1) return TA_EARG;
    if (R->B > UINT64_MAX / 16u / (wide + 1u)) return TA_EARG;   /* B x columns x 8 fits */
    if (R->B == 0) return TA_OK;
    if ((P->nin && !R->X) || !R->Y) return TA_EARG;
    if (R->seedmode) {
        if (!R->seed || (P->nwrt && !R->G)) return TA_EARG;
        if (!R->per_sample && (!R->parts || R->nblocks != (R->B + TA_BLOCK - 1) / TA_BLOCK))
            return TA_EARG;
    }
    return TA_OK;
}

int ta_prog_run(ta_prog *P, const ta_run_t *R, ta_fail_t *f)
{
    ta_job jobs[TA_MAXTHREADS];
    uint64_t nblocks, stop = UINT64_MAX, b, j;
    double *pv = NULL;
    ta_kernel_fn kernel;
    uint64_t nscratch;
    int nt, t, st;
    if (!P || !R || !f) return TA_EARG;
    kernel = P->kernel; nscratch = P->nscratch;
    memset(f, 0, sizeof *f);
    f->guard = -1;
    if ((st = ta_run_check(P, R)) != TA_OK || R->B == 0) return st;
    nblocks = (R->B + TA_BLOCK - 1) / TA_BLOCK;
    nt = R->threads < TA_MAXTHREADS ? R->threads : TA_MAXTHREADS;
    if ((uint64_t)nt > nblocks) nt = (int)nblocks;
    if (!TA_THREADS) nt = 1;
    /* everything allocated here, before a thread starts */
    for (t = 0; t < nt; t++) {
        jobs[t].W = ta_ws_take(P);
        if (!jobs[t].W || ta_ws_scratch(jobs[t].W, kernel ? nscratch : 0) != TA_OK) {
            if (jobs[t].W) ta_ws_give(P, jobs[t].W);
            while (t-- > 0) ta_ws_give(P, jobs[t].W);
            return TA_ENOMEM;
        }
    }
    if (!R->params && P->npar) {
        if (!(pv = (double *)ta_malloc((size_t)P->npar * sizeof *pv))) st = TA_ENOMEM;
        else st = ta_prog_param_values(P, pv, P->npar);
    }
    if (st == TA_OK) {      /* generated, and where that fails the interpreter, which names it */
        const double *params = R->params ? R->params : pv;
        if (!P->ukernel || P->ukernel(jobs[0].W->U, params) != 0)
            st = ta_uniform_forward(P, jobs[0].W->U, params, f);
    }
    free(pv);
    if (st == TA_OK) {
#if TA_THREADS
        pthread_t tid[TA_MAXTHREADS];
        int started[TA_MAXTHREADS];
#endif
        for (t = 0; t < nt; t++) {
            ta_job *J = &jobs[t];
            J->P = P; J->R = R; J->stop = &stop; J->st = TA_OK; J->kernel = kernel;
            J->b0 = nblocks * (uint64_t)t / (uint64_t)nt;
            J->b1 = nblocks * (uint64_t)(t + 1) / (uint64_t)nt;
            memset(&J->f, 0, sizeof J->f); J->f.guard = -1;
            if (t) memcpy(J->W->U, jobs[0].W->U, (size_t)P->code->nu * sizeof(double));
        }
#if TA_THREADS
        for (t = 1; t < nt; t++)    /* a thread that cannot start runs here, below */
            started[t] = pthread_create(&tid[t], NULL, ta_job_run, &jobs[t]) == 0;
        ta_job_run(&jobs[0]);
        for (t = 1; t < nt; t++) {
            if (started[t]) pthread_join(tid[t], NULL);
            else ta_job_run(&jobs[t]);
        }
#else
        for (t = 0; t < nt; t++) ta_job_run(&jobs[t]);
#endif
        for (t = 0; t < nt; t++)    /* the earliest failure: jobs run blocks in order */
            if (jobs[t].st != TA_OK) { st = jobs[t].st; *f = jobs[t].f; break; }
    }
    for (t = 0; t < nt; t++) ta_ws_give(P, jobs[t].W);
    if (st != TA_OK || !R->seedmode || R->per_sample) return st;
    for (b = 0; b < nblocks; b++)    /* block sums, in block order */
        for (j = 0; j < P->nwrt; j++) R->G[j] += R->parts[b * P->nwrt + j];
    return TA_OK;
}

/* ----------------------------------------------------------- many runs */

typedef struct {
    ta_prog *const *P;  const ta_run_t *R;  ta_fail_t *f;  int *st;
    const double *const *pv;  /* run i's parameters where R[i] gives none */
    uint32_t n;  uint32_t *next;
} ta_many;

static void *ta_many_run(void *arg)
{
    ta_many *M = (ta_many *)arg;
    for (;;) {
        ta_run_t r;
#if defined(TA_FADD)
        uint32_t i = TA_FADD(M->next, 1u);
#else
        uint32_t i = (*M->next)++;
#endif
        if (i >= M->n) break;
        r = M->R[i];
        r.threads = 1;
        if (!r.params) { r.params = M->pv[i]; r.npar = M->P[i] ? M->P[i]->npar : 0; }
        M->st[i] = ta_prog_run(M->P[i], &r, &M->f[i]);
    }
    return NULL;
}

int ta_prog_run_many(ta_prog *const *P, const ta_run_t *R, ta_fail_t *f, int *st,
                     uint32_t n, int threads)
{
    const double **pv;
    uint32_t *read;     /* the runs whose parameters were read, one per Program */
    uint32_t i, j, nread = 0, next = 0;
    int nt, t, res = TA_OK;
    ta_many M;
    if (!P || !R || !f || !st || threads < 1) return TA_EARG;
    if (!n) return TA_OK;
    pv = (const double **)ta_calloc(n, sizeof *pv);
    read = (uint32_t *)ta_malloc((size_t)n * sizeof *read);
    if (!pv || !read) { free((void *)pv); free(read); return TA_ENOMEM; }
    /* parameters read from the tape here, on the thread whose tape holds
     * them: once a Program (its runs in this call see the same values) */
    for (i = 0; i < n && res == TA_OK; i++) {
        if (!P[i] || R[i].params || !P[i]->npar) continue;
        for (j = 0; j < nread && P[read[j]] != P[i]; j++) ;
        if (j < nread) { pv[i] = pv[read[j]]; continue; }
        if (!(pv[i] = (const double *)ta_malloc((size_t)P[i]->npar * sizeof(double)))) res = TA_ENOMEM;
        else res = ta_prog_param_values(P[i], (double *)pv[i], P[i]->npar);
        read[nread++] = i;
    }
    if (res == TA_OK) {
        M.P = P; M.R = R; M.f = f; M.st = st; M.pv = pv; M.n = n; M.next = &next;
        nt = threads < TA_MAXTHREADS ? threads : TA_MAXTHREADS;
        if ((uint32_t)nt > n) nt = (int)n;
        if (!TA_THREADS) nt = 1;
#if TA_THREADS
        {
            pthread_t tid[TA_MAXTHREADS];
            int started[TA_MAXTHREADS];
            for (t = 1; t < nt; t++) started[t] = pthread_create(&tid[t], NULL, ta_many_run, &M) == 0;
            ta_many_run(&M);          /* (a thread that cannot start leaves its runs to this one) */
            for (t = 1; t < nt; t++) if (started[t]) pthread_join(tid[t], NULL);
        }
#else
        (void)t;
        ta_many_run(&M);
#endif
    }
    for (j = 0; j < nread; j++) free((void *)pv[read[j]]);
    free((void *)pv);
    free(read);
    return res;
}
