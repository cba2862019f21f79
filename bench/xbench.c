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
#include <stdlib.h>
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

/* ------------------------------------------------------------------ */
/* The floor: the least any bridge from __array_interface__ to DLPack
 * does, with no validation at all.  One attribute read, the five entries
 * by look-up, the shape (and strides) with PyLong_AsLongLong, the typestr's
 * kind and size with atoi, the pointer and read-only flag, one malloc of
 * the tensor with shape and strides inline, one capsule.  caibridge's own
 * cost is reported as a ratio to it. */

static PyObject *floor_key[5]; /* shape, typestr, data, strides, version */
static PyObject *floor_name_ai, *floor_name_cai;

static void floor_deleter(DLManagedTensorVersioned *t)
{
    Py_DECREF((PyObject *)t->manager_ctx);
    free(t);
}

static void floor_capsule_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *t =
            PyCapsule_GetPointer(cap, "dltensor_versioned");

        t->deleter(t);
    }
}

static PyObject *floor_export(PyObject *o, PyObject *name, DLDevice dev)
{
    PyObject *d, *shape, *typestr, *data, *strides, *version, *cap;
    DLManagedTensorVersioned *t;
    const char *text;
    Py_ssize_t len, ndim, i;
    int64_t *dims;
    int size, ro;
    void *ptr;

    if ((d = PyObject_GetAttr(o, name)) == NULL)
        return NULL;
    shape = PyDict_GetItemWithError(d, floor_key[0]);
    typestr = PyDict_GetItemWithError(d, floor_key[1]);
    data = PyDict_GetItemWithError(d, floor_key[2]);
    strides = PyDict_GetItemWithError(d, floor_key[3]);
    version = PyDict_GetItemWithError(d, floor_key[4]);
    (void)version;
    if (shape == NULL || typestr == NULL || data == NULL)
        goto bad;
    ndim = PyTuple_GET_SIZE(shape);
    if ((t = malloc(sizeof *t + 2 * (size_t)ndim * sizeof(int64_t))) == NULL)
        goto bad;
    dims = (int64_t *)(t + 1);
    for (i = 0; i < ndim; i++)
        dims[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    t->dl_tensor.strides = NULL;
    if (strides != NULL && strides != Py_None) {
        for (i = 0; i < ndim; i++)
            dims[ndim + i] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
        t->dl_tensor.strides = dims + ndim;
    }
    text = PyUnicode_AsUTF8AndSize(typestr, &len);
    size = text != NULL && len > 2 ? atoi(text + 2) : 0;
    ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
    ro = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1));
    t->version.major = DLPACK_MAJOR_VERSION;
    t->version.minor = DLPACK_MINOR_VERSION;
    t->manager_ctx = Py_NewRef(o);
    t->deleter = floor_deleter;
    t->flags = ro ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
    t->dl_tensor.data = ptr;
    t->dl_tensor.device = dev;
    t->dl_tensor.ndim = (int32_t)ndim;
    t->dl_tensor.dtype.code = text == NULL     ? kDLFloat
                              : text[1] == 'f' ? kDLFloat
                              : text[1] == 'i' ? kDLInt
                              : text[1] == 'u' ? kDLUInt
                              : text[1] == 'c' ? kDLComplex
                                               : kDLBool;
    t->dl_tensor.dtype.bits = (uint8_t)(size * 8);
    t->dl_tensor.dtype.lanes = 1;
    t->dl_tensor.shape = dims;
    t->dl_tensor.byte_offset = 0;
    Py_DECREF(d);
    cap = PyCapsule_New(t, "dltensor_versioned", floor_capsule_destructor);
    if (cap == NULL)
        floor_deleter(t);
    return cap;

bad:
    Py_DECREF(d);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "floor: entries missing");
    return NULL;
}

/* floor(o) -> capsule from o.__array_interface__ (a host tensor). */
static PyObject *floor_host(PyObject *self, PyObject *o)
{
    DLDevice dev = {kDLCPU, 0};

    return floor_export(o, floor_name_ai, dev);
}

/* floor_cai(o) -> capsule from o.__cuda_array_interface__, the device
 * given as (kDLCUDA, 0). */
static PyObject *floor_cai(PyObject *self, PyObject *o)
{
    DLDevice dev = {kDLCUDA, 0};

    return floor_export(o, floor_name_cai, dev);
}

/* prop_loop(obj, name, n, label): n reads of getattr(obj, name) from C,
 * counted by callgrind under label (what the exchange API's own cost
 * leaves out). */
static PyObject *prop_loop(PyObject *self, PyObject *args)
{
    PyObject *obj, *name;
    Py_ssize_t n, i;
    const char *label;

    if (!PyArg_ParseTuple(args, "OUns", &obj, &name, &n, &label))
        return NULL;
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    count_start();
    for (i = 0; i < n; i++) {
        PyObject *r = PyObject_GetAttr(obj, name);

        if (r == NULL)
            break;
        Py_DECREF(r);
    }
    count_stop(label);
    Py_DECREF(name);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static int floor_init(void)
{
    static const char *const keys[5] = {"shape", "typestr", "data", "strides",
                                        "version"};
    int i;

    for (i = 0; i < 5; i++)
        if ((floor_key[i] = PyUnicode_InternFromString(keys[i])) == NULL)
            return -1;
    floor_name_ai = PyUnicode_InternFromString("__array_interface__");
    floor_name_cai = PyUnicode_InternFromString("__cuda_array_interface__");
    return floor_name_ai != NULL && floor_name_cai != NULL ? 0 : -1;
}

static PyMethodDef methods[] = {
    {"floor", floor_host, METH_O,
     "floor(o) -> a DLPack capsule from o.__array_interface__, unchecked"},
    {"floor_cai", floor_cai, METH_O,
     "floor_cai(o) -> the same from o.__cuda_array_interface__"},
    {"prop_loop", prop_loop, METH_VARARGS,
     "prop_loop(obj, name, n, label): n attribute reads from C, counted"},
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
    if (floor_init() != 0)
        return NULL;
    return PyModule_Create(&module);
}
