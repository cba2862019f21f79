/*
 * _xbench: a C consumer for the benchmark, so the DLPack C exchange API can
 * be timed the way a framework calls it (from C, no Python frame per call),
 * next to the Python protocol called from the same C loop.
 *
 * Every loop returns the total elapsed nanoseconds (clock_gettime), so the
 * per-call cost is not hidden under the cost of calling into Python.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

#include "caibridge/dlpack.h"

/* Instruction counts under callgrind, when its header is there. */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define HAVE_CALLGRIND 1
#endif
#endif

/* Callgrind collects between these two, then dumps what it counted under
 * label (a run with --instr-atstart=no sees nothing else).  Outside
 * callgrind, or without its header, they do nothing. */
static void count_start(void)
{
#ifdef HAVE_CALLGRIND
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
#endif
}

static void count_stop(const char *label)
{
#ifdef HAVE_CALLGRIND
    CALLGRIND_DUMP_STATS_AT(label);
    CALLGRIND_STOP_INSTRUMENTATION;
#else
    (void)label;
#endif
}

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The table published on type(obj), or NULL with an exception set. */
static const DLPackExchangeAPI *table_of(PyObject *obj)
{
    PyObject *cap;
    const DLPackExchangeAPI *api;

    cap = PyObject_GetAttrString((PyObject *)Py_TYPE(obj),
                                 "__dlpack_c_exchange_api__");
    if (cap == NULL)
        return NULL;
    api = PyCapsule_GetPointer(cap, "dlpack_exchange_api");
    /* The table is static for the type's lifetime; the type holds the
     * capsule, so dropping our reference leaves it valid. */
    Py_DECREF(cap);
    if (api != NULL && api->managed_tensor_from_py_object_no_sync == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "managed_tensor_from_py_object_no_sync is NULL");
        return NULL;
    }
    return api;
}

/* A table function's failure: its exception, or one naming it. */
static PyObject *failed(const char *what)
{
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "%s failed", what);
    return NULL;
}

/* exchange_loop(obj, n[, label]) -> ns for n x
 * (managed_tensor_from_py_object_no_sync + deleter), read from
 * type(obj).__dlpack_c_exchange_api__; with a label, the loop is counted
 * by callgrind as in count_loop. */
static PyObject *exchange_loop(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t n, i;
    const char *label = NULL;
    const DLPackExchangeAPI *api;
    double t0, t1;

    if (!PyArg_ParseTuple(args, "On|s", &obj, &n, &label) ||
        (api = table_of(obj)) == NULL)
        return NULL;
    t0 = now_ns();
    if (label != NULL)
        count_start();
    for (i = 0; i < n; i++) {
        DLManagedTensorVersioned *t = NULL;

        if (api->managed_tensor_from_py_object_no_sync(obj, &t) != 0)
            break;
        if (t->deleter != NULL)
            t->deleter(t);
    }
    if (label != NULL)
        count_stop(label);
    t1 = now_ns();
    if (i < n)
        return failed("managed_tensor_from_py_object_no_sync");
    return PyFloat_FromDouble(t1 - t0);
}

/* dltensor_loop(obj, n) -> ns for n x dltensor_from_py_object_no_sync (the
 * borrowed, allocation-free variant), or None when the table has none. */
static PyObject *dltensor_loop(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t n, i;
    const DLPackExchangeAPI *api;
    double t0, t1;

    if (!PyArg_ParseTuple(args, "On", &obj, &n) ||
        (api = table_of(obj)) == NULL)
        return NULL;
    if (api->dltensor_from_py_object_no_sync == NULL)
        Py_RETURN_NONE;
    t0 = now_ns();
    for (i = 0; i < n; i++) {
        DLTensor t;

        if (api->dltensor_from_py_object_no_sync(obj, &t) != 0)
            return failed("dltensor_from_py_object_no_sync");
        __asm__ volatile("" : : "r"(&t) : "memory");
    }
    t1 = now_ns();
    return PyFloat_FromDouble(t1 - t0);
}

