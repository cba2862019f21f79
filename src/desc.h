/* Private: descriptor checks shared by the conversions. */
#ifndef CAIBRIDGE_DESC_H
#define CAIBRIDGE_DESC_H

#include "caibridge.h"

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

#endif
