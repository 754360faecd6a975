/* value.h: what the files of the CPython front share.
 *
 *   value.c    the Value type: making Values, their ops, slots and methods
 *   owner.c    custom nodes on this front: the owner type, Value(data,
 *              _children, _op) and local_grads, precomputed, the rule call
 *   dots.c     tapead.dot and tapead.linear's common case
 *   module.c   the module tapead._cpython: its functions, bind, install
 *
 * THE CONTRACT OF THESE FILES.  They and program_call.c (a Program's call)
 * are the only C files that include Python.h; the core never calls them,
 * except through one function pointer, ta_rule_hook (custom.c), which
 * bind sets.  Every function cdef.h declares is called by cffi with the
 * GIL released, so no such function may touch a Python object: the one
 * here, ta_cpython_install, takes the GIL itself, and so does va_rule,
 * which the reverse sweep calls (from ta_backward through cffi, the GIL
 * released, or from Value.backward, the GIL held).  Everything else runs
 * with the GIL held (slots and methods are called by the interpreter).
 * On a free-threaded CPython there is no GIL: nothing here may then share
 * mutable state between threads (the free list and the owner map's cache
 * are compiled out; the rest is set once, at import).
 *
 * PyPy builds (TA_NO_CPYTHON) leave all of this out: there the cffi front
 * is the fast one, and ta_cpython_install reports that it has none. */
#ifndef TAPEAD_VALUE_H
#define TAPEAD_VALUE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>               /* first, as the C-API docs require */
#include "tapead.h"

/* A Value is a heap GC type of 40 bytes: the object header, its node
 * packed into one word (segment | offset: segments are TA_SEG_ALIGN-
 * aligned), the weak-reference list, and own, what it carries for the
 * collector (a custom node's Python side: tapead/custom.py), tracked only
 * while set.  Making a Value holds its node's segment in the same C call
 * that records the node; tp_dealloc drops the hold (tapead.h: holds). */
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

/* The Python this front calls, bound by name in one call (module.c:
 * bind), which checks that each name below is given, and no other:
 * X(name, 1 if it must be callable). */
#define VA_HOOKS(X)                                                            \
    X(error, 1)    /* error(status, sweep) -> the exception to raise           \
                      (engine.error: both fronts' types and messages) */       \
    X(real, 1)     /* real(x) -> float, or TypeError: what a real number is    \
                      (engine._real) */                                        \
    X(restore, 1)  /* restore(data, grad[, type]) -> a detached Value (pickle) */ \
    X(other, 1)    /* other(a, b, op) -> a op b when one of them is no number  \
                      (numpy arrays), else NotImplemented */                   \
    X(setattr, 1)  /* setattr(v, name, x, delete) -> a user attribute, kept    \
                      with the node (nodedata.set_attr) */                     \
    X(rule, 1)     /* rule(node, key) -> 0, or -1 having kept what it caught:  \
                      custom.ta_custom_rule, where owner.c finds no owner */   \
    X(grads, 1)    /* grads(data, children, third, local_grads) -> a Value     \
                      whose node has those partials (custom.grads_value) */    \
    X(tape, 1)     /* tape() -> this thread's Tape (tapead._c.tape), whose     \
                      .owners maps a key to its owner's weak reference */      \
    X(every, 1)    /* every(Tape, tape nodes): what each 64th owner made does  \
                      (custom._every) */                                       \
    X(tl, 0)       /* where a rule's exception waits for backward()            \
                      (custom._tl, its .custom_exc) */

/* What the files share is hidden from outside the library (not
 * interposable), so each file's calls to its own functions inline as they
 * did when they were static: the ops' path (value.c) runs through several. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

enum {
#define VA_HOOK_ENUM(name, callable) VA_H_##name,
    VA_HOOKS(VA_HOOK_ENUM)
#undef VA_HOOK_ENUM
    VA_NHOOKS
};
extern PyObject *va_hooks[VA_NHOOKS];      /* value.c's; NULL until bound (module.c) */
#define VA_HOOK(name) (va_hooks[VA_H_##name])

/* ------------------------------------------------------ value.c */
extern PyTypeObject *va_type;              /* made by make_type */
/* Is o a Value? */
int va_is(PyObject *o);
/* Raise status st (sweep: the sweep it came from, or ""); NULL. */
PyObject *va_fail_in(int st, const char *sweep);
PyObject *va_fail(int st);
/* This thread's tape, or NULL with MemoryError set. */
ta_tape *va_tape(void);
/* The node of Value v on this thread's tape T, or NULL with an exception
 * set (a Value never initialised; a Value of another thread). */
ta_seg *va_node(ta_tape *T, va_obj *v, uint32_t *off);
/* A new Value with no node yet (see there). */
PyObject *va_blank(void);
/* v->own = own (a reference given over, or NULL). */
void va_set_own(va_obj *v, PyObject *own);
/* *acc joined with the own of each Value among the items of seq. */
int va_join_items(PyObject *seq, PyObject **acc);
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
/* A docstring from docs[name], copied for a method or a getset (or NULL). */
char *va_doc_of(PyObject *docs, const char *name);
/* make_type(docs) and adopt(h, n, own=None): module.c lists them. */
PyObject *va_make_type(PyObject *mod, PyObject *docs);
PyObject *va_adopt(PyObject *mod, PyObject *args);

/* ------------------------------------------------------ owner.c */
extern PyTypeObject *vn_type;              /* the owner type (made by vn_make_type) */
extern PyObject *vn_backward_name;         /* "_backward", interned */
/* Make the owner type and the names owner.c uses; -1 with an exception set. */
int vn_make_type(void);
/* Value(data, _children, _op) and Value(data, children, local_grads),
 * from the Value's __init__ (see there). */
int64_t va_custom(ta_tape *T, PyObject *children, PyObject *opname, double x, ta_seg **where,
                  PyObject **owner);
int va_init_grads(va_obj *v, PyObject *data, PyObject *children, PyObject *third,
                  PyObject *grads);
int va_no_children(PyObject *children);
/* out._backward = rule, kept in C when out carries the owner of its own
 * custom node: 1 done, 0 not this case (the caller sets it as usual). */
int vn_set_rule(va_obj *v, PyObject *x);
/* Raise the exception a rule left here, if any: 1 done, else 0. */
int vn_raise_kept(void);
/* The rule hook's C side (custom.c: ta_rule_hook). */
int va_rule(int64_t node, int64_t key);
PyObject *va_custom_key(PyObject *mod, PyObject *v);
PyObject *va_custom_info(PyObject *mod, PyObject *v);
PyObject *va_precomputed(PyObject *mod, PyObject *args);

/* ------------------------------------------------------ dots.c */
/* dots(dot=, linear=): the fast dot and linear (see there). */
PyObject *va_dots(PyObject *mod, PyObject *args, PyObject *kw);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif
#endif
