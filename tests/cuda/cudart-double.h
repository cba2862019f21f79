/*
 * Control side of the recording CUDA runtime double (cudart-double.c).
 *
 * The double is loaded by caibridge through CAIBRIDGE_CUDART (or found
 * already loaded); a test dlopens the same file, which gives it the same
 * instance, and drives it through these functions.  It also exports the few
 * driver entry points caibridge uses (cuInit, cuCtxGetCurrent,
 * cuCtxSetCurrent, cuCtxGetDevice, cuStreamGetCtx), so one file stands for
 * libcudart and libcuda.  Every call is logged as one line:
 *
 *   name(arguments)               the call succeeded
 *   name(arguments) = result      it succeeded and wrote result
 *   name(arguments) -> error N    it failed with CUDA error N
 *
 * Streams and pointers are logged in hex ("0x5000"), events as ev1, ev2...
 * in creation order since the last reset, contexts as P0..P3 (the primary
 * context of a device), C1, C2... (other contexts) or NULL.
 *
 * What it checks as CUDA does: each thread has its own current context
 * (NULL at first) and its own last error; a runtime call that needs a
 * context while none is current makes the primary context of the thread's
 * device current, creating it (counted: a stray context is visible); an
 * event belongs to the context current when it was made and can only be
 * recorded on a stream of that context (else cudaErrorInvalidResourceHandle);
 * the default-stream handles name the current context's streams; a stream
 * may be capturing a graph, an event recorded there is captured, a
 * capturing stream waiting on an event from outside its capture without
 * cudaEventWaitExternal invalidates the capture (cudaErrorStreamCaptureIsolation),
 * a stream outside a capture waiting on a captured event joins that capture,
 * and the host cannot wait on a captured event (cudaErrorCapturedEvent).
 */
#ifndef CAI_CUDART_DOUBLE_H
#define CAI_CUDART_DOUBLE_H

#include <stddef.h>

/* Devices the double pretends to have (0 .. DOUBLE_DEVICE_COUNT - 1). */
#define DOUBLE_DEVICE_COUNT 4

/* Memory types as cudaPointerGetAttributes reports them (the values of
 * enum cudaMemoryType, repeated so tests need no CUDA header). */
enum {
    DOUBLE_UNREGISTERED = 0,
    DOUBLE_PINNED = 1,
    DOUBLE_DEVICE = 2,
    DOUBLE_MANAGED = 3
};

/* Capture states as cudaStreamIsCapturing reports them. */
enum { DOUBLE_NOT_CAPTURING = 0, DOUBLE_CAPTURING = 1, DOUBLE_INVALIDATED = 2 };

struct cudart_double {
    /* Empties the log, the pointer and stream tables and the failures; the
     * calling thread has device 0's primary context current again.  Events
     * still alive stay alive and are counted. */
    void (*reset)(void);
    /* The runtime version reported from now on (13000 at start). */
    void (*set_version)(int version);
    /* Makes device's primary context current on the calling thread, as
     * cudaSetDevice does. */
    void (*set_current_device)(int device);
    /* The device of the calling thread's current context, or its runtime
     * device when none is current. */
    int (*current_device)(void);
    /* ptr is reported with this memory type and device; others are
     * unregistered host memory. */
    void (*set_pointer)(const void *ptr, int type, int device);
    /* From now on, call (or every call needing a driver when call is "*")
     * fails with error.  cudaGetErrorString, cudaGetLastError,
     * cudaPeekAtLastError, cudaDriverGetVersion and cudaRuntimeGetVersion
     * never fail, as in the real runtime. */
    void (*fail)(const char *call, int error);
    /* The log since the last reset, one line per call. */
    const char *(*log)(void);
    /* Events created and not yet destroyed. */
    int (*live_events)(void);

    /* ---- Added with contexts, streams and captures ---- */

    /* An allocation [base, base + size): interior pointers are found too.
     * host_alias, when not NULL, is the host address of registered host
     * memory whose device address is base (hostPointer != devicePointer). */
    void (*add_allocation)(const void *base, size_t size, int type,
                           int device, const void *host_alias);
    /* A stream handle on the primary context of device; unknown handles
     * belong to whatever context is current when they are used. */
    void (*add_stream)(long handle, int device);
    /* A stream handle on context (a handle from create_context). */
    void (*add_stream_on_context)(long handle, void *context);
    /* The stream is destroyed: calls naming it fail with
     * cudaErrorInvalidResourceHandle. */
    void (*destroy_stream)(long handle);
    /* A non-primary context on device (as cuCtxCreate makes), not made
     * current. */
    void *(*create_context)(int device);
    /* The calling thread's current context (NULL included), as the driver
     * sees it; and setting it. */
    void *(*current_context)(void);
    void (*set_current_context)(void *context);
    /* Primary contexts created since the process started. */
    int (*primary_contexts)(void);
    /* Starts a capture (id > 0) on stream, or ends it: returns 0, or
     * cudaErrorStreamCaptureUnjoined when a stream that joined the capture
     * was left unjoined, or cudaErrorStreamCaptureInvalidated. */
    void (*begin_capture)(long handle, int id);
    int (*end_capture)(long handle);
    /* The capture state of stream (DOUBLE_NOT_CAPTURING...). */
    int (*capture_state)(long handle);
    /* What cudaDriverGetVersion says (13000 at start; 0: no driver). */
    void (*set_driver_version)(int version);
    /* cudaDevAttrPageableMemoryAccess of every device (0 at start). */
    void (*set_pageable_access)(int value);
    /* The calling thread's pending error, without clearing it; and leaving
     * one pending, as a framework's failed launch would. */
    int (*pending_error)(void);
    void (*set_pending_error)(int error);
    /* Host waits on events (cudaEventSynchronize) since the last reset. */
    int (*host_waits)(void);
    /* Like fail, but the first skip such calls still succeed. */
    void (*fail_after)(const char *call, int error, int skip);
};

#endif
