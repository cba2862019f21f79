/*
 * The double ends contexts as CUDA does: cudaDeviceReset and
 * cuDevicePrimaryCtxReset end a primary context, cuCtxDestroy another one,
 * and the last cuDevicePrimaryCtxRelease a primary context only the driver
 * held.  The events and streams of an ended context are dead: using one is
 * a violation (and an invalid handle), while the same calls on live handles
 * are not.  These are the double's own checks, which the hand-over tests
 * rely on to see a stale handle.
 */
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda-test.h"

static const struct cudart_double *cuda;

static cudaError_t (*event_create)(cudaEvent_t *, unsigned);
static cudaError_t (*event_record)(cudaEvent_t, cudaStream_t);
static cudaError_t (*stream_synchronize)(cudaStream_t);
static cudaError_t (*device_reset)(void);
static CUresult (*ctx_destroy)(CUcontext);
static CUresult (*ctx_set_current)(CUcontext);
static CUresult (*ctx_get_id)(CUcontext, unsigned long long *);
static CUresult (*primary_retain)(CUcontext *, CUdevice);
static CUresult (*primary_release)(CUdevice);
static CUresult (*primary_reset)(CUdevice);
static CUresult (*primary_state)(CUdevice, unsigned *, int *);

static void *entry(void *lib, const char *name)
{
    void *symbol = dlsym(lib, name);

    if (symbol == NULL)
        bail("the double has no %s", name);
    return symbol;
}

#define BIND(var, name)               \
    do {                              \
        void *s_ = entry(lib, name);  \
        memcpy(&var, &s_, sizeof s_); \
    } while (0)

static void bind_entry_points(void)
{
    void *lib = dlopen(CUDART_DOUBLE_PATH, RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL)
        bail("cannot load the double: %s", dlerror());
    BIND(event_create, "cudaEventCreateWithFlags");
    BIND(event_record, "cudaEventRecord");
    BIND(stream_synchronize, "cudaStreamSynchronize");
    BIND(device_reset, "cudaDeviceReset");
    BIND(ctx_destroy, "cuCtxDestroy_v2");
    BIND(ctx_set_current, "cuCtxSetCurrent");
    BIND(ctx_get_id, "cuCtxGetId");
    BIND(primary_retain, "cuDevicePrimaryCtxRetain");
    BIND(primary_release, "cuDevicePrimaryCtxRelease_v2");
    BIND(primary_reset, "cuDevicePrimaryCtxReset_v2");
    BIND(primary_state, "cuDevicePrimaryCtxGetState");
}

static int active(int device)
{
    unsigned flags;
    int on = -1;

    primary_state(device, &flags, &on);
    return on;
}

/* 8 assertions. */
static void device_reset_kills_handles(void)
{
    cudaEvent_t ev = NULL, fresh = NULL;
    unsigned long long before = 0, after = 0;
    long stream;
    CUcontext p0 = cuda->current_context();

    cuda->reset();
    stream = cuda->stream_create(0);
    event_create(&ev, cudaEventDisableTiming);
    ctx_get_id(p0, &before);
    is_int(cudaSuccess, event_record(ev, (cudaStream_t)stream),
           "reset: a live event records on a live stream");
    is_int(0, cuda->violations(), "reset: no violation before");
    is_int(cudaSuccess, device_reset(), "cudaDeviceReset succeeds");
    is_int(cudaErrorInvalidResourceHandle, event_record(ev, NULL),
           "reset: the old event is an invalid handle");
    contains(cuda->violation_log(), "of a destroyed context",
             "reset: using the old event is a violation");
    is_int(cudaErrorInvalidResourceHandle,
           stream_synchronize((cudaStream_t)stream),
           "reset: the old stream is an invalid handle");
    is_int(2, cuda->violations(), "reset: two uses, two violations");
    event_create(&fresh, cudaEventDisableTiming);
    event_record(fresh, NULL);
    ctx_get_id(p0, &after);
    ok(cuda->violations() == 2 && after != before && after != 0,
       "reset: a new event on the primary context made again is fine, and "
       "the context has a new id under the same handle");
}

