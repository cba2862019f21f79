/*
 * Streams: the consumer-stream rules of __dlpack__ and the ordering of the
 * consumer's stream after the producer's (CAI v3, "Synchronization"),
 * which the core does with an event and no host block.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include "cuda-release.h"

/*
 * The consumer-stream rules of __dlpack__ (DLPack Python spec, "stream") for
 * a stream already read (given = 0: None): host memory takes no stream at
 * all; CUDA memory takes None (the legacy default stream), -1 (no
 * ordering) or a stream handle, never 0.  Writes the stream the consumer
 * will use (CAI_STREAM_NO_SYNC for none) to *consumer.
 */
int check_stream_value(const cai_desc_t *d, int given, intptr_t s,
                       intptr_t *consumer)
{
    if (d->device.device_type == kDLCPU) {
        if (given) {
            PyErr_Format(PyExc_BufferError,
                         "stream = %zd was given for host memory (kDLCPU); "
                         "only None is valid there",
                         (Py_ssize_t)s);
            return -1;
        }
        *consumer = CAI_STREAM_NO_SYNC;
        return 0;
    }
    if (!given)
        s = CAI_STREAM_LEGACY;
    if (s == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "stream = 0 is disallowed by the DLPack and CAI "
                        "specs (ambiguous); use 1 for the legacy default "
                        "stream, 2 for the per-thread one, or -1 for none");
        return -1;
    }
    if (s < CAI_STREAM_NO_SYNC) {
        PyErr_Format(PyExc_ValueError,
                     "stream = %zd is not a stream: use None, -1, 1, 2 or a "
                     "stream handle",
                     (Py_ssize_t)s);
        return -1;
    }
    *consumer = s;
    return 0;
}

/* check_stream_value for a stream argument not read yet. */
int check_stream(cai_state *st, const cai_desc_t *d, PyObject *arg,
                 intptr_t *consumer)
{
    int given = 0;
    intptr_t s = 0;

    if (arg != NULL && arg != Py_None && read_stream(st, arg, &given, &s) != 0)
        return -1;
    return check_stream_value(d, given, s, consumer);
}

/*
 * Every ordering call may block the host: a wait on a default stream of a
 * thread with no context, a host wait, or a device wait.  The thread lets
 * go of the interpreter meanwhile (the GIL; on free-threaded builds its
 * critical sections, none of which is held on these paths), so that other
 * threads run and a host function queued on the producer's stream that
 * needs Python can finish.  Nothing here touches a Python object.
 */
/* The two macros open and close a block: kept as written. */
/* clang-format off */
#define WITHOUT_INTERPRETER(rc, call)                                         \
    do {                                                                       \
        Py_BEGIN_ALLOW_THREADS                                                 \
        (rc) = (call);                                                         \
        Py_END_ALLOW_THREADS                                                   \
    } while (0)
/* clang-format on */

/* Makes the consumer's stream wait for the producer's unless ordering is
 * off or there is nothing to order. */
