/* Tests of src/dlpack.c: cai_desc_t <-> DLManagedTensor(Versioned). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "caibridge.h"
#include "tap/basic.h"
#include "test-util.h"

static double buffer[256];

static void count_release(void *owner)
{
    ++*(int *)owner;
}

/* A valid 3x4 float32 C-contiguous host descriptor without strides. */
static void base(cai_desc_t *d)
{
    float_desc(d, buffer, 2, 3, 4);
}

/* The shape and strides of t lie in its own allocation, right after the
 * struct (and our release pointer), strides right after shape. */
static void in_one_block(const void *t, size_t size, const DLTensor *dl,
                         const char *what)
{
    const char *start = (const char *)t;
    const char *shape = (const char *)dl->shape;

    ok(shape >= start + size && shape <= start + size + 2 * sizeof(void *),
       "%s: shape lies right after the struct", what);
    ok(dl->strides == dl->shape + dl->ndim,
       "%s: strides lie right after shape", what);
#if defined(__GLIBC__)
    ok((const char *)(dl->strides + dl->ndim) <=
           start + malloc_usable_size((void *)(uintptr_t)t),
       "%s: shape and strides end inside the struct's allocation", what);
#else
    skip("malloc_usable_size is glibc's");
#endif
}

static void test_to_versioned(void)
{
    cai_desc_t d;
    cai_error_t err;
    DLManagedTensorVersioned *t = NULL;
    int released = 0;
    int rc;

    base(&d);
    poison_err(&err);
    rc = cai_desc_to_dlpack_versioned(&d, 0, &released, count_release, &t,
                                      &err);
    is_int(0, rc, "versioned: a 3x4 float32 array converts");
    if (t == NULL)
        bail("no tensor");
    ok(err_cleared(&err), "versioned: err cleared");
    is_int(1, t->version.major, "versioned: major version 1");
    is_int(3, t->version.minor, "versioned: minor version 3");
    ok(t->manager_ctx == &released, "versioned: manager_ctx is the owner");
    ok(t->deleter != NULL, "versioned: has a deleter");
    is_int(0, (long long)t->flags, "versioned: no flags");
    ok(t->dl_tensor.data == buffer, "versioned: data is the pointer");
    is_int(0, (long long)t->dl_tensor.byte_offset, "versioned: byte_offset 0");
    is_int(kDLCPU, t->dl_tensor.device.device_type, "versioned: device CPU");
    is_int(0, t->dl_tensor.device.device_id, "versioned: device id 0");
    is_int(2, t->dl_tensor.ndim, "versioned: ndim 2");
    ok(t->dl_tensor.dtype.code == kDLFloat && t->dl_tensor.dtype.bits == 32 &&
           t->dl_tensor.dtype.lanes == 1,
       "versioned: dtype float32");
    ok(t->dl_tensor.shape != NULL && t->dl_tensor.shape[0] == 3 &&
           t->dl_tensor.shape[1] == 4,
       "versioned: shape {3, 4}");
    ok(t->dl_tensor.strides != NULL, "versioned: strides written although "
                                     "the descriptor has none (DLPack 1.2)");
    ok(t->dl_tensor.strides != NULL && t->dl_tensor.strides[0] == 4 &&
           t->dl_tensor.strides[1] == 1,
       "versioned: strides {4, 1} elements");
    in_one_block(t, sizeof *t, &t->dl_tensor, "versioned");
    is_int(0, released, "versioned: owner not released before the deleter");
    t->deleter(t);
    is_int(1, released, "versioned: the deleter releases the owner once");

    /* Strides given in bytes become elements. */
    base(&d);
    d.dtype = dtype(kDLFloat, 64, 1);
    d.has_strides = 1;
    d.shape[0] = 4;
    d.shape[1] = 3;
    d.strides[0] = 8;
    d.strides[1] = 32;
    rc = cai_desc_to_dlpack_versioned(&d, 0, NULL, NULL, &t, &err);
    is_int(0, rc, "versioned: transposed float64 converts (release NULL)");
    ok(t && t->dl_tensor.strides[0] == 1 && t->dl_tensor.strides[1] == 4,
       "versioned: byte strides {8, 32} become {1, 4}");
    if (t)
        t->deleter(t);
    d.strides[0] = -8;
    d.strides[1] = 0;
    rc = cai_desc_to_dlpack_versioned(&d, 0, NULL, NULL, &t, &err);
    is_int(0, rc, "versioned: negative and zero strides convert");
    ok(t && t->dl_tensor.strides[0] == -1 && t->dl_tensor.strides[1] == 0,
       "versioned: byte strides {-8, 0} become {-1, 0}");
    ok(t && t->dl_tensor.data == buffer,
       "versioned: data is not moved for negative strides");
    if (t)
        t->deleter(t);

    /* A stride that does not divide on a length-1 axis: the contiguous
     * stride (exact, since it is never applied). */
    base(&d);
    d.ndim = 3;
    d.shape[0] = 2;
    d.shape[1] = 1;
    d.shape[2] = 3;
    d.has_strides = 1;
    d.strides[0] = 12;
    d.strides[1] = 7;
    d.strides[2] = 4;
    rc = cai_desc_to_dlpack_versioned(&d, 0, NULL, NULL, &t, &err);
    is_int(0, rc, "versioned: a 7-byte stride on a length-1 axis converts");
    ok(t && t->dl_tensor.strides[0] == 3 && t->dl_tensor.strides[1] == 3 &&
           t->dl_tensor.strides[2] == 1,
       "versioned: ... with the contiguous stride: {3, 3, 1}");
    if (t)
        t->deleter(t);

    /* Read-only and copied flags. */
    base(&d);
    d.readonly = 1;
    released = 0;
    rc = cai_desc_to_dlpack_versioned(&d, 0, &released, count_release, &t,
                                      &err);
    is_int(0, rc, "versioned: read-only data converts");
    ok(t && t->flags == DLPACK_FLAG_BITMASK_READ_ONLY,
       "versioned: read-only sets READ_ONLY (and nothing else)");
    if (t)
        t->deleter(t);
    rc = cai_desc_to_dlpack_versioned(&d, CAI_OPT_IS_COPIED, &released,
                                      count_release, &t, &err);
    ok(rc == 0 && t &&
           t->flags ==
               (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED),
       "versioned: CAI_OPT_IS_COPIED sets IS_COPIED");
    if (t)
        t->deleter(t);
    d.readonly = 0;
    rc = cai_desc_to_dlpack_versioned(
        &d, CAI_OPT_IS_COPIED | CAI_OPT_LEGACY_READONLY_OK, &released,
        count_release, &t, &err);
    ok(rc == 0 && t && t->flags == DLPACK_FLAG_BITMASK_IS_COPIED,
       "versioned: writable copied data has IS_COPIED only");
    if (t)
        t->deleter(t);
    is_int(3, released, "versioned: one release per tensor");
}

