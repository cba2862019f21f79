/*
 * Races on data, on the double's timeline: the producer's kernel writes on
 * stream A behind a gate the test opens; the consumer reads on stream B or
 * on the host.  Each C path of the hand-over gives the written values with
 * ordering, and the old values without it (the race is seen, so the check
 * can fail).  Time is the gates': nothing here sleeps.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda-test.h"

#define N 64

static const struct cudart_double *cuda;
static unsigned char src[N], out[N];
static long stream_a, stream_b;

/* Every byte of buf is value. */
#define all(buf, value) all_bytes(buf, N, value)

/* A fresh timeline: two live streams on device 0, src and out zeros and
 * registered as memory of type. */
static void start(int type)
{
    cuda->reset();
    cuda->timeline_on();
    stream_a = cuda->stream_create(0);
    stream_b = cuda->stream_create(0);
    memset(src, 0, N);
    memset(out, 0, N);
    cuda->add_allocation(src, N, type, 0, NULL);
    cuda->add_allocation(out, N, DOUBLE_DEVICE, 0, NULL);
}

static cai_desc_t view(intptr_t stream, DLDeviceType type)
{
    cai_desc_t desc = producer(stream, type, 0);

    desc.data = src;
    return desc;
}

/* A fresh timeline (src of type, seen as device) where the producer's
 * kernel on A fills src with 7 once its gate opens (also when the host
 * blocks, for on_host_wait); *desc is the view of src on A.  The gate. */
static int produce(int type, DLDeviceType device, int on_host_wait,
                   cai_desc_t *desc)
{
    int gate;

    start(type);
    *desc = view(stream_a, device);
    gate = cuda->gate_new();
    if (on_host_wait)
        cuda->gate_open_on_host_wait(gate);
    cuda->launch_fill(stream_a, src, N, 7, gate);
    return gate;
}

/* Drains, then checks the violations (expected: none). */
static void finish(const char *what)
{
    cuda->drain();
    is_int(0, cuda->violations(), "%s: no violation %s", what,
           cuda->violation_log());
}

/* The consumer's copy on B (consumer is B's stream value, 0 for B itself)
 * after a hand-over through cai_cuda_order, or through cai_fence_record
 * and cai_fence_wait (fenced), sees the producer's fill, or not. */
static void hand_over(int fenced, intptr_t consumer, int expect,
                      const char *what)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int gate, rc;

    gate = produce(DOUBLE_DEVICE, kDLCUDA, 0, &desc);
    consumer = consumer ? consumer : stream_b;
    if (fenced) {
        rc = cai_fence_record(&desc, &fence, &err);
        is_int(CAI_OK, rc, "%s: fence recorded", what);
        rc = cai_fence_wait(fence, consumer, &err);
    } else {
        rc = cai_cuda_order(&desc, consumer, &err);
    }
    is_int(CAI_OK, rc, "%s: success", what);
    cuda->launch_copy(stream_b, out, src, N, 0);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all(out, expect), "%s: the consumer read %d (read %d)", what, expect,
       out[0]);
    cai_fence_destroy(fence, &err);
    finish(what);
}

/* A host reader of pinned or managed memory: cai_fence_synchronize (or
 * not) before reading src. */
static void host_reader(int type, DLDeviceType device, int wait,
                        const char *what)
{
    cai_fence_t *fence = NULL;
    cai_desc_t desc;
    int gate = produce(type, device, 1, &desc), rc;
    cai_error_t err;

    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "%s: fence recorded", what);
    if (wait) {
        rc = cai_fence_synchronize(fence, &err);
        is_int(CAI_OK, rc, "%s: host wait: success", what);
    }
    memcpy(out, src, N);
    ok(all(out, wait ? 7 : 0), "%s: the host read %d (read %d)", what,
       wait ? 7 : 0, out[0]);
    cuda->gate_open(gate);
    cai_fence_destroy(fence, &err);
    finish(what);
}

/* The reverse edge: the consumer reads src behind a gate; the producer
 * then writes 9 over it on its stream (0: A, a handle).  The producer's
 * write waits for the consumer's read: with cai_fence_release (release 1)
 * on the device for stream 1; for a handle, which is never named at
 * release, only with the blocking opt-in (release 2: the host waits). */
static void reverse_edge(intptr_t producer_stream, int release,
                         const char *what)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int gate, rc;

    start(DOUBLE_DEVICE);
    if (producer_stream == 0)
        producer_stream = stream_a;
    memset(src, 7, N);
    desc = view(producer_stream, kDLCUDA);
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "%s: fence recorded", what);
    rc = cai_fence_wait(fence, stream_b, &err);
    is_int(CAI_OK, rc, "%s: consumer waits", what);
    gate = cuda->gate_new();
    cuda->gate_open_on_host_wait(gate);
    cuda->launch_copy(stream_b, out, src, N, gate);
    if (release) {
        rc = release == 1
                 ? cai_fence_release(fence, stream_b, &err)
                 : cai_fence_release_owner(fence, stream_b, CAI_RELEASE_BLOCK,
                                           NULL, NULL, &err);
        is_int(CAI_OK, rc, "%s: released (%s)", what,
               rc == 0 ? "ok" : err.message);
    }
    cuda->launch_fill(producer_stream, src, N, 9, 0);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all(out, release ? 7 : 9), "%s: the consumer read %d (read %d)", what,
       release ? 7 : 9, out[0]);
    cai_fence_destroy(fence, &err);
    finish(what);
}

/* The producer on stream 1 of a non-primary context on device 1, released
 * while device 0's context is current: the producer's next write, on its
 * context's stream 1, waits for the consumer's read (with the fence's
 * context entered, not device 0's, nor device 1's primary one). */
