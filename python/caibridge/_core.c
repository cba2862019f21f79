/*
 * caibridge._core: the CPython face of the C core.
 *
 * Every conversion goes through the core library (src/); this file only
 * reads Python descriptors into cai_desc_t, wraps tensors in capsules and
 * views, and maps cai_status to Python exceptions.  The hot paths (to_dlpack,
 * DLPackView.__dlpack__, the exchange API) make no Python-level calls beyond
 * the producer's own property, and allocate only the tensor and its capsule.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "caibridge.h"
/* The core's private fast path: a tensor from an already checked layout. */
#include "../../src/desc.h"

#if PY_VERSION_HEX >= 0x030D0000
#define cai_lookup_attr PyObject_GetOptionalAttr
#define cai_is_finalizing Py_IsFinalizing
#else
#define cai_lookup_attr _PyObject_LookupAttr
#define cai_is_finalizing _Py_IsFinalizing
#endif

static const char CAPSULE_LEGACY[] = "dltensor";
static const char CAPSULE_VERSIONED[] = "dltensor_versioned";
static const char CAPSULE_LEGACY_USED[] = "used_dltensor";
static const char CAPSULE_VERSIONED_USED[] = "used_dltensor_versioned";
static const char CAPSULE_EXCHANGE_API[] = "dlpack_exchange_api";

static PyObject *CUDAError;

/* CAIBRIDGE_SYNC=0 in the environment at import turns stream ordering off. */
static int sync_enabled = 1;

/* Interned once at import: attribute names, dict keys, keyword names. */
static PyObject *s_cai, *s_ai, *s_shape, *s_typestr, *s_data, *s_strides,
    *s_version, *s_mask, *s_stream, *s_offset, *s_dlpack, *s_dlpack_device,
    *s_cuda_stream, *s_exchange_api, *s_exchange_api_old, *s_device, *s_sync,
    *s_allow_readonly_legacy, *s_max_version, *s_dl_device, *s_copy;
static PyObject *max_version_ours; /* (1, 3) */
/* The keyword names from_dlpack passes to __dlpack__, built once. */
static PyObject *kw_stream_max_version, *kw_stream;

/* How many from_dlpack calls were served by a foreign type's exchange API
 * table; tests read it to prove the table was used. */
static unsigned long long foreign_table_imports;

static PyTypeObject DLPackView_Type;
static PyTypeObject CAIView_Type;

/* ------------------------------------------------------------------ */
/* Errors                                                              */

static PyObject *raise_status(const cai_error_t *err)
{
    PyObject *type;

    switch (err->status) {
    case CAI_EINVAL: type = PyExc_ValueError; break;
    case CAI_ENOMEM: type = PyExc_MemoryError; break;
    case CAI_ENOCUDA:
    case CAI_ECUDA: type = CUDAError; break;
    default: type = PyExc_BufferError; break;
    }
    /* Every message names its field; prefix it where the text does not. */
    if (err->field[0] != '\0' && strstr(err->message, err->field) == NULL)
        PyErr_Format(type, "%s: %s", err->field,
                     err->message[0] ? err->message
                                     : cai_status_name(err->status));
    else
        PyErr_SetString(type, err->message[0] ? err->message
                                              : cai_status_name(err->status));
    return NULL;
}

static int is_cuda_device(int32_t type)
{
    return type == kDLCUDA || type == kDLCUDAHost || type == kDLCUDAManaged;
}

/* ------------------------------------------------------------------ */
/* Ownership: the release callbacks handed to the core                 */

/* 1 when this thread holds the GIL through its own (GILState) thread state. */
static inline int gil_held_here(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    /* This thread's attached thread state, NULL while detached. */
    return PyThreadState_GetUnchecked() != NULL;
#else
    /* The current thread state (3.11: the GIL holder's, whichever thread
     * that is) compared by address with this thread's own. */
    PyThreadState *t = _PyThreadState_UncheckedGet();

    return t != NULL && t == PyGILState_GetThisThreadState();
#endif
}

/*
 * Drops the reference a tensor held on its Python owner.  A deleter may run
 * on any thread, and after interpreter shutdown has begun; then the
 * reference is deliberately leaked, as touching the runtime would crash.
 */
static void release_pyobject(void *owner)
{
    PyGILState_STATE gil;

    if (!Py_IsInitialized() || cai_is_finalizing())
        return;
    /* Most deleters run where the GIL is already held (a capsule or view
     * dying): then Ensure/Release, a third of a hand-over, is not needed. */
    if (gil_held_here()) {
        Py_DECREF((PyObject *)owner);
        return;
    }
    gil = PyGILState_Ensure();
    Py_DECREF((PyObject *)owner);
    PyGILState_Release(gil);
}

/* Runs a tensor's own deleter, whoever made it. */
static void delete_tensor(void *tensor, int versioned)
{
    if (versioned) {
        DLManagedTensorVersioned *t = tensor;

        if (t->deleter != NULL)
            t->deleter(t);
    } else {
        DLManagedTensor *t = tensor;

        if (t->deleter != NULL)
            t->deleter(t);
    }
}

/*
 * Capsule destructors delete the tensor only while the capsule is unused: a
 * consumer that took the tensor renamed the capsule.  Our own name pointer
 * is compared first, sparing a strcmp on the usual path, and the tensor is
 * read from the context (set at creation), sparing GetPointer's.  A capsule
 * dies with the GIL held, so a tensor owning a Python object drops it here
 * instead of going through release_pyobject's thread-state checks.  The
 * pending exception is saved only when there is one.
 */
static inline void delete_capsule_tensor(void *tensor, int versioned)
{
    cai_release_fn release;
    void *owner;

    if (cai_tensor_detach(tensor, versioned, &release, &owner) != 0) {
        delete_tensor(tensor, versioned);
    } else if (release == release_pyobject) {
        if (!cai_is_finalizing()) /* as release_pyobject */
            Py_DECREF((PyObject *)owner);
    } else if (release != NULL) {
        release(owner);
    }
}

#if defined(__GNUC__)
__attribute__((always_inline)) /* one copy per capsule kind, no extra call */
#endif
static inline void capsule_destructor(PyObject *capsule, const char *ours,
                                      int versioned)
{
    const char *name = PyCapsule_GetName(capsule);
    void *tensor;

    if (name != ours && (name == NULL || strcmp(name, ours) != 0))
        return;
    tensor = PyCapsule_GetContext(capsule);
    if (tensor == NULL) /* made elsewhere, e.g. by desc_to_capsule */
        tensor = PyCapsule_GetPointer(capsule, name);
    if (tensor == NULL)
        return;
    if (!PyErr_Occurred()) {
        delete_capsule_tensor(tensor, versioned);
    } else {
        PyObject *type, *value, *tb;

        PyErr_Fetch(&type, &value, &tb);
        delete_capsule_tensor(tensor, versioned);
        PyErr_Restore(type, value, tb);
    }
}

static void legacy_capsule_destructor(PyObject *capsule)
{
    capsule_destructor(capsule, CAPSULE_LEGACY, 0);
}

static void versioned_capsule_destructor(PyObject *capsule)
{
    capsule_destructor(capsule, CAPSULE_VERSIONED, 1);
}

/* Builds a tensor for desc and wraps it in a capsule.  The owner is
 * consumed: released by the tensor's deleter, or at once on failure. */
static PyObject *desc_to_capsule(const cai_desc_t *desc, int versioned,
                                 unsigned options, void *owner,
                                 cai_release_fn release)
{
    cai_error_t err;
    PyObject *capsule;

    if (versioned) {
        DLManagedTensorVersioned *t;

        if (cai_desc_to_dlpack_versioned(desc, options, owner, release, &t,
                                         &err) != 0)
            return raise_status(&err);
        capsule = PyCapsule_New(t, CAPSULE_VERSIONED,
                                versioned_capsule_destructor);
        if (capsule == NULL)
            t->deleter(t);
    } else {
        DLManagedTensor *t;

        if (cai_desc_to_dlpack(desc, options, owner, release, &t, &err) != 0)
            return raise_status(&err);
        capsule = PyCapsule_New(t, CAPSULE_LEGACY, legacy_capsule_destructor);
        if (capsule == NULL)
            t->deleter(t);
    }
    return capsule;
}

