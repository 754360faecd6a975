/* value.c: the CPython front's Value type (value.h: the front's files and
 * their contract).  Its number slots and unary methods record on the
 * calling thread's tape through ta_record_at, the same function the cffi
 * front reaches through ta_op1/ta_op2/ta_opc, so the two fronts share
 * every rule of the ops.  What is not hot (comparisons, _prev, repr,
 * labels, ...) is written once in Python (tapead/engine.py) and assigned
 * onto this type; errors are made by the Python function that makes the
 * cffi front's (the error hook), so their types and messages are the same
 * on both fronts.  A custom node's parts (Value(data, _children, _op),
 * local_grads, out._backward = rule) are owner.c's. */
#ifndef TA_NO_CPYTHON
#include "value.h"
#include <structmember.h>
#include <string.h>
#include "ops.h"
#include "custom.h"

PyTypeObject *va_type = NULL;
PyObject *va_hooks[VA_NHOOKS];             /* (module.c: bind) */
/* "data" and "grad", interned: v.grad += x in a rule sets without a lookup (va_setattro) */
static PyObject *va_data_name = NULL, *va_grad_name = NULL;

/* ------------------------------------------------------------ errors */

PyObject *va_fail_in(int st, const char *sweep)
{
    PyObject *e;
    if (st == TA_EPYTHON && vn_raise_kept()) return NULL;   /* what escaped the rule hook (va_rule) */
    if (!VA_HOOK(error)) { PyErr_Format(PyExc_RuntimeError, "tapead status %d", st); return NULL; }
    e = PyObject_CallFunction(VA_HOOK(error), "is", st, sweep);
    if (e) { PyErr_SetObject((PyObject *)Py_TYPE(e), e); Py_DECREF(e); }
    return NULL;
}

PyObject *va_fail(int st) { return va_fail_in(st, ""); }

static PyObject *va_unmade(void)
{
    PyErr_SetString(PyExc_TypeError,
                    "this Value was never initialised (made without calling Value(x)): it has no node");
    return NULL;
}

/* The node of Value v on this thread's tape T, or NULL with an exception
 * set (a Value never initialised; a Value of another thread). */
ta_seg *va_node(ta_tape *T, va_obj *v, uint32_t *off)
{
    ta_seg *s;
    if (!v->node) { va_unmade(); return NULL; }
    s = VA_SEG(v->node);
    if (s->tape->root != T) { va_fail(TA_ETHREAD); return NULL; }
    *off = VA_OFF(v->node);
    return s;
}

ta_tape *va_tape(void)
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
PyObject *va_blank(void)
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
void va_set_own(va_obj *v, PyObject *own)
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
int va_join_items(PyObject *seq, PyObject **acc)
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

/* Is o a Value?  Exact floats and ints, the commonest other operands, are
 * told apart before the walk over o's class hierarchy. */
int va_is(PyObject *o)
{
    if (Py_IS_TYPE(o, va_type)) return 1;
    if (PyFloat_CheckExact(o) || PyLong_CheckExact(o)) return 0;
    return PyObject_TypeCheck(o, va_type);
}

/* A plain-number operand as a double: what cffi accepts for a double on
 * the cffi front (PyFloat_AsDouble), less complex numbers and arrays
 * (engine._real, through VA_HOOK(real)).  Returns 0,
 * or -1 if o is no number (TypeError cleared: the caller answers
 * NotImplemented), or -2 with another exception set. */
static int va_number(PyObject *o, double *c)
{
    PyObject *f;
    if (PyFloat_CheckExact(o)) { *c = PyFloat_AS_DOUBLE(o); return 0; }
    if (!PyFloat_Check(o) && !PyLong_Check(o) && VA_HOOK(real)) {
        /* any other type (numpy's non-float64 scalars, Fraction, Decimal):
         * the Python rule of what a real number is (engine._real), which
         * refuses complex numbers (numpy's complex64 too: its __float__
         * would drop the imaginary part) and arrays */
        if (!(f = PyObject_CallOneArg(VA_HOOK(real), o))) {
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
    if (!VA_HOOK(other)) Py_RETURN_NOTIMPLEMENTED;
    return PyObject_CallFunction(VA_HOOK(other), "OOi", a, b, opv);
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

static int va_set_label(PyObject *self, PyObject *label)
{
    if (label && label != Py_None && PyObject_IsTrue(label)) {
        PyObject *r = PyObject_CallMethod(self, "_set_label", "O", label);
        if (!r) return -1;
        Py_DECREF(r);
    }
    return 0;
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
        return va_init_grads(v, data, children, opname, grads) < 0 ? -1 : va_set_label(self, label);
    if (children) {
        int t = va_no_children(children);
        if (t < 0) return -1;
        if (t) children = NULL;
    }
    if (PyFloat_CheckExact(data)) x = PyFloat_AS_DOUBLE(data);
    else {
        PyObject *f = PyObject_CallOneArg(VA_HOOK(real), data);
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
    if (x && (name == va_grad_name || name == va_data_name) && va_base_attr(self, name))
        return va_set(self, x, name == va_grad_name ? (void *)1 : NULL);   /* (as va_getset) */
    /* out._backward = rule on the custom node whose owner out carries (the
     * idiom's own line): the rule kept here; anything else (another node,
     * an error to raise, a subclass's own _backward) is the property's
     * (custom.set_backward) */
    if (name == vn_backward_name && x && ((va_obj *)self)->own && va_base_attr(self, name) &&
        vn_set_rule((va_obj *)self, x))
        return 0;
    /* a name the type has (a getset, a property such as _backward) is the
     * type's to set, with its own errors; only other names are user data */
    if (!VA_HOOK(setattr) || !PyUnicode_Check(name) || _PyType_Lookup(Py_TYPE(self), name))
        return PyObject_GenericSetAttr(self, name, x);
    r = PyObject_CallFunction(VA_HOOK(setattr), "OOOi", self, name, x ? x : Py_None, x == NULL);
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
        return Py_BuildValue("O(dd)", VA_HOOK(restore), s->val[VA_OFF(v->node)], s->adj[VA_OFF(v->node)]);
    return Py_BuildValue("O(ddO)", VA_HOOK(restore), s->val[VA_OFF(v->node)], s->adj[VA_OFF(v->node)],
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

/* ------------------------------------------------------ the type */

/* make_type(docs): the Value type; docs maps method names ("data",
 * "relu", ...) to their docstrings, written once in engine.py. */
char *va_doc_of(PyObject *docs, const char *name)
{
    PyObject *d = PyDict_GetItemString(docs, name);
    const char *s;
    char *copy;
    if (!d || !(s = PyUnicode_AsUTF8(d))) { PyErr_Clear(); return NULL; }
    copy = (char *)PyMem_Malloc(strlen(s) + 1);    /* a method's or getset's: lives as long as the type */
    if (copy) strcpy(copy, s);
    return copy;
}

PyObject *va_make_type(PyObject *mod, PyObject *docs)
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

/* adopt(h, n, own=None): Values for the first n ids of the held list h
 * (cdef.h: a buffer over it), each taking over its id's hold in this one
 * call, and each carrying own (the join of what the call's inputs carry).
 * If it fails midway, the holds not yet taken stay in h, which drops them. */
PyObject *va_adopt(PyObject *mod, PyObject *args)
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

#endif
