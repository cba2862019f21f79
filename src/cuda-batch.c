/*
 * Many tensors, one fence: a fence shared by the views of a batch (one
 * record per producer stream) remembers the consumer streams it has made
 * wait, so a later hand-over to the same stream queues nothing (one wait
 * per consumer stream).  Work queued on a stream after its wait is ordered
 * after the fence, so the wait need not be queued again.
 *
 * "The same stream" is proven, never assumed from its value: stream 1 is
 * its context's (known by the context's id, never reused), stream 2 its
 * context's and thread's, and a handle, which CUDA may give to a new
 * stream once the old one is destroyed, by the stream's id (cuStreamGetId,
 * driver 12.0+, never reused).  Without a proof the fence waits again.
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "cuda-internal.h"
#include "cuda-release.h"

#ifdef HAVE_CUDA

static pthread_mutex_t waited_lock = PTHREAD_MUTEX_INITIALIZER;

cai_fence_t *cai_fence_share(cai_fence_t *fence)
{
    if (fence != NULL)
        __atomic_add_fetch(&fence->refs, 1, __ATOMIC_ACQ_REL);
    return fence;
}

int cai_fence_is_shared(const cai_fence_t *fence)
{
    return fence != NULL &&
           __atomic_load_n(&fence->refs, __ATOMIC_ACQUIRE) > 0;
}

/* The identity of the consumer's stream as this thread names it, within
 * op: 1 when it is proven, 0 when it cannot be (no context on a default
 * stream, no id), which is no error. */
static int stream_key(struct op *op, intptr_t stream, struct cai_waited *key)
{
    memset(key, 0, sizeof *key);
    key->stream = stream;
    if (cai_is_default_stream(stream)) {
        if (cai_ctx_save(op) != 0 || op->now == NULL)
            return 0;
        key->context = op->now;
        /* Its id, with or without the event pool. */
        if (cai_drv.ctx_get_id == NULL ||
            cai_context_id_try(op, op->now, &key->id) != CUDA_SUCCESS)
            return 0;
        key->thread = stream == CAI_STREAM_PER_THREAD ? cai_thread_id() : 0;
        return key->id != 0;
    }
    /* The driver's: it makes no context and sets no runtime error. */
    return cai_drv.stream_get_id != NULL &&
           cai_drv.stream_get_id((CUstream)cai_stream_handle(stream),
                                 &key->id) == CUDA_SUCCESS &&
           key->id != 0;
}

static int same(const struct cai_waited *a, const struct cai_waited *b)
{
    return a->stream == b->stream && a->context == b->context &&
           a->id == b->id && a->thread == b->thread;
}

/* Whether key is among the fence's waited streams. */
static int waited(const cai_fence_t *fence, const struct cai_waited *key)
{
    unsigned i;
    int found = 0;

    pthread_mutex_lock(&waited_lock);
    for (i = 0; i < fence->waited_count && !found; i++)
        found = same(&fence->waited[i], key);
    pthread_mutex_unlock(&waited_lock);
    return found;
}

/* Notes key as waited (the oldest note goes when all are taken). */
static void note_waited(const cai_fence_t *fence, const struct cai_waited *key)
{
    struct cai_fence *f = (struct cai_fence *)(uintptr_t)fence;

    pthread_mutex_lock(&waited_lock);
    if (!(f->waited_count > 0 && same(&f->waited[0], key))) {
        f->waited[f->waited_next] = *key;
        f->waited_next = (f->waited_next + 1) % CAI_WAITED_MAX;
        if (f->waited_count < CAI_WAITED_MAX)
            f->waited_count++;
    }
    pthread_mutex_unlock(&waited_lock);
}

int cai_fence_wait_once_at(const cai_fence_t *fence, intptr_t consumer_stream,
                           cai_consumer_at *at, cai_error_t *err)
{
    struct cai_waited key;
    struct op op;
    int rc = cai_consumer_waits(fence, consumer_stream, err), proven;
    int capturing = 0;

    if (at != NULL)
        at->context = NULL;
    if (rc <= 0)
        return rc;
    if (fence->event == NULL || fence->captured ||
        __atomic_load_n(&fence->external, __ATOMIC_ACQUIRE))
        return cai_wait_fence(fence, consumer_stream, at, err);
    rc = cai_op_begin(&op, "stream", err);
    if (rc != 0)
        return rc;
    proven = stream_key(&op, consumer_stream, &key);
    /* A stream that began capturing since its wait needs the wait again,
     * inside the capture: the graph may be launched anywhere later. */
    if (proven && waited(fence, &key) &&
        cai_stream_capturing(&op, consumer_stream, &capturing) == 0 &&
        !capturing) {
        CAI_COUNT(waits_skipped, 1);
        CAI_MARK("skip", fence->stream, consumer_stream, 0);
        /* Already ordered: at release the default stream is where it was
         * at that wait, the very context named by key. */
        if (at != NULL && cai_is_default_stream(consumer_stream)) {
            at->context = key.context;
            at->id = key.id;
        }
        return cai_op_finish(&op, "consumer's", NULL, err);
    }
    rc = cai_op_finish(&op, "consumer's", NULL, err);
    if (rc != 0)
        return rc;
    rc = cai_wait_fence(fence, consumer_stream, at, err);
    /* Only a wait really queued on the stream is remembered (not one the
     * host made instead, on a thread with no context). */
    if (rc == 0 && proven &&
        (!cai_is_default_stream(consumer_stream) ||
         (at != NULL && at->context == key.context)) &&
        !__atomic_load_n(&fence->external, __ATOMIC_ACQUIRE))
        note_waited(fence, &key);
    return rc;
}

int cai_fence_wait_once(const cai_fence_t *fence, intptr_t consumer_stream,
                        cai_error_t *err)
{
    cai_consumer_at at;

    return cai_fence_wait_once_at(fence, consumer_stream, &at, err);
}

#endif /* HAVE_CUDA */