/* Wraps a tensor from cai_tensor_new in a capsule, or deletes it. */
static inline PyObject *tensor_capsule(void *tensor, int versioned)
{
    PyObject *capsule;

    if (versioned) {
        DLManagedTensorVersioned *t = tensor;

        capsule = PyCapsule_New(t, CAPSULE_VERSIONED,
                                versioned_capsule_destructor);
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

/* ------------------------------------------------------------------ */
/* Keyword arguments of the vectorcall entry points                    */

/* Matches kwnames against names (interned); unknown names raise TypeError. */
static int parse_keywords(const char *fname, PyObject *const *kwvalues,
                          PyObject *kwnames, PyObject **const names[],
                          PyObject **values, int count)
{
    Py_ssize_t i, n = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    int j;

    for (i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);

        for (j = 0; j < count; j++) {
            if (key == *names[j])
                goto found;
        }
        for (j = 0; j < count; j++) {
            if (PyUnicode_Compare(key, *names[j]) == 0)
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

/* parse_keywords inlined for the usual call: every name one of ours by
 * identity (the interpreter passes interned names); else the full parse. */
static inline int match_keywords(const char *fname, PyObject *const *kwvalues,
                                 PyObject *kwnames, PyObject **const names[],
                                 PyObject **values, int count)
{
    Py_ssize_t i, n;

    if (kwnames == NULL)
        return 0;
    n = PyTuple_GET_SIZE(kwnames);
    for (i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        int j;

        for (j = 0; j < count && key != *names[j]; j++)
            ;
        if (j == count)
            return parse_keywords(fname, kwvalues, kwnames, names, values,
                                  count);
        values[j] = kwvalues[i];
    }
    return 0;
}

static int check_positional(const char *fname, Py_ssize_t nargs,
                            Py_ssize_t expected)
{
    if (nargs == expected)
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "%s() takes %zd positional argument%s but %zd were given",
                 fname, expected, expected == 1 ? "" : "s", nargs);
    return -1;
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

/* ------------------------------------------------------------------ */
/* Reading the interface dict                                          */

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

/* One integer of the descriptor.  index < 0 means a scalar field. */
static int read_int64(PyObject *o, const char *field, Py_ssize_t index,
                      int64_t *out)
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
            PyErr_Format(PyExc_ValueError,
                         "%s[%zd] does not fit in 64 bits", field, index);
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

/* Reads a tuple of ints of at most CAI_MAX_NDIM entries; returns its length.
 * Clears *pure unless it is an exact tuple of exact ints. */
static Py_ssize_t read_int_tuple(PyObject *o, const char *field, int64_t *out,
                                 int *pure)
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
    if (!PyTuple_CheckExact(o))
        *pure = 0;
    for (i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(o, i);

        if (small_int(x, &out[i]))
            continue;
        if (!PyLong_CheckExact(x))
            *pure = 0;
        if (read_int64(x, field, i, &out[i]) != 0)
            return -1;
    }
    return n;
}

/* Producers hand out the same typestr object call after call: the last one
 * parsed is remembered (an exact str, so its text cannot change). */
static PyObject *last_typestr;
static DLDataType last_dtype;

/* The entries of an interface dict that caibridge reads. */
enum {
    F_SHAPE, F_TYPESTR, F_VERSION, F_STRIDES, F_MASK, F_STREAM, F_DATA,
    F_OFFSET, F_COUNT
};
static PyObject **const entry_keys[F_COUNT] = {
    &s_shape, &s_typestr, &s_version, &s_strides, &s_mask, &s_stream,
    &s_data, &s_offset};
static Py_hash_t entry_hashes[F_COUNT];

/* Our interned keys by address: key_slot[(address >> key_shift) & mask] is
 * the entry a key pointer may be (F_COUNT: none), chosen at import so that
 * no two keys share a slot.  Any other key takes the compare path. */
#define KEY_SLOT_MASK 63
static unsigned char key_slot[KEY_SLOT_MASK + 1];
static unsigned key_shift;

static void index_entry_keys(void)
{
    unsigned shift;
    int j;

    for (shift = 3; shift < 24; shift++) {
        memset(key_slot, F_COUNT, sizeof key_slot);
        for (j = 0; j < F_COUNT; j++) {
            unsigned char *slot =
                &key_slot[((uintptr_t)*entry_keys[j] >> shift) & KEY_SLOT_MASK];

            if (*slot != F_COUNT)
                break;
            *slot = (unsigned char)j;
        }
        if (j == F_COUNT) {
            key_shift = shift;
            return;
        }
    }
    /* No shift separates them: every key takes the compare path. */
    memset(key_slot, F_COUNT, sizeof key_slot);
    key_shift = 0;
}

/*
 * Takes a strong reference to each entry caibridge reads (NULL when absent)
 * in one walk over the dict, which runs no Python code: reading an entry
 * later may run __index__ that mutates the dict, so every entry is held
 * first.  A walk also beats one hash probe per key, absent keys included.
 * Returns 0, or 1 when a key that is not an exact str made it fall back to
 * look-ups (whose equality tests may run Python code), or -1 on error.
 */
static int collect_entries(PyObject *iface, PyObject *entries[F_COUNT])
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int j;

    for (j = 0; j < F_COUNT; j++)
        entries[j] = NULL;
    while (PyDict_Next(iface, &pos, &key, &value)) {
        Py_hash_t hash;

        /* Keys written as literals are our interned strings themselves. */
        j = key_slot[((uintptr_t)key >> key_shift) & KEY_SLOT_MASK];
        if (j < F_COUNT && key == *entry_keys[j])
            goto found;
        if (!PyUnicode_CheckExact(key))
            goto slow; /* a key type whose equality may run Python code */
        hash = PyObject_Hash(key); /* cached in the str */
        for (j = 0; j < F_COUNT; j++) {
            if (hash == entry_hashes[j] &&
                PyUnicode_Compare(key, *entry_keys[j]) == 0)
                goto found;
        }
        continue;
    found:
        if (entries[j] == NULL)
            entries[j] = Py_NewRef(value);
    }
    return 0;

slow:
    /* Dict look-ups give the same answers as Python's own d[key]. */
    for (j = 0; j < F_COUNT; j++) {
        PyObject *v;

        Py_CLEAR(entries[j]);
        v = PyDict_GetItemWithError(iface, *entry_keys[j]);
        if (v == NULL && PyErr_Occurred())
            goto fail;
        entries[j] = Py_XNewRef(v);
    }
    return 1;

fail:
    for (j = 0; j < F_COUNT; j++)
        Py_CLEAR(entries[j]);
    return -1;
}

static int missing(const char *iface, PyObject *key)
{
    PyErr_Format(PyExc_ValueError, "%s has no '%U' entry, which is required",
                 iface, key);
    return -1;
}

/* Moves entries[field] to the caller, raising when a required one is absent. */
static inline PyObject *take_required(PyObject **entries, int field,
                                      const char *iface, PyObject *key)
{
    PyObject *o = entries[field];

    entries[field] = NULL;
    if (o == NULL)
        missing(iface, key);
    return o;
}

/* Lowest and highest byte offsets (end exclusive) a validated layout reaches. */
static void byte_extent(const cai_desc_t *d, int64_t itemsize, int64_t *lo,
                        int64_t *hi)
{
    int i;

    *lo = 0;
    *hi = itemsize;
    for (i = 0; i < d->ndim; i++) {
        if (d->shape[i] == 0) {
            *hi = 0;
            return;
        }
    }
    if (!d->has_strides) {
        for (i = 0; i < d->ndim; i++)
            *hi *= d->shape[i];
        return;
    }
    for (i = 0; i < d->ndim; i++) {
        int64_t span = d->strides[i] * (d->shape[i] - 1);

        if (span < 0)
            *lo += span;
        else
            *hi += span;
    }
}

/*
 * The data entry of __array_interface__ given as a buffer object (or None:
 * obj's own buffer).  The memoryview returned in *keep holds the export.
 */
static int read_buffer_data(PyObject *obj, PyObject *source, cai_desc_t *d,
                            PyObject **keep)
{
    PyObject *view = PyMemoryView_FromObject(source == Py_None ? obj : source);
    Py_buffer *buf;

    if (view == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "data must be a (pointer, readonly) tuple, a buffer "
                         "object or None (the object's own buffer); "
                         "%.100s supports none of them",
                         Py_TYPE(source == Py_None ? obj : source)->tp_name);
        }
        return -1;
    }
    buf = PyMemoryView_GET_BUFFER(view);
    d->data = buf->buf;
    d->readonly = buf->readonly != 0;
    *keep = view;
    return 0;
}

/*
 * Producers that keep one interface dict and return it on every read skip
 * the walk: the last dict read is remembered by its version tag (PEP 509),
 * which CPython 3.11 and older give a fresh, never reused value on each
 * creation and each change of any dict.  A dict is remembered only when
 * every entry read was an exact str, int, tuple of ints, bool or None, which
 * cannot change under an unchanged tag, and its data came as a pointer.
 * Newer versions deprecate the tag (3.14 stops bumping it): none there.
 */
#if PY_VERSION_HEX < 0x030C0000
#define CAI_DICT_CACHE 1
#define CACHE_NDIM 8
static struct {
    uint64_t tag; /* 0: empty */
    int is_cuda;
    void *data;
    int readonly, ndim, version, has_strides, has_stream;
    intptr_t stream;
    DLDataType dtype;
    int checked; /* cai_desc_check passed; elem holds its strides */
    int64_t shape[CACHE_NDIM], strides[CACHE_NDIM], elem[CACHE_NDIM];
} desc_cache;

/*
 * read_desc gives the tag under which it remembered the descriptor (0: not
 * remembered).  Python code run since (an __index__, a nested call) may
 * have replaced the entry, so the tag is compared again at each use.
 */

/* The element strides of the descriptor remembered under tag when it passed
 * cai_desc_check before (the check need not run again), else NULL.  Valid
 * until Python code runs. */
static int64_t *desc_cache_checked(uint64_t tag)
{
    return tag != 0 && tag == desc_cache.tag && desc_cache.checked
               ? desc_cache.elem
               : NULL;
}

/* Records that the descriptor remembered under tag passed cai_desc_check. */
static void desc_cache_set_checked(uint64_t tag, const int64_t *elem)
{
    int i;

    if (tag == 0 || tag != desc_cache.tag)
        return;
    for (i = 0; i < desc_cache.ndim; i++)
        desc_cache.elem[i] = elem[i];
    desc_cache.checked = 1;
}

static int desc_cache_get(PyObject *iface, int is_cuda, cai_desc_t *d)
{

    if (((PyDictObject *)iface)->ma_version_tag != desc_cache.tag ||
        desc_cache.is_cuda != is_cuda || !PyDict_CheckExact(iface))
        return 0;
    d->ndim = desc_cache.ndim;
    d->data = desc_cache.data;
    d->readonly = desc_cache.readonly;
    d->version = desc_cache.version;
    d->has_strides = desc_cache.has_strides;
    d->has_mask = 0;
    d->has_stream = desc_cache.has_stream;
    d->stream = desc_cache.stream;
    d->dtype = desc_cache.dtype;
    /* Whole fixed-size arrays: a few wide moves, no loop. */
    memcpy(d->shape, desc_cache.shape, sizeof desc_cache.shape);
    if (d->has_strides)
        memcpy(d->strides, desc_cache.strides, sizeof desc_cache.strides);
    return 1;
}

