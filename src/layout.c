/* Shapes and strides: byte <-> element strides, contiguity, size checks. */
#include <stdio.h>

#include "internal.h"

int cai_element_count(int ndim, const int64_t *shape, int64_t *count)
{
    int64_t n = 1;
    int i;

    for (i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            *count = 0;
            return 0;
        }
    }
    for (i = 0; i < ndim; i++) {
        if (__builtin_mul_overflow(n, shape[i], &n))
            return -1;
    }
    *count = n;
    return 0;
}

int cai_strides_bytes_to_elements(int ndim, const int64_t *shape,
                                  const int64_t *bytes, int64_t itemsize,
                                  int64_t *out, cai_error_t *err)
{
    int64_t contiguous = 1;
    int i;

    if (CAI_UNLIKELY(ndim > 0 &&
                     (shape == NULL || bytes == NULL || out == NULL)))
        return cai_null_arg(err, shape == NULL   ? "shape"
                                 : bytes == NULL ? "bytes"
                                                 : "out");
    cai_ok(err);
    if (itemsize <= 0)
        return cai_fail(err, CAI_EINVAL, "typestr",
                        "item size %lld is not positive", (long long)itemsize);
    /* Item sizes are powers of two: a mask and a shift instead of two
     * 64-bit divisions per axis, the slowest part of a strided check.  An
     * exact arithmetic shift divides negative multiples exactly too. */
    if ((itemsize & (itemsize - 1)) == 0) {
        int shift = __builtin_ctzll((unsigned long long)itemsize);

        for (i = ndim - 1; i >= 0; i--) {
            if ((bytes[i] & (itemsize - 1)) == 0)
                out[i] = bytes[i] >> shift;
            else
                break; /* the general loop below reports or fixes it */
        }
        if (i < 0)
            return 0;
    }
    /* Walk from the last axis so the C-contiguous stride is at hand. */
    for (i = ndim - 1; i >= 0; i--) {
        if (bytes[i] % itemsize == 0) {
            out[i] = bytes[i] / itemsize;
        } else if (shape[i] <= 1) {
            /* An axis of length 0 or 1 never applies its stride, so any
             * value is exact; use the contiguous one instead of truncating. */
            out[i] = contiguous;
        } else {
            char field[32];

            /* Well formed (NumPy reads it), but DLPack counts strides in
             * elements: not exportable, as NumPy's own export says. */
            snprintf(field, sizeof field, "strides[%d]", i);
            return cai_fail(err, CAI_EUNSUPPORTED, field,
                            "strides[%d] = %lld bytes is not a multiple of "
                            "the item size %lld",
                            i, (long long)bytes[i], (long long)itemsize);
        }
        if (shape[i] > 1 &&
            __builtin_mul_overflow(contiguous, shape[i], &contiguous))
            contiguous = INT64_MAX;
    }
    return 0;
}

int cai_strides_elements_to_bytes(int ndim, const int64_t *elements,
                                  int64_t itemsize, int64_t *out,
                                  cai_error_t *err)
{
    int i;

    if (CAI_UNLIKELY(ndim > 0 && (elements == NULL || out == NULL)))
        return cai_null_arg(err, elements == NULL ? "elements" : "out");
    cai_ok(err);
    for (i = 0; i < ndim; i++) {
        if (__builtin_mul_overflow(elements[i], itemsize, &out[i])) {
            char field[32];

            snprintf(field, sizeof field, "strides[%d]", i);
            return cai_fail(err, CAI_EINVAL, field,
                            "strides[%d] = %lld elements overflows 64 bits "
                            "in bytes",
                            i, (long long)elements[i]);
        }
    }
    return 0;
}

int cai_is_c_contiguous(int ndim, const int64_t *shape,
                        const int64_t *strides_bytes, int64_t itemsize)
{
    int64_t expected = itemsize;
    int i;

    if (strides_bytes == NULL)
        return 1;
    if (shape == NULL) /* nothing to judge by: not known to be contiguous */
        return ndim <= 0;
    for (i = 0; i < ndim; i++)
        if (shape[i] == 0)
            return 1; /* no element is ever addressed */
    for (i = ndim - 1; i >= 0; i--) {
        if (shape[i] == 1)
            continue;
        if (strides_bytes[i] != expected)
            return 0;
        if (__builtin_mul_overflow(expected, shape[i], &expected))
            return 0;
    }
    return 1;
}

int cai_layout_extent(int ndim, const int64_t *shape,
                      const int64_t *strides_bytes, int64_t itemsize,
                      int64_t byte_offset, int64_t *lo, int64_t *hi,
                      cai_error_t *err)
{
    int64_t count, below = 0, above;
    char field[32];
    int i;

    if (CAI_UNLIKELY(lo == NULL || hi == NULL)) {
        if (lo != NULL)
            *lo = 0;
        if (hi != NULL)
            *hi = 0;
        return cai_null_arg(err, lo == NULL ? "lo" : "hi");
    }
    *lo = *hi = 0;
    if (CAI_UNLIKELY(ndim > 0 && shape == NULL))
        return cai_null_arg(err, "shape");
    if (ndim < 0 || ndim > CAI_MAX_NDIM)
        return cai_fail(err, CAI_EINVAL, "shape",
                        "shape has %d dimensions; 0 to %d are supported", ndim,
                        CAI_MAX_NDIM);
    if (itemsize <= 0)
        return cai_fail(err, CAI_EINVAL, "typestr",
                        "item size %lld is not positive", (long long)itemsize);
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            snprintf(field, sizeof field, "shape[%d]", i);
            return cai_fail(err, CAI_EINVAL, field,
                            "shape[%d] = %lld is negative", i,
                            (long long)shape[i]);
        }
    }
    if (cai_element_count(ndim, shape, &count) != 0)
        return cai_fail(err, CAI_EINVAL, "shape",
                        "the number of elements overflows 64 bits");
    if (count == 0) {
        /* Nothing is addressed: the empty range at the offset, so that a
         * bounds check still sees an offset past the end. */
        *lo = *hi = byte_offset;
        return cai_ok(err);
    }
    if (strides_bytes == NULL) {
        if (__builtin_mul_overflow(count, itemsize, &above))
            return cai_fail(err, CAI_EINVAL, "shape",
                            "the array's size in bytes overflows 64 bits");
    } else {
        i = cai_strided_span(ndim, shape, strides_bytes, &below, &above);
        if (i >= 0) {
            snprintf(field, sizeof field, "strides[%d]", i);
            return cai_fail(err, CAI_EINVAL, field,
                            "the byte extent of the array overflows 64 bits "
                            "at strides[%d]",
                            i);
        }
        if (__builtin_add_overflow(above, itemsize, &above))
            return cai_fail(err, CAI_EINVAL, "strides",
                            "the byte extent of the array overflows 64 bits");
    }
    if (__builtin_add_overflow(byte_offset, below, &below) ||
        __builtin_add_overflow(byte_offset, above, &above))
        return cai_fail(err, CAI_EINVAL, "offset",
                        "offset = %lld puts the array's byte extent past "
                        "64 bits",
                        (long long)byte_offset);
    *lo = below;
    *hi = above;
    return cai_ok(err);
}
