/*
 * Private to caibridge._core: what its files share.  The module keeps all
 * it owns in its state (cai_state), one per interpreter that imports it;
 * nothing in these files is mutable at file level.  The map of the files:
 *
 *   module.c      init, module state, to_dlpack
 *   interface.c   reading __cuda_array_interface__ / __array_interface__
 *   args.c        integers, devices, streams, max_version, keywords
 *   streams.c     the consumer-stream rules and stream ordering
 *   dlpackview.c  as_dlpack and its DLPackView, copies
 *   caiview.c     CAIView, the view from_dlpack returns
 *   fromdlpack.c  from_dlpack: capsules, views, tables, producers
 *   capsule.c     capsules, deleters, releasing owners on any thread
 *   exchange.c    both sides of the DLPack C exchange API
 *   errors.c      cai_status to Python exceptions, hidden errors
 *   buffer.c      buffer-protocol objects described as host arrays
 *   bridge.c      add_dlpack and add_array_interface (patching classes)
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef CAIBRIDGE_MODULE_H
#define CAIBRIDGE_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The member-table names of 3.12 (__weaklistoffset__, __vectorcalloffset__)
 * on older versions. */
#if PY_VERSION_HEX < 0x030C0000
#include <structmember.h>
#define Py_T_PYSSIZET T_PYSSIZET
#define Py_READONLY READONLY
#endif

#include "caibridge.h"
#include "cuda-copy.h"
#include "cuda-release.h"
/* The core's private fast path: a tensor from an already checked layout. */
#include "desc.h"

#if PY_VERSION_HEX >= 0x030D0000
#define cai_lookup_attr PyObject_GetOptionalAttr
#define cai_is_finalizing Py_IsFinalizing
#else
#define cai_lookup_attr _PyObject_LookupAttr
#define cai_is_finalizing _Py_IsFinalizing
#endif

/*
 * Free-threaded builds (PEP 703) have no GIL to make a run of C API calls
 * atomic: a dict or capsule another thread may change is read inside a
 * critical section on it (CPython's HOWTO for extensions), and entries are
 * taken as strong references.  On builds with a GIL the sections are
 * plain blocks and the look-ups the borrowed ones plus an incref.
 */
#ifndef Py_BEGIN_CRITICAL_SECTION /* before 3.13 */
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* This thread's attached thread state (it holds that interpreter's GIL),
 * or NULL. */
static inline PyThreadState *attached_here(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyThreadState_GetUnchecked();
#else
    /* Before 3.12 this is the GIL holder's thread state, whichever thread
     * that is; its thread says whether it is ours.  GILState's record
     * would not do: it knows only the main interpreter, so a thread inside
     * a sub-interpreter would wait for the GIL it holds. */
    PyThreadState *t = _PyThreadState_UncheckedGet();

    return t != NULL && t->thread_id == PyThread_get_thread_ident() ? t : NULL;
#endif
}

/* d[key] as a strong reference: 1 found, 0 absent, -1 error. */
static inline int cai_dict_get_ref(PyObject *d, PyObject *key, PyObject **out)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyDict_GetItemRef(d, key, out);
#else
    *out = PyDict_GetItemWithError(d, key);
    if (*out != NULL) {
        Py_INCREF(*out);
        return 1;
    }
    return PyErr_Occurred() ? -1 : 0;
#endif
}

/* Interned names: the dict entries read (first, in this order), then
 * attribute and keyword names. */
enum {
    F_SHAPE,
    F_TYPESTR,
    F_VERSION,
    F_STRIDES,
    F_MASK,
    F_STREAM,
    F_DATA,
    F_OFFSET,
    F_COUNT, /* the interface entries end here */
    N_CAI = F_COUNT,
    N_AI,
    N_DLPACK,
    N_DLPACK_DEVICE,
    N_CUDA_STREAM,
    N_EXCHANGE_API,
    N_EXCHANGE_API_OLD,
    N_DEVICE,
    N_SYNC,
    N_ALLOW_READONLY_LEGACY,
    N_MAX_VERSION,
    N_DL_DEVICE,
    N_COPY,
    N_LEGACY_WRITABLE,
    N_REQUIRES_GRAD,
    N_IS_CONJ,
    N_COUNT
};

