/* Tests of src/layout.c: byte <-> element strides, contiguity, item sizes. */
#include <string.h>

#include "caibridge.h"
#include "tap/basic.h"

static DLDataType dtype(uint8_t code, uint8_t bits, uint16_t lanes)
{
    DLDataType t;

    t.code = code;
    t.bits = bits;
    t.lanes = lanes;
    return t;
}

/* Fills err with something a successful call must clear. */
static void poison(cai_error_t *err)
{
    err->status = 12345;
    strcpy(err->field, "stale");
    strcpy(err->message, "stale message");
}

static int cleared(const cai_error_t *err)
{
    return err->status == 0 && err->field[0] == '\0' &&
           err->message[0] == '\0';
}

static void test_itemsize(void)
{
    is_int(1, cai_dtype_itemsize(dtype(kDLBool, 8, 1)), "bool8 is 1 byte");
    is_int(2, cai_dtype_itemsize(dtype(kDLFloat, 16, 1)), "float16 is 2");
    is_int(4, cai_dtype_itemsize(dtype(kDLInt, 32, 1)), "int32 is 4");
    is_int(8, cai_dtype_itemsize(dtype(kDLUInt, 64, 1)), "uint64 is 8");
    is_int(16, cai_dtype_itemsize(dtype(kDLComplex, 128, 1)),
           "complex128 is 16");
    is_int(16, cai_dtype_itemsize(dtype(kDLFloat, 32, 4)),
           "float32x4 is 16 bytes");
    is_int(0, cai_dtype_itemsize(dtype(kDLFloat4_e2m1fn, 4, 1)),
           "float4 is not whole bytes: 0");
    is_int(0, cai_dtype_itemsize(dtype(kDLInt, 1, 1)),
           "int1 is not whole bytes: 0");
    is_int(1, cai_dtype_itemsize(dtype(kDLFloat4_e2m1fn, 4, 2)),
           "two float4 lanes are 1 byte");
    is_int(0, cai_dtype_itemsize(dtype(kDLFloat, 0, 1)), "0 bits: 0");
    is_int(0, cai_dtype_itemsize(dtype(kDLFloat, 32, 0)), "0 lanes: 0");
}

static void test_bytes_to_elements(void)
{
    cai_error_t err;
    int64_t out[4];

    {
        const int64_t shape[] = {3, 4}, bytes[] = {16, 4};

        poison(&err);
        is_int(0, cai_strides_bytes_to_elements(2, shape, bytes, 4, out, &err),
               "{16, 4} bytes of 4-byte items convert");
        ok(out[0] == 4 && out[1] == 1, "... to {4, 1} elements");
        ok(cleared(&err), "success clears the error struct");
    }
    {
        const int64_t shape[] = {3, 4}, bytes[] = {16, 6};

        memset(out, 0x5a, sizeof out);
        is_int(CAI_EINVAL,
               cai_strides_bytes_to_elements(2, shape, bytes, 4, out, &err),
               "a stride of 6 bytes with 4-byte items is refused");
        is_int(CAI_EINVAL, err.status, "err.status is the returned status");
        is_string("strides[1]", err.field, "the field is strides[1]");
        is_string("strides[1] = 6 bytes is not a multiple of the item size 4",
                  err.message, "the message states the rule");
    }
    {
        const int64_t shape[] = {5, 2}, bytes[] = {10, 8};

        is_int(CAI_EINVAL,
               cai_strides_bytes_to_elements(2, shape, bytes, 8, out, &err),
               "strides[0] = 10 with 8-byte items is refused (not truncated)");
        is_string("strides[0]", err.field, "the field is strides[0]");
        contains(err.message, "strides[0] = 10 bytes", "the message says so");
    }
    {
        const int64_t shape[] = {3, 4}, bytes[] = {-16, -4};

        is_int(0, cai_strides_bytes_to_elements(2, shape, bytes, 4, out, NULL),
               "negative strides convert (err may be NULL)");
        ok(out[0] == -4 && out[1] == -1, "... to {-4, -1}");
    }
    {
        const int64_t shape[] = {3, 4}, bytes[] = {-6, 4};

        is_int(CAI_EINVAL,
               cai_strides_bytes_to_elements(2, shape, bytes, 4, out, &err),
               "a negative non-multiple stride is refused");
        is_string("strides[0]", err.field, "... naming strides[0]");
    }
    {
        const int64_t shape[] = {3, 4}, bytes[] = {0, 0};

        is_int(0, cai_strides_bytes_to_elements(2, shape, bytes, 8, out, &err),
               "zero (broadcast) strides convert");
        ok(out[0] == 0 && out[1] == 0, "... to zero element strides");
    }
    {
        /* Length 1 and 0 axes never apply their stride: any value is exact,
         * and the contiguous stride replaces one that does not divide. */
        const int64_t shape[] = {2, 1, 3}, bytes[] = {12, 7, 4};

        is_int(0, cai_strides_bytes_to_elements(3, shape, bytes, 4, out, &err),
               "a non-multiple stride on a length-1 axis is accepted");
        ok(out[0] == 3 && out[1] == 3 && out[2] == 1,
           "... and replaced by the contiguous stride 3: {3, 3, 1}");
    }
    {
        const int64_t shape[] = {0, 5}, bytes[] = {3, 4};

        is_int(0, cai_strides_bytes_to_elements(2, shape, bytes, 4, out, &err),
               "a non-multiple stride on a length-0 axis is accepted");
        ok(out[0] == 5 && out[1] == 1, "... replaced by the contiguous 5");
    }
    {
        const int64_t shape[] = {1}, bytes[] = {8};

        is_int(0, cai_strides_bytes_to_elements(1, shape, bytes, 4, out, &err),
               "a multiple stride on a length-1 axis is kept");
        is_int(2, out[0], "... as 2 elements");
    }
    {
        const int64_t shape[] = {4}, bytes[] = {4};

        is_int(CAI_EINVAL,
               cai_strides_bytes_to_elements(1, shape, bytes, 0, out, &err),
               "an item size of 0 is refused");
        is_int(CAI_EINVAL,
               cai_strides_bytes_to_elements(1, shape, bytes, -4, out, &err),
               "a negative item size is refused");
    }
    is_int(0, cai_strides_bytes_to_elements(0, NULL, NULL, 4, out, &err),
           "0 dimensions: nothing to convert");
}

