/*
 * Fences: an event recorded on the producer's stream, waited on by the
 * consumer's stream or by the host, and the reverse edge at release.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-internal.h"
#include "cuda-release.h"
#include "desc.h"

#ifdef HAVE_CUDA

/*
 * Host and device waits run with the thread's capture mode relaxed, and
 * put back after: in global mode such a call would invalidate a graph
 * capture that another thread has under way.
 */
static enum cudaStreamCaptureMode relax(void)
{
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;

    if (cai_rt.thread_exchange_capture_mode != NULL &&
        cai_rt.thread_exchange_capture_mode(&mode) != cudaSuccess)
        mode = cudaStreamCaptureModeRelaxed; /* nothing to put back */
    return mode;
}

static void unrelax(enum cudaStreamCaptureMode mode)
{
    if (cai_rt.thread_exchange_capture_mode != NULL &&
        mode != cudaStreamCaptureModeRelaxed)
        (void)cai_rt.thread_exchange_capture_mode(&mode);
}

static cudaError_t host_wait_event(cudaEvent_t event)
{
    enum cudaStreamCaptureMode mode = relax();
    cudaError_t rc = cai_rt.event_synchronize(event);

    unrelax(mode);
    return rc;
}

static cudaError_t host_wait_stream(cudaStream_t stream)
{
    enum cudaStreamCaptureMode mode = relax();
    cudaError_t rc = cai_rt.stream_synchronize(stream);

    unrelax(mode);
    return rc;
}

static cudaError_t host_wait_device(void)
{
    enum cudaStreamCaptureMode mode = relax();
    cudaError_t rc = cai_rt.device_synchronize();

    unrelax(mode);
    return rc;
}

static int capture_state(struct op *op, intptr_t stream,
                         enum cudaStreamCaptureStatus *state)
{
    *state = cudaStreamCaptureStatusNone;
    return cai_op_failed(
               op, "cudaStreamIsCapturing",
               cai_rt.stream_is_capturing(cai_stream_handle(stream), state))
               ? -1
               : 0;
}

/* The three shapes cudaStreamGetCaptureInfo has had: 11.x, 12.x, 13.x. */
typedef cudaError_t(CUDARTAPI *capture_info_11)(cudaStream_t,
                                                enum cudaStreamCaptureStatus *,
                                                unsigned long long *);
typedef cudaError_t(CUDARTAPI *capture_info_12)(
    cudaStream_t, enum cudaStreamCaptureStatus *, unsigned long long *,
    cudaGraph_t *, const cudaGraphNode_t **, size_t *);
typedef cudaError_t(CUDARTAPI *capture_info_13)(
    cudaStream_t, enum cudaStreamCaptureStatus *, unsigned long long *,
    cudaGraph_t *, const cudaGraphNode_t **, const void **, size_t *);

/* The id of the capture stream is in (0: none). */
static int capture_id(struct op *op, intptr_t stream, unsigned long long *id)
{
    enum cudaStreamCaptureStatus state = cudaStreamCaptureStatusNone;
    cudaStream_t handle = cai_stream_handle(stream);
    void (*fn)(void) = cai_rt.stream_get_capture_info;
    int rc;

    *id = 0;
    if (cai_rt_version >= 13000)
        rc = ((capture_info_13)fn)(handle, &state, id, NULL, NULL, NULL, NULL);
    else if (cai_rt_version >= 12000)
        rc = ((capture_info_12)fn)(handle, &state, id, NULL, NULL, NULL);
    else
        rc = ((capture_info_11)fn)(handle, &state, id);
    if (state == cudaStreamCaptureStatusNone)
        *id = 0;
    return cai_op_failed(op, "cudaStreamGetCaptureInfo", rc) ? -1 : 0;
}

/* Whether the runtime sees a driver (asked only when none is bound). */
static int driver_present(void)
{
    int version = 0;

    return cai_rt.driver_get_version(&version) == cudaSuccess && version != 0;
}