/* Takes a capsule the way a consumer does: rename it used, run the deleter. */
static int consume_capsule(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *t =
            PyCapsule_GetPointer(cap, "dltensor_versioned");

        if (PyCapsule_SetName(cap, "used_dltensor_versioned") != 0)
            return -1;
        if (t->deleter != NULL)
            t->deleter(t);
        return 0;
    }
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *t = PyCapsule_GetPointer(cap, "dltensor");

        if (PyCapsule_SetName(cap, "used_dltensor") != 0)
            return -1;
        if (t->deleter != NULL)
            t->deleter(t);
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "not a DLPack capsule");
    return -1;
}

/* dunder_loop(obj, n) -> ns for n x obj.__dlpack__(max_version=(1, 3)) called
 * from C with vectorcall and a cached name, then consumed as above. */
static PyObject *dunder_loop(PyObject *self, PyObject *args)
{
    PyObject *obj, *name = NULL, *kwnames = NULL, *mv = NULL, *res = NULL;
    Py_ssize_t n, i;
    double t0, t1;

    if (!PyArg_ParseTuple(args, "On", &obj, &n))
        return NULL;
    name = PyUnicode_InternFromString("__dlpack__");
    kwnames = Py_BuildValue("(s)", "max_version");
    mv = Py_BuildValue("(ii)", 1, 3);
    if (name == NULL || kwnames == NULL || mv == NULL)
        goto out;
    t0 = now_ns();
    for (i = 0; i < n; i++) {
        PyObject *argv[2] = {obj, mv};
        PyObject *cap = PyObject_VectorcallMethod(
            name, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
        int rc;

        if (cap == NULL)
            goto out;
        rc = consume_capsule(cap);
        Py_DECREF(cap);
        if (rc != 0)
            goto out;
    }
    t1 = now_ns();
    res = PyFloat_FromDouble(t1 - t0);
out:
    Py_XDECREF(name);
    Py_XDECREF(kwnames);
    Py_XDECREF(mv);
    return res;
}

/* count_loop(f, n, label): calls f() n times, counted by callgrind under
 * label. */
static PyObject *count_loop(PyObject *self, PyObject *args)
{
    PyObject *f;
    Py_ssize_t n, i;
    const char *label;

    if (!PyArg_ParseTuple(args, "Ons", &f, &n, &label))
        return NULL;
    count_start();
    for (i = 0; i < n; i++) {
        PyObject *r = PyObject_CallNoArgs(f);

        if (r == NULL)
            break;
        Py_DECREF(r);
    }
    count_stop(label);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* has_table(obj) -> True when type(obj) publishes an exchange table. */
static PyObject *has_table(PyObject *self, PyObject *obj)
{
    const DLPackExchangeAPI *api = table_of(obj);

    if (api == NULL) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"exchange_loop", exchange_loop, METH_VARARGS,
     "exchange_loop(obj, n[, label]) -> ns for n tensors through the C "
     "exchange API, counted by callgrind under label when given"},
    {"dltensor_loop", dltensor_loop, METH_VARARGS,
     "dltensor_loop(obj, n) -> ns for n borrowed DLTensors, or None"},
    {"dunder_loop", dunder_loop, METH_VARARGS,
     "dunder_loop(obj, n) -> ns for n __dlpack__ calls made from C"},
    {"count_loop", count_loop, METH_VARARGS,
     "count_loop(f, n, label): n calls of f, counted by callgrind"},
    {"has_table", has_table, METH_O,
     "has_table(obj) -> whether type(obj) has __dlpack_c_exchange_api__"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_xbench",
    .m_doc = "C-side loops for caibridge's benchmark",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__xbench(void);

PyMODINIT_FUNC PyInit__xbench(void)
{
    return PyModule_Create(&module);
}
