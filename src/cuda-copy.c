/*
 * Copies of CUDA memory (__dlpack__(copy=True)): fresh memory from the
 * consumer's stream's pool (cudaMallocAsync), filled by copies queued on
 * that stream, so the host never waits; or, for a host consumer, malloc'd
 * memory the host waits for.  The result is C-contiguous.  The caller has
 * already ordered the copy after the producer (the stream waits on the
 * fence, or the host did), and keeps the source until the copy has run;
 * the free goes where the memory lives (cai_cuda_copy_free).
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-copy.h"
#include "cuda-internal.h"
#include "desc.h"

/* The C-contiguous size of d's data in bytes (sub-byte elements packed);
 * -1 on overflow. */
int cai_copy_nbytes(const cai_desc_t *d, size_t *out)
{
    int64_t n;

    if (cai_contiguous_nbytes(d->ndim, d->shape, d->dtype, &n) != 0)
        return -1;
    *out = (size_t)n;
    return 0;
}

#ifdef HAVE_CUDA

/*
 * How d's data is cut into valid memcpys: the longest suffix of axes that
 * is contiguous in the source is one row of width bytes; the axis before
 * it (row) is the height of a 2-D copy when its stride is a valid pitch
 * (positive and at least width), else it is one more outer axis and every
 * row is its own 1-D copy (zero strides: broadcast; negative: reversed).
 */
struct plan {
    size_t width;
    int row;   /* -1: no 2-D axis */
    int outer; /* axes [0, outer) are looped over */
};

static void make_plan(const cai_desc_t *d, size_t nbytes, struct plan *p)
{
    int64_t expected = cai_dtype_itemsize(d->dtype);
    int k = d->ndim;

    /* Contiguous (packed sub-byte elements always are) or empty: one
     * piece.  An empty array's strides are moot, its extents unchecked. */
    if (!d->has_strides || nbytes == 0) {
        p->width = nbytes;
        p->row = -1;
        p->outer = 0;
        return;
    }

    /* expected stays within the checked extent: it never overflows. */
    while (k > 0 && (d->shape[k - 1] == 1 || d->strides[k - 1] == expected)) {
        expected *= d->shape[k - 1];
        k--;
    }
    p->width = (size_t)expected;
    p->row = -1;
    p->outer = k;
    if (k > 0 && d->strides[k - 1] > 0 &&
        (uint64_t)d->strides[k - 1] >= (uint64_t)expected) {
        p->row = k - 1;
        p->outer = k - 1;
    }
}

static int copy_kind(int to_host)
{
    return to_host ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
}

/* Queues the pieces on stream; the first failure stops (in op).  Returns
 * whether any piece was queued. */
static int queue_pieces(struct op *op, const cai_desc_t *d,
                        const struct plan *p, char *dst, cudaStream_t stream,
                        int to_host)
{
    int64_t index[CAI_MAX_NDIM] = {0};
    int64_t offset = 0;
    size_t height = p->row >= 0 ? (size_t)d->shape[p->row] : 1;
    size_t piece = p->width * height;
    const char *start = dst;
    int i;

    /* Nothing to copy: an empty array's data may be NULL, and NULL plus
     * any offset is undefined. */
    for (i = 0; i < d->ndim; i++)
        if (d->shape[i] == 0)
            return 0;
    for (;;) {
        const char *src = (const char *)d->data + offset;

        if (p->row >= 0
                ? cai_op_failed(op, "cudaMemcpy2DAsync",
                                cai_rt.memcpy_2d_async(
                                    dst, p->width, src,
                                    (size_t)d->strides[p->row], p->width,
                                    height, copy_kind(to_host), stream))
                : cai_op_failed(op, "cudaMemcpyAsync",
                                cai_rt.memcpy_async(dst, src, p->width,
                                                    copy_kind(to_host),
                                                    stream)))
            return dst != start;
        dst += piece;
        /* The next outer index; offsets stay inside the checked extent. */
        for (i = p->outer - 1; i >= 0; i--) {
            if (++index[i] < d->shape[i]) {
                offset += d->strides[i];
                break;
            }
            offset -= d->strides[i] * (d->shape[i] - 1);
            index[i] = 0;
        }
        if (i < 0)
            return 1;
    }
}

/* Enters stream's context; the per-thread stream of a thread with no
 * context holds no work, so the legacy stream is used instead. */
static int enter_copy_context(struct op *op, intptr_t *stream, DLDevice device)
{
    int none = 0;

    if (cai_enter_stream_context(op, *stream, device, NULL, 1, &none) != 0)
        return -1;
    if (!none)
        return 0;
    *stream = CAI_STREAM_LEGACY;
    return cai_enter_stream_context(op, *stream, device, NULL, 1, &none);
}

/* The stream a copy is queued on: the consumer's (a host copy's caller
 * passes the legacy stream, having waited for the producer's fence on the
 * host), or without one (no sync) the producer's, which the caller named
 * just now, or the legacy default stream. */
