/* What the C and C++ tests build the same way: a dtype, a stale error
 * struct, and a plain float32 host descriptor to start each case from. */
#ifndef CAI_TESTS_TEST_UTIL_H
#define CAI_TESTS_TEST_UTIL_H

#include <string.h>

#include "caibridge.h"

static inline DLDataType dtype(uint8_t code, uint8_t bits, uint16_t lanes)
{
    DLDataType t;

    t.code = code;
    t.bits = bits;
    t.lanes = lanes;
    return t;
}

/* Fills err with what a successful call must clear. */
static inline void poison_err(cai_error_t *err)
{
    err->status = 12345;
    strcpy(err->field, "stale");
    strcpy(err->message, "stale message");
}

static inline int err_cleared(const cai_error_t *err)
{
    return err->status == 0 && err->field[0] == '\0' &&
           err->message[0] == '\0';
}

/* A valid CAI v3 float32 host descriptor over data, C-contiguous without
 * strides: rows elements when ndim is 1, rows x cols when it is 2. */
static inline void float_desc(cai_desc_t *d, void *data, int ndim,
                              int64_t rows, int64_t cols)
{
    memset(d, 0, sizeof *d);
    d->data = data;
    d->ndim = ndim;
    d->version = 3;
    d->dtype = dtype(kDLFloat, 32, 1);
    d->device.device_type = kDLCPU;
    d->shape[0] = rows;
    if (ndim > 1)
        d->shape[1] = cols;
}

#endif
