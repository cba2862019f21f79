/*
 * The runtime double's timeline: once timeline_on() is called, each stream
 * runs its queued work in order on a worker thread of its own.  Events
 * complete when their stream reaches them, a stream wait holds its queue
 * until the event completes, host waits block.  "Kernels" fill or copy
 * host-backed memory once their gate opens, so the test, not a clock,
 * decides when work finishes.  Also the violations (rules of CUDA the code
 * under test broke) and the entry points that only the timeline needs.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "double-internal.h"

#define MAX_QUEUES 64
#define MAX_GATES 256
/* A wait that takes this long is a deadlock or a missing gate_open. */
#define STUCK_SECONDS 10

enum {
    OP_KERNEL,
    OP_MARK,
    OP_WAIT
};

struct op {
    int kind;
    struct work work; /* OP_KERNEL */
    int wait_queue;   /* OP_WAIT: until that queue has done wait_position */
    long wait_position;
    struct op *next;
};

/* A stream's queue.  The default streams are not one queue each: stream 1
 * (legacy) is one per context, stream 2 (per-thread) one per context and
 * thread, as in CUDA. */
struct queue {
    long handle;
    struct context *ctx; /* its context: the default stream's, or NULL */
    int thread;          /* stream 2: the thread's number, else 0 */
    int blocking;        /* a blocking stream's queue */
    int used, started;
    struct op *head, *tail;
    long queued, done;
    int host_functions; /* queued and not yet run */
    pthread_t worker;
};

/* What an H200 showed: a host function holds its stream for tens of
 * microseconds, and a stream holds a bounded number of items (far fewer
 * host functions) before the next launch blocks the host.  The double
 * counts such a launch (and calls it a violation) instead of blocking, so
 * a test sees it without hanging. */
#define HOST_FUNCTIONS_HELD 56
#define ITEMS_HELD 1024
static long host_function_us;
static int host_functions_held = HOST_FUNCTIONS_HELD;
static int items_held = ITEMS_HELD;
static long launches_blocked, host_functions_run;

int timeline;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct queue queues[MAX_QUEUES];
static struct {
    int open, on_host_wait;
} gates[MAX_GATES];
static int gate_count;
static int busy;     /* kernels queued or running */
static int stopping; /* the library is unloading: workers end */
static long next_handle = 0x10000;
static char violation_text[8192];
static size_t violation_length;
static long violation_count;
static int threads_seen;
static __thread int thread_number; /* 0 until this thread names stream 2 */

void violation(const char *fmt, ...)
{
    va_list ap;
    int n;

    violation_count++;
    if (violation_length >= sizeof violation_text - 2)
        return;
    va_start(ap, fmt);
    n = vsnprintf(violation_text + violation_length,
                  sizeof violation_text - violation_length - 1, fmt, ap);
    va_end(ap);
    if (n > 0)
        violation_length += (size_t)n;
    if (violation_length > sizeof violation_text - 2)
        violation_length = sizeof violation_text - 2;
    violation_text[violation_length++] = '\n';
    violation_text[violation_length] = '\0';
}

/* Waits on changed (lock held) until the deadline; 0 once it passed. */
static int wait_until(const struct timespec *deadline)
{
    return pthread_cond_timedwait(&changed, &lock, deadline) != ETIMEDOUT;
}

static struct timespec deadline_from_now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += STUCK_SECONDS;
    return t;
}

/* Whether queue q's work up to position comes after target's op at
 * target_position: the same queue, or through the stream waits queued
 * before it (depth bounds the walk; waits never form a cycle). */
static int covers(int q, long position, int target, long target_position,
                  int depth)
{
    const struct op *op;
    long i;

    if (q == target && position >= target_position)
        return 1;
    if (depth > 8)
        return 0;
    for (op = queues[q].head, i = queues[q].done + 1;
         op != NULL && i <= position; op = op->next, i++)
        if (op->kind == OP_WAIT && covers(op->wait_queue, op->wait_position,
                                          target, target_position, depth + 1))
            return 1;
    return 0;
}

