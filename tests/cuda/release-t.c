/*
 * Releases that never block the host, and the event pool when calls fail:
 * the owner is kept until the consumer's event completes (polled), every
 * failure path destroys its event (live events are counted), the pool
 * setting is read strictly, and "the same thread" is an identity no later
 * thread gets.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda-release.h"
#include "cuda-test.h"

#define N 64
#define ROUNDS 5

static const struct cudart_double *cuda;
static unsigned char src[N], out[N];
static int released;

static void count_release(void *owner)
{
    (void)owner;
    released++;
}

static void pool_setting(void)
{
    static const struct {
        const char *value;
        int rc, size;
    } cases[] = {
        {"8", 0, 8},
        {"0", 0, 0},
        {"3", 0, 3},
        {"", 0, 8},
        {"9", 0, 8},
        {"4294967297", 0, 8},
        {"99999999999999999999999", 0, 8},
        {"abc", -1, 8},
        {"0x10", -1, 8},
        {"-4294967295", -1, 8},
        {"1e3", -1, 8},
        {" 8", -1, 8},
        {"+3", -1, 8},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof *cases; i++) {
        int size = -5, rc = cai_event_pool_parse(cases[i].value, &size);

        ok(rc == cases[i].rc && size == cases[i].size,
           "CAIBRIDGE_EVENT_POOL=\"%s\": %s, pool %d (got %d, %d)",
           cases[i].value, cases[i].rc ? "not understood" : "understood",
           cases[i].size, rc, size);
    }
}

/* The consumer's kernel is held back: the release returns at once, makes
 * no blocking call, keeps the owner, and drops it once the kernel ran. */
static void release_does_not_block(intptr_t producer_stream, const char *what)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    long a, b;
    int gate, rc;

    cuda->reset();
    cuda->timeline_on();
    a = cuda->stream_create(0);
    b = cuda->stream_create(0);
    cuda->add_allocation(src, N, DOUBLE_DEVICE, 0, NULL);
    cuda->add_allocation(out, N, DOUBLE_DEVICE, 0, NULL);
    memset(src, 7, N);
    memset(out, 0, N);
    desc = producer(producer_stream ? producer_stream : a, kDLCUDA, 0);
    desc.data = src;
    rc = cai_fence_record(&desc, &fence, &err);
    if (rc == 0)
        rc = cai_fence_wait(fence, b, &err);
    is_int(CAI_OK, rc, "%s: handed over", what);
    gate = cuda->gate_new();
    cuda->launch_copy(b, out, src, N, gate);
    released = 0;
    rc = cai_fence_release_owner(fence, b, 0, NULL, count_release, &err);
    is_int(CAI_OK, rc, "%s: released", what);
    is_int(0, cuda->host_waits(), "%s: no host wait", what);
    ok(strstr(cuda->log(), "Synchronize") == NULL,
       "%s: no blocking call at all", what);
    is_int(0, released, "%s: the owner is kept", what);
    is_int(1, (int)cai_release_pending_count(), "%s: one release pending",
           what);
    cai_fence_destroy(fence, NULL);
    is_int(CAI_OK, cai_release_poll(0, &err), "%s: a poll", what);
    is_int(0, released, "%s: still kept while the kernel is held", what);
    is_int(0, cuda->host_waits(), "%s: the poll did not wait", what);
    is_int(0, cuda->pending_error(),
           "%s: \"not ready\" was not left "
           "pending",
           what);
    cuda->gate_open(gate);
    cuda->drain();
    is_int(CAI_OK, cai_release_poll(0, &err), "%s: a poll after", what);
    is_int(1, released, "%s: the owner went after the kernel", what);
    ok(all_bytes(out, N, 7), "%s: the consumer read the data", what);
    is_int(0, cuda->violations(), "%s: no violation %s", what,
           cuda->violation_log());
}

/* At exit: a poll that waits drops every pending owner. */
static void poll_at_exit(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int rc;

    reset_with_streams(cuda);
    cuda->timeline_on();
    rc = cai_fence_record(&desc, &fence, &err);
    released = 0;
    if (rc == 0)
        rc = cai_fence_release_owner(fence, CONSUMER_STREAM, 0, NULL,
                                     count_release, &err);
    cai_fence_destroy(fence, NULL);
    is_int(CAI_OK, rc, "exit: a release pending");
    is_int(CAI_OK, cai_release_poll(1, &err), "exit: the poll that waits");
    ok(released == 1 && cai_release_pending_count() == 0,
       "exit: the owner went, none is left (%d)", released);
    is_int(0, cuda->violations(), "exit: no violation");
}

