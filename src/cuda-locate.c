/*
 * Where a pointer lives: device, pinned host or managed memory, and which
 * device, without creating a context.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "cuda-internal.h"

#ifdef HAVE_CUDA

/*
 * What the driver says of ptr, with no context current and creating none:
 * 1 when the memory belongs to a context, now made current, for the
 * runtime's fuller answer; 0 when *out was filled here (memory of a
 * stream-ordered pool, which belongs to no context, or memory CUDA does not
 * know); -1 on failure.
 */
static int by_driver(struct op *op, const void *ptr,
                     struct cudaPointerAttributes *out)
{
    CUpointer_attribute which[] = {
        CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_IS_MANAGED};
    CUcontext owner = NULL;
    unsigned type = 0, managed = 0;
    int device = 0;
    void *data[] = {&owner, &type, &device, &managed};

    if (cai_op_failed(op, "cuPointerGetAttributes",
                      cai_drv.pointer_get_attributes(
                          4, which, data, (CUdeviceptr)(uintptr_t)ptr)))
        return -1;
    if (owner != NULL)
        return cai_ctx_switch(op, owner) == 0 ? 1 : -1;
    out->device = device;
    if (managed)
        out->type = cudaMemoryTypeManaged;
    else if (type == CU_MEMORYTYPE_DEVICE)
        out->type = cudaMemoryTypeDevice;
    else if (type == CU_MEMORYTYPE_HOST)
        out->type = cudaMemoryTypeHost;
    return 0;
}

/* Locates ptr within op, which the caller began and this ends (on success
 * the caller's context is current again and still saved in op, so that a
 * following step needs no second look at it). */
int cai_locate_in(struct op *op, const void *ptr, intptr_t stream,
                  DLDevice *out, cai_error_t *err)
{
    /* Room for attribute structs of runtimes newer than our headers. */
    union {
        struct cudaPointerAttributes attributes;
        unsigned char room[256];
    } a;
    int device = 0, access = 0, status;

    out->device_type = (DLDeviceType)0;
    out->device_id = 0;

    if (ptr == NULL) {
        /* A zero-size array has no pointer to ask about: its stream's
         * device, else the current one. */
        if (stream != 0 && !cai_is_default_stream(stream) &&
            stream != CAI_STREAM_NO_SYNC && cai_ctx_save(op) == 0 &&
            op->have_saved) {
            CUcontext target = NULL;

            if (!cai_op_failed(
                    op, "cuStreamGetCtx",
                    cai_drv.stream_get_ctx((CUstream)cai_stream_handle(stream),
                                           &target)) &&
                cai_ctx_switch(op, target) == 0) {
                CUdevice d;

                if (!cai_op_failed(op, "cuCtxGetDevice",
                                   cai_drv.ctx_get_device(&d)))
                    device = (int)d;
            }
            cai_ctx_restore(op);
        } else {
            cai_current_device(op, &device);
        }
        status = cai_op_end(op, err);
        if (status != 0)
            return status;
        out->device_type = kDLCUDA;
        out->device_id = device;
        return 0;
    }

    memset(&a, 0, sizeof a);
    a.attributes.type = cudaMemoryTypeUnregistered;
    if (cai_ctx_save(op) != 0)
        return cai_op_end(op, err);
    if (op->have_saved && op->saved == NULL) {
        /* With no context current the runtime would make one (a primary
         * context on the thread's device, 0 on a fresh thread) for its
         * lookup: the driver, which needs none, says what the memory is;
         * memory of a context is then asked in that context. */
        int found = by_driver(op, ptr, &a.attributes);

        if (found < 0)
            return cai_op_end(op, err);
        if (found > 0 &&
            cai_op_failed(op, "cudaPointerGetAttributes",
                          cai_rt.pointer_get_attributes(&a.attributes, ptr))) {
            cai_ctx_restore(op);
            return cai_op_end(op, err);
        }
        cai_ctx_restore(op);
        if (op->call != NULL || op->restore_call != NULL)
            return cai_op_end(op, err);
    } else if (cai_op_failed(
                   op, "cudaPointerGetAttributes",
                   cai_rt.pointer_get_attributes(&a.attributes, ptr))) {
        return cai_op_end(op, err);
    }
    switch (a.attributes.type) {
    case cudaMemoryTypeDevice:
        if (a.attributes.device < 0)
            return cai_fail(err, CAI_ECUDA, "data",
                            "cudaPointerGetAttributes says data = %p is "
                            "device memory on device %d",
                            ptr, a.attributes.device);
        out->device_type = kDLCUDA;
        out->device_id = a.attributes.device;
        break;
    case cudaMemoryTypeHost:
        if (a.attributes.hostPointer != NULL &&
            a.attributes.hostPointer != ptr) {
            /* The device's address of registered host memory: only a
             * device can use this pointer. */
            out->device_type = kDLCUDA;
            out->device_id = a.attributes.device < 0 ? 0 : a.attributes.device;
            break;
        }
        if (a.attributes.devicePointer != NULL &&
            a.attributes.devicePointer != ptr)
            return cai_fail(err, CAI_EUNSUPPORTED, "data",
                            "data = %p is registered host memory whose "
                            "device address is %p; the CUDA Array Interface "
                            "needs the address a device uses",
                            ptr, a.attributes.devicePointer);
        out->device_type = kDLCUDAHost;
        break;
    case cudaMemoryTypeManaged:
        out->device_type = kDLCUDAManaged;
        break;
    case cudaMemoryTypeUnregistered:
        /* On HMM and ATS systems devices read pageable memory coherently:
         * it is unified memory. */
        if (cai_current_device(op, &device) == 0 &&
            !cai_op_failed(
                op, "cudaDeviceGetAttribute",
                cai_rt.device_get_attribute(
                    &access, cudaDevAttrPageableMemoryAccess, device)) &&
            access) {
            out->device_type = kDLCUDAManaged;
            break;
        }
        if (op->call != NULL)
            return cai_op_end(op, err);
        return cai_fail(err, CAI_EUNSUPPORTED, "data",
                        "data = %p is host memory not registered with CUDA "
                        "(or device memory already freed: CUDA cannot tell "
                        "them apart); the CUDA Array Interface needs memory "
                        "a device can access (device, pinned or managed)",
                        ptr);
    default:
        return cai_fail(err, CAI_EUNSUPPORTED, "data",
                        "cudaPointerGetAttributes says data = %p has memory "
                        "type %d, which caibridge does not know",
                        ptr, (int)a.attributes.type);
    }
    return cai_ok(err);
}

static int locate(const void *ptr, intptr_t stream, DLDevice *out,
                  cai_error_t *err)
{
    struct op op;
    int status = cai_op_begin(&op, "data", err);

    if (status != 0) {
        out->device_type = (DLDeviceType)0;
        out->device_id = 0;
        return status;
    }
    return cai_locate_in(&op, ptr, stream, out, err);
}

int cai_cuda_locate(const void *ptr, DLDevice *out, cai_error_t *err)
{
    if (CAI_UNLIKELY(out == NULL))
        return cai_null_arg(err, "out");
    return locate(ptr, 0, out, err);
}

int cai_cuda_locate_desc(const cai_desc_t *desc, DLDevice *out,
                         cai_error_t *err)
{
    if (CAI_UNLIKELY(desc == NULL || out == NULL))
        return cai_null_arg(err, desc == NULL ? "desc" : "out");
    return locate(desc->data, desc->has_stream ? desc->stream : 0, out, err);
}


#endif /* HAVE_CUDA */
