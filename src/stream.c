/*
 * Stream-ordered hand-over: the checks of stream values and the entry
 * points, the same with and without CUDA.  The CUDA work itself is in
 * cuda-fence.c (cuda-none.c when built without CUDA).
 */
#include "config.h"

#include <stdlib.h>

#include "cuda-internal.h"
#include "cuda-release.h"

unsigned long long cai_thread_id(void)
{
    static unsigned long long next;
    static __thread unsigned long long mine;

    if (mine == 0)
        mine = __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
    return mine;
}

/* Stream arguments shared by both builds: they need no CUDA to check. */
int cai_check_stream_value(intptr_t stream, const char *whose,
                           cai_error_t *err)
{
    if (stream == 0)
        return cai_fail(err, CAI_EINVAL, "stream",
                        "%sstream = 0 is disallowed by DLPack and CAI v3 "
                        "(ambiguous between the legacy and per-thread "
                        "default streams); use 1 (legacy), 2 (per-thread) "
                        "or a stream handle",
                        whose);
    if (stream < CAI_STREAM_NO_SYNC)
        return cai_fail(err, CAI_EINVAL, "stream",
                        "%sstream = %lld is not a stream: -1 means no "
                        "synchronization, 1 and 2 the default streams, "
                        "other values are cudaStream_t handles",
                        whose, (long long)stream);
    return 0;
}

/* Checks the producer's stream; 1 when there is something to order, 0
 * (err cleared) when not.  Reads has_stream and stream only. */
static int producer_needs_order(const cai_desc_t *producer, cai_error_t *err)
{
    int rc;

    if (!producer->has_stream)
        return cai_ok(err);
    rc = cai_check_stream_value(producer->stream, "producer ", err);
    if (rc != 0)
        return rc;
    if (producer->stream == CAI_STREAM_NO_SYNC)
        return cai_fail(err, CAI_EINVAL, "stream",
                        "producer stream = -1 is not a stream: CAI v3 gives "
                        "None, 1, 2 or a cudaStream_t handle");
    return 1;
}

intptr_t cai_cuda_stream_from_handle(uintptr_t handle)
{
    return handle == 0 ? CAI_STREAM_LEGACY : (intptr_t)handle;
}

/* producer_needs_order, and 0 too when no element is read (so no write
 * has to be waited for). */
static int producer_needs_fence(const cai_desc_t *producer, cai_error_t *err)
{
    int64_t count;
    int rc = producer_needs_order(producer, err);

    if (rc > 0 && producer->ndim > 0 && producer->ndim <= CAI_MAX_NDIM &&
        cai_element_count(producer->ndim, producer->shape, &count) == 0 &&
        count == 0)
        return cai_ok(err);
    return rc;
}

int cai_fence_record(const cai_desc_t *producer, cai_fence_t **out,
                     cai_error_t *err)
{
    int rc;

    if (CAI_UNLIKELY(producer == NULL || out == NULL)) {
        if (out != NULL)
            *out = NULL;
        return cai_null_arg(err, producer == NULL ? "producer" : "out");
    }
    *out = NULL;
    rc = producer_needs_fence(producer, err);
    if (rc <= 0)
        return rc;
    return cai_record_fence(producer, out, err);
}

int cai_locate_fence(cai_desc_t *desc, int order, cai_fence_t **out,
                     cai_error_t *err)
{
    int rc = order ? producer_needs_fence(desc, err) : 0;

    *out = NULL;
    if (rc < 0)
        return rc;
    return cai_locate_record(desc, rc > 0, out, err);
}

/* Checks the consumer's stream; 1 when it has to wait for the fence, 0
 * (err cleared) when not.  Defined here, where both builds have defined
 * struct cai_fence. */
int cai_consumer_waits(const cai_fence_t *fence, intptr_t consumer_stream,
                       cai_error_t *err)
{
    int rc = cai_check_stream_value(consumer_stream, "consumer ", err);

    if (rc != 0)
        return rc;
    /* CAI v3: -1 is the consumer saying it orders the work itself.  A
     * consumer handle equal to the producer's is not taken for the same
     * stream here: CUDA gives a destroyed stream's handle to new ones, so
     * only the stream's id proves it (wait_in, cuda-fence.c). */
    if (fence == NULL || consumer_stream == CAI_STREAM_NO_SYNC)
        return cai_ok(err);
    return 1;
}

int cai_fence_wait_at(const cai_fence_t *fence, intptr_t consumer_stream,
                      cai_consumer_at *at, cai_error_t *err)
{
    int rc = cai_consumer_waits(fence, consumer_stream, err);

    if (at != NULL)
        at->context = NULL;
    return rc <= 0 ? rc : cai_wait_fence(fence, consumer_stream, at, err);
}

int cai_fence_wait(const cai_fence_t *fence, intptr_t consumer_stream,
                   cai_error_t *err)
{
    return cai_fence_wait_at(fence, consumer_stream, NULL, err);
}

int cai_cuda_order(const cai_desc_t *producer, intptr_t consumer_stream,
                   cai_error_t *err)
{
    int rc = cai_check_stream_value(consumer_stream, "consumer ", err);

    if (CAI_UNLIKELY(producer == NULL))
        return cai_null_arg(err, "producer");
    if (rc != 0)
        return rc;
    /* CAI v3, Synchronization: no stream, no ordering; and -1 is the
     * consumer saying it orders the work itself. */
    if (!producer->has_stream || consumer_stream == CAI_STREAM_NO_SYNC)
        return cai_ok(err);
    rc = producer_needs_order(producer, err);
    if (rc <= 0)
        return rc;
    /* Work on one stream is already in order. */
    if (producer->stream == consumer_stream)
        return cai_ok(err);
    return cai_order_now(producer, consumer_stream, err);
}

int cai_cuda_stream_synchronize(intptr_t stream, cai_error_t *err)
{
    int rc = cai_check_stream_value(stream, "", err);

    if (rc != 0)
        return rc;
    if (stream == CAI_STREAM_NO_SYNC)
        return cai_ok(err);
    return cai_synchronize(stream, err);
}
