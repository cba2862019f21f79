/*
 * cai_cuda_order and cai_cuda_stream_synchronize on the recording double:
 * the exact CUDA calls made for each producer/consumer stream case.
 */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "cuda-test.h"

static const struct cudart_double *cuda;

/* Runs one ordering from a clean double; returns the status. */
static int order(cai_desc_t desc, intptr_t consumer, cai_error_t *err)
{
    cuda->reset();
    return cai_cuda_order(&desc, consumer, err);
}

/* Orders a producer on stream, data of type on device, before
 * CONSUMER_STREAM on the double as the case left it. */
static int order_before_consumer(intptr_t stream, DLDeviceType type,
                                 int device, cai_error_t *err)
{
    cai_desc_t desc = producer(stream, type, device);

    return cai_cuda_order(&desc, CONSUMER_STREAM, err);
}

/* As above from device 0's PRODUCER_STREAM, with call failing with error
 * on a fresh double. */
static int order_failing(const char *call, int error, cai_error_t *err)
{
    cuda->reset();
    cuda->fail(call, error);
    return order_before_consumer(PRODUCER_STREAM, kDLCUDA, 0, err);
}

/* Cases that need no ordering, hence no CUDA call. */
static void no_call_cases(void)
{
    static const struct {
        intptr_t producer, consumer;
        const char *what, *log_what; /* as said of the status, the log */
    } cases[] = {
        {0, CONSUMER_STREAM, "producer without a stream",
         "producer without a stream"},
        {PRODUCER_STREAM, CAI_STREAM_NO_SYNC, "consumer stream -1",
         "consumer stream -1"},
        {PRODUCER_STREAM, PRODUCER_STREAM, "same stream on both sides",
         "same stream on both sides"},
        {CAI_STREAM_LEGACY, CAI_STREAM_LEGACY,
         "both on the legacy default stream", "both on the legacy stream"},
        {CAI_STREAM_PER_THREAD, CAI_STREAM_PER_THREAD,
         "both on the per-thread default stream",
         "both on the per-thread stream"},
    };
    cai_error_t err;
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = order(producer(cases[i].producer, kDLCUDA, 0),
                       cases[i].consumer, &err);

        is_int(CAI_OK, rc, "%s: success", cases[i].what);
        is_string("", cuda->log(), "%s: no CUDA call", cases[i].log_what);
    }
}

static void refused_cases(void)
{
    cai_error_t err;
    int rc;

    rc = order(producer(PRODUCER_STREAM, kDLCUDA, 0), 0, &err);
    is_int(CAI_EINVAL, rc, "consumer stream 0: refused");
    contains(err.message, "stream = 0 is disallowed",
             "consumer stream 0: the message names the rule");
    is_string("stream", err.field, "consumer stream 0: field is stream");
    is_string("", cuda->log(), "consumer stream 0: no CUDA call");

    rc = order(producer(0, kDLCUDA, 0), 0, &err);
    is_int(CAI_EINVAL, rc,
           "consumer stream 0 without a producer stream: "
           "still refused");

    rc = order(producer(PRODUCER_STREAM, kDLCUDA, 0), -7, &err);
    is_int(CAI_EINVAL, rc, "consumer stream -7: refused");
    contains(err.message, "-7 is not a stream",
             "consumer stream -7: the message says why");

    rc = order(producer(-1, kDLCUDA, 0), CONSUMER_STREAM, &err);
    is_int(CAI_EINVAL, rc, "producer stream -1: refused");
    contains(err.message, "producer stream = -1",
             "producer stream -1: the message names it");
    is_string("", cuda->log(), "refused producer stream: no CUDA call");
}

/* The context part of the log for a stream: a handle's context is asked
 * (producer side), a default stream's device is checked against the
 * data's. */
static const char *context_lines(const char *stream, int producer,
                                 char buf[64])
{
    if (strncmp(stream, "cudaStream", 10) == 0)
        snprintf(buf, 64, "cuCtxGetDevice() = 0\n");
    else if (producer)
        snprintf(buf, 64, "cuStreamGetCtx(%s) = P0\n", stream);
    else
        buf[0] = '\0';
    return buf;
}

/* The calls an ordering makes with device 0's primary context current,
 * between streams written as they appear in the log. */
