/*
 * A recording double of the CUDA runtime, for tests on machines without a
 * GPU.  It answers the entry points caibridge resolves, with pointer
 * attributes and failures the test chooses, and logs every call with its
 * arguments so a test can assert the exact sequence.  It follows the real
 * runtime where caibridge's correctness depends on it: an event can only be
 * recorded while its device is current, and a destroyed event is an invalid
 * handle.  See cudart-double.h for the control side and the log format.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cudart-double.h"

const struct cudart_double *cudart_double_controls(void);

#define MAX_EVENTS 64
#define MAX_POINTERS 16
#define MAX_FAILURES 8

struct event {
    int live;
    int number; /* evN in the log */
    int device;
};

static struct event events[MAX_EVENTS];
static int events_created;

static struct {
    const void *ptr;
    int type, device;
} pointers[MAX_POINTERS];
static int pointer_count;

static struct {
    char call[48];
    int error;
} failures[MAX_FAILURES];
static int failure_count;

static char log_text[16384];
static size_t log_length;
static int version = 13000;
static int current = 0;
static cudaError_t last_error = cudaSuccess;

static void append(const char *fmt, ...)
{
    va_list ap;
    int n;

    if (log_length >= sizeof log_text - 1)
        return;
    va_start(ap, fmt);
    n = vsnprintf(log_text + log_length, sizeof log_text - log_length, fmt,
                  ap);
    va_end(ap);
    if (n > 0)
        log_length += (size_t)n;
    if (log_length > sizeof log_text - 1)
        log_length = sizeof log_text - 1;
}

/* The failure the test asked for on call, or cudaSuccess. */
static cudaError_t injected(const char *call)
{
    int i;

    for (i = 0; i < failure_count; i++)
        if (strcmp(failures[i].call, call) == 0 ||
            strcmp(failures[i].call, "*") == 0)
            return (cudaError_t)failures[i].error;
    return cudaSuccess;
}

/* Logs "call" (already formatted) with its outcome and returns rc. */
static cudaError_t logged(cudaError_t rc, const char *call,
                         const char *result)
{
    if (rc != cudaSuccess) {
        append("%s -> error %d\n", call, (int)rc);
        last_error = rc;
    } else if (result != NULL) {
        append("%s = %s\n", call, result);
    } else {
        append("%s\n", call);
    }
    return rc;
}

static const char *stream_text(cudaStream_t stream, char buf[32])
{
    snprintf(buf, 32, "0x%jx", (uintmax_t)(uintptr_t)stream);
    return buf;
}

/* The event behind handle, or NULL when it is not one of ours or dead. */
static struct event *live_event(cudaEvent_t handle)
{
    struct event *e = (struct event *)(void *)handle;

    if (e < events || e >= events + MAX_EVENTS || !e->live)
        return NULL;
    return e;
}

static const char *event_text(cudaEvent_t handle, char buf[32])
{
    struct event *e = (struct event *)(void *)handle;

    if (e >= events && e < events + MAX_EVENTS)
        snprintf(buf, 32, "ev%d", e->number);
    else
        snprintf(buf, 32, "%p", (void *)handle);
    return buf;
}

/* ---- The runtime's entry points ---- */

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtime_version)
{
    char result[16];

    *runtime_version = version;
    snprintf(result, sizeof result, "%d", version);
    return logged(cudaSuccess, "cudaRuntimeGetVersion()", result);
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
    char call[48];

    snprintf(call, sizeof call, "cudaGetErrorString(%d)", (int)error);
    logged(cudaSuccess, call, NULL);
    switch (error) {
    case cudaErrorInsufficientDriver:
        return "double: no CUDA driver";
    case cudaErrorNoDevice:
        return "double: no CUDA device";
    case cudaErrorInvalidDevice:
        return "double: no such device";
    case cudaErrorInvalidResourceHandle:
        return "double: invalid handle";
    default:
        return "double: some CUDA error";
    }
}

cudaError_t CUDARTAPI cudaGetLastError(void)
{
    cudaError_t error = last_error;
    char result[16];

    last_error = cudaSuccess;
    snprintf(result, sizeof result, "%d", (int)error);
    logged(cudaSuccess, "cudaGetLastError()", result);
    return error;
}

cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
    cudaError_t rc = injected("cudaGetDevice");
    char result[16];

    if (rc == cudaSuccess)
        *device = current;
    snprintf(result, sizeof result, "%d", current);
    return logged(rc, "cudaGetDevice()", result);
}

