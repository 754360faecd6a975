/* module.c: the module tapead._cpython, which holds the CPython front
 * (value.h: its files and their contract): its functions, the one call
 * that binds the Python it calls (bind), and its installation, which cffi
 * calls at import (ta_cpython_install). */
#ifdef TA_NO_CPYTHON
#include "tapead.h"
int ta_cpython_install(void) { return TA_ENOCPYTHON; }
#else
#include "value.h"
#include "program_call.h"
#include "custom.h"

static const char *const va_hook_names[VA_NHOOKS] = {
#define VA_HOOK_NAME(name, callable) #name,
    VA_HOOKS(VA_HOOK_NAME)
#undef VA_HOOK_NAME
};
static const int va_hook_callable[VA_NHOOKS] = {
#define VA_HOOK_CALLABLE(name, callable) callable,
    VA_HOOKS(VA_HOOK_CALLABLE)
#undef VA_HOOK_CALLABLE
};

/* bind(error=..., real=..., ...): every hook of value.h's VA_HOOKS, by
 * name, all in one call (a call again replaces them all).  A name missing,
 * unknown or given positionally, or a hook that must be callable and is
 * not, is a TypeError that names it, and then nothing changes. */
static PyObject *va_bind(PyObject *mod, PyObject *args, PyObject *kw)
{
    PyObject *got[VA_NHOOKS] = {NULL}, *name, *x, *old;
    Py_ssize_t pos = 0;
    int k;
    (void)mod;
    if (PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "bind takes its hooks by name only");
        return NULL;
    }
    while (kw && PyDict_Next(kw, &pos, &name, &x)) {       /* (borrowed: nothing here runs Python) */
        for (k = 0; k < VA_NHOOKS; k++)
            if (PyUnicode_CompareWithASCIIString(name, va_hook_names[k]) == 0) break;
        if (k == VA_NHOOKS) {
            PyErr_Format(PyExc_TypeError, "bind: no hook is named %R", name);
            return NULL;
        }
        if (va_hook_callable[k] && !PyCallable_Check(x)) {
            PyErr_Format(PyExc_TypeError, "bind: the hook %s must be callable, not %.100s",
                         va_hook_names[k], Py_TYPE(x)->tp_name);
            return NULL;
        }
        got[k] = x;
    }
    for (k = 0; k < VA_NHOOKS; k++)
        if (!got[k]) {
            PyErr_Format(PyExc_TypeError, "bind: the hook %s is missing", va_hook_names[k]);
            return NULL;
        }
    if (vn_make_type() < 0) return NULL;
    for (k = 0; k < VA_NHOOKS; k++) Py_INCREF(got[k]);
    for (k = 0; k < VA_NHOOKS; k++) {                /* all set before an old one's drop runs Python */
        old = va_hooks[k];
        va_hooks[k] = got[k];
        got[k] = old;
    }
    ta_rule_hook = va_rule;
    for (k = 0; k < VA_NHOOKS; k++) Py_XDECREF(got[k]);
    Py_RETURN_NONE;
}

/* tape_tag(): ta_tape_tag() (cdef.h) without cffi in the way: tapead._c's
 * tape() asks it at every lookup of the Python side of this thread's tape. */
static PyObject *va_tape_tag(PyObject *mod, PyObject *u)
{
    int64_t tag = ta_tape_tag();
    (void)mod; (void)u;
    return tag < 0 ? va_fail((int)tag) : PyLong_FromLongLong((long long)tag);
}

/* owner_type(): the owner type (owner.c), once bind has made it. */
static PyObject *va_owner_type(PyObject *mod, PyObject *u)
{
    (void)mod; (void)u;
    if (!vn_type) { PyErr_SetString(PyExc_RuntimeError, "tapead: the CPython front is not bound"); return NULL; }
    return VA_NEWREF(vn_type);
}

static PyMethodDef va_module_methods[] = {
    {"make_type", va_make_type, METH_O, "make_type(docs): the C Value type"},
    {"bind", (PyCFunction)(void (*)(void))va_bind, METH_VARARGS | METH_KEYWORDS,
     "bind(error, real, restore, other, setattr, rule, grads, tape, every, tl): the Python the "
     "CPython front calls, every one by name"},
    {"owner_type", va_owner_type, METH_NOARGS, "owner_type(): the type of a custom node's owner"},
    {"custom_info", va_custom_info, METH_O, "custom_info(v): (key, name, inputs) or None"},
    {"custom_key", va_custom_key, METH_O, "custom_key(v): the key of v's custom node, or None"},
    {"precomputed", va_precomputed, METH_VARARGS, "precomputed(value, inputs, partials, name)"},
    {"tape_tag", va_tape_tag, METH_NOARGS, "tape_tag(): the tag of this thread's tape"},
    {"adopt", va_adopt, METH_VARARGS, "adopt(h, n, own=None): Values taking over the holds of a held list"},
    {"dots", (PyCFunction)(void (*)(void))va_dots, METH_VARARGS | METH_KEYWORDS,
     "dots(dot=, linear=): the fast tapead.dot and tapead.linear, over these general paths"},
    {"program_box", vp_box_type, METH_NOARGS, "program_box(): the type of a Program's box (program_call.c)"},
    {"run", (PyCFunction)(void (*)(void))vp_run, METH_FASTCALL,
     "run(box, X, B, nin, Y, nout, seed, seedmode, G, nwrt, per_sample, parts, nblocks, params, npar, "
     "threads): a Program's call (program_call.c)"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef va_module = {
    PyModuleDef_HEAD_INIT, "tapead._cpython", "The CPython front (csrc/python/value.h).", -1,
    va_module_methods, NULL, NULL, NULL, NULL};

/* Called through cffi (the GIL released): puts the module tapead._cpython
 * into sys.modules.  TA_OK, or TA_ENOMEM if that failed. */
int ta_cpython_install(void)
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
        if ((mods = PyImport_GetModuleDict()) && PyDict_SetItemString(mods, "tapead._cpython", m) == 0)
            st = TA_OK;
        Py_DECREF(m);
    }
    if (st != TA_OK) PyErr_Clear();
    PyGILState_Release(g);
    return st;
}

#endif