/* 7 assertions. */
static void ctx_destroy_kills_handles(void)
{
    void *ctx;
    cudaEvent_t ev = NULL;

    cuda->reset();
    ctx = cuda->create_context(1);
    cuda->add_stream_on_context(0x7000, ctx);
    cuda->set_current_context(ctx);
    event_create(&ev, cudaEventDisableTiming);
    is_int(cudaSuccess, event_record(ev, (cudaStream_t)0x7000),
           "destroy: the context's event records on its stream");
    is_int(CUDA_SUCCESS, ctx_destroy(ctx), "cuCtxDestroy succeeds");
    ok(cuda->current_context() == NULL,
       "destroy: the calling thread has no context current after");
    is_int(cudaErrorInvalidResourceHandle,
           event_record(ev, (cudaStream_t)0x7000),
           "destroy: its event is an invalid handle");
    is_int(cudaErrorInvalidResourceHandle,
           stream_synchronize((cudaStream_t)0x7000),
           "destroy: its stream is an invalid handle");
    is_int(CUDA_ERROR_INVALID_CONTEXT, ctx_set_current(ctx),
           "destroy: the context cannot be made current again");
    is_int(3, cuda->violations(),
           "destroy: event, stream and context use: three violations");
}

/* 3 assertions. */
static void primary_not_destroyable(void)
{
    cuda->reset();
    is_int(CUDA_ERROR_INVALID_CONTEXT, ctx_destroy(cuda->current_context()),
           "cuCtxDestroy refuses a primary context");
    is_int(1, active(0), "the primary context stays active");
    is_int(0, cuda->violations(), "refusing it is no violation");
}

/* 9 assertions. */
static void primary_released_to_zero(void)
{
    CUcontext p2 = NULL, again = NULL, p0 = NULL;
    cudaEvent_t ev = NULL;

    cuda->reset();
    is_int(0, active(2), "release: device 2's primary context inactive");
    primary_retain(&p2, 2);
    primary_retain(&again, 2);
    ok(p2 != NULL && p2 == again, "release: retained twice, one context");
    ctx_set_current(p2);
    event_create(&ev, cudaEventDisableTiming);
    is_int(CUDA_SUCCESS, primary_release(2), "release: first release");
    is_int(cudaSuccess, event_record(ev, NULL),
           "release: one retain left, its event still records");
    is_int(CUDA_SUCCESS, primary_release(2), "release: the last release");
    is_int(0, active(2), "release: released to zero, it ended");
    is_int(cudaErrorInvalidResourceHandle, event_record(ev, NULL),
           "release: its event is an invalid handle");
    is_int(CUDA_ERROR_INVALID_CONTEXT, primary_release(2),
           "release: one release too many fails");
    /* The runtime's own primary context outlives the driver's retains. */
    primary_retain(&p0, 0);
    primary_release(0);
    ok(active(0) == 1 && cuda->violations() == 2 &&
           occurrences(cuda->violation_log(), "without a retain") == 1,
       "release: two violations (the stale event, the extra release); a "
       "primary context the runtime uses stays");
}

/* 3 assertions. */
static void primary_reset_kills_handles(void)
{
    cudaEvent_t ev = NULL;

    cuda->reset();
    event_create(&ev, cudaEventDisableTiming);
    is_int(CUDA_SUCCESS, primary_reset(0), "cuDevicePrimaryCtxReset succeeds");
    is_int(cudaErrorInvalidResourceHandle, event_record(ev, NULL),
           "primary reset: the old event is an invalid handle");
    is_int(1, cuda->violations(), "primary reset: a violation");
}

int main(void)
{
    plan(30);
    cuda = use_double();
    bind_entry_points();
    device_reset_kills_handles();
    ctx_destroy_kills_handles();
    primary_not_destroyable();
    primary_released_to_zero();
    primary_reset_kills_handles();
    cuda->reset();
    return 0;
}
