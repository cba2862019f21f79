/*
 * Against the real CUDA runtime on a machine without a driver (error 35):
 * every call that needs a GPU fails with CAI_ENOCUDA and says why, while
 * host memory converts in the same process.
 */
#include <stdio.h>

#include "cuda-test.h"

/* Codes the runtime gives when there is no usable driver or device. */
static int names_no_driver_code(const char *message)
{
    static const char *const codes[] = {"(CUDA error 35)", "(CUDA error 100)",
                                        "(CUDA error 34)", "(CUDA error 3)"};
    size_t i;

    for (i = 0; i < sizeof codes / sizeof *codes; i++)
        if (strstr(message, codes[i]) != NULL)
            return 1;
    return 0;
}

int main(void)
{
    DLDevice device;
    cai_error_t err;
    int version = 0, rc;

    if (unsetenv("CAIBRIDGE_CUDART") != 0)
        bail("cannot unset CAIBRIDGE_CUDART");
    if (!cai_cuda_built()) {
        plan_lazy();
        check_cuda_unavailable("built without CUDA support", "CUDA not built",
                               0);
        check_host_conversion("CUDA not built");
        return 0;
    }
#ifdef CAI_CUDART_SONAME
    rc = cai_cuda_runtime_version(&version, &err);
    if (rc != CAI_OK)
        skip_all("no CUDA runtime to test against: %s", err.message);
    rc = cai_cuda_locate(NULL, &device, &err);
    if (rc == CAI_OK)
        skip_all("a CUDA driver and device answered; this test needs a "
                 "machine without them");
    plan_lazy();
    diag("the runtime says: %s", err.message);
    ok(dlopen(CAI_CUDART_SONAME, RTLD_NOW | RTLD_NOLOAD) != NULL,
       "the real %s is the runtime in use", CAI_CUDART_SONAME);
    ok(version >= 11000, "its version (%d) is readable without a driver",
       version);
    is_int(CAI_ENOCUDA, rc, "locate NULL without a driver: CAI_ENOCUDA");
    contains(err.message, "cudaGetDevice failed",
             "the message names the call");
    ok(names_no_driver_code(err.message),
       "the message carries the runtime's no-driver error number");
    check_cuda_unavailable("no usable CUDA driver or device", "no driver", 1);
    rc = cai_cuda_locate(&device, &device, &err);
    is_int(CAI_ENOCUDA, rc,
           "without a driver even a host pointer cannot "
           "be looked up: CAI_ENOCUDA, not CAI_EUNSUPPORTED");
    check_host_conversion("no driver");
#else
    bail("CUDA support is built but config.h names no runtime");
#endif
    return 0;
}
