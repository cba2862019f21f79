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

/* Chooses key_mult so that no two interface keys (interned, by address)
 * share a key_slot; any other key takes the compare path.  A plain shift
 * of the addresses found none in some processes (every key then paid a
 * hash and a compare, 300 instructions a read); a multiplier from this
 * odd sequence separates eight keys with 64 slots nearly always at the
 * first or second try. */
void index_entry_keys(cai_state *st)
{
    uint64_t mult = 0x9E3779B97F4A7C15u; /* 2**64 / golden ratio, odd */
    int tries, j;

    for (tries = 0; tries < 64; tries++, mult += 0x632BE59BD9B4E01Au) {
        memset(st->key_slot, F_COUNT, sizeof st->key_slot);
        for (j = 0; j < F_COUNT; j++) {
            unsigned char *slot = &st->key_slot[KEY_SLOT(st->name[j], mult)];

            if (*slot != F_COUNT)
                break;
            *slot = (unsigned char)j;
        }
        if (j == F_COUNT) {
            st->key_mult = mult;
            return;
        }
    }
    /* None separates them: every key takes the compare path. */
    memset(st->key_slot, F_COUNT, sizeof st->key_slot);
    st->key_mult = 0;
}

/*
 * Takes a strong reference to each entry caibridge reads (NULL when absent)
 * in one walk over the dict, which runs no Python code: reading an entry
 * later may run __index__ that mutates the dict, so every entry is held
 * first.  A walk also beats one hash probe per key, absent keys included.
 * Where there is no GIL the walk holds the dict's critical section, so
 * another thread cannot change it (and free what it lends) meanwhile.
 * Returns 0, or 1 when a key that is not an exact str made it fall back to
 * look-ups (whose equality tests may run Python code), or -1 on error.
 */
static int collect_entries(cai_state *st, PyObject *iface,
                           PyObject *entries[F_COUNT])
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    Py_ssize_t left;
    int j, slow = 0;

    for (j = 0; j < F_COUNT; j++)
        entries[j] = NULL;
    Py_BEGIN_CRITICAL_SECTION(iface);
    /* Stops at the last entry rather than at a call that finds none. */
    left = PyDict_GET_SIZE(iface);
    while (left-- > 0 && PyDict_Next(iface, &pos, &key, &value)) {
        Py_hash_t hash;

        /* Keys written as literals are our interned strings themselves. */
        j = st->key_slot[KEY_SLOT(key, st->key_mult)];
        if (j < F_COUNT && key == st->name[j])
            goto found;
        if (!PyUnicode_CheckExact(key)) {
            slow = 1; /* a key type whose equality may run Python code */
            break;
        }
        hash = PyObject_Hash(key); /* cached in the str */
        for (j = 0; j < F_COUNT; j++) {
            if (hash == st->entry_hash[j] &&
                PyUnicode_Compare(key, st->name[j]) == 0)
                goto found;
        }
        continue;
    found:
        /* Keys are unique by equality, so no entry is found twice. */
        entries[j] = Py_NewRef(value);
    }
    Py_END_CRITICAL_SECTION();
    if (!slow)
        return 0;

    /* Dict look-ups give the same answers as Python's own d[key]. */
    for (j = 0; j < F_COUNT; j++) {
        Py_CLEAR(entries[j]);
        if (cai_dict_get_ref(iface, st->name[j], &entries[j]) < 0)
            goto fail;
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

static const char BUFFER_CAPSULE[] = "caibridge.buffer";

/* Releases the buffer export a capsule holds (it dies on an attached
 * thread). */
static void buffer_capsule_destructor(PyObject *capsule)
{
    Py_buffer *view = PyCapsule_GetPointer(capsule, BUFFER_CAPSULE);

    if (view != NULL) {
        PyBuffer_Release(view);
        PyMem_Free(view);
    }
}

/*
 * The data entry of __array_interface__ given as a buffer object (or None
 * or absent: obj's own buffer), read as NumPy reads it: a simple buffer,
 * which the exporter gives only when it is C-contiguous (not a memoryview
 * with a step, nor a transposed array), read-only when it says so.  *keep
 * receives a capsule holding the export until it dies.
 */
static int read_buffer_data(PyObject *obj, PyObject *source, cai_desc_t *d,
                            PyObject **keep)
{
    PyObject *exporter = source == NULL || source == Py_None ? obj : source;
    Py_buffer *view = PyMem_Malloc(sizeof *view);

    if (view == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyObject_GetBuffer(exporter, view, PyBUF_SIMPLE) != 0) {
        PyMem_Free(view);
        if (PyErr_ExceptionMatches(PyExc_TypeError) &&
            !PyObject_CheckBuffer(exporter)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "data must be a (pointer, readonly) tuple, a buffer "
                         "object or None (the object's own buffer); "
                         "%.100s supports none of them",
                         Py_TYPE(exporter)->tp_name);
        } else if (!PyErr_ExceptionMatches(PyExc_MemoryError)) {
            PyObject *type, *value, *tb;

            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            PyErr_Format(PyExc_BufferError,
                         "data: %.100s gives no simple (C-contiguous) buffer: "
                         "%S",
                         Py_TYPE(exporter)->tp_name, value);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        }
        return -1;
    }
    *keep = PyCapsule_New(view, BUFFER_CAPSULE, buffer_capsule_destructor);
    if (*keep == NULL) {
        PyBuffer_Release(view);
        PyMem_Free(view);
        return -1;
    }
    d->data = view->buf;
    d->readonly = view->readonly != 0;
    return 0;
}