#define KEY_SLOT_MASK 63
/* A multiplicative hash of a key's address: its top six bits. */
#define KEY_SLOT(key, mult) \
    ((unsigned)(((uint64_t)(uintptr_t)(key) * (mult)) >> 58))

/* The sub-interpreter a module instance lives in (capsule.c). */
typedef struct cai_home cai_home;

/* Everything the module owns, per interpreter. */
typedef struct {
    PyTypeObject *DLPackView_Type;
    PyTypeObject *CAIView_Type;
    PyTypeObject *BridgeMethod_Type; /* the methods add_dlpack gives */
    PyObject *CUDAError;
    PyObject *name[N_COUNT];
    /* Each entry point's keyword names, in its order (borrowed from name). */
    PyObject *kw_as_dlpack[3], *kw_to_dlpack[7], *kw_dlpack[4],
        *kw_from_dlpack[3];
    /* The keyword names from_dlpack passes to __dlpack__. */
    PyObject *kw_stream_max_version, *kw_stream;
    /* ... and with copy=False, for add_array_interface's reads. */
    PyObject *kw_stream_max_version_copy;
    PyObject *max_version_ours; /* (1, 3) */
    /* The interface keys' hashes, and the keys by address:
     * key_slot[KEY_SLOT(address, key_mult)] is the entry a key pointer may
     * be (F_COUNT: none).  Written at import only. */
    Py_hash_t entry_hash[F_COUNT];
    unsigned char key_slot[KEY_SLOT_MASK + 1];
    uint64_t key_mult;
    /* CAIBRIDGE_SYNC=0 in the environment at import turns ordering off. */
    int sync_enabled;
    /* How many from_dlpack calls a foreign type's exchange API served
     * (tests read it); updated atomically. */
    unsigned long long foreign_table_imports;
    /* NULL in the main interpreter; else where tensors made here release
     * their owners. */
    cai_home *home;
#ifndef Py_GIL_DISABLED
    /* Producers hand out the same typestr and callers the same device
     * tuple call after call: the last ones read (exact, immutable) are
     * remembered.  Guarded by the GIL, so only where there is one. */
    PyObject *last_typestr;
    DLDataType last_dtype;
    PyObject *last_device_obj;
    DLDevice last_device;
#endif
} cai_state;

static inline cai_state *type_state(PyTypeObject *type)
{
    return (cai_state *)PyType_GetModuleState(type);
}

/* config.c: show_config's C side, the runtime search's link to Python */
int config_init(PyObject *module);

/* module.c: registers fn with this interpreter's atexit, taking the
 * reference (fn NULL: the error already set); 0 or -1. */
int call_at_exit(PyObject *fn);

/* errors.c */
PyObject *raise_status(cai_state *st, const cai_error_t *err);
PyObject *readonly_legacy_error(void);
/* The candidates the last runtime search passed over, as a list of str. */
PyObject *refused_list(void);
int hidden_attribute_error(cai_state *st, PyObject *obj);

/* args.c */
int parse_keywords(const char *fname, PyObject *const *kwvalues,
                   PyObject *kwnames, PyObject *const names[],
                   PyObject **values, int count);
int positional_error(const char *fname, Py_ssize_t nargs, Py_ssize_t expected);
int read_int64(PyObject *o, const char *field, Py_ssize_t index, int64_t *out);
Py_ssize_t read_int_tuple(PyObject *o, const char *field, int64_t *out);
int read_device_tuple(cai_state *st, PyObject *o, const char *what,
                      DLDevice *out);
int read_stream(cai_state *st, PyObject *o, int *given, intptr_t *out);
int read_max_version(PyObject *o);
int check_dl_device(cai_state *st, PyObject *dl_device, DLDevice have);
PyObject *device_pair(DLDevice dev);
const char *device_type_name(int32_t type);

/* parse_keywords inlined for the usual call: every name one of ours by
 * identity (the interpreter passes interned names); else the full parse. */
