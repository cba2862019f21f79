/*
 * cai_cuda_locate on the recording double: each memory kind, the pointer's
 * own device rather than the current one, and the calls made.
 */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "cuda-test.h"

static const struct cudart_double *cuda;

/* Fake addresses: the double only compares them. */
static char device_memory[16], pinned_memory[16], managed_memory[16],
    host_memory[16], odd_memory[16];

static void expect_one_lookup(const void *ptr, const char *name)
{
    char expected[128];

    snprintf(expected, sizeof expected,
             "cuCtxGetCurrent() = P0\n"
             "cudaPointerGetAttributes(%p)\n",
             ptr);
    is_string(expected, cuda->log(), "%s: one pointer lookup, nothing else",
              name);
}

/* Memory the host can reach, of the double's kind on device, locates as
 * type with device id 0 whatever the device (3 assertions). */
static void host_accessible(char *ptr, int kind, int device, DLDeviceType type,
                            const char *type_name, const char *name)
{
    DLDevice located;
    cai_error_t err;

    cuda->reset();
    cuda->set_pointer(ptr, kind, device);
    is_int(CAI_OK, cai_cuda_locate(ptr, &located, &err), "%s: success", name);
    is_int(type, located.device_type, "%s: %s", name, type_name);
    is_int(0, located.device_id, "%s: device id 0", name);
}

static void memory_kinds(void)
{
    DLDevice device;
    cai_error_t err;
    int rc;

    cuda->reset();
    cuda->set_pointer(device_memory, DOUBLE_DEVICE, 1);
    rc = cai_cuda_locate(device_memory, &device, &err);
    is_int(CAI_OK, rc, "device memory: success");
    is_int(kDLCUDA, device.device_type, "device memory: kDLCUDA");
    is_int(1, device.device_id,
           "device memory on device 1 while device 0 "
           "is current: device 1");
    expect_one_lookup(device_memory, "device memory");

    cuda->reset();
    cuda->set_current_device(3);
    cuda->set_pointer(device_memory, DOUBLE_DEVICE, 0);
    rc = cai_cuda_locate(device_memory, &device, &err);
    is_int(0, device.device_id,
           "device memory on device 0 while device 3 "
           "is current: device 0");

    host_accessible(pinned_memory, DOUBLE_PINNED, 2, kDLCUDAHost,
                    "kDLCUDAHost", "pinned host memory");
    expect_one_lookup(pinned_memory, "pinned host memory");
    host_accessible(managed_memory, DOUBLE_MANAGED, 1, kDLCUDAManaged,
                    "kDLCUDAManaged", "managed memory");

    cuda->reset();
    rc = cai_cuda_locate(host_memory, &device, &err);
    is_int(CAI_EUNSUPPORTED, rc,
           "unregistered host memory: "
           "CAI_EUNSUPPORTED");
    is_string("data", err.field, "unregistered host memory: field is data");
    contains(err.message, "host memory not registered with CUDA",
             "unregistered host memory: the message says why");
    is_int(0, device.device_type,
           "unregistered host memory: no device "
           "written");
    {
        char expected[256];

        snprintf(expected, sizeof expected,
                 "cuCtxGetCurrent() = P0\n"
                 "cudaPointerGetAttributes(%p)\n"
                 "cuCtxGetDevice() = 0\n"
                 "cudaDeviceGetAttribute(%d, 0) = 0\n",
                 (void *)host_memory, (int)cudaDevAttrPageableMemoryAccess);
        is_string(expected, cuda->log(),
                  "unregistered host memory: the "
                  "lookup, then whether devices read pageable memory");
    }

    cuda->reset();
    cuda->set_pointer(odd_memory, 9, 0);
    rc = cai_cuda_locate(odd_memory, &device, &err);
    is_int(CAI_EUNSUPPORTED, rc, "unknown memory type: CAI_EUNSUPPORTED");
    contains(err.message, "memory type 9",
             "unknown memory type: the "
             "message names it");

    cuda->reset();
    cuda->set_pointer(odd_memory, DOUBLE_DEVICE, -2);
    rc = cai_cuda_locate(odd_memory, &device, &err);
    is_int(CAI_ECUDA, rc,
           "device memory on device -2: refused, not "
           "passed on");
}

static void zero_size(void)
{
    DLDevice device;
    cai_error_t err;
    int rc;

    cuda->reset();
    cuda->set_current_device(2);
    rc = cai_cuda_locate(NULL, &device, &err);
    is_int(CAI_OK, rc, "NULL pointer: success");
    is_int(kDLCUDA, device.device_type, "NULL pointer: kDLCUDA");
    is_int(2, device.device_id, "NULL pointer: the current device (2)");
    is_string("cuCtxGetCurrent() = P2\n"
              "cuCtxGetDevice() = 2\n",
              cuda->log(),
              "NULL pointer: the current context's device is asked, not the "
              "pointer");
}

static void failures(void)
{
    DLDevice device;
    cai_error_t err;
    int rc;

    cuda->reset();
    cuda->fail("cudaPointerGetAttributes", cudaErrorInsufficientDriver);
    rc = cai_cuda_locate(device_memory, &device, &err);
    is_int(CAI_ENOCUDA, rc, "lookup answers no driver: CAI_ENOCUDA");
    contains(err.message,
             "cudaPointerGetAttributes failed: double: no CUDA "
             "driver (CUDA error 35)",
             "no driver: the message names the "
             "call, the runtime's text and the number");

    cuda->reset();
    cuda->fail("cudaPointerGetAttributes", cudaErrorInvalidValue);
    rc = cai_cuda_locate(device_memory, &device, &err);
    is_int(CAI_ECUDA, rc, "lookup answers invalid value: CAI_ECUDA");
    contains(cuda->log(), "cudaGetLastError() = 1\n",
             "invalid value: the runtime's error is cleared once reported");
}

/* A located descriptor converts to a tensor on that device. */
static void located_conversion(void)
{
    DLManagedTensorVersioned *tensor = NULL;
    cai_desc_t desc;
    cai_error_t err;
    int rc;

    float_desc(&desc, device_memory, 1, 4, 0);
    cuda->reset();
    cuda->set_pointer(device_memory, DOUBLE_DEVICE, 3);
    rc = cai_cuda_locate(desc.data, &desc.device, &err);
    is_int(CAI_OK, rc, "locating before conversion: success");
    rc = cai_desc_to_dlpack_versioned(&desc, 0, NULL, NULL, &tensor, &err);
    is_int(CAI_OK, rc, "located descriptor converts");
    if (tensor != NULL) {
        ok(tensor->dl_tensor.device.device_type == kDLCUDA &&
               tensor->dl_tensor.device.device_id == 3,
           "the tensor is on CUDA device 3");
        tensor->deleter(tensor);
    } else {
        ok(0, "the tensor is on CUDA device 3");
    }
}

int main(void)
{
    DLDevice device;
    int version = 0;

    cuda = use_double();
    plan_lazy();
    /* Loading asks the runtime's version; the cases below start after. */
    is_int(CAI_OK, cai_cuda_runtime_version(&version, NULL),
           "the double loads as the runtime");
    cuda->reset();
    is_int(CAI_OK, cai_cuda_locate(NULL, &device, NULL),
           "a NULL error struct is allowed");
    memory_kinds();
    zero_size();
    failures();
    located_conversion();
    check_host_conversion("with the double loaded");
    return 0;
}
