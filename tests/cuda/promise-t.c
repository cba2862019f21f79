/*
 * The promise through the C API, on the timeline double: a consumer's
 * release keeps the owner until the consumer's work queued before it has
 * run, whatever the producer's stream (the very same handle, or no fence
 * at all), and "the same stream" is proven by the stream's id, never by a
 * handle's value that CUDA may have given to a new stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda-release.h"
#include "cuda-test.h"

#define N 64

static const struct cudart_double *cuda;
static unsigned char src[N], out[N];
static int released;

static void count_release(void *owner)
{
    (void)owner;
    released++;
}

static void timeline(void)
{
    cuda->reset();
    cuda->timeline_on();
    cuda->add_allocation(src, N, DOUBLE_DEVICE, 0, NULL);
    cuda->add_allocation(out, N, DOUBLE_DEVICE, 0, NULL);
    memset(src, 7, N);
    memset(out, 0, N);
}

/* The consumer's read on stream is held back; the owner is released with
 * fence (NULL: the producer had none) and must stay until the read ran. */
static void kept_until_read(const cai_fence_t *fence, intptr_t stream,
                            const char *what)
{
    cai_error_t err;
    int gate = cuda->gate_new(), rc;

    cuda->launch_copy(stream, out, src, N, gate);
    released = 0;
    rc = cai_fence_release_owner(fence, stream, 0, NULL, count_release, &err);
    is_int(CAI_OK, rc, "%s: released", what);
    is_int(0, released, "%s: the owner is kept while the read is queued",
           what);
    is_int(CAI_OK, cai_release_poll(0, &err), "%s: a poll", what);
    is_int(0, released, "%s: still kept", what);
    cuda->gate_open(gate);
    cuda->drain();
    is_int(CAI_OK, cai_release_poll(0, &err), "%s: a poll after", what);
    is_int(1, released, "%s: the owner went after the read", what);
    ok(all_bytes(out, N, 7), "%s: the read saw the data", what);
    is_int(0, cuda->violations(), "%s: no violation %s", what,
           cuda->violation_log());
}

/* The consumer on the producer's own handle: its work is in order, but
 * the owner must still outlive it. */
static void same_handle_release(void)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    long a;

    timeline();
    a = cuda->stream_create(0);
    desc = producer(a, kDLCUDA, 0);
    desc.data = src;
    is_int(CAI_OK, cai_fence_record(&desc, &fence, &err),
           "same handle: fence");
    kept_until_read(fence, a, "same handle");
    cai_fence_destroy(fence, NULL);
}

/* No fence (a producer with no stream): the consumer on stream 1 still
 * reads the data. */
static void no_fence_release(void)
{
    timeline();
    kept_until_read(NULL, CAI_STREAM_LEGACY, "no fence, stream 1");
    timeline();
    kept_until_read(NULL, cuda->stream_create(0), "no fence, a handle");
}

/* The producer's stream destroyed and its handle given to a new stream:
 * a consumer naming that handle must wait (and a release keep the owner). */
static void reused_handle(int prove)
{
    const char *what = prove ? "reused handle" : "reused handle, no id";
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    long p = 0x7e200;
    int gate, rc;

    timeline();
    cuda->add_stream(p, 0);
    gate = cuda->gate_new();
    memset(src, 0, N);
    cuda->launch_fill(p, src, N, 7, gate);
    desc = producer(p, kDLCUDA, 0);
    desc.data = src;
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "%s: fence", what);
    cuda->destroy_stream(p);
    cuda->add_stream(p, 0);
    if (!prove)
        cuda->fail("cuStreamGetId", CUDA_ERROR_NOT_SUPPORTED);
    rc = cai_fence_wait(fence, p, &err);
    is_int(CAI_OK, rc, "%s: handed over", what);
    is_int(1, occurrences(cuda->log(), "cudaStreamWaitEvent("),
           "%s: the new stream waits", what);
    cuda->launch_copy(p, out, src, N, 0);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all_bytes(out, N, 7), "%s: the read saw the producer's data", what);
    cai_fence_destroy(fence, NULL);
}

/* The fence's own stream, proven by its id: no wait is queued. */
static void own_stream_no_wait(void)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    long a;

    timeline();
    a = cuda->stream_create(0);
    desc = producer(a, kDLCUDA, 0);
    desc.data = src;
    is_int(CAI_OK, cai_fence_record(&desc, &fence, &err), "own stream: fence");
    is_int(CAI_OK, cai_fence_wait(fence, a, &err), "own stream: handed over");
    is_int(0, occurrences(cuda->log(), "cudaStreamWaitEvent("),
           "own stream: no wait queued");
    cai_fence_destroy(fence, NULL);
}

/* A poll that waits (at exit) lets the owner go after the consumer's work:
 * the kernel's gate opens only when the host waits for it. */
static void waiting_poll_waits(void)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    long a, b;
    int gate;

    timeline();
    a = cuda->stream_create(0);
    b = cuda->stream_create(0);
    desc = producer(a, kDLCUDA, 0);
    desc.data = src;
    is_int(CAI_OK, cai_fence_record(&desc, &fence, &err),
           "waiting poll: fence");
    gate = cuda->gate_new();
    cuda->gate_open_on_host_wait(gate);
    cuda->launch_copy(b, out, src, N, gate);
    released = 0;
    is_int(CAI_OK,
           cai_fence_release_owner(fence, b, 0, NULL, count_release, &err),
           "waiting poll: released");
    cai_fence_destroy(fence, NULL);
    is_int(0, released, "waiting poll: kept while the read is held");
    is_int(CAI_OK, cai_release_poll(1, &err), "waiting poll: the poll");
    is_int(1, released, "waiting poll: the owner went after the read");
    ok(all_bytes(out, N, 7), "waiting poll: the read had run");
}

int main(void)
{
    cuda = use_double();
    plan(9 + 2 * 8 + 2 * 4 + 3 + 6);
    same_handle_release();
    no_fence_release();
    reused_handle(1);
    reused_handle(0);
    own_stream_no_wait();
    waiting_poll_waits();
    cuda->reset();
    return 0;
}
