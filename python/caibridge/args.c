/*
 * Arguments and the integers inside descriptors: keyword matching for the
 * vectorcall entry points, 64-bit integers and tuples of them, devices,
 * streams, max_version and copy.  Each error names the argument or field.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

/* Matches kwnames against names (interned); unknown names raise TypeError. */
int parse_keywords(const char *fname, PyObject *const *kwvalues,
                   PyObject *kwnames, PyObject *const names[],
                   PyObject **values, int count)
{
    Py_ssize_t i, n = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    int j;

    for (i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);

        for (j = 0; j < count; j++) {
            if (key == names[j])
                goto found;
        }
        for (j = 0; j < count; j++) {
            if (PyUnicode_Compare(key, names[j]) == 0)
                goto found;
        }
        PyErr_Format(PyExc_TypeError,
                     "%s() got an unexpected keyword argument '%U'", fname,
                     key);
        return -1;
    found:
        values[j] = kwvalues[i];
    }
    return 0;
}

/* check_positional's error. */
int positional_error(const char *fname, Py_ssize_t nargs, Py_ssize_t expected)
{
    PyErr_Format(PyExc_TypeError,
                 "%s() takes %zd positional argument%s but %zd were given",
                 fname, expected, expected == 1 ? "" : "s", nargs);
    return -1;
}

/* One integer of the descriptor.  index < 0 means a scalar field. */
int read_int64(PyObject *o, const char *field, Py_ssize_t index, int64_t *out)
{
    int overflow;
    long long v;

    if (small_int(o, out))
        return 0;
    if (!PyLong_CheckExact(o)) {
        /* bool is an int, but True is no size, stride or pointer. */
        if (!PyIndex_Check(o) || PyBool_Check(o))
            goto wrong_type;
        o = PyNumber_Index(o);
        if (o == NULL)
            return -1;
        v = PyLong_AsLongLongAndOverflow(o, &overflow);
        Py_DECREF(o);
    } else {
        v = PyLong_AsLongLongAndOverflow(o, &overflow);
    }
    if (overflow != 0) {
        if (index >= 0)
            PyErr_Format(PyExc_ValueError, "%s[%zd] does not fit in 64 bits",
                         field, index);
        else
            PyErr_Format(PyExc_ValueError, "%s does not fit in 64 bits",
                         field);
        return -1;
    }
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;

wrong_type:
    if (index >= 0)
        PyErr_Format(PyExc_TypeError, "%s[%zd] must be an int, got %.100s",
                     field, index, Py_TYPE(o)->tp_name);
    else
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.100s", field,
                     Py_TYPE(o)->tp_name);
    return -1;
}

/* Reads a tuple of ints of at most CAI_MAX_NDIM entries; returns its length. */
Py_ssize_t read_int_tuple(PyObject *o, const char *field, int64_t *out)
{
    Py_ssize_t i, n;

    if (!PyTuple_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of ints, got %.100s",
                     field, Py_TYPE(o)->tp_name);
        return -1;
    }
    n = PyTuple_GET_SIZE(o);
    if (n > CAI_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError,
                     "%s has %zd entries; at most %d dimensions are supported",
                     field, n, CAI_MAX_NDIM);
        return -1;
    }
    for (i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(o, i);

        if (small_int(x, &out[i]))
            continue;
        if (read_int64(x, field, i, &out[i]) != 0)
            return -1;
    }
    return n;
}

/* read_device past its memo. */
int read_device_tuple(cai_state *st, PyObject *o, const char *what,
                      DLDevice *out)
{
    int64_t type, id;

#ifdef Py_GIL_DISABLED
    (void)st;
#endif
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 2) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be a (device_type, device_id) tuple, got %.100s",
                     what, Py_TYPE(o)->tp_name);
        return -1;
    }
    if (read_int64(PyTuple_GET_ITEM(o, 0), "device_type", -1, &type) != 0 ||
        read_int64(PyTuple_GET_ITEM(o, 1), "device_id", -1, &id) != 0)
        return -1;
    if (type < 1 || type > INT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "%s: device_type = %lld is not a DLPack device type",
                     what, (long long)type);
        return -1;
    }
    if (id < 0 || id > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: device_id = %lld is out of range",
                     what, (long long)id);
        return -1;
    }
    out->device_type = (DLDeviceType)type;
    out->device_id = (int32_t)id;
#ifndef Py_GIL_DISABLED
    /* A tuple of exact ints cannot change: remembered by identity. */
    if (PyTuple_CheckExact(o) && PyLong_CheckExact(PyTuple_GET_ITEM(o, 0)) &&
        PyLong_CheckExact(PyTuple_GET_ITEM(o, 1))) {
        Py_XSETREF(st->last_device_obj, Py_NewRef(o));
        st->last_device = *out;
    }
#endif
    return 0;
}

/* A stream argument: None (not given), an int, or an object with
 * __cuda_stream__() returning (0, handle). */
