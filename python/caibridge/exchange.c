/*
 * The DLPack C exchange API (DLPack 1.2/1.3), both sides: the tables that
 * DLPackView's and CAIView's types, and the classes add_dlpack patches,
 * publish as __dlpack_c_exchange_api__, and reading a foreign type's table
 * in from_dlpack.  The table's functions are called
 * from C with no module at hand: the views they take lead to the module
 * state through their type.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <stdlib.h>

static const char CAPSULE_EXCHANGE_API[] = "dlpack_exchange_api";

/* Allocates a C-contiguous host tensor like prototype; the core builds the
 * tensor and its deleter frees the data block too. */
static int xapi_allocator(DLTensor *prototype, DLManagedTensorVersioned **out,
                          void *error_ctx,
                          void (*set_error)(void *, const char *,
                                            const char *))
{
    cai_desc_t d;
    cai_error_t err;
    int64_t nbytes;
    void *block;

    *out = NULL;
    if (prototype->device.device_type != kDLCPU) {
        if (set_error != NULL)
            set_error(error_ctx, "BufferError",
                      "caibridge allocates host (kDLCPU) tensors only");
        return -1;
    }
    if (prototype->ndim < 0 || prototype->ndim > CAI_MAX_NDIM ||
        (prototype->ndim > 0 && prototype->shape == NULL)) {
        if (set_error != NULL)
            set_error(error_ctx, "ValueError", "bad ndim or shape");
        return -1;
    }
    if (prototype->dtype.bits * prototype->dtype.lanes == 0 ||
        cai_contiguous_nbytes(prototype->ndim, prototype->shape,
                              prototype->dtype, &nbytes) != 0) {
        if (set_error != NULL)
            set_error(error_ctx, "ValueError",
                      "the prototype's dtype or size cannot be allocated");
        return -1;
    }
    block = NULL;
    if (posix_memalign(&block, 64, nbytes > 0 ? (size_t)nbytes : 1) != 0) {
        if (set_error != NULL)
            set_error(error_ctx, "MemoryError", "cannot allocate the tensor");
        return -1;
    }
    contiguous_desc(&d, block, prototype->ndim, prototype->shape,
                    prototype->dtype, prototype->device);
    if (cai_desc_to_dlpack_versioned(&d, 0, block, free, out, &err) != 0) {
        if (set_error != NULL)
            set_error(error_ctx,
                      err.status == CAI_ENOMEM ? "MemoryError" : "ValueError",
                      err.message);
        return -1;
    }
    return 0;
}

/* The exchange API's Python objects must be our views. */
static DLPackViewObject *xapi_view(PyObject *o)
{
    if (!is_view(o)) {
        PyErr_Format(PyExc_TypeError,
                     "caibridge's exchange API takes a DLPackView, got %.100s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return (DLPackViewObject *)o;
}

/*
 * The table's stream contract: what it hands out is safe to use on the
 * stream xapi_current_work_stream reports, the legacy default stream.  So
 * that stream waits, on the device, for the producer's work (the host does
 * not block) on the fence taken when the view was made; a view made with
 * sync=False has none and is handed out unordered, as the user chose.
 * Every hand-over waits: a consumer may launch on the reported stream at
 * once.
 */
static inline int xapi_order(DLPackViewObject *v, cai_consumer_at *at)
{
    return v->fence == NULL
               ? 0
               : view_order(type_state(Py_TYPE(v)), v, CAI_STREAM_LEGACY, at);
}

static int xapi_managed_from_py(void *py_object,
                                DLManagedTensorVersioned **out)
{
    PyObject *o = py_object;
    DLPackViewObject *v;
    cai_consumer_at at = {NULL, 0};
    cai_error_t err;
    void *tensor;

    *out = NULL;
    if ((v = xapi_view(o)) == NULL || xapi_order(v, &at) != 0)
        return -1;
    /* Released, the producer's stream waits for the legacy one. */
    if (view_tensor(v, 1, 0, CAI_STREAM_LEGACY, &at, &tensor, &err) != 0) {
        raise_status(type_state(Py_TYPE(o)), &err);
        return -1;
    }
    *out = tensor;
    return 0;
}

/* No object of ours is at hand: the module of the calling interpreter
 * (found in sys.modules, or imported there) makes the view. */
static int xapi_managed_to_py(DLManagedTensorVersioned *tensor,
                              void **out_py_object)
{
    PyObject *name = PyUnicode_FromString("caibridge._core");
    PyObject *module = name == NULL ? NULL : PyImport_GetModule(name);
    PyObject *v, *legacy_stream;

    if (module == NULL && name != NULL && !PyErr_Occurred())
        module = PyImport_Import(name);
    Py_XDECREF(name);
    legacy_stream = module == NULL ? NULL : PyLong_FromLong(CAI_STREAM_LEGACY);
    if (legacy_stream == NULL) {
        Py_XDECREF(module);
        *out_py_object = NULL;
        delete_tensor(tensor, 1);
        return -1;
    }
    /* CUDA data is ready on our work stream, the legacy one (caiview_new
     * reports None for host data). */
    v = caiview_new(PyModule_GetState(module), tensor, 1, legacy_stream, 0);
    Py_DECREF(module);
    Py_DECREF(legacy_stream);
    *out_py_object = v;
    return v == NULL ? -1 : 0;
}

/* Lends the view's own shape and element strides: valid while it lives. */
static int xapi_dltensor_from_py(void *py_object, DLTensor *out)
{
    PyObject *o = py_object;
    DLPackViewObject *v;
    cai_consumer_at at; /* a borrowed tensor has no release */

    if ((v = xapi_view(o)) == NULL || xapi_order(v, &at) != 0)
        return -1;
    out->data = v->data;
    out->device = v->device;
    out->ndim = v->ndim;
    out->dtype = v->dtype;
    out->shape = v->ndim > 0 ? VIEW_SHAPE(v) : NULL;
    out->strides = v->ndim > 0 ? VIEW_ELEMENT_STRIDES(v) : NULL;
    out->byte_offset = 0;
    return 0;
}

/* caibridge keeps no stream of its own: CUDA work goes on the legacy
 * default stream, named by its handle (1), never NULL, which a consumer
 * built with per-thread default streams would take for its own stream. */
static int xapi_current_work_stream(DLDeviceType device_type,
                                    int32_t device_id, void **out)
{
    (void)device_id;
    *out = cai_is_cuda_device(device_type) ? (void *)CAI_STREAM_LEGACY : NULL;
    return 0;
}

/* One table for every interpreter: it holds only functions. */
const DLPackExchangeAPI view_exchange_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},
    xapi_allocator,
    xapi_managed_from_py,
    xapi_managed_to_py,
    xapi_dltensor_from_py,
    xapi_current_work_stream,
};

