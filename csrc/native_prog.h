/* native_prog.h: a Program's box and call on the native front
 * (native_prog.c), which the module tapead._native (module.c) lists. */
#ifndef TAPEAD_NATIVE_PROG_H
#define TAPEAD_NATIVE_PROG_H
/* box_type(): the box type; run(box, ...): a Program's call (native_prog.c) */
PyObject *vp_box_type(PyObject *mod, PyObject *unused);
PyObject *vp_run(PyObject *mod, PyObject *const *a, Py_ssize_t n);
#endif
