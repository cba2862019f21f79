/*
 * caibridge._core: the CPython face of the C core, and this file its
 * module: multi-phase init, the module state (one per interpreter that
 * imports it), and to_dlpack (as_dlpack is in dlpackview.c, from_dlpack in
 * caiview.c).
 *
 * Every conversion goes through the core library (src/); the module only
 * reads Python descriptors into cai_desc_t, wraps tensors in capsules and
 * views, and maps cai_status to Python exceptions.  The hot paths
 * (to_dlpack, DLPackView.__dlpack__, the exchange API) make no Python-level
 * calls beyond the producer's own property, and allocate only the tensor
 * and its capsule.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

PyDoc_STRVAR(
    to_dlpack_doc,
    "to_dlpack(obj, *, max_version=None, device=None, stream=None, "
    "sync=True,\n"
    "          allow_readonly_legacy=False, dl_device=None, copy=None)\n"
    "--\n\n"
    "Like as_dlpack(obj, ...).__dlpack__(...), returning the capsule "
    "directly:\n"
    "'dltensor_versioned' when max_version asks for 1.x, else 'dltensor'.\n"
    "dl_device and copy are __dlpack__'s: dl_device must be where the data "
    "is,\n"
    "or (1, 0) for CUDA memory, which is then copied to the host (the host\n"
    "waits for the producer's stream, then for that copy; copy=False\n"
    "refuses).  copy=True makes a C-contiguous copy marked IS_COPIED: of\n"
    "host memory at once, holding nothing of obj; of CUDA memory on the\n"
    "consumer's stream without a host wait, obj kept only until the queued\n"
    "copy has run.  Pinned and managed memory\n"
    "with no stream, or asked for as dl_device=(1, 0), make the host wait "
    "for\n"
    "the producer's stream first (a consumer on the CPU).");

/* A tensor over a descriptor describe() read, checked here (its element
 * strides computed), holding owner (consumed, also on failure).  Handed to
 * consumer stream 1 or 2 with ordering on, its release keeps owner until
 * the consumer's work is done (the reverse edge, streams.c). */
