/*
 * Reading a producer's __cuda_array_interface__ (CAI v3) or
 * __array_interface__ into a cai_desc_t, and describe(), which the
 * conversions share: the interface read, checked and given its device.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <limits.h>
#include <string.h>

/* Chooses key_shift so that no two interface keys (interned, by address)
 * share a key_slot; any other key takes the compare path. */
void index_entry_keys(cai_state *st)
{
    unsigned shift;
    int j;

    for (shift = 3; shift < 24; shift++) {
        memset(st->key_slot, F_COUNT, sizeof st->key_slot);
        for (j = 0; j < F_COUNT; j++) {
            unsigned char *slot =
                &st->key_slot[((uintptr_t)st->name[j] >> shift) &
                              KEY_SLOT_MASK];

            if (*slot != F_COUNT)
                break;
            *slot = (unsigned char)j;
        }
        if (j == F_COUNT) {
            st->key_shift = shift;
            return;
        }
    }
    /* No shift separates them: every key takes the compare path. */
    memset(st->key_slot, F_COUNT, sizeof st->key_slot);
    st->key_shift = 0;
}

/*
 * Takes a strong reference to each entry caibridge reads (NULL when absent)
 * in one walk over the dict, which runs no Python code: reading an entry
 * later may run __index__ that mutates the dict, so every entry is held
 * first.  A walk also beats one hash probe per key, absent keys included.
 * Returns 0, or 1 when a key that is not an exact str made it fall back to
 * look-ups (whose equality tests may run Python code), or -1 on error.
 */
