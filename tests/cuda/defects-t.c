/*
 * Issue 22's CUDA defects, one function each (named defect_N), on the
 * double's timeline where data shows the race.  Each failed on 067b010
 * (the logic of 173cda8) and passes now.
 */
#include <stdio.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda-test.h"

#define N 64

static const struct cudart_double *cuda;
static unsigned char src[N], out[N], other[N];

/* Every byte of buf is value. */
#define all(buf, value) all_bytes(buf, N, value)

static void fresh(int timeline)
{
    cuda->reset();
    if (timeline)
        cuda->timeline_on();
    memset(src, 0, N);
    memset(out, 0, N);
    memset(other, 0, N);
    cuda->add_allocation(out, N, DOUBLE_DEVICE, 0, NULL);
    cuda->add_allocation(other, N, DOUBLE_DEVICE, 0, NULL);
}

static void no_violation(const char *what)
{
    cuda->drain();
    is_int(0, cuda->violations(), "%s: no violation %s", what,
           cuda->violation_log());
}

static cai_desc_t view_on(intptr_t stream, DLDeviceType type, int device)
{
    cai_desc_t desc = producer(stream, type, device);

    desc.data = src;
    return desc;
}

/* A fresh timeline with live streams *a and *b on device 0 and src
 * registered as memory of type: a view of src on *a. */
static cai_desc_t two_streams(int type, DLDeviceType device, long *a, long *b)
{
    fresh(1);
    *a = cuda->stream_create(0);
    *b = cuda->stream_create(0);
    cuda->add_allocation(src, N, type, 0, NULL);
    return view_on(*a, device, 0);
}

/* Counts releases of an owner (cai_fence_release_owner). */
static int released;

static void count_release(void *owner)
{
    (void)owner;
    released++;
}

/* 1: the producer destroys its stream before the consumer releases: the
 * handle is never named, and nothing blocks; the owner is kept until the
 * consumer's read is done. */
static void defect_1_reverse_edge_after_the_stream_died(void)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    long a, b;
    int gate, rc;

    desc = two_streams(DOUBLE_DEVICE, kDLCUDA, &a, &b);
    memset(src, 7, N);
    rc = cai_fence_record(&desc, &fence, &err);
    if (rc == 0)
        rc = cai_fence_wait(fence, b, &err);
    is_int(CAI_OK, rc, "defect 1: handed over from A to B");
    gate = cuda->gate_new();
    cuda->launch_copy(b, out, src, N, gate);
    cuda->destroy_stream(a);
    released = 0;
    rc = cai_fence_release_owner(fence, b, 0, NULL, count_release, &err);
    is_int(CAI_OK, rc, "defect 1: released after A was destroyed (%s)",
           rc == 0 ? "ok" : err.message);
    ok(cuda->host_waits() == 0 && released == 0,
       "defect 1: the host did not wait, and the owner is kept (%d)",
       released);
    cai_fence_destroy(fence, NULL);
    is_int(CAI_OK, cai_release_poll(0, &err), "defect 1: polled");
    is_int(0, released, "defect 1: still kept while the read is held back");
    cuda->gate_open(gate);
    cuda->drain();
    is_int(CAI_OK, cai_release_poll(0, &err), "defect 1: polled again");
    is_int(1, released, "defect 1: the owner went once the read was done");
    ok(all(out, 7), "defect 1: the consumer read the data");
    no_violation("defect 1: the destroyed handle was never named");
}

static void *locate_pool(void *arg)
{
    DLDevice *device = arg;
    cai_error_t err;

    if (cai_cuda_locate(src + 8, device, &err) != 0) {
        diag("defect 2: %s", err.message);
        device->device_type = (DLDeviceType)0;
    }
    if (cuda->current_context() != NULL)
        device->device_id = -100; /* a context was left current */
    return NULL;
}

/* 2: memory of a stream-ordered pool, located on a thread with no
 * context. */
static void defect_2_pool_memory_on_a_fresh_thread(void)
{
    DLDevice device = {(DLDeviceType)0, 0};
    int primaries;

    fresh(0);
    cuda->add_pool_allocation(src, N, 2);
    primaries = cuda->primary_contexts();
    run_on_new_thread(locate_pool, &device);
    ok(device.device_type == kDLCUDA && device.device_id == 2,
       "defect 2: pool memory is device memory of device 2 (type %d, id %d)",
       (int)device.device_type, device.device_id);
    is_int(primaries, cuda->primary_contexts(),
           "defect 2: no context created to locate it");
    ok(strstr(cuda->log(), "cudaPointerGetAttributes") == NULL,
       "defect 2: the runtime was not asked (it would need a context)");
}

