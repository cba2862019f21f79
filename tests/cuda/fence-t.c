/*
 * Fences, contexts and captures on the recording double: the event is
 * taken when the view is made, on the stream's own context; the caller's
 * exact context (NULL or a non-primary one included) is current again
 * afterwards; no context is created on a thread that had none; the host
 * waits when it is the consumer; the reverse edge; graph captures.
 */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "cuda-test.h"

static const struct cudart_double *cuda;

/* ---- The fence is taken when the view is made ---- */

struct waiter {
    const cai_fence_t *fence;
    intptr_t stream;
    int status;
    void *context_after;
    char log_before_wait[32];
};

static void *wait_elsewhere(void *arg)
{
    struct waiter *w = arg;
    cai_error_t err;

    w->status = cai_fence_wait(w->fence, w->stream, &err);
    if (w->status != 0)
        diag("wait: %s", err.message);
    w->context_after = cuda->current_context();
    return NULL;
}

static void per_thread_stream_across_threads(void)
{
    cai_desc_t desc = producer(CAI_STREAM_PER_THREAD, kDLCUDA, 0);
    struct waiter w;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int rc, primaries;

    cuda->reset();
    cuda->add_stream(CONSUMER_STREAM, 0);
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "per-thread producer: fence recorded");
    ok(fence != NULL, "per-thread producer: a fence to own");
    contains(cuda->log(), "cudaEventRecord(ev1, cudaStreamPerThread)\n",
             "the event goes on stream 2 of the making thread, at once");

    /* A fresh thread (no context current) waits on its own stream. */
    memset(&w, 0, sizeof w);
    w.fence = fence;
    w.stream = CONSUMER_STREAM;
    primaries = cuda->primary_contexts();
    cuda->reset();
    cuda->add_stream(CONSUMER_STREAM, 0);
    run_on_new_thread(wait_elsewhere, &w);
    is_int(CAI_OK, w.status, "another thread waits on the fence: success");
    is_int(0, occurrences(cuda->log(), "cudaEventRecord"),
           "nothing is recorded on the consuming thread (its stream 2 is "
           "another stream)");
    contains(cuda->log(),
             "cudaStreamWaitEvent(0x6000, ev1, cudaEventWaitDefault)\n",
             "the consumer's stream waits on the making thread's event");
    ok(w.context_after == NULL, "the fresh thread has no context current "
                                "afterwards (NULL restored)");
    is_int(primaries, cuda->primary_contexts(),
           "no primary context was created on the fresh thread");
    is_int(CAI_OK, cai_fence_destroy(fence, &err), "fence destroyed");
    is_int(0, cuda->live_events(), "no event left alive");
}

static void destroyed_producer_stream(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int rc;

    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 0);
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "fence on a live stream: success");
    cuda->destroy_stream(PRODUCER_STREAM);
    rc = cai_fence_wait(fence, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc,
           "the producer's stream destroyed since: the wait "
           "still works (the event was taken before)");
    ok(strstr(cuda->log(), "cudaEventRecord(ev1, 0x5000) ->") == NULL,
       "no event was ever recorded on the freed handle");
    is_int(CAI_OK, cai_fence_destroy(fence, &err), "fence destroyed");

    /* Ordering at hand-over time, as before, meets the freed handle. */
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_ECUDA, rc, "ordering late on a destroyed stream fails");
}

static void nothing_to_order(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = (cai_fence_t *)&desc;
    cai_error_t err;
    int rc;

    cuda->reset();
    desc.shape[0] = 0;
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "zero-size array: success");
    ok(fence == NULL, "zero-size array: no fence");
    is_string("", cuda->log(), "zero-size array: no CUDA call at all");

    desc = producer(0, kDLCUDA, 0);
    fence = (cai_fence_t *)&desc;
    is_int(CAI_OK, cai_fence_record(&desc, &fence, &err),
           "no producer stream: success");
    ok(fence == NULL, "no producer stream: no fence");
    is_int(CAI_OK, cai_fence_wait(NULL, CONSUMER_STREAM, &err),
           "waiting on no fence: success");
    is_int(CAI_OK, cai_fence_synchronize(NULL, &err),
           "host wait on no fence: success");
    is_int(CAI_EINVAL, cai_fence_wait(NULL, 0, &err),
           "consumer stream 0 is refused even without a fence");
    is_string("", cuda->log(), "no fence: no CUDA call");
    is_int(CAI_OK, cai_fence_destroy(NULL, &err), "destroying NULL: fine");
}

