/*
 * The double's stream-ordered allocator and copies: cudaMallocAsync gives
 * host-backed "device" memory at once (as a pool does, usable by work
 * queued after it), cudaMemcpyAsync and cudaMemcpy2DAsync copy when their
 * stream reaches them (so an unordered copy reads unfinished data), and
 * cudaFreeAsync frees when the stream gets there.  Failures come from the
 * double's fail / fail_after, by call name.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "double-internal.h"

static int live_allocations; /* under lock */

struct copy_2d {
    char *dst;
    const char *src;
    size_t dpitch, spitch, width, height;
};

static void run_copy_2d(void *arg)
{
    struct copy_2d *c = arg;
    size_t i;

    for (i = 0; i < c->height; i++)
        memmove(c->dst + i * c->dpitch, c->src + i * c->spitch, c->width);
    free(c);
}

static void run_free(void *arg)
{
    free(arg);
    pthread_mutex_lock(&lock);
    live_allocations--;
    pthread_mutex_unlock(&lock);
}

static cudaError_t queue(cudaStream_t stream, const struct work *w)
{
    struct context *ctx;
    struct stream *s;
    cudaError_t rc = resolve(stream, &ctx, &s);

    if (rc == cudaSuccess)
        rc = legacy_during_capture(stream, ctx, 1);
    if (rc == cudaSuccess && !graph_launch(s, w))
        tl_launch(stream, w);
    return rc;
}

cudaError_t CUDARTAPI cudaMallocAsync(void **ptr, size_t size,
                                      cudaStream_t stream)
{
    cudaError_t rc = enter("cudaMallocAsync");
    struct context *ctx = NULL;
    struct stream *s;
    char call[96], st[32];
    int device = 0;

    if (rc == cudaSuccess)
        rc = resolve(stream, &ctx, &s);
    if (rc == cudaSuccess)
        rc = legacy_during_capture(stream, ctx, 1);
    if (rc == cudaSuccess && ctx != NULL)
        device = ctx->device;
    if (rc == cudaSuccess) {
        *ptr = malloc(size);
        if (*ptr == NULL)
            rc = cudaErrorMemoryAllocation;
        else
            live_allocations++;
    }
    snprintf(call, sizeof call, "cudaMallocAsync(%zu, %s)", size,
             stream_text(stream, st));
    leave(rc, call, NULL);
    if (rc == cudaSuccess)
        add_pointer(*ptr, size, cudaMemoryTypeDevice, device, NULL, 1);
    return rc;
}

cudaError_t CUDARTAPI cudaFreeAsync(void *ptr, cudaStream_t stream)
{
    cudaError_t rc = enter("cudaFreeAsync");
    struct work w = {NULL, NULL, 0, 0, 0, run_free, ptr, 1};
    char call[96], st[32];

    if (rc == cudaSuccess)
        rc = queue(stream, &w);
    snprintf(call, sizeof call, "cudaFreeAsync(%s)", stream_text(stream, st));
    return leave(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t size,
                                      enum cudaMemcpyKind kind,
                                      cudaStream_t stream)
{
    cudaError_t rc = enter("cudaMemcpyAsync");
    struct work w = {dst, src, size, 0, 0, NULL, NULL};
    char call[96], st[32];

    if (rc == cudaSuccess)
        rc = queue(stream, &w);
    snprintf(call, sizeof call, "cudaMemcpyAsync(%zu, kind %d, %s)", size,
             (int)kind, stream_text(stream, st));
    return leave(rc, call, NULL);
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync(void *dst, size_t dpitch,
                                        const void *src, size_t spitch,
                                        size_t width, size_t height,
                                        enum cudaMemcpyKind kind,
                                        cudaStream_t stream)
{
    cudaError_t rc = enter("cudaMemcpy2DAsync");
    struct copy_2d *c = NULL;
    char call[128], st[32];

    /* The runtime's rule: pitches at least the width. */
    if (rc == cudaSuccess && (dpitch < width || spitch < width))
        rc = cudaErrorInvalidPitchValue;
    if (rc == cudaSuccess && (c = malloc(sizeof *c)) == NULL)
        rc = cudaErrorMemoryAllocation;
    if (rc == cudaSuccess) {
        struct work w = {NULL, NULL, 0, 0, 0, run_copy_2d, c, 1};

        c->dst = dst;
        c->src = src;
        c->dpitch = dpitch;
        c->spitch = spitch;
        c->width = width;
        c->height = height;
        rc = queue(stream, &w);
        if (rc != cudaSuccess)
            free(c);
    }
    snprintf(call, sizeof call,
             "cudaMemcpy2DAsync(%zu x %zu, pitch %zu <- %zu, kind %d, %s)",
             width, height, dpitch, spitch, (int)kind,
             stream_text(stream, st));
    return leave(rc, call, NULL);
}

int live_async_allocations(void)
{
    int n;

    pthread_mutex_lock(&lock);
    n = live_allocations;
    pthread_mutex_unlock(&lock);
    return n;
}
