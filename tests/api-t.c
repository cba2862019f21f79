/*
 * The argument rules every public function keeps (issue 45, caibridge.h's
 * head comment): a NULL pointer is CAI_EINVAL naming the argument, never a
 * crash; an options bit this library does not know is CAI_EINVAL naming
 * the bits, never ignored; and cai_desc_validate, the conversions and the
 * from_* functions refuse the same descriptors with the same status.
 * A conversion refused so still releases its owner exactly once.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "caibridge.h"
#include "tap/basic.h"
#include "test-util.h"

static float data[64];

static void count_release(void *owner)
{
    ++*(int *)owner;
}

/* rc is CAI_EINVAL and err names field. */
static void einval(int rc, const cai_error_t *err, const char *field,
                   const char *what)
{
    is_int(CAI_EINVAL, rc, "%s: CAI_EINVAL", what);
    is_string(field, err->field, "%s: names %s", what, field);
}

static void test_null_host(void)
{
    cai_desc_t d, out;
    cai_error_t err;
    DLDataType type;
    DLTensor t;
    DLManagedTensor legacy;
    DLManagedTensorVersioned versioned, *v = NULL;
    DLManagedTensor *l = NULL;
    int64_t shape[2] = {3, 4}, strides[2] = {16, 4}, lo = 1, hi = 1;
    int64_t elements[2];
    int released = 0;

    einval(cai_typestr_parse(NULL, 3, &type, &err), &err, "typestr",
           "typestr_parse(typestr NULL)");
    einval(cai_typestr_parse("<f4", 3, NULL, &err), &err, "out",
           "typestr_parse(out NULL)");
    einval(cai_typestr_format(dtype(kDLFloat, 32, 1), NULL, &err), &err, "out",
           "typestr_format(out NULL)");
    is_int(CAI_EINVAL, cai_typestr_format(dtype(kDLFloat, 32, 1), NULL, NULL),
           "typestr_format(out NULL, err NULL): CAI_EINVAL");

    /* The three that crashed with no word in the header. */
    einval(cai_strides_bytes_to_elements(2, shape, strides, 4, NULL, &err),
           &err, "out", "strides_bytes_to_elements(out NULL)");
    einval(cai_strides_bytes_to_elements(2, NULL, strides, 4, elements, &err),
           &err, "shape", "strides_bytes_to_elements(shape NULL)");
    einval(cai_strides_bytes_to_elements(2, shape, NULL, 4, elements, &err),
           &err, "bytes", "strides_bytes_to_elements(bytes NULL)");
    is_int(0, cai_strides_bytes_to_elements(0, NULL, NULL, 4, NULL, &err),
           "strides_bytes_to_elements: NULLs with ndim 0 are fine");
    einval(cai_strides_elements_to_bytes(2, shape, 4, NULL, &err), &err, "out",
           "strides_elements_to_bytes(out NULL)");
    einval(cai_strides_elements_to_bytes(2, NULL, 4, elements, &err), &err,
           "elements", "strides_elements_to_bytes(elements NULL)");
    einval(cai_layout_extent(2, NULL, NULL, 4, 0, &lo, &hi, &err), &err,
           "shape", "layout_extent(shape NULL, ndim 2)");
    ok(lo == 0 && hi == 0, "layout_extent(shape NULL): *lo = *hi = 0");
    einval(cai_layout_extent(2, shape, NULL, 4, 0, NULL, &hi, &err), &err,
           "lo", "layout_extent(lo NULL)");
    einval(cai_layout_extent(2, shape, NULL, 4, 0, &lo, NULL, &err), &err,
           "hi", "layout_extent(hi NULL)");
    is_int(0, cai_is_c_contiguous(2, NULL, strides, 4),
           "is_c_contiguous(shape NULL, strides): 0, no crash");
    is_int(1, cai_is_c_contiguous(2, NULL, NULL, 4),
           "is_c_contiguous(shape NULL, no strides): 1 (C-contiguous)");

    einval(cai_desc_validate(NULL, &err), &err, "desc",
           "desc_validate(desc NULL)");
    float_desc(&d, data, 2, 3, 4);
    einval(cai_desc_to_dlpack_versioned(NULL, 0, &released, count_release, &v,
                                        &err),
           &err, "desc", "to_dlpack_versioned(desc NULL)");
    einval(cai_desc_to_dlpack_versioned(&d, 0, &released, count_release, NULL,
                                        &err),
           &err, "out", "to_dlpack_versioned(out NULL)");
    einval(cai_desc_to_dlpack(NULL, 0, &released, count_release, &l, &err),
           &err, "desc", "to_dlpack(desc NULL)");
    einval(cai_desc_to_dlpack(&d, 0, &released, count_release, NULL, &err),
           &err, "out", "to_dlpack(out NULL)");
    is_int(4, released, "the conversions released the owner once each");
    ok(v == NULL && l == NULL, "the conversions' *out is NULL");

    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.dtype = dtype(kDLFloat, 32, 1);
    einval(cai_desc_from_dltensor(NULL, &out, &err), &err, "tensor",
           "from_dltensor(tensor NULL)");
    einval(cai_desc_from_dltensor(&t, NULL, &err), &err, "out",
           "from_dltensor(out NULL)");
    memset(&versioned, 0, sizeof versioned);
    versioned.version.major = DLPACK_MAJOR_VERSION;
    versioned.dl_tensor = t;
    einval(cai_desc_from_dlpack_versioned(NULL, &out, &err), &err, "tensor",
           "from_dlpack_versioned(tensor NULL)");
    einval(cai_desc_from_dlpack_versioned(&versioned, NULL, &err), &err, "out",
           "from_dlpack_versioned(out NULL)");
    memset(&legacy, 0, sizeof legacy);
    legacy.dl_tensor = t;
    einval(cai_desc_from_dlpack(NULL, &out, &err), &err, "tensor",
           "from_dlpack(tensor NULL)");
    einval(cai_desc_from_dlpack(&legacy, NULL, &err), &err, "out",
           "from_dlpack(out NULL)");
    /* A NULL deleter is the tensor's business: it is described. */
    is_int(0, cai_desc_from_dlpack_versioned(&versioned, &out, &err),
           "from_dlpack_versioned: a NULL deleter is fine");
}

