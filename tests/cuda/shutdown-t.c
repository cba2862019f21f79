/*
 * cai_shutdown on the CUDA double: it refuses while a deferred release is
 * pending, then destroys every pooled event (the double counts none left
 * alive) and lets the runtime go; the host functions keep working.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda-test.h"

static int released;
static unsigned char scratch[64];

static void count_release(void *owner)
{
    (void)owner;
    released++;
}

int main(void)
{
    const struct cudart_double *cuda;
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    DLDataType type;
    int i, gate, rc = 0;

    plan_lazy();
    /* The pool on, as users get it. */
    if (setenv("CAIBRIDGE_EVENT_POOL", "8", 1) != 0)
        bail("cannot set CAIBRIDGE_EVENT_POOL");
    cuda = use_double();
    reset_with_streams(cuda);
    for (i = 0; i < 3; i++)
        rc |= cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "three orderings");
    ok(cuda->live_events() >= 1, "the pool keeps events (%d)",
       cuda->live_events());

    /* A release deferred until the consumer's work, a kernel held back
     * by a gate, has run. */
    cuda->timeline_on();
    cuda->add_allocation(scratch, sizeof scratch, DOUBLE_DEVICE, 0, NULL);
    gate = cuda->gate_new();
    cuda->launch_fill(CONSUMER_STREAM, scratch, sizeof scratch, 1, gate);
    rc = cai_fence_record(&desc, &fence, &err);
    if (rc == 0)
        rc = cai_fence_release_owner(fence, CONSUMER_STREAM, 0, NULL,
                                     count_release, &err);
    (void)cai_fence_destroy(fence, NULL);
    is_int(CAI_OK, rc, "a release handed over");
    is_int(0, released, "the owner is kept while the kernel is held");
    i = cuda->live_events();
    is_int(CAI_EINVAL, cai_shutdown(&err), "a release pending: refused");
    is_string("releases", err.field, "naming the releases");
    is_int(i, cuda->live_events(), "and nothing was freed");
    cuda->gate_open(gate);
    cuda->drain();
    is_int(CAI_OK, cai_release_poll(1, &err), "the poll that waits");
    is_int(1, released, "the owner went");

    i = occurrences(cuda->log(), "cudaEventDestroy");
    rc = cai_shutdown(&err);
    is_int(CAI_OK, rc, "shut down: %s", err.message);
    is_int(0, cuda->live_events(), "no event is left alive");
    ok(occurrences(cuda->log(), "cudaEventDestroy") > i,
       "the pooled events were destroyed");
    is_int(0, cuda->violations(), "no violation %s", cuda->violation_log());
    i = occurrences(cuda->log(), "\n");
    is_int(CAI_OK, cai_shutdown(&err), "a second shutdown: 0");
    is_int(i, occurrences(cuda->log(), "\n"), "making no CUDA call");

    is_int(CAI_OK, cai_typestr_parse("<f4", 3, &type, &err),
           "the host functions still work");
    return 0;
}