static void test_elements_to_bytes(void)
{
    cai_error_t err;
    int64_t out[3];

    {
        const int64_t el[] = {12, -3, 0};

        poison(&err);
        is_int(0, cai_strides_elements_to_bytes(3, el, 8, out, &err),
               "{12, -3, 0} elements of 8 bytes convert");
        ok(out[0] == 96 && out[1] == -24 && out[2] == 0,
           "... to {96, -24, 0} bytes");
        ok(cleared(&err), "success clears the error struct");
    }
    {
        const int64_t el[] = {1, INT64_MAX / 4};

        is_int(CAI_EINVAL, cai_strides_elements_to_bytes(2, el, 8, out, &err),
               "a byte stride overflowing 64 bits is refused");
        is_string("strides[1]", err.field, "... naming strides[1]");
        contains(err.message, "overflows 64 bits", "... saying it overflows");
    }
    {
        const int64_t el[] = {INT64_MIN / 2};

        is_int(CAI_EINVAL, cai_strides_elements_to_bytes(1, el, 4, out, &err),
               "a negative byte stride overflowing 64 bits is refused");
    }
}

static void test_contiguous(void)
{
    {
        const int64_t shape[] = {3, 4}, st[] = {16, 4};

        ok(cai_is_c_contiguous(2, shape, st, 4), "{3,4} {16,4} is C order");
        ok(cai_is_c_contiguous(2, shape, NULL, 4), "no strides is C order");
    }
    {
        const int64_t shape[] = {3, 4}, st[] = {4, 12};

        ok(!cai_is_c_contiguous(2, shape, st, 4),
           "transposed (Fortran order) is not");
    }
    {
        const int64_t shape[] = {3, 4}, st[] = {32, 4};

        ok(!cai_is_c_contiguous(2, shape, st, 4), "a row slice is not");
    }
    {
        const int64_t shape[] = {3, 4}, st[] = {16, 8};

        ok(!cai_is_c_contiguous(2, shape, st, 2), "every other column is not");
    }
    {
        const int64_t shape[] = {3, 4}, st[] = {0, 4};

        ok(!cai_is_c_contiguous(2, shape, st, 4), "a broadcast axis is not");
    }
    {
        const int64_t shape[] = {3, 4}, st[] = {-16, 4};

        ok(!cai_is_c_contiguous(2, shape, st, 4), "a reversed axis is not");
    }
    {
        const int64_t shape[] = {1, 3, 1, 4}, st[] = {999, 16, -5, 4};

        ok(cai_is_c_contiguous(4, shape, st, 4),
           "strides of length-1 axes do not matter");
    }
    {
        const int64_t shape[] = {3, 0, 4}, st[] = {7, 3, 1};

        ok(cai_is_c_contiguous(3, shape, st, 4),
           "a zero-size array is C-contiguous whatever its strides");
    }
    ok(cai_is_c_contiguous(0, NULL, NULL, 8), "0-d without strides is");
    {
        const int64_t dummy[1] = {0};

        ok(cai_is_c_contiguous(0, dummy, dummy, 8), "0-d with strides is");
    }
    {
        const int64_t shape[] = {5}, st[] = {8};

        ok(!cai_is_c_contiguous(1, shape, st, 4), "1-d stride 2 items is not");
    }
}

int main(void)
{
    plan(11 + 25 + 7 + 12);
    test_itemsize();
    test_bytes_to_elements();
    test_elements_to_bytes();
    test_contiguous();
    return 0;
}
