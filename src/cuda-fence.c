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

cudaError_t cai_host_wait_event(cudaEvent_t event)
{
    enum cudaStreamCaptureMode mode = relax();
    cudaError_t rc;

    CAI_PUSH("host wait", 0, 0);
    rc = cai_rt.event_synchronize(event);
    CAI_POP();
    CAI_COUNT(host_waits, 1);

    unrelax(mode);
    return rc;
}

static cudaError_t host_wait_stream(cudaStream_t stream)
{
    enum cudaStreamCaptureMode mode = relax();
    cudaError_t rc;

    CAI_PUSH("host wait", (intptr_t)stream, 0);
    rc = cai_rt.stream_synchronize(stream);
    CAI_POP();
    CAI_COUNT(host_waits, 1);

    unrelax(mode);
    return rc;
}

static cudaError_t host_wait_device(void)
{
    enum cudaStreamCaptureMode mode = relax();
    cudaError_t rc;

    CAI_PUSH("host wait for the device", 0, 0);
    rc = cai_rt.device_synchronize();
    CAI_POP();
    CAI_COUNT(host_waits, 1);

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
 * context of a default stream, when the caller knows it.  blocked, when
 * given, is set instead of a failure when stream is the legacy stream and
 * CUDA refuses its use because a blocking stream of its context captures
 * (cudaErrorStreamCaptureImplicit, from the query, which invalidates
 * nothing): a record there would invalidate that capture. */
static int record_in(struct op *op, intptr_t stream, DLDevice device,
                     const CUcontext *known, struct cai_fence *fence,
                     int *blocked)
{
    enum cudaStreamCaptureStatus state = cudaStreamCaptureStatusNone;
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
    if (none)
        return 0;
    rc = cai_rt.stream_is_capturing(cai_stream_handle(stream), &state);
    if (rc == cudaErrorStreamCaptureImplicit && blocked != NULL &&
        stream == CAI_STREAM_LEGACY) {
        cai_rt.get_last_error(); /* ours, expected: not left pending */
        *blocked = 1;
        return 0;
    }
    if (cai_op_failed(op, "cudaStreamIsCapturing", rc))
        return -1;
    fence->captured = state != cudaStreamCaptureStatusNone;
    if (fence->captured && capture_id(op, stream, &fence->capture) != 0)
        return -1;
    fence->context = op->now;
    fence->have_context = op->have_saved;
    /* Also for a captured event, never pooled: its liveness is told by
     * the id.  When the driver cannot say (id 0) the event is not pooled
     * and its context taken as alive: a release still records and waits
     * rather than let its producer go. */
    fence->context_id = cai_context_id_or_0(op, fence->context);
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
    CAI_COUNT(records, 1);
    CAI_MARK("record", stream, 0, 0);
    return 0;
}

/* Whether the fence's context is still the one its event was made in: a
 * context destroyed or reset since took its events with it, and their
 * handles may be another library's by now.  1 alive (or unknown id), 0
 * gone, -1 the driver could not tell (in op). */
int cai_fence_alive(struct op *op, const cai_fence_t *fence)
{
    return cai_context_alive(op, fence->context, fence->context_id);
}

/* Whether stream is the handle the fence was recorded on, proven by the
 * stream's id (cuStreamGetId, never reused), never by the handle's value
 * alone: a destroyed stream's handle may name a new stream since. */
static int same_handle(const cai_fence_t *fence, intptr_t stream)
{
    unsigned long long id = 0;

    return !cai_is_default_stream(stream) && stream == fence->stream &&
           fence->stream_id != 0 && cai_drv.stream_get_id != NULL &&
           cai_drv.stream_get_id((CUstream)cai_stream_handle(stream), &id) ==
               CUDA_SUCCESS &&
           id == fence->stream_id;
}

/* Whether stream is capturing a graph (any state but none), within op. */
int cai_stream_capturing(struct op *op, intptr_t stream, int *capturing)
{
    enum cudaStreamCaptureStatus state;
    int rc = capture_state(op, stream, &state);

    *capturing = rc == 0 && state != cudaStreamCaptureStatusNone;
    return rc;
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
    int none = 0, alive;

    *refusal = NULL;
    if (fence->event == NULL)
        return 0;
    /* The very stream the fence was recorded on, proven by its id and not
     * capturing (a graph may be launched anywhere later): its work is
     * already in order.  Neither call needs the stream's context. */
    if (!fence->captured && same_handle(fence, stream)) {
        if (capture_state(op, stream, &state) != 0)
            return -1;
        CAI_COUNT(waits_skipped, state == cudaStreamCaptureStatusNone);
        CAI_MARK(state == cudaStreamCaptureStatusNone ? "skip" : NULL,
                 fence->stream, stream, 0);
        if (state == cudaStreamCaptureStatusNone)
            return 0;
    }
    /* Its context is gone, and its work with it: nothing to wait for.
     * Not knowing is an error, never "unordered". */
    alive = cai_fence_alive(op, fence);
    if (alive <= 0)
        return alive;
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
                             cai_host_wait_event(fence->event))
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
    CAI_COUNT(waits, 1);
    CAI_MARK("wait", fence->stream, stream, 0);
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
void cai_destroy_in(struct op *op, struct cai_fence *fence)
{
    if (fence->event == NULL)
        return;
    /* The pool is keyed by context id, never reused: an event given back
     * for a context that is gone is never handed out again. */
    if (op->call == NULL && cai_event_give(fence)) {
        fence->event = NULL;
        return;
    }
    /* Not knowing (a failed cuCtxGetId, reported) destroys it all the
     * same: an event is never dropped while its context may live. */
    if (cai_fence_alive(op, fence) == 0) {
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
int cai_op_finish(struct op *op, const char *whose, const char *refusal,
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
    if ((op->have_saved || cai_ctx_save(op) == 0) &&
        record_in(op, producer->stream, producer->device, NULL, fence, NULL) ==
            0 &&
        fence->event != NULL && !cai_is_default_stream(fence->stream) &&
        cai_drv.stream_get_id != NULL &&
        cai_drv.stream_get_id((CUstream)cai_stream_handle(fence->stream),
                              &fence->stream_id) != CUDA_SUCCESS)
        /* A kept fence knows its handle's stream by id, so that a consumer
         * naming that handle later is proven the same stream, not one
         * that took the handle over.  Unknown: it waits. */
        fence->stream_id = 0;
    /* Destroyed before the restore, so its context is not left current. */
    if (op->call != NULL)
        cai_destroy_in(op, fence);
    cai_ctx_restore(op);
    if (op->restore_call != NULL) {
        cai_destroy_in(op, fence);
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
    CAI_PUSH("hand-over", fence->stream, consumer);
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
    status = cai_op_finish(&op, "consumer's", refusal, err);
    CAI_POP();
    return status;
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
    CAI_PUSH("hand-over", producer->stream, consumer);
    if (cai_ctx_save(&op) == 0 &&
        record_in(&op, producer->stream, producer->device, NULL, &fence,
                  NULL) == 0)
        wait_in(&op, &fence, consumer, NULL, 1, &refusal, NULL);
    /* Safe right after the wait is queued: the runtime frees the event
     * once it has completed. */
    cai_destroy_in(&op, &fence);
    status = cai_op_finish(&op, "consumer's", refusal, err);
    CAI_POP();
    return status;
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
    return cai_op_finish(&op, "", NULL, err);
}

/* The host waits for a default stream's work, within op (its first failure
 * kept): in known's context, else the one that holds device's data. */
void cai_host_wait_stream_in(struct op *op, intptr_t stream, DLDevice device,
                             const CUcontext *known)
{
    int none = 0;

    if ((op->have_saved || cai_ctx_save(op) == 0) &&
        cai_enter_stream_context(op, stream, device, known, 0, &none) == 0 &&
        !none)
        cai_op_failed(op, "cudaStreamSynchronize",
                      host_wait_stream(cai_stream_handle(stream)));
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
                       cai_host_wait_event(fence->event)) &&
        fence->device.device_type == kDLCUDAManaged)
        wait_for_device(&op, fence);
    return cai_op_finish(&op, "producer's", NULL, err);
}

/* Records the reverse edge's event on consumer_stream into *back, within
 * op; *refusal says why nothing could be recorded. */
int cai_release_record(struct op *op, DLDevice device,
                       intptr_t consumer_stream, const CUcontext *known,
                       struct cai_fence *back, const char **refusal)
{
    int blocked = 0;

    memset(back, 0, sizeof *back);
    if (record_in(op, consumer_stream, device, known, back, &blocked) != 0)
        return -1;
    if (blocked) {
        /* The legacy stream while a blocking stream of its context captures
         * (CuPy's streams are blocking): recording there would invalidate
         * the user's capture, and letting the producer go now would free it
         * under the consumer's queued work.  The per-thread default stream
         * waits for the legacy stream's earlier work, and not for the
         * capture: an event recorded there keeps the producer until the
         * consumer's work has run. */
        memset(back, 0, sizeof *back);
        if (record_in(op, CAI_STREAM_PER_THREAD, device, known, back, NULL) !=
            0)
            return -1;
    }
    if (back->event != NULL && back->captured) {
        /* Its event completes only when the graph is launched. */
        *refusal = "the consumer's stream is capturing a CUDA graph, so "
                   "its work on the data runs only when the graph is "
                   "launched; release after the capture ends";
        cai_destroy_in(op, back);
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

    /* Only the producer's default streams are ever made to wait: on its
     * own handle nothing is needed, whatever stream now holds it. */
    if (rc <= 0)
        return rc;
    if (consumer_stream == fence->stream &&
        !cai_is_default_stream(consumer_stream))
        return cai_ok(err);
    rc = cai_op_begin(&op, "stream", err);
    if (rc != 0)
        return rc;
    if (cai_ctx_save(&op) == 0 &&
        cai_release_record(&op, fence->device, consumer_stream, NULL, &back,
                           &refusal) == 0 &&
        back.event != NULL &&
        (fence->stream == CAI_STREAM_LEGACY ||
         (fence->stream == CAI_STREAM_PER_THREAD &&
          fence->thread == cai_thread_id())))
        /* The producer's default streams are those of its context, which
         * outlive it; a handle may be gone, so it is never named. */
        wait_in(&op, &back, fence->stream,
                fence->have_context ? &fence->context : NULL, 0, &refusal,
                NULL);
    cai_destroy_in(&op, &back);
    return cai_op_finish(&op, "producer's", refusal, err);
}

int cai_fence_destroy(cai_fence_t *fence, cai_error_t *err)
{
    struct op op;
    int status;

    if (fence == NULL)
        return cai_ok(err);
    /* Shared: only the last owner's call ends it. */
    if (__atomic_load_n(&fence->refs, __ATOMIC_ACQUIRE) > 0 &&
        __atomic_sub_fetch(&fence->refs, 1, __ATOMIC_ACQ_REL) >= 0)
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
        cai_destroy_in(&op, fence);
        status = cai_op_finish(&op, "", NULL, err);
    }
    free(fence);
    return status;
}

#endif /* HAVE_CUDA */
