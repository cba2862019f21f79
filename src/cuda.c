/*
 * CUDA access: where a pointer lives, and stream-ordered hand-over.
 *
 * The CUDA runtime is looked up and loaded at first use, never linked, so the
 * library works for host memory on machines with no CUDA at all, and a
 * process that already runs a CUDA runtime (PyTorch's, CuPy's) shares it.
 * The toolkit headers are used for types and constants only; every call goes
 * through a pointer resolved with dlsym.
 */
#define _GNU_SOURCE /* dl_iterate_phdr, RTLD_NOLOAD, secure_getenv */
#include "config.h"

#include "internal.h"

/* Stream arguments shared by both builds: they need no CUDA to check. */
static int check_stream_value(intptr_t stream, const char *whose,
                              cai_error_t *err)
{
    if (stream == 0)
        return cai_fail(err, CAI_EINVAL, "stream",
                        "%sstream = 0 is disallowed by DLPack and CAI v3 "
                        "(ambiguous between the legacy and per-thread "
                        "default streams); use 1 (legacy), 2 (per-thread) "
                        "or a stream handle", whose);
    if (stream < CAI_STREAM_NO_SYNC)
        return cai_fail(err, CAI_EINVAL, "stream",
                        "%sstream = %lld is not a stream: -1 means no "
                        "synchronization, 1 and 2 the default streams, "
                        "other values are cudaStream_t handles",
                        whose, (long long)stream);
    return 0;
}

#ifndef HAVE_CUDA

static int no_cuda(const char *field, cai_error_t *err)
{
    return cai_fail(err, CAI_ENOCUDA, field,
                    "caibridge was built without CUDA support "
                    "(configured --without-cuda or without the CUDA "
                    "toolkit headers)");
}

int cai_cuda_built(void)
{
    return 0;
}

int cai_cuda_runtime_version(int *version, cai_error_t *err)
{
    *version = 0;
    return no_cuda("", err);
}

int cai_cuda_locate(const void *ptr, DLDevice *out, cai_error_t *err)
{
    (void)ptr;
    out->device_type = (DLDeviceType)0;
    out->device_id = 0;
    return no_cuda("data", err);
}

static int order_with_event(const cai_desc_t *producer,
                            intptr_t consumer_stream, cai_error_t *err)
{
    (void)producer;
    (void)consumer_stream;
    return no_cuda("stream", err);
}

static int synchronize(intptr_t stream, cai_error_t *err)
{
    (void)stream;
    return no_cuda("stream", err);
}

#else /* HAVE_CUDA */

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

/* Pointer attributes changed layout in CUDA 11.0 (memoryType and isManaged
 * were removed), so older runtimes would be misread. */
#define OLDEST_RUNTIME 11000

/* The runtime's entry points.  cudaSetDevice is there because an event can
 * only be recorded on a stream of the device it was created on: for a
 * producer on another device than the current one, the event is created,
 * recorded and waited for with that device current, then the caller's device
 * is restored.  cudaGetLastError is there because our failed calls would
 * otherwise leave their error behind, and the host framework's next kernel
 * launch check would report it as its own. */
struct cudart {
    cudaError_t(CUDARTAPI *pointer_get_attributes)(
        struct cudaPointerAttributes *, const void *);
    cudaError_t(CUDARTAPI *get_device)(int *);
    cudaError_t(CUDARTAPI *set_device)(int);
    cudaError_t(CUDARTAPI *event_create_with_flags)(cudaEvent_t *, unsigned);
    cudaError_t(CUDARTAPI *event_record)(cudaEvent_t, cudaStream_t);
    cudaError_t(CUDARTAPI *stream_wait_event)(cudaStream_t, cudaEvent_t,
                                              unsigned);
    cudaError_t(CUDARTAPI *event_destroy)(cudaEvent_t);
    cudaError_t(CUDARTAPI *stream_synchronize)(cudaStream_t);
    const char *(CUDARTAPI *get_error_string)(cudaError_t);
    cudaError_t(CUDARTAPI *runtime_get_version)(int *);
    cudaError_t(CUDARTAPI *get_last_error)(void);
};