static void test_to_legacy(void)
{
    cai_desc_t d;
    cai_error_t err;
    DLManagedTensor *t = NULL;
    int released = 0;
    int rc;

    base(&d);
    d.device.device_type = kDLCUDA;
    d.device.device_id = 3;
    d.dtype = dtype(kDLInt, 16, 1);
    poison_err(&err);
    rc = cai_desc_to_dlpack(&d, 0, &released, count_release, &t, &err);
    is_int(0, rc, "legacy: a 3x4 int16 CUDA array converts");
    if (t == NULL)
        bail("no tensor");
    ok(err_cleared(&err), "legacy: err cleared");
    ok(t->manager_ctx == &released, "legacy: manager_ctx is the owner");
    ok(t->dl_tensor.data == buffer, "legacy: data is the pointer");
    is_int(0, (long long)t->dl_tensor.byte_offset, "legacy: byte_offset 0");
    ok(t->dl_tensor.device.device_type == kDLCUDA &&
           t->dl_tensor.device.device_id == 3,
       "legacy: device CUDA:3");
    ok(t->dl_tensor.dtype.code == kDLInt && t->dl_tensor.dtype.bits == 16,
       "legacy: dtype int16");
    ok(t->dl_tensor.shape[0] == 3 && t->dl_tensor.shape[1] == 4,
       "legacy: shape {3, 4}");
    ok(t->dl_tensor.strides != NULL && t->dl_tensor.strides[0] == 4 &&
           t->dl_tensor.strides[1] == 1,
       "legacy: explicit strides {4, 1}");
    in_one_block(t, sizeof *t, &t->dl_tensor, "legacy");
    t->deleter(t);
    is_int(1, released, "legacy: the deleter releases the owner once");

    /* Read-only data cannot be said by a legacy tensor. */
    base(&d);
    d.readonly = 1;
    released = 0;
    t = (DLManagedTensor *)&d; /* must be reset to NULL */
    rc = cai_desc_to_dlpack(&d, 0, &released, count_release, &t, &err);
    is_int(CAI_EREADONLY, rc, "legacy: read-only data -> CAI_EREADONLY");
    is_int(CAI_EREADONLY, err.status, "legacy: err.status CAI_EREADONLY");
    is_string("data", err.field, "legacy: read-only names data");
    ok(t == NULL, "legacy: *out is NULL on failure");
    is_int(1, released, "legacy: the owner is released on failure");
    rc = cai_desc_to_dlpack(&d, CAI_OPT_IS_COPIED, &released, count_release,
                            &t, &err);
    is_int(CAI_EREADONLY, rc, "legacy: CAI_OPT_IS_COPIED is no opt-in");
    rc = cai_desc_to_dlpack(&d, CAI_OPT_LEGACY_READONLY_OK, &released,
                            count_release, &t, &err);
    is_int(0, rc, "legacy: CAI_OPT_LEGACY_READONLY_OK opts in");
    if (t)
        t->deleter(t);
    is_int(3, released, "legacy: one release per call");
}

/* One failing conversion in both directions: status, field, *out NULL and
 * exactly one release.  Ten assertions. */
static void fails(const cai_desc_t *d, int status, const char *field,
                  const char *what)
{
    cai_error_t err;
    DLManagedTensorVersioned *v = (DLManagedTensorVersioned *)(uintptr_t)d;
    DLManagedTensor *l = (DLManagedTensor *)(uintptr_t)d;
    int released = 0;
    int rc;

    rc =
        cai_desc_to_dlpack_versioned(d, 0, &released, count_release, &v, &err);
    is_int(status, rc, "versioned, %s: refused", what);
    is_string(field, err.field, "versioned, %s: names %s", what, field);
    ok(v == NULL, "versioned, %s: *out is NULL", what);
    is_int(1, released, "versioned, %s: released exactly once", what);
    released = 0;
    rc = cai_desc_to_dlpack(d, 0, &released, count_release, &l, &err);
    is_int(status, rc, "legacy, %s: refused", what);
    is_string(field, err.field, "legacy, %s: names %s", what, field);
    ok(l == NULL, "legacy, %s: *out is NULL", what);
    is_int(1, released, "legacy, %s: released exactly once", what);
    /* And with no release callback (nor error struct) at all. */
    rc = cai_desc_to_dlpack_versioned(d, 0, NULL, NULL, &v, NULL);
    ok(rc == status && v == NULL, "versioned, %s: release NULL is fine", what);
    rc = cai_desc_to_dlpack(d, 0, NULL, NULL, &l, NULL);
    ok(rc == status && l == NULL, "legacy, %s: release NULL is fine", what);
}

