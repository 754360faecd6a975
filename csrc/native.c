/* native.c: the native front, CPython's Value type.
 *
 * THE CONTRACT OF THIS FILE: it is the only C file that uses the CPython
 * API.  Everything here runs with the GIL held (slots and methods are
 * called by the interpreter), except ta_native_install, which cffi calls
 * with the GIL released and which therefore takes it itself.  On a
 * free-threaded CPython there is no GIL: nothing here may then share
 * mutable state between threads (the free list below is compiled out).  No other C
 * file may include Python.h, and nothing here may be called from them.
 *
 * A Value is a heap GC type of 40 bytes: the object header, its node packed
 * into one word (segment | offset: segments are TA_SEG_ALIGN-aligned), the
 * weak-reference list, and own, what it carries for the collector (a
 * custom node's Python side: tapead/custom.py), tracked only while set.  Making a Value holds its node's segment in the
 * same C call that records the node; tp_dealloc drops the hold (tapead.h:
 * holds).  Its number slots and unary methods record on the calling
 * thread's tape through ta_record_at, the same function the cffi front
 * reaches through ta_op1/ta_op2/ta_opc, so the two fronts share every rule
 * of the ops.  What is not hot (comparisons, _prev, repr, labels, ...) is
 * written once in Python (tapead/engine.py) and assigned onto this type;
 * errors are made by the Python function that makes the cffi front's, so
 * their types and messages are the same on both fronts.
 *
 * PyPy builds (TA_NO_NATIVE) leave all of this out: there the cffi front
 * is the fast one, and ta_native_install reports that it has none. */
#ifdef TA_NO_NATIVE
#include "tapead.h"
int ta_native_install(void) { return TA_ENONATIVE; }
#else

#define PY_SSIZE_T_CLEAN
#include <Python.h>               /* first, as the C-API docs require */
#include <structmember.h>
#include <string.h>
#include "tapead.h"
#include "ops.h"
#include "nn.h"
#include "native_prog.h"

typedef struct {
    PyObject_HEAD
    uintptr_t node;              /* (uintptr_t)segment | offset; 0 = none  */
    PyObject *weaklist;
    PyObject *own;               /* what the Values of the node's graph carry: the
                                    Python data of the custom nodes (and labelled
                                    nodes) it depends on, or NULL (tapead/custom.py:
                                    join); the one reference a Value holds, so the
                                    Value is tracked by the collector while set */
} va_obj;

/* A new strong reference to o, as an expression (Py_NewRef is 3.10+) */
#define VA_NEWREF(o) (Py_INCREF(o), (PyObject *)(o))
#define VA_XNEWREF(o) (Py_XINCREF(o), (PyObject *)(o))

#define VA_SEG(n) ((ta_seg *)((n) & ~(uintptr_t)(TA_SEG_ALIGN - 1u)))
#define VA_OFF(n) ((uint32_t)((n) & (uintptr_t)(TA_SEG_ALIGN - 1u)))

static PyTypeObject *va_type = NULL;
static int va_is(PyObject *o);
/* Python hooks (set by engine.py through set_hooks): error(code) -> the
 * exception instance; real(x) -> float or TypeError; restore(data, grad)
 * -> a detached Value (pickling); other(a, b, op) -> a op b when one of
 * them is no number (numpy arrays; else NotImplemented); setattr(v, name,
 * x) -> a user attribute, kept with the node (x NULL: delete it). */
static PyObject *va_error_hook = NULL, *va_real_hook = NULL, *va_restore_hook = NULL;
static PyObject *va_other_hook = NULL, *va_setattr_hook = NULL;
/* rule(node, key) -> 0, or -1 having stored the exception it caught:
 * tapead.custom.ta_custom_rule, called directly rather than through cffi */
static PyObject *va_rule_fn = NULL;
/* grads(data, children, third, local_grads) -> a new Value whose node has
 * those local partials, or a leaf (tapead/custom.py: grads_value), which
 * Value(data, children, local_grads) takes over */
static PyObject *va_grads_hook = NULL;

/* An exception from a rule that could not be kept with the thread (no
 * memory; va_rule): kept here until backward() raises it (va_fail_in).
 * One for all threads: from here to there the aborted sweep runs on in C
 * only, holding the GIL. */
static PyObject *va_rule_exc = NULL;

/* ------------------------------------------------------ owners */

/* A custom node's owner, the native front's tapead/custom.py _Node (the
 * cffi front's is that class; the design and its reasons are written
 * there): the node's rule (the user's _backward, NULL until set), up
 * (what its inputs' Values carried), its key and its tape's Python side
 * (tapead/_c: Tape).  A GC type, so the cycle rule -> captured Values ->
 * own -> owner -> rule is the collector's; made here and registered in
 * its tape's weak map without a Python call, as the sweep finds it
 * (va_rule) and out._backward = rule sets it (va_setattro): the three
 * steps of micrograd's idiom that are otherwise Python's. */
typedef struct {
    PyObject_HEAD
    PyObject *rule, *up, *weaklist;
    PyObject *map;               /* the map it is registered in (tape's owners), which
                                    its dealloc leaves without its (then dead) entry */
    PyObject *tape;              /* the Tape of that map, kept alive while the owner is */
    long long key;
} vn_obj;

static PyTypeObject *vn_type = NULL;
/* tape(): this thread's tape's Tape (tapead._c.tape), whose .owners is its
 * map key -> weakref; every(tape, tape nodes): what custom.py does each
 * 64th owner made. */
static PyObject *vn_tape_fn = NULL, *vn_every = NULL, *vn_owners_name = NULL;
static PyObject *vn_backward_name = NULL;
/* where an exception a rule raised is kept for backward() (custom.py's _tl.custom_exc) */
static PyObject *vn_tl = NULL, *vn_exc_name = NULL;
/* "data" and "grad", interned: v.grad += x in a rule sets without a lookup (va_setattro) */
static PyObject *va_data_name = NULL, *va_grad_name = NULL;

static PyObject *vn_deref(PyObject *w);

/* Drop o's entry from its map, once its weak reference is dead (a dealloc:
 * what drops runs no Python, and the error state is kept). */
static void vn_unmap(vn_obj *o)
{
    PyObject *t, *v, *tb, *k, *w, *x = NULL;
    PyErr_Fetch(&t, &v, &tb);
    if ((k = PyLong_FromLongLong(o->key)) != NULL) {
        w = PyDict_GetItemWithError(o->map, k);          /* borrowed: checked, then dropped */
        if (w && !(x = vn_deref(w))) PyDict_DelItem(o->map, k);
        else Py_XDECREF(x);
        Py_DECREF(k);
    }
    PyErr_Restore(t, v, tb);     /* (an error here leaves the entry for custom._every) */
    Py_CLEAR(o->map);
}

static void vn_dealloc(PyObject *self)
{
    vn_obj *o = (vn_obj *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, vn_dealloc)    /* a chain of owners (up) frees without recursing */
    if (o->weaklist) PyObject_ClearWeakRefs(self);
    if (o->map) vn_unmap(o);
    Py_CLEAR(o->rule);
    Py_CLEAR(o->up);
    Py_CLEAR(o->tape);
    tp->tp_free(self);
    Py_DECREF(tp);
    Py_TRASHCAN_END
}

static int vn_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((vn_obj *)self)->rule);
    Py_VISIT(((vn_obj *)self)->up);
    Py_VISIT(((vn_obj *)self)->map);
    Py_VISIT(((vn_obj *)self)->tape);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int vn_clear(PyObject *self)
{
    Py_CLEAR(((vn_obj *)self)->rule);
    Py_CLEAR(((vn_obj *)self)->up);
    return 0;
}

static PyMemberDef vn_members[] = {
    {"rule", T_OBJECT, offsetof(vn_obj, rule), 0, "the node's _backward (None until set)"},
    {"up", T_OBJECT, offsetof(vn_obj, up), READONLY, "what the node's inputs carried"},
    {"key", T_LONGLONG, offsetof(vn_obj, key), READONLY, "the node's key on its tape"},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(vn_obj, weaklist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL}
};

#ifndef Py_GIL_DISABLED
/* The last map found with its Tape, and the tape (address and tag: a tape
 * made later at the same address has another) whose they are: one
 * thread's custom nodes find them without a Python call (guarded by the
 * GIL).  Held here, so the Tape found stays the tape's. */
static ta_tape *vn_last_T = NULL;
static uint64_t vn_last_tag = 0;
static PyObject *vn_last_map = NULL, *vn_last_tape = NULL;
#endif

/* This thread's tape's map of owners (a new reference), and its Tape in
 * *tape (a new reference) unless tape is NULL; NULL with an exception set. */
