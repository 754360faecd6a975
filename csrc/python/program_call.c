/* program_call.c: a Program's call on the CPython front, without
 * cffi in the way (tapead/_c/program.py: prog_run).  A small batch's call
 * was mostly Python: cffi's from_buffer for six pointers and a ta_run_t
 * filled from Python cost more than the C it ran on the demo's 100 rows.
 *
 * The program is reached through its box (Box, below), never through an
 * address handed in from Python: a box is made empty here, cffi writes the
 * new program into it (ta_prog_new or ta_prog_load, given the box's
 * address), and the box frees the program when it dies, as the cffi
 * front's box (ffi.gc(ta_prog *[1], ta_prog_drop)) does there.  So run()
 * only ever sees a program that is alive while its caller holds the box.
 *
 * Arrays come in by the buffer protocol and are checked here (C-contiguous,
 * float64, aligned, each as long as the counts given make it); the counts
 * themselves are checked against the program's by ta_prog_run (TA_EARG).
 * PyPy builds (TA_NO_CPYTHON) leave this out: there cffi's calls are the
 * fast ones. */
#ifndef TA_NO_CPYTHON

#define PY_SSIZE_T_CLEAN
#include <Python.h>               /* first, as the C-API docs require */
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include "tapead.h"
#include "program_call.h"

typedef struct {
    PyObject_HEAD
    ta_prog *p;         /* NULL until cffi writes a program in; freed with the box */
} vp_box;

static PyTypeObject *vp_type = NULL;

static void vp_dealloc(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    ta_prog_drop(&((vp_box *)o)->p);
    tp->tp_free(o);
    Py_DECREF(tp);                                 /* (a heap type's instances hold it) */
}

static PyObject *vp_address(PyObject *o, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr((void *)&((vp_box *)o)->p);
}

static PyGetSetDef vp_getset[] = {
    {"address", vp_address, NULL, "where cffi writes the box's program (a ta_prog **)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyObject *vp_box_type(PyObject *mod, PyObject *unused)
{
    static PyType_Slot slots[] = {
        {Py_tp_dealloc, (void *)vp_dealloc}, {Py_tp_getset, vp_getset},
        {Py_tp_new, (void *)PyType_GenericNew},
        {Py_tp_doc, (void *)"A Program's C program, freed with the box (csrc/python/program_call.c)."},
        {0, NULL}};
    static PyType_Spec spec = {"tapead.replay.ProgramBox", sizeof(vp_box), 0, Py_TPFLAGS_DEFAULT, slots};
    (void)mod; (void)unused;
    if (!vp_type && !(vp_type = (PyTypeObject *)PyType_FromSpec(&spec))) return NULL;
    Py_INCREF(vp_type);
    return (PyObject *)vp_type;
}

/* A count argument: an int in [0, max]; -1 with an exception set if not. */
static long long vp_count(PyObject *o, unsigned long long max, const char *what)
{
    unsigned long long v;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "run: %s must be an int", what);
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(o);
    if (PyErr_Occurred() || v > max) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "run: %s is out of range", what);
        return -1;
    }
    return (long long)v;
}

/* a * b, or ULLONG_MAX (more than any buffer holds) if that overflows */
static unsigned long long vp_mul(long long a, long long b)
{
    unsigned long long x = (unsigned long long)a, y = (unsigned long long)b;
    return y && x > ULLONG_MAX / y ? ULLONG_MAX : x * y;
}

/* o's buffer into b, checked: n float64s, C-contiguous, aligned, writable
 * if out.  An empty buffer may start anywhere: numpy calls an empty array
 * aligned at any address (one unpickled from a Dask message, say), and C
 * reads nothing from it.  0, or -1 with an exception set (b then holds
 * nothing). */
static int vp_array(PyObject *o, Py_buffer *b, unsigned long long n, int out, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (out ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, b, flags) < 0) return -1;
    if (b->itemsize != 8 || !b->format || strcmp(b->format, "d") != 0
        || (n && (uintptr_t)b->buf % sizeof(double) != 0) || n > (unsigned long long)PY_SSIZE_T_MAX / 8
        || b->len != (Py_ssize_t)(n * 8)) {
        PyBuffer_Release(b);
        PyErr_Format(PyExc_ValueError, "run: %s is not an aligned, C-contiguous float64 array of "
                     "%llu values", what, n);
        return -1;
    }
    return 0;
}

/* run(box, X, B, nin, Y, nout, seed, seedmode, G, nwrt, per_sample, parts,
 *     nblocks, params, npar, threads): ta_prog_run on box's program (cdef.h:
 * ta_run_t; seed, G, parts and params may be None: NULL), the GIL released.
 * None when it ran; else (status, row, op, x, y, guard, kind, outcome) of
 * the failure (cdef.h: ta_fail_t), which tapead/_c/program.py names. */
