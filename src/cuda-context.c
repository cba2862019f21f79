/*
 * CUDA contexts: the caller's is saved and put back exactly, and the one a
 * stream, fence or pointer belongs to made current without creating any.
 */
#include "config.h"


#include "cuda-internal.h"

#ifdef HAVE_CUDA

/* Saves the caller's exact context (NULL included). */
int cai_ctx_save(struct op *op)
{
    if (!cai_have_driver())
        return 0;
    if (cai_op_failed(op, "cuCtxGetCurrent",
                  cai_drv.ctx_get_current(&op->saved)))
        return -1;
    op->now = op->saved;
    op->have_saved = 1;
    return 0;
}

int cai_ctx_switch(struct op *op, CUcontext target)
{
    if (!op->have_saved || target == op->now)
        return 0;
    if (cai_op_failed(op, "cuCtxSetCurrent", cai_drv.ctx_set_current(target)))
        return -1;
    op->now = target;
    op->switched = 1;
    return 0;
}

/* Puts the caller's context (or device) back, whatever happened before. */
void cai_ctx_restore(struct op *op)
{
    int rc = CUDA_SUCCESS;

    if (op->switched && op->now != op->saved) {
        rc = cai_drv.ctx_set_current(op->saved);
        if (rc != CUDA_SUCCESS)
            op->restore_call = "cuCtxSetCurrent";
    } else if (op->device_switched) {
        rc = cai_rt.set_device(op->device_before);
        if (rc != cudaSuccess)
            op->restore_call = "cudaSetDevice";
    }
    if (rc != CUDA_SUCCESS)
        op->restore_rc = rc;
    op->now = op->saved;
    op->switched = op->device_switched = 0;
}

/*
 * Makes current the context that stream belongs to: a handle's own (only
 * when required, or when no context is current, so the runtime creates
 * none); for the default streams, known (the context a fence was recorded
 * in), else the caller's context, switching to the data's device when the
 * data is device memory elsewhere.  *none is set when the caller has no
 * context and the stream cannot hold work for this call: the per-thread
 * stream, or the legacy stream of memory that is not a device's.
 */
int cai_enter_stream_context(struct op *op, intptr_t stream,
                                DLDevice device, const CUcontext *known,
                                int required, int *none)
{
    CUcontext target = NULL;
    CUdevice current;
    int d;

    *none = 0;
    if (!cai_is_default_stream(stream)) {
        if (!op->have_saved || (!required && op->now != NULL))
            return 0;
        if (cai_op_failed(op, "cuStreamGetCtx",
                      cai_drv.stream_get_ctx((CUstream)cai_stream_handle(stream),
                                            &target)))
            return -1;
        return cai_ctx_switch(op, target);
    }
    if (known != NULL && op->have_saved)
        return cai_ctx_switch(op, *known);
    /* With no context current, the per-thread stream holds no work of
     * this thread; the legacy stream of device memory is the one of its
     * device's primary context, which other threads may have used. */
    if (op->have_saved && op->saved == NULL &&
        !(stream == CAI_STREAM_LEGACY && device.device_type == kDLCUDA)) {
        *none = 1;
        return 0;
    }
    if (op->saved != NULL && cai_ctx_switch(op, op->saved) != 0)
        return -1;
    if (device.device_type != kDLCUDA)
        return 0;
    if (op->have_saved && op->saved == NULL) {
        d = -1;
    } else if (op->have_saved) {
        if (cai_op_failed(op, "cuCtxGetDevice", cai_drv.ctx_get_device(&current)))
            return -1;
        d = (int)current;
    } else if (cai_op_failed(op, "cudaGetDevice", cai_rt.get_device(&d))) {
        return -1;
    }
    if (d == device.device_id)
        return 0;
    if (cai_op_failed(op, "cudaSetDevice", cai_rt.set_device(device.device_id)))
        return -1;
    if (op->have_saved) {
        /* The data's primary context, now current: the restore needs it. */
        op->switched = 1;
        op->now = NULL;
        if (cai_op_failed(op, "cuCtxGetCurrent", cai_drv.ctx_get_current(&op->now)))
            return -1;
    } else if (!op->device_switched) {
        op->device_switched = 1;
        op->device_before = d;
    }
    return 0;
}

/* Makes the context of fence current when none is, so the runtime does
 * not create one (a primary context on device 0) for the call. */
int cai_enter_fence_context(struct op *op, const cai_fence_t *fence)
{
    if (op->have_saved && op->now == NULL && fence->have_context)
        return cai_ctx_switch(op, fence->context);
    return 0;
}

/* The device of the current context, else the runtime's device; creates no
 * context. */
int cai_current_device(struct op *op, int *device)
{
    CUdevice d;

    if (!op->have_saved && cai_ctx_save(op) != 0)
        return -1;
    if (op->have_saved && op->saved != NULL) {
        if (cai_op_failed(op, "cuCtxGetDevice", cai_drv.ctx_get_device(&d)))
            return -1;
        *device = (int)d;
        return 0;
    }
    return cai_op_failed(op, "cudaGetDevice", cai_rt.get_device(device)) ? -1
                                                                       : 0;
}

#endif /* HAVE_CUDA */
