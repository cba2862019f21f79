/* The capsule example of docs/guide/c.rst (taken from the page as
 * guide-capsule-example.h), built as the extension module guide_capsule
 * that tests/python/test_guide_capsule.py loads: drop() wraps a tensor
 * with the page's tensor_capsule and drops the capsule while an exception
 * is in flight. */
#include "guide-capsule-example.h"

#include <string.h>

static DLManagedTensorVersioned tensor;
static int deleted, raised_in_deleter;

static void count_deleter(DLManagedTensorVersioned *t)
{
    deleted++;
    /* A deleter may call into Python: it must start with no exception. */
    raised_in_deleter |= PyErr_Occurred() != NULL;
}

/* drop(consume) -> (deleter calls, exception seen by the deleter,
 * exception in flight after the drop) */
static PyObject *drop(PyObject *self, PyObject *arg)
{
    int consume = PyObject_IsTrue(arg);
    PyObject *capsule, *type, *value, *tb, *result;

    if (consume < 0)
        return NULL;
    memset(&tensor, 0, sizeof tensor);
    tensor.version.major = DLPACK_MAJOR_VERSION;
    tensor.deleter = count_deleter;
    deleted = raised_in_deleter = 0;
    capsule = tensor_capsule(&tensor);
    if (capsule == NULL)
        return NULL;
    if (consume &&
        PyCapsule_SetName(capsule, "used_dltensor_versioned") != 0) {
        Py_DECREF(capsule);
        return NULL;
    }
    PyErr_SetString(PyExc_KeyError, "in flight");
    Py_DECREF(capsule);
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    result = Py_BuildValue("(iiO)", deleted, raised_in_deleter,
                           value != NULL ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return result;
}

static PyMethodDef methods[] = {
    {"drop", drop, METH_O, "Drops a capsule with an exception in flight."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "guide_capsule",
                                    NULL, -1, methods};

PyMODINIT_FUNC PyInit_guide_capsule(void);

PyMODINIT_FUNC PyInit_guide_capsule(void)
{
    return PyModule_Create(&module);
}
