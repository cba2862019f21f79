
#include <stdio.h>
#include <stdlib.h>
#include <caibridge.h>

/* What the tensor's deleter needs to let the producer go in order. */
struct handover {
    cai_fence_t *fence;        /* the producer's stream, at the export */
    intptr_t consumer_stream;
    void *owner;               /* keeps the producer's memory */
    cai_release_fn release;
};

/* The tensor's deleter calls this when the consumer lets go; its work
 * may still be queued, so the owner goes once that work has run. */
static void handover_done(void *ctx)
{
    struct handover *h = ctx;
    cai_error_t err;

    /* On failure the owner is released at once, and err says why. */
    if (cai_fence_release_owner(h->fence, h->consumer_stream, 0, h->owner,
                                h->release, &err) != 0)
        fprintf(stderr, "%s: %s\n", err.field, err.message);
    (void)cai_fence_destroy(h->fence, NULL);
    free(h);
}

/* n float32 values at data, written by work queued on producer_stream,
 * for a consumer on consumer_stream.  release(owner) runs exactly once:
 * on failure before this returns (NULL), else after the consumer. */
static DLManagedTensorVersioned *
export_cuda(float *data, int64_t n, intptr_t producer_stream,
            intptr_t consumer_stream, void *owner, cai_release_fn release)
{
    struct handover *h = calloc(1, sizeof *h);
    cai_desc_t d = {0};
    cai_error_t err;
    DLManagedTensorVersioned *t;

    if (h == NULL) {
        release(owner);
        return NULL;
    }
    h->consumer_stream = consumer_stream;
    h->owner = owner;
    h->release = release;
    d.version = 3;
    d.ndim = 1;
    d.shape[0] = n;
    d.data = data;
    d.has_stream = 1;
    d.stream = producer_stream;
    if (cai_typestr_parse("<f4", 3, &d.dtype, &err) != 0 ||
        cai_cuda_locate(data, &d.device, &err) != 0 ||
        cai_fence_record(&d, &h->fence, &err) != 0 ||
        cai_fence_wait(h->fence, consumer_stream, &err) != 0) {
        fprintf(stderr, "%s: %s\n", err.field, err.message);
        (void)cai_fence_destroy(h->fence, NULL);
        free(h);
        release(owner);
        return NULL;
    }
    /* The tensor owns h from here: on failure handover_done(h) ran. */
    if (cai_desc_to_dlpack_versioned(&d, 0, h, handover_done, &t,
                                     &err) != 0) {
        fprintf(stderr, "%s: %s\n", err.field, err.message);
        return NULL;
    }
    return t;
}

