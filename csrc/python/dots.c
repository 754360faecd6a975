/* dots.c: tapead.dot and tapead.linear on the CPython front (value.h: the
 * front's files and their contract). */
#ifndef TA_NO_CPYTHON
#include "value.h"
#include "nn.h"

/* ------------------------------------ dot and linear (nn.c, tapead/dots.py)
 *
 * tapead.dot(ws, xs) and tapead.linear(x, W) for the common case: lists or
 * tuples of this thread's Values and floats or small ints, every row's
 * first term with a Value, outside no_grad and detect_anomaly.  They read
 * the operands straight from the sequences (no ids, no arrays made in
 * Python) and record through the core the cffi front uses (nn.h).  Any
 * other call -- errors, no_grad Values, a plain-number first term, ints
 * beyond 2**53, other types, the node limit -- goes to tapead/dots.py,
 * which defines the semantics and the messages once for both fronts.
 * Each function object carries that general path as its self (dots,
 * below), so nothing here is global. */

#define VA_DOT_STACK 64     /* terms whose scratch lives on the stack */
#define VA_EXACT 9007199254740992LL   /* 2**53: ints up to this are doubles exactly */
#define VA_INT (-2)         /* an int operand: two ints multiply as ints (0 * -1 is 0, not -0.0) */

/* One operand: a node of T's main tape (*id its ref) or a number (*c its
 * value; *id -1 for a float, VA_INT for an int).  0 if the fast path
 * cannot take it. */
static int va_operand(ta_tape *T, PyObject *o, int64_t *id, double *c)
{
    if (Py_IS_TYPE(o, va_type)) {
        uintptr_t n = ((va_obj *)o)->node;
        ta_seg *s = VA_SEG(n);
        if (!n || s->tape != T) return 0;          /* unmade, no_grad, another thread's */
        *id = TA_REF(s, VA_OFF(n));
        return 1;
    }
    *id = -1;
    if (PyFloat_CheckExact(o)) { *c = PyFloat_AS_DOUBLE(o); return 1; }
    if (PyLong_CheckExact(o)) {
        int over;
        long long v = PyLong_AsLongLongAndOverflow(o, &over);
        if (over || v > VA_EXACT || v < -VA_EXACT) { PyErr_Clear(); return 0; }
        *c = (double)v;
        *id = VA_INT;
        return 1;
    }
    return 0;
}

/* Whether a row of n terms (w[i] * x[i]) is for the fast path: its first
 * term has a node, and no later term multiplies two ints. */
static int va_row_ok(const int64_t *w, const int64_t *x, Py_ssize_t n)
{
    Py_ssize_t i;
    if (w[0] < 0 && x[0] < 0) return 0;
    for (i = 1; i < n; i++)
        if (w[i] == VA_INT && x[i] == VA_INT) return 0;
    return 1;
}

/* Fill ids/consts from the list or tuple seq of n items; 0 if the fast path cannot take them. */
static int va_operands(ta_tape *T, PyObject *seq, Py_ssize_t n, int64_t *id, double *c)
{
    PyObject **items;
    Py_ssize_t i;
    if (PyList_CheckExact(seq)) { if (PyList_GET_SIZE(seq) != n) return 0; items = PySequence_Fast_ITEMS(seq); }
    else if (PyTuple_CheckExact(seq)) { if (PyTuple_GET_SIZE(seq) != n) return 0; items = PySequence_Fast_ITEMS(seq); }
    else return 0;
    for (i = 0; i < n; i++)
        if (!va_operand(T, items[i], &id[i], &c[i])) return 0;
    return 1;
}

static Py_ssize_t va_len(PyObject *seq)
{
    if (PyList_CheckExact(seq)) return PyList_GET_SIZE(seq);
    if (PyTuple_CheckExact(seq)) return PyTuple_GET_SIZE(seq);
    return -1;
}

/* Record the rows of S (every from[j] = 0, c0[j] = 0) into the Values
 * res[0..nout-1], made beforehand with no node: all or nothing.  1 done,
 * 0 the node limit (the caller takes the slow path, which collects), -1
 * an exception set. */