static PyObject *vn_map(PyObject **tape)
{
    PyObject *t, *d = NULL;
    ta_tape *T;
#ifndef Py_GIL_DISABLED
    T = ta_self_if_any();
    if (T && T == vn_last_T && T->tag == vn_last_tag) {
        if (tape) *tape = VA_NEWREF(vn_last_tape);
        return VA_NEWREF(vn_last_map);
    }
#endif
    if (!(t = PyObject_CallNoArgs(vn_tape_fn))) return NULL;
    if ((d = PyObject_GetAttr(t, vn_owners_name)) != NULL && !PyDict_CheckExact(d)) {
        PyErr_SetString(PyExc_RuntimeError, "tapead: the map of custom nodes is not a dict");
        Py_CLEAR(d);
    }
    if (!d) { Py_DECREF(t); return NULL; }
#ifndef Py_GIL_DISABLED
    if ((T = ta_self_if_any()) != NULL) {       /* (the call made the tape, if need be) */
        PyObject *oldm = vn_last_map, *oldt = vn_last_tape;
        vn_last_T = T;
        vn_last_tag = T->tag;
        vn_last_map = VA_NEWREF(d);
        vn_last_tape = VA_NEWREF(t);
        Py_XDECREF(oldm);               /* (the cache is whole before a drop may run Python) */
        Py_XDECREF(oldt);
    }
#endif
    if (tape) *tape = t; else Py_DECREF(t);
    return d;
}

/* A new owner of the custom node of this key, up what its inputs carried
 * (a reference given over, or NULL), registered under its key in this
 * thread's map; NULL with an exception set. */
static PyObject *vn_new(long long key, PyObject *up)
{
    vn_obj *o;
    PyObject *d = NULL, *t = NULL, *k = NULL, *w = NULL;
    int rc = -1;
    if (!vn_type) { Py_XDECREF(up); PyErr_SetString(PyExc_RuntimeError, "tapead: custom nodes are not set up"); return NULL; }
    if (!(o = PyObject_GC_New(vn_obj, vn_type))) { Py_XDECREF(up); return NULL; }
    Py_INCREF(vn_type);                            /* (a heap type's instances hold it) */
    o->rule = NULL; o->up = up; o->weaklist = NULL; o->map = NULL; o->tape = NULL; o->key = key;
    PyObject_GC_Track((PyObject *)o);
    /* the map, the key and the weak reference may each run Python (a
     * collection): each is held here */
    if ((d = vn_map(&t)) && (k = PyLong_FromLongLong(key)) && (w = PyWeakref_NewRef((PyObject *)o, NULL)) &&
        PyDict_SetItem(d, k, w) == 0) {
        rc = 0;
        o->map = VA_NEWREF(d);
        o->tape = VA_NEWREF(t);
        if (!(key & 63)) {                  /* (keys count the owners made on this tape) */
            ta_tape *T = ta_self_if_any();
            PyObject *r = PyObject_CallFunction(vn_every, "OL", t, T ? (long long)T->nodes : -1LL);
            if (!r) rc = -1;
            Py_XDECREF(r);
        }
    }
    Py_XDECREF(d); Py_XDECREF(t); Py_XDECREF(k); Py_XDECREF(w);
    if (rc < 0) Py_CLEAR(o);
    return (PyObject *)o;
}

/* What weak reference w refers to (a new reference), or NULL (dead, or
 * w no weak reference), no exception set. */
static PyObject *vn_deref(PyObject *w)
{
    PyObject *o = NULL;
    if (!PyWeakref_CheckRef(w)) return NULL;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyWeakref_GetRef(w, &o) < 0) { PyErr_Clear(); return NULL; }
    return o;
#else
    o = PyWeakref_GET_OBJECT(w);
    return o == Py_None ? NULL : VA_NEWREF(o);
#endif
}

/* The rule of the custom node of this key (a new reference; NULL with no
 * exception: none found, or none set (*found says which)), looked up in
 * this thread's tape's map. */
static PyObject *vn_rule_of(int64_t key, int *found)
{
    PyObject *d, *k, *w, *o, *r = NULL;
    *found = 0;
    if (!vn_tape_fn || !(d = vn_map(NULL))) { PyErr_Clear(); return NULL; }
    if (PyDict_CheckExact(d) && (k = PyLong_FromLongLong((long long)key))) {
        w = PyDict_GetItemWithError(d, k);           /* borrowed: used before anything runs */
        Py_DECREF(k);
        if ((o = w ? vn_deref(w) : NULL) != NULL) {
            if (Py_IS_TYPE(o, vn_type)) {
                *found = 1;
                r = VA_XNEWREF(((vn_obj *)o)->rule);
                if (r == Py_None) Py_CLEAR(r);
            }
            Py_DECREF(o);
        }
    }
    PyErr_Clear();
    Py_DECREF(d);
    return r;
}

static int va_rule(int64_t node, int64_t key)
{
    PyGILState_STATE g = PyGILState_Ensure();   /* held already unless called through cffi */
    PyObject *a[2], *r, *fn;
    int rc = -1, found;
    if ((fn = vn_rule_of(key, &found)) != NULL || found) {
        /* the owner is here: its rule (if set) runs straight from C, an
         * exception it raises kept below for backward() to raise */
        rc = 0;
        if (fn) {
            if ((r = PyObject_CallNoArgs(fn)) != NULL) Py_DECREF(r);
            else rc = -1;
            Py_DECREF(fn);
        }
    } else {
        /* none found: custom.ta_custom_rule says why (an owner lost) */
        a[0] = PyLong_FromLongLong((long long)node);
        a[1] = PyLong_FromLongLong((long long)key);
        if (a[0] && a[1] && (r = PyObject_Vectorcall(va_rule_fn, a, 2, NULL)) != NULL) {
            rc = (int)PyLong_AsLong(r);
            Py_DECREF(r);
        }
        Py_XDECREF(a[0]); Py_XDECREF(a[1]);
    }
    if (PyErr_Occurred()) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (v && tb) PyException_SetTraceback(v, tb);
        /* kept where the rule hook keeps what it catches (custom.py:
         * refusal raises it), or, failing that, here */
        if (v && vn_tl && PyObject_SetAttr(vn_tl, vn_exc_name, v) == 0) Py_CLEAR(v);
        else PyErr_Clear();
        if (v) Py_XSETREF(va_rule_exc, v);
        Py_XDECREF(t); Py_XDECREF(tb);
        rc = -1;
    }
    PyGILState_Release(g);
    return rc;
}

/* ------------------------------------------------------------ errors */

static PyObject *va_fail_in(int st, const char *sweep)
{
    PyObject *e;
    if (st == TA_EPYTHON && va_rule_exc) {      /* what escaped the rule hook (va_rule) */
        e = va_rule_exc;
        va_rule_exc = NULL;
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
        return NULL;
    }
    if (!va_error_hook) { PyErr_Format(PyExc_RuntimeError, "tapead status %d", st); return NULL; }
    e = PyObject_CallFunction(va_error_hook, "is", st, sweep);
    if (e) { PyErr_SetObject((PyObject *)Py_TYPE(e), e); Py_DECREF(e); }
    return NULL;
}

static PyObject *va_fail(int st) { return va_fail_in(st, ""); }

static PyObject *va_unmade(void)
{
    PyErr_SetString(PyExc_TypeError,
                    "this Value was never initialised (made without calling Value(x)): it has no node");
    return NULL;
}

/* The node of Value v on this thread's tape T, or NULL with an exception
 * set (a Value never initialised; a Value of another thread). */
static ta_seg *va_node(ta_tape *T, va_obj *v, uint32_t *off)
{
    ta_seg *s;
    if (!v->node) { va_unmade(); return NULL; }
    s = VA_SEG(v->node);
    if (s->tape->root != T) { va_fail(TA_ETHREAD); return NULL; }
    *off = VA_OFF(v->node);
    return s;
}

static ta_tape *va_tape(void)
{
    ta_tape *T = ta_self();
    if (!T) PyErr_NoMemory();
    return T;
}

/* ------------------------------------------------------ making Values */

/* Freed Values of the exact type wait here for reuse (a training step
 * frees as many as it makes).  The list is shared by every thread, so it
 * exists only where the GIL guards it: a free-threaded build (cffi declares
 * the module GIL-free there, Py_MOD_GIL_NOT_USED) has none, and allocates
 * from the interpreter's own per-thread heap (mimalloc), whose job the
 * list does here. */
#ifndef Py_GIL_DISABLED
#define VA_FREE_MAX 4096
static va_obj *va_free[VA_FREE_MAX];
static int va_nfree = 0;
#define VA_KEEP(tp, v) ((tp) == va_type && va_nfree < VA_FREE_MAX ? (va_free[va_nfree++] = (v), 1) : 0)
#else
#define VA_KEEP(tp, v) 0
#endif

