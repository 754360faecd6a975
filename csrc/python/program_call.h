/* program_call.h: a Program's box and call on the CPython front
 * (program_call.c), which the module tapead._cpython (module.c) lists. */
#ifndef TAPEAD_PROGRAM_CALL_H
#define TAPEAD_PROGRAM_CALL_H
/* box_type(): the box type; run(box, ...): a Program's call (program_call.c) */
PyObject *vp_box_type(PyObject *mod, PyObject *unused);
PyObject *vp_run(PyObject *mod, PyObject *const *a, Py_ssize_t n);
#endif