static void reverse_edge_other_context(int release, const char *what)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    void *ctx;
    int gate, rc;

    cuda->reset();
    cuda->timeline_on();
    memset(src, 7, N);
    memset(out, 0, N);
    cuda->add_allocation(src, N, DOUBLE_DEVICE, 1, NULL);
    cuda->add_allocation(out, N, DOUBLE_DEVICE, 1, NULL);
    stream_b = cuda->stream_create(1);
    ctx = cuda->create_context(1);
    cuda->set_current_context(ctx);
    desc = producer(CAI_STREAM_LEGACY, kDLCUDA, 1);
    desc.data = src;
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "%s: fence recorded", what);
    rc = cai_fence_wait(fence, stream_b, &err);
    is_int(CAI_OK, rc, "%s: consumer waits", what);
    gate = cuda->gate_new();
    cuda->launch_copy(stream_b, out, src, N, gate);
    cuda->set_current_device(0);
    if (release) {
        rc = cai_fence_release(fence, stream_b, &err);
        is_int(CAI_OK, rc, "%s: released (%s)", what,
               rc == 0 ? "ok" : err.message);
    }
    cuda->set_current_context(ctx);
    cuda->launch_fill(CAI_STREAM_LEGACY, src, N, 9, 0);
    cuda->set_current_device(0);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all(out, release ? 7 : 9), "%s: the consumer read %d (read %d)", what,
       release ? 7 : 9, out[0]);
    cai_fence_destroy(fence, &err);
    finish(what);
}

/* A producer on stream 2 of this thread, released by another thread:
 * there stream 2 is that thread's own, so no edge is queued on it (the
 * producer's stream 2 cannot be named from there).  That thread's next
 * work on its stream 2 runs while the consumer's read is still held back,
 * where a wait queued on it would stall it behind unrelated work. */
static unsigned char other[N];
struct elsewhere {
    const cai_fence_t *fence;
    int released, ran;
};

static void *release_then_work(void *p)
{
    struct elsewhere *e = p;
    cai_desc_t mine;
    cai_fence_t *done = NULL;
    cai_error_t err;

    cuda->set_current_device(0);
    e->released = cai_fence_release(e->fence, stream_b, &err);
    cuda->launch_fill(CAI_STREAM_PER_THREAD, other, N, 5, 0);
    mine = producer(CAI_STREAM_PER_THREAD, kDLCUDA, 0);
    mine.data = other;
    e->ran = cai_fence_record(&mine, &done, &err) == 0 &&
             cai_fence_synchronize(done, &err) == 0 && all(other, 5);
    cai_fence_destroy(done, NULL);
    return NULL;
}

static void release_on_another_thread(void)
{
    struct elsewhere e = {NULL, -1, 0};
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int gate, rc;

    start(DOUBLE_DEVICE);
    memset(other, 0, N);
    cuda->add_allocation(other, N, DOUBLE_DEVICE, 0, NULL);
    memset(src, 7, N);
    cuda->set_current_device(0);
    desc = view(CAI_STREAM_PER_THREAD, kDLCUDA);
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "stream 2 released elsewhere: fence recorded");
    rc = cai_fence_wait(fence, stream_b, &err);
    is_int(CAI_OK, rc, "stream 2 released elsewhere: consumer waits");
    gate = cuda->gate_new();
    cuda->launch_copy(stream_b, out, src, N, gate);
    e.fence = fence;
    run_on_new_thread(release_then_work, &e);
    is_int(CAI_OK, e.released, "stream 2 released elsewhere: released");
    ok(e.ran, "stream 2 released elsewhere: that thread's stream 2 ran "
              "while the consumer's read was held back");
    cuda->gate_open(gate);
    cai_fence_destroy(fence, &err);
    finish("stream 2 released elsewhere");
}

int main(void)
{
    /* With the event pool on: events reused across hand-overs. */
    setenv("CAIBRIDGE_EVENT_POOL", "8", 1);
    cuda = use_double();
    plan(60);

    hand_over(0, 0, 7, "cai_cuda_order A -> B");
    hand_over(0, CAI_STREAM_NO_SYNC, 0,
              "cai_cuda_order, consumer -1: race "
              "seen");
    hand_over(1, 0, 7, "cai_fence_wait A -> B");
    hand_over(1, CAI_STREAM_NO_SYNC, 0,
              "cai_fence_wait, consumer -1: race "
              "seen");
    host_reader(DOUBLE_PINNED, kDLCUDAHost, 1,
                "pinned, cai_fence_synchronize");
    host_reader(DOUBLE_PINNED, kDLCUDAHost, 0,
                "pinned, no host wait: race "
                "seen");
    host_reader(DOUBLE_MANAGED, kDLCUDAManaged, 1,
                "managed, cai_fence_synchronize");
    host_reader(DOUBLE_MANAGED, kDLCUDAManaged, 0,
                "managed, no host wait: race seen");
    reverse_edge(CAI_STREAM_LEGACY, 1, "reverse edge onto stream 1");
    reverse_edge(CAI_STREAM_LEGACY, 0, "no release: race seen");
    reverse_edge(0, 2, "reverse edge, producer on a handle (blocking opt-in)");
    reverse_edge(0, 0, "producer on a handle, no release: race seen");
    reverse_edge_other_context(1, "reverse edge onto a non-primary "
                                  "context's stream 1, released from "
                                  "device 0");
    reverse_edge_other_context(0, "the same, no release: race seen");
    release_on_another_thread();
    return 0;
}
