/* The DLPack side: descriptors to managed tensors and back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "desc.h"

/* One allocation: the tensor, the release callback, then shape and strides. */
typedef struct {
    DLManagedTensorVersioned tensor;
    cai_release_fn release;
    int64_t dims[];
} versioned_block;

typedef struct {
    DLManagedTensor tensor;
    cai_release_fn release;
    int64_t dims[];
} legacy_block;

/* Frees a tensor's block, then releases its owner, which may be what
 * frees the data. */
static void free_block(void *block, cai_release_fn release, void *owner)
{
    free(block);
    if (release != NULL)
        release(owner);
}

static void versioned_deleter(DLManagedTensorVersioned *self)
{
    free_block(self, ((versioned_block *)self)->release, self->manager_ctx);
}

static void legacy_deleter(DLManagedTensor *self)
{
    free_block(self, ((legacy_block *)self)->release, self->manager_ctx);
}

static int ndim_error(int ndim, cai_error_t *err)
{
    return cai_fail(err, CAI_EINVAL, "shape",
                    "shape has %d dimensions; at most %d are supported", ndim,
                    CAI_MAX_NDIM);
}

/* The public conversions: check desc once, then build the tensor around
 * the strides the check gave. */
static int desc_to_tensor(const cai_desc_t *desc, int versioned,
                          unsigned options, void *owner,
                          cai_release_fn release, void **out, cai_error_t *err)
{
    int rc;

    if (CAI_UNLIKELY(out == NULL || desc == NULL)) {
        rc = cai_null_arg(err, out == NULL ? "out" : "desc");
        goto fail;
    }
    *out = NULL;
    if (CAI_UNLIKELY(options & ~(unsigned)CAI_OPTIONS_KNOWN)) {
        rc = cai_unknown_bits(err, "options",
                              options & ~(unsigned)CAI_OPTIONS_KNOWN);
        goto fail;
    }
    if (CAI_UNLIKELY(desc->ndim < 0 || desc->ndim > CAI_MAX_NDIM)) {
        rc = ndim_error(desc->ndim, err);
        goto fail;
    }
    if (CAI_UNLIKELY(!cai_desc_carried_ok(desc))) {
        rc = cai_desc_carried_error(desc, err);
        goto fail;
    }
    rc = cai_desc_tensor(desc, versioned, options, owner, release, out, err);
    if (rc == 0)
        cai_ok(err);
    return rc;

fail:
    if (release != NULL)
        release(owner);
    return rc;
}

int cai_desc_to_dlpack_versioned(const cai_desc_t *desc, unsigned options,
                                 void *owner, cai_release_fn release,
                                 DLManagedTensorVersioned **out,
                                 cai_error_t *err)
{
    return desc_to_tensor(desc, 1, options, owner, release, (void **)out, err);
}

int cai_desc_to_dlpack(const cai_desc_t *desc, unsigned options, void *owner,
                       cai_release_fn release, DLManagedTensor **out,
                       cai_error_t *err)
{
    return desc_to_tensor(desc, 0, options, owner, release, (void **)out, err);
}

