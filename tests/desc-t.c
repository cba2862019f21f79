/* Tests of src/desc.c: the rules a cai_desc_t must follow (cai_desc_validate). */
#include <stdio.h>
#include <string.h>

#include "caibridge.h"
#include "tap/basic.h"
#include "test-util.h"

static float buffer[64];

/* A valid 3x4 float32 C-contiguous host descriptor. */
static void base(cai_desc_t *d)
{
    float_desc(d, buffer, 2, 3, 4);
}

/* Expects desc to be refused with status and field; the message must
 * contain words.  Four assertions. */
static void refused(const cai_desc_t *d, int status, const char *field,
                    const char *words, const char *what)
{
    cai_error_t err;

    memset(&err, 0, sizeof err);
    is_int(status, cai_desc_validate(d, &err), "%s: refused", what);
    is_int(status, err.status, "%s: err.status matches", what);
    is_string(field, err.field, "%s: the field is '%s'", what, field);
    contains(err.message, words, "%s: the message says '%s'", what, words);
}

static void accepted(const cai_desc_t *d, const char *what)
{
    cai_error_t err;

    poison_err(&err);
    is_int(0, cai_desc_validate(d, &err), "%s: accepted", what);
    ok(err_cleared(&err), "%s: the error struct is cleared", what);
}

static void set_strides(cai_desc_t *d, int64_t s0, int64_t s1)
{
    d->has_strides = 1;
    d->strides[0] = s0;
    d->strides[1] = s1;
}

/* data at the last address accepted, then at the first refused; range is
 * the span the message must name (four and two assertions). */
static void address_edge(cai_desc_t *d, uintptr_t good, uintptr_t bad,
                         const char *range, const char *good_what,
                         const char *bad_what)
{
    d->data = (void *)good;
    accepted(d, good_what);
    d->data = (void *)bad;
    refused(d, CAI_EINVAL, "data", range, bad_what);
}

