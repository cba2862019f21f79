/* Private to caibridge: copies of CUDA memory for __dlpack__(copy=True)
 * (cuda-copy.c; cuda-none.c without CUDA). */
#ifndef CAIBRIDGE_CUDA_COPY_H
#define CAIBRIDGE_CUDA_COPY_H

#include <stddef.h>

#include "caibridge.h"

/* A copy's memory and what freeing it needs. */
typedef struct {
    void *data;
    intptr_t stream; /* where it was made and filled */
    DLDevice device; /* the source's */
    int on_host;     /* malloc'd host memory */
} cai_copy_t;

/* The C-contiguous size of d's data in bytes; -1 when it overflows. */
int cai_copy_nbytes(const cai_desc_t *d, size_t *out);

/* A C-contiguous copy of d's data (CUDA memory) into *out: with to_host,
 * in malloc'd memory, the host waiting for the copy only; else in memory
 * from cudaMallocAsync on the consumer's stream (without one, the
 * producer's, else the legacy stream), the copy queued there and the host
 * not waiting.  The caller has ordered that stream after the producer. */
int cai_cuda_copy(const cai_desc_t *d, intptr_t consumer, int to_host,
                  cai_copy_t *out, cai_error_t *err);

/* Frees a copy: cudaFreeAsync on its stream (the legacy one for stream 2,
 * which names the calling thread's), or free() for a host copy. */
int cai_cuda_copy_free(const cai_copy_t *copy, cai_error_t *err);

#endif