static void expect_event_ordering(const char *name, const char *p,
                                  const char *s)
{
    char expected[768], pc[64], sc[64];

    snprintf(expected, sizeof expected,
             "cuCtxGetCurrent() = P0\n"
             "%s"
             "cudaStreamIsCapturing(%s) = 0\n"
             "cudaEventCreateWithFlags(cudaEventDisableTiming) = ev1 on P0\n"
             "cudaEventRecord(ev1, %s)\n"
             "%s"
             "cudaStreamIsCapturing(%s) = 0\n"
             "cudaStreamWaitEvent(%s, ev1, cudaEventWaitDefault)\n"
             "cudaEventDestroy(ev1)\n",
             context_lines(p, 1, pc), p, p, context_lines(s, 0, sc), s, s);
    is_string(expected, cuda->log(),
              "%s: event recorded on %s, %s waits "
              "on it, event destroyed",
              name, p, s);
    is_int(0, cuda->live_events(), "%s: no event left alive", name);
    ok(strstr(cuda->log(), "cudaStreamSynchronize") == NULL,
       "%s: the host is never blocked", name);
}

static void event_cases(void)
{
    static const struct {
        const char *name;
        intptr_t p, s;
        const char *p_text, *s_text;
    } cases[] = {
        {"two streams", PRODUCER_STREAM, CONSUMER_STREAM, "0x5000", "0x6000"},
        {"consumer on the legacy stream", PRODUCER_STREAM, CAI_STREAM_LEGACY,
         "0x5000", "cudaStreamLegacy"},
        {"consumer on the per-thread stream", PRODUCER_STREAM,
         CAI_STREAM_PER_THREAD, "0x5000", "cudaStreamPerThread"},
        {"legacy producer, per-thread consumer", CAI_STREAM_LEGACY,
         CAI_STREAM_PER_THREAD, "cudaStreamLegacy", "cudaStreamPerThread"},
        {"per-thread producer, legacy consumer", CAI_STREAM_PER_THREAD,
         CAI_STREAM_LEGACY, "cudaStreamPerThread", "cudaStreamLegacy"},
        {"per-thread producer, own consumer stream", CAI_STREAM_PER_THREAD,
         CONSUMER_STREAM, "cudaStreamPerThread", "0x6000"},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof *cases; i++) {
        cai_error_t err;
        int rc = order(producer(cases[i].p, kDLCUDA, 0), cases[i].s, &err);

        is_int(CAI_OK, rc, "%s: success", cases[i].name);
        expect_event_ordering(cases[i].name, cases[i].p_text, cases[i].s_text);
    }
}

/* Pinned and managed memory carry device 0 by convention: the stream's
 * context is used as is. */
static void host_accessible_cases(void)
{
    cai_error_t err;
    int rc;

    cuda->reset();
    cuda->set_current_device(2);
    rc = order_before_consumer(PRODUCER_STREAM, kDLCUDAManaged, 0, &err);
    is_int(CAI_OK, rc, "managed producer: success");
    is_string("cuCtxGetCurrent() = P2\n"
              "cuStreamGetCtx(0x5000) = P2\n"
              "cudaStreamIsCapturing(0x5000) = 0\n"
              "cudaEventCreateWithFlags(cudaEventDisableTiming) = ev1 on P2\n"
              "cudaEventRecord(ev1, 0x5000)\n"
              "cudaStreamIsCapturing(0x6000) = 0\n"
              "cudaStreamWaitEvent(0x6000, ev1, cudaEventWaitDefault)\n"
              "cudaEventDestroy(ev1)\n",
              cuda->log(),
              "managed producer: event in the stream's context, "
              "no device switch");
}

/* The stream's device decides, not the data's (a handle); the data's
 * device decides for the default streams. */