/* ---- The stream's device, not the data's ---- */

static void stream_device_decides(void)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int rc;

    /* Pinned memory says device 0; its stream is on device 2. */
    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 2);
    desc = producer(PRODUCER_STREAM, kDLCUDAHost, 0);
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "pinned data, stream on device 2: success (%s)",
           rc == 0 ? "ok" : err.message);
    contains(cuda->log(), "ev1 on P2\n",
             "pinned data: the event is made "
             "in the stream's context");
    ok(cuda->current_context() == NULL || cuda->current_device() == 0,
       "pinned data: the caller's device 0 is current again");
    cai_fence_destroy(fence, NULL);

    /* Device data on 0, the producer's stream on device 1. */
    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 1);
    desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc,
           "device 0 data, stream on device 1: ordered, not "
           "error 400 (%s)",
           rc == 0 ? "ok" : err.message);
    contains(cuda->log(), "ev1 on P1\n",
             "the event is the stream's "
             "device's");
    is_int(0, cuda->current_device(), "device 0 current again");
}

/* ---- The caller's context is kept exactly ---- */

static void non_primary_context_kept(void)
{
    cai_desc_t desc = producer(CAI_STREAM_LEGACY, kDLCUDA, 1);
    void *mine;
    cai_error_t err;
    int rc;

    cuda->reset();
    mine = cuda->create_context(0);
    cuda->set_current_context(mine);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc,
           "legacy stream, data on device 1, a non-primary "
           "context current: success");
    contains(cuda->log(),
             "cuDevicePrimaryCtxRetain(1) = P1\n"
             "cuCtxSetCurrent(P1)\n",
             "the data's device's primary context is made current for the "
             "event, through the driver");
    ok(cuda->current_context() == mine,
       "the non-primary context is "
       "current again, not device 0's primary context");

    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 1);
    cuda->set_current_context(mine);
    desc = producer(PRODUCER_STREAM, kDLCUDA, 1);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc,
           "stream on device 1 from a non-primary context: "
           "success");
    ok(cuda->current_context() == mine, "the non-primary context is kept");
}

struct fresh_run {
    intptr_t stream;
    void *after; /* the context current on the thread afterwards */
};

static void *order_on_fresh_thread(void *arg)
{
    struct fresh_run *run = arg;
    cai_desc_t desc = producer(run->stream, kDLCUDA, 1);
    cai_error_t err;

    if (cai_cuda_order(&desc, CONSUMER_STREAM, &err) != 0)
        diag("fresh thread, stream %#lx: %s", (long)run->stream, err.message);
    run->after = cuda->current_context();
    return NULL;
}

/* Orders a producer on stream, data on device 1, before CONSUMER_STREAM on
 * a thread that never used CUDA; returns the context current there after. */
static void *order_from_fresh_thread(intptr_t stream)
{
    struct fresh_run run;

    run.stream = stream;
    run.after = &run; /* not NULL unless the thread sets it so */
    run_on_new_thread(order_on_fresh_thread, &run);
    return run.after;
}

static void fresh_thread_gets_no_context(void)
{
    int primaries;

    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 1);
    cuda->add_stream(CONSUMER_STREAM, 1);
    primaries = cuda->primary_contexts();
    ok(order_from_fresh_thread(PRODUCER_STREAM) == NULL,
       "a thread that "
       "never used CUDA has no context current after an ordering");
    is_int(primaries, cuda->primary_contexts(),
           "and no primary context was created (none on device 0)");
    contains(cuda->log(), "cuCtxSetCurrent(NULL)\n",
             "NULL is restored with the driver, not cudaSetDevice");
}

/* The legacy stream is shared by the threads of a context: a thread with
 * no context still orders after it, on the data's device. */
static void legacy_stream_from_fresh_thread(void)
{
    void *after;
    int primaries;

    cuda->reset();
    cuda->set_current_device(1); /* the data's context exists */
    cuda->add_stream(CONSUMER_STREAM, 1);
    primaries = cuda->primary_contexts();
    after = order_from_fresh_thread(CAI_STREAM_LEGACY);
    contains(cuda->log(), "cudaEventRecord(ev1, cudaStreamLegacy)\n",
             "fresh thread, legacy producer stream: the event is recorded");
    contains(cuda->log(), "ev1 on P1\n",
             "on the data's device's legacy "
             "stream");
    contains(cuda->log(), "cudaStreamWaitEvent(0x6000, ev1",
             "and the consumer waits on it");
    ok(after == NULL, "the fresh thread has no context afterwards");
    is_int(primaries, cuda->primary_contexts(), "no context was created");
}