/* A warm pool: a few hand-overs, their events given back. */
static int warm(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_error_t err;
    int i;

    reset_with_streams(cuda);
    for (i = 0; i < 3; i++)
        if (cai_cuda_order(&desc, CONSUMER_STREAM, &err) != 0)
            diag("warm: %s", err.message);
    return cuda->live_events();
}

/* Error 400 on a pooled event's record: that event is destroyed, and the
 * pool is neither leaked nor left behind. */
static void record_fails_on_a_pooled_event(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int i, before = warm(), rc = 0;

    for (i = 0; i < ROUNDS; i++) {
        reset_with_streams(cuda);
        cuda->fail("cudaEventRecord", 400);
        rc |= cai_fence_record(&desc, &fence, &err) == 0;
        reset_with_streams(cuda);
        rc |= cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    }
    is_int(0, rc, "error 400: each record refused, then hand-overs work");
    ok(cuda->live_events() <= before,
       "error 400 %d times: %d live events, "
       "no more than the warm pool's %d",
       ROUNDS, cuda->live_events(), before);
}

/* cuCtxGetCurrent fails while a fence is destroyed, or while a release
 * records: the event is destroyed all the same. */
static void context_save_fails(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int i, before = warm(), failed = 0;

    /* Fences recorded in a capture: never pooled, so each destroy makes
     * CUDA calls. */
    for (i = 0; i < ROUNDS * 8; i++) {
        reset_with_streams(cuda);
        cuda->begin_capture(PRODUCER_STREAM, 9);
        if (cai_fence_record(&desc, &fence, &err) != 0)
            continue;
        cuda->end_capture(PRODUCER_STREAM);
        cuda->fail("cuCtxGetCurrent", 999);
        failed += cai_fence_destroy(fence, &err) != 0;
    }
    is_int(ROUNDS * 8, failed, "a failed save: each destroy reports it");
    reset_with_streams(cuda);
    ok(cuda->live_events() <= before,
       "a failed save %d times: %d live "
       "events, no more than %d",
       ROUNDS * 8, cuda->live_events(), before);

    released = 0;
    for (i = 0; i < ROUNDS; i++) {
        reset_with_streams(cuda);
        if (cai_fence_record(&desc, &fence, &err) != 0)
            continue;
        cuda->fail_after("cudaEventRecord", 700, 0);
        (void)cai_fence_release_owner(fence, CONSUMER_STREAM, 0, NULL,
                                      count_release, &err);
        reset_with_streams(cuda);
        cai_fence_destroy(fence, NULL);
    }
    ok(released == ROUNDS && cai_release_pending_count() == 0,
       "a failed release record: the owner goes at once (%d)", released);
    ok(cuda->live_events() <= before,
       "a failed release record: %d live "
       "events, no more than %d",
       cuda->live_events(), before);
}

/* The switch to the fence's context fails (no context current): the event
 * is destroyed in the current one all the same. */
static void context_switch_fails(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int i, before = warm();

    for (i = 0; i < ROUNDS * 8; i++) {
        reset_with_streams(cuda);
        if (cai_fence_record(&desc, &fence, &err) != 0)
            continue;
        cuda->set_current_context(NULL);
        cuda->fail("cuCtxSetCurrent", 999);
        (void)cai_fence_destroy(fence, &err);
    }
    reset_with_streams(cuda);
    ok(cuda->live_events() <= before,
       "a failed switch %d times: %d live "
       "events, no more than %d",
       ROUNDS * 8, cuda->live_events(), before);
}

/* "The thread that recorded the fence" for stream 2: a thread that exited
 * may leave its pthread_t to the next one, never its identity. */
struct recorded {
    cai_fence_t *fence;
    pthread_t self;
    int status;
};

static void *record_on_2(void *arg)
{
    struct recorded *r = arg;
    cai_desc_t desc = producer(CAI_STREAM_PER_THREAD, kDLCUDA, 0);
    cai_error_t err;

    cuda->set_current_device(0);
    r->self = pthread_self();
    r->status = cai_fence_record(&desc, &r->fence, &err);
    return NULL;
}

static void *release_2(void *arg)
{
    struct recorded *r = arg;
    cai_error_t err;

    cuda->set_current_device(0);
    r->self = pthread_self();
    r->status = cai_fence_release(r->fence, CONSUMER_STREAM, &err);
    return NULL;
}

