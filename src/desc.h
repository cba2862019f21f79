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

#endif
