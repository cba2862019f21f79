/* CAIBRIDGE_CUDART names a file that does not exist: every CUDA call says
 * so, and host memory is unaffected. */
#include "cuda-test.h"

#define MISSING "/nonexistent/caibridge-test/libcudart.so.99"

int main(void)
{
    if (setenv("CAIBRIDGE_CUDART", MISSING, 1) != 0)
        bail("cannot set CAIBRIDGE_CUDART");
    plan_lazy();
    if (!cai_cuda_built()) {
        check_cuda_unavailable("built without CUDA support", "CUDA not built",
                               0);
    } else {
        check_cuda_unavailable("CAIBRIDGE_CUDART=" MISSING
                               " could not be loaded",
                               "missing runtime", 0);
        /* The loader's own reason is kept, not a generic one. */
        check_cuda_unavailable("No such file", "missing runtime, reason", 0);
    }
    check_host_conversion("no CUDA runtime");
    return 0;
}
