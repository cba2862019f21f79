/*
 * CAIView, what from_dlpack returns: owns a DLPack tensor and describes it
 * as __cuda_array_interface__ (CUDA memory) or __array_interface__ (host
 * memory); and from_dlpack itself, which takes the tensor from a capsule,
 * one of our views, a foreign exchange API table or a producer's
 * __dlpack__.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    void *tensor; /* DLManagedTensorVersioned * or DLManagedTensor * */
    int versioned;
    DLDevice device;
    int readonly;     /* read-only whatever the tensor says */
    PyObject *stream; /* CAI 'stream': an int, or None */
    PyObject *iface;  /* the interface, built at the first read; private */
    PyObject *weakrefs;
} CAIViewObject;

static int tensor_desc(const CAIViewObject *v, cai_desc_t *d, cai_error_t *err)
{
    return v->versioned ? cai_desc_from_dlpack_versioned(v->tensor, d, err)
                        : cai_desc_from_dlpack(v->tensor, d, err);
}

/*
 * Takes ownership of a tensor: on success the view calls its deleter once
 * when it dies; on failure the deleter is called before this returns.
 * stream is the CAI stream to report (borrowed; None for none); readonly
 * marks the data read-only whatever the tensor says.
 */
PyObject *caiview_new(cai_state *st, void *tensor, int versioned,
                      PyObject *stream, int readonly)
{
    CAIViewObject *v;
    cai_desc_t d;
    cai_error_t err;
    int rc;

    rc = versioned ? cai_desc_from_dlpack_versioned(tensor, &d, &err)
                   : cai_desc_from_dlpack(tensor, &d, &err);
    if (rc != 0) {
        delete_tensor(tensor, versioned);
        return raise_status(st, &err);
    }
    if (d.device.device_type != kDLCPU &&
        !is_cuda_device(d.device.device_type)) {
        delete_tensor(tensor, versioned);
        PyErr_Format(PyExc_BufferError,
                     "device: the tensor lives on DLPack device type %d; "
                     "only kDLCPU (1), kDLCUDA (2), kDLCUDAHost (3) and "
                     "kDLCUDAManaged (13) are described by an array interface",
                     (int)d.device.device_type);
        return NULL;
    }
    v = PyObject_New(CAIViewObject, st->CAIView_Type);
    if (v == NULL) {
        delete_tensor(tensor, versioned);
        return NULL;
    }
    v->tensor = tensor;
    v->versioned = versioned;
    v->device = d.device;
    v->stream = Py_NewRef(d.device.device_type == kDLCPU ? Py_None : stream);
    v->readonly = readonly;
    v->iface = NULL;
    v->weakrefs = NULL;
    return (PyObject *)v;
}