/* A new Value with no node yet (its dealloc drops nothing): what every
 * call that records makes before it records, so that nothing can run
 * Python between recording and holding (a collection started by this
 * allocation may run finalizers that record), and it cannot fail after.
 * Untracked: a Value joins the collector's lists only once it has an own. */
static PyObject *va_blank(void)
{
    va_obj *v;
#ifndef Py_GIL_DISABLED
    if (va_nfree) {
        v = va_free[--va_nfree];
        PyObject_Init((PyObject *)v, va_type);   /* increfs the heap type */
    } else
#endif
    if (!(v = PyObject_GC_New(va_obj, va_type))) return NULL;
    v->node = 0;
    v->weaklist = NULL;
    v->own = NULL;
    return (PyObject *)v;
}

/* v->own = own (a reference given over, or NULL), the old one dropped
 * last (dropping may run any Python).  v is tracked while it has one. */
static void va_set_own(va_obj *v, PyObject *own)
{
    PyObject *old = v->own;
    v->own = own;
    if (own && !PyObject_GC_IsTracked((PyObject *)v)) PyObject_GC_Track((PyObject *)v);
    Py_XDECREF(old);
}

/* The join of own sets a and b (either NULL: none), as tapead/custom.py's
 * join: a new reference in *r (NULL: none); -1 with an exception set. */
static int va_join(PyObject *a, PyObject *b, PyObject **r)
{
    if (!a || a == b) { *r = VA_XNEWREF(b); return 0; }
    if (!b) { *r = VA_NEWREF(a); return 0; }
    Py_INCREF(a); Py_INCREF(b);        /* (making the tuple may run Python, which may re-own their Values) */
    *r = PyTuple_Pack(2, a, b);
    Py_DECREF(a); Py_DECREF(b);
    return *r ? 0 : -1;
}

/* *acc joined with the own of each Value among the items of seq, a list
 * or tuple (other objects carry nothing; seq of another type: nothing
 * done); -1 with an exception set (*acc then dropped).  The items are
 * read afresh after each join, which may run Python (and change a list). */
static int va_join_items(PyObject *seq, PyObject **acc)
{
    Py_ssize_t k;
    if (!PyList_Check(seq) && !PyTuple_Check(seq)) return 0;
    for (k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        PyObject *x = PySequence_Fast_GET_ITEM(seq, k), *j;
        PyObject *o = va_is(x) ? ((va_obj *)x)->own : NULL;
        if (!o || o == *acc) continue;
        Py_INCREF(o);                  /* (joining may run Python, which may re-own items[k]) */
        if (va_join(*acc, o, &j) < 0) { Py_DECREF(o); Py_CLEAR(*acc); return -1; }
        Py_DECREF(o);
        Py_XSETREF(*acc, j);
    }
    return 0;
}

/* The blank Value r (va_blank) made the Value of node id, just recorded
 * into segment where, which it holds from here, and carrying own (a
 * reference given over, or NULL); or, for a failed record (id < 0),
 * r and own dropped and the error raised.  Runs no Python before the hold. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))     /* on every op's path (va_rec) */
#endif
static inline PyObject *va_result(PyObject *r, int64_t id, ta_seg *where, PyObject *own)
{
    if (id < 0) {
        Py_DECREF(r);
        Py_XDECREF(own);
        return va_fail((int)id);
    }
    ta_hold(where);
    ((va_obj *)r)->node = (uintptr_t)where | TA_OFF((uint32_t)id);
    if (own) va_set_own((va_obj *)r, own);
    return r;
}

/* Is o a Value?  Exact floats and ints, the commonest other operands, are
 * told apart before the walk over o's class hierarchy. */
static int va_is(PyObject *o)
{
    if (Py_IS_TYPE(o, va_type)) return 1;
    if (PyFloat_CheckExact(o) || PyLong_CheckExact(o)) return 0;
    return PyObject_TypeCheck(o, va_type);
}

/* A plain-number operand as a double: what cffi accepts for a double on
 * the cffi front (PyFloat_AsDouble), less complex numbers and arrays
 * (engine._real, through va_real_hook).  Returns 0,
 * or -1 if o is no number (TypeError cleared: the caller answers
 * NotImplemented), or -2 with another exception set. */
