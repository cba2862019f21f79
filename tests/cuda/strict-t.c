/*
 * The double's timeline is as strict as CUDA where ordering depends on it:
 * stream 2 is a queue per thread, stream 1 one per context, an event
 * records only on a stream of its own context, cudaDeviceSynchronize waits
 * for the current device only, and a gate set to open on a host wait opens
 * on a wait for its own kernel (directly or through stream waits), not on
 * any host wait.  Each check has its contrast, so it can fail.
 */
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cuda-test.h"

#define N 32
#define PER_THREAD 2
#define LEGACY 1

static const struct cudart_double *cuda;
static unsigned char src[N], out[N], other[N];

static cudaError_t (*event_create)(cudaEvent_t *, unsigned);
static cudaError_t (*event_record)(cudaEvent_t, cudaStream_t);
static cudaError_t (*event_synchronize)(cudaEvent_t);
static cudaError_t (*stream_wait)(cudaStream_t, cudaEvent_t, unsigned);
static cudaError_t (*stream_synchronize)(cudaStream_t);
static cudaError_t (*device_synchronize)(void);
static cudaError_t (*is_capturing)(cudaStream_t,
                                   enum cudaStreamCaptureStatus *);
static cudaError_t (*memcpy_async)(void *, const void *, size_t,
                                   enum cudaMemcpyKind, cudaStream_t);
static cudaError_t (*stream_create)(cudaStream_t *);
static cudaError_t (*stream_create_with_flags)(cudaStream_t *, unsigned);

static void bind(void *lib, void *var, const char *name)
{
    void *symbol = dlsym(lib, name);

    if (symbol == NULL)
        bail("the double has no %s", name);
    memcpy(var, &symbol, sizeof symbol);
}

static void bind_entry_points(void)
{
    void *lib = dlopen(CUDART_DOUBLE_PATH, RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL)
        bail("cannot load the double: %s", dlerror());
    bind(lib, &event_create, "cudaEventCreateWithFlags");
    bind(lib, &event_record, "cudaEventRecord");
    bind(lib, &event_synchronize, "cudaEventSynchronize");
    bind(lib, &stream_wait, "cudaStreamWaitEvent");
    bind(lib, &stream_synchronize, "cudaStreamSynchronize");
    bind(lib, &device_synchronize, "cudaDeviceSynchronize");
    bind(lib, &is_capturing, "cudaStreamIsCapturing");
    bind(lib, &memcpy_async, "cudaMemcpyAsync");
    bind(lib, &stream_create, "cudaStreamCreate");
    bind(lib, &stream_create_with_flags, "cudaStreamCreateWithFlags");
}

static void start(void)
{
    cuda->reset();
    cuda->timeline_on();
    memset(src, 0, N);
    memset(out, 0, N);
    memset(other, 0, N);
    cuda->add_allocation(src, N, DOUBLE_DEVICE, 0, NULL);
    cuda->add_allocation(out, N, DOUBLE_DEVICE, 0, NULL);
    cuda->add_allocation(other, N, DOUBLE_DEVICE, 1, NULL);
}

static void *copy_on_own_stream_2(void *arg)
{
    (void)arg;
    cuda->launch_copy(PER_THREAD, out, src, N, 0);
    return NULL;
}

/* 2 assertions. */
static void stream_2_per_thread(void)
{
    int gate;

    start();
    gate = cuda->gate_new();
    cuda->launch_fill(PER_THREAD, src, N, 7, gate);
    run_on_new_thread(copy_on_own_stream_2, NULL);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all_bytes(out, N, 0) && all_bytes(src, N, 7),
       "stream 2 of another thread is another queue: its copy ran before "
       "this thread's fill");

    start();
    gate = cuda->gate_new();
    cuda->launch_fill(PER_THREAD, src, N, 7, gate);
    cuda->launch_copy(PER_THREAD, out, src, N, 0);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all_bytes(out, N, 7), "stream 2 of one thread is one queue");
}

