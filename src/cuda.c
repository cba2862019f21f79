/* CUDA access: placeholder until the runtime loader lands. */
#include "internal.h"

int cai_cuda_built(void) { return 0; }

int cai_cuda_runtime_version(int *version, cai_error_t *err)
{
    *version = 0;
    return cai_fail(err, CAI_ENOCUDA, "", "CUDA support is not built");
}

int cai_cuda_locate(const void *ptr, DLDevice *out, cai_error_t *err)
{
    (void)ptr;
    (void)out;
    return cai_fail(err, CAI_ENOCUDA, "device", "CUDA support is not built");
}

int cai_cuda_order(const cai_desc_t *producer, intptr_t consumer_stream,
                   cai_error_t *err)
{
    (void)producer;
    (void)consumer_stream;
    return cai_fail(err, CAI_ENOCUDA, "stream", "CUDA support is not built");
}

int cai_cuda_stream_synchronize(intptr_t stream, cai_error_t *err)
{
    (void)stream;
    return cai_fail(err, CAI_ENOCUDA, "stream", "CUDA support is not built");
}
