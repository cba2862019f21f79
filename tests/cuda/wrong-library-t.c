/* CAIBRIDGE_CUDART names a library that is not a CUDA runtime. */
#include "cuda-test.h"

int main(void)
{
#if !defined(__GLIBC__)
    skip_all("needs glibc's libc.so.6 as a library without CUDA entry points");
#else
    if (setenv("CAIBRIDGE_CUDART", "libc.so.6", 1) != 0)
        bail("cannot set CAIBRIDGE_CUDART");
    if (!cai_cuda_built())
        skip_all("built without CUDA support: no runtime is ever loaded");
    plan_lazy();
    check_cuda_unavailable("CAIBRIDGE_CUDART=libc.so.6 is not a usable CUDA "
                           "runtime: it has no cudaPointerGetAttributes",
                           "libc as the runtime", 0);
    check_host_conversion("libc as the runtime");
    return 0;
#endif
}
