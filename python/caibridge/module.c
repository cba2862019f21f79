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

#include <stdlib.h>
#include <string.h>

PyDoc_STRVAR(to_dlpack_doc,
"to_dlpack(obj, *, max_version=None, device=None, stream=None, sync=True,\n"
"          allow_readonly_legacy=False)\n"
"--\n\n"
"Like as_dlpack(obj, ...).__dlpack__(...), returning the capsule directly:\n"
"'dltensor_versioned' when max_version asks for 1.x, else 'dltensor'.");

/*
 * The capsule for a descriptor describe() read: checked here, then built
 * without a second check.  The owner is consumed, as by the core's
 * conversions.
 */
static PyObject *checked_capsule(cai_state *st, cai_desc_t *d, int versioned,
                                 unsigned options, PyObject *owner)
{
    int64_t elem[CAI_MAX_NDIM];
    cai_release_fn release = release_pyobject;
    void *held = owner;
    cai_error_t err;
    DLTensor t;
    void *tensor;

    if (cai_desc_check(d, elem, &err) != 0) {
        Py_DECREF(owner);
        return raise_status(st, &err);
    }
    if (st->home != NULL && owner_away(st->home, owner, &held, &release) != 0)
        return PyErr_NoMemory();
    t.data = d->data;
    t.device = d->device;
    t.ndim = d->ndim;
    t.dtype = d->dtype;
    t.shape = d->shape;
    t.strides = elem;
    t.byte_offset = 0;
    if (cai_tensor_new(&t, d->readonly, versioned, options, held, release,
                       &tensor, &err) != 0)
        return raise_status(st, &err);
    return tensor_capsule(tensor, versioned);
}

static PyObject *to_dlpack(PyObject *module, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    cai_state *st = PyModule_GetState(module);
    PyObject *values[5] = {NULL, NULL, NULL, NULL, NULL}, *keep, *owner;
    cai_desc_t d;
    intptr_t consumer;
    int versioned, sync, ro_ok, streams;

    if (check_positional("to_dlpack", nargs, 1) != 0 ||
        match_keywords("to_dlpack", args + nargs, kwnames, st->kw_to_dlpack,
                       values, 5) != 0)
        return NULL;
    if ((versioned = wants_versioned(values[0])) < 0 ||
        (sync = read_flag(values[3], "sync", 1)) < 0 ||
        (ro_ok = read_flag(values[4], "allow_readonly_legacy", 0)) < 0)
        return NULL;
    if (describe(st, args[0], values[1], NULL, &d, &keep) != 0)
        return NULL;
    /* No stream on either side: nothing to check (no error is possible
     * without one) and nothing to order. */
    streams = values[2] != NULL || d.has_stream;
    consumer = CAI_STREAM_NO_SYNC;
    if (streams && check_stream(st, &d, values[2], &consumer) != 0)
        goto fail;
    if (!versioned && d.readonly && !ro_ok) {
        readonly_legacy_error();
        goto fail;
    }
    if (d.has_stream && d.stream == 0) {
        /* Checked here so that no stream is ordered for a bad descriptor. */
        cai_error_t err;

        if (cai_desc_validate(&d, &err) != 0) {
            raise_status(st, &err);
            goto fail;
        }
    }
    if (streams && order_streams(st, &d, consumer, sync) != 0)
        goto fail;
    if (keep == NULL) {
        owner = Py_NewRef(args[0]);
    } else {
        /* The capsule keeps both the producer and its buffer export. */
        owner = PyTuple_Pack(2, args[0], keep);
        Py_DECREF(keep);
        if (owner == NULL)
            return NULL;
    }
    return checked_capsule(st, &d, versioned,
                           ro_ok ? CAI_OPT_LEGACY_READONLY_OK : 0, owner);

fail:
    Py_XDECREF(keep);
    return NULL;
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
    {"to_dlpack", (PyCFunction)(void (*)(void))to_dlpack,
     METH_FASTCALL | METH_KEYWORDS, to_dlpack_doc},
    {"from_dlpack", (PyCFunction)(void (*)(void))from_dlpack,
     METH_FASTCALL | METH_KEYWORDS, from_dlpack_doc},
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
    Py_VISIT(st->CUDAError);
    return 0;
}

static int module_clear(PyObject *module)
{
    cai_state *st = PyModule_GetState(module);
    int i;

    if (st == NULL)
        return 0;
    Py_CLEAR(st->DLPackView_Type);
    Py_CLEAR(st->CAIView_Type);
    Py_CLEAR(st->CUDAError);
    for (i = 0; i < N_COUNT; i++)
        Py_CLEAR(st->name[i]);
    Py_CLEAR(st->kw_stream_max_version);
    Py_CLEAR(st->kw_stream);
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
    st->kw_dlpack[0] = st->name[F_STREAM];
    st->kw_dlpack[1] = st->name[N_MAX_VERSION];
    st->kw_dlpack[2] = st->name[N_DL_DEVICE];
    st->kw_dlpack[3] = st->name[N_COPY];
    st->kw_from_dlpack[0] = st->name[F_STREAM];
    st->kw_from_dlpack[1] = st->name[N_LEGACY_WRITABLE];
    st->kw_stream_max_version =
        PyTuple_Pack(2, st->name[F_STREAM], st->name[N_MAX_VERSION]);
    st->kw_stream = PyTuple_Pack(1, st->name[F_STREAM]);
    st->max_version_ours = Py_BuildValue("(ii)", CAIBRIDGE_DLPACK_MAJOR,
                                         CAIBRIDGE_DLPACK_MINOR);
    if (st->kw_stream_max_version == NULL || st->kw_stream == NULL ||
        st->max_version_ours == NULL)
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

static int module_exec(PyObject *module)
{
    cai_state *st = PyModule_GetState(module);
    const char *env = getenv("CAIBRIDGE_SYNC");

    st->sync_enabled = !(env != NULL && strcmp(env, "0") == 0);
    st->foreign_table_imports = 0;
    st->home = NULL;
    if (PyInterpreterState_Get() != PyInterpreterState_Main() &&
        (st->home = home_new(module)) == NULL)
        return -1;
    if (intern_names(st) != 0)
        return -1;
    if ((st->DLPackView_Type = add_type(module, &dlpackview_spec)) == NULL ||
        exchange_publish(st, st->DLPackView_Type) != 0 ||
        (st->CAIView_Type = add_type(module, &caiview_spec)) == NULL)
        return -1;
    st->CUDAError = PyErr_NewExceptionWithDoc(
        "caibridge.CUDAError",
        "CUDA is unavailable or a CUDA runtime call failed.",
        PyExc_BufferError, NULL);
    if (st->CUDAError == NULL ||
        PyModule_AddObjectRef(module, "CUDAError", st->CUDAError) < 0 ||
        PyModule_AddStringConstant(module, "__version__", cai_version()) < 0 ||
        PyModule_AddObjectRef(module, "DLPACK_VERSION",
                              st->max_version_ours) < 0 ||
        PyModule_AddIntConstant(module, "SYNC_ENABLED", st->sync_enabled) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* All state is per module and the core keeps none of its own that is
     * not guarded (the CUDA runtime is bound once, under pthread_once). */
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
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