#define ENTRY_POINT(name, field) {name, offsetof(struct cudart, field)}
static const struct {
    const char *name;
    size_t offset;
} entry_points[] = {
    ENTRY_POINT("cudaPointerGetAttributes", pointer_get_attributes),
    ENTRY_POINT("cudaGetDevice", get_device),
    ENTRY_POINT("cudaSetDevice", set_device),
    ENTRY_POINT("cudaEventCreateWithFlags", event_create_with_flags),
    ENTRY_POINT("cudaEventRecord", event_record),
    ENTRY_POINT("cudaStreamWaitEvent", stream_wait_event),
    ENTRY_POINT("cudaEventDestroy", event_destroy),
    ENTRY_POINT("cudaStreamSynchronize", stream_synchronize),
    ENTRY_POINT("cudaGetErrorString", get_error_string),
    ENTRY_POINT("cudaRuntimeGetVersion", runtime_get_version),
    ENTRY_POINT("cudaGetLastError", get_last_error),
};

/* Written once under pthread_once, read-only afterwards. */
static struct cudart runtime;
static int runtime_version;
static char runtime_problem[sizeof ((cai_error_t *)0)->message];
static pthread_once_t runtime_once = PTHREAD_ONCE_INIT;

/* Says why loading failed; long paths are cut short, not overflowed. */
static void CAI_PRINTF(1, 2) set_problem(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(runtime_problem, sizeof runtime_problem, fmt, ap);
    va_end(ap);
}

/* Fills runtime from handle; on failure says why in runtime_problem. */
static int bind_runtime(void *handle, const char *what)
{
    size_t i;
    cudaError_t rc;

    for (i = 0; i < sizeof entry_points / sizeof *entry_points; i++) {
        void *symbol = dlsym(handle, entry_points[i].name);

        if (symbol == NULL) {
            set_problem("%s is not a usable CUDA runtime: it has no %s",
                        what, entry_points[i].name);
            return -1;
        }
        /* POSIX guarantees a function pointer fits in a void *. */
        memcpy((char *)&runtime + entry_points[i].offset, &symbol,
               sizeof symbol);
    }
    rc = runtime.runtime_get_version(&runtime_version);
    if (rc != cudaSuccess) {
        set_problem("%s: cudaRuntimeGetVersion failed with CUDA error %d",
                    what, (int)rc);
        return -1;
    }
    if (runtime_version < OLDEST_RUNTIME) {
        set_problem("%s is CUDA runtime %d.%d; caibridge needs 11.0 or newer",
                    what, runtime_version / 1000, runtime_version % 1000 / 10);
        return -1;
    }
    return 0;
}

/* Catches pip wheels' hashed names (libcudart-1a2b3c4d.so.12) as well as
 * the toolkit's (libcudart.so.13). */
static int is_cudart_path(const char *path)
{
    const char *base = strrchr(path, '/');

    base = base != NULL ? base + 1 : path;
    return strncmp(base, "libcudart", 9) == 0 &&
           (base[9] == '.' || base[9] == '-');
}

static int find_loaded_cudart(struct dl_phdr_info *info, size_t size,
                              void *found)
{
    (void)size;
    if (info->dlpi_name == NULL || !is_cudart_path(info->dlpi_name))
        return 0;
    snprintf(found, PATH_MAX, "%s", info->dlpi_name);
    return 1;
}

static const char *environment(const char *name)
{
#if defined(__GLIBC__)
    /* A setuid program must not load a library its caller names. */
    return secure_getenv(name);
#else
    return getenv(name);
#endif
}

static int load_from(const char *file, int flags, const char *what)
{
    void *handle = dlopen(file, flags);

    if (handle == NULL) {
        const char *why = dlerror();

        set_problem("%s could not be loaded: %s", what,
                    why != NULL ? why : "unknown dlopen error");
        return -1;
    }
    if (bind_runtime(handle, what) != 0) {
        dlclose(handle);
        return -1;
    }
    /* Kept for the life of the process: callers hold its events and state. */
    return 0;
}

/* The order: CAIBRIDGE_CUDART, a runtime already in the process, then the
 * one configure found. */