static int va_sums(ta_tape *T, ta_sums *S, PyObject **res, int64_t *out)
{
    ta_bulk bk;
    uint32_t j;
    int st = ta_bulk_begin(T, ta_sums_count(S), &bk);
    if (st == TA_OK) {
        st = ta_sums_record(T, S, out);
        for (j = 0; st == TA_OK && j < S->nout; j++) {     /* held before the collector may run */
            ta_seg *s = TA_SEGOF(T, (uint32_t)out[j]);
            ta_hold(s);
            ((va_obj *)res[j])->node = (uintptr_t)s | TA_OFF((uint32_t)out[j]);
        }
        ta_bulk_end(T, &bk, st != TA_OK);
    }
    if (st == TA_ELIMIT) return 0;
    if (st != TA_OK) { va_fail(st); return -1; }
    return 1;
}

/* Scratch for n terms: the stack buffer if it is big enough, else the heap. */
static void *va_scratch(void *stack, size_t have, size_t need)
{
    if (need <= have) return stack;
    return PyMem_Malloc(need ? need : 1);
}

static PyObject *va_slow(PyObject *fn, PyObject *const *args, Py_ssize_t nargs)
{
    return PyObject_Vectorcall(fn, args, (size_t)nargs, NULL);
}

static PyObject *va_dot(PyObject *slow, PyObject *const *args, Py_ssize_t nargs)
{
    ta_tape *T = ta_self();
    int64_t sid[2 * VA_DOT_STACK], *id = sid, out;
    double sc[2 * VA_DOT_STACK], *c = sc, c0 = 0.0;
    uint32_t from = 0;
    Py_ssize_t n;
    PyObject *r = NULL, *own = NULL;
    ta_sums S;
    int done = 0;
    if (nargs != 2 || !T || T->nograd || T->anomaly || (n = va_len(args[0])) <= 0 ||
        n > (Py_ssize_t)UINT32_MAX || va_len(args[1]) != n)
        return va_slow(slow, args, nargs);
    id = (int64_t *)va_scratch(sid, sizeof sid, 2 * (size_t)n * sizeof *id);
    c = (double *)va_scratch(sc, sizeof sc, 2 * (size_t)n * sizeof *c);
    if (!id || !c) { PyErr_NoMemory(); goto out; }
    /* what may run Python first (the join, the result), then the operands */
    if (va_join_items(args[0], &own) < 0 || va_join_items(args[1], &own) < 0 ||
        !(r = va_blank())) { done = -1; goto out; }
    if (va_len(args[0]) != n || va_len(args[1]) != n ||
        !va_operands(T, args[0], n, id, c) || !va_operands(T, args[1], n, id + n, c + n) ||
        !va_row_ok(id, id + n, n)) {
        done = 0;
        goto out;
    }
    S.nout = 1; S.nin = (uint32_t)n; S.w = id; S.wc = c; S.wrow = 0; S.x = id + n; S.xc = c + n;
    S.b = NULL; S.c0 = &c0; S.from = &from; S.relu = 0;
    done = va_sums(T, &S, &r, &out);
    if (done > 0 && own) { va_set_own((va_obj *)r, own); own = NULL; }
out:
    if (id != sid) PyMem_Free(id);
    if (c != sc) PyMem_Free(c);
    Py_XDECREF(own);
    if (done <= 0) Py_CLEAR(r);
    if (done == 0 && !PyErr_Occurred()) return va_slow(slow, args, nargs);
    return r;
}