cudaError_t CUDARTAPI cudaSetDevice(int device)
{
    cudaError_t rc = injected("cudaSetDevice");
    char call[48];

    if (rc == cudaSuccess && (device < 0 || device >= DOUBLE_DEVICE_COUNT))
        rc = cudaErrorInvalidDevice;
    if (rc == cudaSuccess)
        current = device;
    snprintf(call, sizeof call, "cudaSetDevice(%d)", device);
    return logged(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaPointerGetAttributes(
    struct cudaPointerAttributes *attributes, const void *ptr)
{
    cudaError_t rc = injected("cudaPointerGetAttributes");
    char call[64];
    int i;

    snprintf(call, sizeof call, "cudaPointerGetAttributes(%p)", ptr);
    if (rc != cudaSuccess)
        return logged(rc, call, NULL);
    memset(attributes, 0, sizeof *attributes);
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2; /* what CUDA 12+ reports for unknown memory */
    attributes->hostPointer = (void *)(uintptr_t)ptr;
    for (i = 0; i < pointer_count; i++) {
        if (pointers[i].ptr == ptr) {
            attributes->type = (enum cudaMemoryType)pointers[i].type;
            attributes->device = pointers[i].device;
            attributes->devicePointer = (void *)(uintptr_t)ptr;
            if (pointers[i].type == DOUBLE_DEVICE)
                attributes->hostPointer = NULL;
        }
    }
    return logged(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event,
                                               unsigned int flags)
{
    cudaError_t rc = injected("cudaEventCreateWithFlags");
    char call[48], result[48];
    struct event *e = NULL;
    int i;

    snprintf(call, sizeof call, "cudaEventCreateWithFlags(0x%x)", flags);
    for (i = 0; rc == cudaSuccess && i < MAX_EVENTS && e == NULL; i++)
        if (!events[i].live)
            e = &events[i];
    if (rc == cudaSuccess && e == NULL)
        rc = cudaErrorMemoryAllocation;
    if (rc != cudaSuccess)
        return logged(rc, call, NULL);
    e->live = 1;
    e->number = ++events_created;
    e->device = current;
    *event = (cudaEvent_t)(void *)e;
    snprintf(result, sizeof result, "ev%d on device %d", e->number, current);
    return logged(rc, call, result);
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    cudaError_t rc = injected("cudaEventRecord");
    struct event *e = live_event(event);
    char call[96], ev[32], st[32];

    /* As in CUDA, the event's device must be the stream's, and the
     * default-stream handles name the current device's streams. */
    if (rc == cudaSuccess && (e == NULL || e->device != current))
        rc = cudaErrorInvalidResourceHandle;
    snprintf(call, sizeof call, "cudaEventRecord(%s, %s)",
             event_text(event, ev), stream_text(stream, st));
    return logged(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream,
                                          cudaEvent_t event,
                                          unsigned int flags)
{
    cudaError_t rc = injected("cudaStreamWaitEvent");
    char call[96], ev[32], st[32];

    if (rc == cudaSuccess && live_event(event) == NULL)
        rc = cudaErrorInvalidResourceHandle;
    snprintf(call, sizeof call, "cudaStreamWaitEvent(%s, %s, 0x%x)",
             stream_text(stream, st), event_text(event, ev), flags);
    return logged(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event)
{
    cudaError_t rc = injected("cudaEventDestroy");
    struct event *e = live_event(event);
    char call[64], ev[32];

    snprintf(call, sizeof call, "cudaEventDestroy(%s)", event_text(event, ev));
    if (e == NULL)
        return logged(cudaErrorInvalidResourceHandle, call, NULL);
    /* Like CUDA, the handle is gone even when the call reports an error
     * (a sticky error from earlier work, for instance). */
    e->live = 0;
    return logged(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
    cudaError_t rc = injected("cudaStreamSynchronize");
    char call[64], st[32];

    snprintf(call, sizeof call, "cudaStreamSynchronize(%s)",
             stream_text(stream, st));
    return logged(rc, call, NULL);
}

/* ---- Control side ---- */

static void reset(void)
{
    log_length = 0;
    log_text[0] = '\0';
    pointer_count = 0;
    failure_count = 0;
    events_created = 0;
    current = 0;
    last_error = cudaSuccess;
}

static void set_version(int v)
{
    version = v;
}

static void set_current_device(int device)
{
    current = device;
}

static int current_device(void)
{
    return current;
}

static void set_pointer(const void *ptr, int type, int device)
{
    if (pointer_count < MAX_POINTERS) {
        pointers[pointer_count].ptr = ptr;
        pointers[pointer_count].type = type;
        pointers[pointer_count].device = device;
        pointer_count++;
    }
}

static void fail(const char *call, int error)
{
    if (failure_count < MAX_FAILURES) {
        snprintf(failures[failure_count].call,
                 sizeof failures[failure_count].call, "%s", call);
        failures[failure_count].error = error;
        failure_count++;
    }
}

static const char *log_contents(void)
{
    return log_text;
}

static int live_events(void)
{
    int i, n = 0;

    for (i = 0; i < MAX_EVENTS; i++)
        n += events[i].live;
    return n;
}

static const struct cudart_double controls = {
    reset,       set_version,  set_current_device, current_device,
    set_pointer, fail,         log_contents,       live_events,
};

const struct cudart_double *cudart_double_controls(void)
{
    return &controls;
}