static int collect_entries(cai_state *st, PyObject *iface,
                           PyObject *entries[F_COUNT])
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int j;

    for (j = 0; j < F_COUNT; j++)
        entries[j] = NULL;
    while (PyDict_Next(iface, &pos, &key, &value)) {
        Py_hash_t hash;

        /* Keys written as literals are our interned strings themselves. */
        j = st->key_slot[((uintptr_t)key >> st->key_shift) & KEY_SLOT_MASK];
        if (j < F_COUNT && key == st->name[j])
            goto found;
        if (!PyUnicode_CheckExact(key))
            goto slow; /* a key type whose equality may run Python code */
        hash = PyObject_Hash(key); /* cached in the str */
        for (j = 0; j < F_COUNT; j++) {
            if (hash == st->entry_hash[j] &&
                PyUnicode_Compare(key, st->name[j]) == 0)
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
        v = PyDict_GetItemWithError(iface, st->name[j]);
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

/* The typestr entry (a str) into d->dtype. */
static int read_typestr(cai_state *st, PyObject *o, cai_desc_t *d)
{
    const char *text;
    Py_ssize_t len;
    cai_error_t err;

    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "typestr must be a str, got %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
#ifndef Py_GIL_DISABLED
    if (o == st->last_typestr) {
        d->dtype = st->last_dtype;
        return 0;
    }
#endif
    if ((text = PyUnicode_AsUTF8AndSize(o, &len)) == NULL)
        return -1;
    if (cai_typestr_parse(text, (size_t)len, &d->dtype, &err) != 0) {
        raise_status(st, &err);
        return -1;
    }
#ifndef Py_GIL_DISABLED
    /* An exact str cannot change its text: remembered by identity. */
    if (PyUnicode_CheckExact(o)) {
        Py_XSETREF(st->last_typestr, Py_NewRef(o));
        st->last_dtype = d->dtype;
    }
#endif
    return 0;
}

/* The data entry as a (pointer, readonly) pair. */
static int read_pointer_pair(PyObject *o, cai_desc_t *d)
{
    PyObject *ro;
    unsigned long long p;
    int64_t v;
    int flag;

    if (PyTuple_GET_SIZE(o) != 2) {
        PyErr_Format(PyExc_ValueError,
                     "data must be a (pointer, readonly) pair, got a "
                     "tuple of %zd entries", PyTuple_GET_SIZE(o));
        return -1;
    }
    if (!PyLong_Check(PyTuple_GET_ITEM(o, 0)) ||
        PyBool_Check(PyTuple_GET_ITEM(o, 0))) {
        PyErr_Format(PyExc_TypeError,
                     "data[0] (the pointer) must be an int, got %.100s",
                     Py_TYPE(PyTuple_GET_ITEM(o, 0))->tp_name);
        return -1;
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
        return -1;
    }
    if (p > UINTPTR_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "data[0] (the pointer) does not fit in a pointer");
        return -1;
    }
    ro = PyTuple_GET_ITEM(o, 1);
    if (!PyBool_Check(ro) && !PyLong_Check(ro)) {
        PyErr_Format(PyExc_TypeError,
                     "data[1] (readonly) must be a bool, got %.100s",
                     Py_TYPE(ro)->tp_name);
        return -1;
    }
    if (ro == Py_False || ro == Py_True)
        flag = ro == Py_True;
    else if ((flag = PyObject_IsTrue(ro)) < 0)
        return -1;
    d->data = (void *)(uintptr_t)p;
    d->readonly = flag;
    return 0;
}

/*
 * Reads a CAI (is_cuda) or __array_interface__ dict into d.  When the data
 * came through the buffer protocol, *keep receives the object holding the
 * export; the caller owns it.  The device is left for the caller to fill.
 */
static int read_desc(cai_state *st, PyObject *obj, PyObject *iface,
                     int is_cuda, cai_desc_t *d, PyObject **keep)
{
    const char *name = is_cuda ? "__cuda_array_interface__"
                               : "__array_interface__";
    PyObject *o = NULL, *entries[F_COUNT];
    int64_t v;
    Py_ssize_t n;
    int j;

    *keep = NULL;
    if (!PyDict_Check(iface)) {
        PyErr_Format(PyExc_TypeError, "%s must be a dict, got %.100s", name,
                     Py_TYPE(iface)->tp_name);
        return -1;
    }
    if (collect_entries(st, iface, entries) < 0)
        return -1;

    if ((o = take_required(entries, F_SHAPE, name, st->name[F_SHAPE]))
        == NULL)
        goto fail;
    if ((n = read_int_tuple(o, "shape", d->shape)) < 0)
        goto fail;
    d->ndim = (int)n;
    Py_CLEAR(o);

    if ((o = take_required(entries, F_TYPESTR, name, st->name[F_TYPESTR]))
        == NULL || read_typestr(st, o, d) != 0)
        goto fail;
    Py_CLEAR(o);

    if ((o = take_required(entries, F_VERSION, name, st->name[F_VERSION]))
        == NULL)
        goto fail;
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
        if ((n = read_int_tuple(o, "strides", d->strides)) < 0)
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
    Py_CLEAR(o);

    d->has_stream = 0;
    d->stream = 0;
    if (is_cuda) {
        o = entries[F_STREAM];
        entries[F_STREAM] = NULL;
        if (o != NULL && o != Py_None) {
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

    if ((o = take_required(entries, F_DATA, name, st->name[F_DATA])) == NULL)
        goto fail;
    if (PyTuple_Check(o)) {
        if (read_pointer_pair(o, d) != 0)
            goto fail;
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

/*
 * Everything as_dlpack and to_dlpack share: reads obj's interface into d,
 * then validates it and fills its device (given, kDLCPU for host arrays, or
 * looked up from the pointer).  validate = 0 leaves the checks to the
 * conversion that follows.  *keep as in read_desc.
 */
int describe(cai_state *st, PyObject *obj, PyObject *device, int validate,
             cai_desc_t *d, PyObject **keep)
{
    PyObject *iface;
    cai_error_t err;
    int is_cuda = 1, rc;

    if (cai_lookup_attr(obj, st->name[N_CAI], &iface) < 0)
        return -1;
    if (iface == NULL) {
        is_cuda = 0;
        if (cai_lookup_attr(obj, st->name[N_AI], &iface) < 0)
            return -1;
        if (iface == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%.100s has neither __cuda_array_interface__ nor "
                         "__array_interface__", Py_TYPE(obj)->tp_name);
            return -1;
        }
    }
    rc = read_desc(st, obj, iface, is_cuda, d, keep);
    Py_DECREF(iface);
    if (rc != 0)
        return -1;

    if (device != NULL && device != Py_None) {
        if (read_device(st, device, "device", &d->device) != 0)
            goto fail;
    } else if (!is_cuda) {
        d->device.device_type = kDLCPU;
        d->device.device_id = 0;
    } else {
        validate = 1;
    }
    if (validate || *keep != NULL) {
        int64_t elem[CAI_MAX_NDIM];

        if (cai_desc_check(d, elem, &err) != 0) {
            raise_status(st, &err);
            goto fail;
        }
        if (*keep != NULL && check_buffer_bounds(d, *keep) != 0)
            goto fail;
    }
    if (is_cuda && (device == NULL || device == Py_None) &&
        cai_cuda_locate(d->data, &d->device, &err) != 0) {
        raise_status(st, &err);
        goto fail;
    }
    return 0;

fail:
    Py_CLEAR(*keep);
    return -1;
}