static void test_failures(void)
{
    cai_desc_t d;
    int i;

    base(&d);
    d.has_strides = 1;
    d.strides[0] = 16;
    d.strides[1] = 6;
    fails(&d, CAI_EUNSUPPORTED, "strides[1]",
          "a 6-byte stride (found after allocating)");
    base(&d);
    d.device.device_type = 0;
    fails(&d, CAI_EINVAL, "device", "an unknown device");
    base(&d);
    d.ndim = CAI_MAX_NDIM + 1;
    fails(&d, CAI_EINVAL, "shape", "ndim CAI_MAX_NDIM + 1");
    d.ndim = -1;
    fails(&d, CAI_EINVAL, "shape", "ndim -1");
    base(&d);
    d.has_mask = 1;
    fails(&d, CAI_EUNSUPPORTED, "mask", "a mask");
    base(&d);
    d.has_stream = 1;
    d.stream = 0;
    fails(&d, CAI_EINVAL, "stream", "stream 0");
    base(&d);
    d.version = 4;
    fails(&d, CAI_EINVAL, "version", "version 4");
    base(&d);
    d.shape[0] = -3;
    fails(&d, CAI_EINVAL, "shape[0]", "a negative shape");
    base(&d);
    d.shape[0] = INT64_C(1) << 31;
    d.shape[1] = INT64_C(1) << 31;
    fails(&d, CAI_EINVAL, "shape", "2^64 bytes");
    base(&d);
    d.shape[0] = INT64_C(1) << 40;
    d.shape[1] = INT64_C(1) << 40;
    fails(&d, CAI_EINVAL, "shape", "2^80 elements");
    base(&d);
    d.has_strides = 1;
    d.strides[0] = INT64_C(1) << 62;
    d.strides[1] = 4;
    fails(&d, CAI_EINVAL, "strides[0]", "a 2^63-byte extent");
    base(&d);
    d.data = NULL;
    fails(&d, CAI_EINVAL, "data", "data 0 with 12 elements");
    base(&d);
    d.dtype = dtype(kDLFloat4_e2m1fn, 4, 1);
    d.has_strides = 1;
    d.strides[0] = 2;
    d.strides[1] = 1;
    fails(&d, CAI_EUNSUPPORTED, "strides", "a sub-byte type with strides");

    /* The largest ndim is fine. */
    base(&d);
    d.ndim = CAI_MAX_NDIM;
    for (i = 0; i < CAI_MAX_NDIM; i++)
        d.shape[i] = 1;
    {
        DLManagedTensorVersioned *v = NULL;
        DLManagedTensor *l = NULL;
        int released = 0;

        is_int(0,
               cai_desc_to_dlpack_versioned(&d, 0, &released, count_release,
                                            &v, NULL),
               "versioned: ndim == CAI_MAX_NDIM converts");
        ok(v && v->dl_tensor.ndim == CAI_MAX_NDIM &&
               v->dl_tensor.strides[CAI_MAX_NDIM - 1] == 1,
           "versioned: all %d dimensions are there", CAI_MAX_NDIM);
        if (v)
            in_one_block(v, sizeof *v, &v->dl_tensor, "versioned, 64-d");
        if (v)
            v->deleter(v);
        is_int(0,
               cai_desc_to_dlpack(&d, 0, &released, count_release, &l, NULL),
               "legacy: ndim == CAI_MAX_NDIM converts");
        if (l)
            l->deleter(l);
        is_int(2, released, "ndim == CAI_MAX_NDIM: two releases");
    }
}