/*
 * The typestr entry (a str) into d->dtype.  A type NumPy reads but DLPack
 * cannot hold is not raised here: it goes to *later (status non-zero), so
 * that a malformed entry read after it is reported first.
 */
static int read_typestr(cai_state *st, PyObject *o, cai_desc_t *d,
                        cai_error_t *later)
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
    if (!PyUnicode_IS_ASCII(o)) {
        PyErr_Format(PyExc_ValueError,
                     "typestr = %.80R is not a NumPy type string (ASCII, "
                     "like '<f4')",
                     o);
        return -1;
    }
    if ((text = PyUnicode_AsUTF8AndSize(o, &len)) == NULL)
        return -1;
    if (cai_typestr_parse(text, (size_t)len, &d->dtype, &err) != 0) {
        if (err.status != CAI_EUNSUPPORTED) {
            raise_status(st, &err);
            return -1;
        }
        *later = err;
        return 0;
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
                     "tuple of %zd entries",
                     PyTuple_GET_SIZE(o));
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
 * Reads a CAI (is_cuda) or __array_interface__ dict into d, as NumPy reads
 * it.  When the data came through the buffer protocol, *keep receives the
 * object holding the export (the caller owns it) and *offset the offset,
 * not yet applied to d->data: describe() applies it once the array is
 * known to lie inside the buffer.  The device is left for the caller.
 */