static intptr_t copy_stream(const cai_desc_t *d, intptr_t consumer)
{
    if (consumer > 0)
        return consumer;
    return d->has_stream && d->stream > 0 ? d->stream : CAI_STREAM_LEGACY;
}

/* Whether a device copy may go on stream (its context entered): *other is
 * the stream's device when that is not the data's (the copy would be made
 * there but said to be on the data's), *capturing set when a graph is
 * being captured there (its replay would read a source long gone).  -1
 * failed in op. */
static int check_copy_stream(struct op *op, const cai_desc_t *d,
                             intptr_t stream, int *other, int *capturing)
{
    enum cudaStreamCaptureStatus state = cudaStreamCaptureStatusNone;
    CUdevice current;

    /* The default streams are entered on the data's device already. */
    if (!cai_is_default_stream(stream) && op->have_saved && op->now != NULL &&
        d->device.device_type == kDLCUDA) {
        if (cai_context_device(op, &current) != 0)
            return -1;
        if ((int)current != d->device.device_id) {
            *other = (int)current;
            return 0;
        }
    }
    if (cai_op_failed(
            op, "cudaStreamIsCapturing",
            cai_rt.stream_is_capturing(cai_stream_handle(stream), &state)))
        return -1;
    *capturing = state != cudaStreamCaptureStatusNone;
    return 0;
}

/* Records on a handle's copy the event its free waits on, so that the free
 * never names the handle; nothing for the default streams, which the
 * legacy stream the free goes on waits for. */
static cudaEvent_t record_filled(struct op *op, intptr_t stream)
{
    cudaEvent_t made = NULL;

    if (cai_is_default_stream(stream) ||
        cai_op_failed(
            op, "cudaEventCreateWithFlags",
            cai_rt.event_create_with_flags(&made, cudaEventDisableTiming)))
        return NULL;
    if (cai_op_failed(op, "cudaEventRecord",
                      cai_rt.event_record(made, cai_stream_handle(stream)))) {
        cai_rt.event_destroy(made);
        return NULL;
    }
    return made;
}

int cai_cuda_copy(const cai_desc_t *d, intptr_t consumer, int to_host,
                  cai_copy_t *out, cai_error_t *err)
{
    struct op op;
    struct plan plan;
    size_t nbytes;
    intptr_t stream = copy_stream(d, consumer);
    int status, no_memory = 0, other = -1, capturing = 0;
    unsigned long long context_id = 0;
    CUcontext context = NULL;
    cudaEvent_t filled = NULL;
    void *block = NULL;

    memset(out, 0, sizeof *out);
    if (cai_copy_nbytes(d, &nbytes) != 0)
        return cai_fail(err, CAI_ENOMEM, "shape",
                        "a copy of this shape would not fit in memory");
    if ((status = cai_op_begin(&op, "copy", err)) != 0)
        return status;
    if (!to_host && (cai_rt.malloc_async == NULL || cai_rt.free_async == NULL))
        return cai_fail(err, CAI_EUNSUPPORTED, "copy",
                        "a device copy needs cudaMallocAsync and "
                        "cudaFreeAsync (CUDA 11.2 or newer); this runtime "
                        "lacks them");
    if (cai_rt.memcpy_async == NULL || cai_rt.memcpy_2d_async == NULL)
        return cai_fail(err, CAI_EUNSUPPORTED, "copy",
                        "this CUDA runtime lacks cudaMemcpyAsync or "
                        "cudaMemcpy2DAsync");
    make_plan(d, nbytes, &plan);
    if (cai_ctx_save(&op) == 0 &&
        enter_copy_context(&op, &stream, d->device) == 0 &&
        (to_host ||
         check_copy_stream(&op, d, stream, &other, &capturing) == 0) &&
        other < 0 && !capturing) {
        /* Where the memory lives, for its free: ids are never reused. */
        context = op.have_saved ? op.now : NULL;
        if (context != NULL && cai_drv.ctx_get_id != NULL &&
            cai_context_id_try(&op, context, &context_id) != CUDA_SUCCESS)
            context_id = 0;
        /* Host memory is taken only once CUDA can copy into it: a copy
         * refused before that allocates nothing. */
        if (to_host)
            no_memory = (block = malloc(nbytes > 0 ? nbytes : 1)) == NULL;
        else if (cai_op_failed(&op, "cudaMallocAsync",
                               cai_rt.malloc_async(&block,
                                                   nbytes > 0 ? nbytes : 1,
                                                   cai_stream_handle(stream))))
            block = NULL;
    }
    if (block != NULL) {
        int queued = queue_pieces(&op, d, &plan, block,
                                  cai_stream_handle(stream), to_host);

        if (op.call == NULL && !to_host)
            filled = record_filled(&op, stream);
        /* A failed queue frees at once, in stream order: nothing else
         * names the block. */
        if (op.call != NULL && !to_host)
            cai_rt.free_async(block, cai_stream_handle(stream));
        /* The host consumer waits for its copy only.  A host block that
         * queued pieces may still write is freed only after they ran; when
         * even that wait fails it is left allocated, not freed under them. */
        if (to_host && (op.call == NULL || queued)) {
            cudaError_t rc =
                cai_rt.stream_synchronize(cai_stream_handle(stream));
            CAI_COUNT(host_waits, 1);

            if (rc != cudaSuccess && queued)
                block = NULL;
            if (op.call == NULL)
                cai_op_failed(&op, "cudaStreamSynchronize", rc);
        }
    }
    cai_ctx_restore(&op);
    status = cai_op_end(&op, err);
    if (status == 0 && no_memory)
        status = cai_fail(err, CAI_ENOMEM, "copy",
                          "no host memory for a copy of %zu bytes", nbytes);
    if (status == 0 && other >= 0)
        status = cai_fail(
            err, CAI_EUNSUPPORTED, "stream",
            "copy=True: the consumer's stream is on CUDA device %d but the "
            "data is on CUDA device %d, and a copy is made where the data "
            "is; pass a stream of device %d",
            other, (int)d->device.device_id, (int)d->device.device_id);
    if (status == 0 && capturing)
        status = cai_fail(err, CAI_EUNSUPPORTED, "stream",
                          "copy=True: the consumer's stream is capturing a "
                          "CUDA graph, whose replays would read the source "
                          "after it may be gone; copy after the capture "
                          "ends");
    if (status != 0) {
        if (to_host)
            free(block);
        return status;
    }
    cai_count_copy(to_host, nbytes);
    CAI_MARK(to_host ? "copy to host" : "copy", stream, 0, nbytes);
    out->data = block;
    out->stream = stream;
    out->device = d->device;
    out->on_host = to_host;
    out->context = context;
    out->context_id = context_id;
    out->filled = filled;
    return 0;
}