/* The block of a tensor of ndim (0..CAI_MAX_NDIM) dimensions with its
 * header filled (all but data, device, dtype, shape and strides), or NULL;
 * *t is its DLTensor, *dims its room for shape then strides. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void *
tensor_block(int ndim, int readonly, int versioned, unsigned options,
             void *owner, cai_release_fn release, DLTensor **t, int64_t **dims)
{
    size_t n = (size_t)ndim;

    if (versioned) {
        versioned_block *b = malloc(sizeof *b + 2 * n * sizeof(int64_t));

        if (CAI_UNLIKELY(b == NULL))
            return NULL;
        b->tensor.version.major = CAIBRIDGE_DLPACK_MAJOR;
        b->tensor.version.minor = CAIBRIDGE_DLPACK_MINOR;
        b->tensor.manager_ctx = owner;
        b->tensor.deleter = versioned_deleter;
        b->tensor.flags = (readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
                          ((options & CAI_OPT_IS_COPIED)
                               ? DLPACK_FLAG_BITMASK_IS_COPIED
                               : 0);
        b->release = release;
        *t = &b->tensor.dl_tensor;
        *dims = b->dims;
        return &b->tensor;
    } else {
        legacy_block *b = malloc(sizeof *b + 2 * n * sizeof(int64_t));

        if (CAI_UNLIKELY(b == NULL))
            return NULL;
        b->tensor.manager_ctx = owner;
        b->tensor.deleter = legacy_deleter;
        b->release = release;
        *t = &b->tensor.dl_tensor;
        *dims = b->dims;
        return &b->tensor;
    }
}

static int readonly_legacy_error(cai_error_t *err)
{
    return cai_fail(err, CAI_EREADONLY, "data",
                    "the data is read-only and a legacy DLPack tensor "
                    "cannot say so; ask for a versioned tensor or opt "
                    "in to exporting read-only data as writable");
}

static int no_tensor_memory(int ndim, cai_error_t *err)
{
    return cai_fail(err, CAI_ENOMEM, "",
                    "cannot allocate a tensor of %d "
                    "dimensions",
                    ndim);
}

int cai_tensor_new(const DLTensor *src, int readonly, int versioned,
                   unsigned options, void *owner, cai_release_fn release,
                   void **out, cai_error_t *err)
{
    size_t n, i;
    DLTensor *t;
    int64_t *dims;
    int rc;

    *out = NULL;
    if (CAI_UNLIKELY(src->ndim < 0 || src->ndim > CAI_MAX_NDIM)) {
        rc = ndim_error(src->ndim, err);
        goto fail;
    }
    if (CAI_UNLIKELY(!versioned && readonly &&
                     !(options & CAI_OPT_LEGACY_READONLY_OK))) {
        rc = readonly_legacy_error(err);
        goto fail;
    }
    *out = tensor_block(src->ndim, readonly, versioned, options, owner,
                        release, &t, &dims);
    if (CAI_UNLIKELY(*out == NULL)) {
        rc = no_tensor_memory(src->ndim, err);
        goto fail;
    }
    n = (size_t)src->ndim;
    for (i = 0; i < n; i++) {
        dims[i] = src->shape[i];
        dims[n + i] = src->strides[i];
    }
    t->data = src->data;
    t->device = src->device;
    t->ndim = src->ndim;
    t->dtype = src->dtype;
    t->shape = n > 0 ? dims : NULL;
    t->strides = n > 0 ? dims + n : NULL;
    t->byte_offset = 0;
    CAI_COUNT(views, 1);
    return 0;

fail:
    if (release != NULL)
        release(owner);
    return rc;
}

int cai_desc_tensor(const cai_desc_t *d, int versioned, unsigned options,
                    void *owner, cai_release_fn release, void **out,
                    cai_error_t *err)
{
    size_t n, i;
    DLTensor *t;
    int64_t *dims;
    void *block;
    int rc;

    *out = NULL;
    if (CAI_UNLIKELY(d->ndim < 0 || d->ndim > CAI_MAX_NDIM)) {
        int64_t none[1];

        /* The check names the first rule broken, the ndim's or before. */
        rc = cai_desc_check(d, none, err);
        goto fail;
    }
    block = tensor_block(d->ndim, d->readonly, versioned, options, owner,
                         release, &t, &dims);
    if (CAI_UNLIKELY(block == NULL)) {
        rc = no_tensor_memory(d->ndim, err);
        goto fail;
    }
    n = (size_t)d->ndim;
    /* The element strides go straight into the tensor. */
    rc = !d->has_strides && cai_contiguous_ok(d, dims + n)
             ? 0
             : cai_desc_check(d, dims + n, err);
    if (CAI_UNLIKELY(rc != 0)) {
        free(block);
        goto fail;
    }
    if (CAI_UNLIKELY(!versioned && d->readonly &&
                     !(options & CAI_OPT_LEGACY_READONLY_OK))) {
        free(block);
        rc = readonly_legacy_error(err);
        /* Refused for read-only data: the owner is released all the same. */
        if (release != NULL)
            release(owner);
        return rc;
    }
    for (i = 0; i < n; i++)
        dims[i] = d->shape[i];
    t->data = d->data;
    t->device = d->device;
    t->ndim = d->ndim;
    t->dtype = d->dtype;
    t->shape = n > 0 ? dims : NULL;
    t->strides = n > 0 ? dims + n : NULL;
    t->byte_offset = 0;
    *out = block;
    CAI_COUNT(views, 1);
    return 0;