static void desc_cache_put(PyObject *iface, int is_cuda, const cai_desc_t *d)
{
    int i;

    desc_cache.tag = 0;
    desc_cache.checked = 0;
    if (d->ndim > CACHE_NDIM || d->has_mask || !PyDict_CheckExact(iface))
        return;
    desc_cache.is_cuda = is_cuda;
    desc_cache.data = d->data;
    desc_cache.readonly = d->readonly;
    desc_cache.ndim = d->ndim;
    desc_cache.version = d->version;
    desc_cache.has_strides = d->has_strides;
    desc_cache.has_stream = d->has_stream;
    desc_cache.stream = d->stream;
    desc_cache.dtype = d->dtype;
    for (i = 0; i < d->ndim; i++) {
        desc_cache.shape[i] = d->shape[i];
        desc_cache.strides[i] = d->has_strides ? d->strides[i] : 0;
    }
    desc_cache.tag = ((PyDictObject *)iface)->ma_version_tag;
}
#else
static int64_t *desc_cache_checked(uint64_t tag)
{
    (void)tag;
    return NULL;
}

static void desc_cache_set_checked(uint64_t tag, const int64_t *elem)
{
    (void)tag;
    (void)elem;
}
#endif

/*
 * Reads a CAI (is_cuda) or __array_interface__ dict into d.  When the data
 * came through the buffer protocol, *keep receives the object holding the
 * export; the caller owns it.  The device is left for the caller to fill.
 * *tag is the tag the descriptor is remembered under, or 0.
 */
static int read_desc(PyObject *obj, PyObject *iface, int is_cuda,
                     cai_desc_t *d, PyObject **keep, uint64_t *tag)
{
    const char *name = is_cuda ? "__cuda_array_interface__"
                               : "__array_interface__";
    PyObject *o = NULL, *entries[F_COUNT];
    cai_error_t err;
    int64_t v;
    Py_ssize_t n;
    int j, pure;

    *keep = NULL;
    *tag = 0;
    if (!PyDict_Check(iface)) {
        PyErr_Format(PyExc_TypeError, "%s must be a dict, got %.100s", name,
                     Py_TYPE(iface)->tp_name);
        return -1;
    }
#ifdef CAI_DICT_CACHE
    if (desc_cache_get(iface, is_cuda, d)) {
        *tag = desc_cache.tag;
        return 0;
    }
#endif
    if ((pure = collect_entries(iface, entries)) < 0)
        return -1;
    pure = !pure; /* 1: keys all exact str; cleared by any impure entry */

    if ((o = take_required(entries, F_SHAPE, name, s_shape)) == NULL)
        goto fail;
    if ((n = read_int_tuple(o, "shape", d->shape, &pure)) < 0)
        goto fail;
    d->ndim = (int)n;
    Py_CLEAR(o);

    if ((o = take_required(entries, F_TYPESTR, name, s_typestr)) == NULL)
        goto fail;
    {
        const char *text;
        Py_ssize_t len;

        if (!PyUnicode_Check(o)) {
            PyErr_Format(PyExc_TypeError, "typestr must be a str, got %.100s",
                         Py_TYPE(o)->tp_name);
            goto fail;
        }
        if (!PyUnicode_CheckExact(o))
            pure = 0;
        if (o == last_typestr) {
            d->dtype = last_dtype;
        } else {
            if ((text = PyUnicode_AsUTF8AndSize(o, &len)) == NULL)
                goto fail;
            if (cai_typestr_parse(text, (size_t)len, &d->dtype, &err) != 0) {
                raise_status(&err);
                goto fail;
            }
            if (PyUnicode_CheckExact(o)) {
                Py_XSETREF(last_typestr, Py_NewRef(o));
                last_dtype = d->dtype;
            }
        }
    }
    Py_CLEAR(o);

    if ((o = take_required(entries, F_VERSION, name, s_version)) == NULL)
        goto fail;
    if (!PyLong_CheckExact(o))
        pure = 0;
    if (!small_int(o, &v) && read_int64(o, "version", -1, &v) != 0)
        goto fail;
    if (v < 0 || v > 3) {
        PyErr_Format(PyExc_ValueError,
                     "version = %lld: versions 0 to 3 are understood",
                     (long long)v);
        goto fail;
    }
    d->version = (int)v;
    Py_CLEAR(o);

    d->has_strides = 0;
    o = entries[F_STRIDES];
    entries[F_STRIDES] = NULL;
    if (o != NULL && o != Py_None) {
        if ((n = read_int_tuple(o, "strides", d->strides, &pure)) < 0)
            goto fail;
        if (n != d->ndim) {
            PyErr_Format(PyExc_ValueError,
                         "strides has %zd entries but shape has %d", n,
                         d->ndim);
            goto fail;
        }
        d->has_strides = 1;
    }
    Py_CLEAR(o);

    o = entries[F_MASK];
    entries[F_MASK] = NULL;
    d->has_mask = o != NULL && o != Py_None;
    if (d->has_mask)
        pure = 0;
    Py_CLEAR(o);

    d->has_stream = 0;
    d->stream = 0;
    if (is_cuda) {
        o = entries[F_STREAM];
        entries[F_STREAM] = NULL;
        if (o != NULL && o != Py_None) {
            if (!PyLong_CheckExact(o))
                pure = 0;
            if (read_int64(o, "stream", -1, &v) != 0)
                goto fail;
            if (v < 0 || v > INTPTR_MAX) {
                /* 0 is left to the core, which explains why it is refused. */
                PyErr_Format(PyExc_ValueError,
                             "stream = %lld: CAI v3 streams are None, 1, 2 "
                             "or a cudaStream_t handle", (long long)v);
                goto fail;
            }
            d->has_stream = 1;
            d->stream = (intptr_t)v;
        }
        Py_CLEAR(o);
    }

    if ((o = take_required(entries, F_DATA, name, s_data)) == NULL)
        goto fail;
    if (PyTuple_Check(o)) {
        PyObject *ro;
        unsigned long long p;
        int flag;

        if (PyTuple_GET_SIZE(o) != 2) {
            PyErr_Format(PyExc_ValueError,
                         "data must be a (pointer, readonly) pair, got a "
                         "tuple of %zd entries", PyTuple_GET_SIZE(o));
            goto fail;
        }
        if (!PyLong_Check(PyTuple_GET_ITEM(o, 0)) ||
            PyBool_Check(PyTuple_GET_ITEM(o, 0))) {
            PyErr_Format(PyExc_TypeError,
                         "data[0] (the pointer) must be an int, got %.100s",
                         Py_TYPE(PyTuple_GET_ITEM(o, 0))->tp_name);
            goto fail;
        }
#if ULONG_MAX >= UINTPTR_MAX
        /* Faster than the long long variant for multi-digit ints (3.11). */
        if (small_int(PyTuple_GET_ITEM(o, 0), &v) && v >= 0)
            p = (unsigned long long)v;
        else
            p = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(o, 0));
#else
        p = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(o, 0));
#endif
        if (p == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError,
                            "data[0] (the pointer) must be an int from 0 to "
                            "2**64 - 1");
            goto fail;
        }
        if (p > UINTPTR_MAX) {
            PyErr_SetString(PyExc_ValueError,
                            "data[0] (the pointer) does not fit in a pointer");
            goto fail;
        }
        ro = PyTuple_GET_ITEM(o, 1);
        if (!PyBool_Check(ro) && !PyLong_Check(ro)) {
            PyErr_Format(PyExc_TypeError,
                         "data[1] (readonly) must be a bool, got %.100s",
                         Py_TYPE(ro)->tp_name);
            goto fail;
        }
        if (!PyTuple_CheckExact(o) ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(o, 0)))
            pure = 0;
        if (ro == Py_False || ro == Py_True) {
            flag = ro == Py_True;
        } else {
            if (!PyLong_CheckExact(ro))
                pure = 0; /* an int subclass may define __bool__ */
            if ((flag = PyObject_IsTrue(ro)) < 0)
                goto fail;
        }
        d->data = (void *)(uintptr_t)p;
        d->readonly = flag;
    } else if (is_cuda) {
        PyErr_Format(PyExc_TypeError,
                     "data must be a (pointer, readonly) tuple, got %.100s",
                     Py_TYPE(o)->tp_name);
        goto fail;
    } else if (read_buffer_data(obj, o, d, keep) != 0) {
        goto fail;
    }
    Py_CLEAR(o);

    if (!is_cuda) {
        o = entries[F_OFFSET];
        entries[F_OFFSET] = NULL;
        if (o != NULL && o != Py_None) {
            if (!PyLong_CheckExact(o))
                pure = 0;
            if (read_int64(o, "offset", -1, &v) != 0)
                goto fail;
            if (v < 0) {
                PyErr_Format(PyExc_ValueError,
                             "offset = %lld is negative", (long long)v);
                goto fail;
            }
            if (v != 0)
                d->data = (char *)d->data + v;
        }
        Py_CLEAR(o);
    }
    /* Every entry read was released above; what is left is the one this
     * kind of interface does not read. */
    Py_XDECREF(entries[F_STREAM]);
    Py_XDECREF(entries[F_OFFSET]);
#ifdef CAI_DICT_CACHE
    /* A dict only we hold (refcount 1: built for this read, as most
     * producers do) dies on return, and its tag is never seen again. */
    if (pure && *keep == NULL && Py_REFCNT(iface) > 1) {
        desc_cache_put(iface, is_cuda, d);
        *tag = desc_cache.tag;
    }
#else
    (void)pure;
#endif
    return 0;

fail:
    Py_XDECREF(o);
    for (j = 0; j < F_COUNT; j++)
        Py_XDECREF(entries[j]);
    Py_CLEAR(*keep);
    return -1;
}

