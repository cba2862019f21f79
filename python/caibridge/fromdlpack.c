/*
 * from_dlpack: takes a DLPack tensor from a capsule, one of our views, a
 * foreign exchange API table (exchange.c) or a producer's __dlpack__, and
 * hands it to a CAIView (caiview.c), with the CAI stream to report.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <string.h>

const char from_dlpack_doc[] =
    "from_dlpack(x, *, stream=None, legacy_writable=False,\n"
    "            allow_readonly_legacy=False)\n"
    "--\n\n"
    "Take a DLPack tensor from a producer (an object with __dlpack__) or a\n"
    "capsule, and return a CAIView that owns it: __cuda_array_interface__ "
    "for\n"
    "CUDA memory, __array_interface__ for host memory; pinned and managed\n"
    "memory has both, and a read of __array_interface__ first makes the host\n"
    "wait for the CAI 'stream'.  stream is the stream\n"
    "the data will be used on (None: legacy default; an int; or an object "
    "with\n"
    "__cuda_stream__); it is passed to the producer for CUDA data and "
    "reported\n"
    "as the CAI 'stream'.  A producer whose type publishes the DLPack C\n"
    "exchange API is read through it when stream is None or -1, and the CAI\n"
    "'stream' is then the one its table says the data is ready on.  "
    "stream=-1\n"
    "is refused for CUDA data that comes through __dlpack__ or a capsule: "
    "the\n"
    "producer's stream is unknown there, and 'stream: None' would claim the\n"
    "data is ready.\n"
    "A legacy (unversioned) tensor cannot say whether its memory may be\n"
    "written: it is described as read-only, as NumPy imports it, unless\n"
    "legacy_writable=True.  Read-only data goes out of the view's __dlpack__\n"
    "as a legacy capsule (which cannot say read-only: JAX asks for one) only\n"
    "with allow_readonly_legacy=True, a promise that no consumer writes.";

/* CAI has no way to say "not ordered, on an unknown stream". */
static PyObject *unordered_error(void)
{
    PyErr_SetString(PyExc_ValueError,
                    "stream = -1 asks the producer not to order its work, "
                    "and it does not say which stream that work is on: the "
                    "CAI dict could only say 'stream: None', which means "
                    "the data is ready.  Pass the stream the data will be "
                    "used on (None: the legacy default stream)");
    return NULL;
}

/* 1 when an unused DLPack capsule holds a tensor on a CUDA device.  A
 * versioned tensor of another major version is not read (0).  Read in the
 * capsule's critical section, as tensor_from_capsule takes the tensor:
 * once another thread has taken it, it may be gone. */
static int capsule_on_cuda(PyObject *capsule)
{
    const char *name;
    int on_cuda = 0;

    Py_BEGIN_CRITICAL_SECTION(capsule);
    name = PyCapsule_GetName(capsule);
    if (name == NULL) {
        PyErr_Clear();
    } else if (strcmp(name, CAPSULE_VERSIONED) == 0) {
        const DLManagedTensorVersioned *t =
            PyCapsule_GetPointer(capsule, name);

        on_cuda = t != NULL && t->version.major == DLPACK_MAJOR_VERSION &&
                  cai_is_cuda_device(t->dl_tensor.device.device_type);
    } else if (strcmp(name, CAPSULE_LEGACY) == 0) {
        const DLManagedTensor *t = PyCapsule_GetPointer(capsule, name);

        on_cuda = t != NULL &&
                  cai_is_cuda_device(t->dl_tensor.device.device_type);
    }
    Py_END_CRITICAL_SECTION();
    return on_cuda;
}

/* Our own producer: straight to the tensor, ordered as __dlpack__. */
static PyObject *from_view(cai_state *st, DLPackViewObject *v, int given,
                           intptr_t s)
{
    cai_desc_t d;
    intptr_t consumer;
    cai_consumer_at at = {NULL, 0};
    DLManagedTensorVersioned *t;
    cai_error_t err;
    void *tensor;
    PyObject *stream_obj;

    view_to_header(v, &d);
    if (check_stream_value(&d, given, s, &consumer) != 0 ||
        view_order(st, v, consumer, &at) != 0)
        return NULL;
    if (view_tensor(v, 1, 0, consumer, &at, &tensor, &err) != 0)
        return raise_status(st, &err);
    t = tensor;
    /* -1: nothing was ordered, so the data is ready where the producer
     * said (None when it named no stream). */
    if (given && s == CAI_STREAM_NO_SYNC && v->has_stream &&
        cai_is_cuda_device(v->device.device_type))
        stream_obj = PyLong_FromSsize_t((Py_ssize_t)v->stream);
    else
        stream_obj = reported_stream(given, s);
    return caiview_taking_stream(st, t, stream_obj);
}

/* Calls x.__dlpack__(stream=..., max_version=(1, 3)), with copy=False
 * when no_copy, or with the stream alone for a pre-1.0 producer that
 * refuses the others (max_version and copy came together). */
static PyObject *call_dlpack(cai_state *st, PyObject *method,
                             PyObject *stream_arg, int no_copy)
{
    PyObject *call_args[3] = {stream_arg, st->max_version_ours, Py_False};
    PyObject *capsule;

    capsule = PyObject_Vectorcall(method, call_args, 0,
                                  no_copy ? st->kw_stream_max_version_copy
                                          : st->kw_stream_max_version);
    if (capsule == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        capsule = PyObject_Vectorcall(method, call_args, 0, st->kw_stream);
    }
    return capsule;
}