/* The CUDA functions' pointers are checked before any runtime is loaded,
 * so this holds with or without CUDA and with no GPU. */
static void test_null_cuda(void)
{
    cai_desc_t d;
    cai_error_t err;
    cai_fence_t *fence = (cai_fence_t *)&d;

    float_desc(&d, data, 1, 4, 1);
    einval(cai_cuda_runtime_version(NULL, &err), &err, "version",
           "cuda_runtime_version(NULL)");
    einval(cai_cuda_locate(data, NULL, &err), &err, "out",
           "cuda_locate(out NULL)");
    einval(cai_cuda_locate_desc(NULL, &d.device, &err), &err, "desc",
           "cuda_locate_desc(desc NULL)");
    einval(cai_cuda_locate_desc(&d, NULL, &err), &err, "out",
           "cuda_locate_desc(out NULL)");
    einval(cai_cuda_order(NULL, CAI_STREAM_LEGACY, &err), &err, "producer",
           "cuda_order(producer NULL)");
    einval(cai_fence_record(NULL, &fence, &err), &err, "producer",
           "fence_record(producer NULL)");
    ok(fence == NULL, "fence_record(producer NULL): *out is NULL");
    einval(cai_fence_record(&d, NULL, &err), &err, "out",
           "fence_record(out NULL)");
}

