/*
 * Where a pointer lives: device, pinned host or managed memory, and which
 * device, without creating a context.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "cuda-internal.h"

#ifdef HAVE_CUDA

static int locate(const void *ptr, intptr_t stream, DLDevice *out,
                  cai_error_t *err)
{
    /* Room for attribute structs of runtimes newer than our headers. */
    union {
        struct cudaPointerAttributes attributes;
        unsigned char room[256];
    } a;
    struct op op;
    int device = 0, access = 0, status;

    out->device_type = (DLDeviceType)0;
    out->device_id = 0;
    status = cai_op_begin(&op, "data", err);
    if (status != 0)
        return status;

    if (ptr == NULL) {
        /* A zero-size array has no pointer to ask about: its stream's
         * device, else the current one. */
        if (stream != 0 && !cai_is_default_stream(stream) &&
            stream != CAI_STREAM_NO_SYNC && cai_ctx_save(&op) == 0 &&
            op.have_saved) {
            CUcontext target = NULL;

            if (!cai_op_failed(&op, "cuStreamGetCtx",
                           cai_drv.stream_get_ctx(
                               (CUstream)cai_stream_handle(stream), &target)) &&
                cai_ctx_switch(&op, target) == 0) {
                CUdevice d;

                if (!cai_op_failed(&op, "cuCtxGetDevice",
                               cai_drv.ctx_get_device(&d)))
                    device = (int)d;
            }
            cai_ctx_restore(&op);
        } else {
            cai_current_device(&op, &device);
        }
        status = cai_op_end(&op, err);
        if (status != 0)
            return status;
        out->device_type = kDLCUDA;
        out->device_id = device;
        return 0;
    }

    memset(&a, 0, sizeof a);
    a.attributes.type = cudaMemoryTypeUnregistered;
    if (cai_ctx_save(&op) != 0)
        return cai_op_end(&op, err);
    if (op.have_saved && op.saved == NULL) {
        /* With no context current the runtime would make one (a primary
         * context on the thread's device, 0 on a fresh thread) for its
         * lookup: the driver names the memory's own context, which is
         * made current for it; memory of no context is not CUDA's. */
        CUcontext owner = NULL;

        if (cai_drv.pointer_get_attribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT,
                                         (CUdeviceptr)(uintptr_t)ptr) ==
                CUDA_SUCCESS &&
            owner != NULL && cai_ctx_switch(&op, owner) == 0 &&
            cai_op_failed(&op, "cudaPointerGetAttributes",
                      cai_rt.pointer_get_attributes(&a.attributes, ptr))) {
            cai_ctx_restore(&op);
            return cai_op_end(&op, err);
        }
        cai_ctx_restore(&op);
        if (op.call != NULL || op.restore_call != NULL)
            return cai_op_end(&op, err);
    } else if (cai_op_failed(&op, "cudaPointerGetAttributes",
                         cai_rt.pointer_get_attributes(&a.attributes,
                                                        ptr))) {
        return cai_op_end(&op, err);
    }
    switch (a.attributes.type) {
    case cudaMemoryTypeDevice:
        if (a.attributes.device < 0)
            return cai_fail(err, CAI_ECUDA, "data",
                            "cudaPointerGetAttributes says data = %p is "
                            "device memory on device %d", ptr,
                            a.attributes.device);
        out->device_type = kDLCUDA;
        out->device_id = a.attributes.device;
        break;
    case cudaMemoryTypeHost:
        if (a.attributes.hostPointer != NULL &&
            a.attributes.hostPointer != ptr) {
            /* The device's address of registered host memory: only a
             * device can use this pointer. */
            out->device_type = kDLCUDA;
            out->device_id = a.attributes.device < 0 ? 0
                                                     : a.attributes.device;
            break;
        }
        if (a.attributes.devicePointer != NULL &&
            a.attributes.devicePointer != ptr)
            return cai_fail(err, CAI_EUNSUPPORTED, "data",
                            "data = %p is registered host memory whose "
                            "device address is %p; the CUDA Array Interface "
                            "needs the address a device uses", ptr,
                            a.attributes.devicePointer);
        out->device_type = kDLCUDAHost;
        break;
    case cudaMemoryTypeManaged:
        out->device_type = kDLCUDAManaged;
        break;
    case cudaMemoryTypeUnregistered:
        /* On HMM and ATS systems devices read pageable memory coherently:
         * it is unified memory. */
        if (cai_current_device(&op, &device) == 0 &&
            !cai_op_failed(&op, "cudaDeviceGetAttribute",
                       cai_rt.device_get_attribute(
                           &access, cudaDevAttrPageableMemoryAccess,
                           device)) &&
            access) {
            out->device_type = kDLCUDAManaged;
            break;
        }
        if (op.call != NULL)
            return cai_op_end(&op, err);
        return cai_fail(err, CAI_EUNSUPPORTED, "data",
                        "data = %p is host memory not registered with CUDA "
                        "(or device memory already freed: CUDA cannot tell "
                        "them apart); the CUDA Array Interface needs memory "
                        "a device can access (device, pinned or managed)",
                        ptr);
    default:
        return cai_fail(err, CAI_EUNSUPPORTED, "data",
                        "cudaPointerGetAttributes says data = %p has memory "
                        "type %d, which caibridge does not know", ptr,
                        (int)a.attributes.type);
    }
    return cai_ok(err);
}

int cai_cuda_locate(const void *ptr, DLDevice *out, cai_error_t *err)
{
    return locate(ptr, 0, out, err);
}

int cai_cuda_locate_desc(const cai_desc_t *desc, DLDevice *out,
                         cai_error_t *err)
{
    return locate(desc->data, desc->has_stream ? desc->stream : 0, out, err);
}


#endif /* HAVE_CUDA */
