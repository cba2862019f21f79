/*
 * The CUDA entry points of a build without CUDA: every one says so.
 */
#include "config.h"

#include <stdlib.h>

#include "cuda-copy.h"
#include "cuda-internal.h"
#include "cuda-release.h"

#ifndef HAVE_CUDA

static int no_cuda(const char *field, cai_error_t *err)
{
    return cai_fail(err, CAI_ENOCUDA, field,
                    "caibridge was built without CUDA support "
                    "(configured --without-cuda or without the CUDA "
                    "toolkit headers)");
}


int cai_cuda_built(void)
{
    return 0;
}

int cai_cuda_runtime_version(int *version, cai_error_t *err)
{
    if (version == NULL)
        return cai_null_arg(err, "version");
    *version = 0;
    return no_cuda("", err);
}

int cai_cuda_locate(const void *ptr, DLDevice *out, cai_error_t *err)
{
    (void)ptr;
    if (out == NULL)
        return cai_null_arg(err, "out");
    out->device_type = (DLDeviceType)0;
    out->device_id = 0;
    return no_cuda("data", err);
}

int cai_cuda_locate_desc(const cai_desc_t *desc, DLDevice *out,
                         cai_error_t *err)
{
    if (desc == NULL)
        return cai_null_arg(err, "desc");
    return cai_cuda_locate(desc->data, out, err);
}

int cai_locate_record(cai_desc_t *desc, int order, cai_fence_t **out,
                      cai_error_t *err)
{
    (void)order;
    *out = NULL;
    return cai_cuda_locate(desc->data, &desc->device, err);
}

int cai_record_fence(const cai_desc_t *producer, cai_fence_t **out,
                     cai_error_t *err)
{
    (void)producer;
    *out = NULL;
    return no_cuda("stream", err);
}

int cai_wait_fence(const cai_fence_t *fence, intptr_t consumer,
                   cai_consumer_at *at, cai_error_t *err)
{
    (void)fence;
    (void)consumer;
    (void)at;
    return no_cuda("stream", err);
}

int cai_order_now(const cai_desc_t *producer, intptr_t consumer,
                  cai_error_t *err)
{
    (void)producer;
    (void)consumer;
    return no_cuda("stream", err);
}

int cai_synchronize(intptr_t stream, cai_error_t *err)
{
    (void)stream;
    return no_cuda("stream", err);
}

int cai_fence_synchronize(const cai_fence_t *fence, cai_error_t *err)
{
    (void)fence;
    return cai_ok(err);
}

int cai_fence_release(const cai_fence_t *fence, intptr_t consumer_stream,
                      cai_error_t *err)
{
    int rc = cai_check_stream_value(consumer_stream, "consumer ", err);

    (void)fence; /* never made without CUDA */
    if (rc == 0)
        cai_ok(err);
    return rc;
}

int cai_fence_release_owner(const cai_fence_t *fence, intptr_t consumer_stream,
                            unsigned flags, void *owner,
                            cai_release_fn release, cai_error_t *err)
{
    int rc = cai_fence_release(fence, consumer_stream, err);

    if (rc == 0 && (flags & ~CAI_RELEASE_OPTIONS_KNOWN))
        rc = cai_unknown_bits(err, "options",
                              flags & ~CAI_RELEASE_OPTIONS_KNOWN);
    if (release != NULL)
        release(owner);
    return rc;
}

int cai_fence_release_owner_at(const cai_fence_t *fence,
                               intptr_t consumer_stream,
                               const cai_consumer_at *at, unsigned flags,
                               void *owner, cai_release_fn release,
                               cai_error_t *err)
{
    (void)at;
    return cai_fence_release_owner(fence, consumer_stream, flags, owner,
                                   release, err);
}

int cai_release_owner_on(intptr_t stream, DLDevice device,
                         const cai_consumer_at *at, unsigned flags,
                         void *owner, cai_release_fn release, cai_error_t *err)
{
    (void)device;
    (void)at;
    return cai_fence_release_owner(NULL, stream, flags, owner, release, err);
}

/* No fence is ever made without CUDA: nothing to share or to wait on. */
cai_fence_t *cai_fence_share(cai_fence_t *fence)
{
    return fence;
}

int cai_fence_is_shared(const cai_fence_t *fence)
{
    (void)fence;
    return 0;
}

int cai_fence_wait_once_at(const cai_fence_t *fence, intptr_t consumer_stream,
                           cai_consumer_at *at, cai_error_t *err)
{
    return cai_fence_wait_at(fence, consumer_stream, at, err);
}

int cai_fence_wait_once(const cai_fence_t *fence, intptr_t consumer_stream,
                        cai_error_t *err)
{
    return cai_fence_wait(fence, consumer_stream, err);
}

int cai_release_poll(int wait, cai_error_t *err)
{
    (void)wait;
    return cai_ok(err);
}

long cai_release_pending_count(void)
{
    return 0;
}

void cai_release_set_waker(void (*fn)(void))
{
    (void)fn;
}

int cai_release_ready(void)
{
    return 0;
}

int cai_release_watchable(void)
{
    return 0;
}

int cai_fence_destroy(cai_fence_t *fence, cai_error_t *err)
{
    free(fence);
    return cai_ok(err);
}

int cai_cuda_copy(const cai_desc_t *d, intptr_t consumer, int to_host,
                  cai_copy_t *out, cai_error_t *err)
{
    (void)d;
    (void)consumer;
    (void)to_host;
    out->data = NULL;
    return no_cuda("copy", err);
}

int cai_cuda_copy_wait(const cai_copy_t *copy, cai_error_t *err)
{
    (void)copy;
    return no_cuda("copy", err);
}

int cai_cuda_copy_free(const cai_copy_t *copy, cai_error_t *err)
{
    (void)copy;
    return no_cuda("copy", err);
}

#else
/* ISO C wants at least one declaration in a file. */
typedef int cai_cuda_none_unused;
#endif