/* A bit from a newer header: refused, named, the owner released once. */
static void test_unknown_options(void)
{
    const unsigned unknown[] = {1u << 2, 1u << 7, 1u << 31,
                                CAI_OPT_IS_COPIED | (1u << 5)};
    cai_desc_t d;
    cai_error_t err;
    DLManagedTensorVersioned *v;
    DLManagedTensor *l;
    char want[32];
    size_t i;
    int released;

    float_desc(&d, data, 2, 3, 4);
    for (i = 0; i < sizeof unknown / sizeof *unknown; i++) {
        unsigned bits = unknown[i] & ~(unsigned)CAI_OPT_IS_COPIED;

        released = 0;
        v = (DLManagedTensorVersioned *)&d;
        einval(cai_desc_to_dlpack_versioned(&d, unknown[i], &released,
                                            count_release, &v, &err),
               &err, "options", "to_dlpack_versioned, an unknown option");
        snprintf(want, sizeof want, "0x%x", bits);
        contains(err.message, want, "to_dlpack_versioned: names bits %s",
                 want);
        ok(v == NULL, "to_dlpack_versioned, unknown option: *out is NULL");
        l = (DLManagedTensor *)&d;
        einval(cai_desc_to_dlpack(&d, unknown[i], &released, count_release, &l,
                                  &err),
               &err, "options", "to_dlpack, an unknown option");
        contains(err.message, want, "to_dlpack: names bits %s", want);
        ok(l == NULL, "to_dlpack, unknown option: *out is NULL");
        snprintf(want, sizeof want, "0x%x",
                 unknown[i] & ~(unsigned)CAI_RELEASE_BLOCK);
        einval(cai_fence_release_owner(NULL, CAI_STREAM_LEGACY, unknown[i],
                                       &released, count_release, &err),
               &err, "options", "fence_release_owner, an unknown option");
        contains(err.message, want, "fence_release_owner: names bits %s",
                 want);
        is_int(3, released, "each refusal released the owner once");
    }
    /* The known ones still pass. */
    released = 0;
    v = NULL;
    is_int(0,
           cai_desc_to_dlpack_versioned(
               &d, CAI_OPT_IS_COPIED | CAI_OPT_LEGACY_READONLY_OK, &released,
               count_release, &v, &err),
           "to_dlpack_versioned: both known options are taken");
    if (v != NULL)
        v->deleter(v);
    is_int(0,
           cai_fence_release_owner(NULL, CAI_STREAM_NO_SYNC, CAI_RELEASE_BLOCK,
                                   &released, count_release, &err),
           "fence_release_owner: CAI_RELEASE_BLOCK is taken");
    is_int(2, released, "and the owners were released");
}

/* One descriptor, the same verdict from validate and both conversions. */
static void same_verdict(const cai_desc_t *d, int status, const char *field,
                         const char *what)
{
    cai_error_t err;
    DLManagedTensorVersioned *v = NULL;
    DLManagedTensor *l = NULL;
    int released = 0;

    is_int(status, cai_desc_validate(d, &err), "validate, %s", what);
    is_string(field, err.field, "validate, %s: names %s", what, field);
    is_int(
        status,
        cai_desc_to_dlpack_versioned(d, 0, &released, count_release, &v, &err),
        "to_dlpack_versioned, %s", what);
    is_string(field, err.field, "to_dlpack_versioned, %s: names %s", what,
              field);
    is_int(status,
           cai_desc_to_dlpack(d, 0, &released, count_release, &l, &err),
           "to_dlpack, %s", what);
    if (v != NULL)
        v->deleter(v);
    if (l != NULL)
        l->deleter(l);
    is_int(2, released, "%s: each conversion released once", what);
}

/* A tensor's device or dtype: from_* refuse what the conversions do. */
static void from_refuses(DLDevice device, DLDataType type, int status,
                         const char *field, const char *what)
{
    DLManagedTensorVersioned t;
    cai_desc_t out;
    cai_error_t err;
    int64_t shape[1] = {4};

    memset(&t, 0, sizeof t);
    t.version.major = DLPACK_MAJOR_VERSION;
    t.dl_tensor.data = data;
    t.dl_tensor.device = device;
    t.dl_tensor.ndim = 1;
    t.dl_tensor.dtype = type;
    t.dl_tensor.shape = shape;
    is_int(status, cai_desc_from_dlpack_versioned(&t, &out, &err),
           "from_dlpack_versioned, %s", what);
    is_string(field, err.field, "from_dlpack_versioned, %s: names %s", what,
              field);
    is_int(status, cai_desc_from_dltensor(&t.dl_tensor, &out, &err),
           "from_dltensor, %s", what);
}