static int va_number(PyObject *o, double *c)
{
    PyObject *f;
    if (PyFloat_CheckExact(o)) { *c = PyFloat_AS_DOUBLE(o); return 0; }
    if (!PyFloat_Check(o) && !PyLong_Check(o) && va_real_hook) {
        /* any other type (numpy's non-float64 scalars, Fraction, Decimal):
         * the Python rule of what a real number is (engine._real), which
         * refuses complex numbers (numpy's complex64 too: its __float__
         * would drop the imaginary part) and arrays */
        if (!(f = PyObject_CallOneArg(va_real_hook, o))) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -2;
            PyErr_Clear();
            return -1;
        }
        *c = PyFloat_AsDouble(f);
        Py_DECREF(f);
        return (*c == -1.0 && PyErr_Occurred()) ? -2 : 0;
    }
    *c = PyFloat_AsDouble(o);
    if (*c == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -2;
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* Record op on Values a (and b for a binary op), or a with constant c.
 * The result carries the join of its operands' own (va_join): nothing
 * made where neither has one.  The join and the result are made first:
 * making them may run Python (the collector), which may re-initialise a
 * or b, so their nodes are read only after. */
static PyObject *va_rec(int op, PyObject *a, PyObject *b, double c)
{
    ta_tape *T = va_tape();
    ta_seg *sx, *sy = NULL, *where = NULL;
    uint32_t ox, oy = 0;
    PyObject *own = ((va_obj *)a)->own, *r;
    int64_t id;
    if (!T) return NULL;
    if (b && ((va_obj *)b)->own != own) {
        if (va_join(own, ((va_obj *)b)->own, &own) < 0) return NULL;
    } else Py_XINCREF(own);
    if (!(r = va_blank())) { Py_XDECREF(own); return NULL; }
    if (!(sx = va_node(T, (va_obj *)a, &ox)) || (b && !(sy = va_node(T, (va_obj *)b, &oy)))) {
        Py_DECREF(r); Py_XDECREF(own); return NULL;
    }
    id = ta_record_at(T, op, sx, ox, sy, oy, c, TA_NOKEY, &where);
    return va_result(r, id, where, own);
}

/* a OPV b where one operand is a Value and the other is no number: the
 * slow path, off the hot one (a numpy array gives an object array). */
static PyObject *va_other(PyObject *a, PyObject *b, int opv)
{
    if (!va_other_hook) Py_RETURN_NOTIMPLEMENTED;
    return PyObject_CallFunction(va_other_hook, "OOi", a, b, opv);
}

/* a OP b where a or b is a Value: OPV for two Values, else the constant
 * form (opc_left: the constant is on the left; -1: there is none).
 * Anything that is not a number goes to va_other. */
static PyObject *va_binop(PyObject *a, PyObject *b, int opv, int opc_right, int opc_left)
{
    double c;
    int st;
    if (va_is(a)) {
        if (va_is(b)) return va_rec(opv, a, b, 0.0);
        if ((st = va_number(b, &c)) < 0) return st == -1 ? va_other(a, b, opv) : NULL;
        return va_rec(opc_right, a, NULL, c);
    }
    if (opc_left < 0) Py_RETURN_NOTIMPLEMENTED;
    if ((st = va_number(a, &c)) < 0) return st == -1 ? va_other(a, b, opv) : NULL;
    return va_rec(opc_left, b, NULL, c);
}

static PyObject *va_add(PyObject *a, PyObject *b) { return va_binop(a, b, TA_ADD, TA_ADDC, TA_ADDC); }
static PyObject *va_mul(PyObject *a, PyObject *b) { return va_binop(a, b, TA_MUL, TA_MULC, TA_MULC); }

static PyObject *va_sub(PyObject *a, PyObject *b)
{
    double c;
    int st;
    if (va_is(a) && !va_is(b)) {          /* x - c == x + (-c) exactly */
        if ((st = va_number(b, &c)) < 0) return st == -1 ? va_other(a, b, TA_SUB) : NULL;
        return va_rec(TA_ADDC, a, NULL, -c);
    }
    return va_binop(a, b, TA_SUB, -1, TA_RSUBC);
}

static PyObject *va_div(PyObject *a, PyObject *b) { return va_binop(a, b, TA_DIV, TA_DIVC, TA_RDIVC); }

static PyObject *va_pow(PyObject *a, PyObject *b, PyObject *mod)
{
    if (mod != Py_None) Py_RETURN_NOTIMPLEMENTED;
    return va_binop(a, b, TA_POW, TA_POWC, TA_RPOWC);
}

static PyObject *va_neg(PyObject *a) { return va_rec(TA_MULC, a, NULL, -1.0); }   /* as micrograd: a * -1 */
static PyObject *va_pos(PyObject *a) { Py_INCREF(a); return a; }
static PyObject *va_absolute(PyObject *a) { return va_rec(TA_ABS, a, NULL, 0.0); }

/* max/min with a Value or a number (a number enters as a new leaf). */
static PyObject *va_minmax(PyObject *a, PyObject *b, int op)
{
    PyObject *leaf, *r;
    ta_tape *T;
    ta_seg *where = NULL;
    double c;
    int64_t id;
    int st;
    if (va_is(b)) return va_rec(op, a, b, 0.0);
    if ((st = va_number(b, &c)) < 0) {
        if (st == -1) PyErr_Format(PyExc_TypeError, "%s needs a Value or a real number, not %s",
                                   op == TA_MAX ? "maximum" : "minimum", Py_TYPE(b)->tp_name);
        return NULL;
    }
    if (!(T = va_tape()) || !(leaf = va_blank())) return NULL;
    id = ta_leaf_at(T, c, TA_NOKEY, &where);
    if (!(leaf = va_result(leaf, id, where, NULL))) return NULL;
    r = va_rec(op, a, leaf, 0.0);
    Py_DECREF(leaf);
    return r;
}
static PyObject *va_maximum(PyObject *a, PyObject *b) { return va_minmax(a, b, TA_MAX); }
static PyObject *va_minimum(PyObject *a, PyObject *b) { return va_minmax(a, b, TA_MIN); }

/* One method per unary op of ops.def, generated from the table under its
 * PY name; its doc is filled in when the type is made. */
#define VA_UN_UN(NAME) \
    static PyObject *va_m_##NAME(PyObject *s, PyObject *u) { (void)u; return va_rec(TA_##NAME, s, NULL, 0.0); }
#define VA_UN_LEAF(NAME)
#define VA_UN_BIN(NAME)
#define VA_UN_CST(NAME)
#define VA_UN_NARY(NAME)
#define TA_OP(NAME, KIND, SYM, ...) VA_UN_##KIND(NAME)
#include "ops.def"
#undef TA_OP

/* ------------------------------------------------------ type slots */

/* Value(data, _children, _op) with Values as children: a custom node
 * whose inputs are the children (micrograd's idiom for a new op; its rule
 * is the _backward assigned later, run by Python: tapead/custom.py).
 * Returns its id (its segment in *where, held once for the caller: the
 * temporary list of children is dropped after, and a child that dies with
 * it may run a finalizer that records and lets the tape reclaim) or -1
 * with an exception set. */
/* A custom node's name (a str, None or NULL: unnamed) as UTF-8, lone
 * surrogates kept ("surrogatepass"): *p and *n, valid while s lives and
 * *keep (a bytes object made for it, or NULL) is held. */
static int va_utf8(PyObject *s, PyObject **keep, const char **p, uint32_t *n)
{
    Py_ssize_t len;
    *keep = NULL;
    if (!s || s == Py_None) { *p = ""; *n = 0; return 0; }
    if (!(*p = PyUnicode_AsUTF8AndSize(s, &len))) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear();
        if (!(*keep = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass"))) return -1;
        *p = PyBytes_AS_STRING(*keep);
        len = PyBytes_GET_SIZE(*keep);
    }
    if ((size_t)len >= UINT32_MAX) {
        Py_CLEAR(*keep);
        PyErr_SetString(PyExc_ValueError, "a custom node's name must be shorter than 4 GiB");
        return -1;
    }
    *n = (uint32_t)len;
    return 0;
}

static int64_t va_custom(ta_tape *T, PyObject *children, PyObject *opname, double x, ta_seg **where,
                         PyObject **owner)
{
    PyObject *fast, *keep;
    Py_ssize_t n, k;
    uint32_t *in, m = 0, namelen;
    const char *name;
    int64_t id, key = 0;
    if (va_utf8(opname, &keep, &name, &namelen) < 0) return -1;
    if (!(fast = PySequence_Fast(children, "Value(data, _children, _op): _children must be an iterable of Values"))) {
        Py_XDECREF(keep);
        return -1;
    }
    n = PySequence_Fast_GET_SIZE(fast);
    if (n > (Py_ssize_t)(UINT32_MAX >> 3) || !(in = (uint32_t *)PyMem_Malloc((size_t)(n ? n : 1) * sizeof *in))) {
        Py_DECREF(fast); Py_XDECREF(keep); PyErr_NoMemory(); return -1;
    }
    for (k = 0; k < n; k++) {
        PyObject *c = PySequence_Fast_GET_ITEM(fast, k);
        ta_seg *cs;
        uint32_t co;
        if (!va_is(c)) {
            PyErr_Format(PyExc_TypeError, "Value(data, _children, _op): each child must be a Value, not %s",
                         Py_TYPE(c)->tp_name);
            goto fail;
        }
        if (!(cs = va_node(T, (va_obj *)c, &co))) goto fail;
        if (cs->tape != T) continue;               /* a no_grad value: a constant here */
        in[m++] = TA_REF(cs, co);
    }
    id = ta_custom_at(T, in, m, x, NULL, name, namelen, &key, TA_NOKEY, where);
    PyMem_Free(in);
    Py_XDECREF(keep);
    if (id < 0) { Py_DECREF(fast); va_fail((int)id); return -1; }
    ta_hold(*where);
    /* held: Python may run now.  Its owner: the join of the children's own
     * (the list still holds them), given to the Python side with the key */
    *owner = NULL;
    if (!key) { Py_DECREF(fast); return id; }     /* under no_grad: a plain value, no owner */
    {
        PyObject *up = NULL;
        if (va_join_items(fast, &up) == 0) *owner = vn_new((long long)key, up);
        Py_DECREF(fast);
        if (!*owner) { ta_unhold_seg(*where); return -1; }
    }
    return id;
fail:
    PyMem_Free(in);
    Py_DECREF(fast);
    Py_XDECREF(keep);
    return -1;
}

static int va_set_label(PyObject *self, PyObject *label)
{
    if (label && label != Py_None && PyObject_IsTrue(label)) {
        PyObject *r = PyObject_CallMethod(self, "_set_label", "O", label);
        if (!r) return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* Whether children counts as none (Value(data, children, ...) a leaf):
 * None, or a sized container with no items; by its length, not its truth
 * value, which a numpy array of Values has not; an iterator's items decide
 * later.  1, 0, or -1 with an exception set.  (tapead/custom.py:
 * no_children, the cffi front's.) */
static int va_no_children(PyObject *children)
{
    Py_ssize_t n;
    if (children == Py_None) return 1;
    if ((n = PyObject_Size(children)) >= 0) return n == 0;
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
    PyErr_Clear();
    return 0;
}

/* Value(data, children, local_grads) (or local_grads=): the node Python
 * makes (grads_value: precomputed's), which v takes over.  Python runs
 * before v changes, and v takes its own hold from the new Value, which
 * holds the node meanwhile. */
static int va_init_grads(va_obj *v, PyObject *data, PyObject *children, PyObject *third,
                         PyObject *grads, PyObject *label)
{
    PyObject *w, *f;
    double x;
    int moved;
    if (!va_grads_hook) { PyErr_SetString(PyExc_RuntimeError, "tapead: custom nodes are not set up"); return -1; }
    if (PyFloat_CheckExact(data)) x = PyFloat_AS_DOUBLE(data);
    else {
        if (!(f = PyObject_CallOneArg(va_real_hook, data))) return -1;
        x = PyFloat_AsDouble(f);
        Py_DECREF(f);
        if (x == -1.0 && PyErr_Occurred()) return -1;
    }
    w = PyObject_CallFunction(va_grads_hook, "dOOO", x, children ? children : Py_None,
                              third ? third : Py_None, grads ? grads : Py_None);
    if (!w) return -1;
    if (!Py_IS_TYPE(w, va_type) || !((va_obj *)w)->node) {
        PyErr_SetString(PyExc_RuntimeError, "tapead: the local_grads hook gave no Value");
        Py_DECREF(w);
        return -1;
    }
    ta_hold(VA_SEG(((va_obj *)w)->node));
    moved = v->node != 0;
    if (moved) ta_unhold_seg(VA_SEG(v->node));        /* __init__ called again */
    v->node = ((va_obj *)w)->node;
    if (moved && v->weaklist) ta_rebound();            /* (cdef.h: ta_rebinds) */
    va_set_own(v, VA_XNEWREF(((va_obj *)w)->own));
    Py_DECREF(w);
    return va_set_label((PyObject *)v, label);
}

static int va_init(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", "_children", "_op", "label", "local_grads", NULL};
    va_obj *v = (va_obj *)self;
    PyObject *data, *children = NULL, *opname = NULL, *label = NULL, *grads = NULL, *owner = NULL;
    ta_tape *T;
    ta_seg *where = NULL;
    double x;
    int64_t id;
    int moved;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOOO:Value", kwlist, &data, &children, &opname,
                                     &label, &grads))
        return -1;
    if (grads == Py_None) grads = NULL;
    if (grads || (opname && opname != Py_None && !PyUnicode_Check(opname)))
        return va_init_grads(v, data, children, opname, grads, label);
    if (children) {
        int t = va_no_children(children);
        if (t < 0) return -1;
        if (t) children = NULL;
    }
    if (PyFloat_CheckExact(data)) x = PyFloat_AS_DOUBLE(data);
    else {
        PyObject *f = PyObject_CallOneArg(va_real_hook, data);
        if (!f) return -1;
        x = PyFloat_AsDouble(f);
        Py_DECREF(f);
        if (x == -1.0 && PyErr_Occurred()) return -1;
    }
    if (!(T = va_tape())) return -1;
    if (children) {
        if ((id = va_custom(T, children, opname, x, &where, &owner)) < 0) return -1;   /* (held) */
    } else {
        id = ta_leaf_at(T, x, TA_NOKEY, &where);
        if (id < 0) { va_fail((int)id); return -1; }
        ta_hold(where);
    }
    moved = v->node != 0;
    if (moved) ta_unhold_seg(VA_SEG(v->node));        /* __init__ called again */
    v->node = (uintptr_t)where | TA_OFF((uint32_t)id);
    if (moved && v->weaklist) ta_rebound();            /* (cdef.h: ta_rebinds) */
    va_set_own(v, owner);
    return va_set_label(self, label);
}

static PyObject *va_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    va_obj *v = (va_obj *)tp->tp_alloc(tp, 0);
    (void)args; (void)kw;
    if (v) { v->node = 0; v->weaklist = NULL; v->own = NULL; }
    return (PyObject *)v;
}

/* Value(x) with one float or int: the leaf is made here, without tp_new
 * and tp_init's argument parsing (a third of a leaf's cost).  Every other
 * call, and every subclass, takes the ordinary route. */
static PyObject *va_vectorcall(PyObject *tp, PyObject *const *args, size_t nargsf, PyObject *kwn)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    PyObject *targs, *kw = NULL, *r;
    if (n == 1 && (!kwn || PyTuple_GET_SIZE(kwn) == 0) &&
        (PyFloat_CheckExact(args[0]) || PyLong_CheckExact(args[0]))) {
        ta_tape *T;
        ta_seg *where = NULL;
        double x = PyFloat_CheckExact(args[0]) ? PyFloat_AS_DOUBLE(args[0]) : PyLong_AsDouble(args[0]);
        int64_t id;
        PyObject *r;
        if (x == -1.0 && PyErr_Occurred()) return NULL;
        if (!(T = va_tape()) || !(r = va_blank())) return NULL;
        id = ta_leaf_at(T, x, TA_NOKEY, &where);
        return va_result(r, id, where, NULL);
    }
    if (n == 3 && (!kwn || PyTuple_GET_SIZE(kwn) == 0) && PyFloat_CheckExact(args[0]) &&
        PyUnicode_CheckExact(args[2]) && ((PyTuple_CheckExact(args[1]) && PyTuple_GET_SIZE(args[1])) ||
                                          (PyList_CheckExact(args[1]) && PyList_GET_SIZE(args[1])))) {
        /* Value(x, children, 'name'): micrograd's custom node, as va_init
         * makes it, without tp_new and tp_init's argument parsing */
        ta_tape *T;
        ta_seg *where = NULL;
        PyObject *own = NULL;
        int64_t id;
        if (!(T = va_tape()) || !(r = va_blank())) return NULL;
        /* (making r may have run a finalizer that emptied the list: then
         * it has no children, and the ordinary route makes a leaf) */
        if (PySequence_Fast_GET_SIZE(args[1]) > 0) {
            if ((id = va_custom(T, args[1], args[2], PyFloat_AS_DOUBLE(args[0]), &where, &own)) < 0) {
                Py_DECREF(r);
                return NULL;
            }
            ((va_obj *)r)->node = (uintptr_t)where | TA_OFF((uint32_t)id);   /* (held by va_custom) */
            va_set_own((va_obj *)r, own);
            return r;
        }
        Py_DECREF(r);
    }
    if (!(targs = PyTuple_New(n))) return NULL;
    for (Py_ssize_t k = 0; k < n; k++) { Py_INCREF(args[k]); PyTuple_SET_ITEM(targs, k, args[k]); }
    if (kwn && PyTuple_GET_SIZE(kwn)) {
        if (!(kw = PyDict_New())) { Py_DECREF(targs); return NULL; }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwn); k++)
            if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwn, k), args[n + k]) < 0) {
                Py_DECREF(targs); Py_DECREF(kw); return NULL;
            }
    }
    r = PyType_Type.tp_call(tp, targs, kw);
    Py_DECREF(targs); Py_XDECREF(kw);
    return r;
}

