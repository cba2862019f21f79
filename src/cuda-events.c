/*
 * Events kept per context for the next hand-over: once warm, a hand-over
 * records and waits, and creates and destroys no event.  Reusing an event
 * is safe: a wait or host wait already queued refers to the record it saw,
 * not to a later one.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>

#include "cuda-internal.h"

#ifdef HAVE_CUDA

#define POOL_CONTEXTS 8
#define POOL_EVENTS 8

static struct pool {
    CUcontext context;
    int count;
    cudaEvent_t events[POOL_EVENTS];
} pools[POOL_CONTEXTS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t limit_once = PTHREAD_ONCE_INIT;
static int limit = POOL_EVENTS;

/* CAIBRIDGE_EVENT_POOL=0 turns the pool off (an event per hand-over, as
 * tools that count events expect); a smaller number keeps fewer. */
static void read_limit(void)
{
    const char *value = getenv("CAIBRIDGE_EVENT_POOL");

    if (value != NULL && value[0] != '\0') {
        limit = atoi(value);
        if (limit < 0)
            limit = 0;
        if (limit > POOL_EVENTS)
            limit = POOL_EVENTS;
    }
}

static struct pool *pool_of(CUcontext context, int make)
{
    int i;

    for (i = 0; i < POOL_CONTEXTS; i++)
        if (pools[i].context == context && (pools[i].count > 0 || make))
            return &pools[i];
    for (i = 0; make && i < POOL_CONTEXTS; i++)
        if (pools[i].count == 0) {
            pools[i].context = context;
            return &pools[i];
        }
    return NULL;
}

int cai_event_take(struct op *op, const struct cai_fence *fence,
                   cudaEvent_t *event)
{
    struct pool *p;

    *event = NULL;
    pthread_once(&limit_once, read_limit);
    if (fence->have_context && limit > 0 && !cai_forked_after_load) {
        pthread_mutex_lock(&pool_lock);
        p = pool_of(fence->context, 0);
        if (p != NULL)
            *event = p->events[--p->count];
        pthread_mutex_unlock(&pool_lock);
        if (*event != NULL)
            return 1;
    }
    return cai_op_failed(op, "cudaEventCreateWithFlags",
                         cai_rt.event_create_with_flags(
                             event, cudaEventDisableTiming))
               ? -1
               : 0;
}

int cai_event_give(const struct cai_fence *fence)
{
    struct pool *p;
    int kept = 0;

    /* A graph may name a captured event, or one waited on from a capture,
     * at every launch: those are never reused. */
    if (!fence->have_context || fence->captured || fence->external ||
        limit == 0 || cai_forked_after_load)
        return 0;
    pthread_mutex_lock(&pool_lock);
    p = pool_of(fence->context, 1);
    if (p != NULL && p->count < limit) {
        p->events[p->count++] = fence->event;
        kept = 1;
    }
    pthread_mutex_unlock(&pool_lock);
    return kept;
}

void cai_event_forget(CUcontext context)
{
    struct pool *p;

    /* The context was destroyed and its handle reused (cudaDeviceReset):
     * its events went with it. */
    pthread_mutex_lock(&pool_lock);
    p = pool_of(context, 0);
    if (p != NULL)
        p->count = 0;
    pthread_mutex_unlock(&pool_lock);
}

#endif /* HAVE_CUDA */