/* CAIView's table: its tensor re-exported, the view held by it. */
static int xapi_caiview_from_py(void *py_object,
                                DLManagedTensorVersioned **out)
{
    PyObject *o = py_object;

    *out = NULL;
    if (!is_caiview(o)) {
        PyErr_Format(PyExc_TypeError,
                     "caibridge's exchange API takes a CAIView, got %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    return caiview_tensor(type_state(Py_TYPE(o)), o, (void **)out);
}

const DLPackExchangeAPI caiview_exchange_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},
    xapi_allocator,
    xapi_caiview_from_py,
    xapi_managed_to_py,
    NULL, /* the tensor's own shape and strides may be absent (legacy) */
    xapi_current_work_stream,
};

/* The table of classes patched by add_dlpack: each object is read afresh.
 * No borrowed DLTensor: the object keeps no shape or strides in C. */
static int xapi_object_from_py(void *py_object, DLManagedTensorVersioned **out)
{
    PyObject *o = py_object;
    cai_state *st;

    *out = NULL;
    if ((st = bridge_state_of(o)) == NULL)
        return -1;
    return object_tensor(st, o, (void **)out);
}

const DLPackExchangeAPI bridge_exchange_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},
    xapi_allocator,
    xapi_object_from_py,
    xapi_managed_to_py,
    NULL,
    xapi_current_work_stream,
};

/* DLPack 1.3: the exchange API is a capsule in the producer type's dict. */
int exchange_publish(cai_state *st, PyTypeObject *type,
                     const DLPackExchangeAPI *api)
{
    PyObject *capsule =
        PyCapsule_New((void *)(uintptr_t)api, CAPSULE_EXCHANGE_API, NULL);
    int rc;

    if (capsule == NULL)
        return -1;
    rc = PyDict_SetItem(type->tp_dict, st->name[N_EXCHANGE_API], capsule);
    Py_DECREF(capsule);
    PyType_Modified(type);
    return rc;
}

/* How many prev_api links are followed: a chain that loops, or one longer
 * than the DLPack versions ever made, is no table. */
#define PREV_API_LIMIT 16

/* The table of our major version in the chain from h, or NULL.  The two
 * entries from_dlpack calls are required: one missing makes no table. */
static const DLPackExchangeAPI *usable_table(const DLPackExchangeAPIHeader *h)
{
    const DLPackExchangeAPI *api;
    int links;

    /* Newer tables chain to older ones (DLPack, "prev_api"). */
    for (links = 0; h != NULL && h->version.major != DLPACK_MAJOR_VERSION;
         links++) {
        if (links == PREV_API_LIMIT)
            return NULL;
        h = h->prev_api;
    }
    api = (const DLPackExchangeAPI *)h;
    if (api == NULL || api->managed_tensor_from_py_object_no_sync == NULL ||
        api->current_work_stream == NULL)
        return NULL;
    return api;
}

/* A usable exchange API table on type(x), or NULL (no error) if none;
 * *holder then holds the capsule that publishes it. */