static void test_one_rule_set(void)
{
    cai_desc_t d;
    DLDevice dev;

    float_desc(&d, data, 2, 3, 4);
    d.device.device_type = (DLDeviceType)0;
    same_verdict(&d, CAI_EINVAL, "device", "device_type 0");
    float_desc(&d, data, 2, 3, 4);
    d.device.device_type = (DLDeviceType)12345;
    same_verdict(&d, CAI_EUNSUPPORTED, "device", "device_type 12345");
    d.device.device_type = (DLDeviceType)5;
    same_verdict(&d, CAI_EUNSUPPORTED, "device", "device_type 5 (unused)");
    d.device.device_type = (DLDeviceType)-3;
    same_verdict(&d, CAI_EINVAL, "device", "device_type -3");
    float_desc(&d, data, 2, 3, 4);
    d.device.device_id = -7;
    same_verdict(&d, CAI_EINVAL, "device", "a CPU device_id -7");
    float_desc(&d, data, 2, 3, 4);
    d.dtype.code = 200;
    same_verdict(&d, CAI_EUNSUPPORTED, "dtype", "dtype.code 200");
    float_desc(&d, data, 2, 3, 4);
    same_verdict(&d, CAI_OK, "", "a valid descriptor");
    d.device.device_type = kDLTrn;
    d.device.device_id = 3;
    same_verdict(&d, CAI_OK, "", "kDLTrn:3, the last device type");

    dev.device_type = (DLDeviceType)999;
    dev.device_id = 0;
    from_refuses(dev, dtype(kDLFloat, 32, 1), CAI_EUNSUPPORTED, "device",
                 "device_type 999");
    dev.device_type = (DLDeviceType)0;
    from_refuses(dev, dtype(kDLFloat, 32, 1), CAI_EINVAL, "device",
                 "device_type 0");
    dev.device_type = kDLCPU;
    dev.device_id = -7;
    from_refuses(dev, dtype(kDLFloat, 32, 1), CAI_EINVAL, "device",
                 "CPU device_id -7");
    dev.device_id = 0;
    from_refuses(dev, dtype(200, 32, 1), CAI_EUNSUPPORTED, "dtype",
                 "dtype.code 200");
}

/* The ABI promise (docs/reference/c.rst): within libcaibridge.so.0 the
 * public structs keep their layout.  Pinned on LP64, where it was set. */
static void test_layouts(void)
{
    if (sizeof(void *) != 8 || sizeof(intptr_t) != 8) {
        skip("the layouts are pinned for 64-bit systems");
        return;
    }
    is_int(1080, (long long)sizeof(cai_desc_t), "sizeof(cai_desc_t)");
    is_int(32, (long long)offsetof(cai_desc_t, stream), "cai_desc_t.stream");
    is_int(40, (long long)offsetof(cai_desc_t, dtype), "cai_desc_t.dtype");
    is_int(44, (long long)offsetof(cai_desc_t, device), "cai_desc_t.device");
    is_int(56, (long long)offsetof(cai_desc_t, shape), "cai_desc_t.shape");
    is_int(568, (long long)offsetof(cai_desc_t, strides),
           "cai_desc_t.strides");
    is_int(260, (long long)sizeof(cai_error_t), "sizeof(cai_error_t)");
    is_int(4, (long long)offsetof(cai_error_t, field), "cai_error_t.field");
    is_int(36, (long long)offsetof(cai_error_t, message),
           "cai_error_t.message");
    is_int(64, CAI_MAX_NDIM, "CAI_MAX_NDIM");
    is_int(1, CAI_OPT_LEGACY_READONLY_OK, "CAI_OPT_LEGACY_READONLY_OK");
    is_int(2, CAI_OPT_IS_COPIED, "CAI_OPT_IS_COPIED");
    is_int(1, CAI_RELEASE_BLOCK, "CAI_RELEASE_BLOCK");
}

/* cai_stats: the caller's size, checked; a larger (newer) struct is
 * filled up to this library's; reset leaves every counter 0. */
static void test_stats(void)
{
    struct {
        cai_stats_t s;
        uint64_t newer;
    } big;
    cai_stats_t s;
    cai_error_t err;

    einval(cai_stats(NULL, sizeof s, &err), &err, "out", "stats(out NULL)");
    einval(cai_stats(&s, offsetof(cai_stats_t, cuda_errors), &err), &err,
           "size", "stats(size short of cuda_errors)");
    cai_stats_reset();
    memset(&big, 0xff, sizeof big);
    ok(cai_stats(&big.s, sizeof big, &err) == 0, "stats(a newer size)");
    is_int(CAI_STATS_VERSION, big.s.version, "stats: version");
    is_int((long long)sizeof(cai_stats_t), big.s.size,
           "stats: size filled is the library's");
    ok(big.newer == UINT64_MAX, "stats: nothing written past its own size");
    ok(big.s.views == 0 && big.s.records == 0 && big.s.cuda_errors == 0 &&
           big.s.host_copy_bytes == 0,
       "stats: reset counters are 0");
    is_int(128, (long long)sizeof(cai_stats_t), "sizeof(cai_stats_t)");
}

int main(void)
{
    plan_lazy();
    test_layouts();
    test_null_host();
    test_null_cuda();
    test_unknown_options();
    test_one_rule_set();
    test_stats();
    return 0;
}
