/*
 * A recording double of the CUDA runtime (and of the few driver entry points
 * caibridge uses), for tests on machines without a GPU.  It answers with
 * pointer attributes, streams, contexts, captures and failures the test
 * chooses, logs every call with its arguments so a test can assert the
 * exact sequence, and checks what the real runtime checks where caibridge's
 * correctness depends on it.  See cudart-double.h for the control side, the
 * rules it follows and the log format.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "double-internal.h"

const struct cudart_double *cudart_double_controls(void);

struct context contexts[MAX_CONTEXTS];
static int other_contexts, primaries_created;
static unsigned long long context_ids;
struct event events[MAX_EVENTS];
static int events_created;
static int event_cursor; /* slots are taken in turn, so a stale handle
                          * stays stale as long as possible */
struct stream streams[MAX_STREAMS];
int stream_count;
pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

struct pointer pointers[MAX_POINTERS];
int pointer_count;

static struct {
    char call[48];
    int error;
    int skip; /* calls that still succeed first */
} failures[MAX_FAILURES];
static int failure_count;

static char log_text[1 << 20]; /* a thousand hand-overs fit */
static size_t log_length;
static int version = 0;         /* 0: from the file's name, else 13000 */
static int driver_version = -1; /* -1: from the environment, else 13000 */
static int pageable_access;
int concurrent_managed = 1;
int cuda11_set_device;
long call_count;

__thread struct context *current_ctx;
__thread int runtime_device;
__thread int set_device_pending; /* CUDA 11: cudaSetDevice not applied yet */
static __thread cudaError_t last_error = cudaSuccess;

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

    for (i = 0; i < failure_count; i++) {
        if (strcmp(failures[i].call, call) != 0 &&
            strcmp(failures[i].call, "*") != 0)
            continue;
        if (failures[i].skip > 0) {
            failures[i].skip--;
            continue;
        }
        return (cudaError_t)failures[i].error;
    }
    return cudaSuccess;
}

/* Logs "call" (already formatted) with its outcome and returns rc; a
 * failed runtime call becomes the thread's last error. */
static cudaError_t logged(cudaError_t rc, const char *call, const char *result)
{
    call_count++;
    if (rc != cudaSuccess) {
        append("%s -> error %d\n", call, (int)rc);
        if (call[0] == 'c' && call[1] == 'u' && call[2] == 'd')
            last_error = rc;
    } else if (result != NULL) {
        append("%s = %s\n", call, result);
    } else {
        append("%s\n", call);
    }
    return rc;
}

/* Streams by the headers' names where they have one, else in hex. */
const char *stream_text(cudaStream_t stream, char buf[32])
{
    if (stream == cudaStreamLegacy)
        snprintf(buf, 32, "cudaStreamLegacy");
    else if (stream == cudaStreamPerThread)
        snprintf(buf, 32, "cudaStreamPerThread");
    else if (stream == NULL)
        snprintf(buf, 32, "NULL");
    else
        snprintf(buf, 32, "0x%jx", (uintmax_t)(uintptr_t)stream);
    return buf;
}

/* Flags by the headers' names; unknown bits in hex. */
static const char *flags_text(unsigned flags, const unsigned *bits,
                              const char *const *names, size_t count,
                              const char *none, char buf[96])
{
    size_t i, used = 0;

    buf[0] = '\0';
    for (i = 0; i < count; i++) {
        if (flags & bits[i]) {
            used += (size_t)snprintf(buf + used, 96 - used, "%s%s",
                                     used ? "|" : "", names[i]);
            flags &= ~bits[i];
        }
    }
    if (flags != 0 && used < 96)
        used += (size_t)snprintf(buf + used, 96 - used, "%s0x%x",
                                 used ? "|" : "", flags);
    if (used == 0)
        snprintf(buf, 96, "%s", none);
    return buf;
}

static const char *event_flags_text(unsigned flags, char buf[96])
{
    static const unsigned bits[] = {
        cudaEventBlockingSync, cudaEventDisableTiming, cudaEventInterprocess};
    static const char *const names[] = {"cudaEventBlockingSync",
                                        "cudaEventDisableTiming",
                                        "cudaEventInterprocess"};

    return flags_text(flags, bits, names, 3, "cudaEventDefault", buf);
}

static const char *wait_flags_text(unsigned flags, char buf[96])
{
    static const unsigned bits[] = {cudaEventWaitExternal};
    static const char *const names[] = {"cudaEventWaitExternal"};

    return flags_text(flags, bits, names, 1, "cudaEventWaitDefault", buf);
}

const char *context_text(const struct context *c, char buf[16])
{
    if (c == NULL)
        snprintf(buf, 16, "NULL");
    else if (c->primary)
        snprintf(buf, 16, "P%d", c->device);
    else
        snprintf(buf, 16, "C%d", c->number);
    return buf;
}

/* Device's primary context, made active if it is not; runtime: the
 * runtime uses it, so only a reset ends it (the driver's retains alone
 * end it when released to zero). */
struct context *primary_by(int device, int runtime)
{
    struct context *c = &contexts[device];

    if (!c->made) {
        c->made = 1;
        c->device = device;
        c->primary = 1;
        c->held = 0;
        c->id = ++context_ids;
        primaries_created++;
    }
    c->held |= runtime;
    return c;
}

struct context *primary(int device)
{
    return primary_by(device, 1);
}

/* A primary context's handle outlives a reset (CUDA gives the new one the
 * same handle); a destroyed context's does not. */
struct context *known_context(const void *handle)
{
    const struct context *c = handle;