/* The Python protocol: __dlpack_device__, then __dlpack__.  want_cuda
 * (0 or 1; -1: either) is the kind of memory an interface property of x
 * describes: memory of the other kind raises AttributeError before any
 * export, and the export is asked for without a copy. */
PyObject *from_producer(cai_state *st, PyObject *x, int given, intptr_t s,
                        int legacy_writable, int want_cuda)
{
    PyObject *device, *method, *stream_obj, *stream_arg, *capsule, *result;
    DLDevice dev;

    if (cai_lookup_attr(x, st->name[N_DLPACK], &method) < 0)
        return NULL;
    if (method == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "from_dlpack() takes a DLPack producer (with __dlpack__) "
                     "or a DLPack capsule, got %.100s",
                     Py_TYPE(x)->tp_name);
        return NULL;
    }
    device = PyObject_CallMethodNoArgs(x, st->name[N_DLPACK_DEVICE]);
    if (device == NULL ||
        read_device(st, device, "__dlpack_device__()", &dev) != 0) {
        Py_XDECREF(device);
        Py_DECREF(method);
        return NULL;
    }
    Py_DECREF(device);
    if (want_cuda >= 0 && want_cuda != cai_is_cuda_device(dev.device_type)) {
        const char *name = device_type_name(dev.device_type);

        if (name == NULL)
            name = "?";
        if (want_cuda)
            PyErr_Format(PyExc_AttributeError,
                         "__cuda_array_interface__: the data is host memory "
                         "(%s); use __array_interface__",
                         name);
        else
            PyErr_Format(PyExc_AttributeError,
                         "__array_interface__: the data is on device type "
                         "%s, not host memory; use __cuda_array_interface__",
                         name);
        Py_DECREF(method);
        return NULL;
    }
    if (cai_is_cuda_device(dev.device_type)) {
        if (given && s == CAI_STREAM_NO_SYNC) {
            Py_DECREF(method);
            return unordered_error();
        }
        if ((stream_obj = reported_stream(given, s)) == NULL) {
            Py_DECREF(method);
            return NULL;
        }
        stream_arg =
            PyLong_FromSsize_t(given ? (Py_ssize_t)s : CAI_STREAM_LEGACY);
        if (stream_arg == NULL) {
            Py_DECREF(stream_obj);
            Py_DECREF(method);
            return NULL;
        }
    } else {
        stream_obj = Py_NewRef(Py_None);
        stream_arg = Py_NewRef(Py_None);
    }
    capsule = call_dlpack(st, method, stream_arg, want_cuda >= 0);
    Py_DECREF(stream_arg);
    Py_DECREF(method);
    if (capsule == NULL) {
        Py_DECREF(stream_obj);
        return NULL;
    }
    if (!PyCapsule_CheckExact(capsule)) {
        PyErr_Format(PyExc_TypeError,
                     "%.100s.__dlpack__() returned %.100s, not a capsule",
                     Py_TYPE(x)->tp_name, Py_TYPE(capsule)->tp_name);
        result = NULL;
    } else {
        result = tensor_from_capsule(st, capsule, stream_obj, legacy_writable);
    }
    Py_DECREF(capsule);
    Py_DECREF(stream_obj);
    return result;
}

/* x's tensor in a new view, from whichever source x is. */
static PyObject *view_of(cai_state *st, PyObject *x, int given, intptr_t s,
                         int legacy_writable)
{
    PyObject *stream_obj, *result;

    if (given && s == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "stream = 0 is disallowed by the DLPack and CAI specs "
                        "(ambiguous); use 1, 2, a stream handle, or -1");
        return NULL;
    }
    /* Only these are ever written into a CAI dict (None for -1). */
    if (given && s < CAI_STREAM_NO_SYNC) {
        PyErr_Format(PyExc_ValueError,
                     "stream = %zd is not a stream: use None, -1, 1, 2 or a "
                     "stream handle",
                     (Py_ssize_t)s);
        return NULL;
    }
    if (PyCapsule_CheckExact(x)) {
        if (given && s == CAI_STREAM_NO_SYNC && capsule_on_cuda(x))
            return unordered_error();
        if ((stream_obj = given ? reported_stream(1, s)
                                : Py_NewRef(Py_None)) == NULL)
            return NULL;
        result = tensor_from_capsule(st, x, stream_obj, legacy_writable);
        Py_DECREF(stream_obj);
        return result;
    }
    if (is_view(x))
        return from_view(st, (DLPackViewObject *)x, given, s);
    if ((!given || s == CAI_STREAM_NO_SYNC) &&
        from_foreign_table(st, x, given, &result))
        return result;
    return from_producer(st, x, given, s, legacy_writable, -1);
}

PyObject *from_dlpack(PyObject *module, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames)
{
    cai_state *st = PyModule_GetState(module);
    PyObject *values[3] = {NULL, NULL, NULL}, *view;
    intptr_t s;
    int given, legacy_writable, ro_ok;

    if (check_positional("from_dlpack", nargs, 1) != 0 ||
        parse_keywords("from_dlpack", args + nargs, kwnames,
                       st->kw_from_dlpack, values, 3) != 0 ||
        (legacy_writable = read_flag(values[1], "legacy_writable", 0)) < 0 ||
        (ro_ok = read_flag(values[2], "allow_readonly_legacy", 0)) < 0 ||
        read_stream(st, values[0], &given, &s) != 0)
        return NULL;
    view = view_of(st, args[0], given, s, legacy_writable);
    if (view != NULL && ro_ok)
        caiview_allow_readonly_legacy(view);
    return view;
}