struct order_args {
    cai_desc_t desc;
    intptr_t consumer;
    int status;
    void *context_after;
};

static void *order_elsewhere(void *arg)
{
    struct order_args *o = arg;
    cai_error_t err;

    o->status = cai_cuda_order(&o->desc, o->consumer, &err);
    if (o->status != 0)
        diag("%s", err.message);
    o->context_after = cuda->current_context();
    return NULL;
}

/* 5: stream 1 with pinned memory on a thread with no context: another
 * thread queued the producer's work on the legacy stream. */
static void defect_5_legacy_stream_pinned_no_context(void)
{
    struct order_args o;
    long b;
    int gate;

    fresh(1);
    b = cuda->stream_create(0);
    cuda->add_allocation(src, N, DOUBLE_PINNED, 0, NULL);
    gate = cuda->gate_new();
    cuda->launch_fill(CAI_STREAM_LEGACY, src, N, 7, gate);
    o.desc = view_on(CAI_STREAM_LEGACY, kDLCUDAHost, 0);
    o.consumer = b;
    run_on_new_thread(order_elsewhere, &o);
    is_int(CAI_OK, o.status,
           "defect 5: ordered from a thread with no "
           "context");
    ok(o.context_after == NULL, "defect 5: that thread has no context "
                                "afterwards");
    cuda->launch_copy(b, out, src, N, 0);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all(out, 7), "defect 5: the consumer read the producer's 7 (read %d)",
       out[0]);
    no_violation("defect 5");
}

/* 5, the other side: the legacy stream of a device whose primary context
 * is not active holds no work: nothing to record, nothing created. */
static void defect_5_inactive_primary_context(void)
{
    cai_desc_t desc = producer(CAI_STREAM_LEGACY, kDLCUDA, 3);
    cai_error_t err;
    int primaries, rc;

    fresh(0);
    primaries = cuda->primary_contexts();
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "defect 5: legacy stream of device 3, never used");
    is_int(primaries, cuda->primary_contexts(),
           "defect 5: device 3's primary context is not created");
    is_int(0, cuda->live_events(),
           "defect 5: no event for a stream that "
           "holds no work");
}

/* 6: CUDA 11's cudaSetDevice makes the primary context current only at
 * the next call that needs one. */
static void defect_6_cuda_11_set_device(void)
{
    cai_desc_t desc;
    cai_error_t err;
    void *mine;
    int rc;

    fresh(0);
    cuda->set_cuda11_set_device(1);
    cuda->add_stream(0x7100, 1); /* device 1's primary context is active */
    cuda->add_allocation(src, N, DOUBLE_DEVICE, 1, NULL);
    mine = cuda->current_context();
    desc = view_on(CAI_STREAM_LEGACY, kDLCUDA, 1);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "defect 6: ordered (%s)", rc == 0 ? "ok" : err.message);
    contains(cuda->log(), "ev1 on P1", "defect 6: the event is device 1's");
    ok(cuda->current_context() == mine,
       "defect 6: the caller's context (device 0's) is current again");
}

/* 7: a device without concurrent managed access: the host may not read
 * managed memory while any kernel runs there. */
static void defect_7_managed_without_concurrent_access(void)
{
    long a, b;
    cai_desc_t desc = two_streams(DOUBLE_MANAGED, kDLCUDAManaged, &a, &b);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int gate, rc;

    cuda->set_concurrent_managed_access(0);
    gate = cuda->gate_new();
    cuda->gate_open_on_host_wait(gate);
    cuda->launch_fill(a, src, N, 7, gate);
    cuda->launch_fill(b, other, N, 1, gate); /* someone else's kernel */
    rc = cai_fence_record(&desc, &fence, &err);
    if (rc == 0)
        rc = cai_fence_synchronize(fence, &err);
    is_int(CAI_OK, rc, "defect 7: host wait");
    contains(cuda->log(), "cudaDeviceSynchronize()",
             "defect 7: the host waited for the whole device");
    cuda->host_read(src, N);
    ok(all(src, 7), "defect 7: the host reads the producer's 7");
    cai_fence_destroy(fence, NULL);
    no_violation("defect 7: no read while a kernel ran");
}