/* A buffer-protocol export must hold every byte the layout reaches. */
static int check_buffer_bounds(const cai_desc_t *d, PyObject *keep)
{
    Py_buffer *buf = PyMemoryView_GET_BUFFER(keep);
    int64_t lo, hi, start = (char *)d->data - (char *)buf->buf;

    byte_extent(d, cai_dtype_itemsize(d->dtype), &lo, &hi);
    if (hi == 0)
        return 0;
    if (start + lo < 0 || start + hi > (int64_t)buf->len) {
        PyErr_Format(PyExc_ValueError,
                     "data: the array reaches bytes %lld to %lld of a buffer "
                     "of %zd bytes", (long long)(start + lo),
                     (long long)(start + hi), buf->len);
        return -1;
    }
    return 0;
}

/* Callers pass the same device tuple call after call; the last one read is
 * remembered (a tuple of ints cannot change). */
static PyObject *last_device_obj;
static DLDevice last_device;

/* A (device_type, device_id) pair as __dlpack_device__ returns it. */
static int read_device(PyObject *o, const char *what, DLDevice *out)
{
    int64_t type, id;

    if (o == last_device_obj) {
        *out = last_device;
        return 0;
    }

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
        PyErr_Format(PyExc_ValueError,
                     "%s: device_id = %lld is out of range", what,
                     (long long)id);
        return -1;
    }
    out->device_type = (DLDeviceType)type;
    out->device_id = (int32_t)id;
    if (PyTuple_CheckExact(o) && PyLong_CheckExact(PyTuple_GET_ITEM(o, 0)) &&
        PyLong_CheckExact(PyTuple_GET_ITEM(o, 1))) {
        Py_XSETREF(last_device_obj, Py_NewRef(o));
        last_device = *out;
    }
    return 0;
}

/*
 * Everything as_dlpack and to_dlpack share: reads obj's interface into d,
 * then validates it and fills its device (given, kDLCPU for host arrays, or
 * looked up from the pointer).  validate = 0 leaves the checks to the
 * conversion that follows.  *keep and *tag as in read_desc.
 */
static int describe(PyObject *obj, PyObject *device, int validate,
                    cai_desc_t *d, PyObject **keep, uint64_t *tag)
{
    PyObject *iface;
    cai_error_t err;
    int is_cuda = 1, rc;

    if (cai_lookup_attr(obj, s_cai, &iface) < 0)
        return -1;
    if (iface == NULL) {
        is_cuda = 0;
        if (cai_lookup_attr(obj, s_ai, &iface) < 0)
            return -1;
        if (iface == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%.100s has neither __cuda_array_interface__ nor "
                         "__array_interface__", Py_TYPE(obj)->tp_name);
            return -1;
        }
    }
    rc = read_desc(obj, iface, is_cuda, d, keep, tag);
    Py_DECREF(iface);
    if (rc != 0)
        return -1;

    if (device != NULL && device != Py_None) {
        if (device == last_device_obj) /* read_device's first test, inline */
            d->device = last_device;
        else if (read_device(device, "device", &d->device) != 0)
            goto fail;
    } else if (!is_cuda) {
        d->device.device_type = kDLCPU;
        d->device.device_id = 0;
    } else {
        validate = 1;
    }
    if (validate || *keep != NULL) {
        int64_t elem[CAI_MAX_NDIM];

        /* A remembered descriptor that passed before passes again. */
        if (desc_cache_checked(*tag) == NULL) {
            if (cai_desc_check(d, elem, &err) != 0) {
                raise_status(&err);
                goto fail;
            }
            desc_cache_set_checked(*tag, elem);
        }
        if (*keep != NULL && check_buffer_bounds(d, *keep) != 0)
            goto fail;
    }
    if (is_cuda && (device == NULL || device == Py_None) &&
        cai_cuda_locate(d->data, &d->device, &err) != 0) {
        raise_status(&err);
        goto fail;
    }
    return 0;

fail:
    Py_CLEAR(*keep);
    return -1;
}

/* ------------------------------------------------------------------ */
/* Streams, versions and requests of the DLPack protocol               */

/* A stream argument: None (not given), an int, or an object with
 * __cuda_stream__() returning (0, handle). */
static int read_stream(PyObject *o, int *given, intptr_t *out)
{
    int64_t v;

    *given = 0;
    *out = 0;
    if (o == NULL || o == Py_None)
        return 0;
    if (!PyLong_Check(o)) {
        PyObject *method, *pair;
        int rc;

        if (cai_lookup_attr(o, s_cuda_stream, &method) < 0)
            return -1;
        if (method == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "stream must be None, an int or an object with "
                         "__cuda_stream__, got %.100s", Py_TYPE(o)->tp_name);
            return -1;
        }
        pair = PyObject_CallNoArgs(method);
        Py_DECREF(method);
        if (pair == NULL)
            return -1;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyLong_Check(PyTuple_GET_ITEM(pair, 0)) ||
            PyLong_AsLong(PyTuple_GET_ITEM(pair, 0)) != 0) {
            Py_DECREF(pair);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError,
                                "__cuda_stream__() must return (0, handle)");
            return -1;
        }
        rc = read_int64(PyTuple_GET_ITEM(pair, 1), "__cuda_stream__()[1]", -1,
                        &v);
        Py_DECREF(pair);
        if (rc != 0)
            return -1;
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

/*
 * The consumer-stream rules of __dlpack__ (DLPack Python spec, "stream"):
 * host memory takes no stream; CUDA memory takes None (the legacy default
 * stream), -1 (no ordering) or a stream handle, never 0.  Writes the stream
 * the consumer will use (CAI_STREAM_NO_SYNC for none) to *consumer.
 */
static int check_stream(const cai_desc_t *d, PyObject *arg,
                        intptr_t *consumer)
{
    int given = 0;
    intptr_t s = 0;

    if (arg != NULL && arg != Py_None && read_stream(arg, &given, &s) != 0)
        return -1;
    if (d->device.device_type == kDLCPU) {
        if (given && s != CAI_STREAM_NO_SYNC) {
            PyErr_Format(PyExc_BufferError,
                         "stream = %zd was given for host memory (kDLCPU); "
                         "only None is valid there", (Py_ssize_t)s);
            return -1;
        }
        *consumer = CAI_STREAM_NO_SYNC;
        return 0;
    }
    if (!given)
        s = CAI_STREAM_LEGACY;
    if (s == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "stream = 0 is disallowed by the DLPack and CAI "
                        "specs (ambiguous); use 1 for the legacy default "
                        "stream, 2 for the per-thread one, or -1 for none");
        return -1;
    }
    if (s < CAI_STREAM_NO_SYNC) {
        PyErr_Format(PyExc_ValueError,
                     "stream = %zd is not a stream: use None, -1, 1, 2 or a "
                     "stream handle", (Py_ssize_t)s);
        return -1;
    }
    *consumer = s;
    return 0;
}

/* Makes the consumer's stream wait for the producer's (CAI v3,
 * "Synchronization") unless ordering is off or there is nothing to order. */
static int order_streams(const cai_desc_t *d, intptr_t consumer, int sync)
{
    cai_error_t err;

    if (!sync || !sync_enabled || consumer == CAI_STREAM_NO_SYNC ||
        !d->has_stream || !is_cuda_device(d->device.device_type))
        return 0;
    if (cai_cuda_order(d, consumer, &err) != 0) {
        raise_status(&err);
        return -1;
    }
    return 0;
}

/* 1 when max_version asks for a versioned tensor, 0 for legacy. */
static int wants_versioned(PyObject *o)
{
    int64_t major, minor;

    if (o == NULL || o == Py_None)
        return 0;
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 2) {
        PyErr_Format(PyExc_TypeError,
                     "max_version must be a (major, minor) tuple or None, "
                     "got %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    if (read_int64(PyTuple_GET_ITEM(o, 0), "max_version[0]", -1, &major) != 0 ||
        read_int64(PyTuple_GET_ITEM(o, 1), "max_version[1]", -1, &minor) != 0)
        return -1;
    return major >= 1;
}

static PyObject *readonly_legacy_error(void)
{
    PyErr_SetString(PyExc_BufferError,
                    "data: the array is read-only and a legacy DLPack "
                    "capsule cannot say so; the consumer should pass "
                    "max_version=(1, 0) or later, or opt in with "
                    "allow_readonly_legacy=True to export it as writable "
                    "(writing through it is then undefined)");
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Copies (copy=True on host memory)                                   */

static void copy_strided(char *dst, const char *src, const cai_desc_t *d,
                         size_t itemsize)
{
    int64_t index[CAI_MAX_NDIM] = {0};
    int64_t count = 1;
    int i, ndim = d->ndim;

    for (i = 0; i < ndim; i++)
        count *= d->shape[i];
    while (count-- > 0) {
        memcpy(dst, src, itemsize);
        dst += itemsize;
        for (i = ndim - 1; i >= 0; i--) {
            src += d->strides[i];
            if (++index[i] < d->shape[i])
                break;
            src -= d->strides[i] * d->shape[i];
            index[i] = 0;
        }
    }
}

/* A C-contiguous, writable copy of host data in a tensor marked IS_COPIED;
 * the tensor owns the copy and frees it in its deleter. */
static PyObject *copy_to_capsule(const cai_desc_t *d, int versioned)
{
    int64_t itemsize = cai_dtype_itemsize(d->dtype), count = 1, nbytes;
    cai_desc_t c;
    char *block;
    int i;

    for (i = 0; i < d->ndim; i++) {
        if (__builtin_mul_overflow(count, d->shape[i], &count))
            return PyErr_NoMemory();
    }
    if (__builtin_mul_overflow(count, itemsize, &nbytes) ||
        (uint64_t)nbytes > SIZE_MAX)
        return PyErr_NoMemory();
    block = malloc(nbytes > 0 ? (size_t)nbytes : 1);
    if (block == NULL)
        return PyErr_NoMemory();
    if (count > 0) {
        if (d->has_strides)
            copy_strided(block, d->data, d, (size_t)itemsize);
        else
            memcpy(block, d->data, (size_t)nbytes);
    }
    c.data = block;
    c.readonly = 0;
    c.ndim = d->ndim;
    c.version = d->version;
    c.has_strides = 0;
    c.has_mask = 0;
    c.has_stream = 0;
    c.stream = 0;
    c.dtype = d->dtype;
    c.device = d->device;
    memcpy(c.shape, d->shape, (size_t)d->ndim * sizeof c.shape[0]);
    return desc_to_capsule(&c, versioned,
                           CAI_OPT_IS_COPIED | CAI_OPT_LEGACY_READONLY_OK,
                           block, free);
}

/* ------------------------------------------------------------------ */
/* DLPackView: what as_dlpack returns                                  */

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
    int readonly;
    int version;
    int has_strides;
    int has_stream;
    int sync;
    int readonly_legacy_ok;
    intptr_t stream;
    int64_t dims[];
} DLPackViewObject;