/* ---- The host as consumer ---- */

static void host_consumer_synchronizes(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDAManaged, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int rc;

    cuda->reset();
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "managed data: fence recorded");
    rc = cai_fence_synchronize(fence, &err);
    is_int(CAI_OK, rc, "host wait: success");
    is_int(1, cuda->host_waits(), "the host waited on the producer's event");
    contains(cuda->log(), "cudaEventSynchronize(ev1)\n",
             "an event synchronization, not a device-side wait");
    is_int(0, occurrences(cuda->log(), "cudaStreamWaitEvent"),
           "no stream wait the host would never see");
    cai_fence_destroy(fence, NULL);
}

/* ---- The reverse edge ---- */

struct release_args {
    const cai_fence_t *fence;
    int status;
};

static void *release_elsewhere(void *arg)
{
    struct release_args *r = arg;
    cai_error_t err;

    cuda->set_current_device(0);
    r->status = cai_fence_release(r->fence, CONSUMER_STREAM, &err);
    return NULL;
}

static void reverse_edge(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    struct release_args r;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int rc;

    cuda->reset();
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "fence recorded");
    rc = cai_fence_release(fence, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "release: success");
    contains(cuda->log(), "cudaEventRecord(ev2, 0x6000)\n",
             "release: an event on the consumer's stream");
    /* Named 4 times at record (its context, capture state, record and
     * id), never at release. */
    ok(occurrences(cuda->log(), "0x5000") == 4 && cuda->host_waits() == 0,
       "release: the producer's stream handle, taken long ago, is not named "
       "again, and the host does not wait");
    is_int(1, cuda->live_events(), "release: its own event destroyed");
    is_int(CAI_OK, cai_fence_release(fence, CAI_STREAM_NO_SYNC, &err),
           "release with -1: nothing to do");
    is_int(CAI_OK, cai_fence_release(fence, PRODUCER_STREAM, &err),
           "release on the producer's own stream: nothing to do");
    cai_fence_destroy(fence, NULL);

    /* The producer's per-thread stream, released on another thread. */
    cuda->reset();
    desc = producer(CAI_STREAM_PER_THREAD, kDLCUDA, 0);
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "per-thread producer: fence recorded");
    r.fence = fence;
    run_on_new_thread(release_elsewhere, &r);
    is_int(CAI_OK, r.status, "released on another thread: success");
    is_int(0,
           occurrences(cuda->log(), "cudaStreamWaitEvent(cudaStreamPerThread"),
           "that thread's stream 2 is not taken for the producer's");
    is_int(0, cuda->host_waits(), "nor does the host wait");
    cai_fence_destroy(fence, NULL);
}

/* ---- Graph captures ---- */