/* A host thread blocks until queue q has done position: the gates set to
 * open on a host wait open when that wait is for their kernel (directly,
 * or through the waits ahead of it), not on any other. */
static void host_blocks(int q, long position)
{
    const struct op *op;
    int i, g;
    long k;

    for (i = 0; i < MAX_QUEUES; i++) {
        if (!queues[i].used)
            continue;
        for (op = queues[i].head, k = queues[i].done + 1; op != NULL;
             op = op->next, k++) {
            g = op->kind == OP_KERNEL ? op->work.gate : 0;
            if (g > 0 && g <= gate_count && gates[g - 1].on_host_wait &&
                !gates[g - 1].open && covers(q, position, i, k, 0))
                gates[g - 1].open = 1;
        }
    }
    pthread_cond_broadcast(&changed);
}

static void run_work(const struct work *w)
{
    if (w->fn != NULL)
        w->fn(w->arg);
    else if (w->src != NULL)
        memmove(w->dst, w->src, w->size);
    else if (w->dst != NULL)
        memset(w->dst, w->value, w->size);
}

/* Runs queue's op at its head (lock held; released around the work). */
static void run_head(struct queue *q)
{
    struct op *op = q->head;
    struct timespec deadline = deadline_from_now();
    int g = op->work.gate;
    int *gate = g > 0 && g <= gate_count ? &gates[g - 1].open : NULL;

    while (!stopping && op->kind == OP_WAIT &&
           queues[op->wait_queue].done < op->wait_position) {
        if (!wait_until(&deadline)) {
            violation("stream 0x%lx waited %d s for an event", q->handle,
                      STUCK_SECONDS);
            break;
        }
    }
    while (!stopping && gate != NULL && !*gate) {
        if (!wait_until(&deadline)) {
            violation("stream 0x%lx: gate %d still closed after %d s",
                      q->handle, g, STUCK_SECONDS);
            *gate = 1;
        }
    }
    if (stopping)
        return; /* exit: what is left queued never runs */
    if (op->kind == OP_KERNEL) {
        long hold = host_function(&op->work) ? host_function_us : 0;

        pthread_mutex_unlock(&lock);
        if (hold > 0) {
            struct timespec t = {hold / 1000000, hold % 1000000 * 1000};

            nanosleep(&t, NULL);
        }
        run_work(&op->work);
        pthread_mutex_lock(&lock);
        busy -= !host_function(&op->work);
        if (host_function(&op->work)) {
            q->host_functions--;
            host_functions_run++;
        }
    }
    q->head = op->next;
    if (q->head == NULL)
        q->tail = NULL;
    q->done++;
    free(op);
    pthread_cond_broadcast(&changed);
}

