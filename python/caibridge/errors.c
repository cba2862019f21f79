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

#include "cuda-search.h"

/* The candidates the last search passed over, as a list of str. */
PyObject *refused_list(void)
{
    char list[8192];
    PyObject *out = PyList_New(0);
    const char *entry;

    if (out == NULL)
        return NULL;
    (void)cai_cuda_search_refused(list, sizeof list);
    for (entry = list; *entry != '\0'; entry += strlen(entry) + 1) {
        PyObject *s = PyUnicode_DecodeFSDefault(entry);

        if (s == NULL || PyList_Append(out, s) != 0) {
            Py_XDECREF(s);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(s);
    }
    return out;
}

/* What ends a reason cut to fit cai_error_t's message (src/cuda-search.c). */
static const char CUT[] = "...; all reasons: python -m caibridge";

/*
 * A missing runtime's text: the C message has room for the start of the
 * search's reasons only, so a cut one is replaced by the first reason
 * whole (taken from the search), then a pointer to the rest when there is
 * more.  Into out (of size room); text itself when it was not cut, or the
 * search has failed again since with other reasons.
 */
static const char *no_runtime_text(const char *text, char *out, size_t size)
{
    size_t n = strlen(text), kept, first;
    const char *colon, *end;

    if (n < sizeof CUT - 1 || strcmp(text + n - (sizeof CUT - 1), CUT) != 0)
        return text;
    kept = n - (sizeof CUT - 1);
    if (cai_cuda_search_problem(out, size) < kept ||
        strncmp(out, text, kept) != 0)
        return text;
    /* "no CUDA runtime (...): first; second", or one reason alone. */
    colon = strstr(out, ": ");
    end = colon != NULL ? strstr(colon + 2, "; ") : NULL;
    if (end != NULL) {
        first = (size_t)(end - out);
        if (first + sizeof CUT + 2 <= size)
            snprintf(out + first, size - first, "; %s", CUT);
    }
    return out;
}

/* err's CUDAError with the candidates the last search passed over as its
 * refused attribute, the message's first reason whole. */
static PyObject *raise_no_runtime(PyObject *type, PyObject *msg)
{
    PyObject *exc = PyObject_CallOneArg(type, msg), *refused;

    if (exc == NULL)
        return NULL;
    refused = refused_list();
    if (refused == NULL ||
        PyObject_SetAttrString(exc, "refused", refused) != 0) {
        Py_XDECREF(refused);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(refused);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

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
        char both[sizeof err->field + 4096 + 2], whole[4096];
        PyObject *msg;

        if (err->status == CAI_ENOCUDA)
            text = no_runtime_text(text, whole, sizeof whole);
        if (err->field[0] != '\0' && strstr(text, err->field) == NULL) {
            snprintf(both, sizeof both, "%s: %s", err->field, text);
            text = both;
        }
        msg = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
        if (msg == NULL)
            return NULL;
        if (err->status == CAI_ENOCUDA)
            raise_no_runtime(type, msg);
        else
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