void caiview_dealloc(PyObject *self)
{
    CAIViewObject *v = (CAIViewObject *)self;
    PyTypeObject *type = Py_TYPE(self);

    if (v->weakrefs != NULL)
        PyObject_ClearWeakRefs(self);
    Py_CLEAR(v->stream);
    Py_CLEAR(v->iface);
    delete_tensor(v->tensor, v->versioned);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *int64_tuple(int n, const int64_t *values)
{
    PyObject *t = PyTuple_New(n);
    int i;

    if (t == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(values[i]);

        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* The interface dict: version 3, strides None exactly when the layout is
 * C-contiguous, and for CUDA memory the stream. */
static PyObject *build_interface(CAIViewObject *v)
{
    cai_state *st = type_state(Py_TYPE(v));
    char typestr[CAI_TYPESTR_MAX];
    cai_desc_t d;
    cai_error_t err;
    PyObject *dict, *x;

    if (tensor_desc(v, &d, &err) != 0 ||
        cai_typestr_format(d.dtype, typestr, &err) != 0)
        return raise_status(st, &err);
    if ((dict = PyDict_New()) == NULL)
        return NULL;
#define PUT(key, expr)                                                       \
    do {                                                                     \
        if ((x = (expr)) == NULL ||                                          \
            PyDict_SetItem(dict, st->name[key], x) != 0) {                   \
            Py_XDECREF(x);                                                   \
            Py_DECREF(dict);                                                 \
            return NULL;                                                     \
        }                                                                    \
        Py_DECREF(x);                                                        \
    } while (0)
    PUT(F_SHAPE, int64_tuple(d.ndim, d.shape));
    PUT(F_TYPESTR, PyUnicode_FromString(typestr));
    PUT(F_DATA, Py_BuildValue("(NO)", PyLong_FromVoidPtr(d.data),
                              d.readonly || v->readonly ? Py_True
                                                        : Py_False));
    PUT(F_STRIDES, d.has_strides ? int64_tuple(d.ndim, d.strides)
                                 : Py_NewRef(Py_None));
    PUT(F_VERSION, PyLong_FromLong(3));
    if (is_cuda_device(d.device.device_type))
        PUT(F_STREAM, Py_NewRef(v->stream));
#undef PUT
    return dict;
}

/*
 * A new dict on each read, as ndarray.__array_interface__ gives: a consumer
 * may change its own.  The first read builds the view's private copy, whose
 * values are all immutable; later reads copy it (a tenth of a build).
 */
static PyObject *caiview_interface(CAIViewObject *v)
{
    PyObject *built, *result;

    if (v->iface == NULL) {
        if ((built = build_interface(v)) == NULL)
            return NULL;
#ifdef Py_GIL_DISABLED
        Py_BEGIN_CRITICAL_SECTION(v);
#endif
        if (v->iface == NULL)
            v->iface = built;
        else
            Py_DECREF(built);
#ifdef Py_GIL_DISABLED
        Py_END_CRITICAL_SECTION();
#endif
    }
    result = PyDict_Copy(v->iface);
    return result;
}

static PyObject *caiview_get_cai(PyObject *self, void *unused)
{
    CAIViewObject *v = (CAIViewObject *)self;

    if (!is_cuda_device(v->device.device_type)) {
        PyErr_SetString(PyExc_AttributeError,
                        "__cuda_array_interface__: the data is host memory "
                        "(kDLCPU); use __array_interface__");
        return NULL;
    }
    return caiview_interface(v);
}

static PyObject *caiview_get_ai(PyObject *self, void *unused)
{
    CAIViewObject *v = (CAIViewObject *)self;

    if (v->device.device_type != kDLCPU) {
        PyErr_Format(PyExc_AttributeError,
                     "__array_interface__: the data is CUDA memory (device "
                     "type %d); use __cuda_array_interface__",
                     (int)v->device.device_type);
        return NULL;
    }
    return caiview_interface(v);
}

static PyObject *caiview_dlpack_device(PyObject *self, PyObject *unused)
{
    CAIViewObject *v = (CAIViewObject *)self;

    return device_pair(v->device);
}

static PyObject *caiview_repr(PyObject *self)
{
    CAIViewObject *v = (CAIViewObject *)self;

    /* Only kDLCPU and the CUDA types are ever viewed: all have names. */
    return PyUnicode_FromFormat("<caibridge.CAIView device=(%s, %d) %s>",
                                device_type_name(v->device.device_type),
                                (int)v->device.device_id,
                                v->versioned ? "versioned" : "legacy");
}

/* ------------------------------------------------------------------ */
/* CAIView as a DLPack producer: its tensor re-exported                */

/* The view's tensor as a descriptor, with the stream its data is ready on
 * (the CAI stream it reports). */
static int caiview_desc(cai_state *st, CAIViewObject *v, cai_desc_t *d)
{
    cai_error_t err;

    if (tensor_desc(v, d, &err) != 0) {
        raise_status(st, &err);
        return -1;
    }
    /* Read-only as the interface says it (a legacy import is, unless the
     * caller opted out), not only as the tensor's flags say. */
    d->readonly = d->readonly || v->readonly;
    d->has_stream = v->stream != Py_None;
    d->stream = d->has_stream ? (intptr_t)PyLong_AsSsize_t(v->stream) : 0;
    return 0;
}

/* A new tensor over the view's data, flags kept (READ_ONLY, IS_COPIED),
 * holding a reference to the view: the source tensor lives until every
 * re-export is released. */
static int caiview_reexport(cai_state *st, CAIViewObject *v, cai_desc_t *d,
                            int versioned, void **out)
{
    unsigned options = 0;

    if (v->versioned && (((DLManagedTensorVersioned *)v->tensor)->flags &
                         DLPACK_FLAG_BITMASK_IS_COPIED))
        options |= CAI_OPT_IS_COPIED;
    return checked_tensor(st, d, versioned, options,
                          Py_NewRef((PyObject *)v), out);
}

/* The exchange API's export (no ordering with the consumer): the data is
 * first ordered onto the legacy default stream, the table's work stream. */
int caiview_tensor(cai_state *st, PyObject *view, void **out)
{
    CAIViewObject *v = (CAIViewObject *)view;
    cai_desc_t d;

    if (caiview_desc(st, v, &d) != 0 ||
        (d.has_stream && order_streams(st, &d, CAI_STREAM_LEGACY, 1) != 0))
        return -1;
    return caiview_reexport(st, v, &d, 1, out);
}

static PyObject *caiview_dlpack(PyObject *self, PyTypeObject *defining_class,
                                PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    CAIViewObject *v = (CAIViewObject *)self;
    cai_state *st = type_state(defining_class);
    cai_request_t req;
    cai_desc_t d;
    void *tensor;

    if (check_positional("__dlpack__", nargs, 0) != 0 ||
        dlpack_request(st, args + nargs, kwnames, &req) != 0)
        return NULL;
    if (caiview_desc(st, v, &d) != 0 || request_prepare(st, &d, &req) != 0)
        return NULL;
    if (req.copy)
        return copy_to_capsule(st, &d, req.versioned);
    if (caiview_reexport(st, v, &d, req.versioned, &tensor) != 0)
        return NULL;
    return tensor_capsule(tensor, req.versioned);
}

PyDoc_STRVAR(caiview_dlpack_doc,
"__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None,\n"
"           copy=None)\n"
"--\n\n"
"Re-export the view's tensor as a DLPack capsule, zero-copy.\n\n"
"The new tensor keeps the source's READ_ONLY and IS_COPIED flags and holds\n"
"this view, so the source tensor lives until the consumer releases it.\n"
"A versioned capsule when max_version asks for 1.x, else a legacy one\n"
"(refused for read-only data).  For CUDA memory the consumer's stream\n"
"waits on the view's CAI stream (None: legacy default, -1: no ordering, 0\n"
"refused); for host memory stream must be None.  copy=True makes a host\n"
"copy marked IS_COPIED.");

static PyGetSetDef caiview_getset[] = {
    {"__cuda_array_interface__", caiview_get_cai, NULL,
     "CAI version 3 for CUDA memory (kDLCUDA, kDLCUDAHost, kDLCUDAManaged).",
     NULL},
    {"__array_interface__", caiview_get_ai, NULL,
     "NumPy's array interface (version 3) for host memory.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef caiview_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))caiview_dlpack,
     METH_METHOD | METH_FASTCALL | METH_KEYWORDS, caiview_dlpack_doc},
    {"__dlpack_device__", caiview_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n"
     "The (device_type, device_id) of the data."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef caiview_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(CAIViewObject, weakrefs),
     Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL}};

PyDoc_STRVAR(caiview_doc,
"Owns a DLPack tensor and describes it as __cuda_array_interface__ (CUDA\n"
"memory) or __array_interface__ (host memory); made by\n"
"caibridge.from_dlpack().  The view is a DLPack producer too: __dlpack__\n"
"re-exports its tensor zero-copy, and the type publishes the DLPack C\n"
"exchange API.  The tensor's deleter runs once, when the view and every\n"
"re-export are gone.");

static PyType_Slot caiview_slots[] = {
    {Py_tp_dealloc, caiview_dealloc},
    {Py_tp_repr, caiview_repr},
    {Py_tp_doc, (void *)(uintptr_t)caiview_doc},
    {Py_tp_methods, caiview_methods},
    {Py_tp_getset, caiview_getset},
    {Py_tp_members, caiview_members},
    {0, NULL}};

PyType_Spec caiview_spec = {
    "caibridge.CAIView",
    sizeof(CAIViewObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
        Py_TPFLAGS_DISALLOW_INSTANTIATION,
    caiview_slots};

/* ------------------------------------------------------------------ */
/* from_dlpack                                                         */

const char from_dlpack_doc[] =
"from_dlpack(x, *, stream=None, legacy_writable=False)\n"
"--\n\n"
"Take a DLPack tensor from a producer (an object with __dlpack__) or a\n"
"capsule, and return a CAIView that owns it: __cuda_array_interface__ for\n"
"CUDA memory, __array_interface__ for host memory.  stream is the stream\n"
"the data will be used on (None: legacy default; an int; or an object with\n"
"__cuda_stream__); it is passed to the producer for CUDA data and reported\n"
"as the CAI 'stream'.  A producer whose type publishes the DLPack C\n"
"exchange API is read through it when stream is None or -1, and the CAI\n"
"'stream' is then the one its table says the data is ready on.  stream=-1\n"
"is refused for CUDA data that comes through __dlpack__ or a capsule: the\n"
"producer's stream is unknown there, and 'stream: None' would claim the\n"
"data is ready.\n"
"A legacy (unversioned) tensor cannot say whether its memory may be\n"
"written: it is described as read-only, as NumPy imports it, unless\n"
"legacy_writable=True.";

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
                  is_cuda_device(t->dl_tensor.device.device_type);
    } else if (strcmp(name, CAPSULE_LEGACY) == 0) {
        const DLManagedTensor *t = PyCapsule_GetPointer(capsule, name);

        on_cuda = t != NULL && is_cuda_device(t->dl_tensor.device.device_type);
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
    DLManagedTensorVersioned *t;
    cai_error_t err;
    void *tensor;
    PyObject *stream_obj;

    view_to_header(v, &d);
    if (check_stream_value(&d, given, s, &consumer) != 0 ||
        view_order(st, v, consumer) != 0)
        return NULL;
    if (view_tensor(v, 1, 0, consumer, &tensor, &err) != 0)
        return raise_status(st, &err);
    t = tensor;
    /* -1: nothing was ordered, so the data is ready where the producer
     * said (None when it named no stream). */
    if (given && s == CAI_STREAM_NO_SYNC && v->has_stream &&
        is_cuda_device(v->device.device_type))
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
static PyObject *from_producer(cai_state *st, PyObject *x, int given,
                               intptr_t s, int legacy_writable,
                               int want_cuda)
{
    PyObject *device, *method, *stream_obj, *stream_arg, *capsule, *result;
    DLDevice dev;

    if (cai_lookup_attr(x, st->name[N_DLPACK], &method) < 0)
        return NULL;
    if (method == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "from_dlpack() takes a DLPack producer (with __dlpack__) "
                     "or a DLPack capsule, got %.100s", Py_TYPE(x)->tp_name);
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
    if (want_cuda >= 0 && want_cuda != is_cuda_device(dev.device_type)) {
        const char *name = device_type_name(dev.device_type);

        if (name == NULL)
            name = "?";
        if (want_cuda)
            PyErr_Format(PyExc_AttributeError,
                         "__cuda_array_interface__: the data is host memory "
                         "(%s); use __array_interface__", name);
        else
            PyErr_Format(PyExc_AttributeError,
                         "__array_interface__: the data is on device type "
                         "%s, not host memory; use __cuda_array_interface__",
                         name);
        Py_DECREF(method);
        return NULL;
    }
    if (is_cuda_device(dev.device_type)) {
        if (given && s == CAI_STREAM_NO_SYNC) {
            Py_DECREF(method);
            return unordered_error();
        }
        if ((stream_obj = reported_stream(given, s)) == NULL) {
            Py_DECREF(method);
            return NULL;
        }
        stream_arg = PyLong_FromSsize_t(given ? (Py_ssize_t)s
                                              : CAI_STREAM_LEGACY);
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
        result = tensor_from_capsule(st, capsule, stream_obj,
                                     legacy_writable);
    }
    Py_DECREF(capsule);
    Py_DECREF(stream_obj);
    return result;
}

PyObject *from_dlpack(PyObject *module, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames)
{
    cai_state *st = PyModule_GetState(module);
    PyObject *values[2] = {NULL, NULL}, *x, *stream_obj, *result;
    intptr_t s;
    int given, legacy_writable;

    if (check_positional("from_dlpack", nargs, 1) != 0 ||
        parse_keywords("from_dlpack", args + nargs, kwnames,
                       st->kw_from_dlpack, values, 2) != 0 ||
        (legacy_writable = read_flag(values[1], "legacy_writable", 0)) < 0)
        return NULL;
    x = args[0];
    if (read_stream(st, values[0], &given, &s) != 0)
        return NULL;
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
                     "stream handle", (Py_ssize_t)s);
        return NULL;
    }
    if (PyCapsule_CheckExact(x)) {
        if (given && s == CAI_STREAM_NO_SYNC && capsule_on_cuda(x))
            return unordered_error();
        if ((stream_obj = given ? reported_stream(1, s) : Py_NewRef(Py_None))
            == NULL)
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

/*
 * The interface properties that add_array_interface gives a DLPack class:
 * the tensor from obj's __dlpack__ (no copy; for CUDA made ready on the
 * legacy default stream) described in a fresh dict, then released.  CAI's
 * lifetime rule: the instance, not the dict, keeps the memory alive.
 */
PyObject *caiview_interface_of_producer(cai_state *st, PyObject *obj,
                                        int is_cuda)
{
    PyObject *view = from_producer(st, obj, 0, 0, 0, is_cuda), *dict;
    CAIViewObject *v = (CAIViewObject *)view;
    int copied;

    if (view == NULL)
        return NULL;
    copied = v->versioned && (((DLManagedTensorVersioned *)v->tensor)->flags &
                              DLPACK_FLAG_BITMASK_IS_COPIED);
    dict = copied ? NULL : caiview_interface(v);
    /* Released first: the producer's deleter may run Python code. */
    Py_DECREF(view);
    if (copied)
        PyErr_Format(PyExc_BufferError,
                     "%.100s.__dlpack__ made a copy (IS_COPIED) though "
                     "copy=False was asked: an array interface can only "
                     "describe memory the instance itself keeps",
                     Py_TYPE(obj)->tp_name);
    return dict;
}