static inline int match_keywords(const char *fname, PyObject *const *kwvalues,
                                 PyObject *kwnames, PyObject *const names[],
                                 PyObject **values, int count)
{
    Py_ssize_t i, n;

    if (kwnames == NULL)
        return 0;
    n = PyTuple_GET_SIZE(kwnames);
    for (i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        int j;

        for (j = 0; j < count && key != names[j]; j++)
            ;
        if (j == count)
            return parse_keywords(fname, kwvalues, kwnames, names, values,
                                  count);
        values[j] = kwvalues[i];
    }
    return 0;
}

/* The small checks of every call, inline: each is a test or two. */
static inline int check_positional(const char *fname, Py_ssize_t nargs,
                                   Py_ssize_t expected)
{
    return nargs == expected ? 0 : positional_error(fname, nargs, expected);
}

/* 1 when max_version asks for a versioned tensor, 0 for legacy. */
static inline int wants_versioned(PyObject *o)
{
    return o == NULL || o == Py_None ? 0 : read_max_version(o);
}

/* __dlpack__'s copy: True, False or None (NULL: not given). */
static inline int read_copy(PyObject *o)
{
    if (o == NULL || o == Py_None || o == Py_False)
        return 0;
    if (o == Py_True)
        return 1;
    PyErr_Format(PyExc_TypeError,
                 "copy must be True, False or None, got %.100s",
                 Py_TYPE(o)->tp_name);
    return -1;
}

/* A (device_type, device_id) pair as __dlpack_device__ returns it; the
 * tuple callers pass call after call is remembered. */
static inline int read_device(cai_state *st, PyObject *o, const char *what,
                              DLDevice *out)
{
#ifndef Py_GIL_DISABLED
    if (o == st->last_device_obj) {
        *out = st->last_device;
        return 0;
    }
#endif
    return read_device_tuple(st, o, what, out);
}

/* A keyword flag: bool or int (truth value), NULL meaning the default. */
static inline int read_flag(PyObject *o, const char *name, int fallback)
{
    if (o == NULL)
        return fallback;
    if (o == Py_True)
        return 1;
    if (o == Py_False)
        return 0;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a bool, got %.100s", name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    return PyObject_IsTrue(o);
}

/* Reads an exact int of one or two digits without a call (nearly every
 * size, stride and pointer); 0 when o needs the general path. */
static inline int small_int(PyObject *o, int64_t *out)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (PyLong_CheckExact(o) && PyUnstable_Long_IsCompact((PyLongObject *)o)) {
        *out = (int64_t)PyUnstable_Long_CompactValue((PyLongObject *)o);
        return 1;
    }
#else
    if (PyLong_CheckExact(o)) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        Py_ssize_t size = Py_SIZE(o);

        if (size == 1 || size == 0) {
            *out = size == 0 ? 0 : (int64_t)d[0];
            return 1;
        }
        if (size == -1) {
            *out = -(int64_t)d[0];
            return 1;
        }
#if PyLong_SHIFT * 2 < 63
        if (size == 2) {
            *out = (int64_t)d[0] | ((int64_t)d[1] << PyLong_SHIFT);
            return 1;
        }
#endif
    }
#endif
    return 0;
}

/* interface.c */
void index_entry_keys(cai_state *st);
int describe(cai_state *st, PyObject *obj, PyObject *device, int64_t *elem,
             cai_desc_t *d, PyObject **keep);
/* The device type a caller of describe() presets to look the pointer up
 * itself (as_dlpack, whose view does it with the fence); it stays so when
 * a lookup is needed.  Every other caller presets 0. */
#define DEVICE_LOCATED_LATER ((DLDeviceType)-1)

/* buffer.c */
int describe_buffer(PyObject *obj, cai_desc_t *d, PyObject **keep);

/* module.c: a __dlpack__ request, as the keyword arguments gave it. */
typedef struct {
    PyObject *stream;    /* the consumer's stream; NULL: not given */
    PyObject *dl_device; /* NULL or None: where the data is */
    int versioned;       /* max_version asked for 1.x */
    int copy;            /* copy=True */
    int never_copy;      /* copy=False, not None */
    int sync;            /* 0: never order streams */
    int readonly_legacy_ok;
} cai_request_t;