static void *worker(void *arg)
{
    struct queue *q = arg;

    pthread_mutex_lock(&lock);
    for (;;) {
        while (!stopping && q->head == NULL)
            pthread_cond_wait(&changed, &lock);
        if (stopping)
            break;
        run_head(q);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* The queue of stream as the calling thread names it (NULL is the legacy
 * stream), made on first use: the default streams are the current
 * context's, stream 2 this thread's. */
static int queue_of(cudaStream_t stream)
{
    long handle = stream == NULL ? 1 : (long)(intptr_t)stream;
    struct context *ctx = NULL;
    struct stream *s;
    int i, free_slot = -1, thread = 0;

    if (handle == 1 || handle == 2) {
        ctx = need_context();
        if (handle == 2) {
            if (thread_number == 0)
                thread_number = ++threads_seen;
            thread = thread_number;
        }
    }
    for (i = 0; i < MAX_QUEUES; i++) {
        if (queues[i].used && queues[i].handle == handle &&
            (ctx == NULL || queues[i].ctx == ctx) &&
            queues[i].thread == thread)
            return i;
        if (!queues[i].used && free_slot < 0)
            free_slot = i;
    }
    if (free_slot < 0) {
        violation("more than %d streams on the timeline", MAX_QUEUES);
        free_slot = 0;
    }
    s = handle == 1 || handle == 2 ? NULL : find_stream(stream);
    if (ctx == NULL)
        ctx = s != NULL && s->context != NULL ? s->context : need_context();
    queues[free_slot].blocking = s != NULL && s->blocking;
    queues[free_slot].used = 1;
    queues[free_slot].handle = handle;
    queues[free_slot].ctx = ctx;
    queues[free_slot].thread = thread;
    if (!queues[free_slot].started &&
        pthread_create(&queues[free_slot].worker, NULL, worker,
                       &queues[free_slot]) == 0)
        queues[free_slot].started = 1;
    return free_slot;
}

static void append(struct queue *q, struct op *op)
{
    op->next = NULL;
    if (q->tail != NULL)
        q->tail->next = op;
    else
        q->head = op;
    q->tail = op;
    q->queued++;
}

/* CUDA's implicit orders: the legacy stream of a context waits for the
 * earlier work of its per-thread and blocking streams, and they wait for
 * its earlier work.  Streams made by the test are non-blocking (torch's
 * are) unless made blocking, so nothing else orders them but what the
 * code asks for. */
static void implicit_waits(struct queue *q)
{
    int i;

    if (q->handle != 1 && q->handle != 2 && !q->blocking)
        return;
    for (i = 0; i < MAX_QUEUES; i++) {
        struct queue *other = &queues[i];
        struct op *op;

        if (!other->used || other == q || other->ctx != q->ctx ||
            other->done >= other->queued ||
            !(other->handle == 1 ||
              (q->handle == 1 && (other->handle == 2 || other->blocking))))
            continue;
        if ((op = calloc(1, sizeof *op)) == NULL)
            abort();
        op->kind = OP_WAIT;
        op->wait_queue = i;
        op->wait_position = other->queued;
        append(q, op);
    }
}

/* Appends op to stream's queue; its position there. */
static long enqueue(cudaStream_t stream, struct op *op)
{
    struct queue *q = &queues[queue_of(stream)];

    implicit_waits(q);
    if ((host_functions_held > 0 &&
         q->host_functions >= host_functions_held) ||
        (items_held > 0 && q->queued - q->done >= items_held)) {
        launches_blocked++;
        violation("a launch on stream 0x%lx found %ld items (%d host "
                  "functions) queued there: the host would block",
                  q->handle, q->queued - q->done, q->host_functions);
    }
    if (op->kind == OP_KERNEL && host_function(&op->work))
        q->host_functions++;
    append(q, op);
    pthread_cond_broadcast(&changed);
    return q->queued;
}

static struct op *new_op(int kind)
{
    struct op *op = calloc(1, sizeof *op);

    if (op == NULL)
        abort();
    op->kind = kind;
    return op;
}

void tl_record(struct event *e, cudaStream_t stream)
{
    e->queue = -1;
    if (!timeline)
        return;
    e->queue = queue_of(stream);
    e->position = enqueue(stream, new_op(OP_MARK));
}

void tl_wait(cudaStream_t stream, const struct event *e)
{
    struct op *op;

    if (!timeline || e->queue < 0)
        return;
    op = new_op(OP_WAIT);
    op->wait_queue = e->queue;
    op->wait_position = e->position;
    enqueue(stream, op);
}

/* Blocks (lock released meanwhile) until queue has done position. */
static void host_wait(int queue, long position, const char *what)
{
    struct timespec deadline = deadline_from_now();

    host_blocks(queue, position);
    while (queues[queue].done < position)
        if (!wait_until(&deadline)) {
            violation("a host wait on %s did not finish in %d s", what,
                      STUCK_SECONDS);
            return;
        }
}

void tl_host_wait_event(const struct event *e)
{
    if (timeline && e->queue >= 0)
        host_wait(e->queue, e->position, "an event");
}

/* Whether the event's last record has been reached (cudaEventQuery). */
int tl_event_done(const struct event *e)
{
    return !timeline || e->queue < 0 || queues[e->queue].done >= e->position;
}

void tl_host_wait_stream(cudaStream_t stream)
{
    int q;

    if (!timeline)
        return;
    q = queue_of(stream);
    host_wait(q, queues[q].queued, "a stream");
}

/* cudaDeviceSynchronize: the current device's streams only. */
static void host_wait_all(int device)
{
    int i;

    for (i = 0; timeline && i < MAX_QUEUES; i++)
        if (queues[i].used && queues[i].ctx != NULL &&
            queues[i].ctx->device == device)
            host_wait(i, queues[i].queued, "the device");
}

void tl_launch(cudaStream_t stream, const struct work *work)
{
    struct op *op;

    if (!timeline) {
        /* Without time, work is done when it is queued. */
        pthread_mutex_unlock(&lock);
        run_work(work);
        pthread_mutex_lock(&lock);
        return;
    }
    op = new_op(OP_KERNEL);
    op->work = *work;
    busy += !host_function(work);
    enqueue(stream, op);
}

static void drain_locked(void)
{
    struct timespec deadline = deadline_from_now();
    int i, again = 1, reported = 0;

    while (again) {
        again = 0;
        for (i = 0; i < MAX_QUEUES; i++)
            if (queues[i].used && queues[i].done < queues[i].queued)
                again = 1;
        if (again && !wait_until(&deadline)) {
            if (reported)
                break;
            violation("drain: work still queued after %d s (a gate never "
                      "opened?)",
                      STUCK_SECONDS);
            reported = 1;
            for (i = 0; i < gate_count; i++)
                gates[i].open = 1;
            pthread_cond_broadcast(&changed);
            deadline = deadline_from_now();
        }
    }
}

void tl_reset(void)
{
    int i;

    pthread_mutex_lock(&lock);
    drain_locked();
    timeline = 0;
    for (i = 0; i < MAX_QUEUES; i++) {
        queues[i].used = 0;
        queues[i].queued = queues[i].done = 0;
        queues[i].host_functions = 0;
    }
    host_function_us = 0;
    host_functions_held = HOST_FUNCTIONS_HELD;
    items_held = ITEMS_HELD;
    launches_blocked = host_functions_run = 0;
    for (i = 0; i < MAX_EVENTS; i++)
        events[i].queue = -1;
    gate_count = 0;
    busy = 0;
    violation_count = 0;
    violation_length = 0;
    violation_text[0] = '\0';
    pthread_mutex_unlock(&lock);
}

/* A forked child (lock held): no worker runs there and none of the
 * parent's queued work is its own, so the queues start empty (their ops
 * leak) and no worker is joined at exit.  The condition variable is made
 * anew: a worker of the parent's may have been inside it. */
void tl_after_fork(void)
{
    int i;

    pthread_cond_init(&changed, NULL);
    for (i = 0; i < MAX_QUEUES; i++) {
        queues[i].used = queues[i].started = 0;
        queues[i].head = queues[i].tail = NULL;
        queues[i].queued = queues[i].done = 0;
        queues[i].host_functions = 0;
    }
    for (i = 0; i < MAX_EVENTS; i++)
        events[i].queue = -1;
    busy = 0;
}

/* The workers end with the library, so leak checkers see no thread.  They
 * stop where they are: work still queued (behind a closed gate, say) is
 * dropped, as a process's GPU work is at exit.  A worker inside a host
 * function that never returns (one that needs an interpreter that has
 * ended) is left after a few seconds rather than hanging the exit. */
__attribute__((destructor)) static void stop_workers(void)
{
    struct timespec deadline;
    int i;

    pthread_mutex_lock(&lock);
    stopping = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 2;
    for (i = 0; i < MAX_QUEUES; i++)
        if (queues[i].started &&
            pthread_timedjoin_np(queues[i].worker, NULL, &deadline) != 0)
            pthread_detach(queues[i].worker);
}

long tl_stream_create(int device, int blocking)
{
    long handle = next_handle;

    if (stream_count >= MAX_STREAMS) {
        violation("more than %d streams", MAX_STREAMS);
        return 0;
    }
    next_handle += 0x100; /* never reused: a stale handle stays stale */
    memset(&streams[stream_count], 0, sizeof streams[stream_count]);
    streams[stream_count].handle = handle;
    streams[stream_count].live = 1;
    streams[stream_count].context = primary(device);
    streams[stream_count].blocking = blocking;
    streams[stream_count].id = next_stream_id();
    stream_count++;
    return handle;
}

/* ---- Entry points only the timeline needs ---- */

/* cudaStreamCreate makes a blocking stream, as in CUDA. */
cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *stream)
{
    cudaError_t rc = enter("cudaStreamCreate");
    char result[32];
    long handle = 0;

    if (rc == cudaSuccess) {
        handle = tl_stream_create(need_context()->device, 1);
        *stream = (cudaStream_t)(intptr_t)handle;
    }
    snprintf(result, sizeof result, "0x%lx", handle);
    return leave(rc, "cudaStreamCreate()", result);
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *stream,
                                                unsigned int flags)
{
    cudaError_t rc = enter("cudaStreamCreateWithFlags");
    char call[48], result[32];
    long handle = 0;

    if (rc == cudaSuccess) {
        handle = tl_stream_create(need_context()->device,
                                  !(flags & cudaStreamNonBlocking));
        *stream = (cudaStream_t)(intptr_t)handle;
    }
    snprintf(call, sizeof call, "cudaStreamCreateWithFlags(%u)", flags);
    snprintf(result, sizeof result, "0x%lx", handle);
    return leave(rc, call, result);
}

/* An entry point's start when it names a stream: the lock taken, the
 * injected failure or the stream's (*s: its table entry, or NULL), and
 * call formatted as "name(stream)". */
static cudaError_t enter_on(const char *name, cudaStream_t stream,
                            struct stream **s, char call[64])
{
    cudaError_t rc = enter(name);
    struct context *ctx;
    char st[32];

    *s = NULL;
    if (rc == cudaSuccess)
        rc = resolve(stream, &ctx, s);
    /* Work queued there; cudaStreamGetCaptureInfo is a query. */
    if (rc == cudaSuccess)
        rc = legacy_during_capture(
            stream, ctx, strcmp(name, "cudaStreamGetCaptureInfo") != 0);
    snprintf(call, 64, "%s(%s)", name, stream_text(stream, st));
    return rc;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
    struct stream *s;
    char call[64];
    cudaError_t rc = enter_on("cudaStreamDestroy", stream, &s, call);

    if (rc == cudaSuccess && s == NULL)
        rc = cudaErrorInvalidResourceHandle;
    if (rc == cudaSuccess)
        s->live = 0; /* its queued work still runs, as in CUDA */
    return leave(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
    cudaError_t rc = enter("cudaDeviceSynchronize");

    if (rc == cudaSuccess)
        rc = unsafe_during_capture();
    if (rc == cudaSuccess)
        host_wait_all(need_context()->device);
    return leave(rc, "cudaDeviceSynchronize()", NULL);
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn,
                                         void *data)
{
    struct stream *s;
    char call[64];
    cudaError_t rc = enter_on("cudaLaunchHostFunc", stream, &s, call);

    if (rc == cudaSuccess) {
        struct work work = {NULL, NULL, 0, 0, 0, fn, data};

        if (!graph_launch(s, &work))
            tl_launch(stream, &work);
    }
    return leave(rc, call, NULL);
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice device, unsigned *flags,
                                            int *active)
{
    cudaError_t rc = enter("cuDevicePrimaryCtxGetState");
    char call[48], result[16];
    int on = 0;

    if (rc == cudaSuccess && (device < 0 || device >= DOUBLE_DEVICE_COUNT))
        rc = (cudaError_t)CUDA_ERROR_INVALID_DEVICE;
    if (rc == cudaSuccess) {
        on = contexts[device].made;
        *flags = 0;
        *active = on;
    }
    snprintf(call, sizeof call, "cuDevicePrimaryCtxGetState(%d)", device);
    snprintf(result, sizeof result, "%s", on ? "active" : "inactive");
    return (CUresult)leave(rc, call, result);
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device)
{
    cudaError_t rc = enter("cuDevicePrimaryCtxRetain");
    char call[48], cx[16] = "";

    if (rc == cudaSuccess && (device < 0 || device >= DOUBLE_DEVICE_COUNT))
        rc = (cudaError_t)CUDA_ERROR_INVALID_DEVICE;
    if (rc == cudaSuccess) {
        struct context *c = primary_by(device, 0);

        c->refs++;
        *context = (CUcontext)(void *)c;
        context_text(c, cx);
    }
    snprintf(call, sizeof call, "cuDevicePrimaryCtxRetain(%d)", device);
    return (CUresult)leave(rc, call, cx[0] != '\0' ? cx : NULL);
}

/* cuda.h names the current ABI cuDevicePrimaryCtxRelease_v2.  Releasing
 * what was not retained is a violation; the last release of a primary
 * context the runtime never used ends it. */
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device)
{
    cudaError_t rc = enter("cuDevicePrimaryCtxRelease");
    char call[48];

    if (rc == cudaSuccess && (device < 0 || device >= DOUBLE_DEVICE_COUNT))
        rc = (cudaError_t)CUDA_ERROR_INVALID_DEVICE;
    if (rc == cudaSuccess) {
        struct context *c = &contexts[device];

        if (!c->made || c->refs <= 0) {
            violation("cuDevicePrimaryCtxRelease(%d) without a retain",
                      device);
            rc = (cudaError_t)CUDA_ERROR_INVALID_CONTEXT;
        } else if (--c->refs == 0 && !c->held) {
            context_dies(c);
        }
    }
    snprintf(call, sizeof call, "cuDevicePrimaryCtxRelease(%d)", device);
    return (CUresult)leave(rc, call, NULL);
}

/* cuda.h: cuDevicePrimaryCtxReset_v2.  Ends the primary context whoever
 * holds it; its handle stays, and names a new one once made again. */
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice device)
{
    cudaError_t rc = enter("cuDevicePrimaryCtxReset");
    char call[48];

    if (rc == cudaSuccess && (device < 0 || device >= DOUBLE_DEVICE_COUNT))
        rc = (cudaError_t)CUDA_ERROR_INVALID_DEVICE;
    if (rc == cudaSuccess && contexts[device].made)
        context_dies(&contexts[device]);
    snprintf(call, sizeof call, "cuDevicePrimaryCtxReset(%d)", device);
    return (CUresult)leave(rc, call, NULL);
}