static void other_device_cases(void)
{
    cai_error_t err;
    int rc;

    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 1);
    rc = order_before_consumer(PRODUCER_STREAM, kDLCUDA, 1, &err);
    is_int(CAI_OK, rc,
           "producer stream on device 1, device 0 current: "
           "success");
    is_string("cuCtxGetCurrent() = P0\n"
              "cuStreamGetCtx(0x5000) = P1\n"
              "cuCtxSetCurrent(P1)\n"
              "cudaStreamIsCapturing(0x5000) = 0\n"
              "cudaEventCreateWithFlags(cudaEventDisableTiming) = ev1 on P1\n"
              "cudaEventRecord(ev1, 0x5000)\n"
              "cudaStreamIsCapturing(0x6000) = 0\n"
              "cudaStreamWaitEvent(0x6000, ev1, cudaEventWaitDefault)\n"
              "cudaEventDestroy(ev1)\n"
              "cuCtxSetCurrent(P0)\n",
              cuda->log(),
              "producer stream on device 1: the event is made "
              "and recorded in its context, then P0 is current again");
    is_int(0, cuda->current_device(),
           "producer on device 1: device 0 "
           "restored");

    /* CuPy reports the current device's stream for data elsewhere. */
    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 0);
    rc = order_before_consumer(PRODUCER_STREAM, kDLCUDA, 1, &err);
    is_int(CAI_OK, rc,
           "data on device 1, producer stream on device 0: "
           "success (the event is the stream's device's)");
    contains(cuda->log(), "ev1 on P0\n",
             "data on device 1, stream on "
             "device 0: event made on device 0");

    cuda->reset();
    rc = order_before_consumer(CAI_STREAM_LEGACY, kDLCUDA, 1, &err);
    is_int(CAI_OK, rc, "legacy stream, data on device 1: success");
    is_string("cuCtxGetCurrent() = P0\n"
              "cuCtxGetDevice() = 0\n"
              "cuDevicePrimaryCtxGetState(1) = active\n"
              "cuDevicePrimaryCtxRetain(1) = P1\n"
              "cuCtxSetCurrent(P1)\n"
              "cudaStreamIsCapturing(cudaStreamLegacy) = 0\n"
              "cudaEventCreateWithFlags(cudaEventDisableTiming) = ev1 on P1\n"
              "cudaEventRecord(ev1, cudaStreamLegacy)\n"
              "cudaStreamIsCapturing(0x6000) = 0\n"
              "cudaStreamWaitEvent(0x6000, ev1, cudaEventWaitDefault)\n"
              "cudaEventDestroy(ev1)\n"
              "cuCtxSetCurrent(P0)\n"
              "cuDevicePrimaryCtxRelease(1)\n",
              cuda->log(),
              "legacy stream: the data's device's stream, then "
              "the caller's context again");

    cuda->reset();
    cuda->add_stream(0x7300, 3); /* device 3's primary context is active */
    cuda->fail("cudaEventRecord", cudaErrorInvalidValue);
    rc = order_before_consumer(CAI_STREAM_LEGACY, kDLCUDA, 3, &err);
    is_int(CAI_ECUDA, rc, "failing record on device 3: CAI_ECUDA");
    is_int(0, cuda->current_device(),
           "failing record on device 3: device "
           "0 restored");
    ok(cuda->current_context() != NULL, "failing record: a context is "
                                        "current again");
    is_int(0, cuda->live_events(),
           "failing record on device 3: event "
           "destroyed");

    cuda->reset();
    rc = order_before_consumer(CAI_STREAM_LEGACY, kDLCUDA, 9, &err);
    is_int(CAI_ECUDA, rc,
           "data on a device that does not exist: "
           "CAI_ECUDA");
    contains(err.message, "cuDevicePrimaryCtxGetState failed",
             "no such device: the message names the call");
    ok(strstr(cuda->log(), "cudaEventCreate") == NULL,
       "no such device: no event is created");
}

static void failure_cases(void)
{
    cai_error_t err;
    int rc;

    rc =
        order_failing("cudaEventRecord", cudaErrorInvalidResourceHandle, &err);
    is_int(CAI_ECUDA, rc, "record fails: CAI_ECUDA");
    is_string("stream", err.field, "record fails: field is stream");
    contains(err.message,
             "cudaEventRecord failed: double: invalid handle "
             "(CUDA error 400)",
             "record fails: the message names the call, "
             "the runtime's text and the number");
    is_string("cuCtxGetCurrent() = P0\n"
              "cuStreamGetCtx(0x5000) = P0\n"
              "cudaStreamIsCapturing(0x5000) = 0\n"
              "cudaEventCreateWithFlags(cudaEventDisableTiming) = ev1 on P0\n"
              "cudaEventRecord(ev1, 0x5000) -> error 400\n"
              "cudaEventDestroy(ev1)\n"
              "cudaGetErrorString(400)\n"
              "cudaGetLastError() = 400\n",
              cuda->log(),
              "record fails: the event is still destroyed and "
              "the runtime's error is cleared, nothing waits");
    is_int(0, cuda->live_events(), "record fails: no event left alive");

    rc = order_failing("cudaStreamWaitEvent", cudaErrorInvalidResourceHandle,
                       &err);
    is_int(CAI_ECUDA, rc, "wait fails: CAI_ECUDA");
    contains(err.message, "cudaStreamWaitEvent failed",
             "wait fails: the message names the call");
    is_int(0, cuda->live_events(), "wait fails: event destroyed");

    rc = order_failing("cudaEventDestroy", cudaErrorIllegalAddress, &err);
    is_int(CAI_ECUDA, rc, "destroy fails: reported, CAI_ECUDA");
    contains(err.message, "cudaEventDestroy failed",
             "destroy fails: the message names the call");

    rc = order_failing("cudaEventCreateWithFlags", cudaErrorInsufficientDriver,
                       &err);
    is_int(CAI_ENOCUDA, rc, "create fails with no driver: CAI_ENOCUDA");
    contains(err.message, "no usable CUDA driver",
             "create fails with no driver: the message says so");
    ok(strstr(cuda->log(), "cudaEventDestroy") == NULL,
       "create fails: nothing to destroy");

    rc = order_failing("*", cudaErrorNoDevice, &err);
    is_int(CAI_ENOCUDA, rc, "no device (100): CAI_ENOCUDA");
    contains(err.message,
             "cuCtxGetCurrent failed: double: no CUDA device "
             "(CUDA error 100)",
             "no device: the message names the first "
             "call that failed");
}