static void va_dealloc(PyObject *self);

/* The rest of a Value's dealloc, once it carries nothing. */
static void va_free_it(PyObject *self, PyTypeObject *tp)
{
    va_obj *v = (va_obj *)self;
    if (v->weaklist) PyObject_ClearWeakRefs(self);
    if (v->node) ta_unhold_seg(VA_SEG(v->node));
    if (!VA_KEEP(tp, v)) tp->tp_free(self);   /* (a kept one: PyObject_Init remakes it) */
    Py_DECREF(tp);
}

/* A Value that carries something frees it through the trashcan (a long
 * chain of own sets, rules and their Values frees without recursing); the
 * common one, which carries nothing, skips its cost. */
static void va_dealloc_owned(PyObject *self, PyTypeObject *tp)
{
    Py_TRASHCAN_BEGIN(self, va_dealloc)
    Py_CLEAR(((va_obj *)self)->own);
    va_free_it(self, tp);
    Py_TRASHCAN_END
}

static void va_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (((va_obj *)self)->own) va_dealloc_owned(self, tp);
    else va_free_it(self, tp);
}

/* The collector sees what a Value carries (own): a custom node's rule that
 * captures Values of its own graph, or a user attribute that holds them,
 * is then an ordinary cycle, freed as any other (tapead/custom.py). */
static int va_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((va_obj *)self)->own);
    Py_VISIT(Py_TYPE(self));                      /* (a heap type's instances visit it) */
    return 0;
}

static int va_clear(PyObject *self)
{
    Py_CLEAR(((va_obj *)self)->own);
    return 0;
}

/* v._o: what the Value carries (None: nothing); settable, for the Python
 * paths that make Values (tapead/custom.py: join, carry). */
static PyObject *va_get_own(PyObject *self, void *u)
{
    PyObject *o = ((va_obj *)self)->own;
    (void)u;
    return VA_NEWREF(o ? o : Py_None);
}

static int va_put_own(PyObject *self, PyObject *x, void *u)
{
    (void)u;
    if (!x) { PyErr_SetString(PyExc_AttributeError, "cannot delete a Value's _o"); return -1; }
    va_set_own((va_obj *)self, x == Py_None ? NULL : VA_NEWREF(x));
    return 0;
}

/* The key of v's node if it is a custom node of this thread's tape, else
 * 0 (no exception set). */
static long long va_key_of(va_obj *v)
{
    ta_tape *T = ta_self();
    ta_seg *s;
    uint32_t o;
    if (!T || !v->node) return 0;
    s = VA_SEG(v->node);
    o = VA_OFF(v->node);
    if (s->tape != T || (s->op[o] & TA_OPMASK) != TA_CUSTOM) return 0;
    return (long long)ta_cnode_of(T, s, o)->key;
}

static int va_set(PyObject *self, PyObject *x, void *what);

/* Is self's attribute name the Value type's own (self of the type, or of
 * a subclass that does not define it again)?  (Lookups are cached.) */
static int va_base_attr(PyObject *self, PyObject *name)
{
    PyTypeObject *tp = Py_TYPE(self);
    return tp == va_type || _PyType_Lookup(tp, name) == _PyType_Lookup(va_type, name);
}

/* Attributes: the type's own (data, grad, label, ...) as usual; any other
 * name set on a Value is the user's (v.name = 'x1', as on micrograd's
 * Value), which the setattr hook keeps with the node: a Value has no
 * __dict__.  Reads stay PyObject_GenericGetAttr, so
 * the interpreter's attribute and method caches still apply. */

