/* The CAI side: the rules a descriptor must follow before it is converted. */
#include <stdio.h>

#include "internal.h"
#include "desc.h"

/* The first rule a descriptor's header breaks, as cai_desc_check reports it;
 * kept out of line so the usual path stays short. */
static int header_error(const cai_desc_t *d, cai_error_t *err)
{
    char name[32];

    if (d->version < 0 || d->version > 3)
        return cai_fail(err, CAI_EINVAL, "version",
                        "version = %d: CAI versions 0 to 3 are understood",
                        d->version);
    if (d->ndim < 0 || d->ndim > CAI_MAX_NDIM)
        return cai_fail(err, CAI_EINVAL, "shape",
                        "shape has %d dimensions; at most %d are supported",
                        d->ndim, CAI_MAX_NDIM);
    if (d->has_mask)
        return cai_fail(err, CAI_EUNSUPPORTED, "mask",
                        "mask is not None, and DLPack has no masked arrays");
    if (d->has_stream && d->stream == 0)
        return cai_fail(
            err, CAI_EINVAL, "stream",
            "stream = 0 is disallowed by CAI v3 (ambiguous between "
            "None and the legacy default stream); use 1 or 2");
    if ((uint32_t)d->dtype.bits * d->dtype.lanes == 0)
        return cai_fail(err, CAI_EUNSUPPORTED, "typestr",
                        "type %s is not a whole number of bytes",
                        cai_dtype_name(d->dtype, name));
    return cai_fail(err, CAI_EUNSUPPORTED, "strides",
                    "type %s packs elements smaller than a byte, which have "
                    "no byte strides: only a C-contiguous layout (no "
                    "strides) can hold them",
                    cai_dtype_name(d->dtype, name));
}

static int wrap_error(const void *data, int64_t lo, int64_t hi,
                      cai_error_t *err)
{
    return cai_fail(err, CAI_EINVAL, "data",
                    "data = %p with the byte extent [%lld, %lld) of the "
                    "array runs outside the address space",
                    data, (long long)lo, (long long)hi);
}