static void load_runtime(void)
{
    const char *chosen = environment("CAIBRIDGE_CUDART");
    char loaded[PATH_MAX] = "";
    char what[PATH_MAX + 32];
    char first_problem[sizeof runtime_problem] = "";
    char last_problem[sizeof runtime_problem];

    if (chosen != NULL && chosen[0] != '\0') {
        snprintf(what, sizeof what, "CAIBRIDGE_CUDART=%s", chosen);
        if (load_from(chosen, RTLD_NOW | RTLD_LOCAL, what) != 0)
            memset(&runtime, 0, sizeof runtime);
        return;
    }
    if (dl_iterate_phdr(find_loaded_cudart, loaded) != 0) {
        if (load_from(loaded, RTLD_NOW | RTLD_NOLOAD, loaded) == 0)
            return;
        snprintf(first_problem, sizeof first_problem, "%s", runtime_problem);
    }
    if (load_from(CAI_CUDART_SONAME, RTLD_NOW | RTLD_LOCAL,
                  CAI_CUDART_SONAME) == 0)
        return;
    memset(&runtime, 0, sizeof runtime);
    snprintf(last_problem, sizeof last_problem, "%s", runtime_problem);
    if (first_problem[0] != '\0')
        set_problem("%s; and %s", first_problem, last_problem);
    else
        set_problem("no CUDA runtime: CAIBRIDGE_CUDART is unset, none is "
                    "loaded in the process, and %s", last_problem);
}

static int runtime_ready(const char *field, cai_error_t *err)
{
    pthread_once(&runtime_once, load_runtime);
    if (CAI_UNLIKELY(runtime.get_error_string == NULL))
        return cai_fail(err, CAI_ENOCUDA, field, "%s", runtime_problem);
    return 0;
}

/* Errors that mean "no usable driver or device here", as opposed to a call
 * that failed on a working GPU. */
static int means_no_driver(cudaError_t rc)
{
    switch (rc) {
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoDevice:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
        return 1;
    default:
        return 0;
    }
}

static int cuda_fail(cai_error_t *err, const char *field, const char *call,
                     cudaError_t rc)
{
    const char *text = runtime.get_error_string(rc);
    int status = means_no_driver(rc) ? CAI_ENOCUDA : CAI_ECUDA;

    runtime.get_last_error(); /* reported here; do not leave it behind */
    return cai_fail(err, status, field, "%s failed: %s (CUDA error %d)%s",
                    call, text != NULL ? text : "no description", (int)rc,
                    status == CAI_ENOCUDA
                        ? "; no usable CUDA driver or device" : "");
}

int cai_cuda_built(void)
{
    return 1;
}

int cai_cuda_runtime_version(int *version, cai_error_t *err)
{
    int rc;

    *version = 0;
    rc = runtime_ready("", err);
    if (rc != 0)
        return rc;
    *version = runtime_version;
    cai_ok(err);
    return 0;
}

int cai_cuda_locate(const void *ptr, DLDevice *out, cai_error_t *err)
{
    /* Room for attribute structs of runtimes newer than our headers. */
    union {
        struct cudaPointerAttributes attributes;
        unsigned char room[256];
    } a;
    cudaError_t rc;
    int device, status;

    out->device_type = (DLDeviceType)0;
    out->device_id = 0;
    status = runtime_ready("data", err);
    if (status != 0)
        return status;

    if (ptr == NULL) {
        /* A zero-size array has no pointer to ask about. */
        rc = runtime.get_device(&device);
        if (rc != cudaSuccess)
            return cuda_fail(err, "data", "cudaGetDevice", rc);
        out->device_type = kDLCUDA;
        out->device_id = device;
        cai_ok(err);
        return 0;
    }

    memset(&a, 0, sizeof a);
    rc = runtime.pointer_get_attributes(&a.attributes, ptr);
    if (rc != cudaSuccess)
        return cuda_fail(err, "data", "cudaPointerGetAttributes", rc);
    switch (a.attributes.type) {
    case cudaMemoryTypeDevice:
        if (a.attributes.device < 0)
            return cai_fail(err, CAI_ECUDA, "data",
                            "cudaPointerGetAttributes says data = %p is "
                            "device memory on device %d", ptr,
                            a.attributes.device);
        out->device_type = kDLCUDA;
        out->device_id = a.attributes.device;
        break;
    case cudaMemoryTypeHost:
        out->device_type = kDLCUDAHost;
        break;
    case cudaMemoryTypeManaged:
        out->device_type = kDLCUDAManaged;
        break;
    case cudaMemoryTypeUnregistered:
        return cai_fail(err, CAI_EUNSUPPORTED, "data",
                        "data = %p is host memory not registered with CUDA; "
                        "the CUDA Array Interface needs memory a device can "
                        "access (device, pinned or managed)", ptr);
    default:
        return cai_fail(err, CAI_EUNSUPPORTED, "data",
                        "cudaPointerGetAttributes says data = %p has memory "
                        "type %d, which caibridge does not know", ptr,
                        (int)a.attributes.type);
    }
    cai_ok(err);
    return 0;
}

