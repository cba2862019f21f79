/*
 * Events kept per context for the next hand-over: once warm, a hand-over
 * records and waits, and creates and destroys no event.  Reusing an event
 * is safe: a wait or host wait already queued refers to the record it saw,
 * not to a later one.  A context is known by its id (cuCtxGetId), never by
 * its address, which a new context may get once the old one is destroyed
 * or reset: the events of a context that is gone are never handed out.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-internal.h"
#include "cuda-release.h"

int cai_event_pool_parse(const char *value, int *size)
{
    long n = 0;
    const char *p;

    *size = CAI_EVENT_POOL_MAX;
    if (value == NULL || value[0] == '\0')
        return 0;
    for (p = value; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        /* Saturates instead of overflowing: anything larger clamps. */
        if (n <= CAI_EVENT_POOL_MAX)
            n = n * 10 + (*p - '0');
    }
    *size = n > CAI_EVENT_POOL_MAX ? CAI_EVENT_POOL_MAX : (int)n;
    return 0;
}

#ifdef HAVE_CUDA

#define POOL_CONTEXTS 8

static struct pool {
    unsigned long long context_id; /* 0: free */
    CUcontext context;
    int count;
    cudaEvent_t events[CAI_EVENT_POOL_MAX];
} pools[POOL_CONTEXTS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t limit_once = PTHREAD_ONCE_INIT;
static int limit = CAI_EVENT_POOL_MAX;

/* CAIBRIDGE_EVENT_POOL=0 turns the pool off (an event per hand-over, as
 * tools that count events expect); a smaller number keeps fewer; a value
 * not understood keeps the default (the Python module warns). */
static void read_limit(void)
{
    (void)cai_event_pool_parse(getenv("CAIBRIDGE_EVENT_POOL"), &limit);
}

static int pooling(void)
{
    pthread_once(&limit_once, read_limit);
    return limit > 0 && !cai_forked_after_load && cai_drv.ctx_get_id != NULL;
}

/* The id of context (not NULL), once per operation: the driver's status,
 * nothing recorded in op. */
int cai_context_id_try(struct op *op, CUcontext context,
                       unsigned long long *id)
{
    CUresult rc;

    if (op->id != 0 && op->id_context == context) {
        *id = op->id;
        return CUDA_SUCCESS;
    }
    *id = 0;
    rc = cai_drv.ctx_get_id(context, id);
    if (rc == CUDA_SUCCESS && *id != 0) {
        op->id_context = context;
        op->id = *id;
    }
    return rc;
}

int cai_context_id(struct op *op, CUcontext context, unsigned long long *id)
{
    *id = 0;
    if (context == NULL || !pooling())
        return 0;
    return cai_op_failed(op, "cuCtxGetId", cai_context_id_try(op, context, id))
               ? -1
               : 0;
}

unsigned long long cai_context_id_or_0(struct op *op, CUcontext context)
{
    unsigned long long id = 0;

    if (context == NULL || !pooling() ||
        cai_context_id_try(op, context, &id) != CUDA_SUCCESS)
        return 0;
    return id;
}

/* 1 when context, whose id was id, still lives (or id is 0, unknown); 0
 * when it has ended: destroyed (709, or the driver itself shut down) or its
 * handle names a newer context (a reset keeps the handle, not the id); -1
 * when the driver could not tell, failed in op.  Only an answer that says
 * "ended" lets a caller drop events or count work as done. */
int cai_context_alive(struct op *op, CUcontext context, unsigned long long id)
{
    unsigned long long now = 0;
    CUresult rc;

    if (id == 0)
        return 1;
    rc = cai_context_id_try(op, context, &now);
    if (rc == CUDA_SUCCESS)
        return now == id;
    if (rc == CUDA_ERROR_CONTEXT_IS_DESTROYED ||
        rc == CUDA_ERROR_DEINITIALIZED)
        return 0;
    cai_op_failed(op, "cuCtxGetId", rc);
    return -1;
}

/* The device of a context, by its id: ids are never reused and a context
 * never changes device, so an entry never goes stale. */
#define DEVICE_IDS 16
static struct {
    unsigned long long id; /* 0: free */
    CUdevice device;
} device_of[DEVICE_IDS];
static unsigned device_next;

/* The device of the current context (op->now, not NULL). */
int cai_context_device(struct op *op, CUdevice *device)
{
    unsigned long long id = 0;
    int i, found = 0;

    if (pooling() && cai_context_id_try(op, op->now, &id) == CUDA_SUCCESS &&
        id != 0) {
        pthread_mutex_lock(&pool_lock);
        for (i = 0; i < DEVICE_IDS && !found; i++)
            if (device_of[i].id == id) {
                *device = device_of[i].device;
                found = 1;
            }
        pthread_mutex_unlock(&pool_lock);
        if (found)
            return 0;
    }
    if (cai_op_failed(op, "cuCtxGetDevice", cai_drv.ctx_get_device(device)))
        return -1;
    if (id != 0) {
        pthread_mutex_lock(&pool_lock);
        i = (int)(device_next++ % DEVICE_IDS);
        device_of[i].id = id;
        device_of[i].device = *device;
        pthread_mutex_unlock(&pool_lock);
    }
    return 0;
}

/* Whether the pool's context may still be the one its events were made
 * in: only a clear "ended" lets its slot (and handles) go. */
static int pool_alive(const struct pool *p)
{
    unsigned long long id = 0;
    CUresult rc = cai_drv.ctx_get_id(p->context, &id);

    if (rc == CUDA_SUCCESS)
        return id == p->context_id;
    return rc != CUDA_ERROR_CONTEXT_IS_DESTROYED &&
           rc != CUDA_ERROR_DEINITIALIZED;
}

/* The pool of context id; with make, a free one (context set) when it has
 * none, taking back the slot of a context that ended when all are used
 * (its handles dropped, never destroyed). */
static struct pool *pool_of(unsigned long long id, CUcontext context, int make)
{
    int i, j;

    for (i = 0; i < POOL_CONTEXTS; i++)
        if (pools[i].context_id == id)
            return &pools[i];
    if (!make)
        return NULL;
    for (i = 0; i < POOL_CONTEXTS; i++)
        if (pools[i].count == 0)
            break;
    for (j = 0; i == POOL_CONTEXTS && j < POOL_CONTEXTS; j++)
        if (!pool_alive(&pools[j])) {
            pools[j].count = 0;
            i = j;
        }
    if (i == POOL_CONTEXTS)
        return NULL;
    pools[i].context_id = id;
    pools[i].context = context;
    return &pools[i];
}

int cai_event_take(struct op *op, const struct cai_fence *fence,
                   cudaEvent_t *event)
{
    struct pool *p;

    *event = NULL;
    if (fence->context_id != 0 && pooling()) {
        pthread_mutex_lock(&pool_lock);
        p = pool_of(fence->context_id, NULL, 0);
        if (p != NULL && p->count > 0)
            *event = p->events[--p->count];
        pthread_mutex_unlock(&pool_lock);
        if (*event != NULL)
            return 1;
    }
    return cai_op_failed(
               op, "cudaEventCreateWithFlags",
               cai_rt.event_create_with_flags(event, cudaEventDisableTiming))
               ? -1
               : 0;
}

int cai_event_give(const struct cai_fence *fence)
{
    struct pool *p;
    int kept = 0;

    /* A graph may name a captured event, or one waited on from a capture,
     * at every launch: those are never reused. */
    if (fence->context_id == 0 || fence->captured ||
        __atomic_load_n(&fence->external, __ATOMIC_ACQUIRE) || !pooling())
        return 0;
    pthread_mutex_lock(&pool_lock);
    p = pool_of(fence->context_id, fence->context, 1);
    if (p != NULL && p->count < limit) {
        p->events[p->count++] = fence->event;
        kept = 1;
    }
    pthread_mutex_unlock(&pool_lock);
    return kept;
}

int cai_event_pool_drain(struct cai_fence *fence)
{
    int i, found = 0;

    (void)pooling(); /* read the limit first, so it stays 0 below */
    pthread_mutex_lock(&pool_lock);
    limit = 0; /* nothing given back is kept from here on */
    for (i = 0; i < POOL_CONTEXTS && !found; i++) {
        if (pools[i].count == 0)
            continue;
        memset(fence, 0, sizeof *fence);
        fence->event = pools[i].events[--pools[i].count];
        fence->context = pools[i].context;
        fence->have_context = 1;
        fence->context_id = pools[i].context_id;
        found = 1;
    }
    pthread_mutex_unlock(&pool_lock);
    return found;
}

void cai_event_forget(unsigned long long context_id)
{
    struct pool *p;
    int i;

    /* The context is gone (an event of it was refused): its events went
     * with it, so their handles are dropped, never destroyed, as another
     * library may own the same handles by now. */
    pthread_mutex_lock(&pool_lock);
    p = context_id == 0 ? NULL : pool_of(context_id, NULL, 0);
    if (p != NULL) {
        for (i = 0; i < p->count; i++)
            p->events[i] = NULL;
        p->count = 0;
        p->context_id = 0;
    }
    pthread_mutex_unlock(&pool_lock);
}

#endif /* HAVE_CUDA */