#define VIEW_SHAPE(v) ((v)->dims)
/* Byte strides: set only when has_strides. */
#define VIEW_STRIDES(v) ((v)->dims + (v)->ndim)
#define VIEW_ELEMENT_STRIDES(v) ((v)->dims + 2 * (v)->ndim)

/* The fields of a descriptor that stream ordering reads; no extents. */
static void view_to_header(const DLPackViewObject *v, cai_desc_t *d)
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

/*
 * A tensor viewing v's data, holding a reference to v (taken here).  The
 * view was checked when made and keeps its element strides, so the core
 * builds the tensor without checking it again.
 */
static inline int view_tensor(DLPackViewObject *v, int versioned,
                              unsigned options, void **out, cai_error_t *err)
{
    DLTensor t;

    t.data = v->data;
    t.device = v->device;
    t.ndim = v->ndim;
    t.dtype = v->dtype;
    t.shape = VIEW_SHAPE(v);
    t.strides = VIEW_ELEMENT_STRIDES(v);
    t.byte_offset = 0;
    Py_INCREF(v);
    return cai_tensor_new(&t, v->readonly, versioned, options, v,
                          release_pyobject, out, err);
}

/* A view of a validated descriptor; takes keep (may be NULL).  tag as
 * describe() gave it. */
static PyObject *view_new(PyObject *obj, const cai_desc_t *d, PyObject *keep,
                          int sync, int readonly_legacy_ok, uint64_t tag)
{
    DLPackViewObject *v;
    const int64_t *known;
    int64_t *elem;
    cai_error_t err;
    int i;

    v = PyObject_GC_NewVar(DLPackViewObject, &DLPackView_Type, 3 * d->ndim);
    if (v == NULL) {
        Py_XDECREF(keep);
        return NULL;
    }
    Py_INCREF(obj);
    v->obj = obj;
    v->keep = keep;
    v->weakrefs = NULL;
    v->data = d->data;
    v->dtype = d->dtype;
    v->device = d->device;
    v->ndim = d->ndim;
    v->readonly = d->readonly;
    v->version = d->version;
    v->has_strides = d->has_strides;
    v->has_stream = d->has_stream;
    v->stream = d->stream;
    v->sync = sync;
    v->readonly_legacy_ok = readonly_legacy_ok;
    /* Loops, not memcpy: a call costs more than a few extents. */
    for (i = 0; i < d->ndim; i++)
        VIEW_SHAPE(v)[i] = d->shape[i];
    elem = VIEW_ELEMENT_STRIDES(v);
    /* Remembered as checked under tag (looked up after the allocation, which
     * may run Python code): its element strides are the ones to keep. */
    known = desc_cache_checked(tag);
    if (known != NULL) {
        for (i = 0; i < d->ndim; i++)
            elem[i] = known[i];
        if (d->has_strides)
            for (i = 0; i < d->ndim; i++)
                VIEW_STRIDES(v)[i] = d->strides[i];
    } else if (d->has_strides) {
        for (i = 0; i < d->ndim; i++)
            VIEW_STRIDES(v)[i] = d->strides[i];
        if (cai_strides_bytes_to_elements(d->ndim, d->shape, d->strides,
                                          cai_dtype_itemsize(d->dtype), elem,
                                          &err) != 0) {
            Py_DECREF(v);
            return raise_status(&err);
        }
    } else {
        int64_t step = 1;

        /* The element strides saturate as cai_desc_check's do (they are
         * handed out as they are); only zero-size arrays ever saturate.
         * The byte strides of a contiguous view are never read (it has
         * none to report): left unset. */
        for (i = d->ndim - 1; i >= 0; i--) {
            elem[i] = step;
            if (d->shape[i] > 1 &&
                __builtin_mul_overflow(step, d->shape[i], &step))
                step = INT64_MAX;
        }
    }
    PyObject_GC_Track(v);
    return (PyObject *)v;
}

static int view_traverse(DLPackViewObject *v, visitproc visit, void *arg)
{
    Py_VISIT(v->obj);
    Py_VISIT(v->keep);
    return 0;
}

static int view_clear(DLPackViewObject *v)
{
    Py_CLEAR(v->keep);
    Py_CLEAR(v->obj);
    return 0;
}

static void view_dealloc(DLPackViewObject *v)
{
    PyObject_GC_UnTrack(v);
    if (v->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)v);
    view_clear(v);
    PyObject_GC_Del(v);
}

/* The capsule for one __dlpack__ request; every request is independent and
 * holds its own reference to the view (and so to the producer). */
#if defined(__GNUC__)
__attribute__((noinline)) /* keeps its descriptor off view_export's stack */
#endif
static PyObject *view_export_slow(DLPackViewObject *v, PyObject *stream,
                                  int versioned, int copy, int sync,
                                  int streams);

/* The usual request (no stream on either side, no copy) needs no
 * descriptor: the view's checked layout goes straight to the core. */
static inline PyObject *view_export(DLPackViewObject *v, PyObject *stream,
                                    int versioned, int copy, int sync)
{
    cai_error_t err;
    void *tensor;
    /* No stream on either side: nothing to check (no error is possible
     * without one) and nothing to order. */
    int streams = (stream != NULL && stream != Py_None) || v->has_stream;

    if (streams || copy)
        return view_export_slow(v, stream, versioned, copy, sync, streams);
    if (!versioned && v->readonly && !v->readonly_legacy_ok)
        return readonly_legacy_error();
    if (view_tensor(v, versioned,
                    v->readonly_legacy_ok ? CAI_OPT_LEGACY_READONLY_OK : 0,
                    &tensor, &err) != 0)
        return raise_status(&err);
    return tensor_capsule(tensor, versioned);
}

static PyObject *view_export_slow(DLPackViewObject *v, PyObject *stream,
                                  int versioned, int copy, int sync,
                                  int streams)
{
    cai_desc_t d;
    intptr_t consumer = CAI_STREAM_NO_SYNC;
    cai_error_t err;
    void *tensor;

    if (streams) {
        view_to_header(v, &d);
        if (check_stream(&d, stream, &consumer) != 0)
            return NULL;
    }
    if (copy && v->device.device_type != kDLCPU) {
        PyErr_Format(PyExc_BufferError,
                     "copy=True: a copy of device memory (device type %d) is "
                     "not supported; only host arrays are copied",
                     (int)v->device.device_type);
        return NULL;
    }
    if (!copy && !versioned && v->readonly && !v->readonly_legacy_ok)
        return readonly_legacy_error();
    if (streams && order_streams(&d, consumer, sync) != 0)
        return NULL;
    if (copy) {
        view_to_desc(v, &d);
        return copy_to_capsule(&d, versioned);
    }
    if (view_tensor(v, versioned,
                    v->readonly_legacy_ok ? CAI_OPT_LEGACY_READONLY_OK : 0,
                    &tensor, &err) != 0)
        return raise_status(&err);
    return tensor_capsule(tensor, versioned);
}

static PyObject *view_dlpack(DLPackViewObject *v, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    static PyObject **const names[] = {&s_stream, &s_max_version,
                                       &s_dl_device, &s_copy};
    PyObject *values[4] = {NULL, NULL, NULL, NULL};
    int versioned, copy = 0;

    if (check_positional("__dlpack__", nargs, 0) != 0 ||
        match_keywords("__dlpack__", args + nargs, kwnames, names, values,
                       4) != 0)
        return NULL;
    if ((versioned = wants_versioned(values[1])) < 0)
        return NULL;
    if (values[2] != NULL && values[2] != Py_None) {
        DLDevice want;

        if (read_device(values[2], "dl_device", &want) != 0)
            return NULL;
        if (want.device_type != v->device.device_type ||
            want.device_id != v->device.device_id) {
            PyErr_Format(PyExc_BufferError,
                         "dl_device = (%d, %d): the data lives on (%d, %d) "
                         "and caibridge does not move data between devices",
                         (int)want.device_type, (int)want.device_id,
                         (int)v->device.device_type,
                         (int)v->device.device_id);
            return NULL;
        }
    }
    if (values[3] != NULL && values[3] != Py_None) {
        if (!PyBool_Check(values[3])) {
            PyErr_Format(PyExc_TypeError,
                         "copy must be True, False or None, got %.100s",
                         Py_TYPE(values[3])->tp_name);
            return NULL;
        }
        copy = values[3] == Py_True;
    }
    return view_export(v, values[0], versioned, copy, v->sync);
}

static PyObject *view_dlpack_device(DLPackViewObject *v, PyObject *unused)
{
    return Py_BuildValue("(ii)", (int)v->device.device_type,
                         (int)v->device.device_id);
}

static PyObject *view_repr(DLPackViewObject *v)
{
    char typestr[CAI_TYPESTR_MAX];
    cai_error_t err;

    if (cai_typestr_format(v->dtype, typestr, &err) != 0)
        strcpy(typestr, "?");
    return PyUnicode_FromFormat(
        "<caibridge.DLPackView ndim=%d typestr='%s' device=(%d, %d)%s of "
        "%.100s>", v->ndim, typestr, (int)v->device.device_type,
        (int)v->device.device_id, v->readonly ? " readonly" : "",
        Py_TYPE(v->obj)->tp_name);
}

