/*
 * The release waiter: a thread of the module's own that lets producers go
 * once their consumer's work is done, with no further call into caibridge
 * and nothing on the consumer's stream.  It asks the driver about the
 * oldest pending release of each stream (cai_release_ready: no context,
 * no interpreter) and sleeps in between, briefly at first and longer while
 * the work runs, at most MAX_PAUSE_NS; only when one has completed does it
 * take the interpreter and poll, which drops the producers.
 *
 * Process-wide, as the pending releases are: the main interpreter's module
 * starts it at the first pending release and stops it at that
 * interpreter's exit, before finalization; other interpreters' modules
 * leave it alone.  A forked child starts none (its releases are the
 * parent's).
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define MIN_PAUSE_NS 50000L   /* a short kernel is often done by then */
#define MAX_PAUSE_NS 1000000L /* the longest a done release waits */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Timed waits on it count on the monotonic clock (waiter_init): a step
 * back of the wall clock never stalls the waiter. */
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static int running; /* the thread exists */
static int closed;  /* the main interpreter is exiting, or a forked child */
static int busy;    /* the thread asks CUDA, or holds or waits for the
                       interpreter: exit and pause wait for it */
static int paused;  /* tests: no thread, polls at calls only */

/* Waits on changed for at most ns (lock held). */
static void sleep_locked(long ns)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_nsec += ns;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    (void)pthread_cond_timedwait(&changed, &lock, &t);
}

static void *waiter(void *unused)
{
    long pause = MIN_PAUSE_NS;
    PyGILState_STATE gil;

    (void)unused;
    cai_release_mark_waiter();
    pthread_mutex_lock(&lock);
    for (;;) {
        /* Nothing to learn without the driver's query: no wake-ups. */
        while (!closed && (paused || cai_release_pending_count() == 0 ||
                           !cai_release_watchable())) {
            pthread_cond_wait(&changed, &lock);
            pause = MIN_PAUSE_NS;
        }
        if (closed)
            break;
        busy = 1;
        pthread_mutex_unlock(&lock);
        if (cai_release_ready() > 0) {
            gil = PyGILState_Ensure();
            poll_releases();
            PyGILState_Release(gil);
            pthread_mutex_lock(&lock);
            pause = MIN_PAUSE_NS;
        } else {
            pthread_mutex_lock(&lock);
            pause = pause * 2 > MAX_PAUSE_NS ? MAX_PAUSE_NS : pause * 2;
        }
        busy = 0;
        pthread_cond_broadcast(&changed);
        if (!closed && !paused && cai_release_pending_count() != 0)
            sleep_locked(pause);
    }
    running = 0;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* changed, made anew, its timed waits on the monotonic clock. */
static void make_changed(void)
{
    pthread_condattr_t attr;

    if (pthread_condattr_init(&attr) == 0) {
        if (pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0)
            (void)pthread_cond_init(&changed, &attr);
        pthread_condattr_destroy(&attr);
    }
}

/* The lock is held across fork, so the child's copy is whole; the child
 * has no waiter and starts none.  Its condition variable is made anew: the
 * waiter may have been inside a timed wait at fork, holding the variable's
 * own internal lock (a timed-out wait takes it without the mutex), and a
 * broadcast in the child (at its exit) would wait for that lock forever. */
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
    running = 0;
    busy = 0;
    closed = 1;
    make_changed();
    pthread_mutex_unlock(&lock);
}

/* Also makes changed's timed waits monotonic, before any thread uses it. */
static void watch_fork(void)
{
    make_changed();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* The core's waker: a release started waiting (any thread, no lock of the
 * core held).  Never blocks: a thread that cannot be started leaves the
 * releases to the polls at calls. */
static void wake(void)
{
    pthread_attr_t attr;
    pthread_t thread;

    pthread_mutex_lock(&lock);
    if (!closed && !running && !paused && cai_release_watchable() &&
        pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        running = pthread_create(&thread, &attr, waiter, NULL) == 0;
        pthread_attr_destroy(&attr);
    }
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

int waiter_init(void)
{
    if (PyInterpreterState_Get() != PyInterpreterState_Main())
        return 0;
    pthread_once(&fork_once, watch_fork);
    cai_release_set_waker(wake);
    return 0;
}

/* Sets *flag to value, then waits for the thread's work in progress to
 * end, with the interpreter let go (its poll may need it). */
static void set_and_settle(int *flag, int value)
{
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&lock);
    *flag = value;
    pthread_cond_broadcast(&changed);
    while (busy)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    Py_END_ALLOW_THREADS
}

/* At the main interpreter's exit (the GIL held): the waiter asks and polls
 * no more once this returns, and never takes the interpreter again. */
void waiter_close(void)
{
    if (PyInterpreterState_Get() == PyInterpreterState_Main())
        set_and_settle(&closed, 1);
}

/* Tests that count CUDA calls hold the waiter still (on nonzero): no call
 * of its own is made once this returns, until it is let go again. */
void waiter_pause(int on)
{
    set_and_settle(&paused, on != 0);
    if (!on && cai_release_pending_count() != 0)
        wake();
}

/* Whether the thread runs now (for the tests). */
int waiter_running(void)
{
    int r;

    pthread_mutex_lock(&lock);
    r = running;
    pthread_mutex_unlock(&lock);
    return r;
}