int read_stream(cai_state *st, PyObject *o, int *given, intptr_t *out)
{
    int64_t v;

    *given = 0;
    *out = 0;
    if (o == NULL || o == Py_None)
        return 0;
    if (!PyLong_Check(o)) {
        PyObject *method, *pair;
        int rc;

        if (cai_lookup_attr(o, st->name[N_CUDA_STREAM], &method) < 0)
            return -1;
        if (method == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "stream must be None, an int or an object with "
                         "__cuda_stream__, got %.100s",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        pair = PyObject_CallNoArgs(method);
        Py_DECREF(method);
        if (pair == NULL)
            return -1;
        /* (0, handle): the version, then a cudaStream_t as an int. */
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !small_int(PyTuple_GET_ITEM(pair, 0), &v) || v != 0) {
            PyErr_Format(PyExc_TypeError,
                         "stream: __cuda_stream__() must return (0, handle), "
                         "got %.100R",
                         pair);
            Py_DECREF(pair);
            return -1;
        }
        rc = read_int64(PyTuple_GET_ITEM(pair, 1),
                        "stream: __cuda_stream__()[1]", -1, &v);
        Py_DECREF(pair);
        if (rc != 0)
            return -1;
        if (v < 0) {
            PyErr_Format(PyExc_ValueError,
                         "stream: __cuda_stream__() gave the handle %lld; a "
                         "cudaStream_t is never negative",
                         (long long)v);
            return -1;
        }
        /* A raw cudaStream_t: 0 is the NULL stream, which the runtime
         * reads as the legacy default stream (torch's default_stream()
         * gives (0, 0)); only the bare integer 0 is ambiguous. */
        if (v == 0)
            v = CAI_STREAM_LEGACY;
    } else if (read_int64(o, "stream", -1, &v) != 0) {
        return -1;
    }
    if (v < INTPTR_MIN || v > INTPTR_MAX) {
        PyErr_SetString(PyExc_ValueError, "stream does not fit in a pointer");
        return -1;
    }
    *given = 1;
    *out = (intptr_t)v;
    return 0;
}

/* wants_versioned for a max_version given (not None). */
int read_max_version(PyObject *o)
{
    int64_t major, minor;

    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 2) {
        PyErr_Format(PyExc_TypeError,
                     "max_version must be a (major, minor) tuple or None, "
                     "got %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if ((!small_int(PyTuple_GET_ITEM(o, 0), &major) &&
         read_int64(PyTuple_GET_ITEM(o, 0), "max_version[0]", -1, &major) !=
             0) ||
        (!small_int(PyTuple_GET_ITEM(o, 1), &minor) &&
         read_int64(PyTuple_GET_ITEM(o, 1), "max_version[1]", -1, &minor) !=
             0))
        return -1;
    return major >= 1;
}

/* The DLPack name of a device type ("kDLCUDA"), or NULL for an unknown
 * one; reprs and messages use it. */
const char *device_type_name(int32_t type)
{
    static const char *const names[] = {
        NULL,        "kDLCPU",      "kDLCUDA",   "kDLCUDAHost",    "kDLOpenCL",
        NULL,        NULL,          "kDLVulkan", "kDLMetal",       "kDLVPI",
        "kDLROCM",   "kDLROCMHost", "kDLExtDev", "kDLCUDAManaged", "kDLOneAPI",
        "kDLWebGPU", "kDLHexagon",  "kDLMAIA",   "kDLTrn"};

    if (type < 0 || type >= (int32_t)(sizeof names / sizeof names[0]))
        return NULL;
    return names[type];
}

/* (device_type, device_id), as __dlpack_device__ returns it: built
 * directly, since Py_BuildValue's format parsing costs about six times as
 * many instructions (a consumer asks before every hand-over). */
PyObject *device_pair(DLDevice dev)
{
    PyObject *pair = PyTuple_New(2), *item;

    if (pair == NULL)
        return NULL;
    if ((item = PyLong_FromLong((long)dev.device_type)) == NULL)
        goto fail;
    PyTuple_SET_ITEM(pair, 0, item);
    if ((item = PyLong_FromLong((long)dev.device_id)) == NULL)
        goto fail;
    PyTuple_SET_ITEM(pair, 1, item);
    return pair;

fail:
    Py_DECREF(pair);
    return NULL;
}

/* __dlpack__'s dl_device (NULL or None: not given) against where the data
 * is: caibridge exports in place, never to another device. */
int check_dl_device(cai_state *st, PyObject *dl_device, DLDevice have)
{
    DLDevice want;

    if (dl_device == NULL || dl_device == Py_None)
        return 0;
    if (read_device(st, dl_device, "dl_device", &want) != 0)
        return -1;
    if (want.device_type == have.device_type &&
        want.device_id == have.device_id)
        return 0;
    /* Pinned and managed memory are host memory too. */
    if (want.device_type == kDLCPU && want.device_id == 0 &&
        (have.device_type == kDLCUDAHost ||
         have.device_type == kDLCUDAManaged))
        return 1;
    /* Device memory for a host consumer: a copy (the caller decides). */
    if (want.device_type == kDLCPU && want.device_id == 0 &&
        have.device_type == kDLCUDA)
        return 2;
    PyErr_Format(PyExc_BufferError,
                 "dl_device = (%d, %d): the data lives on (%s, %d) and "
                 "caibridge does not move data between devices",
                 (int)want.device_type, (int)want.device_id,
                 device_type_name(have.device_type) != NULL
                     ? device_type_name(have.device_type)
                     : "?",
                 (int)have.device_id);
    return -1;
}