/* Records an event on stream into fence (zeroed by the caller) within op;
 * fence->event stays NULL when there is nothing to wait for.  known: the
 * context of a default stream, when the caller knows it. */
static int record_in(struct op *op, intptr_t stream, DLDevice device,
                     const CUcontext *known, struct cai_fence *fence)
{
    enum cudaStreamCaptureStatus state;
    int none = 0, pooled;
    cudaError_t rc;

    fence->stream = stream;
    fence->device = device;
    fence->thread = cai_thread_id();
    /* Host-accessible memory and no driver: no context ever held work on
     * it, so there is nothing to wait for and the host reads at once.
     * Device memory without a driver is an error, said by the calls. */
    if (!op->have_saved && device.device_type != kDLCUDA && !driver_present())
        return 0;
    /* The event must be made in the stream's own context. */
    if (cai_enter_stream_context(op, stream, device, known, 1, &none) != 0)
        return -1;
    if (none || capture_state(op, stream, &state) != 0)
        return none ? 0 : -1;
    fence->captured = state != cudaStreamCaptureStatusNone;
    if (fence->captured && capture_id(op, stream, &fence->capture) != 0)
        return -1;
    fence->context = op->now;
    fence->have_context = op->have_saved;
    /* Also for a captured event, never pooled: its liveness is told by
     * the id. */
    if (cai_context_id(op, fence->context, &fence->context_id) != 0)
        return -1;
    pooled = cai_event_take(op, fence, &fence->event);
    if (pooled < 0)
        return -1;
    rc = cai_rt.event_record(fence->event, cai_stream_handle(stream));
    if (cai_op_failed(op, "cudaEventRecord", rc)) {
        /* Ours either way (a pooled event belongs to this very context,
         * known by its id): destroyed, never left behind. */
        cai_rt.event_destroy(fence->event);
        fence->event = NULL;
        return -1;
    }
    return 0;
}

/* Whether the fence's context is still the one its event was made in: a
 * context destroyed or reset since took its events with it, and their
 * handles may be another library's by now.  Unknown ids count as alive. */
static int fence_context_alive(struct op *op, const cai_fence_t *fence)
{
    unsigned long long id = 0;

    if (fence->context_id == 0)
        return 1;
    /* A driver call: it leaves no runtime error behind. */
    return cai_context_id_try(op, fence->context, &id) == CUDA_SUCCESS &&
           id == fence->context_id;
}


/* Makes stream wait on fence within op; known: the context of a default
 * stream.  *refusal says why nothing was queued, if so; *entered (when
 * given) is the context a default stream was found in, else NULL. */