static void thread_identity(void)
{
    struct recorded first, second;

    reset_with_streams(cuda);
    memset(&first, 0, sizeof first);
    run_on_new_thread(record_on_2, &first);
    is_int(CAI_OK, first.status, "thread identity: fence on stream 2");
    second = first;
    run_on_new_thread(release_2, &second);
    is_int(CAI_OK, second.status,
           "thread identity: released on a new "
           "thread");
    if (!pthread_equal(first.self, second.self))
        diag("this run did not reuse the pthread_t");
    is_int(0,
           occurrences(cuda->log(), "cudaStreamWaitEvent(cudaStreamPerThread"),
           "thread identity: a new thread's stream 2 is never taken for "
           "the producer's%s",
           pthread_equal(first.self, second.self) ? " (same pthread_t)" : "");
    cai_fence_destroy(first.fence, NULL);
}

/* The double's ways of ending a context, called as another library
 * would. */
static cudaError_t (*device_reset)(void);
static CUresult (*ctx_destroy)(CUcontext);
static CUresult (*primary_retain)(CUcontext *, CUdevice);
static CUresult (*primary_release)(CUdevice);

static void bind_enders(void)
{
    void *lib = dlopen(CUDART_DOUBLE_PATH, RTLD_NOW | RTLD_LOCAL);
    void *s;

    if (lib == NULL)
        bail("cannot load the double: %s", dlerror());
    s = dlsym(lib, "cudaDeviceReset");
    memcpy(&device_reset, &s, sizeof s);
    s = dlsym(lib, "cuCtxDestroy_v2");
    memcpy(&ctx_destroy, &s, sizeof s);
    s = dlsym(lib, "cuDevicePrimaryCtxRetain");
    memcpy(&primary_retain, &s, sizeof s);
    s = dlsym(lib, "cuDevicePrimaryCtxRelease_v2");
    memcpy(&primary_release, &s, sizeof s);
    if (device_reset == NULL || ctx_destroy == NULL ||
        primary_retain == NULL || primary_release == NULL)
        bail("the double cannot end contexts");
}

/* Hand-overs from stream p to c on device, warming the pool; then a live
 * fence on p. */
static cai_fence_t *warm_on(intptr_t p, intptr_t c, int device)
{
    cai_desc_t desc = producer(p, kDLCUDA, device);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int i;

    for (i = 0; i < 3; i++)
        if (cai_cuda_order(&desc, c, &err) != 0)
            diag("warm: %s", err.message);
    if (cai_fence_record(&desc, &fence, &err) != 0)
        diag("fence: %s", err.message);
    return fence;
}

/* After the context ended: hand-overs on new streams of its successor
 * (the same handle, for a primary context) work, the live fence is waited
 * on and destroyed, and no event of the ended context is named. */
static void after_the_end(cai_fence_t *fence, intptr_t p, intptr_t c,
                          int device, const char *how)
{
    cai_desc_t desc = producer(p, kDLCUDA, device);
    cai_error_t err;
    int rc, i;

    for (i = 0; i < 3; i++) {
        rc = cai_cuda_order(&desc, c, &err);
        if (rc != 0)
            break;
    }
    is_int(CAI_OK, rc, "%s: hand-overs afterwards (%s)", how,
           rc == 0 ? "ok" : err.message);
    rc = cai_fence_wait(fence, c, &err);
    is_int(CAI_OK, rc, "%s: a wait on a fence of the ended context (%s)", how,
           rc == 0 ? "ok" : err.message);
    cai_fence_destroy(fence, NULL);
    is_int(0, cuda->violations(),
           "%s: no event of the ended context is "
           "used, recorded, waited on or destroyed %s",
           how, cuda->violation_log());
}

/* 3 assertions each. */
static void pool_after_contexts_end(void)
{
    cai_fence_t *fence;
    CUcontext ctx = NULL;

    cuda->reset();
    cuda->add_stream(0x7000, 0);
    cuda->add_stream(0x7100, 0);
    fence = warm_on(0x7000, 0x7100, 0);
    device_reset();
    cuda->add_stream(0x7200, 0);
    cuda->add_stream(0x7300, 0);
    after_the_end(fence, 0x7200, 0x7300, 0, "cudaDeviceReset");

    cuda->reset();
    ctx = cuda->create_context(1);
    cuda->add_stream_on_context(0x7400, ctx);
    cuda->add_stream_on_context(0x7500, ctx);
    fence = warm_on(0x7400, 0x7500, 1);
    ctx_destroy(ctx);
    ctx = cuda->create_context(1);
    cuda->add_stream_on_context(0x7600, ctx);
    cuda->add_stream_on_context(0x7700, ctx);
    after_the_end(fence, 0x7600, 0x7700, 1, "cuCtxDestroy");

    cuda->reset();
    primary_retain(&ctx, 2);
    cuda->add_stream_on_context(0x7800, ctx);
    cuda->add_stream_on_context(0x7900, ctx);
    fence = warm_on(0x7800, 0x7900, 2);
    primary_release(2);
    primary_retain(&ctx, 2);
    cuda->add_stream_on_context(0x7a00, ctx);
    cuda->add_stream_on_context(0x7b00, ctx);
    after_the_end(fence, 0x7a00, 0x7b00, 2, "primary released to zero");
    primary_release(2);
}

