/* CAIBRIDGE_CUDART names a library that is not a CUDA runtime. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>

#include "cuda-test.h"

int main(void)
{
#if !defined(__GLIBC__)
    skip_all("needs glibc's libc.so.6 as a library without CUDA entry points");
#else
    Dl_info libc;
    char expected[PATH_MAX + 128];

    /* CAIBRIDGE_CUDART takes only an absolute path: libc's own. */
    if (dladdr((void *)&printf, &libc) == 0 || libc.dli_fname[0] != '/')
        bail("cannot find the path of libc");
    if (setenv("CAIBRIDGE_CUDART", libc.dli_fname, 1) != 0)
        bail("cannot set CAIBRIDGE_CUDART");
    snprintf(expected, sizeof expected,
             "CAIBRIDGE_CUDART=%s is not a "
             "usable CUDA runtime: it has no cudaPointerGetAttributes",
             libc.dli_fname);
    if (!cai_cuda_built())
        skip_all("built without CUDA support: no runtime is ever loaded");
    plan_lazy();
    check_cuda_unavailable(expected, "libc as the runtime", 0);
    check_host_conversion("libc as the runtime");
    return 0;
#endif
}