static PyObject *view_get_obj(DLPackViewObject *v, void *unused)
{
    return Py_NewRef(v->obj);
}

PyDoc_STRVAR(view_dlpack_doc,
"__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n"
"--\n\n"
"Export the data as a DLPack capsule.\n\n"
"A versioned capsule ('dltensor_versioned') when max_version asks for 1.x,\n"
"else a legacy one ('dltensor').  Each call hands out an independent capsule\n"
"holding a reference to the producer until its deleter runs.  For CUDA\n"
"memory, stream is the consumer's stream (None: legacy default, -1: no\n"
"ordering; 0 is refused); for host memory it must be None.  copy=True makes\n"
"a C-contiguous host copy marked IS_COPIED; copy=False never copies.");

PyDoc_STRVAR(view_dlpack_device_doc,
"__dlpack_device__()\n--\n\n"
"The (device_type, device_id) pair of the data.");

static PyMethodDef view_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))view_dlpack,
     METH_FASTCALL | METH_KEYWORDS, view_dlpack_doc},
    {"__dlpack_device__", (PyCFunction)view_dlpack_device, METH_NOARGS,
     view_dlpack_device_doc},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef view_getset[] = {
    {"obj", (getter)view_get_obj, NULL,
     "The producer whose data this view exports.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyDoc_STRVAR(view_doc,
"A DLPack producer for an object exposing __cuda_array_interface__ or\n"
"__array_interface__; made by caibridge.as_dlpack().\n\n"
"The type publishes the DLPack C exchange API as __dlpack_c_exchange_api__.");

static PyTypeObject DLPackView_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "caibridge.DLPackView",
    .tp_basicsize = offsetof(DLPackViewObject, dims),
    .tp_itemsize = sizeof(int64_t),
    .tp_dealloc = (destructor)view_dealloc,
    .tp_repr = (reprfunc)view_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = view_doc,
    .tp_traverse = (traverseproc)view_traverse,
    .tp_clear = (inquiry)view_clear,
    .tp_weaklistoffset = offsetof(DLPackViewObject, weakrefs),
    .tp_methods = view_methods,
    .tp_getset = view_getset,
};

/* ------------------------------------------------------------------ */
/* CAIView: what from_dlpack returns                                   */