/* The current device's primary context ends (the runtime makes a new one
 * at the next call that needs it). */
cudaError_t CUDARTAPI cudaDeviceReset(void)
{
    cudaError_t rc = enter("cudaDeviceReset");
    int device = current_ctx != NULL ? current_ctx->device : runtime_device;

    if (rc == cudaSuccess && contexts[device].made)
        context_dies(&contexts[device]);
    return leave(rc, "cudaDeviceReset()", NULL);
}

/* cuda.h: cuCtxDestroy_v2.  A primary context is not the caller's to
 * destroy.  The calling thread is left with no context current; another
 * thread that has it current gets violations at its next runtime call. */
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    cudaError_t rc = enter("cuCtxDestroy");
    struct context *c = known_context(ctx);
    char call[48], cx[16];

    if (rc == cudaSuccess && (c == NULL || c->primary || !c->made))
        rc = (cudaError_t)CUDA_ERROR_INVALID_CONTEXT;
    if (rc == cudaSuccess) {
        context_dies(c);
        if (current_ctx == c)
            current_ctx = NULL;
    }
    snprintf(call, sizeof call, "cuCtxDestroy(%s)",
             c != NULL ? context_text(c, cx) : "?");
    return (CUresult)leave(rc, call, NULL);
}

/* A number for each context made, never reused: a context made again
 * after a reset has a new one, though its handle is the old one's. */
CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    cudaError_t rc = enter("cuCtxGetId");
    struct context *c = ctx != NULL ? known_context(ctx) : current_ctx;
    const struct context *raw = (const struct context *)(void *)ctx;
    char call[48], cx[16], result[24] = "";

    /* A context of ours that ended answers "destroyed" (as an H200 did
     * after a reset and after a primary context's last release), until a
     * primary one is made again under the same handle, with a new id. */
    if (rc == cudaSuccess && ctx != NULL && raw >= contexts &&
        raw < contexts + MAX_CONTEXTS && !raw->made)
        rc = (cudaError_t)CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (rc == cudaSuccess && (c == NULL || !c->made))
        rc = (cudaError_t)CUDA_ERROR_INVALID_CONTEXT;
    if (rc == cudaSuccess) {
        *id = c->id;
        snprintf(result, sizeof result, "%llu", c->id);
    }
    snprintf(call, sizeof call, "cuCtxGetId(%s)",
             ctx == NULL ? "NULL"
             : c != NULL ? context_text(c, cx)
                         : "?");
    return (CUresult)leave(rc, call, result[0] != '\0' ? result : NULL);
}

/* The CUDA 13 arguments; the double reports 13.0 unless told otherwise,
 * and only the first three are read. */
cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(
    cudaStream_t stream, enum cudaStreamCaptureStatus *status,
    unsigned long long *id, cudaGraph_t *graph,
    const cudaGraphNode_t **dependencies, const cudaGraphEdgeData **edges,
    size_t *count)
{
    struct stream *s;
    char call[64], result[32] = "";
    cudaError_t rc = enter_on("cudaStreamGetCaptureInfo", stream, &s, call);

    (void)graph, (void)dependencies, (void)edges, (void)count;
    if (rc == cudaSuccess) {
        *status = s == NULL || s->capture == 0 ? cudaStreamCaptureStatusNone
                  : s->invalidated ? cudaStreamCaptureStatusInvalidated
                                   : cudaStreamCaptureStatusActive;
        if (id != NULL)
            *id = s != NULL ? (unsigned long long)s->capture : 0;
        snprintf(result, sizeof result, "%d id %d", (int)*status,
                 s != NULL ? s->capture : 0);
    }
    return leave(rc, call, result[0] != '\0' ? result : NULL);
}