static int wait_in(struct op *op, const cai_fence_t *fence, intptr_t stream,
                   const CUcontext *known, int oneshot, const char **refusal,
                   CUcontext *entered)
{
    enum cudaStreamCaptureStatus state;
    unsigned long long id;
    unsigned flags = 0;
    int none = 0;

    *refusal = NULL;
    if (fence->event == NULL)
        return 0;
    /* Its context is gone, and its work with it: nothing to wait for. */
    if (!fence_context_alive(op, fence))
        return 0;
    if (cai_enter_stream_context(op, stream, fence->device, known, 0, &none) !=
        0)
        return -1;
    if (entered != NULL && !none && cai_is_default_stream(stream))
        *entered = op->now;
    if (none) {
        /* A default stream of a thread with no context: its work will
         * start later in a context that does not exist yet, so the host
         * waits now instead. */
        if (cai_enter_fence_context(op, fence) != 0)
            return -1;
        return cai_op_failed(op, "cudaEventSynchronize",
                             host_wait_event(fence->event))
                   ? -1
                   : 0;
    }
    if (capture_state(op, stream, &state) != 0)
        return -1;
    if (state == cudaStreamCaptureStatusInvalidated) {
        *refusal = "its graph capture is already invalidated";
    } else if (fence->captured && state == cudaStreamCaptureStatusNone) {
        *refusal = "the other side's work was queued inside a CUDA graph "
                   "capture, so it runs only when the graph is launched; "
                   "hand over after the capture ends";
    } else if (fence->captured) {
        if (capture_id(op, stream, &id) != 0)
            return -1;
        if (id != fence->capture)
            *refusal = "it is capturing another CUDA graph than the other "
                       "side's stream; a graph cannot wait on another "
                       "graph's work";
    } else if (state != cudaStreamCaptureStatusNone) {
        /* Waiting on work outside the capture: an external event node
         * keeps the capture valid, and names the event at every launch. */
        if (cai_rt_version < EXTERNAL_WAIT_RUNTIME)
            *refusal = "it is capturing a CUDA graph and this runtime has no "
                       "cudaEventWaitExternal";
        else if (oneshot)
            *refusal = "it is capturing a CUDA graph, whose wait would name "
                       "an event this call must destroy; record a fence "
                       "(cai_fence_record) and keep it while the graph is "
                       "launched";
        flags = cudaEventWaitExternal;
        /* Bookkeeping, not the fence's meaning: a graph node names the
         * event from now on, so it must never be reused. */
        __atomic_store_n(&((struct cai_fence *)(uintptr_t)fence)->external, 1,
                         __ATOMIC_RELEASE);
    }
    if (*refusal != NULL)
        return 0;
    return cai_op_failed(op, "cudaStreamWaitEvent",
                         cai_rt.stream_wait_event(cai_stream_handle(stream),
                                                  fence->event, flags))
               ? -1
               : 0;
}

/* Destroys the fence's event (or gives it back to the pool); in its
 * context when none is current, and still (in the current one) when that
 * switch fails, so it never leaks.  The event of a context that is gone is
 * dropped, not destroyed: the handle may be another library's now. */
static void destroy_in(struct op *op, struct cai_fence *fence)
{
    if (fence->event == NULL)
        return;
    /* The pool is keyed by context id, never reused: an event given back
     * for a context that is gone is never handed out again. */
    if (op->call == NULL && cai_event_give(fence)) {
        fence->event = NULL;
        return;
    }
    if (!fence_context_alive(op, fence)) {
        cai_event_forget(fence->context_id);
        fence->event = NULL;
        return;
    }
    cai_enter_fence_context(op, fence);
    cai_op_failed(op, "cudaEventDestroy", cai_rt.event_destroy(fence->event));
    fence->event = NULL;
}

/* Ends op: restores the context, reports, and turns a refusal into
 * CAI_EUNSUPPORTED. */
static int op_finish(struct op *op, const char *whose, const char *refusal,
                     cai_error_t *err)
{
    int status;

    cai_ctx_restore(op);
    status = cai_op_end(op, err);
    if (status == 0 && refusal != NULL)
        return cai_fail(err, CAI_EUNSUPPORTED, "stream",
                        "cannot order the %s stream: %s; nothing was queued",
                        whose, refusal);
    return status;
}

/* cai_record_fence within op, which this ends; the caller's context is
 * looked at only when op has not yet saved it. */
static int record_fence_in(struct op *op, const cai_desc_t *producer,
                           cai_fence_t **out, cai_error_t *err)
{
    struct cai_fence *fence;
    int status;

    fence = calloc(1, sizeof *fence);
    if (fence == NULL)
        return cai_fail(err, CAI_ENOMEM, "stream", "no memory for a fence");
    if (op->have_saved || cai_ctx_save(op) == 0)
        record_in(op, producer->stream, producer->device, NULL, fence);
    /* Destroyed before the restore, so its context is not left current. */
    if (op->call != NULL)
        destroy_in(op, fence);
    cai_ctx_restore(op);
    if (op->restore_call != NULL) {
        destroy_in(op, fence);
        cai_ctx_restore(op);
    }
    status = cai_op_end(op, err);
    if (status != 0 || fence->event == NULL) {
        free(fence);
        return status;
    }
    *out = fence;
    return 0;
}