static void test_zero_d_and_zero_size(void)
{
    cai_desc_t d, back;
    DLManagedTensorVersioned *v = NULL;
    DLManagedTensor *l = NULL;
    DLTensor t;
    int64_t shape[2] = {0, 5}, strides[2] = {7, 1};
    cai_error_t err;

    base(&d);
    d.ndim = 0;
    is_int(0, cai_desc_to_dlpack_versioned(&d, 0, NULL, NULL, &v, &err),
           "a 0-d array converts");
    ok(v && v->dl_tensor.ndim == 0 && v->dl_tensor.data == buffer,
       "0-d: ndim 0, same data");
    is_int(0, v ? cai_desc_from_dlpack_versioned(v, &back, &err) : -99,
           "0-d: and back");
    ok(back.ndim == 0 && back.data == buffer && !back.has_strides,
       "0-d: back as 0-d, same data, no strides");
    if (v)
        v->deleter(v);

    /* CAI data 0 <-> DLPack NULL for zero-size arrays. */
    base(&d);
    d.shape[0] = 0;
    d.data = NULL;
    is_int(0, cai_desc_to_dlpack(&d, 0, NULL, NULL, &l, &err),
           "a zero-size array with data 0 converts");
    ok(l && l->dl_tensor.data == NULL, "zero-size: DLPack data is NULL");
    if (l)
        l->deleter(l);

    memset(&t, 0, sizeof t);
    t.device.device_type = kDLCUDA;
    t.ndim = 2;
    t.dtype = dtype(kDLFloat, 32, 1);
    t.shape = shape;
    t.strides = strides;
    t.data = NULL;
    t.byte_offset = 64;
    is_int(0, cai_desc_from_dltensor(&t, &back, &err),
           "a zero-size DLTensor with data NULL converts");
    ok(back.data == NULL, "zero-size: CAI data is 0 (byte_offset not added)");
    ok(!back.has_strides, "zero-size: strides None whatever they were");
    ok(back.shape[0] == 0 && back.shape[1] == 5, "zero-size: shape {0, 5}");

    shape[0] = 2;
    is_int(CAI_EINVAL, cai_desc_from_dltensor(&t, &back, &err),
           "a DLTensor with data NULL and 10 elements is refused");
    is_string("data", err.field, "... naming data");

    /* Found by the fuzzer: a zero-size array whose contiguous strides
     * saturate must still come back. */
    base(&d);
    d.ndim = 3;
    d.data = NULL;
    d.shape[0] = 0;
    d.shape[1] = (int64_t)1 << 40;
    d.shape[2] = (int64_t)1 << 40;
    is_int(0, cai_desc_to_dlpack_versioned(&d, 0, NULL, NULL, &v, &err),
           "zero-size (0, 2^40, 2^40) converts");
    is_int(0, v ? cai_desc_from_dlpack_versioned(v, &back, &err) : -99,
           "zero-size (0, 2^40, 2^40) comes back: %s", err.message);
    ok(!back.has_strides && back.shape[2] == d.shape[2],
       "zero-size (0, 2^40, 2^40): same shape, strides None");
    if (v)
        v->deleter(v);

    /* A length-1 axis never applies its stride, so one whose byte value
     * would overflow is not a reason to refuse the tensor. */
    {
        int64_t shape1[2] = {1, 3}, strides1[2] = {INT64_MAX / 2, 2};

        t.data = buffer;
        t.byte_offset = 0;
        t.shape = shape1;
        t.strides = strides1;
        is_int(0, cai_desc_from_dltensor(&t, &back, &err),
               "a huge element stride on a length-1 axis is accepted: %s",
               err.message);
        ok(back.has_strides && back.strides[1] == 8,
           "... and the other strides are kept (8 bytes)");
        strides1[1] = INT64_MAX / 2;
        is_int(CAI_EINVAL, cai_desc_from_dltensor(&t, &back, &err),
               "the same stride on a length-3 axis is refused");
        is_string("strides[1]", err.field, "... naming strides[1]");
    }
}

/* Types with no typestr: described when DLPack defines them (only an
 * interface needs a typestr), packed sub-byte ones included. */
static const struct {
    uint8_t code, bits;
    int status;
    const char *name, *what;
} no_typestr[] = {
    {kDLBfloat, 16, 0, "bfloat16", "bfloat16"},
    {kDLFloat8_e5m2, 8, 0, "float8_e5m2", "float8_e5m2"},
    {kDLFloat4_e2m1fn, 4, 0, "float4_e2m1fn", "float4_e2m1fn (sub-byte)"},
    {kDLInt, 4, 0, "int4", "int4"},
    {kDLInt, 0, CAI_EUNSUPPORTED, "int0", "int0"},
    {kDLOpaqueHandle, 64, 0, NULL, "opaque handle"},
};