static const DLPackExchangeAPI *foreign_table(cai_state *st, PyObject *x,
                                              PyObject **holder)
{
    PyObject *names[2] = {st->name[N_EXCHANGE_API],
                          st->name[N_EXCHANGE_API_OLD]};
    int i;

    /* Only the type's own table: a subclass may override __dlpack__, and
     * then only __dlpack__ says what the object exports. */
    PyObject *dict = Py_TYPE(x)->tp_dict;

    if (dict == NULL)
        return NULL;
    for (i = 0; i < 2; i++) {
        PyObject *capsule;
        const DLPackExchangeAPIHeader *h;
        const DLPackExchangeAPI *api;
        /* A strong reference: another thread may set the attribute. */
        int found = cai_dict_get_ref(dict, names[i], &capsule);

        if (found <= 0) {
            if (found < 0)
                PyErr_Clear(); /* a str key: never happens; no table */
            continue;
        }
        h = PyCapsule_IsValid(capsule, CAPSULE_EXCHANGE_API)
                ? PyCapsule_GetPointer(capsule, CAPSULE_EXCHANGE_API)
                : NULL;
        if ((api = usable_table(h)) != NULL) {
            *holder = capsule;
            return api;
        }
        Py_DECREF(capsule);
    }
    return NULL;
}

/*
 * 1 when the table gives what x.__dlpack__() would give.  PyTorch's table
 * skips the checks its __dlpack__ makes: a tensor that requires grad, or
 * whose conjugate bit is set (its values would come out un-conjugated),
 * goes through __dlpack__ instead, which refuses it.  Two C-level reads
 * on a tensor; on other types, one failed look-up.
 */
static int table_agrees(cai_state *st, PyObject *x)
{
    PyObject *o, *r;
    int flag;

    if (cai_lookup_attr(x, st->name[N_REQUIRES_GRAD], &o) < 0)
        return -1;
    if (o == NULL)
        return 1; /* no requires_grad: not a torch tensor */
    flag = o == Py_True ? 1 : o == Py_False ? 0 : PyObject_IsTrue(o);
    Py_DECREF(o);
    if (flag != 0)
        return flag < 0 ? -1 : 0;
    /* A method call without a bound method object. */
    r = PyObject_CallMethodNoArgs(x, st->name[N_IS_CONJ]);
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    flag = r == Py_False ? 0 : r == Py_True ? 1 : PyObject_IsTrue(r);
    Py_DECREF(r);
    return flag < 0 ? -1 : !flag;
}

/* The tensor of x through api, in a CAIView.  The export orders nothing:
 * the CAI stream reported is the one the table says the data is ready on
 * (its NULL default stream is the legacy one), so a CAI consumer orders
 * itself after it, whichever of None and -1 was given. */
static PyObject *from_table(cai_state *st, PyObject *x,
                            const DLPackExchangeAPI *api, int given,
                            int *refused)
{
    DLManagedTensorVersioned *t = NULL;
    PyObject *stream_obj;
    void *work = NULL;

    *refused = api->managed_tensor_from_py_object_no_sync(x, &t) != 0 ||
               t == NULL;
    if (*refused) {
        if (t != NULL)
            delete_tensor(t, 1);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_BufferError,
                            "the producer's exchange API refused the object");
        return NULL;
    }
    __atomic_fetch_add(&st->foreign_table_imports, 1, __ATOMIC_RELAXED);
    (void)given;
    if (cai_is_cuda_device(t->dl_tensor.device.device_type)) {
        if (api->current_work_stream(t->dl_tensor.device.device_type,
                                     t->dl_tensor.device.device_id,
                                     &work) != 0) {
            delete_tensor(t, 1); /* its deleter may be NULL */
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_BufferError,
                                "the producer's current_work_stream failed");
            return NULL;
        }
        stream_obj = work == NULL ? PyLong_FromLong(CAI_STREAM_LEGACY)
                                  : PyLong_FromVoidPtr(work);
    } else {
        stream_obj = Py_NewRef(Py_None);
    }
    return caiview_taking_stream(st, t, stream_obj);
}

/* 1 when a table's refusal (an Exception, not an interrupt) is left to
 * x.__dlpack__, whose own error is the producer's answer: PyTorch's table
 * raises RuntimeError where its __dlpack__ raises BufferError. */
static int refusal_to_dlpack(cai_state *st, PyObject *x)
{
    PyObject *type, *value, *tb, *method;
    int found;

    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return 0;
    PyErr_Fetch(&type, &value, &tb);
    found = cai_lookup_attr(x, st->name[N_DLPACK], &method);
    if (found <= 0) {
        /* No __dlpack__ (or it fails to read): the table's error stands. */
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return 0;
    }
    Py_DECREF(method);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return 1;
}

/*
 * from_dlpack through type(x)'s exchange API table (stream None or -1):
 * 1 with *result set (NULL on error) when type(x) has a usable table that
 * gives what x.__dlpack__() would, else 0.  The table's capsule is held
 * while the table runs, which may run Python code.
 */
int from_foreign_table(cai_state *st, PyObject *x, int given,
                       PyObject **result)
{
    PyObject *holder;
    const DLPackExchangeAPI *api = foreign_table(st, x, &holder);
    int agrees, refused = 0;

    if (api == NULL)
        return 0;
    if ((agrees = table_agrees(st, x)) > 0)
        *result = from_table(st, x, api, given, &refused);
    else
        *result = NULL; /* an error, or 0: __dlpack__ decides */
    Py_DECREF(holder);
    if (refused && refusal_to_dlpack(st, x))
        return 0;
    return agrees != 0;
}