typedef struct {
    PyObject_HEAD
    void *tensor; /* DLManagedTensorVersioned * or DLManagedTensor * */
    int versioned;
    DLDevice device;
    PyObject *stream; /* CAI 'stream': an int, or None */
    PyObject *iface;  /* the interface dict, built at first use */
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
 * stream is the CAI stream to report (borrowed; None for none).
 */
static PyObject *caiview_new(void *tensor, int versioned, PyObject *stream)
{
    CAIViewObject *v;
    cai_desc_t d;
    cai_error_t err;
    int rc;

    rc = versioned ? cai_desc_from_dlpack_versioned(tensor, &d, &err)
                   : cai_desc_from_dlpack(tensor, &d, &err);
    if (rc != 0) {
        delete_tensor(tensor, versioned);
        return raise_status(&err);
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
    v = PyObject_New(CAIViewObject, &CAIView_Type);
    if (v == NULL) {
        delete_tensor(tensor, versioned);
        return NULL;
    }
    v->tensor = tensor;
    v->versioned = versioned;
    v->device = d.device;
    v->stream = Py_NewRef(d.device.device_type == kDLCPU ? Py_None : stream);
    v->iface = NULL;
    v->weakrefs = NULL;
    return (PyObject *)v;
}

static void caiview_dealloc(CAIViewObject *v)
{
    if (v->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)v);
    Py_CLEAR(v->iface);
    Py_CLEAR(v->stream);
    delete_tensor(v->tensor, v->versioned);
    PyObject_Free(v);
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

/* The interface dict, built once: version 3, strides None exactly when the
 * layout is C-contiguous, and for CUDA memory the stream. */
static PyObject *caiview_interface(CAIViewObject *v)
{
    char typestr[CAI_TYPESTR_MAX];
    cai_desc_t d;
    cai_error_t err;
    PyObject *dict, *x;

    if (v->iface != NULL)
        return Py_NewRef(v->iface);
    if (tensor_desc(v, &d, &err) != 0 ||
        cai_typestr_format(d.dtype, typestr, &err) != 0)
        return raise_status(&err);
    if ((dict = PyDict_New()) == NULL)
        return NULL;
#define PUT(key, expr)                                                       \
    do {                                                                     \
        if ((x = (expr)) == NULL || PyDict_SetItem(dict, key, x) != 0) {     \
            Py_XDECREF(x);                                                   \
            Py_DECREF(dict);                                                 \
            return NULL;                                                     \
        }                                                                    \
        Py_DECREF(x);                                                        \
    } while (0)
    PUT(s_shape, int64_tuple(d.ndim, d.shape));
    PUT(s_typestr, PyUnicode_FromString(typestr));
    PUT(s_data, Py_BuildValue("(NO)", PyLong_FromVoidPtr(d.data),
                              d.readonly ? Py_True : Py_False));
    PUT(s_strides, d.has_strides ? int64_tuple(d.ndim, d.strides)
                                 : Py_NewRef(Py_None));
    PUT(s_version, PyLong_FromLong(3));
    if (is_cuda_device(d.device.device_type))
        PUT(s_stream, Py_NewRef(v->stream));
#undef PUT
    v->iface = dict;
    return Py_NewRef(dict);
}

static PyObject *caiview_get_cai(CAIViewObject *v, void *unused)
{
    if (!is_cuda_device(v->device.device_type)) {
        PyErr_SetString(PyExc_AttributeError,
                        "__cuda_array_interface__: the data is host memory "
                        "(kDLCPU); use __array_interface__");
        return NULL;
    }
    return caiview_interface(v);
}

static PyObject *caiview_get_ai(CAIViewObject *v, void *unused)
{
    if (v->device.device_type != kDLCPU) {
        PyErr_Format(PyExc_AttributeError,
                     "__array_interface__: the data is CUDA memory (device "
                     "type %d); use __cuda_array_interface__",
                     (int)v->device.device_type);
        return NULL;
    }
    return caiview_interface(v);
}

static PyObject *caiview_dlpack_device(CAIViewObject *v, PyObject *unused)
{
    return Py_BuildValue("(ii)", (int)v->device.device_type,
                         (int)v->device.device_id);
}

static PyObject *caiview_repr(CAIViewObject *v)
{
    return PyUnicode_FromFormat("<caibridge.CAIView device=(%d, %d) %s>",
                                (int)v->device.device_type,
                                (int)v->device.device_id,
                                v->versioned ? "versioned" : "legacy");
}

static PyGetSetDef caiview_getset[] = {
    {"__cuda_array_interface__", (getter)caiview_get_cai, NULL,
     "CAI version 3 for CUDA memory (kDLCUDA, kDLCUDAHost, kDLCUDAManaged).",
     NULL},
    {"__array_interface__", (getter)caiview_get_ai, NULL,
     "NumPy's array interface (version 3) for host memory.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef caiview_methods[] = {
    {"__dlpack_device__", (PyCFunction)caiview_dlpack_device, METH_NOARGS,
     "__dlpack_device__()\n--\n\nThe (device_type, device_id) of the data."},
    {NULL, NULL, 0, NULL}};

PyDoc_STRVAR(caiview_doc,
"Owns a DLPack tensor and describes it as __cuda_array_interface__ (CUDA\n"
"memory) or __array_interface__ (host memory); made by\n"
"caibridge.from_dlpack().  The tensor's deleter runs once, when this dies.");

static PyTypeObject CAIView_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "caibridge.CAIView",
    .tp_basicsize = sizeof(CAIViewObject),
    .tp_dealloc = (destructor)caiview_dealloc,
    .tp_repr = (reprfunc)caiview_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = caiview_doc,
    .tp_weaklistoffset = offsetof(CAIViewObject, weakrefs),
    .tp_methods = caiview_methods,
    .tp_getset = caiview_getset,
};

/* ------------------------------------------------------------------ */
/* The DLPack C exchange API (DLPack 1.2/1.3), published on DLPackView  */

/* Allocates a C-contiguous host tensor like prototype; the core builds the
 * tensor and its deleter frees the data block too. */
static int xapi_allocator(DLTensor *prototype, DLManagedTensorVersioned **out,
                          void *error_ctx,
                          void (*set_error)(void *, const char *,
                                            const char *))
{
    cai_desc_t d;
    cai_error_t err;
    int64_t itemsize, count = 1, nbytes;
    void *block;
    int i;

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
    itemsize = cai_dtype_itemsize(prototype->dtype);
    for (i = 0; i < prototype->ndim; i++) {
        if (prototype->shape[i] < 0 ||
            __builtin_mul_overflow(count, prototype->shape[i], &count))
            goto too_big;
    }
    if (itemsize == 0 || __builtin_mul_overflow(count, itemsize, &nbytes) ||
        (uint64_t)nbytes > SIZE_MAX)
        goto too_big;
    block = NULL;
    if (posix_memalign(&block, 64, nbytes > 0 ? (size_t)nbytes : 1) != 0) {
        if (set_error != NULL)
            set_error(error_ctx, "MemoryError", "cannot allocate the tensor");
        return -1;
    }
    d.data = block;
    d.readonly = 0;
    d.ndim = prototype->ndim;
    d.version = 3;
    d.has_strides = 0;
    d.has_mask = 0;
    d.has_stream = 0;
    d.stream = 0;
    d.dtype = prototype->dtype;
    d.device = prototype->device;
    for (i = 0; i < d.ndim; i++)
        d.shape[i] = prototype->shape[i];
    if (cai_desc_to_dlpack_versioned(&d, 0, block, free, out, &err) != 0) {
        if (set_error != NULL)
            set_error(error_ctx,
                      err.status == CAI_ENOMEM ? "MemoryError" : "ValueError",
                      err.message);
        return -1;
    }
    return 0;

too_big:
    if (set_error != NULL)
        set_error(error_ctx, "ValueError",
                  "the prototype's dtype or size cannot be allocated");
    return -1;
}

/* The exchange API's Python objects must be our views. */
static DLPackViewObject *xapi_view(PyObject *o)
{
    if (Py_TYPE(o) != &DLPackView_Type) {
        PyErr_Format(PyExc_TypeError,
                     "caibridge's exchange API takes a DLPackView, got %.100s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return (DLPackViewObject *)o;
}

static int xapi_managed_from_py(void *py_object,
                                DLManagedTensorVersioned **out)
{
    PyObject *o = py_object;
    DLPackViewObject *v;
    cai_error_t err;
    void *tensor;

    *out = NULL;
    if ((v = xapi_view(o)) == NULL)
        return -1;
    if (view_tensor(v, 1, 0, &tensor, &err) != 0) {
        raise_status(&err);
        return -1;
    }
    *out = tensor;
    return 0;
}

static int xapi_managed_to_py(DLManagedTensorVersioned *tensor,
                              void **out_py_object)
{
    PyObject *v = caiview_new(tensor, 1, Py_None);

    *out_py_object = v;
    return v == NULL ? -1 : 0;
}

/* Lends the view's own shape and element strides: valid while it lives. */
static int xapi_dltensor_from_py(void *py_object, DLTensor *out)
{
    PyObject *o = py_object;
    DLPackViewObject *v;

    if ((v = xapi_view(o)) == NULL)
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

/* caibridge keeps no stream of its own: work goes on the default stream. */
static int xapi_current_work_stream(DLDeviceType device_type,
                                    int32_t device_id, void **out)
{
    *out = NULL;
    return 0;
}

static DLPackExchangeAPI exchange_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},
    xapi_allocator,
    xapi_managed_from_py,
    xapi_managed_to_py,
    xapi_dltensor_from_py,
    xapi_current_work_stream,
};

/* A usable exchange API table on type(x), or NULL (no error) if none. */
static const DLPackExchangeAPI *foreign_table(PyObject *x)
{
    PyObject *names[2] = {s_exchange_api, s_exchange_api_old};
    int i;

    for (i = 0; i < 2; i++) {
        PyObject *capsule = _PyType_Lookup(Py_TYPE(x), names[i]);
        const DLPackExchangeAPIHeader *h;

        if (capsule == NULL || !PyCapsule_IsValid(capsule,
                                                  CAPSULE_EXCHANGE_API))
            continue;
        h = PyCapsule_GetPointer(capsule, CAPSULE_EXCHANGE_API);
        /* Newer tables chain to older ones (DLPack, "prev_api"). */
        while (h != NULL && h->version.major != DLPACK_MAJOR_VERSION)
            h = h->prev_api;
        if (h != NULL)
            return (const DLPackExchangeAPI *)h;
    }
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Module functions                                                    */

PyDoc_STRVAR(as_dlpack_doc,
"as_dlpack(obj, *, device=None, sync=True, allow_readonly_legacy=False)\n"
"--\n\n"
"Wrap a CAI or array-interface producer as a DLPack producer.\n\n"
"Reads obj.__cuda_array_interface__ (CUDA memory) or else\n"
"obj.__array_interface__ (host memory), checks it, and returns a\n"
"DLPackView whose __dlpack__ hands out zero-copy capsules that keep obj\n"
"alive.  device=(device_type, device_id) skips the CUDA pointer lookup.\n"
"sync=False turns off stream ordering for this view.  A read-only array is\n"
"exported as a legacy capsule only with allow_readonly_legacy=True.\n\n"
"Raises TypeError or ValueError for a malformed descriptor, BufferError\n"
"when it cannot be exported, caibridge.CUDAError when CUDA fails.");

static PyObject *as_dlpack(PyObject *module, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    static PyObject **const names[] = {&s_device, &s_sync,
                                       &s_allow_readonly_legacy};
    PyObject *values[3] = {NULL, NULL, NULL}, *keep;
    cai_desc_t d;
    uint64_t tag;
    int sync, ro_ok;

    if (check_positional("as_dlpack", nargs, 1) != 0 ||
        match_keywords("as_dlpack", args + nargs, kwnames, names, values,
                       3) != 0)
        return NULL;
    if ((sync = read_flag(values[1], "sync", 1)) < 0 ||
        (ro_ok = read_flag(values[2], "allow_readonly_legacy", 0)) < 0)
        return NULL;
    if (describe(args[0], values[0], 1, &d, &keep, &tag) != 0)
        return NULL;
    return view_new(args[0], &d, keep, sync, ro_ok, tag);
}

PyDoc_STRVAR(to_dlpack_doc,
"to_dlpack(obj, *, max_version=None, device=None, stream=None, sync=True,\n"
"          allow_readonly_legacy=False)\n"
"--\n\n"
"Like as_dlpack(obj, ...).__dlpack__(...), returning the capsule directly:\n"
"'dltensor_versioned' when max_version asks for 1.x, else 'dltensor'.");

/*
 * The capsule for a descriptor describe() read: checked here unless it is
 * remembered as checked (under tag), then built without a second check.
 * The owner is consumed, as by the core's conversions.
 */
static PyObject *checked_capsule(cai_desc_t *d, uint64_t tag,
                                 int versioned, unsigned options,
                                 PyObject *owner)
{
    int64_t scratch[CAI_MAX_NDIM];
    int64_t *elem = desc_cache_checked(tag);
    cai_error_t err;
    DLTensor t;
    void *tensor;

    if (elem == NULL) {
        if (cai_desc_check(d, scratch, &err) != 0) {
            Py_DECREF(owner);
            return raise_status(&err);
        }
        desc_cache_set_checked(tag, scratch);
        elem = scratch;
    }
    t.data = d->data;
    t.device = d->device;
    t.ndim = d->ndim;
    t.dtype = d->dtype;
    t.shape = d->shape;
    t.strides = elem;
    t.byte_offset = 0;
    if (cai_tensor_new(&t, d->readonly, versioned, options, owner,
                       release_pyobject, &tensor, &err) != 0)
        return raise_status(&err);
    return tensor_capsule(tensor, versioned);
}

static PyObject *to_dlpack(PyObject *module, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    static PyObject **const names[] = {&s_max_version, &s_device, &s_stream,
                                       &s_sync, &s_allow_readonly_legacy};
    PyObject *values[5] = {NULL, NULL, NULL, NULL, NULL}, *keep, *owner;
    cai_desc_t d;
    uint64_t tag;
    intptr_t consumer;
    int versioned, sync, ro_ok, streams;

    if (check_positional("to_dlpack", nargs, 1) != 0 ||
        match_keywords("to_dlpack", args + nargs, kwnames, names, values,
                       5) != 0)
        return NULL;
    if ((versioned = wants_versioned(values[0])) < 0 ||
        (sync = read_flag(values[3], "sync", 1)) < 0 ||
        (ro_ok = read_flag(values[4], "allow_readonly_legacy", 0)) < 0)
        return NULL;
    if (describe(args[0], values[1], 0, &d, &keep, &tag) != 0)
        return NULL;
    /* No stream on either side: nothing to check (no error is possible
     * without one) and nothing to order. */
    streams = values[2] != NULL || d.has_stream;
    consumer = CAI_STREAM_NO_SYNC;
    if (streams && check_stream(&d, values[2], &consumer) != 0)
        goto fail;
    if (!versioned && d.readonly && !ro_ok) {
        readonly_legacy_error();
        goto fail;
    }
    if (d.has_stream && d.stream == 0) {
        /* Checked here so that no stream is ordered for a bad descriptor. */
        cai_error_t err;

        if (cai_desc_validate(&d, &err) != 0) {
            raise_status(&err);
            goto fail;
        }
    }
    if (streams && order_streams(&d, consumer, sync) != 0)
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
    return checked_capsule(&d, tag, versioned,
                           ro_ok ? CAI_OPT_LEGACY_READONLY_OK : 0, owner);

fail:
    Py_XDECREF(keep);
    return NULL;
}

/* Takes the tensor out of a DLPack capsule, marking the capsule used. */
static PyObject *from_capsule(PyObject *capsule, PyObject *stream)
{
    const char *name = PyCapsule_GetName(capsule);
    void *tensor;
    int versioned;

    if (name == NULL && PyErr_Occurred())
        return NULL;
    if (name != NULL && strcmp(name, CAPSULE_VERSIONED) == 0)
        versioned = 1;
    else if (name != NULL && strcmp(name, CAPSULE_LEGACY) == 0)
        versioned = 0;
    else if (name != NULL && (strcmp(name, CAPSULE_VERSIONED_USED) == 0 ||
                              strcmp(name, CAPSULE_LEGACY_USED) == 0)) {
        PyErr_Format(PyExc_ValueError,
                     "the capsule is named '%s': its tensor was already "
                     "taken by a consumer", name);
        return NULL;
    } else {
        PyErr_Format(PyExc_TypeError,
                     "a capsule named '%s' is not a DLPack tensor",
                     name == NULL ? "(null)" : name);
        return NULL;
    }
    tensor = PyCapsule_GetPointer(capsule, name);
    if (tensor == NULL)
        return NULL;
    /* Renamed first: from here on only we may call the deleter. */
    if (PyCapsule_SetName(capsule, versioned ? CAPSULE_VERSIONED_USED
                                             : CAPSULE_LEGACY_USED) != 0)
        return NULL;
    return caiview_new(tensor, versioned, stream);
}

/* The CAI stream to report for data made ready on consumer stream s. */
static PyObject *reported_stream(int given, intptr_t s)
{
    if (!given)
        s = CAI_STREAM_LEGACY;
    if (s == CAI_STREAM_NO_SYNC)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t((Py_ssize_t)s);
}

PyDoc_STRVAR(from_dlpack_doc,
"from_dlpack(x, *, stream=None)\n"
"--\n\n"
"Take a DLPack tensor from a producer (an object with __dlpack__) or a\n"
"capsule, and return a CAIView that owns it: __cuda_array_interface__ for\n"
"CUDA memory, __array_interface__ for host memory.  stream is the stream\n"
"the data will be used on (None: legacy default; an int; or an object with\n"
"__cuda_stream__); it is passed to the producer for CUDA data and reported\n"
"as the CAI 'stream'.  A producer whose type publishes the DLPack C\n"
"exchange API is read through it when stream is None or -1.");

static PyObject *from_dlpack(PyObject *module, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    static PyObject **const names[] = {&s_stream};
    PyObject *values[1] = {NULL}, *x, *stream_obj, *capsule, *result;
    PyObject *device, *method, *call_args[3];
    const DLPackExchangeAPI *api;
    DLDevice dev;
    intptr_t s;
    int given;

    if (check_positional("from_dlpack", nargs, 1) != 0 ||
        parse_keywords("from_dlpack", args + nargs, kwnames, names, values,
                       1) != 0)
        return NULL;
    x = args[0];
    if (read_stream(values[0], &given, &s) != 0)
        return NULL;
    if (given && s == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "stream = 0 is disallowed by the DLPack and CAI specs "
                        "(ambiguous); use 1, 2, a stream handle, or -1");
        return NULL;
    }

    if (PyCapsule_CheckExact(x)) {
        if ((stream_obj = given ? reported_stream(1, s) : Py_NewRef(Py_None))
            == NULL)
            return NULL;
        result = from_capsule(x, stream_obj);
        Py_DECREF(stream_obj);
        return result;
    }

    if (Py_TYPE(x) == &DLPackView_Type) {
        /* Our own producer: straight to the tensor, ordered as __dlpack__. */
        DLPackViewObject *v = (DLPackViewObject *)x;
        cai_desc_t d;
        intptr_t consumer;
        DLManagedTensorVersioned *t;
        cai_error_t err;
        void *tensor;

        view_to_header(v, &d);
        if (check_stream(&d, values[0], &consumer) != 0 ||
            order_streams(&d, consumer, v->sync) != 0)
            return NULL;
        if (view_tensor(v, 1, 0, &tensor, &err) != 0)
            return raise_status(&err);
        t = tensor;
        if ((stream_obj = reported_stream(given, s)) == NULL) {
            t->deleter(t);
            return NULL;
        }
        result = caiview_new(t, 1, stream_obj);
        Py_DECREF(stream_obj);
        return result;
    }

    if ((!given || s == CAI_STREAM_NO_SYNC) &&
        (api = foreign_table(x)) != NULL) {
        DLManagedTensorVersioned *t = NULL;
        void *work = NULL;

        if (api->managed_tensor_from_py_object_no_sync(x, &t) != 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_BufferError,
                                "the producer's exchange API refused the "
                                "object");
            return NULL;
        }
        foreign_table_imports++;
        if (given) {
            stream_obj = Py_NewRef(Py_None);
        } else if (is_cuda_device(t->dl_tensor.device.device_type)) {
            /* No-sync export: the data is ready on the producer's current
             * stream, which consumers of the CAI must wait on. */
            if (api->current_work_stream(t->dl_tensor.device.device_type,
                                         t->dl_tensor.device.device_id,
                                         &work) != 0) {
                t->deleter(t);
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_BufferError,
                                    "the producer's current_work_stream "
                                    "failed");
                return NULL;
            }
            stream_obj = work == NULL ? PyLong_FromLong(CAI_STREAM_LEGACY)
                                      : PyLong_FromVoidPtr(work);
        } else {
            stream_obj = Py_NewRef(Py_None);
        }
        if (stream_obj == NULL) {
            t->deleter(t);
            return NULL;
        }
        result = caiview_new(t, 1, stream_obj);
        Py_DECREF(stream_obj);
        return result;
    }

    /* The Python protocol. */
    if (cai_lookup_attr(x, s_dlpack, &method) < 0)
        return NULL;
    if (method == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "from_dlpack() takes a DLPack producer (with __dlpack__) "
                     "or a DLPack capsule, got %.100s", Py_TYPE(x)->tp_name);
        return NULL;
    }
    device = PyObject_CallMethodNoArgs(x, s_dlpack_device);
    if (device == NULL || read_device(device, "__dlpack_device__()", &dev)
        != 0) {
        Py_XDECREF(device);
        Py_DECREF(method);
        return NULL;
    }
    Py_DECREF(device);
    if (is_cuda_device(dev.device_type)) {
        if ((stream_obj = reported_stream(given, s)) == NULL) {
            Py_DECREF(method);
            return NULL;
        }
        call_args[0] = PyLong_FromSsize_t(given ? (Py_ssize_t)s
                                                : CAI_STREAM_LEGACY);
        if (call_args[0] == NULL) {
            Py_DECREF(stream_obj);
            Py_DECREF(method);
            return NULL;
        }
    } else {
        stream_obj = Py_NewRef(Py_None);
        call_args[0] = Py_NewRef(Py_None);
    }
    {
        PyObject *kw = Py_NewRef(kw_stream_max_version);

        if (kw == NULL) {
            capsule = NULL;
        } else {
            call_args[1] = max_version_ours;
            capsule = PyObject_Vectorcall(method, call_args, 0, kw);
            Py_DECREF(kw);
            if (capsule == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
                /* A pre-1.0 producer that knows no max_version. */
                PyErr_Clear();
                kw = Py_NewRef(kw_stream);
                if (kw != NULL) {
                    capsule = PyObject_Vectorcall(method, call_args, 0, kw);
                    Py_DECREF(kw);
                }
            }
        }
    }
    Py_DECREF(call_args[0]);
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
        result = from_capsule(capsule, stream_obj);
    }
    Py_DECREF(capsule);
    Py_DECREF(stream_obj);
    return result;
}

