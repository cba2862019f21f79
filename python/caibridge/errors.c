/*
 * cai_status to Python exceptions: ValueError for a malformed descriptor,
 * MemoryError, caibridge.CUDAError (the module's own) for CUDA, and
 * BufferError for what is well formed but cannot be exported; and the
 * error a producer's interface property hid behind "no such attribute".
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <stdio.h>
#include <string.h>

PyObject *raise_status(cai_state *st, const cai_error_t *err)
{
    PyObject *type;

    switch (err->status) {
    case CAI_EINVAL:
        type = PyExc_ValueError;
        break;
    case CAI_ENOMEM:
        type = PyExc_MemoryError;
        break;
    case CAI_ENOCUDA:
    case CAI_ECUDA:
        type = st->CUDAError;
        break;
    default:
        type = PyExc_BufferError;
        break;
    }
    /* Every message names its field; prefix it where the text does not.
     * The text may hold a path or typestr cut mid-character: decoded with
     * replacement, so the exception raised is always the documented one. */
    {
        const char *text = err->message[0] ? err->message
                                           : cai_status_name(err->status);
        char both[sizeof err->field + sizeof err->message + 2];
        PyObject *msg;

        if (err->field[0] != '\0' && strstr(text, err->field) == NULL) {
            snprintf(both, sizeof both, "%s: %s", err->field, text);
            text = both;
        }
        msg = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
        if (msg == NULL)
            return NULL;
        PyErr_SetObject(type, msg);
        Py_DECREF(msg);
    }
    return NULL;
}

PyObject *readonly_legacy_error(void)
{
    PyErr_SetString(PyExc_BufferError,
                    "data: the array is read-only and a legacy DLPack "
                    "capsule cannot say so; the consumer should pass "
                    "max_version=(1, 0) or later, or opt in with "
                    "allow_readonly_legacy=True to export it as writable "
                    "(writing through it is then undefined)");
    return NULL;
}

/*
 * The look-ups took an AttributeError for "no such attribute"; when the
 * type does define the name (a property), it came from inside the
 * property: the property is read again for that error, which the refusal
 * is chained to.  0 when neither name is defined on the type.
 */
int hidden_attribute_error(cai_state *st, PyObject *obj)
{
    static const int names[2] = {N_CAI, N_AI};
    int i;

    for (i = 0; i < 2; i++) {
        PyObject *name = st->name[names[i]], *value, *type, *cause, *tb;

        if (_PyType_Lookup(Py_TYPE(obj), name) == NULL)
            continue;
        if ((value = PyObject_GetAttr(obj, name)) != NULL) {
            Py_DECREF(value); /* read this time: no error to show */
            continue;
        }
        PyErr_Fetch(&type, &cause, &tb);
        PyErr_NormalizeException(&type, &cause, &tb);
        if (tb != NULL)
            PyException_SetTraceback(cause, tb);
        /* A DLPack producer whose property only says "not on CUDA" (a
         * CPU torch tensor): the bridge is not needed at all. */
        if (PyObject_HasAttrString((PyObject *)Py_TYPE(obj), "__dlpack__"))
            PyErr_Format(PyExc_TypeError,
                         "%.100s is already a DLPack producer (it has "
                         "__dlpack__): hand it to the DLPack consumer "
                         "directly (for a CAI consumer: "
                         "caibridge.from_dlpack(obj)); it has no array "
                         "interface to bridge, as its %U raised %.100s "
                         "(the cause, above)",
                         Py_TYPE(obj)->tp_name, name,
                         ((PyTypeObject *)type)->tp_name);
        else
            PyErr_Format(PyExc_TypeError,
                         "%.100s.%U raised %.100s inside the property (the "
                         "cause, above), and %.100s has no other interface",
                         Py_TYPE(obj)->tp_name, name,
                         ((PyTypeObject *)type)->tp_name,
                         Py_TYPE(obj)->tp_name);
        Py_DECREF(type);
        Py_XDECREF(tb);
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyException_SetCause(value, cause); /* raise ... from cause */
        PyErr_Restore(type, value, tb);
        return 1;
    }
    return 0;
}
