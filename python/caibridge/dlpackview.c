/*
 * as_dlpack and DLPackView, what it returns: a checked descriptor kept in the
 * object, handing out one independent capsule per __dlpack__ request (or a
 * C-contiguous host copy when asked).  Its type also publishes the DLPack C
 * exchange API (exchange.c).
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fields of a descriptor that stream ordering reads; no extents. */
void view_to_header(const DLPackViewObject *v, cai_desc_t *d)
{
    d->data = v->data;
    d->readonly = v->readonly;
    d->ndim = v->ndim;
    d->version = v->version;
    d->has_strides = v->has_strides;
    d->has_mask = 0;
    d->has_stream = v->has_stream;
    d->stream = v->stream;
    d->dtype = v->dtype;
    d->device = v->device;
}

static void view_to_desc(const DLPackViewObject *v, cai_desc_t *d)
{
    view_to_header(v, d);
    memcpy(d->shape, VIEW_SHAPE(v), (size_t)v->ndim * sizeof(int64_t));
    if (v->has_strides)
        memcpy(d->strides, VIEW_STRIDES(v), (size_t)v->ndim * sizeof(int64_t));
}

/* A view of a descriptor validated by describe(), which gave its element
 * strides (elem); takes keep (may be NULL). */
static PyObject *view_make(cai_state *st, PyObject *obj, cai_desc_t *d,
                           const int64_t *elem, PyObject *keep, int sync,
                           int readonly_legacy_ok, cai_fence_t *fence);

static PyObject *view_new(cai_state *st, PyObject *obj, cai_desc_t *d,
                          const int64_t *elem, PyObject *keep, int sync,
                          int readonly_legacy_ok)
{
    cai_fence_t *fence = NULL;

    /* The device, where describe() left it, and the fence. */
    if ((d->device.device_type == DEVICE_LOCATED_LATER || d->has_stream) &&
        locate_fence_at_view(st, d, sync, &fence) != 0) {
        Py_XDECREF(keep);
        return NULL;
    }
    return view_make(st, obj, d, elem, keep, sync, readonly_legacy_ok, fence);
}

/* The view itself, owning fence (NULL: none) and keep. */
static PyObject *view_make(cai_state *st, PyObject *obj, cai_desc_t *d,
                           const int64_t *elem, PyObject *keep, int sync,
                           int readonly_legacy_ok, cai_fence_t *fence)
{
    DLPackViewObject *v;
    int i;

    v = PyObject_GC_NewVar(DLPackViewObject, st->DLPackView_Type, 3 * d->ndim);
    if (v == NULL) {
        if (fence != NULL)
            (void)cai_fence_destroy(fence, NULL);
        Py_XDECREF(keep);
        return NULL;
    }
    v->obj = Py_NewRef(obj);
    v->keep = keep;
    v->weakrefs = NULL;
    v->data = d->data;
    v->dtype = d->dtype;
    v->device = d->device;
    v->ndim = d->ndim;
    v->readonly = d->readonly;
    v->version = d->version;
    /* A zero-size array's strides are moot (any value passes the check):
     * it is described as contiguous. */
    v->has_strides = d->has_strides;
    for (i = 0; i < d->ndim && v->has_strides; i++)
        if (d->shape[i] == 0)
            v->has_strides = 0;
    v->has_stream = d->has_stream;
    v->stream = d->stream;
    v->sync = sync;
    v->readonly_legacy_ok = readonly_legacy_ok;
    v->st = st;
    v->home = st->home;
    v->fence = fence;
    /* Loops, not memcpy: a call costs more than a few extents.  The byte
     * strides of a contiguous view are never read (it has none to
     * report): left unset. */
    for (i = 0; i < d->ndim; i++) {
        VIEW_SHAPE(v)[i] = d->shape[i];
        VIEW_ELEMENT_STRIDES(v)[i] = elem[i];
    }
    if (v->has_strides) {
        for (i = 0; i < d->ndim; i++)
            VIEW_STRIDES(v)[i] = d->strides[i];
    }
    PyObject_GC_Track(v);
    return (PyObject *)v;
}