static int va_setattro(PyObject *self, PyObject *name, PyObject *x)
{
    PyObject *r;
    vn_obj *o;
    if (x && (name == va_grad_name || name == va_data_name) && va_base_attr(self, name))
        return va_set(self, x, name == va_grad_name ? (void *)1 : NULL);   /* (as va_getset) */
    /* out._backward = rule on the custom node whose owner out carries (the
     * idiom's own line): the rule kept here; anything else (another node,
     * an error to raise, a subclass's own _backward) is the property's
     * (custom.set_backward) */
    if (name == vn_backward_name && x && (o = (vn_obj *)((va_obj *)self)->own) && Py_IS_TYPE(o, vn_type)) {
        Py_INCREF(o);                         /* (held: the lookups and the old rule's drop may run Python) */
        if (va_base_attr(self, name) && o->key == va_key_of((va_obj *)self) && PyCallable_Check(x)) {
            Py_INCREF(x);
            Py_XSETREF(o->rule, x);
            Py_DECREF(o);
            return 0;
        }
        Py_DECREF(o);
    }
    /* a name the type has (a getset, a property such as _backward) is the
     * type's to set, with its own errors; only other names are user data */
    if (!va_setattr_hook || !PyUnicode_Check(name) || _PyType_Lookup(Py_TYPE(self), name))
        return PyObject_GenericSetAttr(self, name, x);
    r = PyObject_CallFunction(va_setattr_hook, "OOOi", self, name, x ? x : Py_None, x == NULL);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* ------------------------------------------------------ getsets */

static PyObject *va_get(PyObject *self, void *what)
{
    ta_tape *T = va_tape();
    ta_seg *s;
    uint32_t o;
    if (!T || !(s = va_node(T, (va_obj *)self, &o))) return NULL;
    return PyFloat_FromDouble(what ? ta_adj_get(T, s, o) : s->val[o]);
}

static int va_set(PyObject *self, PyObject *x, void *what)
{
    ta_tape *T = va_tape();
    ta_seg *s;
    uint32_t o;
    double d;
    int st;
    if (!x) { PyErr_SetString(PyExc_AttributeError, "cannot delete a Value's data or grad"); return -1; }
    /* x first: its __float__ may run any Python (even re-initialise self),
     * so the node is looked up only after */
    if ((st = va_number(x, &d)) < 0) {
        if (st == -1) PyErr_Format(PyExc_TypeError, "a Value's %s must be a real number, not %s",
                                   what ? "grad" : "data", Py_TYPE(x)->tp_name);
        return -1;
    }
    if (!T || !(s = va_node(T, (va_obj *)self, &o))) return -1;
    if (what) ta_adj_put(T, s, o, d); else s->val[o] = d;
    return 0;
}

static int64_t va_id(va_obj *v)
{
    ta_seg *s = VA_SEG(v->node);
    return TA_ID(s->tape, TA_REF(s, VA_OFF(v->node)));
}

static PyObject *va_get_id(PyObject *self, void *u)
{
    va_obj *v = (va_obj *)self;
    (void)u;
    if (!v->node) return va_unmade();
    return PyLong_FromLongLong(va_id(v));
}

/* ------------------------------------------------------ methods */

/* The Value holds its node, so no id to resolve: a node of this thread's
 * tape (va_node), or of its no_grad arena, which has no graph. */
static PyObject *va_backward(PyObject *self, PyObject *u)
{
    ta_tape *T = va_tape();
    ta_seg *s;
    uint32_t o;
    int st;
    (void)u;
    if (!T || !(s = va_node(T, (va_obj *)self, &o))) return NULL;
    st = s->tape == T ? ta_backward_at(T, s, o) : TA_ENOGRAD;
    if (st != TA_OK) return va_fail_in(st, "backward");
    Py_RETURN_NONE;
}

/* pickle, copy.copy, copy.deepcopy: a detached leaf with the same data and
 * grad, read through the hold, so it works in any thread. */
static PyObject *va_reduce(PyObject *self, PyObject *u)
{
    va_obj *v = (va_obj *)self;
    ta_seg *s;
    (void)u;
    if (!v->node) return va_unmade();
    s = VA_SEG(v->node);
    if (Py_IS_TYPE(self, va_type))
        return Py_BuildValue("O(dd)", va_restore_hook, s->val[VA_OFF(v->node)], s->adj[VA_OFF(v->node)]);
    return Py_BuildValue("O(ddO)", va_restore_hook, s->val[VA_OFF(v->node)], s->adj[VA_OFF(v->node)],
                         (PyObject *)Py_TYPE(self));          /* a subclass stays one */
}

#define VA_MD_UN(NAME, PY) {PY, va_m_##NAME, METH_NOARGS, NULL},
#define VA_MD_LEAF(NAME, PY)
#define VA_MD_BIN(NAME, PY)
#define VA_MD_CST(NAME, PY)
#define VA_MD_NARY(NAME, PY)
static PyMethodDef va_methods[] = {
#define TA_OP(NAME, KIND, SYM, PY, ...) VA_MD_##KIND(NAME, PY)
#include "ops.def"
#undef TA_OP
    {"maximum", va_maximum, METH_O, NULL},
    {"minimum", va_minimum, METH_O, NULL},
    {"backward", va_backward, METH_NOARGS, NULL},
    {"__reduce__", va_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}
};
static PyGetSetDef va_getset[] = {
    {"data", va_get, va_set, NULL, NULL},
    {"grad", va_get, va_set, NULL, (void *)1},
    {"_i", va_get_id, NULL, "the node's id (tape tag << 32 | segment slot << 11 | offset)", NULL},
    {"_o", va_get_own, va_put_own, "what the Value carries for the collector (tapead/custom.py)", NULL},
    {NULL, NULL, NULL, NULL, NULL}
};

static PyMemberDef va_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(va_obj, weaklist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL}
};

/* ------------------------------------------------------ module */

/* make_type(docs): the Value type; docs maps method names ("data",
 * "relu", ...) to their docstrings, written once in engine.py. */
static char *va_doc_of(PyObject *docs, const char *name)
{
    PyObject *d = PyDict_GetItemString(docs, name);
    const char *s;
    char *copy;
    if (!d || !(s = PyUnicode_AsUTF8(d))) { PyErr_Clear(); return NULL; }
    copy = (char *)PyMem_Malloc(strlen(s) + 1);    /* a method's or getset's: lives as long as the type */
    if (copy) strcpy(copy, s);
    return copy;
}

static PyObject *va_make_type(PyObject *mod, PyObject *docs)
{
    PyType_Slot slots[] = {
        {Py_tp_dealloc, va_dealloc}, {Py_tp_new, va_new}, {Py_tp_init, va_init},
        {Py_tp_setattro, va_setattro}, {Py_tp_traverse, va_traverse}, {Py_tp_clear, va_clear},
        {Py_tp_methods, va_methods}, {Py_tp_getset, va_getset}, {Py_tp_members, va_members},
        {Py_nb_add, va_add}, {Py_nb_subtract, va_sub}, {Py_nb_multiply, va_mul},
        {Py_nb_true_divide, va_div}, {Py_nb_power, va_pow}, {Py_nb_negative, va_neg},
        {Py_nb_positive, va_pos}, {Py_nb_absolute, va_absolute},
        {Py_tp_doc, NULL}, {0, NULL}};
    PyType_Spec spec = {"tapead.engine.Value", sizeof(va_obj), 0,
                        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, slots};
    PyMethodDef *m;
    (void)mod;
    if (va_type) { Py_INCREF(va_type); return (PyObject *)va_type; }
    if (!PyDict_Check(docs)) { PyErr_SetString(PyExc_TypeError, "make_type needs a dict of docs"); return NULL; }
    if ((!va_data_name && !(va_data_name = PyUnicode_InternFromString("data"))) ||
        (!va_grad_name && !(va_grad_name = PyUnicode_InternFromString("grad"))))
        return NULL;
    for (m = va_methods; m->ml_name; m++) m->ml_doc = va_doc_of(docs, m->ml_name);
    va_getset[0].doc = va_doc_of(docs, "data");
    va_getset[1].doc = va_doc_of(docs, "grad");
    slots[17].pfunc = va_doc_of(docs, "Value");
    va_type = (PyTypeObject *)PyType_FromSpec(&spec);
    PyMem_Free(slots[17].pfunc);                 /* PyType_FromSpec keeps its own copy */
    if (!va_type) return NULL;
    va_type->tp_vectorcall = va_vectorcall;      /* not inherited: subclasses call normally */
    Py_INCREF(va_type);
    return (PyObject *)va_type;
}

