/*
 * Control side of the recording CUDA runtime double (cudart-double.c).
 *
 * The double is loaded by caibridge through CAIBRIDGE_CUDART (or found
 * already loaded); a test dlopens the same file, which gives it the same
 * instance, and drives it through these functions.  It also exports the few
 * driver entry points caibridge uses (cuInit, cuCtxGetCurrent,
 * cuCtxSetCurrent, cuCtxGetDevice, cuStreamGetCtx, cuPointerGetAttribute(s),
 * cuDevicePrimaryCtx*), so one file stands for
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
 *
 * A child forked after the parent made a CUDA call cannot use CUDA: every
 * call that needs the driver fails there with error 3
 * (cudaErrorInitializationError, CUDA_ERROR_NOT_INITIALIZED), even after
 * reset; the controls still work.  At exit the stream workers stop where
 * they are: work still queued (behind a closed gate) never runs.
 *
 * Contexts end as in CUDA: cudaDeviceReset and cuDevicePrimaryCtxReset end
 * a primary context (its handle stays, naming a new context, with a new
 * cuCtxGetId, once the runtime needs it again), cuCtxDestroy another
 * context, and the last cuDevicePrimaryCtxRelease a primary context the
 * runtime never used.  The events and streams of an ended context are dead:
 * any use of one is a violation and cudaErrorInvalidResourceHandle, and so
 * is a release without a retain.  Event handles are reused as late as
 * possible, so a stale one stays stale.
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
enum {
    DOUBLE_NOT_CAPTURING = 0,
    DOUBLE_CAPTURING = 1,
    DOUBLE_INVALIDATED = 2
};

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
     * never fail, as in the real runtime.  Error 0 ends call's failures
     * set before. */
    void (*fail)(const char *call, int error);
    /* The log since the last reset, one line per call. */
    const char *(*log)(void);
    /* Events created and not yet destroyed. */
    int (*live_events)(void);

    /* ---- Added with contexts, streams and captures ---- */

    /* An allocation [base, base + size): interior pointers are found too.
     * host_alias, when not NULL, is the host address of registered host
     * memory whose device address is base (hostPointer != devicePointer). */
    void (*add_allocation)(const void *base, size_t size, int type, int device,
                           const void *host_alias);
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

    /* ---- The timeline (timeline.c, double-graph.c) ---- */
    /* Makes streams run in time from now on: each stream (1, 2 and every
     * handle) runs its queued work in order on its own worker thread.
     * Off at start, so the older call-log tests are unchanged.  As in
     * CUDA, stream 1 is a queue per context and stream 2 one per context
     * and thread: a default stream is the calling thread's current
     * context's (the controls below included), and cudaDeviceSynchronize
     * waits for the current device's queues only. */
    void (*timeline_on)(void);
    /* A gate, closed: a kernel that names it waits until it opens.
     * gate_open first lets every stream run as far as it can while the
     * gate is closed, so a consumer's unordered read has happened by then
     * (the race shows every time, not by the scheduler's chance). */
    int (*gate_new)(void);
    void (*gate_open)(int gate);
    /* A gate that opens by itself when a host thread blocks in
     * cudaEventSynchronize / cudaStreamSynchronize / cudaDeviceSynchronize
     * for a point of a stream that comes after a kernel naming the gate
     * (on the kernel's stream, or through stream waits), so a correct
     * host wait never deadlocks a single-threaded test while a wait on
     * anything else leaves the gate closed. */
    void (*gate_open_on_host_wait)(int gate);
    /* "Kernels" queued on stream: when the stream reaches it, wait for gate
     * (0: no gate), then fill size bytes at dst with value / copy size bytes
     * from src to dst.  dst/src are host memory the test registered as
     * device, pinned or managed memory with add_allocation.  With the
     * timeline off they run at once. */
    void (*launch_fill)(long stream, void *dst, size_t size, int value,
                        int gate);
    void (*launch_copy)(long stream, void *dst, const void *src, size_t size,
                        int gate);
    /* Waits until every stream's queue is empty (gates still closed count
     * as a violation after 10 s, then open, so a test cannot hang). */
    void (*drain)(void);
    /* A fresh live stream on device's primary context (as
     * cudaStreamCreate), handle > 0x1000, never reused.  Destroy with
     * destroy_stream.  Any later use of a destroyed handle by any entry
     * point is a violation. */
    long (*stream_create)(int device);
    /* Violations since the last reset (use of a destroyed stream or event,
     * a host read of managed memory on a concurrentManagedAccess=0 device
     * while a kernel runs, a replayed graph node whose event is destroyed,
     * a host wait that did not finish in 10 s ...): count, and a text of
     * one line each. */
    int (*violations)(void);
    const char *(*violation_log)(void);
    /* Runtime + driver entry-point calls since the last reset. */
    long (*calls)(void);
    /* Pool memory (cudaMallocAsync): cuPointerGetAttribute(CONTEXT) gives
     * NULL, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL and MEMORY_TYPE answer. */
    void (*add_pool_allocation)(const void *base, size_t size, int device);
    /* CUDA 11 behaviour of cudaSetDevice (the primary context becomes
     * current only at the next call that needs one). */
    void (*set_cuda11_set_device)(int on);
    /* cudaDevAttrConcurrentManagedAccess of every device (1 at start). */
    void (*set_concurrent_managed_access)(int value);
    /* Declares that the host reads [ptr, ptr+size) now: a violation when it
     * is managed memory, concurrentManagedAccess is 0 and a kernel is
     * running or queued on any stream. */
    void (*host_read)(const void *ptr, size_t size);
    /* Graph capture: the capture last ended on handle (its id, 0: none),
     * replayed on stream: its kernels, records and waits on events from
     * outside run again; a node naming a destroyed event is a violation
     * (and replay returns cudaErrorInvalidResourceHandle). */
    long (*instantiate)(long handle);
    int (*replay)(long graph, long stream);

    /* ---- Stream-ordered allocations and copies (double-copy.c) ---- */
    /* cudaMallocAsync allocations not yet freed by a cudaFreeAsync that
     * its stream has reached. */
    int (*live_async_allocations)(void);

    /* ---- Blocking streams ---- */
    /* Like stream_create, but a blocking stream, as cudaStreamCreate makes
     * (CuPy's default; stream_create's are non-blocking, as torch's): the
     * legacy stream of its context and it wait for each other's earlier
     * work, and while it is capturing (begin_capture), any use of the
     * legacy stream of its context (a record, a wait, a copy, a host
     * function, a synchronize) fails with cudaErrorStreamCaptureImplicit
     * and invalidates the capture; cudaStreamIsCapturing of the legacy
     * stream fails the same way and leaves the capture alone. */
    long (*stream_create_blocking)(int device);
};

#endif