static int view_traverse(PyObject *self, visitproc visit, void *arg)
{
    DLPackViewObject *v = (DLPackViewObject *)self;

    Py_VISIT(Py_TYPE(self));
    Py_VISIT(v->obj);
    Py_VISIT(v->keep);
    return 0;
}

static int view_clear(PyObject *self)
{
    DLPackViewObject *v = (DLPackViewObject *)self;

    Py_CLEAR(v->keep);
    Py_CLEAR(v->obj);
    return 0;
}

void view_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);

    PyObject_GC_UnTrack(self);
    if (((DLPackViewObject *)self)->weakrefs != NULL)
        PyObject_ClearWeakRefs(self);
    view_clear(self);
    /* Nobody can wait on it any more: every tensor holds the view. */
    if (((DLPackViewObject *)self)->fence != NULL)
        (void)cai_fence_destroy(((DLPackViewObject *)self)->fence, NULL);
    PyObject_GC_Del(self); /* the type's tp_free, not subclassable */
    Py_DECREF(type);
}

/* ------------------------------------------------------------------ */
/* Copies (copy=True on host memory)                                   */

/* The element's byte offset is kept as an integer and only ever names an
 * element of the (checked) extent: the pointer never steps past the array,
 * not even by a stride of an axis of length 1. */
static void copy_strided(char *dst, const char *src, const cai_desc_t *d,
                         size_t itemsize)
{
    int64_t index[CAI_MAX_NDIM] = {0};
    int64_t count = 1, offset = 0;
    int i, ndim = d->ndim;

    for (i = 0; i < ndim; i++)
        count *= d->shape[i];
    while (count-- > 0) {
        memcpy(dst, src + offset, itemsize);
        dst += itemsize;
        for (i = ndim - 1; i >= 0; i--) {
            if (++index[i] < d->shape[i]) {
                offset += d->strides[i];
                break;
            }
            offset -= d->strides[i] * (d->shape[i] - 1);
            index[i] = 0;
        }
    }
}

/* Describes a writable, C-contiguous block at data. */
void contiguous_desc(cai_desc_t *c, void *data, int ndim, const int64_t *shape,
                     DLDataType dtype, DLDevice device)
{
    int i;

    cai_desc_init(c, data, ndim, dtype, device);
    for (i = 0; i < ndim; i++)
        c->shape[i] = shape[i];
}

/* A C-contiguous, writable copy of host data in a tensor marked IS_COPIED;
 * the tensor owns the copy and frees it in its deleter. */
PyObject *copy_to_capsule(cai_state *st, const cai_desc_t *d, int versioned)
{
    int64_t nbytes;
    cai_desc_t c;
    char *block;

    if (cai_contiguous_nbytes(d->ndim, d->shape, d->dtype, &nbytes) != 0)
        return PyErr_NoMemory();
    block = malloc(nbytes > 0 ? (size_t)nbytes : 1);
    if (block == NULL)
        return PyErr_NoMemory();
    if (nbytes > 0) {
        if (d->has_strides)
            copy_strided(block, d->data, d,
                         (size_t)cai_dtype_itemsize(d->dtype));
        else
            memcpy(block, d->data, (size_t)nbytes);
    }
    contiguous_desc(&c, block, d->ndim, d->shape, d->dtype, d->device);
    c.version = d->version;
    return desc_to_capsule(st, &c, versioned,
                           CAI_OPT_IS_COPIED | CAI_OPT_LEGACY_READONLY_OK,
                           block, free);
}

/* A device copy's owner: freed with cudaFreeAsync on its stream.  A
 * deleter cannot raise; a failed free is counted (device_copy_free_failures)
 * and its memory, which the runtime refused to free, is lost. */
static unsigned long copy_free_failures;

static void device_copy_release(void *owner)
{
    cai_copy_t *copy = owner;

    if (cai_cuda_copy_free(copy, NULL) != 0)
        __atomic_add_fetch(&copy_free_failures, 1, __ATOMIC_RELAXED);
    free(copy);
}