static PyObject *va_set_hooks(PyObject *mod, PyObject *args)
{
    PyObject *e, *r, *s, *o, *a, *rule, *gr;
    (void)mod;
    if (!PyArg_ParseTuple(args, "OOOOOOO:set_hooks", &e, &r, &s, &o, &a, &rule, &gr)) return NULL;
    if (!PyCallable_Check(rule)) { PyErr_SetString(PyExc_TypeError, "rule hook must be callable"); return NULL; }
    Py_INCREF(e); Py_INCREF(r); Py_INCREF(s); Py_INCREF(o); Py_INCREF(a); Py_INCREF(rule);
    Py_INCREF(gr);
    Py_XSETREF(va_grads_hook, gr);
    Py_XSETREF(va_rule_fn, rule);
    ta_rule_hook = va_rule;
    Py_XSETREF(va_error_hook, e);
    Py_XSETREF(va_real_hook, r);
    Py_XSETREF(va_restore_hook, s);
    Py_XSETREF(va_other_hook, o);
    Py_XSETREF(va_setattr_hook, a);
    Py_RETURN_NONE;
}

/* adopt(h, n, own=None): Values for the first n ids of the held list h
 * (cdef.h: a buffer over it), each taking over its id's hold in this one
 * call, and each carrying own (the join of what the call's inputs carry).
 * If it fails midway, the holds not yet taken stay in h, which drops them. */
static PyObject *va_adopt(PyObject *mod, PyObject *args)
{
    ta_tape *T = va_tape();
    Py_buffer view;
    Py_ssize_t n, k;
    int64_t *h, cap;
    PyObject *out = NULL, *own = Py_None;
    (void)mod;
    if (!T) return NULL;
    if (!PyArg_ParseTuple(args, "w*n|O:adopt", &view, &n, &own)) return NULL;
    if (own == Py_None) own = NULL;
    h = (int64_t *)view.buf;
    cap = view.len >= (Py_ssize_t)sizeof *h ? h[0] : -1;
    if (cap < 0 || n < 0 || n > cap || (view.len - (Py_ssize_t)sizeof *h) / 2 / (Py_ssize_t)sizeof *h < cap) {
        PyErr_SetString(PyExc_ValueError, "adopt needs a held list (cdef.h) and a count within it");
        goto done;
    }
    if (!(out = PyList_New(n))) goto done;
    for (k = 0; k < n; k++) {
        int64_t *segp = &h[1 + cap + k];
        ta_seg *s; uint32_t o; int ng, st;
        PyObject *v;
        /* the Value first (making it may run Python), then its node */
        if (!(v = va_blank())) goto fail;
        PyList_SET_ITEM(out, k, v);
        if ((st = ta_resolve_any(T, h[1 + k], &s, &o, &ng)) != TA_OK) { va_fail(st); goto fail; }
        if ((int64_t)(intptr_t)s != *segp) {
            PyErr_SetString(PyExc_ValueError, "adopt: an entry of the list does not hold its node");
            goto fail;
        }
        ((va_obj *)v)->node = (uintptr_t)s | o;
        *segp = 0;                             /* the list's hold is the Value's now */
        if (own) va_set_own((va_obj *)v, VA_NEWREF(own));
    }
    goto done;
fail:
    Py_CLEAR(out);                              /* Values made so far drop their own holds */
done:
    PyBuffer_Release(&view);
    return out;
}

/* ---------------------------------------------- custom nodes (custom.c) */

/* custom_key(v): the key of v's custom node (0: one of partials), or None
 * if v's node is not one (tapead/custom.py: set_backward's fast path). */
static PyObject *va_custom_key(PyObject *mod, PyObject *v)
{
    ta_tape *T = va_tape();
    ta_seg *s;
    uint32_t o;
    (void)mod;
    if (!T) return NULL;
    if (!va_is(v)) { PyErr_SetString(PyExc_TypeError, "custom_key needs a Value"); return NULL; }
    if (!(s = va_node(T, (va_obj *)v, &o))) return NULL;
    if (s->tape != T || (s->op[o] & TA_OPMASK) != TA_CUSTOM) Py_RETURN_NONE;
    return PyLong_FromLongLong((long long)ta_cnode_of(T, s, o)->key);
}

/* custom_info(v): (key, name, (input ids...)) of v's custom node, or
 * None if v's node is not one (tapead/custom.py: the cffi front's info()). */
static PyObject *va_custom_info(PyObject *mod, PyObject *v)
{
    ta_tape *T = va_tape();
    ta_seg *s;
    uint32_t o, k, n, namelen;
    const ta_cnode *e;
    int64_t key, *ids;
    char *name;
    PyObject *ins, *nm, *r = NULL;
    (void)mod;
    if (!T) return NULL;
    if (!va_is(v)) { PyErr_SetString(PyExc_TypeError, "custom_info needs a Value"); return NULL; }
    if (!(s = va_node(T, (va_obj *)v, &o))) return NULL;
    if (s->tape != T || (s->op[o] & TA_OPMASK) != TA_CUSTOM) Py_RETURN_NONE;
    /* the entry is copied out before any Python object is made: making one
     * may run a finalizer that records (the side table then moves) */
    e = ta_cnode_of(T, s, o);
    n = e->n; namelen = e->namelen; key = e->key;
    ids = (int64_t *)PyMem_Malloc((size_t)(n ? n : 1) * sizeof *ids);
    name = (char *)PyMem_Malloc((size_t)namelen + 1);
    if (!ids || !name) { PyMem_Free(ids); PyMem_Free(name); return PyErr_NoMemory(); }
    for (k = 0; k < n; k++) ids[k] = TA_ID(T, e->in[k]);
    memcpy(name, e->name, namelen);
    nm = PyUnicode_DecodeUTF8(name, (Py_ssize_t)namelen, "surrogatepass");
    PyMem_Free(name);
    if (!nm) { PyMem_Free(ids); return NULL; }
    if ((ins = PyTuple_New(n)) != NULL) {
        for (k = 0; k < n; k++) {
            PyObject *i = PyLong_FromLongLong((long long)ids[k]);
            if (!i) { Py_CLEAR(ins); break; }
            PyTuple_SET_ITEM(ins, k, i);
        }
    }
    PyMem_Free(ids);
    if (ins) r = Py_BuildValue("(LNN)", (long long)key, nm, ins);
    else Py_DECREF(nm);
    return r;
}

/* precomputed(value, inputs, partials, name id): tapead.precomputed on the
 * native front, arguments already checked by Python (floats, Values, equal
 * lengths), so only their types are verified here. */
static PyObject *va_precomputed(PyObject *mod, PyObject *args)
{
    ta_tape *T = va_tape();
    PyObject *ins, *ps, *nm, *keep = NULL, *r = NULL, *own = NULL;
    double x, *d = NULL;
    const char *name;
    uint32_t *in = NULL, m = 0, namelen;
    Py_ssize_t n, k;
    ta_seg *where = NULL;
    int64_t id;
    (void)mod;
    if (!T) return NULL;
    if (!PyArg_ParseTuple(args, "dO!O!U:precomputed", &x, &PyList_Type, &ins, &PyList_Type, &ps, &nm))
        return NULL;
    /* what may run Python first (the join, the result, the name), then
     * the inputs are read (a finalizer may have re-initialised them) */
    if (va_join_items(ins, &own) < 0) return NULL;
    if (!(r = va_blank())) goto out;
    if (va_utf8(nm, &keep, &name, &namelen) < 0) goto out;
    n = PyList_GET_SIZE(ins);
    if (PyList_GET_SIZE(ps) != n || n > (Py_ssize_t)(UINT32_MAX >> 4)) {
        PyErr_SetString(PyExc_ValueError, "precomputed needs one partial per input"); goto out;
    }
    in = (uint32_t *)PyMem_Malloc((size_t)(n ? n : 1) * sizeof *in);
    d = (double *)PyMem_Malloc((size_t)(n ? n : 1) * sizeof *d);
    if (!in || !d) { PyErr_NoMemory(); goto out; }
    for (k = 0; k < n; k++) {
        PyObject *c = PyList_GET_ITEM(ins, k), *p = PyList_GET_ITEM(ps, k);
        ta_seg *cs;
        uint32_t co;
        if (!va_is(c) || !PyFloat_Check(p)) {
            PyErr_SetString(PyExc_TypeError, "precomputed: inputs must be Values and partials floats");
            goto out;
        }
        if (!(cs = va_node(T, (va_obj *)c, &co))) goto out;
        if (cs->tape != T) continue;               /* a no_grad value: a constant here */
        d[m] = PyFloat_AS_DOUBLE(p);
        in[m++] = TA_REF(cs, co);
    }
    id = ta_custom_at(T, in, m, x, d, name, namelen, NULL, TA_NOKEY, &where);
    PyMem_Free(in); PyMem_Free(d);
    Py_XDECREF(keep);
    return va_result(r, id, where, own);
out:
    PyMem_Free(in); PyMem_Free(d);
    Py_XDECREF(keep);
    Py_XDECREF(r);
    Py_XDECREF(own);
    return NULL;
}