/* *consumer: the consumer's stream it ordered (CAI_STREAM_NO_SYNC: none);
 * set only when it returns 0. */
int request_prepare(cai_state *st, cai_desc_t *d, const cai_request_t *req,
                    intptr_t *consumer);
PyObject *request_copy(cai_state *st, cai_desc_t *d, const cai_request_t *req,
                       PyObject *source);
int host_copy_prepare(cai_state *st, const cai_desc_t *d, PyObject *stream,
                      int never_copy);
PyObject *host_copy_of_device(cai_state *st, const cai_desc_t *d,
                              int versioned);

/* A __dlpack__ call's keywords (stream, max_version, dl_device, copy) as a
 * request that orders streams and refuses read-only legacy exports. */
static inline int dlpack_request(cai_state *st, PyObject *const *kwvalues,
                                 PyObject *kwnames, cai_request_t *req)
{
    PyObject *values[4] = {NULL, NULL, NULL, NULL};

    if (match_keywords("__dlpack__", kwvalues, kwnames, st->kw_dlpack, values,
                       4) != 0 ||
        (req->versioned = wants_versioned(values[1])) < 0 ||
        (req->copy = read_copy(values[3])) < 0)
        return -1;
    req->never_copy = values[3] == Py_False;
    req->stream = values[0];
    req->dl_device = values[2];
    req->sync = 1;
    req->readonly_legacy_ok = 0;
    return 0;
}
PyObject *object_export(cai_state *st, PyObject *obj, PyObject *device,
                        const cai_request_t *req);
int object_tensor(cai_state *st, PyObject *obj, void **out);
int checked_tensor(cai_state *st, cai_desc_t *d, int versioned,
                   unsigned options, PyObject *owner, intptr_t consumer,
                   int sync, void **out);

/* streams.c */
int check_stream(cai_state *st, const cai_desc_t *d, PyObject *arg,
                 intptr_t *consumer);
int check_stream_value(const cai_desc_t *d, int given, intptr_t s,
                       intptr_t *consumer);
int order_streams(cai_state *st, const cai_desc_t *d, intptr_t consumer,
                  int sync);
int fence_at_view(cai_state *st, const cai_desc_t *d, int sync,
                  cai_fence_t **out);
/* fence_at_view; for a descriptor whose pointer describe() left to look
 * up (DEVICE_LOCATED_LATER), the lookup and the fence in one CUDA
 * operation. */
int locate_fence_at_view(cai_state *st, cai_desc_t *d, int sync,
                         cai_fence_t **out);
/* The host waits for the work queued so far on the stream of d (pinned or
 * managed memory that a CPU consumer reads now), with the GIL released;
 * nothing when sync or CAIBRIDGE_SYNC turned ordering off or d has no
 * stream.  -1 with an exception set. */
int cai_py_host_wait(cai_state *st, const cai_desc_t *d, int sync);
void release_edge(void *p);
void edge_unused(void *p);
void poll_releases(void);
void set_release_blocking(int on);
int release_blocks_now(void);
int edge_owner(const cai_fence_t *fence, DLDevice device, intptr_t consumer,
               const cai_consumer_at *at, void **owner,
               cai_release_fn *release);
PyObject *reported_stream(int given, intptr_t s);

/* waiter.c */
int waiter_init(void);
void waiter_close(void);
void waiter_pause(int on);
int waiter_running(void);

/* capsule.c */
extern const char CAPSULE_LEGACY[], CAPSULE_VERSIONED[];
void release_pyobject(void *owner);
int owner_left_behind(void *owner, cai_release_fn release);
int release_queue_init(void);
cai_home *home_new(PyObject *module);
void home_release(cai_home *home);
int owner_away(cai_home *home, PyObject *obj, void **owner,
               cai_release_fn *release);