unsigned long device_copy_free_failures(void)
{
    return __atomic_load_n(&copy_free_failures, __ATOMIC_RELAXED);
}

/* A copy's source, kept by the pending-release machinery until the copy
 * has read it. */
static int keep_source(cai_state *st, const cai_copy_t *copy,
                       const cai_desc_t *d, PyObject *source, cai_error_t *err)
{
    cai_consumer_at at = {copy->context, copy->context_id};
    cai_release_fn release = release_pyobject;
    void *owner = source;

    Py_INCREF(source);
    if (st->home != NULL &&
        owner_away(st->home, source, &owner, &release) != 0)
        return no_owner_memory(err);
    /* Recorded on the copy's stream now, right after its pieces: the
     * source goes once they have run.  Finished releases may run here, so
     * the GIL is held. */
    return cai_release_owner_on(copy->stream, d->device, &at, 0, owner,
                                release, err);
}

/* copy=True of CUDA memory d describes, the consumer's stream already
 * ordered after the producer: a C-contiguous copy in memory the tensor
 * owns, made and filled on that stream without a host wait.  source (the
 * caller's, alive for this call) keeps d's data: it is kept until the
 * queued copy has run, so a pool cannot hand its memory out before. */
PyObject *device_copy_to_capsule(cai_state *st, const cai_desc_t *d,
                                 intptr_t consumer, int versioned,
                                 PyObject *source)
{
    cai_copy_t *copy = malloc(sizeof *copy);
    cai_desc_t c;
    cai_error_t err;

    if (copy == NULL)
        return PyErr_NoMemory();
    if (cai_cuda_copy(d, consumer, 0, copy, &err) != 0) {
        free(copy);
        return raise_status(st, &err);
    }
    if (keep_source(st, copy, d, source, &err) != 0) {
        /* The source was let go: the host waits for the copy (the caller
         * still holds the source) before the error is raised. */
        Py_BEGIN_ALLOW_THREADS(void)
        cai_cuda_copy_wait(copy, NULL);
        Py_END_ALLOW_THREADS
        device_copy_release(copy);
        return raise_status(st, &err);
    }
    contiguous_desc(&c, copy->data, d->ndim, d->shape, d->dtype, d->device);
    c.version = d->version;
    return desc_to_capsule(st, &c, versioned,
                           CAI_OPT_IS_COPIED | CAI_OPT_LEGACY_READONLY_OK,
                           copy, device_copy_release);
}

/* A host consumer's copy of CUDA memory: malloc'd, filled on the legacy
 * stream of the data's device, the host waiting for it with the
 * interpreter released (a host function on that stream may need Python).
 * The caller has waited on the host for the producer's fence. */
PyObject *host_copy_of_device(cai_state *st, const cai_desc_t *d,
                              int versioned)
{
    cai_copy_t copy;
    cai_desc_t c;
    cai_error_t err;
    DLDevice host = {kDLCPU, 0};
    int rc;

    Py_BEGIN_ALLOW_THREADS
    rc = cai_cuda_copy(d, CAI_STREAM_LEGACY, 1, &copy, &err);
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return raise_status(st, &err);
    contiguous_desc(&c, copy.data, d->ndim, d->shape, d->dtype, host);
    c.version = d->version;
    return desc_to_capsule(st, &c, versioned,
                           CAI_OPT_IS_COPIED | CAI_OPT_LEGACY_READONLY_OK,
                           copy.data, free);
}

/* ------------------------------------------------------------------ */
/* as_dlpack                                                           */

