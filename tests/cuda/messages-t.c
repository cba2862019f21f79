/*
 * What the messages say on the recording double: both failures when the
 * caller's context cannot be put back, a forked child, sticky errors, an
 * error the framework left pending, no driver against an old driver; and
 * memory at the edges (interior pointers, pageable memory on HMM/ATS
 * systems, a device alias of host memory, a freed pointer, zero-size
 * arrays).
 */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda-test.h"

static const struct cudart_double *cuda;

static void double_fault(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 1);
    cai_error_t err;
    char expected[128];
    int rc;

    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 1);
    cuda->fail("cudaEventRecord", cudaErrorInvalidResourceHandle);
    /* The switch into the stream's context works, the way back fails. */
    cuda->fail_after("cuCtxSetCurrent", CUDA_ERROR_INVALID_CONTEXT, 1);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_ECUDA, rc, "record and restore both fail: CAI_ECUDA");
    contains(err.message, "cudaEventRecord failed",
             "the first failure is named");
    snprintf(expected, sizeof expected,
             "restoring the caller's context failed too: "
             "cuCtxSetCurrent (CUDA error %d)",
             (int)CUDA_ERROR_INVALID_CONTEXT);
    contains(err.message, expected, "and so is the failed restore");
    contains(err.message, "its current context changed",
             "the caller is told its context changed");

    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 1);
    cuda->fail_after("cuCtxSetCurrent", CUDA_ERROR_INVALID_CONTEXT, 1);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_ECUDA, rc, "only the restore fails: reported");
    contains(err.message, "cuCtxSetCurrent failed",
             "only the restore fails: named as the failure");
}

static void forked_child(void)
{
    DLDevice device;
    cai_error_t err;
    int status;
    pid_t pid;

    cuda->reset();
    cuda->fail("cudaPointerGetAttributes", cudaErrorInitializationError);
    if (cai_cuda_locate(&device, &device, &err) == 0)
        bail("the injected failure did not happen");
    ok(strstr(err.message, "fork") == NULL,
       "error 3 in the process that loaded CUDA: fork is not mentioned");

    fflush(stdout);
    pid = fork();
    if (pid < 0)
        bail("fork failed");
    if (pid == 0) {
        int rc = cai_cuda_locate(&device, &device, &err);

        _exit(rc == CAI_ENOCUDA && strstr(err.message, "forked") != NULL ? 0
                                                                         : 1);
    }
    if (waitpid(pid, &status, 0) != pid)
        bail("waitpid failed");
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
       "error 3 in a forked child: CAI_ENOCUDA, and the message says the "
       "process was forked");
}

static void sticky_and_pending(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    cai_error_t err;
    int rc;

    cuda->reset();
    cuda->fail("cudaEventRecord", cudaErrorIllegalAddress);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_ECUDA, rc, "a sticky error: CAI_ECUDA");
    contains(err.message, "earlier asynchronous work",
             "a sticky error: it may be an earlier kernel's");

    cuda->reset();
    cuda->fail("cudaEventRecord", cudaErrorInvalidValue);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    ok(strstr(err.message, "earlier asynchronous") == NULL,
       "an ordinary error is not called sticky");
    is_int(cudaSuccess, cuda->pending_error(),
           "our own error is cleared once reported");

    /* The framework's launch left an error pending. */
    cuda->reset();
    cuda->set_pending_error(cudaErrorInvalidConfiguration);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_OK, rc, "a pending error of someone else: ordering works");
    is_int(cudaErrorInvalidConfiguration, cuda->pending_error(),
           "and the framework's pending error is still there");
    cuda->reset();
    cuda->set_pending_error(cudaErrorInvalidConfiguration);
    cuda->fail("cudaStreamWaitEvent", cudaErrorInvalidValue);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_ECUDA, rc, "pending error, then ours: CAI_ECUDA");
    /* The runtime keeps the latest error only: ours replaced it. */
    is_int(cudaSuccess, cuda->pending_error(),
           "pending error, then ours: ours (the latest) is cleared");
    contains(err.message, "cudaStreamWaitEvent failed",
             "pending error, then ours: ours is the one reported");

    /* A driver call's failure is no runtime error: nothing is cleared. */
    cuda->reset();
    cuda->set_pending_error(cudaErrorInvalidConfiguration);
    cuda->fail("cuStreamGetCtx", CUDA_ERROR_INVALID_HANDLE);
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    is_int(CAI_ECUDA, rc,
           "pending error, then a driver call fails: CAI_ECUDA");
    is_int(cudaErrorInvalidConfiguration, cuda->pending_error(),
           "pending error, then a driver call fails: the framework's error "
           "is still pending");
    ok(strstr(cuda->log(), "cudaGetLastError") == NULL,
       "pending error, then a driver call fails: nothing is cleared");

    /* Success asks nothing about the last error. */
    cuda->reset();
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    ok(rc == CAI_OK && strstr(cuda->log(), "LastError") == NULL,
       "an operation that succeeds never asks for the last error");
}

/* The runtime's "insufficient driver" told apart by the driver's version
 * (0: none installed). */