static int read_desc(cai_state *st, PyObject *obj, PyObject *iface,
                     int is_cuda, cai_desc_t *d, PyObject **keep,
                     int64_t *offset)
{
    const char *name = is_cuda ? "__cuda_array_interface__"
                               : "__array_interface__";
    PyObject *o = NULL, *entries[F_COUNT];
    cai_error_t later;
    int64_t v;
    Py_ssize_t n;
    int j;

    *keep = NULL;
    *offset = 0;
    later.status = 0;
    if (!PyDict_Check(iface)) {
        PyErr_Format(PyExc_TypeError, "%s must be a dict, got %.100s", name,
                     Py_TYPE(iface)->tp_name);
        return -1;
    }
    if (collect_entries(st, iface, entries) < 0)
        return -1;

    if ((o = take_required(entries, F_SHAPE, name, st->name[F_SHAPE])) == NULL)
        goto fail;
    if (PyTuple_CheckExact(o) && (n = PyTuple_GET_SIZE(o)) <= CAI_MAX_NDIM) {
        /* The usual shape, read here; anything else by read_int_tuple. */
        for (j = 0; j < n; j++)
            if (!small_int(PyTuple_GET_ITEM(o, j), &d->shape[j]))
                break;
        if (j < n && read_int_tuple(o, "shape", d->shape) < 0)
            goto fail;
    } else if ((n = read_int_tuple(o, "shape", d->shape)) < 0) {
        goto fail;
    }
    d->ndim = (int)n;
    Py_CLEAR(o);

    if ((o = take_required(entries, F_TYPESTR, name, st->name[F_TYPESTR])) ==
            NULL ||
        read_typestr(st, o, d, &later) != 0)
        goto fail;
    Py_CLEAR(o);

    if ((o = take_required(entries, F_VERSION, name, st->name[F_VERSION])) ==
        NULL)
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
                             "or a cudaStream_t handle",
                             (long long)v);
                goto fail;
            }
            d->has_stream = 1;
            d->stream = (intptr_t)v;
        }
        Py_CLEAR(o);
    }

    /* data: a (pointer, read-only) pair, whose offset NumPy ignores; for
     * __array_interface__ also a buffer, or None or absent for obj's own
     * buffer, to which offset applies. */
    o = entries[F_DATA];
    entries[F_DATA] = NULL;
    if (o != NULL && PyTuple_Check(o)) {
        if (read_pointer_pair(o, d) != 0)
            goto fail;
    } else if (is_cuda) {
        if (o == NULL)
            missing(name, st->name[F_DATA]);
        else
            PyErr_Format(PyExc_TypeError,
                         "data must be a (pointer, readonly) tuple, got "
                         "%.100s",
                         Py_TYPE(o)->tp_name);
        goto fail;
    } else {
        if (read_buffer_data(obj, o, d, keep) != 0)
            goto fail;
        Py_CLEAR(o);
        o = entries[F_OFFSET];
        entries[F_OFFSET] = NULL;
        if (o != NULL && o != Py_None &&
            read_int64(o, "offset", -1, offset) != 0)
            goto fail;
    }
    Py_CLEAR(o);
    /* Every entry read was taken above; left are only those this kind of
     * interface does not read. */
    Py_XDECREF(entries[F_STREAM]);
    Py_XDECREF(entries[F_OFFSET]);
    /* Well formed throughout: now a type DLPack cannot hold is the error. */
    if (later.status != 0) {
        raise_status(st, &later);
        Py_CLEAR(*keep);
        return -1;
    }
    return 0;

fail:
    Py_XDECREF(o);
    for (j = 0; j < F_COUNT; j++)
        Py_XDECREF(entries[j]);
    Py_CLEAR(*keep);
    return -1;
}

/*
 * A buffer-protocol export must hold every byte the layout reaches from
 * offset, computed with overflow-checked arithmetic (a zero-size array
 * still needs 0 <= offset <= len); only then is the offset added to the
 * pointer, which so never leaves the buffer.
 */
static int apply_buffer_offset(cai_state *st, cai_desc_t *d, PyObject *keep,
                               int64_t offset)
{
    Py_buffer *buf = PyCapsule_GetPointer(keep, BUFFER_CAPSULE);
    int64_t lo, hi;
    cai_error_t err;

    if (offset < 0) {
        PyErr_Format(PyExc_ValueError,
                     "offset = %lld is negative: the array would start "
                     "before its buffer",
                     (long long)offset);
        return -1;
    }
    if (cai_layout_extent(
            d->ndim, d->shape, d->has_strides ? d->strides : NULL,
            cai_dtype_itemsize(d->dtype), offset, &lo, &hi, &err) != 0) {
        raise_status(st, &err);
        return -1;
    }
    if (lo < 0 || hi > (int64_t)buf->len) {
        PyErr_Format(PyExc_ValueError,
                     "data: with offset = %lld the array reaches bytes %lld "
                     "to %lld of a buffer of %zd bytes",
                     (long long)offset, (long long)lo, (long long)hi,
                     buf->len);
        return -1;
    }
    if (offset != 0)
        d->data = (char *)buf->buf + offset;
    return 0;
}

/* Device types whose memory the host addresses: what else may stand for
 * the kDLCPU of an __array_interface__. */
static int is_host_device(int32_t type)
{
    return type == kDLCPU || type == kDLCUDAHost || type == kDLCUDAManaged;
}

/* An object with neither interface: one that exports only the buffer
 * protocol is a host array (buffer.c); anything else is refused. */
