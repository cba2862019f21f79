
#include <Python.h>
#include <caibridge.h>

static void capsule_gone(PyObject *capsule)
{
    DLManagedTensorVersioned *t =
        PyCapsule_GetPointer(capsule, "dltensor_versioned");

    if (t == NULL) {
        PyErr_Clear();     /* consumed: the consumer owns the tensor */
        return;
    }
    if (t->deleter != NULL)
        t->deleter(t);
}

/* A new reference, or NULL with an exception set (t deleted). */
static PyObject *tensor_capsule(DLManagedTensorVersioned *t)
{
    PyObject *capsule =
        PyCapsule_New(t, "dltensor_versioned", capsule_gone);

    if (capsule == NULL && t->deleter != NULL)
        t->deleter(t);
    return capsule;
}