void delete_tensor(void *tensor, int versioned);
void legacy_capsule_destructor(PyObject *capsule);
void versioned_capsule_destructor(PyObject *capsule);
PyObject *desc_to_capsule(cai_state *st, const cai_desc_t *desc, int versioned,
                          unsigned options, void *owner,
                          cai_release_fn release);
PyObject *tensor_from_capsule(cai_state *st, PyObject *capsule,
                              PyObject *stream, int legacy_writable);

/* Wraps a tensor from cai_tensor_new in a capsule, or deletes it. */
static inline PyObject *tensor_capsule(void *tensor, int versioned)
{
    PyObject *capsule;

    if (versioned) {
        DLManagedTensorVersioned *t = tensor;

        capsule =
            PyCapsule_New(t, CAPSULE_VERSIONED, versioned_capsule_destructor);
        if (capsule == NULL)
            t->deleter(t);
    } else {
        DLManagedTensor *t = tensor;

        capsule = PyCapsule_New(t, CAPSULE_LEGACY, legacy_capsule_destructor);
        if (capsule == NULL)
            t->deleter(t);
    }
    /* The context is the capsule maker's: it names the tensor for our
     * destructor, which then needs no name compare to read it. */
    if (capsule != NULL)
        (void)PyCapsule_SetContext(capsule, tensor);
    return capsule;
}

/* dlpackview.c */

/*
 * The descriptor lives in the object, compact: dims holds shape, byte
 * strides and element strides, ndim entries each.  The element strides are
 * what the exchange API lends to consumers without an allocation.
 */
typedef struct {
    PyObject_VAR_HEAD
    PyObject *obj;  /* the producer, kept alive */
    PyObject *keep; /* the buffer export when data came that way, or NULL */
    PyObject *weakrefs;
    void *data;
    DLDataType dtype;
    DLDevice device;
    int ndim;
    /* Flags, kept small: the object fits a smaller allocation class. */
    unsigned char readonly, version, has_strides, has_stream, sync,
        readonly_legacy_ok;
    intptr_t stream;
    cai_state *st;  /* the module's state (the type keeps the module) */
    cai_home *home; /* the module's (NULL in the main interpreter) */
    /* A point in the producer's stream taken when the view was made, or
     * NULL when there is nothing to order; hand-overs wait on it. */
    cai_fence_t *fence;
    int64_t dims[];
} DLPackViewObject;

#define VIEW_SHAPE(v) ((v)->dims)
/* Byte strides: set only when has_strides. */
#define VIEW_STRIDES(v) ((v)->dims + (v)->ndim)
#define VIEW_ELEMENT_STRIDES(v) ((v)->dims + 2 * (v)->ndim)

extern PyType_Spec dlpackview_spec;
void contiguous_desc(cai_desc_t *c, void *data, int ndim, const int64_t *shape,
                     DLDataType dtype, DLDevice device);
void view_dealloc(PyObject *self);
PyObject *copy_to_capsule(cai_state *st, const cai_desc_t *d, int versioned);
PyObject *device_copy_to_capsule(cai_state *st, const cai_desc_t *d,
                                 intptr_t consumer, int versioned,
                                 PyObject *source);
unsigned long device_copy_free_failures(void);
extern const char as_dlpack_doc[];
PyObject *as_dlpack(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames);
extern const char as_dlpack_all_doc[];
PyObject *as_dlpack_all(PyObject *module, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames);
void view_to_header(const DLPackViewObject *v, cai_desc_t *d);

/* Our views in any interpreter: the types are per module, their
 * deallocator is one function. */
static inline int is_view(PyObject *o)
{
    return Py_TYPE(o)->tp_dealloc == view_dealloc;
}

static inline int no_owner_memory(cai_error_t *err)
{
    err->status = CAI_ENOMEM;
    err->field[0] = '\0';
    snprintf(err->message, sizeof err->message,
             "no memory for the tensor's owner");
    return -1;
}

/*
 * A tensor viewing v's data, holding a reference to v (taken here).  The
 * view was checked when made and keeps its element strides, so the core
 * builds the tensor without checking it again.
 */