static void test_from_dltensor(void)
{
    DLTensor t;
    cai_desc_t d;
    cai_error_t err;
    int64_t shape[CAI_MAX_NDIM + 1], strides[CAI_MAX_NDIM + 1];
    int i;

    memset(&t, 0, sizeof t);
    t.data = buffer;
    t.device.device_type = kDLCUDA;
    t.device.device_id = 2;
    t.ndim = 2;
    t.dtype = dtype(kDLFloat, 32, 1);
    t.shape = shape;
    t.strides = NULL;
    t.byte_offset = 24;
    shape[0] = 3;
    shape[1] = 4;

    memset(&d, 0x5a, sizeof d);
    poison_err(&err);
    is_int(0, cai_desc_from_dltensor(&t, &d, &err),
           "from: a DLTensor without strides converts");
    ok(err_cleared(&err), "from: err cleared");
    ok(d.data == (char *)buffer + 24, "from: byte_offset folded into data");
    ok(!d.has_strides, "from: strides NULL -> None");
    is_int(3, d.version, "from: CAI version 3");
    ok(!d.readonly && !d.has_mask && !d.has_stream,
       "from: writable, no mask, no stream");
    ok(d.device.device_type == kDLCUDA && d.device.device_id == 2,
       "from: device kept");
    ok(d.ndim == 2 && d.shape[0] == 3 && d.shape[1] == 4, "from: shape");
    ok(d.dtype.code == kDLFloat && d.dtype.bits == 32 && d.dtype.lanes == 1,
       "from: dtype");

    t.strides = strides;
    strides[0] = 4;
    strides[1] = 1;
    is_int(0, cai_desc_from_dltensor(&t, &d, &err),
           "from: explicit C strides");
    ok(!d.has_strides, "from: C-contiguous explicit strides -> None");

    strides[0] = 1;
    strides[1] = 3;
    is_int(0, cai_desc_from_dltensor(&t, &d, &err), "from: transposed");
    ok(d.has_strides && d.strides[0] == 4 && d.strides[1] == 12,
       "from: transposed -> byte strides {4, 12}");

    strides[0] = 8;
    strides[1] = 1;
    is_int(0, cai_desc_from_dltensor(&t, &d, &err), "from: row slice");
    ok(d.has_strides && d.strides[0] == 32 && d.strides[1] == 4,
       "from: every other row -> byte strides {32, 4}");

    strides[0] = -4;
    strides[1] = 0;
    is_int(0, cai_desc_from_dltensor(&t, &d, &err),
           "from: negative and zero strides");
    ok(d.has_strides && d.strides[0] == -16 && d.strides[1] == 0,
       "from: -> byte strides {-16, 0}");

    shape[0] = 1;
    strides[0] = 99;
    strides[1] = 1;
    is_int(0, cai_desc_from_dltensor(&t, &d, &err), "from: size-1 dim");
    ok(!d.has_strides, "from: size-1 dim with any stride -> None");

    shape[0] = 4;
    shape[1] = 0;
    strides[0] = 3;
    strides[1] = 5;
    is_int(0, cai_desc_from_dltensor(&t, &d, &err), "from: zero-size");
    ok(!d.has_strides, "from: zero-size -> None");

    t.strides = NULL;
    t.byte_offset = UINT64_MAX - 2;
    is_int(CAI_EINVAL, cai_desc_from_dltensor(&t, &d, &err),
           "from: a byte_offset overflowing the pointer is refused");
    is_string("byte_offset", err.field, "from: ... naming byte_offset");
    t.byte_offset = 0;

    /* Types without a typestr: described, unless they have no bits. */
    shape[0] = 3;
    shape[1] = 4;
    t.strides = NULL;
    for (i = 0; i < (int)(sizeof no_typestr / sizeof no_typestr[0]); i++) {
        t.dtype = dtype(no_typestr[i].code, no_typestr[i].bits, 1);
        is_int(no_typestr[i].status, cai_desc_from_dltensor(&t, &d, &err),
               "from: %s %s", no_typestr[i].what,
               no_typestr[i].status ? "refused" : "described");
        if (no_typestr[i].status)
            contains(err.message, no_typestr[i].name, "from: ... naming %s",
                     no_typestr[i].name);
        else
            ok(d.dtype.code == no_typestr[i].code &&
                   d.dtype.bits == no_typestr[i].bits,
               "from: ... keeping its type");
    }
    /* Packed sub-byte elements: C-contiguous strides (in elements) are
     * kept as no strides; any other layout is refused, naming the axis. */
    t.dtype = dtype(kDLFloat4_e2m1fn, 4, 1);
    t.strides = strides;
    strides[0] = 4;
    strides[1] = 1;
    is_int(0, cai_desc_from_dltensor(&t, &d, &err),
           "from: float4 with C-contiguous strides is described");
    ok(!d.has_strides, "from: ... as C-contiguous");
    strides[0] = 1;
    strides[1] = 3;
    is_int(CAI_EUNSUPPORTED, cai_desc_from_dltensor(&t, &d, &err),
           "from: float4 in Fortran order is refused");
    is_string("strides[1]", err.field, "from: ... naming strides[1]");
    contains(err.message, "packed", "from: ... saying it is packed");
    strides[0] = 5;
    strides[1] = 1;
    is_int(CAI_EUNSUPPORTED, cai_desc_from_dltensor(&t, &d, &err),
           "from: float4 with padded rows is refused");
    is_string("strides[0]", err.field, "from: ... naming strides[0]");
    shape[1] = 1;
    strides[0] = 1;
    strides[1] = 99;
    is_int(0, cai_desc_from_dltensor(&t, &d, &err),
           "from: float4: an axis of length 1 has any stride");
    shape[1] = 4;
    t.strides = NULL;
    t.dtype = dtype(kDLFloat, 32, 1);

    /* Shapes and ndim. */
    shape[1] = -4;
    is_int(CAI_EINVAL, cai_desc_from_dltensor(&t, &d, &err),
           "from: a negative shape is refused");
    is_string("shape[1]", err.field, "from: ... naming shape[1]");
    shape[0] = INT64_C(1) << 40;
    shape[1] = INT64_C(1) << 40;
    is_int(CAI_EINVAL, cai_desc_from_dltensor(&t, &d, &err),
           "from: 2^80 elements are refused");
    shape[0] = INT64_C(1) << 31;
    shape[1] = INT64_C(1) << 31;
    is_int(CAI_EINVAL, cai_desc_from_dltensor(&t, &d, &err),
           "from: 2^64 bytes are refused");
    shape[0] = 3;
    shape[1] = 4;
    t.strides = strides;
    strides[0] = INT64_C(1) << 61;
    strides[1] = 1;
    is_int(CAI_EINVAL, cai_desc_from_dltensor(&t, &d, &err),
           "from: an element stride overflowing 64 bits in bytes is refused");
    is_string("strides[0]", err.field, "from: ... naming strides[0]");
    strides[0] = INT64_C(1) << 60;
    is_int(CAI_EINVAL, cai_desc_from_dltensor(&t, &d, &err),
           "from: a byte extent overflowing 64 bits is refused");
    t.strides = NULL;

    t.shape = NULL;
    is_int(CAI_EINVAL, cai_desc_from_dltensor(&t, &d, &err),
           "from: shape NULL with ndim 2 is refused");
    t.shape = shape;
    for (i = 0; i <= CAI_MAX_NDIM; i++) {
        shape[i] = 1;
        strides[i] = 1;
    }
    t.strides = strides;
    t.ndim = CAI_MAX_NDIM;
    is_int(0, cai_desc_from_dltensor(&t, &d, &err),
           "from: ndim == CAI_MAX_NDIM is accepted");
    is_int(CAI_MAX_NDIM, d.ndim, "from: ... with all its dimensions");
    t.ndim = CAI_MAX_NDIM + 1;
    is_int(CAI_EUNSUPPORTED, cai_desc_from_dltensor(&t, &d, &err),
           "from: ndim CAI_MAX_NDIM + 1 is refused");
    is_string("ndim", err.field, "from: ... naming ndim");
    t.ndim = -1;
    is_int(CAI_EINVAL, cai_desc_from_dltensor(&t, &d, &err),
           "from: ndim -1 is refused");
}