fail:
    if (release != NULL)
        release(owner);
    return rc;
}

int cai_tensor_owner(const void *tensor, int versioned,
                     cai_release_fn *release, void **owner)
{
    if (versioned) {
        const versioned_block *b = tensor;

        if (b->tensor.deleter != versioned_deleter)
            return -1;
        *release = b->release;
        *owner = b->tensor.manager_ctx;
    } else {
        const legacy_block *b = tensor;

        if (b->tensor.deleter != legacy_deleter)
            return -1;
        *release = b->release;
        *owner = b->tensor.manager_ctx;
    }
    return 0;
}

/* The tensor is the head of its block: freeing it frees the block. */
int cai_tensor_detach(void *tensor, int versioned, cai_release_fn *release,
                      void **owner)
{
    if (cai_tensor_owner(tensor, versioned, release, owner) != 0)
        return -1;
    free(tensor);
    return 0;
}

/* Packed sub-byte elements with strides: 0 when they are the C-contiguous
 * ones (axes of length 1 aside), else refused. */
static int packed_strides(const DLTensor *t, cai_error_t *err)
{
    int64_t step = 1;
    int i;

    for (i = t->ndim - 1; i >= 0; i--) {
        char name[32], field[32];

        if (t->shape[i] <= 1)
            continue;
        if (t->strides[i] == step) {
            /* An overflowing count is refused by the check that follows. */
            if (__builtin_mul_overflow(step, t->shape[i], &step))
                return 0;
            continue;
        }
        snprintf(field, sizeof field, "strides[%d]", i);
        return cai_fail(err, CAI_EUNSUPPORTED, field,
                        "strides[%d] = %lld: %s elements are packed, "
                        "smaller than a byte, so only a C-contiguous tensor "
                        "(stride %lld there) can be held",
                        i, (long long)t->strides[i],
                        cai_dtype_name(t->dtype, name), (long long)step);
    }
    return 0;
}

