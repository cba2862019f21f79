/*
 * The per-context event pool: once warm, a hand-over records and waits and
 * makes or destroys no event; events of graph captures are never reused;
 * each context has its own.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda-test.h"

static const struct cudart_double *cuda;

static void warm_hand_overs(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int i, rc = 0;

    reset_with_streams(cuda);
    rc |= cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    reset_with_streams(cuda);
    for (i = 0; i < 5; i++)
        rc |= cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "warm: 5 orderings");
    is_int(0,
           occurrences(cuda->log(), "cudaEventCreate") +
               occurrences(cuda->log(), "cudaEventDestroy"),
           "warm: no event made or destroyed");
    is_int(5, occurrences(cuda->log(), "cudaEventRecord"),
           "warm: one record each");
    is_int(5, occurrences(cuda->log(), "cudaStreamWaitEvent"),
           "warm: one wait each");

    for (i = 0; i < 5; i++) {
        rc |= cai_fence_record(&desc, &fence, &err);
        rc |= cai_fence_wait(fence, CONSUMER_STREAM, &err);
        rc |= cai_fence_destroy(fence, &err);
    }
    is_int(CAI_OK, rc, "warm: 5 fences");
    is_int(0,
           occurrences(cuda->log(), "cudaEventCreate") +
               occurrences(cuda->log(), "cudaEventDestroy"),
           "warm fences: no event made or destroyed");
    ok(cuda->live_events() >= 1 && cuda->live_events() <= 8,
       "the pool keeps a few events (%d)", cuda->live_events());
}

static void per_context(void)
{
    cai_desc_t desc = producer(0x7100, kDLCUDA, 1);
    cai_error_t err;
    int rc;

    cuda->reset();
    cuda->add_stream(0x7100, 1);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "device 1: ordered");
    contains(cuda->log(),
             "cudaEventCreateWithFlags(cudaEventDisableTiming) "
             "= ev1 on P1",
             "device 1's event is made in its own context, "
             "not taken from device 0's pool");
}

static void captures_not_reused(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int rc;

    reset_with_streams(cuda);
    cuda->begin_capture(PRODUCER_STREAM, 3);
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "captured fence recorded");
    cai_fence_destroy(fence, NULL);
    is_int(1, occurrences(cuda->log(), "cudaEventDestroy"),
           "a captured event is destroyed, not kept");
    cuda->end_capture(PRODUCER_STREAM);

    reset_with_streams(cuda);
    cuda->begin_capture(CONSUMER_STREAM, 4);
    rc = cai_fence_record(&desc, &fence, &err);
    if (rc == 0)
        rc = cai_fence_wait(fence, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "a capture waits on a fence from outside");
    cai_fence_destroy(fence, NULL);
    is_int(1, occurrences(cuda->log(), "cudaEventDestroy"),
           "an event a graph node names is destroyed, not kept");
    cuda->end_capture(CONSUMER_STREAM);
}

/* Every slot of the pool's table taken by a live context, and cuCtxGetId
 * failing (999, not "destroyed"): no slot is taken back, so no pooled
 * event is dropped undestroyed; the new event is destroyed instead. */
static void full_table_and_failed_query(void)
{
    cai_fence_t *fence = NULL;
    cai_error_t err;
    cai_desc_t desc;
    int i, rc = 0, live;

    cuda->reset();
    for (i = 0; i < 9; i++) {
        void *ctx = cuda->create_context(i % 4);

        cuda->add_stream_on_context(0x9000 + 0x100 * i, ctx);
    }
    for (i = 0; i < 8; i++) {
        desc = producer(0x9000 + 0x100 * i, kDLCUDA, i % 4);
        rc |= cai_fence_record(&desc, &fence, &err);
        rc |= cai_fence_destroy(fence, &err);
    }
    is_int(CAI_OK, rc, "eight contexts: a pooled event each");
    desc = producer(0x9800, kDLCUDA, 0);
    rc = cai_fence_record(&desc, &fence, &err);
    is_int(CAI_OK, rc, "a ninth context: a fence");
    live = cuda->live_events();
    cuda->fail_after("cuCtxGetId", 999, 0);
    (void)cai_fence_destroy(fence, &err);
    cuda->fail("cuCtxGetId", 0);
    is_int(live - 1, cuda->live_events(),
           "the ninth event destroyed, no pooled one dropped");
}

int main(void)
{
    setenv("CAIBRIDGE_EVENT_POOL", "8", 1);
    cuda = use_double();
    plan(16);
    warm_hand_overs();
    per_context();
    captures_not_reused();
    full_table_and_failed_query();
    cuda->reset();
    return 0;
}
