/* Private to the library's CUDA files: the bound runtime and driver, one
 * operation's bookkeeping, contexts, and the fence. */
#ifndef CAIBRIDGE_CUDA_INTERNAL_H
#define CAIBRIDGE_CUDA_INTERNAL_H

#include "internal.h"
#include "cuda-release.h"

static inline int cai_is_default_stream(intptr_t stream)
{
    return stream == CAI_STREAM_LEGACY || stream == CAI_STREAM_PER_THREAD;
}

/* stream.c: argument checks both builds share. */
int cai_check_stream_value(intptr_t stream, const char *whose,
                           cai_error_t *err);
int cai_consumer_waits(const cai_fence_t *fence, intptr_t consumer_stream,
                       cai_error_t *err);

/* cuda-fence.c, or cuda-none.c in a build without CUDA. */
int cai_record_fence(const cai_desc_t *producer, cai_fence_t **out,
                     cai_error_t *err);
int cai_locate_record(cai_desc_t *desc, int order, cai_fence_t **out,
                      cai_error_t *err);
int cai_wait_fence(const cai_fence_t *fence, intptr_t consumer,
                   cai_consumer_at *at, cai_error_t *err);
int cai_order_now(const cai_desc_t *producer, intptr_t consumer,
                  cai_error_t *err);
int cai_synchronize(intptr_t stream, cai_error_t *err);

#ifdef HAVE_CUDA

#include <pthread.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

/* Pointer attributes changed layout in CUDA 11.0 (memoryType and isManaged
 * were removed), so older runtimes would be misread. */
#define OLDEST_RUNTIME 11000
/* cudaEventWaitExternal, for waits inside a graph capture. */
#define EXTERNAL_WAIT_RUNTIME 11010

/* The runtime's entry points.  cudaSetDevice makes the data's device
 * current for the default streams 1 and 2 (the caller's context is put
 * back with the driver).  cudaGetLastError clears an error caibridge
 * caused and reported; cudaPeekAtLastError tells, before a poll, whether
 * a framework's error is pending.  cudaDriverGetVersion tells "no
 * driver" from "driver too old". */
struct cudart {
    cudaError_t(CUDARTAPI *pointer_get_attributes)(
        struct cudaPointerAttributes *, const void *);
    cudaError_t(CUDARTAPI *get_device)(int *);
    cudaError_t(CUDARTAPI *set_device)(int);
    cudaError_t(CUDARTAPI *device_get_attribute)(int *, enum cudaDeviceAttr,
                                                 int);
    cudaError_t(CUDARTAPI *event_create_with_flags)(cudaEvent_t *, unsigned);
    cudaError_t(CUDARTAPI *event_record)(cudaEvent_t, cudaStream_t);
    cudaError_t(CUDARTAPI *stream_wait_event)(cudaStream_t, cudaEvent_t,
                                              unsigned);
    cudaError_t(CUDARTAPI *event_synchronize)(cudaEvent_t);
    cudaError_t(CUDARTAPI *event_query)(cudaEvent_t);
    cudaError_t(CUDARTAPI *event_destroy)(cudaEvent_t);
    cudaError_t(CUDARTAPI *stream_synchronize)(cudaStream_t);
    cudaError_t(CUDARTAPI *stream_is_capturing)(
        cudaStream_t, enum cudaStreamCaptureStatus *);
    const char *(CUDARTAPI *get_error_string)(cudaError_t);
    cudaError_t(CUDARTAPI *runtime_get_version)(int *);
    cudaError_t(CUDARTAPI *driver_get_version)(int *);
    cudaError_t(CUDARTAPI *get_last_error)(void);
    cudaError_t(CUDARTAPI *peek_at_last_error)(void);
    cudaError_t(CUDARTAPI *device_synchronize)(void);
    /* Its arguments changed with 12.0 and 13.0: called through the type of
     * the loaded runtime's version (cuda-fence.c). */
    void (*stream_get_capture_info)(void);
    /* Optional: NULL when the runtime lacks them. */
    cudaError_t(CUDARTAPI *thread_exchange_capture_mode)(
        enum cudaStreamCaptureMode *);
    /* Optional, for device copies (cuda-copy.c): cudaMallocAsync and
     * cudaFreeAsync are CUDA 11.2's; NULL when the runtime lacks them. */
    cudaError_t(CUDARTAPI *malloc_async)(void **, size_t, cudaStream_t);
    cudaError_t(CUDARTAPI *free_async)(void *, cudaStream_t);
    cudaError_t(CUDARTAPI *memcpy_async)(void *, const void *, size_t,
                                         enum cudaMemcpyKind, cudaStream_t);
    cudaError_t(CUDARTAPI *memcpy_2d_async)(void *, size_t, const void *,
                                            size_t, size_t, size_t,
                                            enum cudaMemcpyKind, cudaStream_t);
};