int cai_record_fence(const cai_desc_t *producer, cai_fence_t **out,
                     cai_error_t *err)
{
    struct op op;
    int status = cai_op_begin(&op, "stream", err);

    if (status != 0)
        return status;
    return record_fence_in(&op, producer, out, err);
}

/* The data located, then (order set, and the data is memory of CUDA) the
 * fence recorded, in one operation: one look at the caller's context. */
int cai_locate_record(cai_desc_t *desc, int order, cai_fence_t **out,
                      cai_error_t *err)
{
    struct op op;
    int status = cai_op_begin(&op, "data", err);

    if (status != 0)
        return status;
    status = cai_locate_in(&op, desc->data, 0, &desc->device, err);
    if (status != 0 || !order || !cai_is_cuda_device(desc->device.device_type))
        return status;
    op.field = "stream";
    return record_fence_in(&op, desc, out, err);
}

int cai_wait_fence(const cai_fence_t *fence, intptr_t consumer,
                   cai_consumer_at *at, cai_error_t *err)
{
    CUcontext entered = NULL;
    const char *refusal = NULL;
    struct op op;
    int status = cai_op_begin(&op, "stream", err);

    if (status != 0)
        return status;
    if (cai_ctx_save(&op) == 0 &&
        wait_in(&op, fence, consumer, NULL, 0, &refusal,
                at != NULL ? &entered : NULL) == 0 &&
        entered != NULL) {
        /* Its id tells at release whether it still lives; the fence's
         * own is known already.  0: unknown, taken as alive (as the
         * fence's are without the pool). */
        at->context = entered;
        at->id = fence->have_context && entered == fence->context
                     ? fence->context_id
                     : cai_context_id_or_0(&op, entered);
    }
    return op_finish(&op, "consumer's", refusal, err);
}

/* cai_cuda_order in one operation: one context save and restore. */
int cai_order_now(const cai_desc_t *producer, intptr_t consumer,
                  cai_error_t *err)
{
    struct cai_fence fence;
    const char *refusal = NULL;
    struct op op;
    int status = cai_op_begin(&op, "stream", err);

    if (status != 0)
        return status;
    memset(&fence, 0, sizeof fence);
    if (cai_ctx_save(&op) == 0 &&
        record_in(&op, producer->stream, producer->device, NULL, &fence) == 0)
        wait_in(&op, &fence, consumer, NULL, 1, &refusal, NULL);
    /* Safe right after the wait is queued: the runtime frees the event
     * once it has completed. */
    destroy_in(&op, &fence);
    return op_finish(&op, "consumer's", refusal, err);
}

int cai_synchronize(intptr_t stream, cai_error_t *err)
{
    struct op op;
    int status = cai_op_begin(&op, "stream", err);

    DLDevice unknown = {(DLDeviceType)0, 0};
    int none = 0;

    if (status != 0)
        return status;
    /* In the stream's context, so the runtime creates none; a default
     * stream that cannot hold work needs no wait. */
    if (cai_ctx_save(&op) == 0 &&
        cai_enter_stream_context(&op, stream, unknown, NULL, 0, &none) == 0 &&
        !none)
        cai_op_failed(&op, "cudaStreamSynchronize",
                      host_wait_stream(cai_stream_handle(stream)));
    return op_finish(&op, "", NULL, err);
}

/* A device without concurrent managed access forbids the host to touch
 * managed memory while any kernel runs there, not only the producer's:
 * the host waits for the whole device (of the fence's context). */
