/*
 * CAIView, what from_dlpack (fromdlpack.c) returns: owns a DLPack tensor
 * and describes it as __cuda_array_interface__ (CUDA memory) or
 * __array_interface__ (host-accessible memory), and re-exports it.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

typedef struct {
    PyObject_HEAD
    void *tensor; /* DLManagedTensorVersioned * or DLManagedTensor * */
    int versioned;
    DLDevice device;
    int readonly;           /* read-only whatever the tensor says */
    int readonly_legacy_ok; /* read-only data may go out as a legacy capsule */
    PyObject *stream;       /* CAI 'stream': an int, or None */
    PyObject *iface; /* the interface, built at the first read; private */
    PyObject *weakrefs;
} CAIViewObject;

/* The view's tensor as a descriptor; raises on failure. */
static int tensor_desc(cai_state *st, const CAIViewObject *v, cai_desc_t *d)
{
    cai_error_t err;
    int rc;

    if (v->tensor == NULL) {
        PyErr_SetString(PyExc_ReferenceError,
                        "the CAIView was cleared by the garbage collector "
                        "(it was part of an unreachable cycle)");
        return -1;
    }
    rc = v->versioned ? cai_desc_from_dlpack_versioned(v->tensor, d, &err)
                      : cai_desc_from_dlpack(v->tensor, d, &err);
    if (rc != 0)
        raise_status(st, &err);
    return rc;
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
        !cai_is_cuda_device(d.device.device_type)) {
        delete_tensor(tensor, versioned);
        PyErr_Format(PyExc_BufferError,
                     "device: the tensor lives on DLPack device type %d; "
                     "only kDLCPU (1), kDLCUDA (2), kDLCUDAHost (3) and "
                     "kDLCUDAManaged (13) are described by an array interface",
                     (int)d.device.device_type);
        return NULL;
    }
    /* As a device argument is read (args.c): a negative id names no
     * device, whoever produced the tensor. */
    if (d.device.device_id < 0) {
        delete_tensor(tensor, versioned);
        PyErr_Format(PyExc_ValueError,
                     "device: device_id = %d is out of range",
                     (int)d.device.device_id);
        return NULL;
    }
    v = PyObject_GC_New(CAIViewObject, st->CAIView_Type);
    if (v == NULL) {
        delete_tensor(tensor, versioned);
        return NULL;
    }
    v->tensor = tensor;
    v->versioned = versioned;
    v->device = d.device;
    v->stream = Py_NewRef(d.device.device_type == kDLCPU ? Py_None : stream);
    v->readonly = readonly;
    v->readonly_legacy_ok = 0;
    v->iface = NULL;
    v->weakrefs = NULL;
    PyObject_GC_Track(v);
    return (PyObject *)v;
}

/*
 * The collector sees what the tensor holds when the tensor is ours and
 * holds a Python object (the producer, or the DLPackView over it), so a
 * producer that keeps a view of its own hand-over is collected.  A foreign
 * tensor's owner is out of sight: such a cycle stays.
 */
static int caiview_traverse(PyObject *self, visitproc visit, void *arg)
{
    CAIViewObject *v = (CAIViewObject *)self;
    cai_release_fn release;
    void *owner;

    Py_VISIT(Py_TYPE(self));
    if (v->tensor != NULL &&
        cai_tensor_owner(v->tensor, v->versioned, &release, &owner) == 0 &&
        release == release_pyobject)
        Py_VISIT((PyObject *)owner);
    return 0;
}

/* Breaks a cycle by deleting the tensor: a view the collector cleared
 * raises ReferenceError from then on. */
static int caiview_clear(PyObject *self)
{
    CAIViewObject *v = (CAIViewObject *)self;
    void *tensor = v->tensor;

    Py_CLEAR(v->iface);
    v->tensor = NULL;
    if (tensor != NULL)
        delete_tensor(tensor, v->versioned);
    return 0;
}