PyObject *vp_run(PyObject *mod, PyObject *const *a, Py_ssize_t n)
{
    enum { X, Y, SEED, G, PARTS, PARAMS, NARR };
    static const int at[NARR] = {1, 4, 6, 8, 11, 13}, out[NARR] = {0, 1, 0, 1, 1, 0};
    static const char *const name[NARR] = {"X", "Y", "seed", "G", "parts", "params"};
    Py_buffer b[NARR];
    int held[NARR] = {0, 0, 0, 0, 0, 0};
    unsigned long long len[NARR];
    long long B, nin, nout, seedmode, nwrt, ps, nblocks, npar, threads;
    ta_prog *P;
    ta_run_t r;
    ta_fail_t f;
    PyObject *res = NULL;
    int i, st;
    (void)mod;
    if (n != 16) {
        PyErr_Format(PyExc_TypeError, "run takes 16 arguments, not %zd", n);
        return NULL;
    }
    if (!vp_type || !Py_IS_TYPE(a[0], vp_type)) {
        PyErr_SetString(PyExc_TypeError, "run: the first argument must be a program's box");
        return NULL;
    }
    if ((B = vp_count(a[2], (1ull << 62), "B")) < 0 || (nin = vp_count(a[3], UINT32_MAX, "nin")) < 0
        || (nout = vp_count(a[5], UINT32_MAX, "nout")) < 0
        || (seedmode = vp_count(a[7], 2, "seedmode")) < 0
        || (nwrt = vp_count(a[9], UINT32_MAX, "nwrt")) < 0
        || (ps = vp_count(a[10], 1, "per_sample")) < 0
        || (nblocks = vp_count(a[12], (1ull << 62), "nblocks")) < 0
        || (npar = vp_count(a[14], UINT32_MAX, "npar")) < 0
        || (threads = vp_count(a[15], INT32_MAX, "threads")) < 0)
        return NULL;
    len[X] = vp_mul(B, nin);
    len[Y] = vp_mul(B, nout);
    len[SEED] = seedmode == 2 ? len[Y] : (unsigned long long)nout;
    len[G] = ps ? vp_mul(B, nwrt) : (unsigned long long)nwrt;
    len[PARTS] = vp_mul(nblocks, nwrt);
    len[PARAMS] = (unsigned long long)npar;
    for (i = 0; i < NARR; i++) {
        PyObject *o = a[at[i]];
        if (o == Py_None && i != X && i != Y) continue;
        if (vp_array(o, &b[i], len[i], out[i], name[i]) < 0) goto done;
        held[i] = 1;
    }
    if (held[SEED] != (seedmode != 0)) {
        PyErr_SetString(PyExc_ValueError, "run: a seed goes with seedmode 1 or 2, none with 0");
        goto done;
    }
    /* the program only now: taking a buffer may run Python (an exporter's
     * own code, or a collection), which must find no program read yet */
    if (!(P = ((vp_box *)a[0])->p)) {
        PyErr_SetString(PyExc_ValueError, "run: the box holds no program");
        goto done;
    }
    memset(&r, 0, sizeof r);
    memset(&f, 0, sizeof f);
    r.X = (const double *)b[X].buf; r.B = (uint64_t)B; r.nin = (uint32_t)nin;
    r.Y = (double *)b[Y].buf; r.nout = (uint32_t)nout;
    r.seed = held[SEED] ? (const double *)b[SEED].buf : NULL; r.seedmode = (int)seedmode;
    r.G = held[G] ? (double *)b[G].buf : NULL; r.nwrt = (uint32_t)nwrt; r.per_sample = (int)ps;
    r.parts = held[PARTS] ? (double *)b[PARTS].buf : NULL; r.nblocks = (uint64_t)nblocks;
    r.params = held[PARAMS] ? (const double *)b[PARAMS].buf : NULL; r.npar = (uint32_t)npar;
    r.threads = (int)threads;
    Py_BEGIN_ALLOW_THREADS
    st = ta_prog_run(P, &r, &f);
    Py_END_ALLOW_THREADS
    if (st == TA_OK) { Py_INCREF(Py_None); res = Py_None; }
    else res = Py_BuildValue("(iKiddLii)", st, (unsigned long long)f.row, f.op, f.x, f.y,
                             (long long)f.guard, f.kind, f.outcome);
done:
    for (i = 0; i < NARR; i++)
        if (held[i]) PyBuffer_Release(&b[i]);
    return res;
}

#endif
