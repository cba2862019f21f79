/*
 * A C consumer for the sub-interpreter tests, compiled by the test itself:
 * it drives caibridge's DLPack C exchange API and reads and deletes DLPack
 * tensors the way C code does, including from a thread that has no Python
 * thread state.  Multi-phase and stateless, so it loads in isolated
 * sub-interpreters.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>

#include "caibridge/dlpack.h"

/* The float64 values of a 1-D tensor, as a list. */
static PyObject *values_of(const DLTensor *t)
{
    const char *base = (const char *)t->data + t->byte_offset;
    int64_t step = t->strides != NULL ? t->strides[0] : 1;
    PyObject *list;
    int64_t i;

    if (t->ndim != 1 || t->dtype.code != kDLFloat || t->dtype.bits != 64) {
        PyErr_SetString(PyExc_ValueError, "expected 1-D float64");
        return NULL;
    }
    if ((list = PyList_New(0)) == NULL)
        return NULL;
    for (i = 0; i < t->shape[0]; i++) {
        PyObject *x = PyFloat_FromDouble(
            *(const double *)(base + i * step * (int64_t)sizeof(double)));

        if (x == NULL || PyList_Append(list, x) != 0) {
            Py_XDECREF(x);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(x);
    }
    return list;
}

static const DLPackExchangeAPI *table_of(PyObject *obj)
{
    PyObject *cap = PyObject_GetAttrString((PyObject *)Py_TYPE(obj),
                                           "__dlpack_c_exchange_api__");
    const DLPackExchangeAPI *api;

    if (cap == NULL)
        return NULL;
    api = PyCapsule_GetPointer(cap, "dlpack_exchange_api");
    Py_DECREF(cap);
    return api;
}

/* exchange(view) -> (values, CAIView): the tensor taken through
 * managed_tensor_from_py_object_no_sync, its values read, then handed to
 * managed_tensor_to_py_object_no_sync, whose view now owns it. */
static PyObject *exchange(PyObject *self, PyObject *obj)
{
    const DLPackExchangeAPI *api = table_of(obj);
    DLManagedTensorVersioned *t;
    DLTensor lent;
    PyObject *values, *view;

    if (api == NULL)
        return NULL;
    if (api->dltensor_from_py_object_no_sync(obj, &lent) != 0)
        return NULL;
    if (api->managed_tensor_from_py_object_no_sync(obj, &t) != 0)
        return NULL;
    if (t->dl_tensor.data != lent.data) {
        t->deleter(t);
        PyErr_SetString(PyExc_AssertionError, "lent and managed data differ");
        return NULL;
    }
    if ((values = values_of(&t->dl_tensor)) == NULL) {
        t->deleter(t);
        return NULL;
    }
    if (api->managed_tensor_to_py_object_no_sync(t, (void **)&view) != 0) {
        Py_DECREF(values);
        return NULL;
    }
    return Py_BuildValue("(NN)", values, view);
}

/* take(capsule) -> address: the tensor of a versioned capsule, taken as a
 * consumer takes it (the capsule renamed); delete(address) deletes it. */
static PyObject *take(PyObject *self, PyObject *capsule)
{
    void *t = PyCapsule_GetPointer(capsule, "dltensor_versioned");

    if (t == NULL ||
        PyCapsule_SetName(capsule, "used_dltensor_versioned") != 0)
        return NULL;
    return PyLong_FromVoidPtr(t);
}

static PyObject *values(PyObject *self, PyObject *address)
{
    DLManagedTensorVersioned *t = PyLong_AsVoidPtr(address);

    if (t == NULL)
        return NULL;
    return values_of(&t->dl_tensor);
}

static PyObject *delete (PyObject *self, PyObject *address)
{
    DLManagedTensorVersioned *t = PyLong_AsVoidPtr(address);

    if (t == NULL)
        return NULL;
    t->deleter(t);
    Py_RETURN_NONE;
}

static void *run_deleter(void *arg)
{
    DLManagedTensorVersioned *t = arg;

    t->deleter(t);
    return NULL;
}

/* delete_on_thread(address): the deleter runs on a new thread that has no
 * Python thread state, while this one waits without its GIL. */
static PyObject *delete_on_thread(PyObject *self, PyObject *address)
{
    DLManagedTensorVersioned *t = PyLong_AsVoidPtr(address);
    pthread_t thread;
    int rc;

    if (t == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = pthread_create(&thread, NULL, run_deleter, t);
    if (rc == 0)
        pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* interp_id() -> the ID of the interpreter running the caller. */
static PyObject *interp_id(PyObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(
        (long long)PyInterpreterState_GetID(PyInterpreterState_Get()));
}

static PyMethodDef methods[] = {
    {"interp_id", interp_id, METH_NOARGS, NULL},
    {"exchange", exchange, METH_O, NULL},
    {"take", take, METH_O, NULL},
    {"values", values, METH_O, NULL},
    {"delete", delete, METH_O, NULL},
    {"delete_on_thread", delete_on_thread, METH_O, NULL},
    {NULL, NULL, 0, NULL}};

static PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL}};

static struct PyModuleDef def = {PyModuleDef_HEAD_INIT,
                                 "xconsumer",
                                 NULL,
                                 0,
                                 methods,
                                 slots,
                                 NULL,
                                 NULL,
                                 NULL};

PyMODINIT_FUNC PyInit_xconsumer(void);
PyMODINIT_FUNC PyInit_xconsumer(void)
{
    return PyModuleDef_Init(&def);
}
