/*
 * cai_status to Python exceptions: ValueError for a malformed descriptor,
 * MemoryError, caibridge.CUDAError (the module's own) for CUDA, and
 * BufferError for what is well formed but cannot be exported.
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
    case CAI_EINVAL: type = PyExc_ValueError; break;
    case CAI_ENOMEM: type = PyExc_MemoryError; break;
    case CAI_ENOCUDA:
    case CAI_ECUDA: type = st->CUDAError; break;
    default: type = PyExc_BufferError; break;
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
