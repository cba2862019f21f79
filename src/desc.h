/* Private: descriptor checks shared by the conversions. */
#ifndef CAIBRIDGE_DESC_H
#define CAIBRIDGE_DESC_H

#include "caibridge.h"

/* The header of a writable, C-contiguous CAI v3 descriptor with no mask
 * and no stream; the caller fills shape. */
static inline void cai_desc_init(cai_desc_t *d, void *data, int ndim,
                                 DLDataType dtype, DLDevice device)
{
    d->data = data;
    d->readonly = 0;
    d->ndim = ndim;
    d->version = 3;
    d->has_strides = 0;
    d->has_mask = 0;
    d->has_stream = 0;
    d->stream = 0;
    d->dtype = dtype;
    d->device = device;
}

/* Memory CUDA knows: device, pinned host or managed; a producer's stream
 * orders work on it. */
static inline int cai_is_cuda_device(int32_t type)
{
    return type == kDLCUDA || type == kDLCUDAHost || type == kDLCUDAManaged;
}

/* 1 when the bytes [data + lo, data + hi) do not all have addresses: the
 * array would run below address 0 or past the top of the address space. */
static inline int cai_wraps(const void *data, int64_t lo, int64_t hi)
{
    uintptr_t p = (uintptr_t)data;
    uint64_t below = lo < 0 ? (uint64_t)0 - (uint64_t)lo : 0;

    return below > p || (uint64_t)hi > (uint64_t)(UINTPTR_MAX - p);
}

/* The bytes count elements of bits bits each take, C-contiguous (sub-byte
 * elements packed, the last byte rounded up); -1 when that overflows.
 * Eight elements fill a whole number of bytes, so no product is formed
 * that is larger than the result. */
static inline int cai_packed_nbytes(int64_t count, uint32_t bits,
                                    int64_t *nbytes)
{
    int64_t rest = (int64_t)(((uint64_t)(count % 8) * bits + 7) / 8);

    if (__builtin_mul_overflow(count / 8, (int64_t)bits, nbytes) ||
        __builtin_add_overflow(*nbytes, rest, nbytes))
        return -1;
    return 0;
}

/* The bytes a C-contiguous block of ndim extents of dtype takes (sub-byte
 * elements packed); -1 for a negative extent, or a size that overflows or
 * size_t cannot hold.  A zero extent makes it 0 whatever the others are. */
static inline int cai_contiguous_nbytes(int ndim, const int64_t *shape,
                                        DLDataType dtype, int64_t *nbytes)
{
    int64_t count = 1;
    int i, zero = 0;

    for (i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        zero |= shape[i] == 0;
    }
    for (i = 0; !zero && i < ndim; i++)
        if (__builtin_mul_overflow(count, shape[i], &count))
            return -1;
    if (cai_packed_nbytes(zero ? 0 : count, (uint32_t)dtype.bits * dtype.lanes,
                          nbytes) != 0 ||
        (uint64_t)*nbytes > SIZE_MAX)
        return -1;
    return 0;
}

/*
 * The usual descriptor, one with no strides, checked in one pass from the
 * last axis, writing its element strides: 1 when it follows every rule of
 * cai_desc_check, 0 when cai_desc_check must run to name the one broken.
 */
static inline int cai_contiguous_ok(const cai_desc_t *d, int64_t *elem)
{
    uint32_t bits = (uint32_t)d->dtype.bits * d->dtype.lanes;
    int64_t step = 1, bytes;
    int i, zero = 0, overflow = 0;

    if ((unsigned)d->version > 3 || (unsigned)d->ndim > CAI_MAX_NDIM ||
        d->has_mask || (d->has_stream && d->stream == 0) || bits == 0 ||
        bits % 8 != 0)
        return 0;
    /* With no zero extent the last stride times the first extent is the
     * element count, so one product serves both. */
    for (i = d->ndim - 1; i >= 0; i--) {
        int64_t n = d->shape[i];

        if (n < 0)
            return 0;
        elem[i] = step;
        if (n == 0) {
            zero = 1;
        } else if (n > 1 && __builtin_mul_overflow(step, n, &step)) {
            /* Saturates: only a zero-size array gets past it, and its
             * strides are moot. */
            overflow = 1;
            step = INT64_MAX;
        }
    }
    if (zero) /* addresses nothing */
        return 1;
    return !overflow && d->data != NULL &&
           !__builtin_mul_overflow(step, (int64_t)(bits / 8), &bytes) &&
           !cai_wraps(d->data, 0, bytes);
}

/*
 * The rules on what a conversion carries without reading it, the same for
 * cai_desc_validate, the conversions and the from_* functions: a device
 * type DLPack defines (not 0, "not known yet"), a device id >= 0, and a
 * dtype code DLPack defines.  1 when they hold; cai_desc_carried_error
 * names the one broken.
 */
static inline int cai_desc_carried_ok(const cai_desc_t *d)
{
    int32_t type = (int32_t)d->device.device_type;

    return type >= kDLCPU && type <= kDLTrn && type != 5 && type != 6 &&
           d->device.device_id >= 0 && d->dtype.code <= kDLFloat4_e2m1fn;
}
int cai_desc_carried_error(const cai_desc_t *d, cai_error_t *err);

/* Checks desc and writes its strides in elements to elem_strides (ndim
 * entries; C-contiguous ones when desc has none). */
int cai_desc_check(const cai_desc_t *desc, int64_t *elem_strides,
                   cai_error_t *err);

/*
 * Builds a tensor (DLManagedTensorVersioned when versioned, else legacy)
 * around t's data, device, dtype, ndim (0..CAI_MAX_NDIM), shape and element
 * strides, which are copied, without checking them again: for callers that
 * checked the descriptor with cai_desc_check, which gave those strides.
 * readonly and options as in the public conversions, which own the owner
 * the same way; err is only written on failure.
 */
int cai_tensor_new(const DLTensor *t, int readonly, int versioned,
                   unsigned options, void *owner, cai_release_fn release,
                   void **out, cai_error_t *err);

/*
 * cai_desc_check and cai_tensor_new in one: checks d and builds the tensor
 * around its data, its element strides written straight into the tensor.
 * Ownership and errors as cai_tensor_new's (d's rules are checked first).
 */
int cai_desc_tensor(const cai_desc_t *d, int versioned, unsigned options,
                    void *owner, cai_release_fn release, void **out,
                    cai_error_t *err);

/*
 * For a capsule's owner that holds the GIL: frees the block of a tensor made
 * by this library without calling its release, which is written to
 * *release (may be NULL) with the owner to *owner, so the caller can drop
 * the owner in place.  Returns -1, touching nothing, when the tensor's
 * deleter is not ours (call its deleter instead).
 */
int cai_tensor_detach(void *tensor, int versioned, cai_release_fn *release,
                      void **owner);

/*
 * Reads, without changing anything, the release and owner of a tensor made
 * by this library (for a garbage collector that visits what a tensor
 * holds).  Returns -1, writing nothing, when the tensor's deleter is not
 * ours.
 */
int cai_tensor_owner(const void *tensor, int versioned,
                     cai_release_fn *release, void **owner);

/* The DLPack name of a type ("bfloat16", "float8_e4m3fn"), into buf; the
 * module's messages and repr use it too (declared in internal.h also). */
const char *cai_dtype_name(DLDataType dtype, char buf[32]);

#endif
