/*
 * Objects that export only the buffer protocol (PEP 3118): bytes,
 * bytearray, memoryview, array.array, mmap, ctypes arrays.  Their format
 * says what they hold, so as_dlpack and to_dlpack describe them as host
 * arrays: a native-order numeric format of one item, C-contiguous memory,
 * read-only when the buffer is.  The memoryview holding the export is kept
 * by the view or tensor, so the exporter cannot move or free its memory
 * (a bytearray cannot be resized) while a consumer holds it.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <string.h>

/* The DLPack type of one struct-module item code at the given size. */
static int code_dtype(char code, int64_t size, DLDataType *out)
{
    switch (code) {
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
    case 'n':
        out->code = kDLInt;
        break;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
        out->code = kDLUInt;
        break;
    case 'e':
    case 'f':
    case 'd':
        out->code = kDLFloat;
        break;
    case '?':
        out->code = kDLBool;
        break;
    default:
        return -1;
    }
    out->bits = (uint8_t)(size * 8);
    out->lanes = 1;
    return 0;
}

/* Item sizes in the struct module's standard mode ('=', '<', '>', '!'). */
static int64_t standard_size(char code)
{
    switch (code) {
    case 'b':
    case 'B':
    case '?':
        return 1;
    case 'h':
    case 'H':
    case 'e':
        return 2;
    case 'i':
    case 'I':
    case 'l':
    case 'L':
    case 'f':
        return 4;
    case 'q':
    case 'Q':
    case 'd':
        return 8;
    default:
        return 0; /* 'n', 'N' exist only in native mode */
    }
}

/*
 * Reads a PEP 3118 format of one numeric item ("d", "@i", "<f", "=q",
 * "Zd" for complex) into *out.  itemsize is the buffer's own, which must
 * agree with the format.  Raises BufferError for anything else: several
 * items or fields, characters, pointers, padding, the other byte order.
 */
static int read_format(const char *format, Py_ssize_t itemsize,
                       DLDataType *out)
{
    const char *f = format == NULL ? "B" : format;
    int native_sizes = 1, complex_ = 0;
    int64_t size;
#if PY_LITTLE_ENDIAN
    const char other_order[] = "!>";
#else
    const char other_order[] = "<";
#endif

    if (*f == '@') {
        f++;
    } else if (*f != '\0' && strchr(other_order, *f) != NULL) {
        PyErr_Format(PyExc_BufferError,
                     "format '%.20s': the buffer's byte order is not the "
                     "host's, and DLPack has only native byte order",
                     format);
        return -1;
    } else if (*f != '\0' && strchr("=<>!", *f) != NULL) {
        native_sizes = 0;
        f++;
    }
    if (*f == 'Z') {
        complex_ = 1;
        f++;
    }
    if (f[0] == '\0' || f[1] != '\0' ||
        (complex_ && f[0] != 'f' && f[0] != 'd'))
        goto unsupported;
    if (native_sizes) {
        switch (f[0]) {
        case 'b':
        case 'B':
        case '?':
            size = 1;
            break;
        case 'h':
        case 'H':
            size = sizeof(short);
            break;
        case 'i':
        case 'I':
            size = sizeof(int);
            break;
        case 'l':
        case 'L':
            size = sizeof(long);
            break;
        case 'q':
        case 'Q':
            size = sizeof(long long);
            break;
        case 'n':
        case 'N':
            size = sizeof(Py_ssize_t);
            break;
        case 'e':
            size = 2;
            break;
        case 'f':
            size = sizeof(float);
            break;
        case 'd':
            size = sizeof(double);
            break;
        default:
            goto unsupported;
        }
    } else if ((size = standard_size(f[0])) == 0) {
        goto unsupported;
    }
    if (complex_)
        size *= 2;
    if (code_dtype(f[0], complex_ ? size / 2 : size, out) != 0)
        goto unsupported;
    if (complex_) {
        out->code = kDLComplex;
        out->bits = (uint8_t)(size * 8);
    }
    if (size != itemsize) {
        PyErr_Format(PyExc_BufferError,
                     "format '%.20s' has items of %lld bytes but the buffer "
                     "says %zd",
                     format, (long long)size, itemsize);
        return -1;
    }
    return 0;

unsupported:
    PyErr_Format(PyExc_BufferError,
                 "format '%.20s': a buffer is exported when its format is "
                 "one native numeric item (struct codes b B h H i I l L q Q "
                 "n N e f d ?, or Zf Zd for complex)",
                 format);
    return -1;
}

int describe_buffer(PyObject *obj, cai_desc_t *d, PyObject **keep)
{
    static const DLDevice host = {kDLCPU, 0};
    PyObject *view;
    Py_buffer *b;
    int i;

    *keep = NULL;
    /* memoryview asks for the fullest export (shape, strides, format). */
    if ((view = PyMemoryView_FromObject(obj)) == NULL)
        return -1;
    b = PyMemoryView_GET_BUFFER(view);
    if (read_format(b->format, b->itemsize, &d->dtype) != 0)
        goto fail;
    if (b->ndim > CAI_MAX_NDIM) {
        PyErr_Format(PyExc_BufferError,
                     "shape: the buffer has %d dimensions; at most %d are "
                     "supported",
                     b->ndim, CAI_MAX_NDIM);
        goto fail;
    }
    if (b->suboffsets != NULL || !PyBuffer_IsContiguous(b, 'C')) {
        PyErr_SetString(PyExc_BufferError,
                        "strides: the buffer is not C-contiguous; only "
                        "contiguous buffers are exported (copy it first, "
                        "e.g. with bytes() or memoryview.tobytes())");
        goto fail;
    }
    cai_desc_init(d, b->buf, b->ndim, d->dtype, host);
    d->readonly = b->readonly != 0;
    if (b->ndim == 1 && b->shape == NULL)
        d->shape[0] = b->len / b->itemsize;
    else
        for (i = 0; i < b->ndim; i++)
            d->shape[i] = b->shape[i];
    *keep = view;
    return 0;

fail:
    Py_DECREF(view);
    return -1;
}