/* Makes current the context the copy was made in: 1 done, 0 that context
 * has ended (its memory and events with it), -1 failed in op.  Without a
 * driver, the data's device. */
static int enter_copy_home(struct op *op, const cai_copy_t *copy)
{
    intptr_t stream = CAI_STREAM_LEGACY;
    int alive;

    if (copy->context == NULL)
        return enter_copy_context(op, &stream, copy->device) == 0 ? 1 : -1;
    alive = cai_context_alive(op, (CUcontext)copy->context, copy->context_id);
    if (alive <= 0)
        return alive;
    return cai_ctx_switch(op, (CUcontext)copy->context) == 0 ? 1 : -1;
}

int cai_cuda_copy_wait(const cai_copy_t *copy, cai_error_t *err)
{
    struct op op;
    int status;

    if ((status = cai_op_begin(&op, "copy", err)) != 0)
        return status;
    /* Just after the copy, on its thread: its stream is alive. */
    if (cai_ctx_save(&op) == 0 && enter_copy_home(&op, copy) > 0)
        cai_op_failed(
            &op, "cudaStreamSynchronize",
            cai_rt.stream_synchronize(cai_stream_handle(copy->stream)));
    cai_ctx_restore(&op);
    return cai_op_end(&op, err);
}

int cai_cuda_copy_free(const cai_copy_t *copy, cai_error_t *err)
{
    cudaStream_t legacy = cai_stream_handle(CAI_STREAM_LEGACY);
    struct op op;
    int status;

    if (copy->on_host) {
        free(copy->data);
        return cai_ok(err);
    }
    /*
     * A deleter runs on any thread, at any time: the copy's own stream may
     * be destroyed (a handle) or not be this thread's (stream 2), and this
     * thread's context may be another.  The free goes on the legacy stream
     * of the context the memory was allocated in, which waits for the
     * default streams' earlier work there, and, for a handle's copy, on the
     * event recorded after it.  A consumer on a handle orders its own work
     * before it releases (DLPack's rule, as for every release).
     */
    if ((status = cai_op_begin(&op, "copy", err)) != 0)
        return status;
    if (cai_ctx_save(&op) == 0 && enter_copy_home(&op, copy) > 0) {
        enum cudaStreamCaptureStatus state;

        /* A blocking stream of the context capturing (a GC release during
         * a CuPy capture): any use of the legacy stream would invalidate
         * that capture.  The per-thread stream waits for the legacy one's
         * earlier work and not for the capture, so the free goes there. */
        if (cai_rt.stream_is_capturing(legacy, &state) ==
            cudaErrorStreamCaptureImplicit) {
            cai_rt.get_last_error(); /* ours, expected: not left pending */
            legacy = cai_stream_handle(CAI_STREAM_PER_THREAD);
        }
        /* Not freed before the copy ran: left allocated if the wait fails. */
        if (copy->filled == NULL ||
            !cai_op_failed(&op, "cudaStreamWaitEvent",
                           cai_rt.stream_wait_event(
                               legacy, (cudaEvent_t)copy->filled, 0)))
            cai_op_failed(&op, "cudaFreeAsync",
                          cai_rt.free_async(copy->data, legacy));
        if (copy->filled != NULL)
            cai_op_failed(&op, "cudaEventDestroy",
                          cai_rt.event_destroy((cudaEvent_t)copy->filled));
    }
    cai_ctx_restore(&op);
    return cai_op_end(&op, err);
}

#endif /* HAVE_CUDA */