static void captures(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int rc;

    /* The consumer captures; the producer's work is outside: the fence
     * (kept by the caller) is waited on through an external node. */
    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 0);
    cuda->add_stream(CONSUMER_STREAM, 0);
    cuda->begin_capture(CONSUMER_STREAM, 7);
    rc = cai_fence_record(&desc, &fence, &err);
    if (rc == 0)
        rc = cai_fence_wait(fence, CONSUMER_STREAM, &err);
    cai_fence_destroy(fence, NULL);
    fence = NULL;
    is_int(CAI_OK, rc, "consumer capturing: ordered (%s)",
           rc == 0 ? "ok" : err.message);
    {
        char line[64];

        snprintf(line, sizeof line, "cudaStreamWaitEvent(0x6000, ev1, %s)",
                 "cudaEventWaitExternal");
        contains(cuda->log(), line, "an external-event wait node");
    }
    is_int(DOUBLE_CAPTURING, cuda->capture_state(CONSUMER_STREAM),
           "the user's capture is still valid");
    is_int(0, cuda->end_capture(CONSUMER_STREAM), "and ends cleanly");

    /* The producer captures; the consumer is outside. */
    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 0);
    cuda->add_stream(CONSUMER_STREAM, 0);
    cuda->begin_capture(PRODUCER_STREAM, 8);
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "producer capturing: the fence is recorded");
    rc = cai_fence_wait(fence, CONSUMER_STREAM, &err);
    is_int(CAI_EUNSUPPORTED, rc, "consumer outside the capture: refused");
    contains(err.message, "capture", "the message names the capture");
    is_int(0, occurrences(cuda->log(), "cudaStreamWaitEvent"),
           "refused before any wait is queued");
    is_int(DOUBLE_NOT_CAPTURING, cuda->capture_state(CONSUMER_STREAM),
           "the consumer's stream was not pulled into the capture");
    rc = cai_fence_synchronize(fence, &err);
    is_int(CAI_EUNSUPPORTED, rc, "the host cannot wait on captured work");
    is_int(0, cuda->end_capture(PRODUCER_STREAM),
           "the producer's capture "
           "ends cleanly (nothing left unjoined)");
    cai_fence_destroy(fence, NULL);

    /* Both in the same capture: a plain wait, a fork-join inside it. */
    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 0);
    cuda->add_stream(CONSUMER_STREAM, 0);
    cuda->begin_capture(PRODUCER_STREAM, 9);
    cuda->begin_capture(CONSUMER_STREAM, 9);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "both in one capture: ordered");
    contains(cuda->log(),
             "cudaStreamWaitEvent(0x6000, ev1, cudaEventWaitDefault)\n",
             "both in one capture: a plain wait");
    is_int(DOUBLE_CAPTURING, cuda->capture_state(CONSUMER_STREAM),
           "both in one capture: still valid");
    cuda->end_capture(PRODUCER_STREAM);
}

/* The batch form: a shared fence, one record, waits once per stream, and
 * is destroyed at its last owner's call. */
static void shared_fence_waits_once(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL, *second;
    cai_error_t err;
    int rc = 0, i, live;

    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 0);
    cuda->add_stream(CONSUMER_STREAM, 0);
    rc |= cai_fence_record(&desc, &fence, &err);
    second = cai_fence_share(fence);
    ok(second == fence, "cai_fence_share returns the fence");
    for (i = 0; i < 3; i++) {
        rc |= cai_fence_wait_once(fence, CONSUMER_STREAM, &err);
        rc |= cai_fence_wait_once(second, CAI_STREAM_LEGACY, &err);
    }
    is_int(CAI_OK, rc, "shared: recorded, and waited on twice three times");
    is_int(1, occurrences(cuda->log(), "cudaEventRecord"), "one record");
    is_int(2, occurrences(cuda->log(), "cudaStreamWaitEvent"),
           "one wait per consumer stream (a handle, stream 1)");
    live = cuda->live_events();
    is_int(CAI_OK, cai_fence_destroy(fence, &err), "the first owner's end");
    ok(cuda->live_events() == live &&
           occurrences(cuda->log(), "cudaEventDestroy") == 0,
       "the event lives on for the second owner");
    rc = cai_fence_wait_once(second, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "the second owner still hands over");
    is_int(CAI_OK, cai_fence_destroy(second, &err), "the last owner's end");
    is_int(2, occurrences(cuda->log(), "cudaStreamWaitEvent"),
           "and that stream waited once in all");
    ok(cai_fence_share(NULL) == NULL, "sharing NULL is NULL");
}

int main(void)
{
    if (!cai_cuda_built())
        skip_all("built without CUDA support");
    cuda = use_double();
    plan_lazy();
    is_int((intptr_t)cudaStreamLegacy, CAI_STREAM_LEGACY,
           "stream 1 is the runtime's cudaStreamLegacy handle");
    is_int((intptr_t)cudaStreamPerThread, CAI_STREAM_PER_THREAD,
           "stream 2 is the runtime's cudaStreamPerThread handle");
    is_int(CAI_STREAM_LEGACY, cai_cuda_stream_from_handle(0),
           "a raw cudaStream_t of 0 is the legacy default stream");
    is_int(0x5000, cai_cuda_stream_from_handle(0x5000),
           "other raw handles are themselves");
    per_thread_stream_across_threads();
    destroyed_producer_stream();
    nothing_to_order();
    stream_device_decides();
    non_primary_context_kept();
    fresh_thread_gets_no_context();
    legacy_stream_from_fresh_thread();
    host_consumer_synchronizes();
    reverse_edge();
    captures();
    shared_fence_waits_once();
    return 0;
}