/* 2 assertions. */
static void stream_1_per_context(void)
{
    int gate;

    start();
    gate = cuda->gate_new();
    cuda->launch_fill(LEGACY, src, N, 7, gate);
    cuda->set_current_device(1);
    cuda->launch_copy(LEGACY, out, src, N, 0);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all_bytes(out, N, 0),
       "stream 1 with another context current is another queue");

    start();
    gate = cuda->gate_new();
    cuda->launch_fill(LEGACY, src, N, 7, gate);
    cuda->launch_copy(LEGACY, out, src, N, 0);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all_bytes(out, N, 7), "stream 1 of one context is one queue");
}

/* 4 assertions. */
static void events_stay_in_their_context(void)
{
    cudaEvent_t ev = NULL;
    long s1;

    start();
    s1 = cuda->stream_create(1);
    event_create(&ev, cudaEventDisableTiming);
    is_int(cudaErrorInvalidResourceHandle, event_record(ev, (cudaStream_t)s1),
           "an event of device 0 does not record on device 1's stream");
    cuda->set_current_device(1);
    is_int(cudaErrorInvalidResourceHandle, event_record(ev, NULL),
           "nor on stream 1 while device 1's context is current");
    is_int(cudaErrorInvalidResourceHandle,
           event_record(ev, cudaStreamPerThread),
           "nor on stream 2 while device 1's context is current");
    cuda->set_current_device(0);
    is_int(cudaSuccess, event_record(ev, cudaStreamPerThread),
           "its own context's stream 2 takes it");
}

/* 5 assertions. */
static void gates_open_on_their_own_wait(void)
{
    cudaEvent_t after_a = NULL, after_b = NULL;
    long a, b;
    int gate;

    start();
    a = cuda->stream_create(0);
    b = cuda->stream_create(0);
    gate = cuda->gate_new();
    cuda->gate_open_on_host_wait(gate);
    cuda->launch_fill(a, src, N, 7, gate);
    cuda->launch_fill(b, out, N, 1, 0);
    stream_synchronize((cudaStream_t)b);
    ok(all_bytes(out, N, 1) && all_bytes(src, N, 0),
       "a host wait on another stream leaves the gate closed");
    device_synchronize();
    ok(all_bytes(src, N, 7), "a wait on the whole device opens it");

    start();
    a = cuda->stream_create(0);
    b = cuda->stream_create(0);
    gate = cuda->gate_new();
    cuda->gate_open_on_host_wait(gate);
    cuda->launch_fill(a, src, N, 7, gate);
    event_create(&after_a, cudaEventDisableTiming);
    event_create(&after_b, cudaEventDisableTiming);
    event_record(after_a, (cudaStream_t)a);
    stream_wait((cudaStream_t)b, after_a, 0);
    cuda->launch_copy(b, out, src, N, 0);
    event_record(after_b, (cudaStream_t)b);
    event_synchronize(after_b);
    ok(all_bytes(out, N, 7),
       "a host wait on B, which waits on A, opens A's gate");
    cuda->drain();
    is_int(0, cuda->violations(), "gates: no violation");

    /* The device wait is the current device's: device 1's kernel, behind a
     * gate no host wait opens, does not hold it. */
    start();
    b = cuda->stream_create(1);
    gate = cuda->gate_new();
    cuda->launch_fill(b, other, N, 1, gate);
    device_synchronize();
    cuda->gate_open(gate);
    cuda->drain();
    is_int(0, cuda->violations(),
           "cudaDeviceSynchronize waits for the current device only");
}

/* A stream of the double's made blocking or not; 1: a legacy-stream call
 * made while it captured failed with cudaErrorStreamCaptureImplicit and
 * left the capture invalidated, 0: it worked and the capture is whole. */