static inline int checked_tensor_inline(cai_state *st, cai_desc_t *d,
                                        int versioned, unsigned options,
                                        PyObject *owner, intptr_t consumer,
                                        int sync, void **out)
{
    cai_release_fn release = release_pyobject;
    void *held = owner;
    cai_error_t err;

    if (st->home != NULL &&
        owner_away(st->home, owner, &held, &release) != 0) {
        Py_DECREF(owner);
        PyErr_NoMemory();
        return -1;
    }
    if (sync && st->sync_enabled &&
        edge_owner(NULL, d->device, consumer, NULL, &held, &release) != 0) {
        release(held);
        PyErr_NoMemory();
        return -1;
    }
    if (cai_desc_tensor(d, versioned, options, held, release, out, &err) !=
        0) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

int checked_tensor(cai_state *st, cai_desc_t *d, int versioned,
                   unsigned options, PyObject *owner, intptr_t consumer,
                   int sync, void **out)
{
    return checked_tensor_inline(st, d, versioned, options, owner, consumer,
                                 sync, out);
}

/* What a tensor viewing obj's data holds: obj, and the buffer export when
 * the data came that way (keep, consumed). */
static PyObject *tensor_owner(PyObject *obj, PyObject *keep)
{
    PyObject *owner;

    if (keep == NULL)
        return Py_NewRef(obj);
    owner = PyTuple_Pack(2, obj, keep);
    Py_DECREF(keep);
    return owner;
}

/* CUDA memory asked for on the host (dl_device=(kDLCPU, 0)): a copy the
 * host waits for, unless copy=False; a host consumer passes no stream.
 * 2: the caller makes the copy (host_copy_of_device). */
int host_copy_prepare(cai_state *st, const cai_desc_t *d, PyObject *stream,
                      int never_copy)
{
    if (never_copy) {
        PyErr_Format(PyExc_BufferError,
                     "dl_device = (1, 0) with copy=False: the data lives on "
                     "(kDLCUDA, %d), and moving it to (kDLCPU, 0) needs a "
                     "copy",
                     (int)d->device.device_id);
        return -1;
    }
    if (stream != NULL && stream != Py_None) {
        PyErr_SetString(PyExc_BufferError,
                        "stream must be None for dl_device = (1, 0): a host "
                        "consumer has no stream");
        return -1;
    }
    return 2;
}

/*
 * The checks and stream ordering of one __dlpack__ request on the data d
 * describes (its device known), in __dlpack__'s order: dl_device, the
 * consumer's stream, copy, read-only for a legacy capsule; then the
 * consumer's stream is made to wait on the producer's.
 */
int request_prepare(cai_state *st, cai_desc_t *d, const cai_request_t *req,
                    intptr_t *out)
{
    intptr_t consumer = CAI_STREAM_NO_SYNC;
    /* No stream on either side, and not device memory (read on the legacy
     * stream when none is named): nothing to check (no error is possible
     * without one) and nothing to order. */
    int streams = req->stream != NULL || d->has_stream ||
                  d->device.device_type == kDLCUDA;
    int given = req->stream != NULL && req->stream != Py_None;
    int to_host = check_dl_device(st, req->dl_device, d->device);
    DLDevice where = d->device;

    if (to_host < 0)
        return -1;
    if (to_host == 2)
        return host_copy_prepare(st, d, req->stream, req->never_copy);
    /* A consumer on the CPU, as at DLPackView.__dlpack__: asked for as
     * kDLCPU, the data is described so, and a stream is refused. */
    if (to_host) {
        d->device.device_type = kDLCPU;
        d->device.device_id = 0;
    }
    if (streams && check_stream(st, d, req->stream, &consumer) != 0)
        return -1;
    if (req->copy && d->device.device_type != kDLCPU &&
        d->device.device_type != kDLCUDA) {
        PyErr_Format(PyExc_BufferError,
                     "copy=True: %s memory (device type %d) is copied only "
                     "for a consumer on the host, dl_device=(1, 0); host "
                     "(kDLCPU) and device (kDLCUDA) arrays are copied",
                     d->device.device_type == kDLCUDAHost ? "pinned host"
                                                          : "managed",
                     (int)d->device.device_type);
        return -1;
    }
    if (!req->copy && !req->versioned && d->readonly &&
        !req->readonly_legacy_ok) {
        readonly_legacy_error();
        return -1;
    }
    if (d->has_stream && d->stream == 0) {
        /* Checked here so that no stream is ordered for a bad descriptor. */
        cai_error_t err;

        if (cai_desc_validate(d, &err) != 0) {
            raise_status(st, &err);
            return -1;
        }
    }
    /* Pinned or managed memory with no consumer stream is read by the
     * host at once (NumPy passes none): the host waits for the producer.
     * The fence is taken where the data is, not where it is described. */
    if (!given && d->has_stream &&
        (to_host || where.device_type == kDLCUDAHost ||
         where.device_type == kDLCUDAManaged)) {
        DLDevice described = d->device;
        int rc;

        d->device = where;
        rc = cai_py_host_wait(st, d, req->sync);
        d->device = described;
        return rc;
    }
    if (streams && order_streams(st, d, consumer, req->sync) != 0)
        return -1;
    *out = consumer;
    return 0;
}

/* The copy a request with copy=True asks for, after request_prepare: of
 * CUDA memory on the consumer's stream (checked again to read it), source
 * kept until the copy has run; else on the host. */
PyObject *request_copy(cai_state *st, cai_desc_t *d, const cai_request_t *req,
                       PyObject *source)
{
    intptr_t consumer = CAI_STREAM_NO_SYNC;

    if (d->device.device_type != kDLCUDA)
        return copy_to_capsule(st, d, req->versioned);
    if ((req->stream != NULL || d->has_stream) &&
        check_stream(st, d, req->stream, &consumer) != 0)
        return NULL;
    return device_copy_to_capsule(st, d, consumer, req->versioned, source);
}

/*
 * One __dlpack__ request on obj read afresh: to_dlpack's path, and the
 * __dlpack__ that add_dlpack gives a class (obj is then the instance).
 * device as as_dlpack's, NULL for none.
 */
PyObject *object_export(cai_state *st, PyObject *obj, PyObject *device,
                        const cai_request_t *req)
{
    PyObject *keep, *owner;
    cai_desc_t d;
    int64_t elem[CAI_MAX_NDIM];
    void *tensor;
    intptr_t consumer = CAI_STREAM_NO_SYNC;
    int prepared = 0;

    /* A copy reads the data here: checked first. */
    d.device.device_type = (DLDeviceType)0;
    if (describe(st, obj, device, req->copy ? elem : NULL, &d, &keep) != 0)
        return NULL;
    if (req->stream == NULL && !d.has_stream && !req->copy &&
        (req->dl_device == NULL || req->dl_device == Py_None)) {
        /* No stream on either side and the data where it is: of
         * request_prepare's checks only the read-only one can fail.  A
         * consumer of device memory that names no stream works on the
         * legacy one (DLPack), so that is its stream at release. */
        if (!req->versioned && d.readonly && !req->readonly_legacy_ok) {
            Py_XDECREF(keep);
            readonly_legacy_error();
            return NULL;
        }
        if (d.device.device_type == kDLCUDA)
            consumer = CAI_STREAM_LEGACY;
    } else if ((prepared = request_prepare(st, &d, req, &consumer)) < 0) {
        Py_XDECREF(keep);
        return NULL;
    }
    if (prepared == 2) {
        /* A fence taken now, waited for on the host: the producer's
         * stream is read just now, on this thread. */
        PyObject *copy = cai_py_host_wait(st, &d, req->sync) != 0
                             ? NULL
                             : host_copy_of_device(st, &d, req->versioned);

        Py_XDECREF(keep);
        return copy;
    }
    if (req->copy) {
        /* The copy owns its memory; obj and its export are kept until it
         * has been made. */
        PyObject *copy;

        if ((owner = tensor_owner(obj, keep)) == NULL)
            return NULL;
        copy = request_copy(st, &d, req, owner);
        Py_DECREF(owner);
        return copy;
    }
    if ((owner = tensor_owner(obj, keep)) == NULL)
        return NULL;
    if (checked_tensor_inline(
            st, &d, req->versioned,
            req->readonly_legacy_ok ? CAI_OPT_LEGACY_READONLY_OK : 0, owner,
            consumer, req->sync, &tensor) != 0)
        return NULL;
    return tensor_capsule(tensor, req->versioned);
}

/*
 * The exchange API's export of obj (a class patched by add_dlpack): a
 * versioned tensor, no stream ordering with the consumer.  Data the
 * producer names a stream for is first ordered onto the legacy default
 * stream, the work stream the table reports.
 */
int object_tensor(cai_state *st, PyObject *obj, void **out)
{
    PyObject *keep, *owner;
    cai_desc_t d;

    d.device.device_type = (DLDeviceType)0;
    if (describe(st, obj, NULL, NULL, &d, &keep) != 0)
        return -1;
    if (d.has_stream && order_streams(st, &d, CAI_STREAM_LEGACY, 1) != 0) {
        Py_XDECREF(keep);
        return -1;
    }
    if ((owner = tensor_owner(obj, keep)) == NULL)
        return -1;
    /* Its consumer works on the legacy stream, as the table reports. */
    return checked_tensor_inline(st, &d, 1, 0, owner,
                                 cai_is_cuda_device(d.device.device_type)
                                     ? CAI_STREAM_LEGACY
                                     : CAI_STREAM_NO_SYNC,
                                 1, out);
}

static PyObject *to_dlpack(PyObject *module, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    cai_state *st = PyModule_GetState(module);
    PyObject *values[7] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    cai_request_t req;

    if (check_positional("to_dlpack", nargs, 1) != 0)
        return NULL;
    if (kwnames == NULL) { /* every keyword its default */
        req.stream = req.dl_device = NULL;
        req.versioned = req.copy = req.readonly_legacy_ok = 0;
        req.never_copy = 0;
        req.sync = 1;
        return object_export(st, args[0], NULL, &req);
    }
    if (match_keywords("to_dlpack", args + nargs, kwnames, st->kw_to_dlpack,
                       values, 7) != 0)
        return NULL;
    if ((req.versioned = wants_versioned(values[0])) < 0 ||
        (req.sync = read_flag(values[3], "sync", 1)) < 0 ||
        (req.readonly_legacy_ok =
             read_flag(values[4], "allow_readonly_legacy", 0)) < 0 ||
        (req.copy = read_copy(values[6])) < 0)
        return NULL;
    req.never_copy = values[6] == Py_False;
    req.stream = values[2];
    req.dl_device = values[5];
    return object_export(st, args[0], values[1], &req);
}

static PyObject *cuda_built(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(cai_cuda_built());
}

static PyObject *foreign_table_count(PyObject *module, PyObject *unused)
{
    cai_state *st = PyModule_GetState(module);

    return PyLong_FromUnsignedLongLong(
        __atomic_load_n(&st->foreign_table_imports, __ATOMIC_RELAXED));
}

static PyMethodDef module_methods[] = {
    {"as_dlpack", (PyCFunction)(void (*)(void))as_dlpack,
     METH_FASTCALL | METH_KEYWORDS, as_dlpack_doc},
    {"as_dlpack_all", (PyCFunction)(void (*)(void))as_dlpack_all,
     METH_FASTCALL | METH_KEYWORDS, as_dlpack_all_doc},
    {"to_dlpack", (PyCFunction)(void (*)(void))to_dlpack,
     METH_FASTCALL | METH_KEYWORDS, to_dlpack_doc},
    {"from_dlpack", (PyCFunction)(void (*)(void))from_dlpack,
     METH_FASTCALL | METH_KEYWORDS, from_dlpack_doc},
    {"add_dlpack", add_dlpack, METH_O, add_dlpack_doc},
    {"add_array_interface", add_array_interface, METH_O,
     add_array_interface_doc},
    {"cuda_built", cuda_built, METH_NOARGS,
     "cuda_built()\n--\n\nTrue when CUDA support was compiled in."},
    {"_foreign_table_imports", foreign_table_count, METH_NOARGS,
     "How many from_dlpack calls used a producer type's exchange API."},
    {NULL, NULL, 0, NULL}};

/* ------------------------------------------------------------------ */
/* Module state and initialisation                                     */

static const char *const name_text[N_COUNT] = {
    [F_SHAPE] = "shape",
    [F_TYPESTR] = "typestr",
    [F_VERSION] = "version",
    [F_STRIDES] = "strides",
    [F_MASK] = "mask",
    [F_STREAM] = "stream",
    [F_DATA] = "data",
    [F_OFFSET] = "offset",
    [N_CAI] = "__cuda_array_interface__",
    [N_AI] = "__array_interface__",
    [N_DLPACK] = "__dlpack__",
    [N_DLPACK_DEVICE] = "__dlpack_device__",
    [N_CUDA_STREAM] = "__cuda_stream__",
    [N_EXCHANGE_API] = "__dlpack_c_exchange_api__",
    [N_EXCHANGE_API_OLD] = "__c_dlpack_exchange_api__",
    [N_DEVICE] = "device",
    [N_SYNC] = "sync",
    [N_ALLOW_READONLY_LEGACY] = "allow_readonly_legacy",
    [N_MAX_VERSION] = "max_version",
    [N_DL_DEVICE] = "dl_device",
    [N_COPY] = "copy",
    [N_LEGACY_WRITABLE] = "legacy_writable",
    [N_REQUIRES_GRAD] = "requires_grad",
    [N_IS_CONJ] = "is_conj",
};

static int module_traverse(PyObject *module, visitproc visit, void *arg)
{
    cai_state *st = PyModule_GetState(module);

    if (st == NULL)
        return 0;
    Py_VISIT(st->DLPackView_Type);
    Py_VISIT(st->CAIView_Type);
    Py_VISIT(st->BridgeMethod_Type);
    Py_VISIT(st->CUDAError);
    return 0;
}

static int module_clear(PyObject *module)
{
    cai_state *st = PyModule_GetState(module);
    int i;

    if (st == NULL)
        return 0;
    bridge_main_forget(st); /* before its names go */
    Py_CLEAR(st->DLPackView_Type);
    Py_CLEAR(st->CAIView_Type);
    Py_CLEAR(st->BridgeMethod_Type);
    Py_CLEAR(st->CUDAError);
    for (i = 0; i < N_COUNT; i++)
        Py_CLEAR(st->name[i]);
    Py_CLEAR(st->kw_stream_max_version);
    Py_CLEAR(st->kw_stream);
    Py_CLEAR(st->kw_stream_max_version_copy);
    Py_CLEAR(st->max_version_ours);
#ifndef Py_GIL_DISABLED
    Py_CLEAR(st->last_typestr);
    Py_CLEAR(st->last_device_obj);
#endif
    return 0;
}

static void module_free(void *module)
{
    cai_state *st = PyModule_GetState((PyObject *)module);

    (void)module_clear((PyObject *)module);
    if (st != NULL) {
        home_release(st->home);
        st->home = NULL;
    }
}

int call_at_exit(PyObject *fn)
{
    PyObject *atexit, *rc;

    if (fn == NULL)
        return -1;
    atexit = PyImport_ImportModule("atexit");
    rc = atexit == NULL ? NULL
                        : PyObject_CallMethod(atexit, "register", "O", fn);
    Py_XDECREF(atexit);
    Py_DECREF(fn);
    if (rc == NULL)
        return -1;
    Py_DECREF(rc);
    return 0;
}

static int intern_names(cai_state *st)
{
    int i;

    for (i = 0; i < N_COUNT; i++) {
        if ((st->name[i] = PyUnicode_InternFromString(name_text[i])) == NULL)
            return -1;
    }
    for (i = 0; i < F_COUNT; i++) {
        if ((st->entry_hash[i] = PyObject_Hash(st->name[i])) == -1)
            return -1;
    }
    index_entry_keys(st);
    st->kw_as_dlpack[0] = st->name[N_DEVICE];
    st->kw_as_dlpack[1] = st->name[N_SYNC];
    st->kw_as_dlpack[2] = st->name[N_ALLOW_READONLY_LEGACY];
    st->kw_to_dlpack[0] = st->name[N_MAX_VERSION];
    st->kw_to_dlpack[1] = st->name[N_DEVICE];
    st->kw_to_dlpack[2] = st->name[F_STREAM];
    st->kw_to_dlpack[3] = st->name[N_SYNC];
    st->kw_to_dlpack[4] = st->name[N_ALLOW_READONLY_LEGACY];
    st->kw_to_dlpack[5] = st->name[N_DL_DEVICE];
    st->kw_to_dlpack[6] = st->name[N_COPY];
    st->kw_dlpack[0] = st->name[F_STREAM];
    st->kw_dlpack[1] = st->name[N_MAX_VERSION];
    st->kw_dlpack[2] = st->name[N_DL_DEVICE];
    st->kw_dlpack[3] = st->name[N_COPY];
    st->kw_from_dlpack[0] = st->name[F_STREAM];
    st->kw_from_dlpack[1] = st->name[N_LEGACY_WRITABLE];
    st->kw_from_dlpack[2] = st->name[N_ALLOW_READONLY_LEGACY];
    st->kw_stream_max_version =
        PyTuple_Pack(2, st->name[F_STREAM], st->name[N_MAX_VERSION]);
    st->kw_stream = PyTuple_Pack(1, st->name[F_STREAM]);
    st->kw_stream_max_version_copy = PyTuple_Pack(
        3, st->name[F_STREAM], st->name[N_MAX_VERSION], st->name[N_COPY]);
    st->max_version_ours =
        Py_BuildValue("(ii)", CAIBRIDGE_DLPACK_MAJOR, CAIBRIDGE_DLPACK_MINOR);
    if (st->kw_stream_max_version == NULL || st->kw_stream == NULL ||
        st->kw_stream_max_version_copy == NULL || st->max_version_ours == NULL)
        return -1;
    return 0;
}

static PyTypeObject *add_type(PyObject *module, PyType_Spec *spec)
{
    PyObject *type = PyType_FromModuleAndSpec(module, spec, NULL);

    if (type == NULL || PyModule_AddObjectRef(
                            module, strrchr(spec->name, '.') + 1, type) < 0) {
        Py_XDECREF(type);
        return NULL;
    }
    return (PyTypeObject *)type;
}

/* 1 when word is one of words (NULL-ended), in any case. */
static int one_of(const char *word, const char *const *words)
{
    for (; *words != NULL; words++) {
        const char *a = word, *b = *words;

        while (*a != '\0' && tolower((unsigned char)*a) == *b) {
            a++;
            b++;
        }
        if (*a == '\0' && *b == '\0')
            return 1;
    }
    return 0;
}

/* CAIBRIDGE_SYNC at import: the usual spellings of off and on; unset or
 * empty is on, and anything else is on with a RuntimeWarning (-1: the
 * warning was made an error). */
static int read_sync_env(cai_state *st)
{
    static const char *const off[] = {"0", "false", "no", "off", NULL};
    static const char *const on[] = {"1", "true", "yes", "on", NULL};
    const char *env = getenv("CAIBRIDGE_SYNC");
    PyObject *value;
    int rc;

    st->sync_enabled = env == NULL || !one_of(env, off);
    if (env == NULL || *env == '\0' || one_of(env, off) || one_of(env, on))
        return 0;
    if ((value = PyUnicode_DecodeFSDefault(env)) == NULL)
        return -1;
    rc = PyErr_WarnExplicitFormat(
        PyExc_RuntimeWarning, "<environment>", 0, "caibridge", NULL,
        "CAIBRIDGE_SYNC=%.100R is not understood: use 0, "
        "false, no or off to turn stream ordering off, or "
        "1, true, yes or on; ordering stays on",
        value);
    Py_DECREF(value);
    return rc;
}

static int module_exec(PyObject *module)
{
    cai_state *st = PyModule_GetState(module);

    if (read_sync_env(st) != 0)
        return -1;
    st->foreign_table_imports = 0;
    st->home = NULL;
    if (PyInterpreterState_Get() != PyInterpreterState_Main() &&
        (st->home = home_new(module)) == NULL)
        return -1;
    if (intern_names(st) != 0 || release_queue_init() != 0 ||
        config_init(module) != 0)
        return -1;
    if ((st->DLPackView_Type = add_type(module, &dlpackview_spec)) == NULL ||
        exchange_publish(st, st->DLPackView_Type, &view_exchange_api) != 0 ||
        (st->CAIView_Type = add_type(module, &caiview_spec)) == NULL ||
        exchange_publish(st, st->CAIView_Type, &caiview_exchange_api) != 0)
        return -1;
    /* Reached only through the classes add_dlpack patches. */
    st->BridgeMethod_Type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &bridge_method_spec, NULL);
    if (st->BridgeMethod_Type == NULL)
        return -1;
    st->CUDAError = PyErr_NewExceptionWithDoc(
        "caibridge.CUDAError",
        "CUDA is unavailable or a CUDA runtime call failed.  When no usable\n"
        "runtime was found, its refused attribute lists each candidate the\n"
        "search passed over, \"path: reason\".",
        PyExc_BufferError, NULL);
    if (st->CUDAError == NULL ||
        PyModule_AddObjectRef(module, "CUDAError", st->CUDAError) < 0 ||
        PyModule_AddStringConstant(module, "__version__", cai_version()) < 0 ||
        PyModule_AddObjectRef(module, "DLPACK_VERSION", st->max_version_ours) <
            0 ||
        PyModule_AddIntConstant(module, "SYNC_ENABLED", st->sync_enabled) < 0)
        return -1;
    return bridge_main_init(module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* All state is per module and the core keeps none of its own that is
     * not guarded (the CUDA runtime is bound once, under pthread_once). */
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#ifdef Py_mod_gil
    /* Safe without the GIL: the module state is written only at import
     * (the memos that are not are compiled out there) or atomically;
     * producers' dicts are walked in their critical section and entries
     * held; a capsule is taken in its critical section; owners released
     * on foreign threads go through a mutex-guarded queue. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "caibridge._core",
    "The C extension of caibridge: CUDA Array Interface <-> DLPack.",
    sizeof(cai_state),
    module_methods,
    module_slots,
    module_traverse,
    module_clear,
    module_free};

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&module_def);
}