int main(void)
{
    cai_desc_t d;
    int v, i;

    plan(131 + 24 + (sizeof(void *) >= 8 ? 0 : 2));

    base(&d);
    accepted(&d, "a 3x4 float32 array");
    is_int(0, cai_desc_validate(&d, NULL), "err may be NULL");

    /* CAI versions 0..3 accepted, others refused. */
    for (v = 0; v <= 3; v++) {
        char what[32];

        base(&d);
        d.version = v;
        snprintf(what, sizeof what, "version %d", v);
        accepted(&d, what);
    }
    base(&d);
    d.version = 4;
    refused(&d, CAI_EINVAL, "version", "version = 4", "version 4");
    d.version = -1;
    refused(&d, CAI_EINVAL, "version", "version = -1", "version -1");

    /* ndim: 0..CAI_MAX_NDIM. */
    base(&d);
    d.ndim = 0;
    accepted(&d, "a 0-d array");
    d.data = NULL;
    refused(&d, CAI_EINVAL, "data", "data pointer is 0",
            "a 0-d array (one element) with data 0");
    base(&d);
    d.ndim = CAI_MAX_NDIM;
    for (i = 0; i < CAI_MAX_NDIM; i++)
        d.shape[i] = 1;
    d.shape[0] = 2;
    accepted(&d, "ndim == CAI_MAX_NDIM");
    d.has_strides = 1;
    for (i = 0; i < CAI_MAX_NDIM; i++)
        d.strides[i] = 4;
    accepted(&d, "ndim == CAI_MAX_NDIM with strides");
    d.ndim = CAI_MAX_NDIM + 1;
    refused(&d, CAI_EINVAL, "shape", "at most 64", "ndim == CAI_MAX_NDIM + 1");
    d.ndim = -1;
    refused(&d, CAI_EINVAL, "shape", "-1 dimensions", "ndim == -1");

    /* mask and stream. */
    base(&d);
    d.has_mask = 1;
    refused(&d, CAI_EUNSUPPORTED, "mask", "no masked arrays", "a mask");
    base(&d);
    d.has_stream = 1;
    d.stream = 0;
    refused(&d, CAI_EINVAL, "stream", "stream = 0", "stream 0");
    d.stream = CAI_STREAM_LEGACY;
    accepted(&d, "stream 1 (legacy)");
    d.stream = CAI_STREAM_PER_THREAD;
    accepted(&d, "stream 2 (per-thread)");
    d.stream = (intptr_t)0x7f001234;
    accepted(&d, "a stream handle");
    d.has_stream = 0;
    d.stream = 0;
    accepted(&d, "no stream (None)");

    /* Types: packed sub-byte elements only C-contiguous. */
    base(&d);
    d.dtype.code = kDLFloat4_e2m1fn;
    d.dtype.bits = 4;
    accepted(&d, "float4, packed and C-contiguous");
    d.shape[0] = INT64_C(1) << 31;
    d.shape[1] = INT64_C(1) << 30;
    d.data = (void *)(UINTPTR_MAX - (UINT64_C(1) << 60));
    accepted(&d, "float4: 2^61 elements in 2^60 bytes, the last one counted");
    d.data = (void *)(UINTPTR_MAX - (UINT64_C(1) << 60) + 1);
    refused(&d, CAI_EINVAL, "data", "outside the address space",
            "float4: one byte past the end of memory");
    d.ndim = 1;
    d.shape[0] = 3; /* 12 bits: two bytes, the second half used */
    d.data = (void *)(UINTPTR_MAX - 2);
    accepted(&d, "float4: 3 elements in the last 2 bytes");
    d.data = (void *)(UINTPTR_MAX - 1);
    refused(&d, CAI_EINVAL, "data", "outside the address space",
            "float4: 3 elements need a second byte, even half used");
    base(&d);
    d.dtype.code = kDLFloat4_e2m1fn;
    d.dtype.bits = 4;
    d.has_strides = 1;
    d.strides[0] = 2;
    d.strides[1] = 1;
    refused(&d, CAI_EUNSUPPORTED, "strides", "float4_e2m1fn",
            "float4 with strides");
    d.dtype.code = kDLInt;
    d.dtype.bits = 0;
    refused(&d, CAI_EUNSUPPORTED, "typestr", "not a whole number of bytes",
            "int0");

    /* Shapes. */
    base(&d);
    d.shape[1] = -4;
    refused(&d, CAI_EINVAL, "shape[1]", "shape[1] = -4 is negative",
            "a negative shape entry");
    d.shape[0] = 0;
    refused(&d, CAI_EINVAL, "shape[1]", "negative",
            "a negative shape entry beside a zero one");
    base(&d);
    d.shape[0] = INT64_C(1) << 32;
    d.shape[1] = INT64_C(1) << 32;
    refused(&d, CAI_EINVAL, "shape", "number of elements overflows",
            "2^64 elements");
    d.shape[2] = 0;
    d.ndim = 3;
    accepted(&d, "2^64 x 0 elements (zero-size, no overflow)");
    base(&d);
    d.shape[0] = INT64_C(1) << 31;
    d.shape[1] = INT64_C(1) << 31;
    refused(&d, CAI_EINVAL, "shape", "size in bytes overflows",
            "2^62 elements of 4 bytes, C-contiguous");

    /* Zero-size arrays may have data 0; others may not. */
    base(&d);
    d.data = NULL;
    refused(&d, CAI_EINVAL, "data", "12 elements", "data 0 with 12 elements");
    d.shape[0] = 0;
    accepted(&d, "a zero-size array with data 0");

    /* Strides. */
    base(&d);
    set_strides(&d, 16, 6);
    refused(&d, CAI_EUNSUPPORTED, "strides[1]",
            "strides[1] = 6 bytes is not a multiple of the item size 4",
            "a stride of 6 bytes");
    set_strides(&d, 4, 12);
    accepted(&d, "transposed strides");
    set_strides(&d, -16, 4);
    accepted(&d, "negative strides");
    set_strides(&d, 0, 0);
    accepted(&d, "zero (broadcast) strides");
    base(&d);
    d.shape[1] = 1;
    set_strides(&d, 4, 3);
    accepted(&d, "a non-multiple stride on a length-1 axis");
    base(&d);
    set_strides(&d, INT64_C(1) << 62, 4);
    refused(&d, CAI_EINVAL, "strides[0]", "byte extent",
            "strides whose extent overflows 64 bits");
    d.strides[0] = -((INT64_C(1) << 62) + 4);
    refused(&d, CAI_EINVAL, "strides[0]", "byte extent",
            "negative strides whose extent overflows 64 bits");
    d.shape[0] = 2;
    d.strides[0] = INT64_MAX - 7;
    d.shape[1] = 2;
    d.strides[1] = 8;
    refused(&d, CAI_EINVAL, "strides[1]", "byte extent",
            "extent overflowing only once both axes are added");
    set_strides(&d, INT64_C(1) << 62, -(INT64_C(1) << 62));
    refused(&d, CAI_EINVAL, "strides", "byte extent",
            "a 2^64-byte span between lowest and highest element");
    d.strides[0] = INT64_MAX / 4;
    d.strides[0] -= d.strides[0] % 4;
    d.strides[1] = -d.strides[0];
    /* Only validated, never read: an address with room on both sides. */
    d.data = (void *)(UINTPTR_MAX / 2 + 1);
    if (sizeof(void *) >= 8)
        accepted(&d, "a large but representable span");
    else
        refused(&d, CAI_EINVAL, "data", "address space",
                "a span larger than the address space");
    d.data = buffer;
    refused(&d, CAI_EINVAL, "data", "outside the address space",
            "the same span from a low address reaches below address 0");

    /* The whole extent must have addresses: data + lo >= 0 and
     * data + hi <= UINTPTR_MAX, for any layout. */
    base(&d);
    d.ndim = 1;
    d.shape[0] = 4;
    address_edge(&d, UINTPTR_MAX - 16, UINTPTR_MAX - 15, "[0, 16)",
                 "16 bytes ending just below the top of the address space",
                 "16 bytes whose end (one past the last) wraps to 0");
    d.has_strides = 1;
    d.strides[0] = -4;
    address_edge(&d, 12, 8, "[-12, 4)", "a reversed axis ending at address 0",
                 "a reversed axis reaching below address 0");
    d.strides[0] = 0;
    address_edge(&d, UINTPTR_MAX - 4, UINTPTR_MAX - 3, "[0, 4)",
                 "a broadcast item just below the top",
                 "a broadcast item whose end wraps to 0");
    base(&d);
    d.shape[0] = 0;
    d.strides[0] = INT64_MAX - 2;
    accepted(&d, "any strides when the array is zero-size");
    set_strides(&d, 3, 5);
    accepted(&d, "strides no multiple of the item size on a zero-size array "
                 "(NumPy exports it)");
    return 0;
}