static void never_called(DLManagedTensorVersioned *self)
{
    (void)self;
    abort();
}

static void test_from_versioned(void)
{
    DLManagedTensorVersioned v, *heap;
    DLManagedTensor l;
    cai_desc_t d;
    cai_error_t err;
    int64_t shape[2] = {3, 4};

    memset(&v, 0, sizeof v);
    v.version.major = 1;
    v.version.minor = 3;
    v.deleter = never_called;
    v.dl_tensor.data = buffer;
    v.dl_tensor.device.device_type = kDLCPU;
    v.dl_tensor.ndim = 2;
    v.dl_tensor.dtype = dtype(kDLComplex, 64, 1);
    v.dl_tensor.shape = shape;
    v.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    is_int(0, cai_desc_from_dlpack_versioned(&v, &d, &err),
           "versioned in: converts");
    is_int(1, d.readonly, "versioned in: READ_ONLY -> readonly");
    v.flags = DLPACK_FLAG_BITMASK_IS_COPIED;
    is_int(0, cai_desc_from_dlpack_versioned(&v, &d, &err),
           "versioned in: IS_COPIED is fine");
    is_int(0, d.readonly, "versioned in: no READ_ONLY -> writable");
    v.flags = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    is_int(CAI_EUNSUPPORTED, cai_desc_from_dlpack_versioned(&v, &d, &err),
           "versioned in: padded sub-byte data is refused");
    v.flags = 0;
    v.version.minor = 99;
    is_int(0, cai_desc_from_dlpack_versioned(&v, &d, &err),
           "versioned in: a newer minor version (1.99) is read");

    /* A major version we do not know: touch nothing but the version.  The
     * other fields are garbage: flags would give another error, and the
     * pointers would crash if followed. */
    memset(&v, 0xff, sizeof v);
    v.version.major = 2;
    v.version.minor = 0;
    v.manager_ctx = (void *)(uintptr_t)8;
    v.deleter = never_called;
    v.dl_tensor.data = (void *)(uintptr_t)16;
    v.dl_tensor.shape = (int64_t *)(uintptr_t)24;
    v.dl_tensor.strides = (int64_t *)(uintptr_t)32;
    v.dl_tensor.ndim = 3;
    memset(&d, 0, sizeof d);
    is_int(CAI_EVERSION, cai_desc_from_dlpack_versioned(&v, &d, &err),
           "versioned in: major 2 -> CAI_EVERSION");
    is_string("version", err.field, "versioned in: ... naming version");
    contains(err.message, "2.0", "versioned in: ... saying 2.0");
    ok(d.data == NULL && d.ndim == 0, "versioned in: *out untouched");
    v.version.major = 0;
    is_int(CAI_EVERSION, cai_desc_from_dlpack_versioned(&v, &d, &err),
           "versioned in: major 0 -> CAI_EVERSION");
    v.version.major = 0xffffffffu;
    is_int(CAI_EVERSION, cai_desc_from_dlpack_versioned(&v, &d, &err),
           "versioned in: major 2^32-1 -> CAI_EVERSION");

    /* Only the version written: valgrind reports any branch on the rest. */
    heap = malloc(sizeof *heap);
    if (heap == NULL)
        bail("out of memory");
    heap->version.major = 2;
    heap->version.minor = 1;
    is_int(CAI_EVERSION, cai_desc_from_dlpack_versioned(heap, &d, &err),
           "versioned in: major 2 with uninitialised fields -> CAI_EVERSION");
    free(heap);

    /* Legacy in. */
    memset(&l, 0, sizeof l);
    l.dl_tensor = v.dl_tensor;
    l.dl_tensor.data = buffer;
    l.dl_tensor.ndim = 2;
    l.dl_tensor.shape = shape;
    l.dl_tensor.strides = NULL;
    l.dl_tensor.byte_offset = 8;
    l.dl_tensor.dtype = dtype(kDLUInt, 8, 1);
    l.dl_tensor.device.device_type = kDLCUDAHost;
    l.dl_tensor.device.device_id = 0;
    is_int(0, cai_desc_from_dlpack(&l, &d, &err), "legacy in: converts");
    ok(d.data == (char *)buffer + 8 && !d.readonly && !d.has_strides &&
           d.dtype.code == kDLUInt && d.dtype.bits == 8 &&
           d.device.device_type == kDLCUDAHost,
       "legacy in: data+offset, writable, uint8, CUDAHost");
    /* A type with no typestr is described: only an interface needs one. */
    l.dl_tensor.dtype = dtype(kDLBfloat, 16, 1);
    is_int(0, cai_desc_from_dlpack(&l, &d, &err),
           "legacy in: bfloat16 is described");
    ok(d.dtype.code == kDLBfloat && d.dtype.bits == 16 && !d.has_strides,
       "legacy in: ... as bfloat16, C-contiguous");
    l.dl_tensor.dtype = dtype(kDLFloat8_e4m3fn, 8, 1);
    is_int(0, cai_desc_from_dlpack(&l, &d, &err),
           "legacy in: float8_e4m3fn is described");
    l.dl_tensor.dtype = dtype(kDLFloat4_e2m1fn, 4, 1);
    is_int(0, cai_desc_from_dlpack(&l, &d, &err),
           "legacy in: float4_e2m1fn (4 bits, packed) is described");
    l.dl_tensor.dtype = dtype(kDLFloat4_e2m1fn, 4, 2);
    is_int(0, cai_desc_from_dlpack(&l, &d, &err),
           "legacy in: float4_e2m1fn x2 (a whole byte) is described");
    l.dl_tensor.dtype = dtype(kDLFloat4_e2m1fn + 1, 8, 1);
    is_int(CAI_EUNSUPPORTED, cai_desc_from_dlpack(&l, &d, &err),
           "legacy in: an unknown type code refused");
}