    if (c < contexts || c >= contexts + MAX_CONTEXTS)
        return NULL;
    if (!c->made && !(c->primary && c < contexts + DOUBLE_DEVICE_COUNT))
        return NULL;
    return &contexts[c - contexts]; /* the table's own, writable entry */
}

/* The context ends (cudaDeviceReset, cuCtxDestroy, a primary context
 * released to zero): its events and streams die with it, and any later
 * use of one is a violation. */
void context_dies(struct context *c)
{
    int i;

    for (i = 0; i < MAX_EVENTS; i++)
        if (events[i].live && events[i].context == c) {
            events[i].live = 0;
            events[i].orphaned = 1;
        }
    for (i = 0; i < stream_count; i++)
        if (streams[i].live && streams[i].context == c) {
            streams[i].live = 0;
            streams[i].orphaned = 1;
        }
    c->made = 0;
    c->refs = 0;
    c->held = 0;
    if (!c->primary)
        c->destroyed = 1;
}

/* What the runtime does before work that needs a context. */
struct context *need_context(void)
{
    char cx[16];

    /* CUDA 11: the device cudaSetDevice chose takes over only now; a
     * primary context reset since is made again, as the runtime does. */
    if (current_ctx == NULL || set_device_pending ||
        (current_ctx->primary && !current_ctx->made))
        current_ctx = primary(current_ctx != NULL && !set_device_pending
                                  ? current_ctx->device
                                  : runtime_device);
    else if (current_ctx->destroyed)
        violation("a runtime call with destroyed context %s current",
                  context_text(current_ctx, cx));
    set_device_pending = 0;
    return current_ctx;
}

/* The newest stream of that handle: a handle given again after its stream
 * was destroyed names the new one, as in CUDA. */
struct stream *find_stream(cudaStream_t handle)
{
    long value = (long)(intptr_t)handle;
    int i;

    for (i = stream_count - 1; i >= 0; i--)
        if (streams[i].handle == value)
            return &streams[i];
    return NULL;
}

unsigned long long next_stream_id(void)
{
    static unsigned long long last;

    return ++last;
}

int is_default(cudaStream_t stream)
{
    return stream == NULL || stream == cudaStreamLegacy ||
           stream == cudaStreamPerThread;
}

/* The stream's context (NULL when unknown to the runtime) and table entry;
 * the runtime makes a context current for default and unknown streams. */
cudaError_t resolve(cudaStream_t stream, struct context **ctx,
                    struct stream **entry)
{
    struct stream *s = is_default(stream) ? NULL : find_stream(stream);
    char st[32];

    *entry = s;
    if (s != NULL && !s->live) {
        violation(s->orphaned ? "use of stream %s of a destroyed context"
                              : "use of destroyed stream %s",
                  stream_text(stream, st));
        return cudaErrorInvalidResourceHandle;
    }
    *ctx = s != NULL && s->context != NULL ? s->context : need_context();
    return cudaSuccess;
}

/* The event behind handle, or NULL when it is not one of ours or dead. */
struct event *live_event(cudaEvent_t handle)
{
    struct event *e = (struct event *)(void *)handle;

    if (e < events || e >= events + MAX_EVENTS || !e->live)
        return NULL;
    return e;
}

const char *event_text(cudaEvent_t handle, char buf[32])
{
    struct event *e = (struct event *)(void *)handle;

    if (e >= events && e < events + MAX_EVENTS)
        snprintf(buf, 32, "ev%d", e->number);
    else
        snprintf(buf, 32, "%p", (void *)handle);
    return buf;
}

/* A runtime named libcudart.so.N reports N.0: loading tests copy the double
 * under those names. */
static int runtime_version(void)
{
    Dl_info info;
    const char *dot;

    if (version != 0)
        return version;
    if (dladdr((void *)runtime_version, &info) != 0 &&
        info.dli_fname != NULL &&
        (dot = strstr(info.dli_fname, "libcudart.so.")) != NULL)
        return atoi(dot + 13) * 1000;
    return 13000;
}

static int driver(void)
{
    const char *env;

    if (driver_version >= 0)
        return driver_version;
    env = getenv("CUDART_DOUBLE_DRIVER_VERSION");
    return env != NULL ? atoi(env) : 13000;
}

/* CUDA cannot be used in a child forked after it was initialized: there
 * every call that needs the driver fails with 3, as CUDA's do
 * (cudaErrorInitializationError; CUDA_ERROR_NOT_INITIALIZED for the
 * driver's), even after a reset.  The lock is held across fork so the
 * child's tables are whole; the child has no stream worker. */
static int initialized, forked;

static void fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

static void fork_child(void)
{
    forked = initialized;
    tl_after_fork();
    pthread_mutex_unlock(&lock);
}

/* At load, before any library that loads the double registers its own
 * handlers: theirs run first at fork, so a thread holding their lock
 * while it calls the double is let finish. */
__attribute__((constructor)) static void watch_fork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static int lock_holder; /* atomic */

/* Tests: holds the lock for us microseconds, as an entry point in
 * progress on another thread does when a fork comes; double_lock_held
 * says when it is held. */