/* The driver's entry points: the exact current context (NULL included) is
 * saved and put back, and a stream's own context found, which the runtime
 * cannot do without side effects. */
struct cudriver {
    CUresult(CUDAAPI *init)(unsigned);
    CUresult(CUDAAPI *ctx_get_current)(CUcontext *);
    CUresult(CUDAAPI *ctx_set_current)(CUcontext);
    CUresult(CUDAAPI *ctx_get_device)(CUdevice *);
    CUresult(CUDAAPI *stream_get_ctx)(CUstream, CUcontext *);
    CUresult(CUDAAPI *pointer_get_attribute)(void *, CUpointer_attribute,
                                             CUdeviceptr);
    CUresult(CUDAAPI *pointer_get_attributes)(unsigned, CUpointer_attribute *,
                                              void **, CUdeviceptr);
    CUresult(CUDAAPI *primary_ctx_get_state)(CUdevice, unsigned *, int *);
    CUresult(CUDAAPI *primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult(CUDAAPI *primary_ctx_release)(CUdevice);
    /* Optional (driver 12.0+): an id never reused, unlike a context's
     * address after cuCtxDestroy or a reset.  NULL: no event pool. */
    CUresult(CUDAAPI *ctx_get_id)(CUcontext, unsigned long long *);
    /* Optional: polls that neither read nor set the runtime's last error
     * (a framework's pending error stays its own).  NULL: the runtime's. */
    CUresult(CUDAAPI *event_query)(CUevent);
    /* Optional (driver 12.0+): a stream's id, never reused, unlike its
     * handle.  NULL: a handle is never proven the same stream. */
    CUresult(CUDAAPI *stream_get_id)(CUstream, unsigned long long *);
};

/* cuda-runtime.c: written once under pthread_once, read-only afterwards. */
extern struct cudart cai_rt;
extern struct cudriver cai_drv; /* all NULL: no driver, so no context */
extern int cai_rt_version;
/* Set in a child forked after the runtime was loaded. */
extern volatile int cai_forked_after_load;

int cai_runtime_ready(const char *field, cai_error_t *err);

/* The search (cuda-search.c) finds files; the binder (cuda-runtime.c)
 * loads them.  The search's state, under cai_runtime_lock: why the last
 * search or load failed, cut to fit an error's message. */
#define CAI_PROBLEM_SIZE sizeof(((cai_error_t *)0)->message)
extern char cai_runtime_problem[CAI_PROBLEM_SIZE];
extern pthread_mutex_t cai_runtime_lock;
void CAI_PRINTF(1, 2) cai_set_problem(const char *fmt, ...);
/* cai_shutdown: lets the loaded runtime go (dlclose); 1 when one was. */
int cai_runtime_close(void);
void cai_run_search_hook(void);

/* What the binder lends the search to try a file it found: load and bind
 * it (0, or -1 with the reason set by cai_set_problem), the versions of the
 * driver (0 when unknown) and of the runtime just bound, and unbinding it
 * again (a runtime newer than the driver is passed over). */
struct cai_binder {
    int (*load)(const char *file, int flags, const char *what);
    void (*versions)(int *driver, int *runtime);
    void (*unload)(void);
};

/* Under cai_runtime_lock: 0 with the runtime bound through binder, how it
 * was found ("CAIBRIDGE_CUDART", "already loaded", "pip wheel", "conda",
 * "system") and the file checked and loaded in path ("" when the loader
 * chose it by name); -1 with the reason in cai_runtime_problem and nothing
 * bound. */
int cai_search_runtime(const struct cai_binder *binder, const char **how,
                       char *path, size_t size);
int cai_have_driver(void);

/*
 * One caibridge operation: its first failed call, a failed restore of the
 * caller's context, and whether a runtime call failed (so set the thread's
 * last error).
 */
struct op {
    const char *field;
    const char *call;
    int rc;
    const char *restore_call;
    int restore_rc;
    int runtime_failed;
    CUcontext saved; /* the caller's context */
    CUcontext now;   /* the one current now */
    int have_saved, switched;
    int retained; /* a primary context retained, released at the restore */
    CUdevice retained_device;
    /* Without a driver (so without contexts to put back): the device. */
    int device_before, device_switched;
    /* The id of one context, asked once per operation (cuda-events.c). */
    CUcontext id_context;
    unsigned long long id;
};

/* cuda-errors.c */
int cai_op_begin(struct op *op, const char *field, cai_error_t *err);
int cai_op_failed(struct op *op, const char *call, int rc);
int cai_op_end(struct op *op, cai_error_t *err);

/* cuda-locate.c */
int cai_locate_in(struct op *op, const void *ptr, intptr_t stream,
                  DLDevice *out, cai_error_t *err);

/* cuda-context.c */
int cai_ctx_save(struct op *op);
int cai_ctx_switch(struct op *op, CUcontext target);
void cai_ctx_restore(struct op *op);
int cai_enter_stream_context(struct op *op, intptr_t stream, DLDevice device,
                             const CUcontext *known, int required, int *none);
int cai_enter_fence_context(struct op *op, const cai_fence_t *fence);
int cai_current_device(struct op *op, int *device);

/* Stream values 1 and 2 are the runtime's own handles cudaStreamLegacy and
 * cudaStreamPerThread, so they pass through unchanged; 0 never gets here. */
static inline cudaStream_t cai_stream_handle(intptr_t stream)
{
    return (cudaStream_t)stream;
}

/* Consumer streams a shared fence remembers having made wait. */
#define CAI_WAITED_MAX 4

/* A recorded event and what is needed to wait on it and release it. */
struct cai_fence {
    cudaEvent_t event;
    intptr_t stream;   /* where it was recorded */
    DLDevice device;   /* the data's */
    CUcontext context; /* the event's */
    int have_context;
    int captured;               /* recorded inside a graph capture */
    unsigned long long capture; /* that capture's id */
    int external;               /* atomic: a capture outside waited on it, so a
                           graph's node names the event and it never goes
                           back to the pool */
    unsigned long long context_id; /* cuCtxGetId's, 0: unknown */
    unsigned long long stream_id;  /* a handle's cuStreamGetId, 0: unknown */
    unsigned long long thread;     /* cai_thread_id() of the recorder */
    int refs; /* atomic: owners beyond the first (cai_fence_share) */
    /* Consumer streams already made to wait on it (cuda-batch.c), under
     * its lock: stream, its context and that context's id (1, 2), the
     * thread (2) or the stream's id (a handle). */
    struct cai_waited {
        intptr_t stream;
        CUcontext context;
        unsigned long long id, thread;
    } waited[CAI_WAITED_MAX];
    unsigned waited_count, waited_next;
};

/* cuda-events.c: the per-context pool.  take: 1 from the pool, 0 made
 * now, -1 failed (in op); give: 1 when kept (else the caller destroys). */
int cai_event_take(struct op *op, const struct cai_fence *fence,
                   cudaEvent_t *event);
int cai_event_give(const struct cai_fence *fence);
void cai_event_forget(unsigned long long context_id);
/* cai_shutdown: turns the pool off and takes one pooled event out into
 * fence (event, context and its id), 1; 0 when the pool is empty. */
int cai_event_pool_drain(struct cai_fence *fence);
int cai_context_id(struct op *op, CUcontext context, unsigned long long *id);
int cai_context_id_try(struct op *op, CUcontext context,
                       unsigned long long *id);
/* cai_context_id without failing op: 0 (unknown) without the pool or on
 * failure. */
unsigned long long cai_context_id_or_0(struct op *op, CUcontext context);
int cai_context_alive(struct op *op, CUcontext context, unsigned long long id);
int cai_context_device(struct op *op, CUdevice *device);

/* cuda-fence.c, for cuda-pending.c */
cudaError_t cai_host_wait_event(cudaEvent_t event);
int cai_fence_alive(struct op *op, const cai_fence_t *fence);
void cai_destroy_in(struct op *op, struct cai_fence *fence);
int cai_op_finish(struct op *op, const char *whose, const char *refusal,
                  cai_error_t *err);
int cai_stream_capturing(struct op *op, intptr_t stream, int *capturing);
void cai_host_wait_stream_in(struct op *op, intptr_t stream, DLDevice device,
                             const CUcontext *known);
int cai_release_record(struct op *op, DLDevice device,
                       intptr_t consumer_stream, const CUcontext *known,
                       struct cai_fence *back, const char **refusal);

#else /* !HAVE_CUDA */

/* Never made without CUDA; declared so the API links. */
struct cai_fence {
    intptr_t stream;
};

#endif /* HAVE_CUDA */

#endif