const char as_dlpack_doc[] =
    "as_dlpack(obj, *, device=None, sync=True, allow_readonly_legacy=False)\n"
    "--\n\n"
    "Wrap a CAI or array-interface producer as a DLPack producer.\n\n"
    "Reads obj.__cuda_array_interface__ (CUDA memory) or else\n"
    "obj.__array_interface__ (host memory), checks it, and returns a\n"
    "DLPackView whose __dlpack__ hands out zero-copy capsules that keep obj\n"
    "alive.  device=(device_type, device_id) skips the CUDA pointer lookup.\n"
    "sync=False turns off stream ordering for this view.  A read-only array "
    "is\n"
    "exported as a legacy capsule only with allow_readonly_legacy=True.\n\n"
    "Raises TypeError or ValueError for a malformed descriptor, BufferError\n"
    "when it cannot be exported, caibridge.CUDAError when CUDA fails.";

PyObject *as_dlpack(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames)
{
    cai_state *st = PyModule_GetState(module);
    PyObject *values[3] = {NULL, NULL, NULL}, *keep;
    int64_t elem[CAI_MAX_NDIM];
    cai_desc_t d;
    int sync, ro_ok;

    if (check_positional("as_dlpack", nargs, 1) != 0)
        return NULL;
    if (kwnames == NULL) { /* every keyword its default */
        sync = 1;
        ro_ok = 0;
    } else if (match_keywords("as_dlpack", args + nargs, kwnames,
                              st->kw_as_dlpack, values, 3) != 0 ||
               (sync = read_flag(values[1], "sync", 1)) < 0 ||
               (ro_ok = read_flag(values[2], "allow_readonly_legacy", 0)) <
                   0) {
        return NULL;
    }
    d.device.device_type = DEVICE_LOCATED_LATER;
    if (describe(st, args[0], values[0], elem, &d, &keep) != 0)
        return NULL;
    return view_new(st, args[0], &d, elem, keep, sync, ro_ok);
}

/* ------------------------------------------------------------------ */
/* as_dlpack_all: many producers, one fence per producer stream         */

const char as_dlpack_all_doc[] =
    "as_dlpack_all(objs, *, device=None, sync=True, "
    "allow_readonly_legacy=False)\n"
    "--\n\n"
    "as_dlpack of each of objs (an iterable), as a list of views that share\n"
    "their fences: one record per producer stream and device, and one wait\n"
    "per consumer stream, however many views are handed over there.\n\n"
    "Raises as as_dlpack does, naming the position of the object at fault;\n"
    "no view is returned then.";

/* The fence of the batch so far for d's stream and device, or NULL. */
struct batch_fence {
    intptr_t stream;
    DLDevice device;
    cai_fence_t *fence;
};