static void wait_for_device(struct op *op, const cai_fence_t *fence)
{
    int device = 0, concurrent = 1;

    if (fence->have_context && cai_ctx_switch(op, fence->context) != 0)
        return;
    if (cai_current_device(op, &device) != 0 ||
        cai_op_failed(
            op, "cudaDeviceGetAttribute",
            cai_rt.device_get_attribute(
                &concurrent, cudaDevAttrConcurrentManagedAccess, device)) ||
        concurrent)
        return;
    cai_op_failed(op, "cudaDeviceSynchronize", host_wait_device());
}

int cai_fence_synchronize(const cai_fence_t *fence, cai_error_t *err)
{
    struct op op;
    int status;

    if (fence == NULL || fence->event == NULL)
        return cai_ok(err);
    if (fence->captured)
        return cai_fail(err, CAI_EUNSUPPORTED, "stream",
                        "the producer's stream was capturing a CUDA graph "
                        "when the fence was recorded: its work runs only "
                        "when the graph is launched, so the host cannot "
                        "wait for it");
    status = cai_op_begin(&op, "stream", err);
    if (status != 0)
        return status;
    if (cai_ctx_save(&op) == 0 && cai_enter_fence_context(&op, fence) == 0 &&
        !cai_op_failed(&op, "cudaEventSynchronize",
                       host_wait_event(fence->event)) &&
        fence->device.device_type == kDLCUDAManaged)
        wait_for_device(&op, fence);
    return op_finish(&op, "producer's", NULL, err);
}

/*
 * Releases waiting for their consumer: the event recorded on the consumer's
 * stream at release, and the producer's owner, kept until that event has
 * completed (polled with cudaEventQuery, never waited on).
 */
struct pending {
    struct cai_fence back;
    int fresh; /* recorded in this very operation: its context lives */
    void *owner;
    cai_release_fn release;
    struct pending *next;
};
static struct pending *pending_head;
static long pending_count; /* atomic reads outside the lock */
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;

long cai_release_pending_count(void)
{
    return __atomic_load_n(&pending_count, __ATOMIC_ACQUIRE);
}

static void (*notifier)(void); /* atomic */

void cai_release_set_notifier(void (*fn)(void))
{
    __atomic_store_n(&notifier, fn, __ATOMIC_RELEASE);
}

/* Runs on a CUDA thread when the consumer's stream gets there. */
static void CUDART_CB notify(void *unused)
{
    void (*fn)(void) = __atomic_load_n(&notifier, __ATOMIC_ACQUIRE);

    (void)unused;
    if (fn != NULL)
        fn();
}

/* After a deferred release's record (the consumer's stream's context
 * current): a host function there tells the notifier, so the
 * producer goes without a further call.  Best effort: a poll at the next
 * call covers a failure, whose error is not left behind. */
static void queue_notice(intptr_t stream)
{
    if (__atomic_load_n(&notifier, __ATOMIC_ACQUIRE) == NULL ||
        cai_rt.launch_host_func == NULL)
        return;
    /* Its failure is now the thread's last error: ours, so cleared. */
    if (cai_rt.launch_host_func(cai_stream_handle(stream), notify, NULL) !=
        cudaSuccess)
        cai_rt.get_last_error();
}

/* Records the reverse edge's event on consumer_stream into *back, within
 * op; *refusal says why nothing could be recorded. */
static int release_record(struct op *op, const cai_fence_t *fence,
                          intptr_t consumer_stream, const CUcontext *known,
                          struct cai_fence *back, const char **refusal)
{
    memset(back, 0, sizeof *back);
    if (record_in(op, consumer_stream, fence->device, known, back) != 0)
        return -1;
    if (back->event != NULL && back->captured) {
        /* Its event completes only when the graph is launched. */
        *refusal = "the consumer's stream is capturing a CUDA graph, so "
                   "its work on the data runs only when the graph is "
                   "launched; release after the capture ends";
        destroy_in(op, back);
    }
    return 0;
}