/* ---- Controls ---- */

static void set_locked(int *setting, int value);

void timeline_on(void)
{
    set_locked(&timeline, 1);
}

int gate_new(void)
{
    int gate = 0;

    pthread_mutex_lock(&lock);
    if (gate_count < MAX_GATES) {
        gates[gate_count].open = 0;
        gates[gate_count].on_host_wait = 0;
        gate = ++gate_count;
    } else {
        violation("more than %d gates", MAX_GATES);
    }
    pthread_mutex_unlock(&lock);
    return gate;
}

/* Whether queue q can make no progress now: empty, or its head waits on
 * an event not complete yet or on a closed gate. */
static int stalled(const struct queue *q)
{
    const struct op *op = q->head;

    if (op == NULL)
        return 1;
    if (op->kind == OP_WAIT)
        return queues[op->wait_queue].done < op->wait_position;
    return op->work.gate > 0 && op->work.gate <= gate_count &&
           !gates[op->work.gate - 1].open;
}

/* Lets every stream run as far as it can before a gate opens, so what
 * runs before the gate's kernel does not depend on the scheduler. */
static void settle(void)
{
    struct timespec deadline = deadline_from_now();
    int i, busy_queue = 1;

    while (busy_queue) {
        busy_queue = 0;
        for (i = 0; i < MAX_QUEUES; i++)
            if (queues[i].used && !stalled(&queues[i]))
                busy_queue = 1;
        if (busy_queue && !wait_until(&deadline)) {
            violation("gate_open: streams still running after %d s",
                      STUCK_SECONDS);
            return;
        }
    }
}

