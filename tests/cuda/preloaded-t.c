/* With CAIBRIDGE_CUDART unset, a libcudart already loaded in the process
 * (as PyTorch or CuPy load theirs) is the one used. */
#include "cuda-test.h"

int main(void)
{
    static char device_memory[16];
    const struct cudart_double *cuda;
    DLDevice device;
    cai_error_t err;
    int version = 0, rc;

    if (!cai_cuda_built())
        skip_all("built without CUDA support: no runtime is ever loaded");
    if (unsetenv("CAIBRIDGE_CUDART") != 0)
        bail("cannot unset CAIBRIDGE_CUDART");
    cuda = open_double(); /* loaded before caibridge looks */
    cuda->set_version(12090);
    plan_lazy();

    rc = cai_cuda_runtime_version(&version, &err);
    is_int(CAI_OK, rc, "a loaded libcudart is found");
    is_int(12090, version, "its version is the loaded double's");
    ok(dlopen(CAI_CUDART_SONAME, RTLD_NOW | RTLD_NOLOAD) == NULL,
       "%s was not loaded besides it", CAI_CUDART_SONAME);

    cuda->reset();
    cuda->set_pointer(device_memory, DOUBLE_DEVICE, 1);
    rc = cai_cuda_locate(device_memory, &device, &err);
    is_int(CAI_OK, rc, "locate goes through the loaded runtime");
    is_int(1, device.device_id, "and reads its answer");
    contains(cuda->log(), "cudaPointerGetAttributes(",
             "the loaded runtime saw the call");
    return 0;
}
