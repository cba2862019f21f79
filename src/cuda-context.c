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
        if (rc != cudaSuccess) {
            op->restore_call = "cudaSetDevice";
            op->runtime_failed = 1;
        }
    }
    if (rc != CUDA_SUCCESS)
        op->restore_rc = rc;
    op->now = op->saved;
    op->switched = op->device_switched = 0;
    if (op->retained) {
        op->retained = 0;
        rc = cai_drv.primary_ctx_release(op->retained_device);
        if (rc != CUDA_SUCCESS && op->restore_call == NULL) {
            op->restore_call = "cuDevicePrimaryCtxRelease";
            op->restore_rc = rc;
        }
    }
}

/* Makes device's primary context current through the driver, which works
 * alike on CUDA 11 (where cudaSetDevice switches only at the next call)
 * and 12.  A primary context not active holds no work: *none is set and
 * nothing is created. */
static int enter_primary(struct op *op, int device, int *none)
{
    CUcontext target = NULL;
    unsigned flags = 0;
    int active = 0;

    if (cai_op_failed(
            op, "cuDevicePrimaryCtxGetState",
            cai_drv.primary_ctx_get_state((CUdevice)device, &flags, &active)))
        return -1;
    if (!active) {
        *none = 1;
        return 0;
    }
    /* Held until the restore; a second one in the same operation is only
     * looked up, as it is active and so held by its user. */
    if (cai_op_failed(op, "cuDevicePrimaryCtxRetain",
                      cai_drv.primary_ctx_retain(&target, (CUdevice)device)))
        return -1;
    if (!op->retained) {
        op->retained = 1;
        op->retained_device = (CUdevice)device;
    } else {
        cai_drv.primary_ctx_release((CUdevice)device);
    }
    return cai_ctx_switch(op, target);
}

/* Without a driver (so with no contexts to protect): the data's device
 * made the runtime's, put back at the restore. */
static int enter_device_by_runtime(struct op *op, DLDevice device)
{
    int d;

    if (device.device_type != kDLCUDA)
        return 0;
    if (cai_op_failed(op, "cudaGetDevice", cai_rt.get_device(&d)))
        return -1;
    if (d == device.device_id)
        return 0;
    if (cai_op_failed(op, "cudaSetDevice",
                      cai_rt.set_device(device.device_id)))
        return -1;
    if (!op->device_switched) {
        op->device_switched = 1;
        op->device_before = d;
    }
    return 0;
}

/*
 * Makes current the context that stream belongs to: a handle's own (only
 * when required, or when no context is current, so the runtime creates
 * none); for the default streams, known (the context a fence was recorded
 * in), else the caller's context, or the primary context of the data's
 * device when the data is device memory elsewhere (of the thread's device
 * when no context is current).  *none is set when the stream cannot hold
 * work for this call: the per-thread stream of a thread with no context, or
 * the legacy stream of a primary context not active.
 */
int cai_enter_stream_context(struct op *op, intptr_t stream, DLDevice device,
                             const CUcontext *known, int required, int *none)
{
    CUcontext target = NULL;
    CUdevice current;
    int d;

    *none = 0;
    if (!cai_is_default_stream(stream)) {
        if (!op->have_saved || (!required && op->now != NULL))
            return 0;
        if (cai_op_failed(op, "cuStreamGetCtx",
                          cai_drv.stream_get_ctx(
                              (CUstream)cai_stream_handle(stream), &target)))
            return -1;
        return cai_ctx_switch(op, target);
    }
    if (known != NULL && op->have_saved)
        return cai_ctx_switch(op, *known);
    if (!op->have_saved)
        return enter_device_by_runtime(op, device);
    /* With no context current, the per-thread stream holds no work of
     * this thread; the legacy stream is the one of a primary context,
     * which other threads may have used. */
    if (op->saved == NULL && stream == CAI_STREAM_PER_THREAD) {
        *none = 1;
        return 0;
    }
    if (op->saved != NULL) {
        if (cai_ctx_switch(op, op->saved) != 0)
            return -1;
        if (device.device_type != kDLCUDA)
            return 0;
        if (cai_context_device(op, &current) != 0)
            return -1;
        if ((int)current == device.device_id)
            return 0;
        d = device.device_id;
    } else if (device.device_type == kDLCUDA) {
        d = device.device_id;
    } else if (cai_op_failed(op, "cudaGetDevice", cai_rt.get_device(&d))) {
        return -1;
    }
    return enter_primary(op, d, none);
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