static int same_desc(const cai_desc_t *a, const cai_desc_t *b)
{
    int i;

    if (a->data != b->data || a->ndim != b->ndim ||
        a->readonly != b->readonly || a->has_strides != b->has_strides ||
        a->dtype.code != b->dtype.code || a->dtype.bits != b->dtype.bits ||
        a->dtype.lanes != b->dtype.lanes ||
        a->device.device_type != b->device.device_type ||
        a->device.device_id != b->device.device_id) {
        diag("data %p/%p ndim %d/%d readonly %d/%d has_strides %d/%d", a->data,
             b->data, a->ndim, b->ndim, a->readonly, b->readonly,
             a->has_strides, b->has_strides);
        return 0;
    }
    for (i = 0; i < a->ndim; i++) {
        if (a->shape[i] != b->shape[i] ||
            (a->has_strides && a->strides[i] != b->strides[i])) {
            diag("axis %d: shape %lld/%lld strides %lld/%lld", i,
                 (long long)a->shape[i], (long long)b->shape[i],
                 (long long)a->strides[i], (long long)b->strides[i]);
            return 0;
        }
    }
    return 1;
}

/*
 * Each side's own addressing rule, written here from the two specs rather
 * than taken from caibridge: CAI, the pointer plus index times byte stride
 * (C order in bytes when there are no strides); DLPack, data plus
 * byte_offset plus index times element stride times the item size (C order
 * in elements when strides is NULL).  Exact: a product or sum that
 * overflows makes the address unknown (-1 from these).
 */
static int cai_address(const cai_desc_t *d, const int64_t *idx, uintptr_t *out)
{
    int64_t itemsize = (d->dtype.bits * d->dtype.lanes + 7) / 8, off = 0;
    int64_t step = itemsize, term;
    int i;

    for (i = d->ndim - 1; i >= 0; i--) {
        int64_t stride = d->has_strides ? d->strides[i] : step;

        if (__builtin_mul_overflow(idx[i], stride, &term) ||
            __builtin_add_overflow(off, term, &off))
            return -1;
        step *= d->shape[i];
    }
    *out = (uintptr_t)d->data + (uintptr_t)off;
    return 0;
}

static int dl_address(const DLTensor *t, const int64_t *idx, uintptr_t *out)
{
    int64_t itemsize = (t->dtype.bits * t->dtype.lanes + 7) / 8, off = 0;
    int64_t step = 1, term;
    int i;

    for (i = t->ndim - 1; i >= 0; i--) {
        int64_t stride = t->strides != NULL ? t->strides[i] : step;

        if (__builtin_mul_overflow(idx[i], stride, &term) ||
            __builtin_mul_overflow(term, itemsize, &term) ||
            __builtin_add_overflow(off, term, &off))
            return -1;
        step *= t->shape[i];
    }
    *out = (uintptr_t)t->data + (uintptr_t)t->byte_offset + (uintptr_t)off;
    return 0;
}

/* Every element of d has the same address in t, by each spec's own rule;
 * the shapes must agree first. */
static int same_elements(const cai_desc_t *d, const DLTensor *t)
{
    int64_t idx[CAI_MAX_NDIM] = {0};
    int i;

    if (t->ndim != d->ndim)
        return 0;
    for (i = 0; i < d->ndim; i++)
        if (t->shape[i] != d->shape[i])
            return 0;
    for (i = 0; i < d->ndim; i++)
        if (d->shape[i] == 0)
            return 1; /* no element */
    for (;;) {
        uintptr_t a, b;

        if (cai_address(d, idx, &a) != 0 || dl_address(t, idx, &b) != 0 ||
            a != b) {
            diag("element differs or overflows at index [%lld, ...]",
                 (long long)(d->ndim > 0 ? idx[0] : 0));
            return 0;
        }
        for (i = d->ndim - 1; i >= 0 && ++idx[i] == d->shape[i]; i--)
            idx[i] = 0;
        if (i < 0)
            return 1;
    }
}