EXPORTED void double_hold_lock_us(long us)
{
    struct timespec t = {us / 1000000, us % 1000000 * 1000};

    pthread_mutex_lock(&lock);
    __atomic_store_n(&lock_holder, 1, __ATOMIC_RELEASE);
    nanosleep(&t, NULL);
    __atomic_store_n(&lock_holder, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
}

EXPORTED int double_lock_held(void)
{
    return __atomic_load_n(&lock_holder, __ATOMIC_ACQUIRE);
}

#define LOCKED(body)                 \
    do {                             \
        pthread_mutex_lock(&lock);   \
        body;                        \
        pthread_mutex_unlock(&lock); \
    } while (0)

/* ---- The runtime's entry points ---- */

/* Each entry point runs under the lock: enter() takes it and returns the
 * failure injected for call (or cudaSuccess); leave() logs the call with
 * its outcome, releases the lock and returns rc. */
cudaError_t enter(const char *call)
{
    pthread_mutex_lock(&lock);
    if (forked)
        return cudaErrorInitializationError;
    initialized = 1;
    return injected(call);
}

cudaError_t leave(cudaError_t rc, const char *call, const char *result)
{
    logged(rc, call, result);
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The live event behind handle; when there is none, a success in *rc
 * becomes the runtime's invalid-handle error. */
struct event *need_event(cudaEvent_t handle, cudaError_t *rc)
{
    struct event *e = live_event(handle);
    char ev[32];

    if (e == NULL && (struct event *)(void *)handle >= events &&
        (struct event *)(void *)handle < events + MAX_EVENTS)
        violation(((struct event *)(void *)handle)->orphaned
                      ? "use of event %s of a destroyed context"
                      : "use of destroyed event %s",
                  event_text(handle, ev));
    if (*rc == cudaSuccess && e == NULL)
        *rc = cudaErrorInvalidResourceHandle;
    return e;
}

/* The version queries never fail: *out = get(), logged. */
static cudaError_t version_query(int *out, int (*get)(void), const char *call)
{
    char result[16];

    pthread_mutex_lock(&lock);
    *out = get();
    snprintf(result, sizeof result, "%d", *out);
    return leave(cudaSuccess, call, result);
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *out)
{
    return version_query(out, runtime_version, "cudaRuntimeGetVersion()");
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int *out)
{
    return version_query(out, driver, "cudaDriverGetVersion()");
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
    char call[48];

    snprintf(call, sizeof call, "cudaGetErrorString(%d)", (int)error);
    LOCKED(logged(cudaSuccess, call, NULL));
    switch (error) {
    case cudaErrorInitializationError:
        return "double: initialization error";
    case cudaErrorInsufficientDriver:
        return "double: no CUDA driver";
    case cudaErrorNoDevice:
        return "double: no CUDA device";
    case cudaErrorInvalidDevice:
        return "double: no such device";
    case cudaErrorInvalidResourceHandle:
        return "double: invalid handle";
    case cudaErrorIllegalAddress:
        return "double: illegal address";
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
    LOCKED(logged(cudaSuccess, "cudaGetLastError()", result));
    return error;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void)
{
    char result[16];

    snprintf(result, sizeof result, "%d", (int)last_error);
    LOCKED(logged(cudaSuccess, "cudaPeekAtLastError()", result));
    return last_error;
}

cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
    cudaError_t rc;
    char result[16];
    int d;

    rc = enter("cudaGetDevice");
    d = current_ctx != NULL ? current_ctx->device : runtime_device;
    if (rc == cudaSuccess)
        *device = d;
    snprintf(result, sizeof result, "%d", d);
    return leave(rc, "cudaGetDevice()", result);
}

cudaError_t CUDARTAPI cudaSetDevice(int device)
{
    cudaError_t rc;
    char call[48];

    rc = enter("cudaSetDevice");
    if (rc == cudaSuccess && (device < 0 || device >= DOUBLE_DEVICE_COUNT))
        rc = cudaErrorInvalidDevice;
    if (rc == cudaSuccess) {
        /* CUDA 12+: the primary context is made current at once,
         * replacing any other context current on the thread; CUDA 11
         * does so at the next call that needs a context. */
        runtime_device = device;
        if (cuda11_set_device)
            set_device_pending = 1;
        else
            current_ctx = primary(device);
    }
    snprintf(call, sizeof call, "cudaSetDevice(%d)", device);
    return leave(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value,
                                             enum cudaDeviceAttr attr,
                                             int device)
{
    cudaError_t rc;
    char call[64], result[16];

    rc = enter("cudaDeviceGetAttribute");
    if (rc == cudaSuccess && (device < 0 || device >= DOUBLE_DEVICE_COUNT))
        rc = cudaErrorInvalidDevice;
    if (rc == cudaSuccess)
        *value = attr == cudaDevAttrPageableMemoryAccess ? pageable_access
                 : attr == cudaDevAttrConcurrentManagedAccess
                     ? concurrent_managed
                     : 0;
    snprintf(call, sizeof call, "cudaDeviceGetAttribute(%d, %d)", (int)attr,
             device);
    snprintf(result, sizeof result, "%d", rc == cudaSuccess ? *value : 0);
    return leave(rc, call, result);
}

cudaError_t CUDARTAPI cudaPointerGetAttributes(
    struct cudaPointerAttributes *attributes, const void *ptr)
{
    cudaError_t rc;
    char call[64];
    const char *p = ptr;
    int i;

    rc = enter("cudaPointerGetAttributes");
    snprintf(call, sizeof call, "cudaPointerGetAttributes(%p)", ptr);
    if (rc == cudaSuccess) {
        /* Assumed, as for any runtime call: it may need a context. */
        need_context();
        memset(attributes, 0, sizeof *attributes);
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2; /* what CUDA 12+ reports for unknown memory */
        attributes->hostPointer = (void *)(uintptr_t)ptr;
        for (i = 0; i < pointer_count; i++) {
            size_t offset = (size_t)(p - pointers[i].base);

            if (p < pointers[i].base || offset >= pointers[i].size)
                continue;
            attributes->type = (enum cudaMemoryType)pointers[i].type;
            attributes->device = pointers[i].device;
            attributes->devicePointer = (void *)(uintptr_t)ptr;
            if (pointers[i].type == DOUBLE_DEVICE)
                attributes->hostPointer = NULL;
            else if (pointers[i].host_alias != NULL)
                attributes->hostPointer =
                    (char *)(uintptr_t)pointers[i].host_alias + offset;
        }
    }
    return leave(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event,
                                               unsigned int flags)
{
    cudaError_t rc;
    char call[160], result[48], cx[16], fl[96];
    struct event *e = NULL;
    int i;

    rc = enter("cudaEventCreateWithFlags");
    snprintf(call, sizeof call, "cudaEventCreateWithFlags(%s)",
             event_flags_text(flags, fl));
    for (i = 0; rc == cudaSuccess && i < MAX_EVENTS && e == NULL; i++)
        if (!events[(event_cursor + i) % MAX_EVENTS].live) {
            e = &events[(event_cursor + i) % MAX_EVENTS];
            event_cursor = (event_cursor + i + 1) % MAX_EVENTS;
        }
    if (rc == cudaSuccess && e == NULL)
        rc = cudaErrorMemoryAllocation;
    if (rc == cudaSuccess) {
        memset(e, 0, sizeof *e);
        e->live = 1;
        e->number = ++events_created;
        e->context = need_context();
        *event = (cudaEvent_t)(void *)e;
        snprintf(result, sizeof result, "ev%d on %s", e->number,
                 context_text(e->context, cx));
    }
    return leave(rc, call, result);
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    cudaError_t rc;
    struct event *e;
    struct context *ctx = NULL;
    struct stream *s = NULL;
    char call[96], ev[32], st[32];

    rc = enter("cudaEventRecord");
    e = need_event(event, &rc);
    if (rc == cudaSuccess)
        rc = resolve(stream, &ctx, &s);
    /* "event and stream must be on the same CUDA context" */
    if (rc == cudaSuccess && e->context != ctx)
        rc = cudaErrorInvalidResourceHandle;
    if (rc == cudaSuccess && s != NULL && s->invalidated)
        rc = cudaErrorStreamCaptureInvalidated;
    if (rc == cudaSuccess)
        rc = legacy_during_capture(stream, ctx, 1);
    if (rc == cudaSuccess) {
        e->captured = s != NULL ? s->capture : 0;
        if (!graph_record(s, e))
            tl_record(e, stream);
    }
    snprintf(call, sizeof call, "cudaEventRecord(%s, %s)",
             event_text(event, ev), stream_text(stream, st));
    return leave(rc, call, e != NULL && e->captured ? "captured" : NULL);
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream,
                                          cudaEvent_t event,
                                          unsigned int flags)
{
    cudaError_t rc;
    struct event *e;
    struct context *ctx = NULL;
    struct stream *s = NULL;
    char call[192], ev[32], st[32], fl[96];

    rc = enter("cudaStreamWaitEvent");
    e = need_event(event, &rc);
    if (rc == cudaSuccess)
        rc = resolve(stream, &ctx, &s); /* any context may wait */
    if (rc == cudaSuccess)
        rc = legacy_during_capture(stream, ctx, 1);
    if (rc == cudaSuccess && s != NULL && s->capture != 0) {
        if (s->invalidated) {
            rc = cudaErrorStreamCaptureInvalidated;
        } else if (e->captured != s->capture &&
                   !(e->captured == 0 && (flags & cudaEventWaitExternal))) {
            /* Reaching outside the capture breaks it. */
            s->invalidated = 1;
            rc = cudaErrorStreamCaptureIsolation;
        }
    } else if (rc == cudaSuccess && e->captured != 0) {
        /* A stream outside the capture is pulled into it; only a
         * registered stream can be, default streams fail. */
        if (s == NULL) {
            rc = cudaErrorStreamCaptureImplicit;
        } else {
            s->capture = e->captured;
            s->joined = 1;
        }
    }
    if (rc == cudaSuccess && !graph_wait(s, e))
        tl_wait(stream, e);
    snprintf(call, sizeof call, "cudaStreamWaitEvent(%s, %s, %s)",
             stream_text(stream, st), event_text(event, ev),
             wait_flags_text(flags, fl));
    return leave(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event)
{
    cudaError_t rc;
    struct event *e;
    char call[64], ev[32];

    rc = enter("cudaEventSynchronize");
    e = need_event(event, &rc);
    if (rc == cudaSuccess && e->captured)
        rc = cudaErrorCapturedEvent;
    if (rc == cudaSuccess)
        rc = unsafe_during_capture();
    if (rc == cudaSuccess) {
        e->host_waits++;
        tl_host_wait_event(e);
    }
    snprintf(call, sizeof call, "cudaEventSynchronize(%s)",
             event_text(event, ev));
    return leave(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event)
{
    cudaError_t rc;
    struct event *e;
    char call[64], ev[32];

    rc = enter("cudaEventQuery");
    e = need_event(event, &rc);
    if (rc == cudaSuccess && e->captured)
        rc = cudaErrorCapturedEvent;
    if (rc == cudaSuccess && !tl_event_done(e))
        rc = cudaErrorNotReady;
    snprintf(call, sizeof call, "cudaEventQuery(%s)", event_text(event, ev));
    return leave(rc, call, NULL);
}

/* Empties the log alone (the tables, streams and events stay): a test
 * that queues more than the log holds reads what follows.  Exported by
 * name, not through the controls. */
EXPORTED void double_clear_log(void)
{
    pthread_mutex_lock(&lock);
    log_length = 0;
    log_text[0] = '\0';
    pthread_mutex_unlock(&lock);
}

/* A stream's id, never reused even when its handle is (CUDA 12's
 * cuStreamGetId); a handle the double does not know gets one of its own,
 * the same each time. */
CUresult CUDAAPI cuStreamGetId(CUstream stream, unsigned long long *id)
{
    cudaError_t rc = enter("cuStreamGetId");
    struct stream *s = NULL;
    char call[64], st[32], result[24] = "";

    if (rc == cudaSuccess && !is_default((cudaStream_t)stream)) {
        s = find_stream((cudaStream_t)stream);
        if (s != NULL && !s->live)
            rc = (cudaError_t)CUDA_ERROR_INVALID_HANDLE;
    }
    if (rc == cudaSuccess) {
        *id = s != NULL ? s->id
                        : (1ULL << 40) + (unsigned long long)(intptr_t)stream;
        snprintf(result, sizeof result, "%llu", *id);
    }
    snprintf(call, sizeof call, "cuStreamGetId(%s)",
             stream_text((cudaStream_t)stream, st));
    return (CUresult)leave(rc, call, result[0] != '\0' ? result : NULL);
}

/* The driver's query: the same answer, and the runtime's last error is
 * neither read nor set.  It needs no current context. */
CUresult CUDAAPI cuEventQuery(CUevent event)
{
    cudaError_t rc;
    struct event *e;
    char call[64], ev[32];

    rc = enter("cuEventQuery");
    /* An event of a context that ended answers as an H200's did (201);
     * one that was destroyed is still a violation. */
    e = live_event((cudaEvent_t)event);
    if (rc == cudaSuccess && e == NULL &&
        ((struct event *)(void *)event)->orphaned &&
        (struct event *)(void *)event >= events &&
        (struct event *)(void *)event < events + MAX_EVENTS)
        rc = (cudaError_t)CUDA_ERROR_INVALID_CONTEXT;
    else
        e = need_event((cudaEvent_t)event, &rc);
    if (rc == cudaErrorInvalidResourceHandle)
        rc = (cudaError_t)CUDA_ERROR_INVALID_HANDLE;
    if (rc == cudaSuccess && e->captured)
        rc = (cudaError_t)CUDA_ERROR_INVALID_VALUE;
    if (rc == cudaSuccess && !tl_event_done(e))
        rc = (cudaError_t)CUDA_ERROR_NOT_READY;
    snprintf(call, sizeof call, "cuEventQuery(%s)",
             event_text((cudaEvent_t)event, ev));
    return (CUresult)leave(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event)
{
    cudaError_t rc;
    struct event *e;
    char call[64], ev[32];

    rc = enter("cudaEventDestroy");
    e = need_event(event, &rc);
    snprintf(call, sizeof call, "cudaEventDestroy(%s)", event_text(event, ev));
    if (e == NULL) {
        rc = cudaErrorInvalidResourceHandle;
    } else {
        /* Like CUDA, the handle is gone even when the call reports an
         * error (a sticky error from earlier work, for instance). */
        e->live = 0;
    }
    return leave(rc, call, NULL);
}

/* The calling thread's capture interaction mode (cudaStreamCaptureModeGlobal
 * at first), as cudaThreadExchangeStreamCaptureMode sets it. */
static __thread int capture_mode = cudaStreamCaptureModeGlobal;

cudaError_t CUDARTAPI
cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    cudaError_t rc = enter("cudaThreadExchangeStreamCaptureMode");
    char call[64];
    int old = capture_mode;

    if (rc == cudaSuccess) {
        capture_mode = (int)*mode;
        *mode = (enum cudaStreamCaptureMode)old;
    }
    snprintf(call, sizeof call, "cudaThreadExchangeStreamCaptureMode(%d)",
             capture_mode);
    return leave(rc, call, NULL);
}

/* A blocking call ("potentially unsafe" in CUDA's words) while a capture
 * started in global mode is under way, from a thread not in relaxed mode:
 * every such capture is invalidated and the call refused.  The captures
 * the controls start count as another thread's, in global mode.  Lock
 * held. */
cudaError_t unsafe_during_capture(void)
{
    cudaError_t rc = cudaSuccess;
    int i;

    if (capture_mode == cudaStreamCaptureModeRelaxed)
        return cudaSuccess;
    for (i = 0; i < stream_count; i++)
        if (streams[i].capture != 0 && !streams[i].invalidated) {
            streams[i].invalidated = 1;
            rc = cudaErrorStreamCaptureUnsupported;
        }
    return rc;
}

/* CUDA's rule for the legacy stream (stream NULL or cudaStreamLegacy):
 * it synchronizes with every blocking stream of its context, so while one
 * of them is capturing, whatever the capture mode, any use of it would
 * depend on the capture.  It fails with cudaErrorStreamCaptureImplicit, and
 * a use (use != 0: work queued, a record, a wait, a synchronize) also
 * invalidates those captures; a query (cudaStreamIsCapturing) does not.
 * Lock held. */
cudaError_t legacy_during_capture(cudaStream_t stream, struct context *ctx,
                                  int use)
{
    cudaError_t rc = cudaSuccess;
    int i, j;

    if (stream != NULL && stream != cudaStreamLegacy)
        return cudaSuccess;
    for (i = 0; i < stream_count; i++) {
        const struct stream *s = &streams[i];

        if (!s->live || !s->blocking || s->capture == 0 ||
            (s->context != NULL ? s->context : need_context()) != ctx)
            continue;
        rc = cudaErrorStreamCaptureImplicit;
        for (j = 0; use && j < stream_count; j++)
            if (streams[j].capture == s->capture)
                streams[j].invalidated = 1;
    }
    return rc;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
    cudaError_t rc;
    struct context *ctx;
    struct stream *s;
    char call[64], st[32];

    rc = enter("cudaStreamSynchronize");
    if (rc == cudaSuccess)
        rc = resolve(stream, &ctx, &s);
    if (rc == cudaSuccess && s != NULL && s->capture != 0)
        rc = cudaErrorStreamCaptureUnsupported;
    if (rc == cudaSuccess)
        rc = legacy_during_capture(stream, ctx, 1);
    if (rc == cudaSuccess)
        rc = unsafe_during_capture();
    if (rc == cudaSuccess)
        tl_host_wait_stream(stream);
    snprintf(call, sizeof call, "cudaStreamSynchronize(%s)",
             stream_text(stream, st));
    return leave(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(
    cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    cudaError_t rc;
    struct context *ctx;
    struct stream *s = NULL;
    char call[64], st[32], result[16];
    int state = DOUBLE_NOT_CAPTURING;

    rc = enter("cudaStreamIsCapturing");
    if (rc == cudaSuccess)
        rc = resolve(stream, &ctx, &s);
    if (rc == cudaSuccess)
        rc = legacy_during_capture(stream, ctx, 0);
    if (rc == cudaSuccess) {
        if (s != NULL && s->capture != 0)
            state = s->invalidated ? DOUBLE_INVALIDATED : DOUBLE_CAPTURING;
        *status = (enum cudaStreamCaptureStatus)state;
    }
    snprintf(call, sizeof call, "cudaStreamIsCapturing(%s)",
             stream_text(stream, st));
    snprintf(result, sizeof result, "%d", state);
    return leave(rc, call, result);
}

/* ---- The driver's entry points ---- */

CUresult CUDAAPI cuInit(unsigned int flags)
{
    char call[32];
    cudaError_t rc;

    rc = enter("cuInit");
    snprintf(call, sizeof call, "cuInit(%u)", flags);
    return (CUresult)leave(rc, call, NULL);
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    cudaError_t rc;
    char cx[16];

    rc = enter("cuCtxGetCurrent");
    if (rc == cudaSuccess)
        *pctx = (CUcontext)(void *)current_ctx;
    return (CUresult)leave(rc, "cuCtxGetCurrent()",
                           context_text(current_ctx, cx));
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    cudaError_t rc;
    struct context *c = known_context(ctx);
    char call[48], cx[16];

    rc = enter("cuCtxSetCurrent");
    if (ctx != NULL && c == NULL && (const struct context *)ctx >= contexts &&
        (const struct context *)ctx < contexts + MAX_CONTEXTS)
        violation("cuCtxSetCurrent of a destroyed context");
    if (rc == cudaSuccess && ctx != NULL && c == NULL)
        rc = (cudaError_t)CUDA_ERROR_INVALID_CONTEXT;
    if (rc == cudaSuccess) {
        current_ctx = c;
        if (c != NULL)
            runtime_device = c->device;
    }
    snprintf(call, sizeof call, "cuCtxSetCurrent(%s)",
             ctx != NULL && c == NULL ? "?" : context_text(c, cx));
    return (CUresult)leave(rc, call, NULL);
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    cudaError_t rc;
    char result[16];

    rc = enter("cuCtxGetDevice");
    if (rc == cudaSuccess && current_ctx == NULL)
        rc = (cudaError_t)CUDA_ERROR_INVALID_CONTEXT;
    if (rc == cudaSuccess)
        *device = current_ctx->device;
    snprintf(result, sizeof result, "%d",
             current_ctx != NULL ? current_ctx->device : -1);
    return (CUresult)leave(rc, "cuCtxGetDevice()", result);
}

/* Left out of the partial-driver build, as an old or broken driver would. */
#ifndef DOUBLE_PARTIAL_DRIVER
CUresult CUDAAPI cuStreamGetCtx(CUstream stream, CUcontext *pctx)
{
    cudaError_t rc;
    struct stream *s;
    struct context *c = NULL;
    char call[64], st[32], cx[16];

    rc = enter("cuStreamGetCtx");
    s = is_default((cudaStream_t)stream) ? NULL
                                         : find_stream((cudaStream_t)stream);
    if (rc == cudaSuccess && s != NULL && !s->live) {
        violation(s->orphaned ? "use of stream %s of a destroyed context"
                              : "use of destroyed stream %s",
                  stream_text((cudaStream_t)stream, st));
        rc = (cudaError_t)CUDA_ERROR_INVALID_HANDLE;
    }
    if (rc == cudaSuccess) {
        /* The driver does not create contexts for a default stream. */
        c = s != NULL && s->context != NULL ? s->context : current_ctx;
        if (c == NULL)
            rc = (cudaError_t)CUDA_ERROR_INVALID_CONTEXT;
    }
    if (rc == cudaSuccess)
        *pctx = (CUcontext)(void *)c;
    snprintf(call, sizeof call, "cuStreamGetCtx(%s)",
             stream_text((cudaStream_t)stream, st));
    return (CUresult)leave(rc, call, context_text(c, cx));
}
#endif

static const char *attribute_text(CUpointer_attribute attribute)
{
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        return "CU_POINTER_ATTRIBUTE_CONTEXT";
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        return "CU_POINTER_ATTRIBUTE_MEMORY_TYPE";
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        return "CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL";
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        return "CU_POINTER_ATTRIBUTE_IS_MANAGED";
    default:
        return "?";
    }
}

/* One attribute of ptr as the driver gives it, needing no context: memory
 * CUDA does not know is CUDA_ERROR_INVALID_VALUE; pool memory belongs to
 * no context (NULL). */
static CUresult attribute_of(CUpointer_attribute attribute, const void *ptr,
                             void *data, char result[16])
{
    const struct pointer *p = find_pointer(ptr);
    struct context *c;
    int device;

    if (p == NULL || p->type == DOUBLE_UNREGISTERED)
        return CUDA_ERROR_INVALID_VALUE;
    device = p->device < 0 ? 0 : p->device;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        c = p->pool ? NULL : primary(device);
        *(CUcontext *)data = (CUcontext)(void *)c;
        context_text(c, result);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = p->type == DOUBLE_PINNED ? CU_MEMORYTYPE_HOST
                                                     : CU_MEMORYTYPE_DEVICE;
        snprintf(result, 16, "%u", *(unsigned *)data);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = device;
        snprintf(result, 16, "%d", device);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned *)data = p->type == DOUBLE_MANAGED;
        snprintf(result, 16, "%u", *(unsigned *)data);
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

CUresult CUDAAPI cuPointerGetAttribute(void *data,
                                       CUpointer_attribute attribute,
                                       CUdeviceptr ptr)
{
    cudaError_t rc;
    char call[96], result[16] = "";

    rc = enter("cuPointerGetAttribute");
    if (rc == cudaSuccess)
        rc = (cudaError_t)attribute_of(attribute, (const void *)(uintptr_t)ptr,
                                       data, result);
    snprintf(call, sizeof call, "cuPointerGetAttribute(%s, %p)",
             attribute_text(attribute), (const void *)(uintptr_t)ptr);
    return (CUresult)leave(rc, call, result[0] != '\0' ? result : NULL);
}

/* Unlike the single query, memory CUDA does not know is no error: its
 * attributes read as zeros. */
CUresult CUDAAPI cuPointerGetAttributes(unsigned count,
                                        CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
{
    cudaError_t rc;
    char call[96], result[96] = "", one[16];
    size_t used = 0;
    unsigned i;

    rc = enter("cuPointerGetAttributes");
    for (i = 0; rc == cudaSuccess && i < count; i++) {
        CUresult r = attribute_of(attributes[i], (const void *)(uintptr_t)ptr,
                                  data[i], one);

        if (r == CUDA_ERROR_INVALID_VALUE) {
            /* Every attribute caibridge asks for fits in 8 bytes. */
            memset(data[i], 0,
                   attributes[i] == CU_POINTER_ATTRIBUTE_CONTEXT
                       ? sizeof(CUcontext)
                       : sizeof(int));
            snprintf(one, sizeof one, "0");
        } else if (r != CUDA_SUCCESS) {
            rc = (cudaError_t)r;
        }
        used += (size_t)snprintf(result + used, sizeof result - used, "%s%s",
                                 i ? " " : "", one);
        if (used >= sizeof result)
            used = sizeof result - 1;
    }
    snprintf(call, sizeof call, "cuPointerGetAttributes(%u, %p)", count,
             (const void *)(uintptr_t)ptr);
    return (CUresult)leave(rc, call, result);
}

/* ---- Control side ---- */

static void reset(void)
{
    int i;

    tl_reset(); /* drains first, without the lock */
    pthread_mutex_lock(&lock);
    graph_reset();
    concurrent_managed = 1;
    cuda11_set_device = 0;
    set_device_pending = 0;
    call_count = 0;
    for (i = 0; i < MAX_EVENTS; i++)
        events[i].host_waits = 0;
    log_length = 0;
    log_text[0] = '\0';
    pointer_count = 0;
    failure_count = 0;
    events_created = 0;
    stream_count = 0;
    pageable_access = 0;
    driver_version = -1;
    for (i = 0; i < DOUBLE_DEVICE_COUNT; i++)
        contexts[i].refs = 0;
    runtime_device = 0;
    current_ctx = primary(0);
    last_error = cudaSuccess;
    pthread_mutex_unlock(&lock);
}

static void set_version(int v)
{
    LOCKED(version = v);
}

static void set_current_device(int device)
{
    pthread_mutex_lock(&lock);
    runtime_device = device;
    current_ctx = primary(device);
    pthread_mutex_unlock(&lock);
}

static int current_device(void)
{
    return current_ctx != NULL ? current_ctx->device : runtime_device;
}

struct pointer *find_pointer(const void *ptr)
{
    const char *p = ptr;
    int i;

    for (i = pointer_count - 1; i >= 0; i--)
        if (p >= pointers[i].base &&
            (size_t)(p - pointers[i].base) < pointers[i].size)
            return &pointers[i];
    return NULL;
}

void add_pointer(const void *base, size_t size, int type, int device,
                 const void *host_alias, int pool)
{
    pthread_mutex_lock(&lock);
    if (pointer_count < MAX_POINTERS) {
        pointers[pointer_count].base = base;
        pointers[pointer_count].size = size;
        pointers[pointer_count].type = type;
        pointers[pointer_count].device = device;
        pointers[pointer_count].host_alias = host_alias;
        pointers[pointer_count].pool = pool;
        pointer_count++;
    }
    pthread_mutex_unlock(&lock);
}

static void add_allocation(const void *base, size_t size, int type, int device,
                           const void *host_alias)
{
    add_pointer(base, size, type, device, host_alias, 0);
}

static void set_pointer(const void *ptr, int type, int device)
{
    add_allocation(ptr, 1, type, device, NULL);
}

static void fail_after(const char *call, int error, int skip)
{
    int i, kept = 0;

    pthread_mutex_lock(&lock);
    /* Error 0 ends the failures set for call before (the first match
     * answers, so it could not otherwise). */
    if (error == 0) {
        for (i = 0; i < failure_count; i++)
            if (strcmp(failures[i].call, call) != 0)
                failures[kept++] = failures[i];
        failure_count = kept;
    }
    if (failure_count < MAX_FAILURES) {
        snprintf(failures[failure_count].call,
                 sizeof failures[failure_count].call, "%s", call);
        failures[failure_count].error = error;
        failures[failure_count].skip = skip;
        failure_count++;
    }
    pthread_mutex_unlock(&lock);
}

static void fail(const char *call, int error)
{
    fail_after(call, error, 0);
}

static const char *log_contents(void)
{
    return log_text;
}

static int live_events(void)
{
    int i, n = 0;

    pthread_mutex_lock(&lock);
    for (i = 0; i < MAX_EVENTS; i++)
        n += events[i].live;
    pthread_mutex_unlock(&lock);
    return n;
}

static void add_stream_on(long handle, struct context *c)
{
    pthread_mutex_lock(&lock);
    if (stream_count < MAX_STREAMS) {
        memset(&streams[stream_count], 0, sizeof streams[stream_count]);
        streams[stream_count].handle = handle;
        streams[stream_count].live = 1;
        streams[stream_count].context = c;
        streams[stream_count].id = next_stream_id();
        stream_count++;
    }
    pthread_mutex_unlock(&lock);
}

static void add_stream(long handle, int device)
{
    struct context *c;

    LOCKED(c = primary(device));
    add_stream_on(handle, c);
}

static void add_stream_on_context(long handle, void *context)
{
    add_stream_on(handle, known_context(context));
}

static struct stream *control_stream(long handle)
{
    return find_stream((cudaStream_t)(intptr_t)handle);
}

static void destroy_stream(long handle)
{
    struct stream *s;

    pthread_mutex_lock(&lock);
    s = control_stream(handle);
    if (s != NULL)
        s->live = 0;
    pthread_mutex_unlock(&lock);
}

static void *create_context(int device)
{
    struct context *c = NULL;
    int i;

    pthread_mutex_lock(&lock);
    for (i = DOUBLE_DEVICE_COUNT; i < MAX_CONTEXTS && c == NULL; i++)
        if (!contexts[i].made && !contexts[i].destroyed)
            c = &contexts[i];
    if (c != NULL) {
        c->made = 1;
        c->id = ++context_ids;
        c->device = device;
        c->primary = 0;
        c->number = ++other_contexts;
    }
    pthread_mutex_unlock(&lock);
    return c;
}

static void *current_context(void)
{
    return current_ctx;
}

static void set_current_context(void *context)
{
    current_ctx = known_context(context);
    if (current_ctx != NULL)
        runtime_device = current_ctx->device;
}

static int primary_contexts(void)
{
    int n;

    LOCKED(n = primaries_created);
    return n;
}

static void begin_capture(long handle, int id)
{
    struct stream *s;

    pthread_mutex_lock(&lock);
    s = control_stream(handle);
    if (s != NULL) {
        s->capture = id;
        s->invalidated = 0;
        s->joined = 0;
    }
    pthread_mutex_unlock(&lock);
}

static int end_capture(long handle)
{
    struct stream *s;
    int i, rc = 0;

    pthread_mutex_lock(&lock);
    s = control_stream(handle);
    if (s != NULL && s->capture != 0) {
        if (s->invalidated)
            rc = cudaErrorStreamCaptureInvalidated;
        for (i = 0; i < stream_count; i++) {
            if (&streams[i] != s && streams[i].capture == s->capture) {
                if (streams[i].joined && rc == 0)
                    rc = cudaErrorStreamCaptureUnjoined;
                streams[i].capture = 0;
                streams[i].joined = 0;
            }
        }
        s->ended = s->capture;
        s->capture = 0;
        s->invalidated = 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int capture_state(long handle)
{
    struct stream *s;
    int state = DOUBLE_NOT_CAPTURING;

    pthread_mutex_lock(&lock);
    s = control_stream(handle);
    if (s != NULL && s->capture != 0)
        state = s->invalidated ? DOUBLE_INVALIDATED : DOUBLE_CAPTURING;
    pthread_mutex_unlock(&lock);
    return state;
}

static void set_driver_version(int v)
{
    LOCKED(driver_version = v);
}

static void set_pageable_access(int value)
{
    LOCKED(pageable_access = value);
}

static int pending_error(void)
{
    return (int)last_error;
}

static void set_pending_error(int error)
{
    last_error = (cudaError_t)error;
}

static int host_waits(void)
{
    int i, n = 0;

    pthread_mutex_lock(&lock);
    for (i = 0; i < MAX_EVENTS; i++)
        n += events[i].host_waits;
    pthread_mutex_unlock(&lock);
    return n;
}

static const struct cudart_double controls = {
    reset,
    set_version,
    set_current_device,
    current_device,
    set_pointer,
    fail,
    log_contents,
    live_events,
    add_allocation,
    add_stream,
    add_stream_on_context,
    destroy_stream,
    create_context,
    current_context,
    set_current_context,
    primary_contexts,
    begin_capture,
    end_capture,
    capture_state,
    set_driver_version,
    set_pageable_access,
    pending_error,
    set_pending_error,
    host_waits,
    fail_after,
    timeline_on,
    gate_new,
    gate_open,
    gate_open_on_host_wait,
    launch_fill,
    launch_copy,
    drain,
    stream_create,
    violations,
    violation_log,
    calls,
    add_pool_allocation,
    set_cuda11_set_device,
    set_concurrent_managed_access,
    host_read,
    instantiate,
    replay,
    live_async_allocations,
    stream_create_blocking,
};

const struct cudart_double *cudart_double_controls(void)
{
    return &controls;
}
