/* Helpers shared by the CUDA tests: reaching the recording double, and the
 * host-memory check that must pass whatever state CUDA is in. */
#ifndef CAI_CUDA_TEST_H
#define CAI_CUDA_TEST_H

#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caibridge.h"
#include "cudart-double.h"
#include "tap/basic.h"
#include "test-util.h"

/* The double: the copy in the private folder the test harness made
 * (tests/cuda/private-doubles.sh), else where libtool built it
 * (CUDART_DOUBLE_DIR from tests/cuda/local.mk), which caibridge refuses
 * when a folder above it is group-writable. */
static inline const char *cuda_double_path(void)
{
    static char path[4096];
    const char *dir = getenv("CAIBRIDGE_TEST_DOUBLES");

    if (path[0] == '\0') {
        if (dir != NULL && dir[0] != '\0')
            snprintf(path, sizeof path, "%s/libcudart-double.so", dir);
        else
            snprintf(path, sizeof path, "%s",
                     CUDART_DOUBLE_DIR "/" LT_OBJDIR "libcudart-double.so");
    }
    return path;
}
#define CUDART_DOUBLE_PATH cuda_double_path()

/* Opens the double (the same instance caibridge loads) for its controls. */
static inline const struct cudart_double *open_double(void)
{
    const struct cudart_double *(*controls)(void);
    void *handle = dlopen(CUDART_DOUBLE_PATH, RTLD_NOW | RTLD_LOCAL);
    void *symbol;

    if (handle == NULL)
        bail("cannot load the CUDA runtime double: %s", dlerror());
    symbol = dlsym(handle, "cudart_double_controls");
    if (symbol == NULL)
        bail("%s has no cudart_double_controls", CUDART_DOUBLE_PATH);
    memcpy(&controls, &symbol, sizeof symbol);
    return controls();
}

/* Makes caibridge load the double at its first CUDA call. */
static inline const struct cudart_double *use_double(void)
{
    if (setenv("CAIBRIDGE_CUDART", CUDART_DOUBLE_PATH, 1) != 0)
        bail("cannot set CAIBRIDGE_CUDART");
    /* The call-log checks expect an event made and destroyed per
     * hand-over: the event pool is off unless a test turns it on. */
    if (setenv("CAIBRIDGE_EVENT_POOL", "0", 0) != 0)
        bail("cannot set CAIBRIDGE_EVENT_POOL");
    return open_double();
}

/* How many times needle occurs in haystack. */
static inline int occurrences(const char *haystack, const char *needle)
{
    int n = 0;

    while ((haystack = strstr(haystack, needle)) != NULL) {
        n++;
        haystack += strlen(needle);
    }
    return n;
}

/* Whether each of the size bytes at buf is value. */
static inline int all_bytes(const unsigned char *buf, size_t size, int value)
{
    size_t i;

    for (i = 0; i < size; i++)
        if (buf[i] != value)
            return 0;
    return 1;
}

/* Two stream handles the double only compares. */
#define PRODUCER_STREAM ((intptr_t)0x5000)
#define CONSUMER_STREAM ((intptr_t)0x6000)

/* A reset double with the two streams above on device 0's primary
 * context. */
static inline void reset_with_streams(const struct cudart_double *cuda)
{
    cuda->reset();
    cuda->add_stream(PRODUCER_STREAM, 0);
    cuda->add_stream(CONSUMER_STREAM, 0);
}

/* A producer of 4 elements (data NULL) in memory of type on device, with
 * stream (0: none): what the ordering and fence calls read. */
static inline cai_desc_t producer(intptr_t stream, DLDeviceType type,
                                  int device)
{
    cai_desc_t desc;

    memset(&desc, 0, sizeof desc);
    desc.ndim = 1;
    desc.shape[0] = 4;
    desc.has_stream = stream != 0;
    desc.stream = stream;
    desc.device.device_type = type;
    desc.device.device_id = device;
    return desc;
}