/* Stream values 1 and 2 are the runtime's own handles cudaStreamLegacy and
 * cudaStreamPerThread, so they pass through unchanged; 0 never gets here. */
static cudaStream_t stream_handle(intptr_t stream)
{
    return (cudaStream_t)stream;
}

static int order_with_event(const cai_desc_t *producer,
                            intptr_t consumer_stream, cai_error_t *err)
{
    const char *failed_call = NULL;
    cudaError_t rc = cudaSuccess, cleanup_rc;
    cudaEvent_t event;
    int current = 0, switched = 0, status;

    status = runtime_ready("stream", err);
    if (status != 0)
        return status;

    /* The event must belong to the producer's device.  Default-stream
     * handles (1, 2) then also name that device's streams, which is where
     * the data is and so where a DLPack consumer means its stream to be. */
    if (producer->device.device_type == kDLCUDA) {
        rc = runtime.get_device(&current);
        if (rc != cudaSuccess)
            return cuda_fail(err, "stream", "cudaGetDevice", rc);
        if (current != producer->device.device_id) {
            rc = runtime.set_device(producer->device.device_id);
            if (rc != cudaSuccess)
                return cuda_fail(err, "stream", "cudaSetDevice", rc);
            switched = 1;
        }
    }

    rc = runtime.event_create_with_flags(&event, cudaEventDisableTiming);
    if (rc != cudaSuccess) {
        failed_call = "cudaEventCreateWithFlags";
    } else {
        rc = runtime.event_record(event, stream_handle(producer->stream));
        if (rc != cudaSuccess) {
            failed_call = "cudaEventRecord";
        } else {
            rc = runtime.stream_wait_event(stream_handle(consumer_stream),
                                           event, 0);
            if (rc != cudaSuccess)
                failed_call = "cudaStreamWaitEvent";
        }
        /* Safe right after the wait is queued: the runtime frees the event
         * once it has completed. */
        cleanup_rc = runtime.event_destroy(event);
        if (failed_call == NULL && cleanup_rc != cudaSuccess) {
            rc = cleanup_rc;
            failed_call = "cudaEventDestroy";
        }
    }
    if (switched) {
        cleanup_rc = runtime.set_device(current);
        if (failed_call == NULL && cleanup_rc != cudaSuccess) {
            rc = cleanup_rc;
            failed_call = "cudaSetDevice";
        }
    }
    if (failed_call != NULL)
        return cuda_fail(err, "stream", failed_call, rc);
    cai_ok(err);
    return 0;
}

static int synchronize(intptr_t stream, cai_error_t *err)
{
    cudaError_t rc;
    int status = runtime_ready("stream", err);

    if (status != 0)
        return status;
    rc = runtime.stream_synchronize(stream_handle(stream));
    if (rc != cudaSuccess)
        return cuda_fail(err, "stream", "cudaStreamSynchronize", rc);
    cai_ok(err);
    return 0;
}

#endif /* HAVE_CUDA */

int cai_cuda_order(const cai_desc_t *producer, intptr_t consumer_stream,
                   cai_error_t *err)
{
    int rc = check_stream_value(consumer_stream, "consumer ", err);

    if (rc != 0)
        return rc;
    /* CAI v3, Synchronization: no stream, no ordering; and -1 is the
     * consumer saying it orders the work itself. */
    if (!producer->has_stream || consumer_stream == CAI_STREAM_NO_SYNC) {
        cai_ok(err);
        return 0;
    }
    rc = check_stream_value(producer->stream, "producer ", err);
    if (rc != 0)
        return rc;
    if (producer->stream == CAI_STREAM_NO_SYNC)
        return cai_fail(err, CAI_EINVAL, "stream",
                        "producer stream = -1 is not a stream: CAI v3 gives "
                        "None, 1, 2 or a cudaStream_t handle");
    /* Work on one stream is already in order. */
    if (producer->stream == consumer_stream) {
        cai_ok(err);
        return 0;
    }
    return order_with_event(producer, consumer_stream, err);
}

int cai_cuda_stream_synchronize(intptr_t stream, cai_error_t *err)
{
    int rc = check_stream_value(stream, "", err);

    if (rc != 0)
        return rc;
    if (stream == CAI_STREAM_NO_SYNC) {
        cai_ok(err);
        return 0;
    }
    return synchronize(stream, err);
}
