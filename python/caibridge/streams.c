/*
 * Streams: the consumer-stream rules of __dlpack__ and the ordering of the
 * consumer's stream after the producer's (CAI v3, "Synchronization"),
 * which the core does with an event and no host block.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <pthread.h>

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
                         "only None is valid there", (Py_ssize_t)s);
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
                     "stream handle", (Py_ssize_t)s);
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

    if (arg != NULL && arg != Py_None &&
        read_stream(st, arg, &given, &s) != 0)
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
#define WITHOUT_INTERPRETER(rc, call)                                         \
    do {                                                                       \
        Py_BEGIN_ALLOW_THREADS                                                 \
        (rc) = (call);                                                         \
        Py_END_ALLOW_THREADS                                                   \
    } while (0)

/* Makes the consumer's stream wait for the producer's unless ordering is
 * off or there is nothing to order. */
int order_streams(cai_state *st, const cai_desc_t *d, intptr_t consumer,
                  int sync)
{
    cai_error_t err;
    int rc;

    if (!sync || !st->sync_enabled || consumer == CAI_STREAM_NO_SYNC ||
        !d->has_stream || !is_cuda_device(d->device.device_type))
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
    if (!sync || !st->sync_enabled || !d->has_stream ||
        !is_cuda_device(d->device.device_type))
        return 0;
    if (cai_fence_record(d, out, &err) != 0) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

int view_order(cai_state *st, const DLPackViewObject *v, intptr_t consumer)
{
    cai_error_t err;
    int rc;

    if (v->fence == NULL || consumer == CAI_STREAM_NO_SYNC)
        return 0;
    WITHOUT_INTERPRETER(rc, cai_fence_wait(v->fence, consumer, &err));
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

/*
 * The reverse edge (CAI v3: no work may take place on the producer's
 * stream until the consumer's work on the data is done): the tensor's
 * owner is wrapped so that its release first makes the producer's stream
 * wait for the consumer's.  The fence is the view's, alive until the
 * wrapped owner (which holds the view) is released.  A deleter cannot
 * raise, so a CUDA failure there goes unreported; a per-thread stream (2)
 * named by a consumer on another thread than the release's has no handle
 * there, and is left unordered.
 */
typedef struct {
    void *owner;
    cai_release_fn release;
    const cai_fence_t *fence;
    intptr_t consumer;
    pthread_t thread;
} edge;

static void release_edge(void *p)
{
    edge *e = p;
    cai_error_t err;
    /* Released from Python (a capsule or view dying), the thread lets go
     * of the interpreter while the release may wait on the host; not while
     * finalizing, when a thread that lets go may never get it back. */
    PyThreadState *here = cai_is_finalizing() ? NULL : attached_here();

    if (e->consumer != CAI_STREAM_PER_THREAD ||
        pthread_equal(e->thread, pthread_self())) {
        if (here != NULL)
            PyEval_SaveThread();
        if (cai_fence_release(e->fence, e->consumer, &err) != 0) {
            /* Nothing to report it to: the deleter returns void. */
        }
        if (here != NULL)
            PyEval_RestoreThread(here);
    }
    e->release(e->owner);
    PyMem_RawFree(e);
}

/* Wraps *owner and *release; -1 without memory (both untouched). */
int edge_owner(const cai_fence_t *fence, intptr_t consumer, void **owner,
               cai_release_fn *release)
{
    edge *e = PyMem_RawMalloc(sizeof *e);

    if (e == NULL)
        return -1;
    e->owner = *owner;
    e->release = *release;
    e->fence = fence;
    e->consumer = consumer;
    e->thread = pthread_self();
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