static PyObject *cuda_built(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(cai_cuda_built());
}

static PyObject *foreign_table_count(PyObject *module, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(foreign_table_imports);
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

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "caibridge._core",
    "The C extension of caibridge: CUDA Array Interface <-> DLPack.", -1,
    module_methods, NULL, NULL, NULL, NULL};

static int intern_all(void)
{
    static const struct {
        PyObject **slot;
        const char *text;
    } table[] = {
        {&s_cai, "__cuda_array_interface__"},
        {&s_ai, "__array_interface__"},
        {&s_shape, "shape"},
        {&s_typestr, "typestr"},
        {&s_data, "data"},
        {&s_strides, "strides"},
        {&s_version, "version"},
        {&s_mask, "mask"},
        {&s_stream, "stream"},
        {&s_offset, "offset"},
        {&s_dlpack, "__dlpack__"},
        {&s_dlpack_device, "__dlpack_device__"},
        {&s_cuda_stream, "__cuda_stream__"},
        {&s_exchange_api, "__dlpack_c_exchange_api__"},
        {&s_exchange_api_old, "__c_dlpack_exchange_api__"},
        {&s_device, "device"},
        {&s_sync, "sync"},
        {&s_allow_readonly_legacy, "allow_readonly_legacy"},
        {&s_max_version, "max_version"},
        {&s_dl_device, "dl_device"},
        {&s_copy, "copy"},
    };
    size_t i;

    for (i = 0; i < sizeof table / sizeof table[0]; i++) {
        if ((*table[i].slot = PyUnicode_InternFromString(table[i].text))
            == NULL)
            return -1;
    }
    for (i = 0; i < F_COUNT; i++) {
        if ((entry_hashes[i] = PyObject_Hash(*entry_keys[i])) == -1)
            return -1;
    }
    index_entry_keys();
    kw_stream_max_version = PyTuple_Pack(2, s_stream, s_max_version);
    kw_stream = PyTuple_Pack(1, s_stream);
    if (kw_stream_max_version == NULL || kw_stream == NULL)
        return -1;
    max_version_ours = Py_BuildValue("(ii)", CAIBRIDGE_DLPACK_MAJOR,
                                     CAIBRIDGE_DLPACK_MINOR);
    return max_version_ours == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *m, *capsule;
    const char *env = getenv("CAIBRIDGE_SYNC");

    sync_enabled = !(env != NULL && strcmp(env, "0") == 0);
    if (intern_all() != 0)
        return NULL;
    if (PyType_Ready(&DLPackView_Type) < 0 || PyType_Ready(&CAIView_Type) < 0)
        return NULL;
    /* DLPack 1.3: the exchange API is a capsule in the producer type's dict. */
    capsule = PyCapsule_New(&exchange_api, CAPSULE_EXCHANGE_API, NULL);
    if (capsule == NULL ||
        PyDict_SetItem(DLPackView_Type.tp_dict, s_exchange_api, capsule) != 0) {
        Py_XDECREF(capsule);
        return NULL;
    }
    Py_DECREF(capsule);
    PyType_Modified(&DLPackView_Type);

    m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    CUDAError = PyErr_NewExceptionWithDoc(
        "caibridge.CUDAError",
        "CUDA is unavailable or a CUDA runtime call failed.",
        PyExc_BufferError, NULL);
    if (CUDAError == NULL ||
        PyModule_AddObjectRef(m, "CUDAError", CUDAError) < 0 ||
        PyModule_AddObjectRef(m, "DLPackView", (PyObject *)&DLPackView_Type)
            < 0 ||
        PyModule_AddObjectRef(m, "CAIView", (PyObject *)&CAIView_Type) < 0 ||
        PyModule_AddStringConstant(m, "__version__", cai_version()) < 0 ||
        PyModule_AddObjectRef(m, "DLPACK_VERSION", max_version_ours) < 0 ||
        PyModule_AddIntConstant(m, "SYNC_ENABLED", sync_enabled) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