int cai_fence_release(const cai_fence_t *fence, intptr_t consumer_stream,
                      cai_error_t *err)
{
    struct cai_fence back;
    const char *refusal = NULL;
    struct op op;
    int rc = cai_consumer_waits(fence, consumer_stream, err);

    if (rc <= 0)
        return rc;
    rc = cai_op_begin(&op, "stream", err);
    if (rc != 0)
        return rc;
    if (cai_ctx_save(&op) == 0 &&
        release_record(&op, fence, consumer_stream, NULL, &back, &refusal) ==
            0 &&
        back.event != NULL &&
        (fence->stream == CAI_STREAM_LEGACY ||
         (fence->stream == CAI_STREAM_PER_THREAD &&
          fence->thread == cai_thread_id())))
        /* The producer's default streams are those of its context, which
         * outlive it; a handle may be gone, so it is never named. */
        wait_in(&op, &back, fence->stream,
                fence->have_context ? &fence->context : NULL, 0, &refusal,
                NULL);
    destroy_in(&op, &back);
    return op_finish(&op, "producer's", refusal, err);
}

static struct pending *take_done(struct op *op, int wait);
static void run_done(struct op *op, struct pending *done, int *status,
                     const char *refusal, cai_error_t *err);

/* The context a consumer's default stream was noted in at hand-over, when
 * it still lives (*context NULL when none was noted); -1 when it has ended
 * since, and the consumer's work with it. */
static int noted_context(struct op *op, const cai_consumer_at *at,
                         CUcontext *context)
{
    unsigned long long id;

    *context = NULL;
    if (at == NULL || at->context == NULL)
        return 0;
    if (at->id != 0 &&
        (cai_context_id_try(op, at->context, &id) != CUDA_SUCCESS ||
         id != at->id))
        return -1;
    *context = at->context;
    return 0;
}

int cai_fence_release_owner(const cai_fence_t *fence, intptr_t consumer_stream,
                            unsigned flags, void *owner,
                            cai_release_fn release, cai_error_t *err)
{
    return cai_fence_release_owner_at(fence, consumer_stream, NULL, flags,
                                      owner, release, err);
}

int cai_fence_release_owner_at(const cai_fence_t *fence,
                               intptr_t consumer_stream,
                               const cai_consumer_at *at, unsigned flags,
                               void *owner, cai_release_fn release,
                               cai_error_t *err)
{
    struct pending *p = NULL;
    struct cai_fence back;
    const char *refusal = NULL;
    CUcontext noted;
    struct op op;
    int rc = cai_consumer_waits(fence, consumer_stream, err);

    if (rc <= 0 || (rc = cai_op_begin(&op, "stream", err)) != 0) {
        if (release != NULL)
            release(owner);
        return rc;
    }
    memset(&back, 0, sizeof back);
    if (cai_ctx_save(&op) == 0 && noted_context(&op, at, &noted) == 0 &&
        release_record(&op, fence, consumer_stream,
                       noted != NULL ? &noted : NULL, &back, &refusal) == 0 &&
        back.event != NULL) {
        if (flags & CAI_RELEASE_BLOCK) {
            cai_op_failed(&op, "cudaEventSynchronize",
                          host_wait_event(back.event));
        } else if ((p = malloc(sizeof *p)) != NULL) {
            queue_notice(consumer_stream);
            p->back = back;
            p->fresh = 1;
            p->owner = owner;
            p->release = release;
            back.event = NULL;
        } else {
            /* No memory to keep it: the host waits instead. */
            cai_op_failed(&op, "cudaEventSynchronize",
                          host_wait_event(back.event));
        }
    }
    destroy_in(&op, &back);
    if (p != NULL) {
        pthread_mutex_lock(&pending_lock);
        p->next = pending_head;
        pending_head = p;
        __atomic_add_fetch(&pending_count, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&pending_lock);
    } else if (release != NULL) {
        /* Nothing to wait for (or a failure): after the restore. */
        p = malloc(sizeof *p);
        if (p == NULL) {
            rc = op_finish(&op, "consumer's", refusal, err);
            release(owner);
            return rc;
        }
        memset(p, 0, sizeof *p);
        p->owner = owner;
        p->release = release;
        run_done(&op, p, &rc, refusal, err);
        return rc;
    }
    /* The first poll, in this same operation: this release (often a
     * short kernel, done by now) and the earlier ones. */
    run_done(&op, op.call == NULL ? take_done(&op, 0) : NULL, &rc, refusal,
             err);
    return rc;
}

