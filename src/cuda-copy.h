/* Private to caibridge: copies of CUDA memory for __dlpack__(copy=True)
 * (cuda-copy.c; cuda-none.c without CUDA). */
#ifndef CAIBRIDGE_CUDA_COPY_H
#define CAIBRIDGE_CUDA_COPY_H

#include <stddef.h>

#include "caibridge.h"

/* A copy's memory and what freeing it needs.  The free never names the
 * stream the copy was made on (a handle may be destroyed by then, stream 2
 * is another thread's): it goes on the legacy stream of the context the
 * memory was allocated in, which for a copy made on a handle first waits on
 * filled, an event recorded after the copy. */
typedef struct {
    void *data;
    intptr_t stream; /* where it was made and filled (never -1) */
    DLDevice device; /* the source's */
    int on_host;     /* malloc'd host memory */
    void *context;   /* the CUcontext it was allocated in; NULL: no driver */
    unsigned long long context_id; /* that context's id; 0: unknown */
    void *filled; /* a handle's copy: cudaEvent_t recorded after it */
} cai_copy_t;

/* The C-contiguous size of d's data in bytes; -1 when it overflows. */
int cai_copy_nbytes(const cai_desc_t *d, size_t *out);

/* A C-contiguous copy of d's data (CUDA memory) into *out: with to_host,
 * in malloc'd memory, the host waiting for the copy only; else in memory
 * from cudaMallocAsync, the host not waiting.  It is queued on consumer
 * (for a host copy, the legacy stream, the caller having waited for the
 * producer's fence on the host: no producer stream is named), or without
 * one (-1) on the producer's stream named just now, else the legacy one;
 * out->stream says which.  The caller has ordered that stream after the
 * producer, and keeps the source until work queued on out->stream now has
 * run.  A consumer stream of another device than the data's, or one
 * capturing a graph, is refused (CAI_EUNSUPPORTED). */
int cai_cuda_copy(const cai_desc_t *d, intptr_t consumer, int to_host,
                  cai_copy_t *out, cai_error_t *err);

/* The host waits for the copy's stream (in the copy's context): after a
 * failure to keep its source, before the source goes. */
int cai_cuda_copy_wait(const cai_copy_t *copy, cai_error_t *err);

/* Frees a copy: cudaFreeAsync on the legacy stream of the context it was
 * allocated in (after filled, for a handle's copy); nothing when that
 * context has ended, which took the memory with it; free() for a host
 * copy. */
int cai_cuda_copy_free(const cai_copy_t *copy, cai_error_t *err);

#endif