/* Runs fn(arg) to its end on a new thread, one that never used CUDA. */
static inline void run_on_new_thread(void *(*fn)(void *), void *arg)
{
    pthread_t thread;

    if (pthread_create(&thread, NULL, fn, arg) != 0)
        bail("cannot start a thread");
    pthread_join(thread, NULL);
}

static int host_owner_released;

static inline void release_host_owner(void *owner)
{
    (void)owner;
    host_owner_released++;
}

/* A host array converts to DLPack whatever CUDA does (2 assertions). */
static inline void check_host_conversion(const char *when)
{
    static float values[6] = {1, 2, 3, 4, 5, 6};
    DLManagedTensorVersioned *tensor = NULL;
    cai_desc_t desc;
    cai_error_t err;
    int rc;

    float_desc(&desc, values, 2, 2, 3);
    host_owner_released = 0;
    rc = cai_desc_to_dlpack_versioned(&desc, 0, values, release_host_owner,
                                      &tensor, &err);
    is_int(CAI_OK, rc, "%s: host array converts to DLPack (%s)", when,
           rc == 0 ? "ok" : err.message);
    if (rc == 0 && tensor != NULL) {
        ok(tensor->dl_tensor.device.device_type == kDLCPU &&
               tensor->dl_tensor.data == values &&
               tensor->dl_tensor.shape[1] == 3,
           "%s: the tensor views the host array", when);
        tensor->deleter(tensor);
    } else {
        ok(0, "%s: the tensor views the host array", when);
    }
}

/*
 * Every call that needs a GPU fails with CAI_ENOCUDA and a message holding
 * needle, while an ordering that needs no CUDA call still succeeds (13
 * assertions).  The runtime version needs no driver: it is expected to work
 * when runtime_loads, and to fail like the rest otherwise.
 */
static inline void check_cuda_unavailable(const char *needle, const char *when,
                                          int runtime_loads)
{
    static char device_memory[16];
    cai_desc_t producer;
    DLDevice device;
    cai_error_t err;
    int version = -1, rc;

    rc = cai_cuda_runtime_version(&version, &err);
    if (runtime_loads) {
        is_int(CAI_OK, rc, "%s: runtime version: needs no driver", when);
        ok(version >= 11000, "%s: runtime version: %d", when, version);
        is_string("", err.message, "%s: runtime version: no error left", when);
    } else {
        is_int(CAI_ENOCUDA, rc, "%s: runtime version: CAI_ENOCUDA", when);
        contains(err.message, needle,
                 "%s: runtime version: the message says why", when);
        is_int(0, version, "%s: runtime version: 0 written", when);
    }

    rc = cai_cuda_locate(device_memory, &device, &err);
    is_int(CAI_ENOCUDA, rc, "%s: locate: CAI_ENOCUDA", when);
    contains(err.message, needle, "%s: locate: the message says why", when);
    is_string("data", err.field, "%s: locate: field is data", when);

    rc = cai_cuda_locate(NULL, &device, &err);
    is_int(CAI_ENOCUDA, rc, "%s: locate NULL: CAI_ENOCUDA", when);

    memset(&producer, 0, sizeof producer);
    producer.device.device_type = kDLCUDA;
    producer.has_stream = 1;
    producer.stream = 0x5000;
    rc = cai_cuda_order(&producer, 0x6000, &err);
    is_int(CAI_ENOCUDA, rc, "%s: order two streams: CAI_ENOCUDA", when);
    contains(err.message, needle, "%s: order: the message says why", when);

    rc = cai_cuda_stream_synchronize(0x5000, &err);
    is_int(CAI_ENOCUDA, rc, "%s: synchronize: CAI_ENOCUDA", when);
    contains(err.message, needle, "%s: synchronize: the message says why",
             when);

    producer.has_stream = 0;
    rc = cai_cuda_order(&producer, 0x6000, &err);
    is_int(CAI_OK, rc,
           "%s: order without a producer stream needs no CUDA: "
           "success",
           when);
    rc = cai_cuda_order(&producer, 0, &err);
    is_int(CAI_EINVAL, rc, "%s: stream 0 is still refused as such", when);
}

#endif