void caiview_dealloc(PyObject *self)
{
    CAIViewObject *v = (CAIViewObject *)self;
    PyTypeObject *type = Py_TYPE(self);

    PyObject_GC_UnTrack(self);
    if (v->weakrefs != NULL)
        PyObject_ClearWeakRefs(self);
    Py_CLEAR(v->stream);
    caiview_clear(self);
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

    if (tensor_desc(st, v, &d) != 0)
        return NULL;
    if (cai_typestr_format(d.dtype, typestr, &err) != 0) {
        char name[32];

        PyErr_Format(PyExc_BufferError,
                     "DLPack type %s has no NumPy typestr, so neither "
                     "__cuda_array_interface__ nor __array_interface__ can "
                     "describe it; DLPack can still carry it (the view's "
                     "__dlpack__, e.g. torch.from_dlpack(view))",
                     cai_dtype_name(d.dtype, name));
        return NULL;
    }
    if ((dict = PyDict_New()) == NULL)
        return NULL;
#define PUT(key, expr)                                     \
    do {                                                   \
        if ((x = (expr)) == NULL ||                        \
            PyDict_SetItem(dict, st->name[key], x) != 0) { \
            Py_XDECREF(x);                                 \
            Py_DECREF(dict);                               \
            return NULL;                                   \
        }                                                  \
        Py_DECREF(x);                                      \
    } while (0)
    PUT(F_SHAPE, int64_tuple(d.ndim, d.shape));
    PUT(F_TYPESTR, PyUnicode_FromString(typestr));
    PUT(F_DATA, Py_BuildValue("(NO)", PyLong_FromVoidPtr(d.data),
                              d.readonly || v->readonly ? Py_True : Py_False));
    PUT(F_STRIDES,
        d.has_strides ? int64_tuple(d.ndim, d.strides) : Py_NewRef(Py_None));
    PUT(F_VERSION, PyLong_FromLong(3));
    if (cai_is_cuda_device(d.device.device_type))
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

    if (!cai_is_cuda_device(v->device.device_type)) {
        PyErr_SetString(PyExc_AttributeError,
                        "__cuda_array_interface__: the data is host memory "
                        "(kDLCPU); use __array_interface__");
        return NULL;
    }
    return caiview_interface(v);
}

/*
 * A host reader of pinned or managed memory reads at once: the host first
 * waits, with the GIL released, for the work queued on the stream the view
 * reports (None: the data is ready; CAIBRIDGE_SYNC=0: no ordering).
 */
static int caiview_desc(cai_state *st, CAIViewObject *v, cai_desc_t *d);

/* The host-reader rule of every path (a device-wide wait for managed
 * memory without concurrent access included). */
static int caiview_host_wait(cai_state *st, CAIViewObject *v)
{
    cai_desc_t d;

    if (caiview_desc(st, v, &d) != 0)
        return -1;
    return cai_py_host_wait(st, &d, 1);
}

/* Host-accessible memory: kDLCPU, and pinned or managed CUDA memory, as
 * NumPy and as_dlpack take them; the CAI 'stream' is not NumPy's. */
static PyObject *caiview_get_ai(PyObject *self, void *unused)
{
    CAIViewObject *v = (CAIViewObject *)self;
    PyObject *dict;

    if (v->device.device_type == kDLCPU)
        return caiview_interface(v);
    if (v->device.device_type != kDLCUDAHost &&
        v->device.device_type != kDLCUDAManaged) {
        PyErr_Format(PyExc_AttributeError,
                     "__array_interface__: the data is CUDA device memory "
                     "(device type %d); use __cuda_array_interface__",
                     (int)v->device.device_type);
        return NULL;
    }
    if (caiview_host_wait(type_state(Py_TYPE(v)), v) != 0 ||
        (dict = caiview_interface(v)) == NULL)
        return NULL;
    if (PyDict_DelItem(dict, type_state(Py_TYPE(v))->name[F_STREAM]) != 0) {
        Py_DECREF(dict);
        return NULL;
    }
    return dict;
}

static PyObject *caiview_dlpack_device(PyObject *self, PyObject *unused)
{
    CAIViewObject *v = (CAIViewObject *)self;

    return device_pair(v->device);
}

/* What the view holds: DLPack type, shape, device; a cleared view says
 * so.  Only kDLCPU and the CUDA types are ever viewed: all have names. */
static PyObject *caiview_repr(PyObject *self)
{
    CAIViewObject *v = (CAIViewObject *)self;
    const DLTensor *t;
    PyObject *shape, *result;
    char name[32];

    if (v->tensor == NULL)
        return PyUnicode_FromString("<caibridge.CAIView cleared>");
    t = v->versioned ? &((DLManagedTensorVersioned *)v->tensor)->dl_tensor
                     : &((DLManagedTensor *)v->tensor)->dl_tensor;
    if ((shape = int64_tuple(t->ndim, t->shape)) == NULL)
        return NULL;
    result = PyUnicode_FromFormat(
        "<caibridge.CAIView %s shape=%R device=(%s, %d) %s>",
        cai_dtype_name(t->dtype, name), shape,
        device_type_name(v->device.device_type), (int)v->device.device_id,
        v->versioned ? "versioned" : "legacy");
    Py_DECREF(shape);
    return result;
}

/* ------------------------------------------------------------------ */
/* CAIView as a DLPack producer: its tensor re-exported                */

/* The view's tensor as a descriptor, with the stream its data is ready on
 * (the CAI stream it reports). */
static int caiview_desc(cai_state *st, CAIViewObject *v, cai_desc_t *d)
{
    if (tensor_desc(st, v, d) != 0)
        return -1;
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
                            int versioned, intptr_t consumer, void **out)
{
    unsigned options = 0;

    if (v->versioned && (((DLManagedTensorVersioned *)v->tensor)->flags &
                         DLPACK_FLAG_BITMASK_IS_COPIED))
        options |= CAI_OPT_IS_COPIED;
    if (v->readonly_legacy_ok)
        options |= CAI_OPT_LEGACY_READONLY_OK;
    return checked_tensor(st, d, versioned, options, Py_NewRef((PyObject *)v),
                          consumer, 1, out);
}