int cai_desc_from_dltensor(const DLTensor *t, cai_desc_t *out,
                           cai_error_t *err)
{
    int64_t itemsize, count;
    int rc, i;

    if (CAI_UNLIKELY(t == NULL || out == NULL))
        return cai_null_arg(err, t == NULL ? "tensor" : "out");
    if (CAI_UNLIKELY(t->ndim < 0 || t->ndim > CAI_MAX_NDIM))
        return cai_fail(err, t->ndim < 0 ? CAI_EINVAL : CAI_EUNSUPPORTED,
                        "ndim", "ndim = %d; 0 to %d dimensions are supported",
                        (int)t->ndim, CAI_MAX_NDIM);
    if (CAI_UNLIKELY(t->ndim > 0 && t->shape == NULL))
        return cai_fail(err, CAI_EINVAL, "shape",
                        "shape is NULL for a tensor of %d dimensions",
                        (int)t->ndim);
    /* Any type DLPack defines is carried: a typestr is needed only where
     * a CAI or array interface is written (cai_typestr_format).  Packed
     * sub-byte elements (float4) have no byte strides: they are held only
     * C-contiguous. */
    itemsize = cai_dtype_itemsize(t->dtype);
    if (CAI_UNLIKELY(t->dtype.code > kDLFloat4_e2m1fn ||
                     (uint32_t)t->dtype.bits * t->dtype.lanes == 0)) {
        char name[32];

        return cai_fail(err, CAI_EUNSUPPORTED, "dtype",
                        t->dtype.code > kDLFloat4_e2m1fn
                            ? "DLPack type %s has a code this library does "
                              "not know"
                            : "DLPack type %s has no bits",
                        cai_dtype_name(t->dtype, name));
    }

    /* data once byte_offset is checked, below. */
    cai_desc_init(out, NULL, t->ndim, t->dtype, t->device);
    for (i = 0; i < t->ndim; i++)
        out->shape[i] = t->shape[i];
    /* A zero-size array addresses nothing: it is C-contiguous whatever its
     * strides say, so they are not converted (and cannot overflow). */
    if (t->strides != NULL && t->ndim > 0 &&
        !(cai_element_count(t->ndim, out->shape, &count) == 0 && count == 0)) {
        if (CAI_UNLIKELY(itemsize == 0)) {
            rc = packed_strides(t, err);
            if (rc != 0)
                return rc;
        }
        for (i = 0; itemsize > 0 && i < t->ndim; i++) {
            if (!__builtin_mul_overflow(t->strides[i], itemsize,
                                        &out->strides[i]))
                continue;
            /* An axis of length 1 never applies its stride. */
            if (out->shape[i] <= 1) {
                out->strides[i] = 0;
                continue;
            }
            {
                char field[32];

                snprintf(field, sizeof field, "strides[%d]", i);
                return cai_fail(err, CAI_EINVAL, field,
                                "strides[%d] = %lld elements overflows 64 "
                                "bits in bytes",
                                i, (long long)t->strides[i]);
            }
        }
        /* CAI: strides None exactly when the layout is C-contiguous. */
        out->has_strides =
            itemsize > 0 &&
            !cai_is_c_contiguous(t->ndim, out->shape, out->strides, itemsize);
    }
    if (CAI_UNLIKELY(t->data != NULL &&
                     t->byte_offset > UINTPTR_MAX - (uintptr_t)t->data))
        return cai_fail(err, CAI_EINVAL, "byte_offset",
                        "byte_offset = %llu overflows the data pointer",
                        (unsigned long long)t->byte_offset);
    /* CAI has no byte offset: fold it into the pointer, as an integer (a
     * pointer may not be moved outside its object); NULL stays NULL. */
    out->data = t->data == NULL
                    ? NULL
                    : (void *)((uintptr_t)t->data + (uintptr_t)t->byte_offset);
    if (CAI_UNLIKELY(!cai_desc_carried_ok(out)))
        return cai_desc_carried_error(out, err);
    {
        int64_t scratch[CAI_MAX_NDIM];

        rc = cai_desc_check(out, scratch, err);
        if (CAI_UNLIKELY(rc != 0))
            return rc;
    }
    return cai_ok(err);
}

int cai_desc_from_dlpack_versioned(const DLManagedTensorVersioned *t,
                                   cai_desc_t *out, cai_error_t *err)
{
    int rc;

    if (CAI_UNLIKELY(t == NULL || out == NULL))
        return cai_null_arg(err, t == NULL ? "tensor" : "out");
    /* DLPack: when major differs from ours, only the deleter may be used. */
    if (CAI_UNLIKELY(t->version.major != CAIBRIDGE_DLPACK_MAJOR))
        return cai_fail(err, CAI_EVERSION, "version",
                        "DLPack tensor version %u.%u is not the %d.x this "
                        "library understands; only its deleter may be "
                        "called",
                        (unsigned)t->version.major, (unsigned)t->version.minor,
                        CAIBRIDGE_DLPACK_MAJOR);
    if (CAI_UNLIKELY(t->flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED))
        return cai_fail(err, CAI_EUNSUPPORTED, "flags",
                        "the tensor holds padded sub-byte elements, which "
                        "have no NumPy typestr");
    rc = cai_desc_from_dltensor(&t->dl_tensor, out, err);
    if (rc == 0)
        out->readonly = (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    return rc;
}

int cai_desc_from_dlpack(const DLManagedTensor *t, cai_desc_t *out,
                         cai_error_t *err)
{
    if (CAI_UNLIKELY(t == NULL))
        return cai_null_arg(err, "tensor");
    return cai_desc_from_dltensor(&t->dl_tensor, out, err);
}