static void driver_versions(void)
{
    static const struct {
        int version;
        const char *who, *words, *what;
    } drivers[] = {
        {0, "no driver", "no CUDA driver is installed", "said so"},
        {12040, "old driver", "driver 12.4, older than runtime 13.0",
         "both versions are given"},
    };
    DLDevice device;
    cai_error_t err;
    size_t i;

    for (i = 0; i < sizeof drivers / sizeof drivers[0]; i++) {
        cuda->reset();
        cuda->set_driver_version(drivers[i].version);
        cuda->fail("*", cudaErrorInsufficientDriver);
        is_int(CAI_ENOCUDA, cai_cuda_locate(&device, &device, &err),
               "%s: CAI_ENOCUDA", drivers[i].who);
        contains(err.message, drivers[i].words, "%s: %s", drivers[i].who,
                 drivers[i].what);
    }
}

static void memory_edges(void)
{
    static char device_block[256], alias[64], host[64], freed[16];
    cai_desc_t desc;
    DLDevice device;
    cai_error_t err;
    int rc;

    cuda->reset();
    cuda->add_allocation(device_block, sizeof device_block, DOUBLE_DEVICE, 2,
                         NULL);
    rc = cai_cuda_locate(device_block + 100, &device, &err);
    is_int(CAI_OK, rc, "an interior pointer of an allocation: found");
    is_int(kDLCUDA, device.device_type, "interior pointer: kDLCUDA");
    is_int(2, device.device_id, "interior pointer: the allocation's device");

    cuda->reset();
    cuda->set_pageable_access(1);
    rc = cai_cuda_locate(host, &device, &err);
    is_int(CAI_OK, rc,
           "pageable memory where devices read it (HMM/ATS): "
           "accepted");
    is_int(kDLCUDAManaged, device.device_type,
           "pageable memory on HMM/ATS: "
           "kDLCUDAManaged");

    cuda->reset();
    cuda->add_allocation(alias, sizeof alias, DOUBLE_PINNED, 1, host);
    rc = cai_cuda_locate(alias + 8, &device, &err);
    is_int(CAI_OK, rc,
           "the device alias of registered host memory: "
           "accepted");
    ok(device.device_type == kDLCUDA && device.device_id == 1,
       "the device alias is device memory of its device, not kDLCUDAHost");

    cuda->reset();
    rc = cai_cuda_locate(freed, &device, &err);
    is_int(CAI_EUNSUPPORTED, rc, "unknown memory: refused");
    contains(err.message, "already freed",
             "the message allows for a "
             "dangling device pointer");

    /* Zero-size arrays. */
    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 3);
    memset(&desc, 0, sizeof desc);
    desc.ndim = 1;
    desc.has_stream = 1;
    desc.stream = PRODUCER_STREAM;
    rc = cai_cuda_locate_desc(&desc, &device, &err);
    is_int(CAI_OK, rc, "zero-size array with a stream: located");
    ok(device.device_type == kDLCUDA && device.device_id == 3,
       "zero-size array: the stream's device (3), not the current (0)");
    is_int(0, cuda->current_device(), "device 0 current again");

    cuda->reset();
    cuda->set_current_context(NULL);
    {
        int primaries = cuda->primary_contexts();

        rc = cai_cuda_locate(NULL, &device, &err);
        is_int(CAI_OK, rc, "zero-size array, no context current: located");
        is_int(primaries, cuda->primary_contexts(),
               "zero-size array: no context created to find a device");
        ok(cuda->current_context() == NULL, "and none made current");
    }
}

struct lookup {
    const void *ptr;
    int status;
    DLDevice device;
    void *context_after;
};

static void *locate_on_fresh_thread(void *arg)
{
    struct lookup *l = arg;

    l->status = cai_cuda_locate(l->ptr, &l->device, NULL);
    l->context_after = cuda->current_context();
    return NULL;
}

/* A thread that never used CUDA: the memory's own context is used for the
 * lookup, and nothing is left current or created. */
static void fresh_thread_lookups(void)
{
    static char device_block[64], host[16];
    struct lookup l;
    int primaries;

    cuda->reset();
    cuda->add_allocation(device_block, sizeof device_block, DOUBLE_DEVICE, 1,
                         NULL);
    cuda->set_current_device(1); /* the allocation's context exists */
    primaries = cuda->primary_contexts();
    memset(&l, 0, sizeof l);
    l.ptr = device_block + 3;
    run_on_new_thread(locate_on_fresh_thread, &l);
    ok(l.status == CAI_OK && l.device.device_type == kDLCUDA &&
           l.device.device_id == 1,
       "fresh thread: device memory on device 1 is located");
    ok(l.context_after == NULL, "fresh thread: no context left current");
    is_int(primaries, cuda->primary_contexts(),
           "fresh thread: no primary context created (none on device 0)");

    memset(&l, 0, sizeof l);
    l.ptr = host;
    run_on_new_thread(locate_on_fresh_thread, &l);
    is_int(CAI_EUNSUPPORTED, l.status, "fresh thread: host memory refused");
    ok(l.context_after == NULL && cuda->primary_contexts() == primaries,
       "fresh thread, host memory: no context created or left current");
}

int main(void)
{
    if (!cai_cuda_built())
        skip_all("built without CUDA support");
    cuda = use_double();
    plan_lazy();
    double_fault();
    forked_child();
    sticky_and_pending();
    driver_versions();
    memory_edges();
    fresh_thread_lookups();
    return 0;
}
