/*
 * Releases waiting for their consumer: the event recorded on the consumer's
 * stream at release, and the producer's owner, kept until that event has
 * completed.  Nothing but that event goes on the consumer's stream.
 *
 * The events of one stream complete in the order they were recorded, so the
 * releases are kept in one line per stream, oldest first, and a poll asks
 * only each line's oldest: while it is not done, nothing behind it is.  A
 * poll's cost grows with the streams that have releases pending (and with
 * the releases it lets go), never with how many are pending.
 *
 * Polls ask the driver (cuEventQuery), which neither reads nor sets the
 * runtime's last error, so a framework's pending error stays its own and
 * never stops a poll.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-internal.h"
#include "cuda-release.h"

#ifdef HAVE_CUDA

struct pending {
    struct cai_fence back;
    int done; /* its event completed, or its context ended */
    void *owner;
    cai_release_fn release;
    struct pending *next;
};

/* The releases recorded on one stream, oldest first. */
struct line {
    intptr_t stream;
    CUcontext context;
    unsigned long long context_id;
    unsigned long long thread; /* stream 2: the recording thread's */
    struct pending *head, *tail;
    struct line *next;
};

static struct line *lines;
static long pending_count; /* atomic reads outside the lock */
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void (*waker)(void); /* atomic */

long cai_release_pending_count(void)
{
    return __atomic_load_n(&pending_count, __ATOMIC_ACQUIRE);
}

void cai_release_set_waker(void (*fn)(void))
{
    __atomic_store_n(&waker, fn, __ATOMIC_RELEASE);
}

/* A forked child has the parent's releases but not its CUDA: they are
 * forgotten there (their events and owners are the parent's), and no poll
 * of the child ever calls CUDA.  The lock is held across fork, so the
 * child's copy of the lines is whole. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&pending_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&pending_lock);
}

static void fork_child(void)
{
    lines = NULL; /* leaked on purpose: nothing in them is the child's */
    __atomic_store_n(&pending_count, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&pending_lock);
}

static void watch_fork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* The line of back's stream (made when absent); NULL without memory.  Lock
 * held. */
static struct line *line_of(const struct cai_fence *back)
{
    unsigned long long thread =
        back->stream == CAI_STREAM_PER_THREAD ? back->thread : 0;
    struct line *l;

    for (l = lines; l != NULL; l = l->next)
        if (l->stream == back->stream && l->context == back->context &&
            l->context_id == back->context_id && l->thread == thread)
            return l;
    l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    l->stream = back->stream;
    l->context = back->context;
    l->context_id = back->context_id;
    l->thread = thread;
    l->next = lines;
    lines = l;
    return l;
}