PyObject *as_dlpack_all(PyObject *module, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames)
{
    cai_state *st = PyModule_GetState(module);
    PyObject *values[3] = {NULL, NULL, NULL}, *keep, *seq, *out = NULL;
    struct batch_fence fences[8];
    int64_t elem[CAI_MAX_NDIM];
    int sync = 1, ro_ok = 0, nfences = 0, i;
    Py_ssize_t n, k;
    cai_error_t err;
    cai_desc_t d;

    if (check_positional("as_dlpack_all", nargs, 1) != 0)
        return NULL;
    if (kwnames != NULL &&
        (match_keywords("as_dlpack_all", args + nargs, kwnames,
                        st->kw_as_dlpack, values, 3) != 0 ||
         (sync = read_flag(values[1], "sync", 1)) < 0 ||
         (ro_ok = read_flag(values[2], "allow_readonly_legacy", 0)) < 0))
        return NULL;
    seq = PySequence_Fast(args[0], "as_dlpack_all() takes an iterable of "
                                   "producers");
    if (seq == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    out = PyList_New(n);
    for (k = 0; out != NULL && k < n; k++) {
        PyObject *obj = PySequence_Fast_GET_ITEM(seq, k), *view;
        cai_fence_t *fence = NULL;
        int shared = 0;

        d.device.device_type = DEVICE_LOCATED_LATER;
        if (describe(st, obj, values[0], elem, &d, &keep) != 0)
            goto fail;
        /* Located alone, so that its fence may be one already taken. */
        if (d.device.device_type == DEVICE_LOCATED_LATER &&
            cai_cuda_locate_desc(&d, &d.device, &err) != 0) {
            Py_XDECREF(keep);
            raise_status(st, &err);
            goto fail;
        }
        for (i = 0; i < nfences && !shared; i++)
            if (fences[i].stream == d.stream &&
                fences[i].device.device_type == d.device.device_type &&
                fences[i].device.device_id == d.device.device_id) {
                fence = cai_fence_share(fences[i].fence);
                shared = 1;
            }
        if (!shared && d.has_stream && fence_at_view(st, &d, sync, &fence)) {
            Py_XDECREF(keep);
            goto fail;
        }
        if (!shared && fence != NULL && nfences < 8) {
            fences[nfences].stream = d.stream;
            fences[nfences].device = d.device;
            fences[nfences].fence = fence;
            nfences++;
        }
        view = view_make(st, obj, &d, elem, keep, sync, ro_ok, fence);
        if (view == NULL)
            goto fail;
        PyList_SET_ITEM(out, k, view);
    }
    Py_DECREF(seq);
    return out;

fail:
    /* Which one, in the message of what went wrong. */
    if (PyErr_Occurred() && k < n) {
        PyObject *type, *value, *tb, *text;

        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        text = value != NULL ? PyObject_Str(value) : NULL;
        if (text != NULL) {
            PyErr_Format(type, "objs[%zd]: %U", k, text);
            Py_DECREF(text);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        } else {
            PyErr_Restore(type, value, tb);
        }
    }
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* __dlpack__                                                          */

/* The capsule for one __dlpack__ request; every request is independent and
 * holds its own reference to the view (and so to the producer).  to_host:
 * host-accessible memory asked for as kDLCPU. */
#if defined(__GNUC__)
__attribute__((noinline)) /* keeps its descriptor off view_export's stack */
#endif
static PyObject *
view_export_slow(cai_state *st, DLPackViewObject *v, PyObject *stream,
                 int versioned, int copy, int to_host)
{
    cai_desc_t d;
    intptr_t consumer = CAI_STREAM_NO_SYNC;
    cai_consumer_at at = {NULL, 0};
    cai_error_t err;
    void *tensor;
    int given = stream != NULL && stream != Py_None;
    /* A consumer on the CPU reads pinned or managed memory at once: the
     * host waits for the producer.  It says so with dl_device=(kDLCPU, 0),
     * or by passing no stream, as NumPy does. */
    int host_wait = !given &&
                    (to_host || v->device.device_type == kDLCUDAHost ||
                     v->device.device_type == kDLCUDAManaged);

    view_to_header(v, &d);
    if (to_host == 2) {
        /* Ordered by the view's fence on the host, never by the
         * producer's stream named now (another thread's stream 2, or a
         * handle destroyed since). */
        if (host_copy_prepare(st, &d, stream, copy == -1) < 0 ||
            view_host_sync(st, v) != 0)
            return NULL;
        view_to_desc(v, &d);
        return host_copy_of_device(st, &d, versioned);
    }
    if (to_host) {
        d.device.device_type = kDLCPU;
        d.device.device_id = 0;
    }
    /* Device memory with no stream given is read on the legacy default
     * stream (DLPack): that consumer, too, keeps the producer. */
    if ((given || v->has_stream || d.device.device_type == kDLCUDA) &&
        check_stream(st, &d, stream, &consumer) != 0)
        return NULL;
    if (copy && d.device.device_type != kDLCPU &&
        d.device.device_type != kDLCUDA) {
        PyErr_Format(PyExc_BufferError,
                     "copy=True: %s memory (device type %d) is copied only "
                     "for a consumer on the host, dl_device=(1, 0); host "
                     "(kDLCPU) and device (kDLCUDA) arrays are copied",
                     v->device.device_type == kDLCUDAHost ? "pinned host"
                                                          : "managed",
                     (int)v->device.device_type);
        return NULL;
    }
    if (!copy && !versioned && v->readonly && !v->readonly_legacy_ok)
        return readonly_legacy_error();
    /* A device copy with no consumer stream (-1) goes on the legacy
     * stream after the fence: the producer's stream, named by value when
     * the view was made, may be gone or another thread's. */
    if (copy && d.device.device_type == kDLCUDA &&
        consumer == CAI_STREAM_NO_SYNC)
        consumer = CAI_STREAM_LEGACY;
    if (host_wait ? view_host_sync(st, v) != 0
                  : view_order(st, v, consumer, &at) != 0)
        return NULL;
    if (copy && d.device.device_type == kDLCUDA) {
        view_to_desc(v, &d);
        return device_copy_to_capsule(st, &d, consumer, versioned,
                                      (PyObject *)v);
    }
    if (copy) {
        view_to_desc(v, &d);
        d.device.device_type = kDLCPU;
        d.device.device_id = 0;
        return copy_to_capsule(st, &d, versioned);
    }
    if (view_tensor(v, versioned,
                    v->readonly_legacy_ok ? CAI_OPT_LEGACY_READONLY_OK : 0,
                    host_wait ? CAI_STREAM_NO_SYNC : consumer, &at, &tensor,
                    &err) != 0)
        return raise_status(st, &err);
    if (to_host) {
        DLTensor *t = versioned
                          ? &((DLManagedTensorVersioned *)tensor)->dl_tensor
                          : &((DLManagedTensor *)tensor)->dl_tensor;

        t->device = d.device;
    }
    return tensor_capsule(tensor, versioned);
}

/* The usual request (no stream on either side, no copy) needs no
 * descriptor: the view's checked layout goes straight to the core. */
static inline PyObject *view_export(cai_state *st, DLPackViewObject *v,
                                    PyObject *stream, int versioned, int copy,
                                    int to_host)
{
    cai_error_t err;
    void *tensor;

    /* No stream on either side, and not device memory (whose consumer
     * works on a stream even when it names none): nothing to check (no
     * error is possible without one) and nothing to order. */
    if ((stream != NULL && stream != Py_None) || v->has_stream || copy ||
        to_host || v->device.device_type == kDLCUDA)
        return view_export_slow(st, v, stream, versioned, copy, to_host);
    if (!versioned && v->readonly && !v->readonly_legacy_ok)
        return readonly_legacy_error();
    if (view_tensor(v, versioned,
                    v->readonly_legacy_ok ? CAI_OPT_LEGACY_READONLY_OK : 0,
                    CAI_STREAM_NO_SYNC, NULL, &tensor, &err) != 0)
        return raise_status(st, &err);
    return tensor_capsule(tensor, versioned);
}

/* Not METH_METHOD: the view keeps its module's state, and the interpreter
 * specializes calls of plain fast methods. */
static PyObject *view_dlpack(PyObject *self, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    DLPackViewObject *v = (DLPackViewObject *)self;
    cai_state *st = v->st;
    PyObject *values[4] = {NULL, NULL, NULL, NULL};
    int versioned, copy, to_host = 0;

    if (check_positional("__dlpack__", nargs, 0) != 0)
        return NULL;
    if (kwnames == NULL) /* every keyword its default */
        return view_export(st, v, NULL, 0, 0, 0);
    if (match_keywords("__dlpack__", args + nargs, kwnames, st->kw_dlpack,
                       values, 4) != 0)
        return NULL;
    if ((versioned = wants_versioned(values[1])) < 0)
        return NULL;
    if (values[2] != NULL &&
        (to_host = check_dl_device(st, values[2], v->device)) < 0)
        return NULL;
    if ((copy = read_copy(values[3])) < 0)
        return NULL;
    /* copy=False (-1 here) matters only for a device change. */
    if (to_host == 2 && values[3] == Py_False)
        copy = -1;
    return view_export(st, v, values[0], versioned, copy, to_host);
}

static PyObject *view_dlpack_device(PyObject *self, PyObject *unused)
{
    DLPackViewObject *v = (DLPackViewObject *)self;

    return device_pair(v->device);
}

static PyObject *view_repr(PyObject *self)
{
    DLPackViewObject *v = (DLPackViewObject *)self;
    const char *device = device_type_name(v->device.device_type);
    char typestr[CAI_TYPESTR_MAX], number[16];
    cai_error_t err;

    if (cai_typestr_format(v->dtype, typestr, &err) != 0)
        strcpy(typestr, "?");
    if (device == NULL) { /* a type given with device= that has no name */
        snprintf(number, sizeof number, "%d", (int)v->device.device_type);
        device = number;
    }
    return PyUnicode_FromFormat(
        "<caibridge.DLPackView ndim=%d typestr='%s' device=(%s, %d)%s of "
        "%.100s>",
        v->ndim, typestr, device, (int)v->device.device_id,
        v->readonly ? " readonly" : "", Py_TYPE(v->obj)->tp_name);
}

static PyObject *view_get_obj(PyObject *self, void *unused)
{
    return Py_NewRef(((DLPackViewObject *)self)->obj);
}

PyDoc_STRVAR(
    view_dlpack_doc,
    "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None,\n"
    "           copy=None)\n"
    "--\n\n"
    "Export the data as a DLPack capsule.\n\n"
    "A versioned capsule ('dltensor_versioned') when max_version asks for "
    "1.x,\n"
    "else a legacy one ('dltensor').  Each call hands out an independent "
    "capsule\n"
    "holding a reference to the producer until its deleter runs.  For CUDA\n"
    "memory, stream is the consumer's stream (None: legacy default, -1: no\n"
    "ordering; 0 is refused); it waits for the producer's work queued before\n"
    "the view was made.  For host memory stream must be None.  Pinned and\n"
    "managed memory with no stream, or asked for as dl_device=(1, 0), make "
    "the\n"
    "host wait instead.  copy=True makes a C-contiguous copy marked\n"
    "IS_COPIED (of CUDA memory: queued on the consumer's stream, freed with\n"
    "cudaFreeAsync at release); dl_device=(1, 0) of CUDA memory is a host\n"
    "copy the host waits for; copy=False never copies.");

PyDoc_STRVAR(view_dlpack_device_doc,
             "__dlpack_device__($self, /)\n--\n\n"
             "The (device_type, device_id) pair of the data.");

static PyMethodDef view_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))view_dlpack,
     METH_FASTCALL | METH_KEYWORDS, view_dlpack_doc},
    {"__dlpack_device__", view_dlpack_device, METH_NOARGS,
     view_dlpack_device_doc},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef view_getset[] = {
    {"obj", view_get_obj, NULL,
     "The object given to as_dlpack, whose data this view exports.\n"
     "The view holds it, so it lives as long as the view.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef view_members[] = {{"__weaklistoffset__", Py_T_PYSSIZET,
                                      offsetof(DLPackViewObject, weakrefs),
                                      Py_READONLY, NULL},
                                     {NULL, 0, 0, 0, NULL}};

PyDoc_STRVAR(
    view_doc,
    "A DLPack producer for an object exposing __cuda_array_interface__ or\n"
    "__array_interface__; made by caibridge.as_dlpack().\n\n"
    "The type publishes the DLPack C exchange API as "
    "__dlpack_c_exchange_api__.");

static PyType_Slot view_slots[] = {{Py_tp_dealloc, view_dealloc},
                                   {Py_tp_repr, view_repr},
                                   {Py_tp_doc, (void *)(uintptr_t)view_doc},
                                   {Py_tp_traverse, view_traverse},
                                   {Py_tp_clear, view_clear},
                                   {Py_tp_methods, view_methods},
                                   {Py_tp_getset, view_getset},
                                   {Py_tp_members, view_members},
                                   {0, NULL}};

PyType_Spec dlpackview_spec = {
    "caibridge.DLPackView", offsetof(DLPackViewObject, dims), sizeof(int64_t),
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
        Py_TPFLAGS_DISALLOW_INSTANTIATION,
    view_slots};