static int legacy_breaks_capture(int blocking, int device, int call)
{
    long s = blocking ? cuda->stream_create_blocking(device)
                      : cuda->stream_create(device);
    cudaEvent_t ev = NULL, other = NULL;
    cudaError_t rc;

    event_create(&ev, cudaEventDisableTiming);
    event_create(&other, cudaEventDisableTiming);
    event_record(other, NULL);
    cuda->begin_capture(s, 21);
    switch (call) {
    case 0:
        rc = event_record(ev, NULL);
        break;
    case 1:
        rc = event_record(ev, cudaStreamLegacy);
        break;
    case 2:
        rc = stream_wait(NULL, other, 0);
        break;
    case 3:
        rc = memcpy_async(out, src, N, cudaMemcpyDeviceToDevice, NULL);
        break;
    default:
        rc = stream_synchronize(NULL);
        break;
    }
    if (rc == cudaSuccess && cuda->capture_state(s) == DOUBLE_CAPTURING &&
        cuda->end_capture(s) == 0)
        return 0;
    if (rc == cudaErrorStreamCaptureImplicit &&
        cuda->capture_state(s) == DOUBLE_INVALIDATED &&
        cuda->end_capture(s) == cudaErrorStreamCaptureInvalidated)
        return 1;
    return -1;
}

/* CUDA's rule for the legacy stream while a blocking stream of its context
 * captures.  8 assertions. */
static void legacy_stream_during_a_blocking_capture(void)
{
    enum cudaStreamCaptureStatus status;
    cudaStream_t made = NULL;
    int gate, call, all = 1;
    long s;

    start();
    for (call = 0; call < 5; call++)
        all = all && legacy_breaks_capture(1, 0, call) == 1;
    ok(all,
       "a record, a wait, a copy or a synchronize on the legacy stream "
       "while a blocking stream captures: cudaErrorStreamCaptureImplicit, "
       "and the capture is invalidated");
    /* A synchronize is refused in global mode whatever the stream. */
    for (call = 0, all = 1; call < 4; call++)
        all = all && legacy_breaks_capture(0, 0, call) == 0;
    ok(all, "a non-blocking stream's capture: the same calls but the "
            "synchronize work, and the capture is whole");
    is_int(0, legacy_breaks_capture(1, 1, 0),
           "a blocking stream of another context: the legacy stream works");

    s = cuda->stream_create_blocking(0);
    cuda->begin_capture(s, 22);
    ok(is_capturing(NULL, &status) == cudaErrorStreamCaptureImplicit &&
           cuda->capture_state(s) == DOUBLE_CAPTURING,
       "cudaStreamIsCapturing(legacy) while it captures: "
       "cudaErrorStreamCaptureImplicit, the capture left whole");
    ok(is_capturing(cudaStreamPerThread, &status) == cudaSuccess &&
           cuda->capture_state(s) == DOUBLE_CAPTURING,
       "the per-thread stream does not synchronize with it: works");
    cuda->end_capture(s);

    start();
    s = cuda->stream_create_blocking(0);
    gate = cuda->gate_new();
    cuda->launch_fill(s, src, N, 7, gate);
    cuda->launch_copy(LEGACY, out, src, N, 0);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all_bytes(out, N, 7),
       "the legacy stream waits for a blocking stream's earlier work");
    start();
    s = cuda->stream_create(0);
    gate = cuda->gate_new();
    cuda->launch_fill(s, src, N, 7, gate);
    cuda->launch_copy(LEGACY, out, src, N, 0);
    cuda->gate_open(gate);
    cuda->drain();
    ok(all_bytes(out, N, 0), "but not for a non-blocking stream's");

    start();
    stream_create(&made);
    cuda->begin_capture((long)(intptr_t)made, 23);
    ok(is_capturing(NULL, &status) == cudaErrorStreamCaptureImplicit,
       "cudaStreamCreate's streams are blocking");
    cuda->end_capture((long)(intptr_t)made);
    stream_create_with_flags(&made, cudaStreamNonBlocking);
    cuda->begin_capture((long)(intptr_t)made, 24);
    ok(is_capturing(NULL, &status) == cudaSuccess,
       "cudaStreamCreateWithFlags(cudaStreamNonBlocking)'s are not");
    cuda->end_capture((long)(intptr_t)made);
}

int main(void)
{
    plan(22);
    cuda = use_double();
    bind_entry_points();
    stream_2_per_thread();
    stream_1_per_context();
    events_stay_in_their_context();
    gates_open_on_their_own_wait();
    legacy_stream_during_a_blocking_capture();
    cuda->reset();
    return 0;
}