/* Queues p behind the earlier releases of its stream; -1 without memory. */
static int add_pending(struct pending *p)
{
    struct line *l;
    void (*wake)(void);

    pthread_once(&fork_once, watch_fork);
    pthread_mutex_lock(&pending_lock);
    l = line_of(&p->back);
    if (l != NULL) {
        p->next = NULL;
        if (l->tail != NULL)
            l->tail->next = p;
        else
            l->head = p;
        l->tail = p;
        __atomic_add_fetch(&pending_count, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&pending_lock);
    if (l == NULL)
        return -1;
    wake = __atomic_load_n(&waker, __ATOMIC_ACQUIRE);
    if (wake != NULL)
        wake();
    return 0;
}

/* Whether a failed query means the consumer's work will never run: a
 * sticky launch failure (700-719: illegal address, launch failed, ...),
 * after which the context takes no more work.  Any other failure is no
 * answer. */
static int never_runs(int rc)
{
    return rc >= CUDA_ERROR_ILLEGAL_ADDRESS && rc <= CUDA_ERROR_LAUNCH_FAILED;
}

/* Asks whether p's event has completed, within op, never waiting: 1 done,
 * 0 not yet, -1 the answer is unknown (reported in op; p stays pending, to
 * be asked again, so its producer never goes early). */
static int ask(struct op *op, struct pending *p)
{
    int alive;
    int rc;

    if (p->done)
        return 1;
    if (cai_drv.event_query != NULL) {
        /* Needs no context.  A dead event answers with an error (an
         * H200's: 201), so its context is asked only then; an answer for
         * another's event that reused the handle delays, never hurries,
         * the release. */
        rc = (int)cai_drv.event_query((CUevent)p->back.event);
        if (rc == CUDA_ERROR_NOT_READY)
            return 0;
        if (rc != CUDA_SUCCESS) {
            alive = cai_fence_alive(op, &p->back);
            if (alive < 0)
                return -1;
            if (alive > 0) {
                cai_op_failed(op, "cuEventQuery", rc);
                if (!never_runs(rc))
                    return -1;
            }
        }
        p->done = 1;
        return 1;
    }
    alive = cai_fence_alive(op, &p->back);
    if (alive < 0)
        return -1;
    if (alive == 0) {
        p->done = 1; /* its work went with its context */
        return 1;
    }
    if (!op->have_saved)
        (void)cai_ctx_save(op);
    cai_enter_fence_context(op, &p->back);
    rc = cai_rt.event_query(p->back.event);
    /* "Not ready" is an answer, no one's error. */
    if (rc == cudaErrorNotReady) {
        cai_rt.get_last_error();
        return 0;
    }
    if (rc != cudaSuccess) {
        cai_op_failed(op, "cudaEventQuery", rc);
        /* A sticky error: the consumer's work will never run, so its
         * release goes; any other is no answer. */
        if (!never_runs(rc))
            return -1;
    }
    p->done = 1;
    return 1;
}

/* The host waits, with no lock held, for the newest release of each line
 * there was when it looked (the events of a line complete in order, so
 * the others are done then too); a take_done that does not wait then finds
 * them done.  A line's newest may be let go and its event pooled or
 * destroyed meanwhile: a wait on a handle reused since only waits longer,
 * a failed one is ignored, and the query after tells. */
static void wait_for_lines(struct op *op)
{
    struct cai_fence tails[64];
    struct line *l;
    int n = 0, i;

    pthread_mutex_lock(&pending_lock);
    for (l = lines; l != NULL && n < 64; l = l->next)
        if (l->tail != NULL && !l->tail->done)
            tails[n++] = l->tail->back;
    pthread_mutex_unlock(&pending_lock);
    for (i = 0; i < n; i++) {
        if (cai_fence_alive(op, &tails[i]) <= 0)
            continue;
        if (!op->have_saved)
            (void)cai_ctx_save(op);
        cai_enter_fence_context(op, &tails[i]);
        (void)cai_host_wait_event(tails[i].event);
    }
}

/* Takes the releases whose event has completed off their lines, within
 * op, oldest first; returns them.  wait: the host first waits for them,
 * outside the lock (wait_for_lines), so no thread that polls, releases or
 * forks is held behind a host wait. */
static struct pending *take_done(struct op *op, int wait)
{
    struct pending *done = NULL, **end = &done, *p;
    struct line **at, *l;
    cudaError_t peeked;

    if (cai_release_pending_count() == 0)
        return NULL;
    /* Without the driver's query a poll would replace an error the
     * framework has pending (the runtime keeps only the latest): it waits
     * for a later call. */
    if (!wait && cai_drv.event_query == NULL) {
        peeked = cai_rt.peek_at_last_error();
        if (peeked != cudaSuccess && peeked != cudaErrorNotReady)
            return NULL;
    }
    if (wait)
        wait_for_lines(op);
    pthread_mutex_lock(&pending_lock);
    for (at = &lines; (l = *at) != NULL;) {
        while ((p = l->head) != NULL && ask(op, p) == 1) {
            l->head = p->next;
            p->next = NULL;
            *end = p;
            end = &p->next;
            __atomic_sub_fetch(&pending_count, 1, __ATOMIC_RELEASE);
        }
        if (l->head == NULL) {
            *at = l->next;
            free(l);
        } else {
            at = &l->next;
        }
    }
    pthread_mutex_unlock(&pending_lock);
    return done;
}

/* Ends op (its status in *status) with done's events destroyed or pooled,
 * then runs their owners' releases, after the caller's context is back and
 * outside the lock: a release callback may call caibridge again. */
static void run_done(struct op *op, struct pending *done, int *status,
                     const char *whose, const char *refusal, cai_error_t *err)
{
    struct pending *p;

    /* A poll that found nothing done made no call but its queries. */
    if (done != NULL && !op->have_saved && op->call == NULL)
        (void)cai_ctx_save(op);
    for (p = done; p != NULL; p = p->next)
        cai_destroy_in(op, &p->back);
    *status = cai_op_finish(op, whose, refusal, err);
    while ((p = done) != NULL) {
        done = p->next;
        cai_count_let_go(p->done);
        CAI_MARK(p->done ? "release let go" : NULL, p->back.stream, 0, 0);
        if (p->release != NULL)
            p->release(p->owner);
        free(p);
    }
}

/* cai_op_finish after a poll within op (its context and ids reused): the
 * releases found done run after the restore. */
static int finish_polling(struct op *op, const char *whose,
                          const char *refusal, cai_error_t *err)
{
    int status;

    run_done(op, op->call == NULL ? take_done(op, 0) : NULL, &status, whose,
             refusal, err);
    return status;
}

int cai_release_watchable(void)
{
    return cai_drv.event_query != NULL && !cai_forked_after_load;
}

int cai_release_ready(void)
{
    struct op op;
    struct line *l;
    int ready = 0;

    /* Only the driver's query leaves this thread's last error alone, and
     * nothing is asked in a forked child. */
    if (cai_release_pending_count() == 0 || cai_drv.event_query == NULL ||
        cai_forked_after_load)
        return 0;
    memset(&op, 0, sizeof op);
    op.field = "stream";
    pthread_mutex_lock(&pending_lock);
    for (l = lines; l != NULL; l = l->next)
        ready += l->head != NULL && ask(&op, l->head) == 1;
    pthread_mutex_unlock(&pending_lock);
    return ready;
}

/* The context a consumer's default stream was noted in at hand-over
 * (*context NULL when none was noted); 1 when it has ended since, and the
 * consumer's work with it.  When the driver cannot tell, the context is
 * taken as alive: the release still records there, never lets the
 * producer go early. */
static int noted_context(struct op *op, const cai_consumer_at *at,
                         CUcontext *context)
{
    unsigned long long id = 0;
    CUresult rc;

    *context = NULL;
    if (at == NULL || at->context == NULL)
        return 0;
    if (at->id != 0) {
        rc = cai_context_id_try(op, (CUcontext)at->context, &id);
        if ((rc == CUDA_SUCCESS && id != at->id) ||
            rc == CUDA_ERROR_CONTEXT_IS_DESTROYED ||
            rc == CUDA_ERROR_DEINITIALIZED)
            return 1;
    }
    *context = (CUcontext)at->context;
    return 0;
}

int cai_fence_release_owner(const cai_fence_t *fence, intptr_t consumer_stream,
                            unsigned flags, void *owner,
                            cai_release_fn release, cai_error_t *err)
{
    if (CAI_UNLIKELY(flags & ~CAI_RELEASE_OPTIONS_KNOWN)) {
        CAI_COUNT(releases_now, 1);
        if (release != NULL)
            release(owner);
        return cai_unknown_bits(err, "options",
                                flags & ~CAI_RELEASE_OPTIONS_KNOWN);
    }
    return cai_fence_release_owner_at(fence, consumer_stream, NULL, flags,
                                      owner, release, err);
}

int cai_fence_release_owner_at(const cai_fence_t *fence,
                               intptr_t consumer_stream,
                               const cai_consumer_at *at, unsigned flags,
                               void *owner, cai_release_fn release,
                               cai_error_t *err)
{
    DLDevice unknown = {(DLDeviceType)0, 0};

    /* No fence (the producer had nothing to order) still has a consumer
     * whose work reads the data: the edge depends on its stream alone. */
    return cai_release_owner_on(consumer_stream,
                                fence != NULL ? fence->device : unknown, at,
                                flags, owner, release, err);
}

int cai_release_owner_on(intptr_t stream, DLDevice device,
                         const cai_consumer_at *at, unsigned flags,
                         void *owner, cai_release_fn release, cai_error_t *err)
{
    struct pending *p = NULL;
    struct cai_fence back;
    const char *refusal = NULL;
    CUcontext noted;
    struct op op;
    int rc = cai_check_stream_value(stream, "consumer ", err), later = 0;

    noted = NULL;
    if (rc == 0 && stream != CAI_STREAM_NO_SYNC)
        rc = cai_op_begin(&op, "stream", err);
    else if (rc == 0)
        rc = 1; /* no stream, nothing to wait for */
    if (rc != 0) {
        CAI_COUNT(releases_now, 1);
        if (release != NULL)
            release(owner);
        return rc > 0 ? cai_ok(err) : rc;
    }
    memset(&back, 0, sizeof back);
    if (cai_ctx_save(&op) == 0 && noted_context(&op, at, &noted) == 0 &&
        cai_release_record(&op, device, stream, noted != NULL ? &noted : NULL,
                           &back, &refusal) == 0 &&
        back.event != NULL) {
        if (flags & CAI_RELEASE_BLOCK) {
            cai_op_failed(&op, "cudaEventSynchronize",
                          cai_host_wait_event(back.event));
        } else if ((p = malloc(sizeof *p)) != NULL) {
            memset(p, 0, sizeof *p);
            p->back = back;
            p->owner = owner;
            p->release = release;
            if (add_pending(p) == 0) {
                back.event = NULL;
                CAI_COUNT(releases_deferred, 1);
                CAI_MARK("release deferred", stream, 0, 0);
            } else {
                free(p);
                p = NULL;
            }
        }
        if (back.event != NULL && !(flags & CAI_RELEASE_BLOCK)) {
            /* No memory to keep it: the host waits instead. */
            if (flags & CAI_RELEASE_WAIT_LATER)
                later = 1;
            else
                cai_op_failed(&op, "cudaEventSynchronize",
                              cai_host_wait_event(back.event));
        }
    } else if (op.call != NULL && refusal == NULL &&
               cai_is_default_stream(stream)) {
        /* Nothing recorded, yet the consumer's work may still run: the
         * host waits for its stream rather than drop the owner early. */
        if (!(flags & CAI_RELEASE_BLOCK) && (flags & CAI_RELEASE_WAIT_LATER))
            later = 1;
        else
            cai_host_wait_stream_in(&op, stream, device,
                                    noted != NULL ? &noted : NULL);
    }
    cai_destroy_in(&op, &back);
    if (later) {
        /* The caller waits, owner still its own (a failure is in err). */
        (void)cai_op_finish(&op, "consumer's", refusal, err);
        return 1;
    }
    CAI_COUNT(releases_now, p == NULL);
    if (p == NULL && release != NULL) {
        /* Nothing to wait for (or a failure): after the restore. */
        p = malloc(sizeof *p);
        if (p == NULL) {
            rc = cai_op_finish(&op, "consumer's", refusal, err);
            release(owner);
            return rc;
        }
        memset(p, 0, sizeof *p);
        p->owner = owner;
        p->release = release;
        run_done(&op, p, &rc, "consumer's", refusal, err);
        return rc;
    }
    /* The first poll, in this same operation: the oldest releases of each
     * stream (this one is often done already) and no more. */
    return finish_polling(&op, "consumer's", refusal, err);
}

int cai_release_poll(int wait, cai_error_t *err)
{
    struct op op;
    int status;

    if (cai_release_pending_count() == 0)
        return cai_ok(err);
    status = cai_op_begin(&op, "stream", err);
    if (status != 0)
        return status;
    /* A failed query is reported, but its release goes ahead: a sticky
     * error means the consumer's work will never run.  The caller's
     * context is looked at only when something is done (run_done). */
    run_done(&op, take_done(&op, wait), &status, "consumer's", NULL, err);
    return status;
}

#endif /* HAVE_CUDA */
