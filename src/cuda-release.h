/* Private to caibridge: what the Python module needs of the CUDA core
 * beyond the public API (settings it reports, pending releases). */
#ifndef CAIBRIDGE_CUDA_RELEASE_H
#define CAIBRIDGE_CUDA_RELEASE_H

#include "caibridge.h"

/* Largest CAIBRIDGE_EVENT_POOL; larger values are clamped to it. */
#define CAI_EVENT_POOL_MAX 8

/* Reads a CAIBRIDGE_EVENT_POOL value strictly: decimal digits only (no
 * sign, base prefix, exponent or spaces).  0 with *size set (clamped to
 * CAI_EVENT_POOL_MAX); -1 when not understood (*size is then the
 * default). */
int cai_event_pool_parse(const char *value, int *size);

/* Where a consumer's default stream (1 or 2) was when it waited at
 * hand-over: the context it named then, and that context's id (ids are
 * never reused, so a context ended since is told apart).  Its release
 * records there, whichever context is current on the releasing thread. */
typedef struct {
    void *context;         /* a CUcontext; NULL when not known */
    unsigned long long id; /* 0: not known (no event pool) */
} cai_consumer_at;

/* cai_fence_wait, noting in *at where a default consumer stream was. */
int cai_fence_wait_at(const cai_fence_t *fence, intptr_t consumer_stream,
                      cai_consumer_at *at, cai_error_t *err);

/* cai_fence_wait_once, noting in *at where a default consumer stream was
 * (cuda-batch.c); and whether fence has more than one owner. */
int cai_fence_wait_once_at(const cai_fence_t *fence, intptr_t consumer_stream,
                           cai_consumer_at *at, cai_error_t *err);
int cai_fence_is_shared(const cai_fence_t *fence);

/* cai_fence_release_owner for a consumer stream noted by
 * cai_fence_wait_at (at may be NULL: the rule of the public call). */
int cai_fence_release_owner_at(const cai_fence_t *fence,
                               intptr_t consumer_stream,
                               const cai_consumer_at *at, unsigned flags,
                               void *owner, cai_release_fn release,
                               cai_error_t *err);

/* cai_cuda_locate of desc->data into desc->device, then, when order is
 * set, desc's stream has something to order and the data is memory of
 * CUDA, cai_fence_record into *out (NULL otherwise): one CUDA operation,
 * so one look at the caller's context (stream.c). */
int cai_locate_fence(cai_desc_t *desc, int order, cai_fence_t **out,
                     cai_error_t *err);

/* The release machinery, with or without a fence: records an event on
 * stream now (for a default stream in the context at notes, else the one
 * that holds device's data; a handle in its own) and keeps owner until that
 * event has completed; release(owner) runs then, at a poll or by the
 * waiter.  stream must exist now.  With CAI_RELEASE_BLOCK the host waits
 * instead and release runs before this returns.  stream -1, a failure or
 * nothing recorded: release runs at once (the status says why), after the
 * host has waited for a default stream whose record failed (its work may
 * still run). */
/* cai_release_owner_on's flag (never public): where the host would have
 * to wait (no memory to keep the release, or a failed record on a default
 * stream, whose work may still run), it returns 1 instead, with owner not
 * released, so that the caller can let go of its own locks (the GIL) and
 * call again with CAI_RELEASE_BLOCK. */
#define CAI_RELEASE_WAIT_LATER 0x100u

int cai_release_owner_on(intptr_t stream, DLDevice device,
                         const cai_consumer_at *at, unsigned flags,
                         void *owner, cai_release_fn release,
                         cai_error_t *err);

/* Releases whose consumer's work has not finished yet (cuda-pending.c). */
long cai_release_pending_count(void);

/* fn is called, on the releasing thread and with no lock held, each time a
 * release starts to wait for its consumer, so that the caller can have a
 * thread of its own watch for it (NULL: none).  fn must not block. */
void cai_release_set_waker(void (*fn)(void));

/* For that thread: how many streams' oldest pending release has completed
 * since the last poll, found without a context, without touching the
 * runtime's last error and without running any release (so with no
 * interpreter lock); then cai_release_poll lets them go.  0 in a forked
 * child, and when the driver has no cuEventQuery (polls at calls only). */
int cai_release_ready(void);

/* Whether cai_release_ready can ever find a release done: 0 without the
 * driver's cuEventQuery and in a forked child, where a thread watching for
 * releases would only wake up for nothing. */
int cai_release_watchable(void);

/* Marks the calling thread as the Python module's release waiter, whose
 * let-goes cai_stats counts apart from those at calls (stats.c). */
void cai_release_mark_waiter(void);

/* The driver entry points the found driver lacks, each ended by a NUL and
 * the list by another ("" when none, or no driver at all); cuda-runtime.c. */
const char *cai_cuda_driver_missing(void);

/* An identity of the calling thread that no other thread ever gets (a
 * pthread_t is reused once its thread has exited); stream.c. */
unsigned long long cai_thread_id(void);

#endif