int cai_desc_check(const cai_desc_t *d, int64_t *elem_strides,
                   cai_error_t *err)
{
    int64_t itemsize, count = 1, lo = 0, hi = 0, span;
    uint32_t bits = (uint32_t)d->dtype.bits * d->dtype.lanes;
    char name[32];
    int i, zero = 0, overflow = 0;

    if (!d->has_strides && cai_contiguous_ok(d, elem_strides))
        return 0;
    /* One test for the whole header; header_error says which rule broke. */
    if (CAI_UNLIKELY((unsigned)d->version > 3 ||
                     (unsigned)d->ndim > CAI_MAX_NDIM || d->has_mask ||
                     (d->has_stream && d->stream == 0) || bits == 0 ||
                     (bits % 8 != 0 && d->has_strides)))
        return header_error(d, err);
    /* Packed sub-byte elements (DLPack's float4, bits not a multiple of 8)
     * only come C-contiguous: their size is counted in bits. */
    itemsize = (int64_t)(bits / 8);
    /* One pass: the first negative extent, and the element count (0 when
     * any extent is 0, whatever the others multiply to). */
    for (i = 0; i < d->ndim; i++) {
        if (CAI_UNLIKELY(d->shape[i] < 0)) {
            snprintf(name, sizeof name, "shape[%d]", i);
            return cai_fail(err, CAI_EINVAL, name,
                            "shape[%d] = %lld is negative", i,
                            (long long)d->shape[i]);
        }
        zero |= d->shape[i] == 0;
        overflow |= __builtin_mul_overflow(count, d->shape[i], &count);
    }
    if (zero)
        count = 0;
    else if (CAI_UNLIKELY(overflow))
        return cai_fail(err, CAI_EINVAL, "shape",
                        "the number of elements overflows 64 bits");
    if (CAI_UNLIKELY(count > 0 && d->data == NULL))
        return cai_fail(err, CAI_EINVAL, "data",
                        "data pointer is 0 but the array has %lld elements",
                        (long long)count);

    /* A zero-size array addresses nothing: its strides are moot, as NumPy
     * takes them (contiguous ones are handed on). */
    if (!d->has_strides || count == 0) {
        int64_t step = 1;

        if (CAI_UNLIKELY(cai_packed_nbytes(count, bits, &hi) != 0))
            return cai_fail(err, CAI_EINVAL, "shape",
                            "the array's size in bytes overflows 64 bits");
        for (i = d->ndim - 1; i >= 0; i--) {
            elem_strides[i] = step;
            /* Saturates only for zero-size arrays, whose strides are moot. */
            if (d->shape[i] > 1 &&
                __builtin_mul_overflow(step, d->shape[i], &step))
                step = INT64_MAX;
        }
        if (CAI_UNLIKELY(count > 0 && cai_wraps(d->data, 0, hi)))
            return wrap_error(d->data, 0, hi, err);
        return 0;
    }

    {
        int rc = cai_strides_bytes_to_elements(d->ndim, d->shape, d->strides,
                                               itemsize, elem_strides, err);
        if (rc != 0)
            return rc;
    }
    if (count == 0)
        return 0;
    /* The lowest and highest byte offsets reached must fit in 64 bits, and
     * so must the distance between them. */
    i = cai_strided_span(d->ndim, d->shape, d->strides, &lo, &hi);
    if (CAI_UNLIKELY(i >= 0)) {
        snprintf(name, sizeof name, "strides[%d]", i);
        return cai_fail(err, CAI_EINVAL, name,
                        "the byte extent of the array overflows 64 bits "
                        "at strides[%d]",
                        i);
    }
    if (CAI_UNLIKELY(__builtin_add_overflow(hi, itemsize, &hi) ||
                     __builtin_sub_overflow(hi, lo, &span)))
        return cai_fail(err, CAI_EINVAL, "strides",
                        "the byte extent of the array overflows 64 bits");
    if (CAI_UNLIKELY(cai_wraps(d->data, lo, hi)))
        return wrap_error(d->data, lo, hi, err);
    return 0;
}

int cai_desc_carried_error(const cai_desc_t *d, cai_error_t *err)
{
    int32_t type = (int32_t)d->device.device_type;
    char name[32];

    if (type == 0)
        return cai_fail(err, CAI_EINVAL, "device",
                        "the descriptor's device is not known; locate it "
                        "(cai_cuda_locate) or give it explicitly");
    if (type < kDLCPU || type > kDLTrn || type == 5 || type == 6)
        return cai_fail(err, type < 0 ? CAI_EINVAL : CAI_EUNSUPPORTED,
                        "device",
                        "device_type = %d is not a DLPack device type "
                        "this library knows",
                        (int)type);
    if (d->device.device_id < 0)
        return cai_fail(err, CAI_EINVAL, "device",
                        "device_id = %d is out of range: device ids are 0 "
                        "or more",
                        (int)d->device.device_id);
    return cai_fail(err, CAI_EUNSUPPORTED, "dtype",
                    "DLPack type %s has a code this library does not know",
                    cai_dtype_name(d->dtype, name));
}

int cai_desc_validate(const cai_desc_t *desc, cai_error_t *err)
{
    int64_t scratch[CAI_MAX_NDIM];
    int rc;

    if (CAI_UNLIKELY(desc == NULL))
        return cai_null_arg(err, "desc");
    /* The conversions' rules, in their order. */
    if (CAI_UNLIKELY((unsigned)desc->ndim > CAI_MAX_NDIM))
        return cai_desc_check(desc, scratch, err);
    if (CAI_UNLIKELY(!cai_desc_carried_ok(desc)))
        return cai_desc_carried_error(desc, err);
    rc = cai_desc_check(desc, scratch, err);

    if (rc == 0)
        cai_ok(err);
    return rc;
}
