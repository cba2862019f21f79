/* A runtime older than 11.0 lays out pointer attributes differently: it is
 * refused as a whole rather than misread. */
#include "cuda-test.h"

int main(void)
{
    const struct cudart_double *cuda;

    if (!cai_cuda_built())
        skip_all("built without CUDA support: no runtime is ever loaded");
    cuda = use_double();
    cuda->set_version(10020);
    plan_lazy();
    check_cuda_unavailable("is CUDA runtime 10.2; caibridge needs 11.0 or "
                           "newer", "runtime 10.2", 0);
    is_string("cudaRuntimeGetVersion() = 10020\n", cuda->log(),
              "runtime 10.2: only its version was asked");
    check_host_conversion("runtime 10.2");
    return 0;
}
