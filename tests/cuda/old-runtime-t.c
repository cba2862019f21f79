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
                           "newer",
                           "runtime 10.2", 0);
    /* Each call searches again (a refused runtime is not kept), and of
     * the runtime asks only its version. */
    {
        const char *log = cuda->log(), *line;
        size_t step = strlen("cudaRuntimeGetVersion() = 10020\n");
        int only = log[0] != '\0';

        for (line = log; *line != '\0'; line += step)
            if (strncmp(line, "cudaRuntimeGetVersion() = 10020\n", step) !=
                0) {
                only = 0;
                break;
            }
        ok(only, "runtime 10.2: only its version was asked");
        if (!only)
            diag("log: %s", log);
    }
    check_host_conversion("runtime 10.2");
    return 0;
}
