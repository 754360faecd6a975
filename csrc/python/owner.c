/* owner.c: custom nodes on the CPython front.  The owner type (vn_obj,
 * the CPython front's tapead/custom.py _Node), made, registered in its tape's map
 * and run from C; Value(data, _children, _op) and Value(data, children,
 * local_grads) as the Value's __init__ makes them; out._backward = rule
 * kept without a Python call; the rule hook the reverse sweep calls
 * (va_rule, through custom.c's ta_rule_hook); and the module's custom-node
 * functions (custom_key, custom_info, precomputed).  value.h: the front's
 * contract. */
#ifndef TA_NO_CPYTHON
#include "value.h"
#include <structmember.h>
#include <string.h>
#include "custom.h"

/* An exception from a rule that could not be kept with the thread (no
 * memory; va_rule): kept here until backward() raises it (va_fail_in).
 * One a thread: the sweep that calls the rule and the backward() that
 * raises what it kept run on the same thread (a sweep through cffi runs
 * without the GIL, so another thread's rule can fail meanwhile). */
static TA_TLS PyObject *va_rule_exc = NULL;

/* ------------------------------------------------------ owners */

/* A custom node's owner, the CPython front's tapead/custom.py _Node (the
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

PyTypeObject *vn_type = NULL;
/* names, interned: "_backward" (value.c's setattro compares it by
 * identity), the Tape's "owners" and the thread-local's "custom_exc" */
PyObject *vn_backward_name = NULL;
static PyObject *vn_owners_name = NULL, *vn_exc_name = NULL;

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

/* The owner type and the names used here (bind: once). */
int vn_make_type(void)
{
    static PyType_Slot slots[] = {
        {Py_tp_dealloc, vn_dealloc}, {Py_tp_traverse, vn_traverse}, {Py_tp_clear, vn_clear},
        {Py_tp_members, vn_members},
        {Py_tp_doc, (void *)"A custom node's owner: its rule, what its inputs carried, its key (tapead/custom.py)."},
        {0, NULL}};
    static PyType_Spec spec = {"tapead.custom.Node", sizeof(vn_obj), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, slots};
    if (!vn_owners_name && !(vn_owners_name = PyUnicode_InternFromString("owners"))) return -1;
    if (!vn_backward_name && !(vn_backward_name = PyUnicode_InternFromString("_backward"))) return -1;
    if (!vn_exc_name && !(vn_exc_name = PyUnicode_InternFromString("custom_exc"))) return -1;
    if (!vn_type && !(vn_type = (PyTypeObject *)PyType_FromSpec(&spec))) return -1;
    return 0;
}

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
    if (!(t = PyObject_CallNoArgs(VA_HOOK(tape)))) return NULL;
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
            PyObject *r = PyObject_CallFunction(VA_HOOK(every), "OL", t, T ? (long long)T->nodes : -1LL);
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
    if (!VA_HOOK(tape) || !(d = vn_map(NULL))) { PyErr_Clear(); return NULL; }
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

int va_rule(int64_t node, int64_t key)
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
        if (a[0] && a[1] && (r = PyObject_Vectorcall(VA_HOOK(rule), a, 2, NULL)) != NULL) {
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
        if (v && PyObject_SetAttr(VA_HOOK(tl), vn_exc_name, v) == 0) Py_CLEAR(v);
        else PyErr_Clear();
        if (v) Py_XSETREF(va_rule_exc, v);
        Py_XDECREF(t); Py_XDECREF(tb);
        rc = -1;
    }
    PyGILState_Release(g);
    return rc;
}

/* Raise the exception va_rule kept here (backward(): va_fail_in). */
int vn_raise_kept(void)
{
    PyObject *e = va_rule_exc;
    if (!e) return 0;
    va_rule_exc = NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(e), e);
    Py_DECREF(e);
    return 1;
}

/* ------------------------------------------- making custom nodes */

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

/* Value(data, _children, _op) with Values as children: a custom node
 * whose inputs are the children (micrograd's idiom for a new op; its rule
 * is the _backward assigned later, run by Python: tapead/custom.py).
 * Returns its id (its segment in *where, held once for the caller: the
 * temporary list of children is dropped after, and a child that dies with
 * it may run a finalizer that records and lets the tape reclaim) or -1
 * with an exception set. */
int64_t va_custom(ta_tape *T, PyObject *children, PyObject *opname, double x, ta_seg **where,
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

/* Whether children counts as none (Value(data, children, ...) a leaf):
 * None, or a sized container with no items; by its length, not its truth
 * value, which a numpy array of Values has not; an iterator's items decide
 * later.  1, 0, or -1 with an exception set.  (tapead/custom.py:
 * no_children, the cffi front's.) */
int va_no_children(PyObject *children)
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
int va_init_grads(va_obj *v, PyObject *data, PyObject *children, PyObject *third,
                  PyObject *grads)
{
    PyObject *w, *f;
    double x;
    int moved;
    if (PyFloat_CheckExact(data)) x = PyFloat_AS_DOUBLE(data);
    else {
        if (!(f = PyObject_CallOneArg(VA_HOOK(real), data))) return -1;
        x = PyFloat_AsDouble(f);
        Py_DECREF(f);
        if (x == -1.0 && PyErr_Occurred()) return -1;
    }
    w = PyObject_CallFunction(VA_HOOK(grads), "dOOO", x, children ? children : Py_None,
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

int vn_set_rule(va_obj *v, PyObject *x)
{
    vn_obj *o = (vn_obj *)v->own;
    if (!Py_IS_TYPE(o, vn_type)) return 0;
    Py_INCREF(o);                         /* (held: the old rule's drop may run Python) */
    if (o->key != va_key_of(v) || !PyCallable_Check(x)) { Py_DECREF(o); return 0; }
    Py_INCREF(x);
    Py_XSETREF(o->rule, x);
    Py_DECREF(o);
    return 1;
}

/* ------------------------------------------- the module's functions */

/* custom_key(v): the key of v's custom node (0: one of partials), or None
 * if v's node is not one (tapead/custom.py: set_backward's fast path). */
PyObject *va_custom_key(PyObject *mod, PyObject *v)
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

/* custom_info(v): (key, name, (input ids...)) of v's n-ary node (a custom
 * node, or a take node: key 0, no name), or None if v's node is not one
 * (tapead/custom.py: the cffi front's info()). */
PyObject *va_custom_info(PyObject *mod, PyObject *v)
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
    if (s->tape != T || ta_kinds[s->op[o] & TA_OPMASK] != TA_K_NARY) Py_RETURN_NONE;
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
 * CPython front, arguments already checked by Python (floats, Values, equal
 * lengths), so only their types are verified here. */
PyObject *va_precomputed(PyObject *mod, PyObject *args)
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

#endif
