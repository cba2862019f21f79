/* Tests of src/layout.c: byte <-> element strides, contiguity, item sizes. */
#include <string.h>

#include "caibridge.h"
#include "tap/basic.h"
#include "test-util.h"

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

        poison_err(&err);
        is_int(0, cai_strides_bytes_to_elements(2, shape, bytes, 4, out, &err),
               "{16, 4} bytes of 4-byte items convert");
        ok(out[0] == 4 && out[1] == 1, "... to {4, 1} elements");
        ok(err_cleared(&err), "success clears the error struct");
    }
    {
        const int64_t shape[] = {3, 4}, bytes[] = {16, 6};

        memset(out, 0x5a, sizeof out);
        is_int(CAI_EUNSUPPORTED,
               cai_strides_bytes_to_elements(2, shape, bytes, 4, out, &err),
               "a stride of 6 bytes with 4-byte items is refused");
        is_int(CAI_EUNSUPPORTED, err.status,
               "err.status is the returned status");
        is_string("strides[1]", err.field, "the field is strides[1]");
        is_string("strides[1] = 6 bytes is not a multiple of the item size 4",
                  err.message, "the message states the rule");
    }
    {
        const int64_t shape[] = {5, 2}, bytes[] = {10, 8};

        is_int(CAI_EUNSUPPORTED,
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

        is_int(CAI_EUNSUPPORTED,
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

        poison_err(&err);
        is_int(0, cai_strides_elements_to_bytes(3, el, 8, out, &err),
               "{12, -3, 0} elements of 8 bytes convert");
        ok(out[0] == 96 && out[1] == -24 && out[2] == 0,
           "... to {96, -24, 0} bytes");
        ok(err_cleared(&err), "success clears the error struct");
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

/* cai_layout_extent gives [lo, hi) on success: three assertions. */
static void extent_is(int ndim, const int64_t *shape, const int64_t *strides,
                      int64_t itemsize, int64_t offset, int64_t lo, int64_t hi,
                      const char *what)
{
    cai_error_t err;
    int64_t l = -7, h = -7;

    poison_err(&err);
    is_int(0,
           cai_layout_extent(ndim, shape, strides, itemsize, offset, &l, &h,
                             &err),
           "extent %s: computed", what);
    ok(l == lo && h == hi, "extent %s: [%lld, %lld) (expected [%lld, %lld))",
       what, (long long)l, (long long)h, (long long)lo, (long long)hi);
    ok(err_cleared(&err), "extent %s: the error struct is cleared", what);
}

/* cai_layout_extent refuses with CAI_EINVAL naming field: three. */
static void extent_refused(int ndim, const int64_t *shape,
                           const int64_t *strides, int64_t itemsize,
                           int64_t offset, const char *field, const char *what)
{
    cai_error_t err;
    int64_t l = -7, h = -7;

    memset(&err, 0, sizeof err);
    is_int(CAI_EINVAL,
           cai_layout_extent(ndim, shape, strides, itemsize, offset, &l, &h,
                             &err),
           "extent %s: refused", what);
    is_string(field, err.field, "extent %s: the field is %s", what, field);
    ok(l == 0 && h == 0 && err.message[0] != '\0',
       "extent %s: [0, 0) and a message (%s)", what, err.message);
}

#define BIG62 (INT64_C(1) << 62)

static void test_extent(void)
{
    {
        const int64_t shape[] = {3, 4}, st[] = {16, 4};

        extent_is(2, shape, NULL, 4, 0, 0, 48, "3x4 float32, no strides");
        extent_is(2, shape, st, 4, 0, 0, 48, "3x4 float32, C strides");
        extent_is(2, shape, NULL, 4, 5, 5, 53, "3x4 float32 at offset 5");
    }
    {
        const int64_t shape[] = {3, 4}, st[] = {-16, 4};

        extent_is(2, shape, st, 4, 32, 0, 48, "rows reversed from offset 32");
        extent_is(2, shape, st, 4, 0, -32, 16,
                  "rows reversed from offset 0 reach 32 bytes before");
    }
    {
        const int64_t shape[] = {3, 4}, st[] = {4, -12};

        extent_is(2, shape, st, 4, 100, 64, 112,
                  "a negative inner stride, positive outer");
    }
    {
        const int64_t shape[] = {5}, st[] = {0};

        extent_is(1, shape, st, 8, 8, 8, 16, "a broadcast axis: one item");
    }
    {
        /* Python's memoryview slices of a 16-byte buffer. */
        const int64_t rev[] = {16}, rev_st[] = {-1};
        const int64_t even[] = {8}, even_st[] = {2};
        const int64_t back2[] = {2}, back2_st[] = {-2};

        extent_is(1, rev, rev_st, 1, 15, 0, 16, "buf[::-1]");
        extent_is(1, even, even_st, 1, 0, 0, 15, "buf[::2]");
        extent_is(1, back2, back2_st, 1, 4, 2, 5, "buf[4:0:-2]");
    }
    {
        const int64_t shape[] = {1, 3}, st[] = {INT64_MAX, 4};

        extent_is(2, shape, st, 4, 0, 0, 12,
                  "a length-1 axis with stride INT64_MAX never applies it");
    }
    extent_is(0, NULL, NULL, 8, 24, 24, 32, "0-d: one item at the offset");
    {
        const int64_t shape[] = {0}, st[] = {INT64_MIN};
        const int64_t huge[] = {BIG62, 0, BIG62},
                      huge_st[] = {INT64_MAX, 1, INT64_MIN};

        extent_is(1, shape, NULL, 4, 0, 0, 0, "zero-size: empty at 0");
        extent_is(1, shape, st, 4, 0, 0, 0,
                  "zero-size: any stride, empty at 0");
        extent_is(1, shape, NULL, 4, INT64_MAX, INT64_MAX, INT64_MAX,
                  "zero-size at offset INT64_MAX: empty, no overflow");
        extent_is(3, huge, huge_st, 8, 12, 12, 12,
                  "zero-size with 2^62 extents and extreme strides");
    }

    /* Offsets and strides near 2^63. */
    {
        const int64_t shape[] = {4};

        extent_is(1, shape, NULL, 2, INT64_MAX - 8, INT64_MAX - 8, INT64_MAX,
                  "4 items of 2 bytes ending at INT64_MAX");
        extent_refused(1, shape, NULL, 2, INT64_MAX - 7, "offset",
                       "offset INT64_MAX - 7: the end overflows");
        extent_refused(1, shape, NULL, 1, INT64_MAX, "offset",
                       "offset INT64_MAX");
    }
    {
        const int64_t shape[] = {2}, st[] = {-8};

        extent_refused(1, shape, st, 8, INT64_MIN + 7, "offset",
                       "a negative stride from offset INT64_MIN + 7");
        extent_is(1, shape, st, 8, INT64_MIN + 8, INT64_MIN, INT64_MIN + 16,
                  "a negative stride down to INT64_MIN exactly");
    }
    {
        const int64_t shape[] = {3}, st[] = {BIG62};

        extent_refused(1, shape, st, 1, 0, "strides[0]",
                       "stride 2^62 over 3 items: span 2^63");
    }
    {
        const int64_t shape[] = {2}, st[] = {INT64_MAX}, neg[] = {INT64_MIN};

        extent_refused(1, shape, st, 1, 0, "strides",
                       "stride INT64_MAX: span + item size overflows");
        extent_is(1, shape, neg, 1, 0, INT64_MIN, 1,
                  "stride INT64_MIN from 0: lo is INT64_MIN");
        extent_refused(1, shape, neg, 1, -1, "offset",
                       "stride INT64_MIN from -1");
    }
    {
        const int64_t shape[] = {2, 2}, st[] = {BIG62, BIG62};
        const int64_t neg[] = {-BIG62, -BIG62}, mixed[] = {BIG62, -BIG62};

        extent_refused(2, shape, st, 1, 0, "strides[1]",
                       "two axes of span 2^62 sum to 2^63");
        extent_is(2, shape, neg, 1, 0, INT64_MIN, 1,
                  "two negative spans of 2^62 sum to INT64_MIN");
        extent_is(2, shape, mixed, 4, 0, -BIG62, BIG62 + 4,
                  "spans of opposite signs do not add up");
    }
    {
        const int64_t shape[] = {INT64_C(1) << 32, INT64_C(1) << 32};
        const int64_t zero[] = {0, 0};
        const int64_t wide[] = {INT64_C(1) << 31, INT64_C(1) << 31};

        extent_refused(2, shape, zero, 1, 0, "shape",
                       "2^64 elements, even with zero strides");
        extent_refused(2, wide, NULL, 4, 0, "shape",
                       "2^62 C-contiguous items of 4 bytes");
        extent_is(2, wide, NULL, 1, 0, 0, BIG62, "2^62 items of 1 byte");
        extent_refused(2, wide, NULL, 2, 0, "shape",
                       "2^62 items of 2 bytes: 2^63 bytes");
    }

    /* Malformed arguments. */
    {
        const int64_t shape[] = {3, -1};

        extent_refused(2, shape, NULL, 4, 0, "shape[1]", "a negative extent");
        extent_refused(-1, shape, NULL, 4, 0, "shape", "ndim -1");
        extent_refused(CAI_MAX_NDIM + 1, shape, NULL, 4, 0, "shape",
                       "ndim 65");
        extent_refused(1, shape, NULL, 0, 0, "typestr", "item size 0");
        extent_refused(1, shape, NULL, -8, 0, "typestr", "item size -8");
    }
    {
        const int64_t shape[] = {3};
        int64_t l, h;

        is_int(0, cai_layout_extent(1, shape, NULL, 4, 0, &l, &h, NULL),
               "extent: err may be NULL");
    }
}

int main(void)
{
    plan(11 + 25 + 7 + 12 + 112);
    test_itemsize();
    test_bytes_to_elements();
    test_elements_to_bytes();
    test_contiguous();
    test_extent();
    return 0;
}