/* A fence that cannot go back to the pool (recorded in a capture) and
 * outlives its context: its dead event is dropped, not destroyed. */
static void unpooled_fence_after_reset(void)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int rc;

    cuda->reset();
    cuda->add_stream(0x9000, 0);
    desc = producer(0x9000, kDLCUDA, 0);
    cuda->begin_capture(0x9000, 12);
    rc = cai_fence_record(&desc, &fence, &err);
    cuda->end_capture(0x9000);
    device_reset();
    cai_fence_destroy(fence, NULL);
    ok(rc == 0 && cuda->violations() == 0,
       "a captured fence after a reset: "
       "destroyed without touching its dead event %s",
       cuda->violation_log());
}

/* An event of a failed step is destroyed, not given back to the pool. */
static void failed_step_not_pooled(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_error_t err;
    int rc;

    (void)warm();
    reset_with_streams(cuda);
    cuda->fail("cudaStreamWaitEvent", 999);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    ok(rc != 0 && occurrences(cuda->log(), "cudaEventDestroy") == 1,
       "a failed wait: its event destroyed, not pooled");
}

/* A poll that finds a release not done leaves alone an error the
 * framework had pending (and clears only its own "not ready"). */
static void poll_keeps_a_pending_error(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int gate, rc;

    reset_with_streams(cuda);
    cuda->timeline_on();
    rc = cai_fence_record(&desc, &fence, &err);
    gate = cuda->gate_new();
    cuda->launch_fill(CONSUMER_STREAM, out, N, 1, gate);
    released = 0;
    if (rc == 0)
        rc = cai_fence_release_owner(fence, CONSUMER_STREAM, 0, NULL,
                                     count_release, &err);
    cai_fence_destroy(fence, NULL);
    cuda->set_pending_error(cudaErrorInvalidConfiguration);
    rc |= cai_release_poll(0, &err);
    is_int(cudaErrorInvalidConfiguration, cuda->pending_error(),
           "poll: the framework's pending error is left");
    cuda->gate_open(gate);
    cuda->drain();
    /* A framework's stale "not ready" is an answer, no error: the poll
     * runs, and leaves it as it was. */
    cuda->set_pending_error(cudaErrorNotReady);
    rc |= cai_release_poll(0, &err);
    ok(rc == 0 && released == 1,
       "poll: a stale \"not ready\" pending does not hold it back, the "
       "owner went");
    is_int(cudaErrorNotReady, cuda->pending_error(),
           "poll: and the framework's stale value is left as it was");
}

/* The pool keeps exactly its limit (8): 12 fences destroyed leave 8
 * pooled, so 12 more create exactly 4 events. */
static void pool_capacity(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fences[12];
    cai_error_t err;
    int i, round;

    for (round = 0; round < 2; round++) {
        reset_with_streams(cuda);
        for (i = 0; i < 12; i++)
            if (cai_fence_record(&desc, &fences[i], &err) != 0)
                fences[i] = NULL;
        for (i = 0; i < 12; i++)
            cai_fence_destroy(fences[i], NULL);
    }
    is_int(4, occurrences(cuda->log(), "cudaEventCreateWithFlags"),
           "pool: 12 fences on a full pool create exactly 4 events");
}

/* A pool whose context ended is forgotten when one of its events is met:
 * its slot serves the next context (9 ends, 8 slots). */
static void pool_slots_come_back(void)
{
    cai_desc_t desc;
    cai_fence_t *fence = NULL;
    cai_error_t err;
    long s = 0x8000;
    int i;

    for (i = 0; i < 9; i++, s += 0x200) {
        cuda->reset();
        cuda->add_stream(s, 0);
        cuda->add_stream(s + 0x100, 0);
        fence = warm_on(s, s + 0x100, 0);
        device_reset();
        cai_fence_destroy(fence, NULL);
    }
    cuda->reset();
    cuda->add_stream(s, 0);
    cuda->add_stream(s + 0x100, 0);
    desc = producer(s, kDLCUDA, 0);
    for (i = 0; i < 3; i++)
        (void)cai_cuda_order(&desc, s + 0x100, &err);
    is_int(1, occurrences(cuda->log(), "cudaEventCreateWithFlags"),
           "pool: after 9 contexts ended, the next one still pools");
    is_int(0, cuda->violations(), "pool: no violation %s",
           cuda->violation_log());
}