/* ------------------------------------ dot and linear (nn.c, tapead/dots.py)
 *
 * tapead.dot(ws, xs) and tapead.linear(x, W) for the common case: lists or
 * tuples of this thread's Values and floats or small ints, every row's
 * first term with a Value, outside no_grad and detect_anomaly.  They read
 * the operands straight from the sequences (no ids, no arrays made in
 * Python) and record through the core the cffi front uses (nn.h).  Any
 * other call -- errors, no_grad Values, a plain-number first term, ints
 * beyond 2**53, other types, the node limit -- goes to tapead/dots.py,
 * which defines the semantics and the messages once for both fronts. */
static PyObject *va_dot_py = NULL, *va_linear_py = NULL;   /* dots.py's _dot, _linear */

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
    if (!fn) { PyErr_SetString(PyExc_RuntimeError, "tapead.dots is not loaded"); return NULL; }
    return PyObject_Vectorcall(fn, args, (size_t)nargs, NULL);
}

static PyObject *va_dot(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    ta_tape *T = ta_self();
    int64_t sid[2 * VA_DOT_STACK], *id = sid, out;
    double sc[2 * VA_DOT_STACK], *c = sc, c0 = 0.0;
    uint32_t from = 0;
    Py_ssize_t n;
    PyObject *r = NULL, *own = NULL;
    ta_sums S;
    int done = 0;
    (void)mod;
    if (nargs != 2 || !T || T->nograd || T->anomaly || (n = va_len(args[0])) <= 0 ||
        n > (Py_ssize_t)UINT32_MAX || va_len(args[1]) != n)
        return va_slow(va_dot_py, args, nargs);
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
    if (done == 0 && !PyErr_Occurred()) return va_slow(va_dot_py, args, nargs);
    return r;
}

static PyObject *va_linear(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
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
    (void)mod;
    if (nargs != 2 || !T || T->nograd || T->anomaly || (nin = va_len(args[0])) <= 0 ||
        (nout = va_len(args[1])) <= 0 || (uint64_t)nin * (uint64_t)nout > UINT32_MAX)
        return va_slow(va_linear_py, args, nargs);
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
    if (done == 0 && !PyErr_Occurred()) return va_slow(va_linear_py, args, nargs);
    return r;
}

/* owners(tape, every, tl): the owner type (vn_obj), owners kept in the
 * map tape().owners (tapead/_c: the Tape of this thread's tape; every(Tape,
 * tape nodes) runs at each 64th owner made), what a rule raises kept in
 * tl.custom_exc: tapead/custom.py's, which binds them once. */
static PyObject *va_owners(PyObject *mod, PyObject *args)
{
    static PyType_Slot slots[] = {
        {Py_tp_dealloc, vn_dealloc}, {Py_tp_traverse, vn_traverse}, {Py_tp_clear, vn_clear},
        {Py_tp_members, vn_members},
        {Py_tp_doc, (void *)"A custom node's owner: its rule, what its inputs carried, its key (tapead/custom.py)."},
        {0, NULL}};
    static PyType_Spec spec = {"tapead.custom.Node", sizeof(vn_obj), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, slots};
    PyObject *tape, *every, *tl;
    (void)mod;
    if (!PyArg_ParseTuple(args, "OOO:owners", &tape, &every, &tl)) return NULL;
    if (!PyCallable_Check(tape) || !PyCallable_Check(every)) {
        PyErr_SetString(PyExc_TypeError, "owners needs two callables"); return NULL;
    }
    if (!vn_owners_name && !(vn_owners_name = PyUnicode_InternFromString("owners"))) return NULL;
    if (!vn_backward_name && !(vn_backward_name = PyUnicode_InternFromString("_backward"))) return NULL;
    if (!vn_exc_name && !(vn_exc_name = PyUnicode_InternFromString("custom_exc"))) return NULL;
    if (!vn_type && !(vn_type = (PyTypeObject *)PyType_FromSpec(&spec))) return NULL;
    Py_INCREF(tape); Py_INCREF(every); Py_INCREF(tl);
    Py_XSETREF(vn_tl, tl);
    Py_XSETREF(vn_tape_fn, tape);
    Py_XSETREF(vn_every, every);
    return VA_NEWREF(vn_type);
}

/* tape_tag(): ta_tape_tag() (cdef.h) without cffi in the way: tapead._c's
 * tape() asks it at every lookup of the Python side of this thread's tape. */
static PyObject *va_tape_tag(PyObject *mod, PyObject *u)
{
    int64_t tag = ta_tape_tag();
    (void)mod; (void)u;
    return tag < 0 ? va_fail((int)tag) : PyLong_FromLongLong((long long)tag);
}

/* dots(dot, linear): the fast dot and linear, falling back to the given
 * Python functions (whose docstrings they take). */
static PyObject *va_dots(PyObject *mod, PyObject *args)
{
    static PyMethodDef defs[] = {
        {"dot", (PyCFunction)(void (*)(void))va_dot, METH_FASTCALL, NULL},
        {"linear", (PyCFunction)(void (*)(void))va_linear, METH_FASTCALL, NULL},
    };
    PyObject *d, *l, *dd = NULL, *ld = NULL, *docs, *r = NULL;
    if (!PyArg_ParseTuple(args, "OO:dots", &d, &l)) return NULL;
    if (!PyCallable_Check(d) || !PyCallable_Check(l)) {
        PyErr_SetString(PyExc_TypeError, "dots needs two callables"); return NULL;
    }
    if (!(docs = PyDict_New())) return NULL;
    if (!(dd = PyObject_GetAttrString(d, "__doc__")) || !(ld = PyObject_GetAttrString(l, "__doc__")) ||
        PyDict_SetItemString(docs, "dot", dd) < 0 || PyDict_SetItemString(docs, "linear", ld) < 0)
        goto done;
    if (!defs[0].ml_doc) defs[0].ml_doc = va_doc_of(docs, "dot");   /* never freed: as the type's */
    if (!defs[1].ml_doc) defs[1].ml_doc = va_doc_of(docs, "linear");
    Py_INCREF(d); Py_INCREF(l);
    Py_XSETREF(va_dot_py, d);
    Py_XSETREF(va_linear_py, l);
    r = Py_BuildValue("(NN)", PyCFunction_New(&defs[0], mod), PyCFunction_New(&defs[1], mod));
done:
    Py_XDECREF(dd); Py_XDECREF(ld);
    Py_DECREF(docs);
    return r;
}

static PyMethodDef va_module_methods[] = {
    {"custom_info", va_custom_info, METH_O, "custom_info(v): (key, name, inputs) or None"},
    {"custom_key", va_custom_key, METH_O, "custom_key(v): the key of v's custom node, or None"},
    {"precomputed", va_precomputed, METH_VARARGS, "precomputed(value, inputs, partials, name)"},
    {"make_type", va_make_type, METH_O, "make_type(docs): the native Value type"},
    {"set_hooks", va_set_hooks, METH_VARARGS, "set_hooks(error, real, restore, other, setattr, rule, grads)"},
    {"owners", va_owners, METH_VARARGS, "owners(tape, every, tl): the owner type"},
    {"tape_tag", va_tape_tag, METH_NOARGS, "tape_tag(): the tag of this thread's tape"},
    {"adopt", va_adopt, METH_VARARGS, "adopt(h, n, own=None): Values taking over the holds of a held list"},
    {"dots", va_dots, METH_VARARGS, "dots(dot, linear): the fast tapead.dot and tapead.linear"},
    {"program_box", vp_box_type, METH_NOARGS, "program_box(): the type of a Program's box (native_prog.c)"},
    {"run", (PyCFunction)(void (*)(void))vp_run, METH_FASTCALL,
     "run(box, X, B, nin, Y, nout, seed, seedmode, G, nwrt, per_sample, parts, nblocks, params, npar, "
     "threads): a Program's call (native_prog.c)"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef va_module = {
    PyModuleDef_HEAD_INIT, "tapead._native", "The native front (csrc/native.c).", -1,
    va_module_methods, NULL, NULL, NULL, NULL};

/* Called through cffi (the GIL released): puts the module tapead._native
 * into sys.modules.  TA_OK, or TA_ENOMEM if that failed. */
int ta_native_install(void)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *m, *mods;
    int st = TA_ENOMEM;
    if ((m = PyModule_Create(&va_module)) != NULL) {
#ifdef Py_GIL_DISABLED
        /* as cffi declares the module that holds this code: the shared
         * state here is set once at import (the type, the hooks), the
         * free list is compiled out, and every tape is its thread's own */
        PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
#endif
        if ((mods = PyImport_GetModuleDict()) && PyDict_SetItemString(mods, "tapead._native", m) == 0)
            st = TA_OK;
        Py_DECREF(m);
    }
    if (st != TA_OK) PyErr_Clear();
    PyGILState_Release(g);
    return st;
}

#endif