static void round_trip(const cai_desc_t *d, const char *what)
{
    DLManagedTensorVersioned *v = NULL;
    DLManagedTensor *l = NULL;
    cai_desc_t back;
    int released = 0;

    memset(&back, 0x33, sizeof back);
    is_int(
        0,
        cai_desc_to_dlpack_versioned(d, 0, &released, count_release, &v, NULL),
        "round trip %s: to versioned", what);
    ok(v && same_elements(d, &v->dl_tensor),
       "round trip %s: versioned addresses every element where CAI does",
       what);
    ok(v && cai_desc_from_dlpack_versioned(v, &back, NULL) == 0 &&
           same_desc(d, &back),
       "round trip %s: desc -> versioned -> desc is the same", what);
    if (v)
        v->deleter(v);
    if (d->readonly) {
        is_int(1, released, "round trip %s: released once", what);
        return;
    }
    memset(&back, 0x33, sizeof back);
    is_int(0, cai_desc_to_dlpack(d, 0, &released, count_release, &l, NULL),
           "round trip %s: to legacy", what);
    ok(l && same_elements(d, &l->dl_tensor),
       "round trip %s: legacy addresses every element where CAI does", what);
    ok(l && cai_desc_from_dlpack(l, &back, NULL) == 0 && same_desc(d, &back),
       "round trip %s: desc -> legacy -> desc is the same", what);
    if (l)
        l->deleter(l);
    is_int(2, released, "round trip %s: released once per tensor", what);
}

static void test_round_trips(void)
{
    cai_desc_t d;

    base(&d);
    round_trip(&d, "3x4 float32, no strides");
    d.device.device_type = kDLCUDA;
    d.device.device_id = 1;
    d.dtype = dtype(kDLComplex, 128, 1);
    d.has_strides = 1;
    d.shape[0] = 4;
    d.shape[1] = 3;
    d.strides[0] = 16;
    d.strides[1] = 64;
    round_trip(&d, "transposed complex128 on CUDA:1");
    d.dtype = dtype(kDLBool, 8, 1);
    d.strides[0] = -3;
    d.strides[1] = 0;
    d.data = (char *)buffer + 9;
    round_trip(&d, "negative and broadcast bool");
    base(&d);
    d.readonly = 1;
    d.device.device_type = kDLCUDAManaged;
    d.has_strides = 1;
    d.strides[0] = 32;
    d.strides[1] = 4;
    round_trip(&d, "read-only row slice, managed memory");
    base(&d);
    d.ndim = 0;
    d.dtype = dtype(kDLInt, 64, 1);
    round_trip(&d, "0-d int64");
    base(&d);
    d.shape[1] = 0;
    d.data = NULL;
    round_trip(&d, "zero-size with data 0");
    base(&d);
    d.ndim = 3;
    d.shape[2] = 1;
    d.dtype = dtype(kDLFloat, 16, 1);
    round_trip(&d, "float16 with a size-1 axis");

    /* The legacy opt-in for read-only data loses the flag, as documented. */
    {
        DLManagedTensor *l = NULL;
        cai_desc_t back;

        base(&d);
        d.readonly = 1;
        is_int(0,
               cai_desc_to_dlpack(&d, CAI_OPT_LEGACY_READONLY_OK, NULL, NULL,
                                  &l, NULL),
               "read-only to legacy with the opt-in");
        ok(l && cai_desc_from_dlpack(l, &back, NULL) == 0 && !back.readonly,
           "... comes back writable: a legacy tensor cannot say read-only");
        if (l)
            l->deleter(l);
    }
}

/* Foreign tensors, written here as a producer would, read by the core:
 * the descriptor must address every element where the tensor does. */
static void test_foreign_addresses(void)
{
    static const struct {
        const char *what;
        int ndim;
        int64_t shape[3], strides[3];
        int null_strides;
        uint64_t byte_offset;
        uint8_t code, bits;
    } cases[] = {
        {"C order, strides NULL", 2, {3, 4}, {0, 0}, 1, 0, kDLFloat, 32},
        {"transposed", 2, {4, 3}, {1, 4}, 0, 0, kDLFloat, 64},
        {"reversed rows, byte_offset", 2, {3, 4}, {-4, 1}, 0, 96, kDLInt, 16},
        {"broadcast and strided", 3, {2, 3, 2}, {0, 2, -1}, 0, 8, kDLUInt, 8},
        {"row slice of complex64", 2, {2, 3}, {6, 1}, 0, 0, kDLComplex, 64},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DLTensor t;
        cai_desc_t d;
        int64_t shape[3], strides[3];

        memcpy(shape, cases[i].shape, sizeof shape);
        memcpy(strides, cases[i].strides, sizeof strides);
        memset(&t, 0, sizeof t);
        t.data = buffer;
        t.device.device_type = kDLCPU;
        t.ndim = cases[i].ndim;
        t.dtype = dtype(cases[i].code, cases[i].bits, 1);
        t.shape = shape;
        t.strides = cases[i].null_strides ? NULL : strides;
        t.byte_offset = cases[i].byte_offset;
        ok(cai_desc_from_dltensor(&t, &d, NULL) == 0 && same_elements(&d, &t),
           "foreign %s: the descriptor addresses every element where the "
           "tensor does",
           cases[i].what);
    }
}

int main(void)
{
    plan(313 + 13 + 5 + 9);
    test_foreign_addresses();
    test_to_versioned();
    test_to_legacy();
    test_failures();
    test_zero_d_and_zero_size();
    test_from_dltensor();
    test_from_versioned();
    test_round_trips();
    return 0;
}