/* A poll that switches to an event's context to query it puts the
 * caller's (none) back. */
static void poll_restores_the_context(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    int gate, rc;

    reset_with_streams(cuda);
    cuda->timeline_on();
    rc = cai_fence_record(&desc, &fence, &err);
    gate = cuda->gate_new();
    cuda->launch_fill(CONSUMER_STREAM, out, N, 1, gate);
    released = 0;
    if (rc == 0)
        rc = cai_fence_release_owner(fence, CONSUMER_STREAM, 0, NULL,
                                     count_release, &err);
    cai_fence_destroy(fence, NULL);
    cuda->set_current_context(NULL);
    cuda->gate_open(gate);
    cuda->drain();
    rc |= cai_release_poll(0, &err);
    ok(rc == 0 && released == 1, "poll: the owner went (%d)", released);
    ok(cuda->current_context() == NULL, "poll: no context left current");
}

/* In a child forked after CUDA was used, CUDA refuses every call (the
 * double as CUDA): a hand-over fails, naming the fork, and no event of
 * the parent's pool is ever named there. */
static void pool_not_kept_after_fork(void)
{
    int status = -1;
    pid_t pid;

    (void)warm();
    pid = fork();
    if (pid == 0) {
        cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
        cai_error_t err;
        int rc;

        reset_with_streams(cuda);
        rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
        _exit(rc == CAI_ENOCUDA && strstr(err.message, "forked") != NULL &&
                      strstr(cuda->log(), "Event") == NULL
                  ? 0
                  : 1);
    }
    if (pid > 0)
        waitpid(pid, &status, 0);
    ok(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
       "fork: the child's hand-over fails as CUDA does, naming the fork, "
       "and names no event of the parent's pool");
}

/* Another thread's graph capture (global mode) survives caibridge's host
 * and device waits, and this thread's capture mode is put back. */
static void host_waits_keep_captures(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDAManaged, 0);
    cai_fence_t *fence = NULL;
    cai_error_t err;
    long other;
    int rc;

    reset_with_streams(cuda);
    cuda->set_concurrent_managed_access(0);
    other = cuda->stream_create(0);
    cuda->begin_capture(other, 11);
    rc = cai_fence_record(&desc, &fence, &err);
    if (rc == 0)
        rc = cai_fence_synchronize(fence, &err);
    is_int(CAI_OK, rc, "capture elsewhere: host and device waits (%s)",
           rc == 0 ? "ok" : err.message);
    if (rc == 0)
        rc = cai_fence_release_owner(fence, CONSUMER_STREAM, CAI_RELEASE_BLOCK,
                                     NULL, NULL, &err);
    is_int(CAI_OK, rc, "capture elsewhere: a blocking release");
    ok(occurrences(cuda->log(), "cudaEventSynchronize") == 2 &&
           occurrences(cuda->log(), "cudaDeviceSynchronize") == 1,
       "capture elsewhere: the waits were made");
    is_int(DOUBLE_CAPTURING, cuda->capture_state(other),
           "capture elsewhere: still valid");
    is_int(occurrences(cuda->log(), "cudaThreadExchangeStreamCaptureMode(2)"),
           occurrences(cuda->log(), "cudaThreadExchangeStreamCaptureMode(0)"),
           "capture elsewhere: the thread's global mode put back each time");
    cai_fence_destroy(fence, NULL);
    cuda->end_capture(other);
    cuda->set_concurrent_managed_access(1);
}

int main(void)
{
    /* The pool on, as users have it. */
    setenv("CAIBRIDGE_EVENT_POOL", "8", 1);
    cuda = use_double();
    plan(13 + 2 * 14 + 4 + 2 + 4 + 1 + 3 + 3 * 3 + 1 + 2 + 3 + 1 + 5 + 1 + 1 +
         2);
    bind_enders();
    pool_setting();
    release_does_not_block(0, "producer on a handle");
    release_does_not_block(CAI_STREAM_LEGACY, "producer on stream 1");
    poll_at_exit();
    record_fails_on_a_pooled_event();
    context_save_fails();
    context_switch_fails();
    thread_identity();
    pool_after_contexts_end();
    unpooled_fence_after_reset();
    failed_step_not_pooled();
    poll_keeps_a_pending_error();
    pool_capacity();
    pool_slots_come_back();
    poll_restores_the_context();
    pool_not_kept_after_fork();
    host_waits_keep_captures();
    cuda->reset();
    return 0;
}