static inline int view_tensor(DLPackViewObject *v, int versioned,
                              unsigned options, intptr_t consumer,
                              const cai_consumer_at *at, void **out,
                              cai_error_t *err)
{
    cai_release_fn release = release_pyobject;
    void *owner = v;
    DLTensor t;

    t.data = v->data;
    t.device = v->device;
    t.ndim = v->ndim;
    t.dtype = v->dtype;
    t.shape = VIEW_SHAPE(v);
    t.strides = VIEW_ELEMENT_STRIDES(v);
    t.byte_offset = 0;
    Py_INCREF(v);
    if (v->home != NULL &&
        owner_away(v->home, (PyObject *)v, &owner, &release) != 0)
        return no_owner_memory(err);
    /* Memory of CUDA handed to a consumer stream (the exchange table names
     * stream 1 for host data too): its release keeps the producer until
     * the consumer's work is done (the reverse edge), whether or not the
     * producer named a stream; not when ordering is off. */
    if (consumer != CAI_STREAM_NO_SYNC &&
        cai_is_cuda_device(v->device.device_type) && v->sync &&
        v->st->sync_enabled &&
        edge_owner(v->fence, v->device, consumer, at, &owner, &release) != 0) {
        release(owner);
        return no_owner_memory(err);
    }
    return cai_tensor_new(&t, v->readonly, versioned, options, owner, release,
                          out, err);
}

/* streams.c, for views: the consumer's stream waits on the view's fence
 * (-1: nothing), *at noting where a default consumer stream is, for its
 * release; the host waits on it (a CPU consumer of host-accessible
 * memory). */
int view_order(cai_state *st, const DLPackViewObject *v, intptr_t consumer,
               cai_consumer_at *at);
int view_host_sync(cai_state *st, const DLPackViewObject *v);

/* caiview.c */
extern PyType_Spec caiview_spec;
PyObject *caiview_new(cai_state *st, void *tensor, int versioned,
                      PyObject *stream, int readonly);
/* caiview_new for a versioned, writable tensor, taking stream (a new
 * reference); a NULL stream, a failure to make it, deletes the tensor. */
static inline PyObject *caiview_taking_stream(cai_state *st,
                                              DLManagedTensorVersioned *t,
                                              PyObject *stream)
{
    PyObject *view;

    if (stream == NULL) {
        delete_tensor(t, 1); /* a foreign deleter may be NULL */
        return NULL;
    }
    view = caiview_new(st, t, 1, stream, 0);
    Py_DECREF(stream);
    return view;
}
void caiview_dealloc(PyObject *self);
/* Our CAIViews in any interpreter, as is_view. */
static inline int is_caiview(PyObject *o)
{
    return Py_TYPE(o)->tp_dealloc == caiview_dealloc;
}
int caiview_tensor(cai_state *st, PyObject *view, void **out);
void caiview_allow_readonly_legacy(PyObject *view);
PyObject *caiview_interface_of_producer(cai_state *st, PyObject *obj,
                                        int is_cuda);

/* fromdlpack.c */
extern const char from_dlpack_doc[];
PyObject *from_dlpack(PyObject *module, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames);
PyObject *from_producer(cai_state *st, PyObject *x, int given, intptr_t s,
                        int legacy_writable, int want_cuda);

/* exchange.c: one table per kind of producer */
extern const DLPackExchangeAPI view_exchange_api, caiview_exchange_api,
    bridge_exchange_api;
int exchange_publish(cai_state *st, PyTypeObject *type,
                     const DLPackExchangeAPI *api);
int from_foreign_table(cai_state *st, PyObject *x, int given,
                       PyObject **result);

/* bridge.c */
extern PyType_Spec bridge_method_spec;
extern const char add_dlpack_doc[], add_array_interface_doc[];
PyObject *add_dlpack(PyObject *module, PyObject *cls);
PyObject *add_array_interface(PyObject *module, PyObject *cls);
cai_state *bridge_state_of(PyObject *o);
int bridge_main_init(PyObject *module);
void bridge_main_forget(cai_state *st);

#endif