static PyObject *va_linear(PyObject *slow, PyObject *const *args, Py_ssize_t nargs)
{
    ta_tape *T = ta_self();
    int64_t *id = NULL, *out;
    double *c = NULL, *c0;
    uint32_t *from;
    Py_ssize_t nin, nout, j;
    PyObject *r = NULL, **rows, *own = NULL;
    ta_sums S;
    int done = 0;
    size_t cells;
    if (nargs != 2 || !T || T->nograd || T->anomaly || (nin = va_len(args[0])) <= 0 ||
        (nout = va_len(args[1])) <= 0 || (uint64_t)nin * (uint64_t)nout > UINT32_MAX)
        return va_slow(slow, args, nargs);
    cells = (size_t)nout * (size_t)nin;
    id = (int64_t *)PyMem_Malloc((cells + (size_t)nin + (size_t)nout) * sizeof *id);
    c = (double *)PyMem_Malloc((cells + (size_t)nin + (size_t)nout) * sizeof *c
                               + (size_t)nout * sizeof *from);
    if (!id || !c) { PyErr_NoMemory(); goto out; }
    out = id + cells + nin;
    c0 = c + cells + nin;
    from = (uint32_t *)(c0 + nout);
    /* the join and the results first: making them may collect, and so run
     * Python, which must not happen between reading the operands and
     * recording (a row that is no list or tuple: the slow path decides) */
    if (va_join_items(args[0], &own) < 0) { done = -1; goto out; }
    for (j = 0; j < nout && j < va_len(args[1]); j++) {
        PyObject *row = PySequence_Fast_ITEMS(args[1])[j];
        Py_INCREF(row);
        if (va_join_items(row, &own) < 0) { Py_DECREF(row); done = -1; goto out; }
        Py_DECREF(row);
    }
    if (!(r = PyList_New(nout))) goto out;
    for (j = 0; j < nout; j++) {
        PyObject *v = va_blank();
        if (!v) { done = -1; goto out; }
        PyList_SET_ITEM(r, j, v);
    }
    /* nothing runs Python from here to the record: W and x are read as they
     * are now, every length checked again (a finalizer may have emptied or
     * shrunk W meanwhile, freeing its item array: the slow path then reads
     * them afresh) */
    if (va_len(args[1]) != nout || !va_operands(T, args[0], nin, id + cells, c + cells)) goto out;
    rows = PySequence_Fast_ITEMS(args[1]);
    for (j = 0; j < nout; j++) {
        if (!va_operands(T, rows[j], nin, id + j * nin, c + j * nin) ||
            !va_row_ok(id + j * nin, id + cells, nin))
            goto out;
        c0[j] = 0.0; from[j] = 0;
    }
    S.nout = (uint32_t)nout; S.nin = (uint32_t)nin; S.w = id; S.wc = c; S.wrow = (size_t)nin;
    S.x = id + cells; S.xc = c + cells; S.b = NULL; S.c0 = c0; S.from = from; S.relu = 0;
    done = va_sums(T, &S, PySequence_Fast_ITEMS(r), out);
    for (j = 0; done > 0 && own && j < nout; j++)
        va_set_own((va_obj *)PyList_GET_ITEM(r, j), VA_NEWREF(own));
out:
    PyMem_Free(id); PyMem_Free(c);
    Py_XDECREF(own);
    if (done <= 0) Py_CLEAR(r);
    if (done == 0 && !PyErr_Occurred()) return va_slow(slow, args, nargs);
    return r;
}

/* dots(dot=, linear=): the fast dot and linear, each a new function object
 * whose self is its general path, the given Python function (whose
 * docstring it takes). */
PyObject *va_dots(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dot", "linear", NULL};
    static PyMethodDef defs[] = {
        {"dot", (PyCFunction)(void (*)(void))va_dot, METH_FASTCALL, NULL},
        {"linear", (PyCFunction)(void (*)(void))va_linear, METH_FASTCALL, NULL},
    };
    PyObject *d = NULL, *l = NULL, *dd = NULL, *ld = NULL, *docs, *r = NULL;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OO:dots", kwlist, &d, &l)) return NULL;
    if (!d || !l || !PyCallable_Check(d) || !PyCallable_Check(l)) {
        PyErr_SetString(PyExc_TypeError, "dots needs dot= and linear=, each callable"); return NULL;
    }
    if (!(docs = PyDict_New())) return NULL;
    if (!(dd = PyObject_GetAttrString(d, "__doc__")) || !(ld = PyObject_GetAttrString(l, "__doc__")) ||
        PyDict_SetItemString(docs, "dot", dd) < 0 || PyDict_SetItemString(docs, "linear", ld) < 0)
        goto done;
    if (!defs[0].ml_doc) defs[0].ml_doc = va_doc_of(docs, "dot");   /* never freed: as the type's */
    if (!defs[1].ml_doc) defs[1].ml_doc = va_doc_of(docs, "linear");
    r = Py_BuildValue("(NN)", PyCFunction_New(&defs[0], d), PyCFunction_New(&defs[1], l));
done:
    Py_XDECREF(dd); Py_XDECREF(ld);
    Py_DECREF(docs);
    return r;
}

#endif