static int describe_other(cai_state *st, PyObject *obj, PyObject *device,
                          cai_desc_t *d, PyObject **keep)
{
    *keep = NULL;
    if (!PyObject_CheckBuffer(obj)) {
        if (hidden_attribute_error(st, obj) != 0)
            return -1;
        PyErr_Format(PyExc_TypeError,
                     "%.100s has neither __cuda_array_interface__ nor "
                     "__array_interface__ nor the buffer protocol",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (describe_buffer(obj, d, keep) != 0)
        return -1;
    if (device == NULL || device == Py_None)
        return 0;
    if (read_device(st, device, "device", &d->device) != 0)
        goto fail;
    if (!is_host_device(d->device.device_type)) {
        PyErr_Format(PyExc_ValueError,
                     "device = (%d, %d) contradicts the buffer protocol, "
                     "which gives host memory; use None, (1, 0) (kDLCPU), "
                     "(3, 0) or (13, 0)",
                     (int)d->device.device_type, (int)d->device.device_id);
        goto fail;
    }
    return 0;

fail:
    Py_CLEAR(*keep);
    return -1;
}

/*
 * Everything as_dlpack and to_dlpack share: reads obj's interface into d,
 * then validates it and fills its device (given, kDLCPU for host arrays, or
 * looked up from the pointer, unless the caller preset d's device type to
 * DEVICE_LOCATED_LATER; it presets 0 otherwise).  The validation writes
 * the element strides to elem (ndim entries); elem NULL leaves the checks
 * to the conversion that follows where it can.  *keep as in read_desc.
 */
int describe(cai_state *st, PyObject *obj, PyObject *device, int64_t *elem,
             cai_desc_t *d, PyObject **keep)
{
    PyObject *iface;
    cai_error_t err;
    int64_t offset;
    int is_cuda = 1, rc, validate = elem != NULL;

    if (cai_lookup_attr(obj, st->name[N_CAI], &iface) < 0)
        return -1;
    if (iface == NULL) {
        is_cuda = 0;
        if (cai_lookup_attr(obj, st->name[N_AI], &iface) < 0)
            return -1;
        if (iface == NULL) {
            /* Checked as any layout, for a caller that wants elem. */
            if (describe_other(st, obj, device, d, keep) != 0)
                return -1;
            if (elem != NULL && cai_desc_check(d, elem, &err) != 0) {
                raise_status(st, &err);
                goto fail;
            }
            return 0;
        }
    }
    rc = read_desc(st, obj, iface, is_cuda, d, keep, &offset);
    Py_DECREF(iface);
    if (rc != 0)
        return -1;

    if (device != NULL && device != Py_None) {
        if (read_device(st, device, "device", &d->device) != 0)
            goto fail;
        if (!is_cuda && !is_host_device(d->device.device_type)) {
            PyErr_Format(PyExc_ValueError,
                         "device = (%d, %d) contradicts __array_interface__, "
                         "which describes host memory; use None, (1, 0) "
                         "(kDLCPU), (3, 0) or (13, 0)",
                         (int)d->device.device_type, (int)d->device.device_id);
            goto fail;
        }
    } else if (!is_cuda) {
        d->device.device_type = kDLCPU;
        d->device.device_id = 0;
    } else {
        validate = 1;
    }
    if (*keep != NULL && apply_buffer_offset(st, d, *keep, offset) != 0)
        goto fail;
    if (validate || *keep != NULL) {
        int64_t scratch[CAI_MAX_NDIM];
        int64_t *into = elem != NULL ? elem : scratch;

        if (!(!d->has_strides && cai_contiguous_ok(d, into)) &&
            cai_desc_check(d, into, &err) != 0) {
            raise_status(st, &err);
            goto fail;
        }
    }
    if (is_cuda && (device == NULL || device == Py_None) &&
        d->device.device_type != DEVICE_LOCATED_LATER &&
        cai_cuda_locate(d->data, &d->device, &err) != 0) {
        raise_status(st, &err);
        goto fail;
    }
    return 0;

fail:
    Py_CLEAR(*keep);
    return -1;
}