/* from_dlpack(..., allow_readonly_legacy=True): the user says the
 * consumers of this view do not write, as as_dlpack's option does. */
void caiview_allow_readonly_legacy(PyObject *view)
{
    ((CAIViewObject *)view)->readonly_legacy_ok = 1;
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
    return caiview_reexport(st, v, &d, 1,
                            cai_is_cuda_device(d.device.device_type)
                                ? CAI_STREAM_LEGACY
                                : CAI_STREAM_NO_SYNC,
                            out);
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
    intptr_t consumer = CAI_STREAM_NO_SYNC;
    int prepared = 0;

    if (check_positional("__dlpack__", nargs, 0) != 0 ||
        dlpack_request(st, args + nargs, kwnames, &req) != 0)
        return NULL;
    req.readonly_legacy_ok = v->readonly_legacy_ok;
    if (caiview_desc(st, v, &d) != 0 ||
        (prepared = request_prepare(st, &d, &req, &consumer)) < 0)
        return NULL;
    if (prepared == 2)
        /* A fence on the view's stream taken now, waited for on the host. */
        return cai_py_host_wait(st, &d, req.sync) != 0
                   ? NULL
                   : host_copy_of_device(st, &d, req.versioned);
    if (req.copy)
        return request_copy(st, &d, &req, self);
    if (caiview_reexport(st, v, &d, req.versioned, consumer, &tensor) != 0)
        return NULL;
    return tensor_capsule(tensor, req.versioned);
}

PyDoc_STRVAR(
    caiview_dlpack_doc,
    "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None,\n"
    "           copy=None)\n"
    "--\n\n"
    "Re-export the view's tensor as a DLPack capsule, zero-copy.\n\n"
    "The new tensor keeps the source's READ_ONLY and IS_COPIED flags and "
    "holds\n"
    "this view, so the source tensor lives until the consumer releases it.\n"
    "A versioned capsule when max_version asks for 1.x, else a legacy one\n"
    "(refused for read-only data).  For CUDA memory the consumer's stream\n"
    "waits on the view's CAI stream (None: legacy default, -1: no ordering, "
    "0\n"
    "refused); for host memory stream must be None.  copy=True makes a copy\n"
    "marked IS_COPIED (of CUDA memory: on the consumer's stream).");

static PyGetSetDef caiview_getset[] = {
    {"__cuda_array_interface__", caiview_get_cai, NULL,
     "CAI version 3 for CUDA memory (kDLCUDA, kDLCUDAHost, kDLCUDAManaged).",
     NULL},
    {"__array_interface__", caiview_get_ai, NULL,
     "NumPy's array interface (version 3) for host-accessible memory:\n"
     "kDLCPU, and pinned or managed CUDA memory, read after the host has\n"
     "waited for the view's CAI stream.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef caiview_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))caiview_dlpack,
     METH_METHOD | METH_FASTCALL | METH_KEYWORDS, caiview_dlpack_doc},
    {"__dlpack_device__", caiview_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n"
     "The (device_type, device_id) of the data."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef caiview_members[] = {{"__weaklistoffset__", Py_T_PYSSIZET,
                                         offsetof(CAIViewObject, weakrefs),
                                         Py_READONLY, NULL},
                                        {NULL, 0, 0, 0, NULL}};

PyDoc_STRVAR(
    caiview_doc,
    "Owns a DLPack tensor and describes it as __cuda_array_interface__ (CUDA\n"
    "memory) and __array_interface__ (host memory, and pinned or managed "
    "CUDA\n"
    "memory, which has both); made by caibridge.from_dlpack().  The view is "
    "a\n"
    "DLPack producer too: __dlpack__ re-exports its tensor zero-copy, and "
    "the\n"
    "type publishes the DLPack C exchange API.  The tensor's deleter runs\n"
    "once, when the view and every re-export are gone.");

static PyType_Slot caiview_slots[] = {
    {Py_tp_dealloc, caiview_dealloc},
    {Py_tp_traverse, caiview_traverse},
    {Py_tp_clear, caiview_clear},
    {Py_tp_repr, caiview_repr},
    {Py_tp_doc, (void *)(uintptr_t)caiview_doc},
    {Py_tp_methods, caiview_methods},
    {Py_tp_getset, caiview_getset},
    {Py_tp_members, caiview_members},
    {0, NULL}};

PyType_Spec caiview_spec = {"caibridge.CAIView", sizeof(CAIViewObject), 0,
                            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
                                Py_TPFLAGS_IMMUTABLETYPE |
                                Py_TPFLAGS_DISALLOW_INSTANTIATION,
                            caiview_slots};

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
