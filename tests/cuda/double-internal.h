/* Private to the runtime double's files (cudart-double.c, timeline.c,
 * double-graph.c): its tables, the lock that guards them, and the helpers
 * the entry points share. */
#ifndef CAI_DOUBLE_INTERNAL_H
#define CAI_DOUBLE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cudart-double.h"

/* Shared between the double's files only: hidden, so no name here can be
 * bound to a same-named symbol of the program that loads the double. */
#pragma GCC visibility push(hidden)

#define MAX_EVENTS 16384
#define MAX_POINTERS 256
#define MAX_FAILURES 8
#define MAX_STREAMS 64
#define MAX_CONTEXTS (DOUBLE_DEVICE_COUNT + 8)

struct context {
    int made;
    int device;
    int primary;
    int number;    /* Cn for other contexts */
    int destroyed; /* a cuCtxDestroy'd context: its slot is never reused */
    int refs;      /* primary: cuDevicePrimaryCtxRetain's count */
    int held;      /* primary: the runtime uses it (never released) */
    unsigned long long id; /* cuCtxGetId's: new for each incarnation */
};

struct event {
    int live;
    int number; /* evN in the log */
    struct context *context;
    int captured; /* the capture id it was last recorded in, or 0 */
    int host_waits;
    int orphaned; /* dead because its context was destroyed or reset */
    /* On the timeline: the queue and position of its last record (queue
     * -1: never recorded there, so complete). */
    int queue;
    long position;
};

struct stream {
    long handle;
    int live;
    struct context *context; /* NULL: whatever is current */
    int capture;             /* the capture id, 0 when not capturing */
    int invalidated;
    int joined;   /* joined a capture through a wait, never joined back */
    int ended;    /* the id of the capture last ended on it */
    int orphaned; /* dead because its context was destroyed or reset */
    int blocking; /* synchronizes with the legacy stream (cudaStreamCreate's
                     default); test streams are non-blocking unless made so */
    unsigned long long id; /* cuStreamGetId's: never reused */
};

unsigned long long next_stream_id(void);

struct pointer {
    const char *base;
    size_t size;
    int type, device;
    const void *host_alias;
    int pool; /* from a stream-ordered pool: no context */
};

/* A "kernel": once its gate (0: none) is open, fills size bytes at dst
 * with value, or copies them from src, or calls fn(arg) instead.  fn is a
 * host function unless device is set: the double's own device work (a
 * copy piece, a free) done through fn, which holds no host thread. */
struct work {
    void *dst;
    const void *src;
    size_t size;
    int value, gate;
    void (*fn)(void *);
    void *arg;
    int device;
};

static inline int host_function(const struct work *w)
{
    return w->fn != NULL && !w->device;
}

/* Every table is guarded by lock; per-thread state is thread-local. */
extern pthread_mutex_t lock;
extern struct context contexts[MAX_CONTEXTS];
extern struct event events[MAX_EVENTS];
extern struct stream streams[MAX_STREAMS];
extern int stream_count;
extern struct pointer pointers[MAX_POINTERS];
extern int pointer_count;
extern int concurrent_managed, cuda11_set_device;
extern long call_count;
extern __thread struct context *current_ctx;
extern __thread int runtime_device;
extern __thread int set_device_pending;

const char *stream_text(cudaStream_t stream, char buf[32]);
const char *context_text(const struct context *c, char buf[16]);
const char *event_text(cudaEvent_t handle, char buf[32]);
struct context *primary(int device);
struct context *primary_by(int device, int runtime);
void context_dies(struct context *c);
struct context *known_context(const void *handle);
struct context *need_context(void);
struct stream *find_stream(cudaStream_t handle);
int is_default(cudaStream_t stream);
cudaError_t resolve(cudaStream_t stream, struct context **ctx,
                    struct stream **entry);
struct event *live_event(cudaEvent_t handle);
struct event *need_event(cudaEvent_t handle, cudaError_t *rc);
cudaError_t unsafe_during_capture(void);
cudaError_t legacy_during_capture(cudaStream_t stream, struct context *ctx,
                                  int use);
cudaError_t enter(const char *call);
cudaError_t leave(cudaError_t rc, const char *call, const char *result);
struct pointer *find_pointer(const void *ptr);
void add_pointer(const void *base, size_t size, int type, int device,
                 const void *host_alias, int pool);

/* timeline.c: all called with lock held. */
extern int timeline;
void violation(const char *fmt, ...);
int stream_device(cudaStream_t stream);
void tl_record(struct event *e, cudaStream_t stream);
void tl_wait(cudaStream_t stream, const struct event *e);
void tl_host_wait_event(const struct event *e);
int tl_event_done(const struct event *e);
void tl_host_wait_stream(cudaStream_t stream);
void tl_launch(cudaStream_t stream, const struct work *work);
void tl_reset(void);
void tl_drain(void);
void tl_after_fork(void);
long tl_stream_create(int device, int blocking);

/* Exported by name for the Python tests, not through the controls: the
 * stream costs (timeline.c) and clearing the log (cudart-double.c). */
#define EXPORTED __attribute__((visibility("default")))
EXPORTED void double_set_host_function_us(long us);
EXPORTED void double_set_stream_bounds(int items, int host_functions);
EXPORTED long double_launches_blocked(void);
EXPORTED long double_host_functions_run(void);
EXPORTED void double_clear_log(void);
EXPORTED void double_hold_lock_us(long us);
EXPORTED int double_lock_held(void);

/* double-graph.c: captured work, called with lock held.  tl_capture_*
 * return 1 when the stream is capturing (the work became a node). */
int graph_record(struct stream *s, struct event *e);
int graph_wait(struct stream *s, const struct event *e);
int graph_launch(struct stream *s, const struct work *work);
void graph_reset(void);

/* double-copy.c */
int live_async_allocations(void);

/* The new controls (timeline.c, double-graph.c). */
void timeline_on(void);
int gate_new(void);
void gate_open(int gate);
void gate_open_on_host_wait(int gate);
void launch_fill(long stream, void *dst, size_t size, int value, int gate);
void launch_copy(long stream, void *dst, const void *src, size_t size,
                 int gate);
void drain(void);
long stream_create(int device);
long stream_create_blocking(int device);
int violations(void);
const char *violation_log(void);
long calls(void);
void add_pool_allocation(const void *base, size_t size, int device);
void set_cuda11_set_device(int on);
void set_concurrent_managed_access(int value);
void host_read(const void *ptr, size_t size);
long instantiate(long handle);
int replay(long graph, long stream);

#pragma GCC visibility pop

#endif