/* Takes the releases whose event has completed (all when wait: after a
 * host wait each) off the list, within op; returns them. */
static struct pending *take_done(struct op *op, int wait)
{
    struct pending *done = NULL, **at, *p;
    int not_ready = 0;
    cudaError_t rc;

    if (cai_release_pending_count() == 0)
        return NULL;
    /* A query's "not ready" would replace an error the framework has
     * pending (the runtime keeps only the latest): the poll waits for a
     * later call.  A stale "not ready" is an answer, no one's error. */
    if (!wait) {
        rc = cai_rt.peek_at_last_error();
        if (rc != cudaSuccess && rc != cudaErrorNotReady)
            return NULL;
    }
    pthread_mutex_lock(&pending_lock);
    for (at = &pending_head; (p = *at) != NULL;) {
        if (!p->fresh && !fence_context_alive(op, &p->back)) {
            rc = cudaSuccess; /* its work went with its context */
        } else {
            cai_enter_fence_context(op, &p->back);
            rc = wait ? host_wait_event(p->back.event)
                      : cai_rt.event_query(p->back.event);
        }
        p->fresh = 0;
        if (rc == cudaErrorNotReady) {
            not_ready = 1;
            at = &p->next;
            continue;
        }
        if (rc != cudaSuccess)
            cai_op_failed(op, wait ? "cudaEventSynchronize" : "cudaEventQuery",
                          rc);
        *at = p->next;
        p->next = done;
        done = p;
        __atomic_sub_fetch(&pending_count, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&pending_lock);
    /* "Not ready" is an answer, not an error: none is left behind (none
     * other was pending, as the peek above found). */
    if (not_ready)
        cai_rt.get_last_error();
    return done;
}

/* Ends op (its status in *status) with done's events destroyed or pooled,
 * then runs their owners' releases, after the caller's context is back and
 * outside the lock: a release callback may call caibridge again. */
static void run_done(struct op *op, struct pending *done, int *status,
                     const char *refusal, cai_error_t *err)
{
    struct pending *p;

    for (p = done; p != NULL; p = p->next)
        destroy_in(op, &p->back);
    *status = op_finish(op, "consumer's", refusal, err);
    while ((p = done) != NULL) {
        done = p->next;
        if (p->release != NULL)
            p->release(p->owner);
        free(p);
    }
}

int cai_release_poll(int wait, cai_error_t *err)
{
    struct op op;
    int status;

    if (cai_release_pending_count() == 0)
        return cai_ok(err);
    status = cai_op_begin(&op, "stream", err);
    if (status != 0)
        return status;
    /* A failed query is reported, but its release goes ahead: a sticky
     * error means the consumer's work will never run. */
    (void)cai_ctx_save(&op);
    run_done(&op, take_done(&op, wait), &status, NULL, err);
    return status;
}

int cai_fence_destroy(cai_fence_t *fence, cai_error_t *err)
{
    struct op op;
    int status;

    if (fence == NULL)
        return cai_ok(err);
    /* Back to the pool: no CUDA call at all. */
    if (fence->event == NULL || cai_event_give(fence)) {
        free(fence);
        return cai_ok(err);
    }
    status = cai_op_begin(&op, "stream", err);
    if (status == 0) {
        /* Destroyed even when the save fails: an event never leaks. */
        (void)cai_ctx_save(&op);
        destroy_in(&op, fence);
        status = op_finish(&op, "", NULL, err);
    }
    free(fence);
    return status;
}

#endif /* HAVE_CUDA */
