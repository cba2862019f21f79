/* Threads racing to the first CUDA call load the runtime exactly once. */
#include <pthread.h>

#include "cuda-test.h"

#define THREADS 8

static int versions[THREADS];
static int statuses[THREADS];

static void *first_call(void *arg)
{
    int i = (int)(intptr_t)arg;

    statuses[i] = cai_cuda_runtime_version(&versions[i], NULL);
    return NULL;
}

int main(void)
{
    const struct cudart_double *cuda;
    pthread_t threads[THREADS];
    int i, all_ok = 1;
    const char *log;

    if (!cai_cuda_built())
        skip_all("built without CUDA support: no runtime is ever loaded");
    cuda = use_double();
    plan(3);
    for (i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, first_call,
                           (void *)(intptr_t)i) != 0)
            bail("cannot start thread %d", i);
    for (i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    for (i = 0; i < THREADS; i++)
        all_ok = all_ok && statuses[i] == CAI_OK && versions[i] == 13000;
    ok(all_ok, "all %d threads see the runtime and its version", THREADS);
    log = cuda->log();
    is_string("cudaRuntimeGetVersion() = 13000\n", log,
              "the runtime was bound once: one version query in all");
    ok(strstr(log, "cudaRuntimeGetVersion") == log,
       "nothing else ran while loading");
    return 0;
}