/* 8: graph captures through the one-shot path, and two captures. */
static void defect_8_captures(void)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    long a, b, graph;
    int rc;

    desc = two_streams(DOUBLE_DEVICE, kDLCUDA, &a, &b);
    cuda->begin_capture(b, 7);
    rc = cai_cuda_order(&desc, b, &err);
    is_int(CAI_EUNSUPPORTED, rc,
           "defect 8: one-shot order into a capture: "
           "refused");
    contains(err.message, "cai_fence_record",
             "defect 8: the message says "
             "to keep a fence for the graph");
    is_int(0, cuda->end_capture(b), "defect 8: the capture ends cleanly");
    graph = cuda->instantiate(b);
    is_int(0, cuda->replay(graph, b), "defect 8: the graph replays");
    no_violation("defect 8: no replayed node names a destroyed event");

    desc = two_streams(DOUBLE_DEVICE, kDLCUDA, &a, &b);
    cuda->begin_capture(a, 5);
    cuda->begin_capture(b, 6);
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "defect 8: fence recorded in capture 5");
    rc = cai_fence_wait(fence, b, &err);
    is_int(CAI_EUNSUPPORTED, rc,
           "defect 8: a wait from capture 6: refused, "
           "not a CUDA error");
    contains(err.message, "another CUDA graph",
             "defect 8: the message "
             "names the two captures");
    is_int(DOUBLE_CAPTURING, cuda->capture_state(b),
           "defect 8: capture 6 "
           "is still valid");
    cai_fence_destroy(fence, NULL);
    cuda->end_capture(a);
    cuda->end_capture(b);
    no_violation("defect 8: two captures");
}

/* 9: a framework's stale "not ready" is not an error pending. */
static void defect_9_stale_not_ready(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_error_t err;
    int rc;

    fresh(0);
    cuda->set_pending_error(cudaErrorNotReady);
    cuda->fail("cudaEventRecord", cudaErrorInvalidValue);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_ECUDA, rc, "defect 9: a failed record is reported");
    ok(strstr(err.message, "already pending") == NULL,
       "defect 9: the hint does not blame 600: %s", err.message);
    is_int(0, cuda->pending_error(),
           "defect 9: caibridge's error is "
           "cleared");
}

static void *synchronize_elsewhere(void *arg)
{
    void **context = arg;
    cai_error_t err;

    if (cai_cuda_stream_synchronize(CAI_STREAM_LEGACY, &err) != 0)
        diag("defect 10: %s", err.message);
    *context = cuda->current_context();
    return NULL;
}

/* 10: synchronizing a stream on a fresh thread creates no context. */
static void defect_10_synchronize_makes_no_context(void)
{
    void *context = (void *)&context;

    fresh(0);
    run_on_new_thread(synchronize_elsewhere, &context);
    ok(context == NULL, "defect 10: no context left current on a fresh "
                        "thread");
    contains(cuda->log(), "cudaStreamSynchronize(cudaStreamLegacy)",
             "defect 10: the stream was synchronized");
}

static void *record_elsewhere(void *arg)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 1);
    cai_fence_t *fence = NULL;
    cai_error_t err;

    *(int *)arg = cai_fence_record(&desc, &fence, &err);
    if (fence != NULL)
        cai_fence_destroy(fence, NULL);
    return NULL;
}

/* 11: the restore after recording fails; the event is not leaked. */
static void defect_11_failed_restore_leaks_nothing(void)
{
    int status = 0;

    fresh(0);
    cuda->add_stream(PRODUCER_STREAM, 1);
    cuda->fail_after("cuCtxSetCurrent", CUDA_ERROR_INVALID_CONTEXT, 1);
    run_on_new_thread(record_elsewhere, &status);
    is_int(CAI_ECUDA, status, "defect 11: the failed restore is reported");
    is_int(0, cuda->live_events(),
           "defect 11: the event is destroyed even "
           "though no context switch works");
}

int main(void)
{
    cuda = use_double();
    plan(43);

    defect_1_reverse_edge_after_the_stream_died();
    defect_2_pool_memory_on_a_fresh_thread();
    defect_5_legacy_stream_pinned_no_context();
    defect_5_inactive_primary_context();
    defect_6_cuda_11_set_device();
    defect_7_managed_without_concurrent_access();
    defect_8_captures();
    defect_9_stale_not_ready();
    defect_10_synchronize_makes_no_context();
    defect_11_failed_restore_leaks_nothing();
    cuda->reset();
    return 0;
}