/* cai_cuda_order reads the producer's stream and device only: callers may
 * pass a descriptor whose shape is not filled in. */
static void shape_not_read(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_error_t err;
    int rc;

    desc.ndim = 3; /* shape left all zero, as if not filled */
    desc.shape[0] = 0;
    rc = order(desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "shape not filled in: success");
    contains(cuda->log(), "cudaStreamWaitEvent(0x6000",
             "shape not filled in: still ordered (the shape is not read)");
}

static void synchronize_cases(void)
{
    cai_error_t err;
    int rc;

    cuda->reset();
    rc = cai_cuda_stream_synchronize(PRODUCER_STREAM, &err);
    is_int(CAI_OK, rc, "synchronize: success");
    is_string("cuCtxGetCurrent() = P0\n"
              "cudaThreadExchangeStreamCaptureMode(2)\n"
              "cudaStreamSynchronize(0x5000)\n"
              "cudaThreadExchangeStreamCaptureMode(0)\n",
              cuda->log(),
              "synchronize: one call on the stream handle, in the current "
              "context");

    cuda->reset();
    rc = cai_cuda_stream_synchronize(CAI_STREAM_LEGACY, &err);
    is_string("cuCtxGetCurrent() = P0\n"
              "cudaThreadExchangeStreamCaptureMode(2)\n"
              "cudaStreamSynchronize(cudaStreamLegacy)\n"
              "cudaThreadExchangeStreamCaptureMode(0)\n",
              cuda->log(), "synchronize legacy: handle 1, never NULL");

    cuda->reset();
    rc = cai_cuda_stream_synchronize(CAI_STREAM_NO_SYNC, &err);
    is_int(CAI_OK, rc, "synchronize -1: success");
    is_string("", cuda->log(), "synchronize -1: no call");

    cuda->reset();
    rc = cai_cuda_stream_synchronize(0, &err);
    is_int(CAI_EINVAL, rc, "synchronize 0: refused");
    is_string("", cuda->log(), "synchronize 0: no call");

    cuda->reset();
    cuda->fail("cudaStreamSynchronize", cudaErrorLaunchFailure);
    rc = cai_cuda_stream_synchronize(CONSUMER_STREAM, &err);
    is_int(CAI_ECUDA, rc, "synchronize fails: CAI_ECUDA");
    contains(err.message, "cudaStreamSynchronize failed",
             "synchronize fails: the message names the call");
}

int main(void)
{
    cai_error_t err;
    int version = 0, rc;

    cuda = use_double();
    plan_lazy();

    rc = cai_cuda_runtime_version(&version, &err);
    is_int(CAI_OK, rc, "the double loads as the runtime");
    is_int(13000, version, "the double's runtime version is reported");
    /* The driver is bound (cuInit) at the first call needing it. */
    if (cai_cuda_locate(NULL, &(DLDevice){kDLCPU, 0}, NULL) != 0)
        bail("locate NULL fails on the double");

    no_call_cases();
    refused_cases();
    event_cases();
    host_accessible_cases();
    other_device_cases();
    failure_cases();
    shape_not_read();
    synchronize_cases();
    return 0;
}