static void set_gate(int gate, int open, int on_host_wait)
{
    pthread_mutex_lock(&lock);
    if (open)
        settle();
    if (gate > 0 && gate <= gate_count) {
        gates[gate - 1].open |= open;
        gates[gate - 1].on_host_wait |= on_host_wait;
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
}

void gate_open(int gate)
{
    set_gate(gate, 1, 0);
}

void gate_open_on_host_wait(int gate)
{
    set_gate(gate, 0, 1);
}

static void launch(long stream, void *dst, const void *src, size_t size,
                   int value, int gate)
{
    cudaStream_t handle = (cudaStream_t)(intptr_t)stream;
    struct work work = {dst, src, size, value, gate, NULL, NULL};
    struct stream *s;

    pthread_mutex_lock(&lock);
    s = is_default(handle) ? NULL : find_stream(handle);
    if (s != NULL && !s->live)
        violation("a kernel launched on destroyed stream 0x%lx", stream);
    if (!graph_launch(s, &work))
        tl_launch(handle, &work);
    pthread_mutex_unlock(&lock);
}

void launch_fill(long stream, void *dst, size_t size, int value, int gate)
{
    launch(stream, dst, NULL, size, value, gate);
}

void launch_copy(long stream, void *dst, const void *src, size_t size,
                 int gate)
{
    launch(stream, dst, src, size, 0, gate);
}

void drain(void)
{
    pthread_mutex_lock(&lock);
    drain_locked();
    pthread_mutex_unlock(&lock);
}

long stream_create(int device)
{
    long handle;

    pthread_mutex_lock(&lock);
    handle = tl_stream_create(device, 0);
    pthread_mutex_unlock(&lock);
    return handle;
}

long stream_create_blocking(int device)
{
    long handle;

    pthread_mutex_lock(&lock);
    handle = tl_stream_create(device, 1);
    pthread_mutex_unlock(&lock);
    return handle;
}

static long read_locked(const long *value)
{
    long n;

    pthread_mutex_lock(&lock);
    n = *value;
    pthread_mutex_unlock(&lock);
    return n;
}

/* ---- Stream costs (exported by name, not through the controls) ---- */

/* How long a host function holds its stream, in microseconds. */
EXPORTED void double_set_host_function_us(long us)
{
    pthread_mutex_lock(&lock);
    host_function_us = us;
    pthread_mutex_unlock(&lock);
}

/* How many items, and how many host functions, a stream holds before a
 * launch would block (0: no bound); reset restores 1024 and 56. */
EXPORTED void double_set_stream_bounds(int items, int host_functions)
{
    pthread_mutex_lock(&lock);
    items_held = items;
    host_functions_held = host_functions;
    pthread_mutex_unlock(&lock);
}

/* Launches that found their stream full (each would have blocked). */
EXPORTED long double_launches_blocked(void)
{
    return read_locked(&launches_blocked);
}

/* Host functions that have run on any stream since the reset. */
EXPORTED long double_host_functions_run(void)
{
    return read_locked(&host_functions_run);
}

int violations(void)
{
    return (int)read_locked(&violation_count);
}

const char *violation_log(void)
{
    return violation_text;
}

long calls(void)
{
    return read_locked(&call_count);
}

void add_pool_allocation(const void *base, size_t size, int device)
{
    add_pointer(base, size, DOUBLE_DEVICE, device, NULL, 1);
}

static void set_locked(int *setting, int value)
{
    pthread_mutex_lock(&lock);
    *setting = value;
    pthread_mutex_unlock(&lock);
}

void set_cuda11_set_device(int on)
{
    set_locked(&cuda11_set_device, on);
}

void set_concurrent_managed_access(int value)
{
    set_locked(&concurrent_managed, value);
}

void host_read(const void *ptr, size_t size)
{
    const struct pointer *p;

    (void)size; /* the first byte tells which allocation */
    pthread_mutex_lock(&lock);
    p = find_pointer(ptr);
    if (p != NULL && p->type == DOUBLE_MANAGED && !concurrent_managed &&
        busy > 0)
        violation("the host read managed memory %p while %d kernel(s) ran "
                  "or were queued on a device without concurrent managed "
                  "access",
                  ptr, busy);
    pthread_mutex_unlock(&lock);
}