int order_streams(cai_state *st, const cai_desc_t *d, intptr_t consumer,
                  int sync)
{
    cai_error_t err;
    int rc;

    if (!sync || !st->sync_enabled || consumer == CAI_STREAM_NO_SYNC ||
        !d->has_stream || !cai_is_cuda_device(d->device.device_type))
        return 0;
    WITHOUT_INTERPRETER(rc, cai_cuda_order(d, consumer, &err));
    if (rc != 0) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

/*
 * The fence of a new view: recorded on the producer's stream now, so that
 * a later hand-over, on whatever thread, waits for exactly the work queued
 * before the view was made (a per-thread stream 2 is this thread's, and a
 * stream destroyed since is no longer named).  *out is NULL when there is
 * nothing to order: no stream, host memory, or ordering turned off.
 */
int fence_at_view(cai_state *st, const cai_desc_t *d, int sync,
                  cai_fence_t **out)
{
    cai_error_t err;

    *out = NULL;
    poll_releases();
    if (!sync || !st->sync_enabled || !d->has_stream ||
        !cai_is_cuda_device(d->device.device_type))
        return 0;
    if (cai_fence_record(d, out, &err) != 0) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

int locate_fence_at_view(cai_state *st, cai_desc_t *d, int sync,
                         cai_fence_t **out)
{
    cai_error_t err;

    *out = NULL;
    if (d->device.device_type != DEVICE_LOCATED_LATER)
        return d->has_stream ? fence_at_view(st, d, sync, out) : 0;
    poll_releases();
    if (cai_locate_fence(d, sync && st->sync_enabled, out, &err) != 0) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

/* A fence shared by a batch makes each consumer stream wait once. */
static int view_wait(const cai_fence_t *fence, intptr_t consumer,
                     cai_consumer_at *at, cai_error_t *err)
{
    return cai_fence_is_shared(fence)
               ? cai_fence_wait_once_at(fence, consumer, at, err)
               : cai_fence_wait_at(fence, consumer, at, err);
}

int view_order(cai_state *st, const DLPackViewObject *v, intptr_t consumer,
               cai_consumer_at *at)
{
    cai_error_t err;
    int rc;

    at->context = NULL;
    poll_releases();
    if (v->fence == NULL || consumer == CAI_STREAM_NO_SYNC)
        return 0;
    WITHOUT_INTERPRETER(rc, view_wait(v->fence, consumer, at, &err));
    if (rc != 0) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

/* The host waits on fence (NULL: nothing to wait for). */
static int fence_host_sync(cai_state *st, const cai_fence_t *fence)
{
    cai_error_t err;
    int rc;

    if (fence == NULL)
        return 0;
    WITHOUT_INTERPRETER(rc, cai_fence_synchronize(fence, &err));
    if (rc != 0) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

int view_host_sync(cai_state *st, const DLPackViewObject *v)
{
    return fence_host_sync(st, v->fence);
}

/*
 * A CPU reader of pinned or managed memory that d describes (the one-shot
 * paths: to_dlpack, add_dlpack's __dlpack__, a CAIView's re-export or
 * array interface): the host waits for the work queued so far on d's
 * stream, through a fence taken now.  Nothing to do when ordering is off
 * or d names no stream.
 */
int cai_py_host_wait(cai_state *st, const cai_desc_t *d, int sync)
{
    cai_fence_t *fence;
    int rc;

    if (fence_at_view(st, d, sync, &fence) != 0)
        return -1;
    rc = fence_host_sync(st, fence);
    (void)cai_fence_destroy(fence, NULL);
    return rc;
}

/* Releases whose consumer has finished are run (their producers dropped)
 * at each hand-over and release, and by the waiter (waiter.c), without
 * waiting and without a CUDA call when none is pending.  A failed query cannot be reported here; its
 * owner goes all the same. */
void poll_releases(void)
{
    if (cai_release_pending_count() != 0)
        (void)cai_release_poll(0, NULL);
}

/* CAIBRIDGE_RELEASE=block (config.c): the host waits at release for the
 * consumer's work, so the producer may write in place right after.
 * Atomic: free-threaded builds may release on any thread. */
static int release_blocks;

int release_blocks_now(void)
{
    return __atomic_load_n(&release_blocks, __ATOMIC_RELAXED);
}

void set_release_blocking(int on)
{
    __atomic_store_n(&release_blocks, on, __ATOMIC_RELAXED);
}

/*
 * The reverse edge (CAI v3: no work may take place on the producer's
 * stream until the consumer's work on the data is done): the tensor's
 * owner is wrapped so that its release records an event on the consumer's
 * stream and keeps the producer until that event has completed, polled,
 * never waited on (unless CAIBRIDGE_RELEASE=block).  It depends on the
 * consumer's stream alone, never on whether the producer named one: the
 * consumer's work reads the producer's memory either way.  Only a consumer
 * stream that cannot be gone is named: 1, or 2 released on the thread
 * that took the tensor (another thread's stream 2 has no name there).  A
 * handle may have been destroyed by then, so it takes no edge: the
 * consumer orders its own work before releasing, as DLPack asks.  The
 * fence, when there is one, is the view's, alive until the wrapped owner
 * (which holds the view) is released.
 */
typedef struct {
    void *owner;
    cai_release_fn release;
    const cai_fence_t *fence; /* the view's, or NULL */
    DLDevice device;          /* the data's */
    intptr_t consumer;
    cai_consumer_at at; /* where the consumer's stream was at hand-over */
    unsigned long long thread; /* never reused, unlike a pthread_t */
} edge;

static void edge_done(void *p)
{
    edge *e = p;

    /* An owner (the view holding the fence) whose interpreter has ended
     * is left alive for good, so it would never destroy its fence: the
     * fence's event is destroyed here instead, never leaked. */
    if (e->fence != NULL && owner_left_behind(e->owner, e->release))
        (void)cai_fence_destroy((cai_fence_t *)(uintptr_t)e->fence, NULL);
    e->release(e->owner);
    PyMem_RawFree(e);
}

void release_edge(void *p)
{
    edge *e = p;
    PyThreadState *here;
    cai_error_t err;
    int rc;

    if (e->consumer == CAI_STREAM_PER_THREAD && e->thread != cai_thread_id()) {
        edge_done(e);
        return;
    }
    if (!__atomic_load_n(&release_blocks, __ATOMIC_RELAXED)) {
        /* Nothing blocks: edge_done runs now (nothing to wait for, or a
         * failure, which a deleter cannot report) or at a poll, the first
         * in this call, for this release and the earlier ones.  Where the
         * host must wait after all (a failed record, no memory), it waits
         * below, with the interpreter let go. */
        rc = cai_release_owner_on(e->consumer, e->device, &e->at,
                                  CAI_RELEASE_WAIT_LATER, e, edge_done, &err);
        if (rc != 1)
            return;
    }
    /* The host waits: the thread lets go of the interpreter meanwhile;
     * not while finalizing, when it may never get it back. */
    here = cai_is_finalizing() ? NULL : attached_here();
    if (here != NULL)
        PyEval_SaveThread();
    rc = cai_release_owner_on(e->consumer, e->device, &e->at,
                              CAI_RELEASE_BLOCK, NULL, NULL, &err);
    (void)rc;
    if (here != NULL)
        PyEval_RestoreThread(here);
    edge_done(e);
}

/* A tensor no consumer took (its capsule died unused, on a thread attached
 * to its interpreter): no work of a consumer to wait for, so the producer
 * goes at once, a plain Python owner without release_pyobject's checks. */
void edge_unused(void *p)
{
    edge *e = p;

    if (e->release == release_pyobject) {
        Py_DECREF((PyObject *)e->owner);
        PyMem_RawFree(e);
        return;
    }
    edge_done(p);
}

/* Wraps *owner and *release when consumer can be named at release (1 or
 * 2, where at says it was, NULL: not noted); -1 without memory (both
 * untouched). */
int edge_owner(const cai_fence_t *fence, DLDevice device, intptr_t consumer,
               const cai_consumer_at *at, void **owner,
               cai_release_fn *release)
{
    edge *e;

    if (consumer != CAI_STREAM_LEGACY && consumer != CAI_STREAM_PER_THREAD)
        return 0;
    e = PyMem_RawMalloc(sizeof *e);
    if (e == NULL)
        return -1;
    e->owner = *owner;
    e->release = *release;
    e->fence = fence;
    e->device = device;
    e->consumer = consumer;
    if (at != NULL) {
        e->at = *at;
    } else {
        e->at.context = NULL;
        e->at.id = 0;
    }
    e->thread = cai_thread_id();
    *owner = e;
    *release = release_edge;
    return 0;
}

/* The CAI stream to report for data made ready on consumer stream s. */
PyObject *reported_stream(int given, intptr_t s)
{
    if (!given)
        s = CAI_STREAM_LEGACY;
    if (s == CAI_STREAM_NO_SYNC)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t((Py_ssize_t)s);
}
