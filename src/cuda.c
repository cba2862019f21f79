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

#include <stdlib.h>

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

static int is_default_stream(intptr_t stream)
{
    return stream == CAI_STREAM_LEGACY || stream == CAI_STREAM_PER_THREAD;
}

/* Checks the producer's stream; 1 when there is something to order, 0
 * (err cleared) when not.  Reads has_stream and stream only. */
static int producer_needs_order(const cai_desc_t *producer, cai_error_t *err)
{
    int rc;

    if (!producer->has_stream)
        return cai_ok(err);
    rc = check_stream_value(producer->stream, "producer ", err);
    if (rc != 0)
        return rc;
    if (producer->stream == CAI_STREAM_NO_SYNC)
        return cai_fail(err, CAI_EINVAL, "stream",
                        "producer stream = -1 is not a stream: CAI v3 gives "
                        "None, 1, 2 or a cudaStream_t handle");
    return 1;
}

static int consumer_waits(const cai_fence_t *fence, intptr_t consumer_stream,
                          cai_error_t *err);

intptr_t cai_cuda_stream_from_handle(uintptr_t handle)
{
    return handle == 0 ? CAI_STREAM_LEGACY : (intptr_t)handle;
}

#ifndef HAVE_CUDA

static int no_cuda(const char *field, cai_error_t *err)
{
    return cai_fail(err, CAI_ENOCUDA, field,
                    "caibridge was built without CUDA support "
                    "(configured --without-cuda or without the CUDA "
                    "toolkit headers)");
}

/* Never made without CUDA; declared so the API links. */
struct cai_fence {
    intptr_t stream;
};

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

int cai_cuda_locate_desc(const cai_desc_t *desc, DLDevice *out,
                         cai_error_t *err)
{
    return cai_cuda_locate(desc->data, out, err);
}

static int record_fence(const cai_desc_t *producer, cai_fence_t **out,
                        cai_error_t *err)
{
    (void)producer;
    *out = NULL;
    return no_cuda("stream", err);
}

static int wait_fence(const cai_fence_t *fence, intptr_t consumer,
                      cai_error_t *err)
{
    (void)fence;
    (void)consumer;
    return no_cuda("stream", err);
}

static int order_now(const cai_desc_t *producer, intptr_t consumer,
                     cai_error_t *err)
{
    (void)producer;
    (void)consumer;
    return no_cuda("stream", err);
}

static int synchronize(intptr_t stream, cai_error_t *err)
{
    (void)stream;
    return no_cuda("stream", err);
}

int cai_fence_synchronize(const cai_fence_t *fence, cai_error_t *err)
{
    (void)fence;
    return cai_ok(err);
}

int cai_fence_release(const cai_fence_t *fence, intptr_t consumer_stream,
                      cai_error_t *err)
{
    int rc = check_stream_value(consumer_stream, "consumer ", err);

    (void)fence; /* never made without CUDA */
    if (rc == 0)
        cai_ok(err);
    return rc;
}

int cai_fence_destroy(cai_fence_t *fence, cai_error_t *err)
{
    free(fence);
    return cai_ok(err);
}

#else /* HAVE_CUDA */

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

/* Pointer attributes changed layout in CUDA 11.0 (memoryType and isManaged
 * were removed), so older runtimes would be misread. */
#define OLDEST_RUNTIME 11000
/* cudaEventWaitExternal, for waits inside a graph capture. */
#define EXTERNAL_WAIT_RUNTIME 11010

/* The runtime's entry points.  cudaSetDevice makes the data's device
 * current for the default streams 1 and 2 (the caller's context is put
 * back with the driver).  cudaGetLastError clears an error caibridge
 * caused and reported; cudaPeekAtLastError first tells whether one was
 * already pending, which is then left alone.  cudaDriverGetVersion tells
 * "no driver" from "driver too old". */
struct cudart {
    cudaError_t(CUDARTAPI *pointer_get_attributes)(
        struct cudaPointerAttributes *, const void *);
    cudaError_t(CUDARTAPI *get_device)(int *);
    cudaError_t(CUDARTAPI *set_device)(int);
    cudaError_t(CUDARTAPI *device_get_attribute)(int *, enum cudaDeviceAttr,
                                                 int);
    cudaError_t(CUDARTAPI *event_create_with_flags)(cudaEvent_t *, unsigned);
    cudaError_t(CUDARTAPI *event_record)(cudaEvent_t, cudaStream_t);
    cudaError_t(CUDARTAPI *stream_wait_event)(cudaStream_t, cudaEvent_t,
                                              unsigned);
    cudaError_t(CUDARTAPI *event_synchronize)(cudaEvent_t);
    cudaError_t(CUDARTAPI *event_destroy)(cudaEvent_t);
    cudaError_t(CUDARTAPI *stream_synchronize)(cudaStream_t);
    cudaError_t(CUDARTAPI *stream_is_capturing)(
        cudaStream_t, enum cudaStreamCaptureStatus *);
    const char *(CUDARTAPI *get_error_string)(cudaError_t);
    cudaError_t(CUDARTAPI *runtime_get_version)(int *);
    cudaError_t(CUDARTAPI *driver_get_version)(int *);
    cudaError_t(CUDARTAPI *get_last_error)(void);
    cudaError_t(CUDARTAPI *peek_at_last_error)(void);
};

#define ENTRY_POINT(name, field) {name, offsetof(struct cudart, field)}
static const struct entry_point {
    const char *name;
    size_t offset;
} entry_points[] = {
    ENTRY_POINT("cudaPointerGetAttributes", pointer_get_attributes),
    ENTRY_POINT("cudaGetDevice", get_device),
    ENTRY_POINT("cudaSetDevice", set_device),
    ENTRY_POINT("cudaDeviceGetAttribute", device_get_attribute),
    ENTRY_POINT("cudaEventCreateWithFlags", event_create_with_flags),
    ENTRY_POINT("cudaEventRecord", event_record),
    ENTRY_POINT("cudaStreamWaitEvent", stream_wait_event),
    ENTRY_POINT("cudaEventSynchronize", event_synchronize),
    ENTRY_POINT("cudaEventDestroy", event_destroy),
    ENTRY_POINT("cudaStreamSynchronize", stream_synchronize),
    ENTRY_POINT("cudaStreamIsCapturing", stream_is_capturing),
    ENTRY_POINT("cudaGetErrorString", get_error_string),
    ENTRY_POINT("cudaRuntimeGetVersion", runtime_get_version),
    ENTRY_POINT("cudaDriverGetVersion", driver_get_version),
    ENTRY_POINT("cudaGetLastError", get_last_error),
    ENTRY_POINT("cudaPeekAtLastError", peek_at_last_error),
};

/* The driver's entry points: the exact current context (NULL included) is
 * saved and put back, and a stream's own context found, which the runtime
 * cannot do without side effects. */
struct cudriver {
    CUresult(CUDAAPI *init)(unsigned);
    CUresult(CUDAAPI *ctx_get_current)(CUcontext *);
    CUresult(CUDAAPI *ctx_set_current)(CUcontext);
    CUresult(CUDAAPI *ctx_get_device)(CUdevice *);
    CUresult(CUDAAPI *stream_get_ctx)(CUstream, CUcontext *);
    CUresult(CUDAAPI *pointer_get_attribute)(void *, CUpointer_attribute,
                                             CUdeviceptr);
};

#define DRIVER_ENTRY_POINT(name, field) {name, offsetof(struct cudriver, field)}
static const struct entry_point driver_entry_points[] = {
    DRIVER_ENTRY_POINT("cuInit", init),
    DRIVER_ENTRY_POINT("cuCtxGetCurrent", ctx_get_current),
    DRIVER_ENTRY_POINT("cuCtxSetCurrent", ctx_set_current),
    DRIVER_ENTRY_POINT("cuCtxGetDevice", ctx_get_device),
    DRIVER_ENTRY_POINT("cuStreamGetCtx", stream_get_ctx),
    DRIVER_ENTRY_POINT("cuPointerGetAttribute", pointer_get_attribute),
};

/* Written once under pthread_once, read-only afterwards. */
static struct cudart runtime;
static void *runtime_handle;
static int runtime_version;
static char runtime_problem[sizeof ((cai_error_t *)0)->message];
static pthread_once_t runtime_once = PTHREAD_ONCE_INIT;
static struct cudriver driver; /* all NULL: no driver, so no context */
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

/* Set in a child forked after the runtime was loaded: CUDA cannot be used
 * there, and says only "initialization error". */
static volatile int forked_after_load;

/* Says why loading failed; long paths are cut short, not overflowed. */
static void CAI_PRINTF(1, 2) set_problem(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(runtime_problem, sizeof runtime_problem, fmt, ap);
    va_end(ap);
}

static int bind_all(void *handle, const struct entry_point *points,
                    size_t count, void *table, const char **missing)
{
    size_t i;

    for (i = 0; i < count; i++) {
        void *symbol = dlsym(handle, points[i].name);

        if (symbol == NULL) {
            *missing = points[i].name;
            return -1;
        }
        /* POSIX guarantees a function pointer fits in a void *. */
        memcpy((char *)table + points[i].offset, &symbol, sizeof symbol);
    }
    return 0;
}

/* Fills runtime from handle; on failure says why in runtime_problem. */
static int bind_runtime(void *handle, const char *what)
{
    const char *missing = NULL;
    cudaError_t rc;

    if (bind_all(handle, entry_points, sizeof entry_points /
                 sizeof *entry_points, &runtime, &missing) != 0) {
        set_problem("%s is not a usable CUDA runtime: it has no %s", what,
                    missing);
        return -1;
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

/* 0 when bound; -1 with the reason in runtime_problem. */
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
    runtime_handle = handle;
    return 0;
}

/* The runtime majors the headers' layout serves, newest first: a CUDA 13
 * build still runs on a 12.x driver through a libcudart.so.12. */
static void load_by_soname(char *problems, size_t size)
{
    int major, driver_version = 0;
    size_t used = 0;

    for (major = CUDART_VERSION / 1000; major >= OLDEST_RUNTIME / 1000;
         major--) {
        char soname[32];

        snprintf(soname, sizeof soname, "libcudart.so.%d", major);
        if (load_from(soname, RTLD_NOW | RTLD_LOCAL, soname) != 0) {
            /* Only the first reason: the older ones say the same. */
            if (used == 0)
                used = (size_t)snprintf(problems, size, "%s",
                                        runtime_problem);
            continue;
        }
        if (runtime.driver_get_version(&driver_version) == cudaSuccess &&
            driver_version > 0 &&
            driver_version / 1000 < runtime_version / 1000) {
            /* Driver too old for this runtime: try an older one. */
            if (used < size)
                used += (size_t)snprintf(
                    problems + used, size - used,
                    "%sthe CUDA driver (%d.%d) is too old for %s (%d.%d)",
                    used > 0 ? "; " : "", driver_version / 1000,
                    driver_version % 1000 / 10, soname,
                    runtime_version / 1000, runtime_version % 1000 / 10);
            dlclose(runtime_handle);
            runtime_handle = NULL;
            memset(&runtime, 0, sizeof runtime);
            continue;
        }
        return; /* no driver at all is reported at the first call */
    }
    memset(&runtime, 0, sizeof runtime);
    set_problem("%s", problems);
}

static void note_fork(void)
{
    forked_after_load = 1;
}

/* The order: CAIBRIDGE_CUDART, a runtime already in the process, then the
 * supported sonames, newest first. */
static void load_runtime(void)
{
    const char *chosen = environment("CAIBRIDGE_CUDART");
    char loaded[PATH_MAX] = "";
    char what[PATH_MAX + 32];
    char first_problem[sizeof runtime_problem] = "";
    char problems[sizeof runtime_problem] = "";

    pthread_atfork(NULL, NULL, note_fork);
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
    load_by_soname(problems, sizeof problems);
    if (runtime.get_error_string != NULL)
        return;
    if (first_problem[0] != '\0')
        set_problem("%s; and %s", first_problem, problems);
    else
        set_problem("no CUDA runtime: CAIBRIDGE_CUDART is unset, none is "
                    "loaded in the process, and %s", problems);
}

static int runtime_ready(const char *field, cai_error_t *err)
{
    pthread_once(&runtime_once, load_runtime);
    if (CAI_UNLIKELY(runtime.get_error_string == NULL))
        return cai_fail(err, CAI_ENOCUDA, field, "%s", runtime_problem);
    return 0;
}

/* The driver comes from the runtime's own file when it has the entry points
 * (the test double does), else from libcuda.so.1.  Without it there is no
 * CUDA context to protect, and the runtime's calls report the problem. */
static void load_driver(void)
{
    struct cudriver table;
    const char *missing = NULL;
    void *handle = runtime_handle;

    if (handle == NULL || dlsym(handle, "cuCtxGetCurrent") == NULL)
        handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL)
        return;
    memset(&table, 0, sizeof table);
    if (bind_all(handle, driver_entry_points, sizeof driver_entry_points /
                 sizeof *driver_entry_points, &table, &missing) != 0)
        return;
    /* cuInit creates no context; a stub or broken driver leaves us with
     * the runtime's calls, which say what is wrong. */
    if (table.init(0) != CUDA_SUCCESS)
        return;
    driver = table;
}

static int have_driver(void)
{
    pthread_once(&driver_once, load_driver);
    return driver.ctx_get_current != NULL;
}

/* Errors that mean "no usable driver or device here", as opposed to a call
 * that failed on a working GPU. */
static int means_no_driver(int rc)
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

/* Errors that stay on the context once a kernel caused them: every later
 * call returns them, whatever it was. */
static int is_sticky(int rc)
{
    switch (rc) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
        return 1;
    default:
        return 0;
    }
}

/*
 * One caibridge operation: its first failed call, a failed restore of the
 * caller's context, and the error that was pending before it started.
 */
struct op {
    const char *field;
    const char *call;
    int rc;
    const char *restore_call;
    int restore_rc;
    cudaError_t pending;
    CUcontext saved; /* the caller's context */
    CUcontext now;   /* the one current now */
    int have_saved, switched;
    /* Without a driver (so without contexts to put back): the device. */
    int device_before, device_switched;
};

static int op_begin(struct op *op, const char *field, cai_error_t *err)
{
    int status = runtime_ready(field, err);

    memset(op, 0, sizeof *op);
    op->field = field;
    if (status != 0)
        return status;
    op->pending = runtime.peek_at_last_error();
    return 0;
}

static int op_failed(struct op *op, const char *call, int rc)
{
    if (op->call == NULL && rc != CUDA_SUCCESS) {
        op->call = call;
        op->rc = rc;
    }
    return rc != CUDA_SUCCESS;
}

/* Why the driver says "no": the version it reports, 0 when none. */
static void describe_driver(char *out, size_t size)
{
    int version = 0;

    if (runtime.driver_get_version(&version) != cudaSuccess || version == 0)
        snprintf(out, size, " (no CUDA driver is installed or loadable)");
    else if (version / 1000 < runtime_version / 1000 ||
             version < runtime_version)
        snprintf(out, size, " (driver %d.%d, older than runtime %d.%d)",
                 version / 1000, version % 1000 / 10, runtime_version / 1000,
                 runtime_version % 1000 / 10);
    else
        out[0] = '\0';
}

/* Reports the operation's outcome in err. */
static int op_end(struct op *op, cai_error_t *err)
{
    char restore[112] = "", hint[120] = "";
    const char *text;
    int status;

    if (op->call == NULL && op->restore_call == NULL)
        return cai_ok(err);
    if (op->call == NULL) {
        op->call = op->restore_call;
        op->rc = op->restore_rc;
        op->restore_call = NULL;
    }
    status = means_no_driver(op->rc) ? CAI_ENOCUDA : CAI_ECUDA;
    text = runtime.get_error_string((cudaError_t)op->rc);
    /* Ours is cleared so the framework's next launch check does not report
     * it as its own; an error already pending is the framework's. */
    if (op->pending == cudaSuccess)
        runtime.get_last_error();
    if (op->restore_call != NULL)
        snprintf(restore, sizeof restore, "; restoring the caller's "
                 "context failed too: %s (CUDA error %d), its current "
                 "context changed", op->restore_call, op->restore_rc);
    if (op->rc == cudaErrorInitializationError && forked_after_load)
        snprintf(hint, sizeof hint, "; this process was forked after CUDA "
                 "was loaded, and CUDA cannot be used in a forked child");
    else if (status == CAI_ENOCUDA) {
        snprintf(hint, sizeof hint, "; no usable CUDA driver or device");
        describe_driver(hint + strlen(hint), sizeof hint - strlen(hint));
    } else if (is_sticky(op->rc))
        snprintf(hint, sizeof hint, "; a sticky error: it may come from "
                 "earlier asynchronous work (a kernel), not this call");
    else if (op->pending != cudaSuccess)
        snprintf(hint, sizeof hint, "; CUDA error %d was already pending "
                 "before this call", (int)op->pending);
    return cai_fail(err, status, op->field, "%s failed: %s (CUDA error %d)%s%s",
                    op->call, text != NULL ? text : "no description", op->rc,
                    restore, hint);
}

/* Saves the caller's exact context (NULL included). */
static int ctx_save(struct op *op)
{
    if (!have_driver())
        return 0;
    if (op_failed(op, "cuCtxGetCurrent",
                  driver.ctx_get_current(&op->saved)))
        return -1;
    op->now = op->saved;
    op->have_saved = 1;
    return 0;
}

static int ctx_switch(struct op *op, CUcontext target)
{
    if (!op->have_saved || target == op->now)
        return 0;
    if (op_failed(op, "cuCtxSetCurrent", driver.ctx_set_current(target)))
        return -1;
    op->now = target;
    op->switched = 1;
    return 0;
}

/* Puts the caller's context (or device) back, whatever happened before. */
static void ctx_restore(struct op *op)
{
    int rc = CUDA_SUCCESS;

    if (op->switched && op->now != op->saved) {
        rc = driver.ctx_set_current(op->saved);
        if (rc != CUDA_SUCCESS)
            op->restore_call = "cuCtxSetCurrent";
    } else if (op->device_switched) {
        rc = runtime.set_device(op->device_before);
        if (rc != cudaSuccess)
            op->restore_call = "cudaSetDevice";
    }
    if (rc != CUDA_SUCCESS)
        op->restore_rc = rc;
    op->now = op->saved;
    op->switched = op->device_switched = 0;
}

/* Stream values 1 and 2 are the runtime's own handles cudaStreamLegacy and
 * cudaStreamPerThread, so they pass through unchanged; 0 never gets here. */
static cudaStream_t stream_handle(intptr_t stream)
{
    return (cudaStream_t)stream;
}

/*
 * Makes current the context that stream belongs to: a handle's own (only
 * when required, or when no context is current, so the runtime creates
 * none); for the default streams, known (the context a fence was recorded
 * in), else the caller's context, switching to the data's device when the
 * data is device memory elsewhere.  *none is set when the caller has no
 * context and the stream cannot hold work for this call: the per-thread
 * stream, or the legacy stream of memory that is not a device's.
 */
static int enter_stream_context(struct op *op, intptr_t stream,
                                DLDevice device, const CUcontext *known,
                                int required, int *none)
{
    CUcontext target = NULL;
    CUdevice current;
    int d;

    *none = 0;
    if (!is_default_stream(stream)) {
        if (!op->have_saved || (!required && op->now != NULL))
            return 0;
        if (op_failed(op, "cuStreamGetCtx",
                      driver.stream_get_ctx((CUstream)stream_handle(stream),
                                            &target)))
            return -1;
        return ctx_switch(op, target);
    }
    if (known != NULL && op->have_saved)
        return ctx_switch(op, *known);
    /* With no context current, the per-thread stream holds no work of
     * this thread; the legacy stream of device memory is the one of its
     * device's primary context, which other threads may have used. */
    if (op->have_saved && op->saved == NULL &&
        !(stream == CAI_STREAM_LEGACY && device.device_type == kDLCUDA)) {
        *none = 1;
        return 0;
    }
    if (op->saved != NULL && ctx_switch(op, op->saved) != 0)
        return -1;
    if (device.device_type != kDLCUDA)
        return 0;
    if (op->have_saved && op->saved == NULL) {
        d = -1;
    } else if (op->have_saved) {
        if (op_failed(op, "cuCtxGetDevice", driver.ctx_get_device(&current)))
            return -1;
        d = (int)current;
    } else if (op_failed(op, "cudaGetDevice", runtime.get_device(&d))) {
        return -1;
    }
    if (d == device.device_id)
        return 0;
    if (op_failed(op, "cudaSetDevice", runtime.set_device(device.device_id)))
        return -1;
    if (op->have_saved) {
        /* The data's primary context, now current: the restore needs it. */
        op->switched = 1;
        op->now = NULL;
        if (op_failed(op, "cuCtxGetCurrent", driver.ctx_get_current(&op->now)))
            return -1;
    } else if (!op->device_switched) {
        op->device_switched = 1;
        op->device_before = d;
    }
    return 0;
}

struct cai_fence {
    cudaEvent_t event;
    intptr_t stream;    /* where it was recorded */
    DLDevice device;    /* the data's */
    CUcontext context;  /* the event's */
    int have_context;
    int captured;       /* recorded inside a graph capture */
    pthread_t thread;   /* the recording thread, for stream 2 */
};

static int capture_state(struct op *op, intptr_t stream,
                         enum cudaStreamCaptureStatus *state)
{
    *state = cudaStreamCaptureStatusNone;
    return op_failed(op, "cudaStreamIsCapturing",
                     runtime.stream_is_capturing(stream_handle(stream),
                                                 state))
               ? -1
               : 0;
}

/* Records an event on stream into fence (zeroed by the caller) within op;
 * fence->event stays NULL when there is nothing to wait for. */
static int record_in(struct op *op, intptr_t stream, DLDevice device,
                     struct cai_fence *fence)
{
    enum cudaStreamCaptureStatus state;
    int none = 0;

    fence->stream = stream;
    fence->device = device;
    fence->thread = pthread_self();
    /* The event must be made in the stream's own context. */
    if (enter_stream_context(op, stream, device, NULL, 1, &none) != 0)
        return -1;
    if (none || capture_state(op, stream, &state) != 0)
        return none ? 0 : -1;
    fence->captured = state != cudaStreamCaptureStatusNone;
    fence->context = op->now;
    fence->have_context = op->have_saved;
    if (op_failed(op, "cudaEventCreateWithFlags",
                  runtime.event_create_with_flags(&fence->event,
                                                  cudaEventDisableTiming)))
        return -1;
    if (op_failed(op, "cudaEventRecord",
                  runtime.event_record(fence->event, stream_handle(stream)))) {
        runtime.event_destroy(fence->event);
        fence->event = NULL;
        return -1;
    }
    return 0;
}

/* Makes the context of fence current when none is, so the runtime does
 * not create one (a primary context on device 0) for the call. */
static int enter_fence_context(struct op *op, const cai_fence_t *fence)
{
    if (op->have_saved && op->now == NULL && fence->have_context)
        return ctx_switch(op, fence->context);
    return 0;
}

/* Makes stream wait on fence within op; known: the context of a default
 * stream.  *refusal says why nothing was queued, if so. */
static int wait_in(struct op *op, const cai_fence_t *fence, intptr_t stream,
                   const CUcontext *known, const char **refusal)
{
    enum cudaStreamCaptureStatus state;
    unsigned flags = 0;
    int none = 0;

    *refusal = NULL;
    if (fence->event == NULL)
        return 0;
    if (enter_stream_context(op, stream, fence->device, known, 0, &none) != 0)
        return -1;
    if (none) {
        /* A default stream of a thread with no context: its work will
         * start later in a context that does not exist yet, so the host
         * waits now instead. */
        if (enter_fence_context(op, fence) != 0)
            return -1;
        return op_failed(op, "cudaEventSynchronize",
                         runtime.event_synchronize(fence->event))
                   ? -1
                   : 0;
    }
    if (capture_state(op, stream, &state) != 0)
        return -1;
    if (state == cudaStreamCaptureStatusInvalidated) {
        *refusal = "its graph capture is already invalidated";
    } else if (fence->captured && state == cudaStreamCaptureStatusNone) {
        *refusal = "the other side's work was queued inside a CUDA graph "
                   "capture, so it runs only when the graph is launched; "
                   "hand over after the capture ends";
    } else if (!fence->captured && state != cudaStreamCaptureStatusNone) {
        /* Waiting on work outside the capture: an external event node
         * keeps the capture valid. */
        if (runtime_version < EXTERNAL_WAIT_RUNTIME)
            *refusal = "it is capturing a CUDA graph and this runtime has no "
                       "cudaEventWaitExternal";
        flags = cudaEventWaitExternal;
    }
    if (*refusal != NULL)
        return 0;
    return op_failed(op, "cudaStreamWaitEvent",
                     runtime.stream_wait_event(stream_handle(stream),
                                               fence->event, flags))
               ? -1
               : 0;
}

static void destroy_in(struct op *op, struct cai_fence *fence)
{
    if (fence->event == NULL)
        return;
    if (enter_fence_context(op, fence) == 0)
        op_failed(op, "cudaEventDestroy",
                  runtime.event_destroy(fence->event));
    fence->event = NULL;
}

/* Ends op: restores the context, reports, and turns a refusal into
 * CAI_EUNSUPPORTED. */
static int op_finish(struct op *op, const char *whose, const char *refusal,
                     cai_error_t *err)
{
    int status;

    ctx_restore(op);
    status = op_end(op, err);
    if (status == 0 && refusal != NULL)
        return cai_fail(err, CAI_EUNSUPPORTED, "stream",
                        "cannot order the %s stream: %s; nothing was queued",
                        whose, refusal);
    return status;
}

static int record_fence(const cai_desc_t *producer, cai_fence_t **out,
                        cai_error_t *err)
{
    struct cai_fence *fence;
    struct op op;
    int status;

    status = op_begin(&op, "stream", err);
    if (status != 0)
        return status;
    fence = calloc(1, sizeof *fence);
    if (fence == NULL)
        return cai_fail(err, CAI_ENOMEM, "stream", "no memory for a fence");
    if (ctx_save(&op) == 0)
        record_in(&op, producer->stream, producer->device, fence);
    ctx_restore(&op);
    if (op.call != NULL || op.restore_call != NULL)
        destroy_in(&op, fence);
    status = op_end(&op, err);
    if (status != 0 || fence->event == NULL) {
        free(fence);
        return status;
    }
    *out = fence;
    return 0;
}

static int wait_fence(const cai_fence_t *fence, intptr_t consumer,
                      cai_error_t *err)
{
    const char *refusal = NULL;
    struct op op;
    int status = op_begin(&op, "stream", err);

    if (status != 0)
        return status;
    if (ctx_save(&op) == 0)
        wait_in(&op, fence, consumer, NULL, &refusal);
    return op_finish(&op, "consumer's", refusal, err);
}

/* cai_cuda_order in one operation: one context save and restore. */
static int order_now(const cai_desc_t *producer, intptr_t consumer,
                     cai_error_t *err)
{
    struct cai_fence fence;
    const char *refusal = NULL;
    struct op op;
    int status = op_begin(&op, "stream", err);

    if (status != 0)
        return status;
    memset(&fence, 0, sizeof fence);
    if (ctx_save(&op) == 0 &&
        record_in(&op, producer->stream, producer->device, &fence) == 0)
        wait_in(&op, &fence, consumer, NULL, &refusal);
    /* Safe right after the wait is queued: the runtime frees the event
     * once it has completed. */
    destroy_in(&op, &fence);
    return op_finish(&op, "consumer's", refusal, err);
}

static int synchronize(intptr_t stream, cai_error_t *err)
{
    struct op op;
    int status = op_begin(&op, "stream", err);

    if (status != 0)
        return status;
    op_failed(&op, "cudaStreamSynchronize",
              runtime.stream_synchronize(stream_handle(stream)));
    return op_end(&op, err);
}

int cai_fence_synchronize(const cai_fence_t *fence, cai_error_t *err)
{
    struct op op;
    int status;

    if (fence == NULL || fence->event == NULL)
        return cai_ok(err);
    if (fence->captured)
        return cai_fail(err, CAI_EUNSUPPORTED, "stream",
                        "the producer's stream was capturing a CUDA graph "
                        "when the fence was recorded: its work runs only "
                        "when the graph is launched, so the host cannot "
                        "wait for it");
    status = op_begin(&op, "stream", err);
    if (status != 0)
        return status;
    if (ctx_save(&op) == 0 && enter_fence_context(&op, fence) == 0)
        op_failed(&op, "cudaEventSynchronize",
                  runtime.event_synchronize(fence->event));
    return op_finish(&op, "producer's", NULL, err);
}

int cai_fence_release(const cai_fence_t *fence, intptr_t consumer_stream,
                      cai_error_t *err)
{
    struct cai_fence back;
    const char *refusal = NULL;
    struct op op;
    int rc = consumer_waits(fence, consumer_stream, err);

    if (rc <= 0)
        return rc;
    rc = op_begin(&op, "stream", err);
    if (rc != 0)
        return rc;
    memset(&back, 0, sizeof back);
    if (ctx_save(&op) == 0 &&
        record_in(&op, consumer_stream, fence->device, &back) == 0 &&
        back.event != NULL) {
        if (fence->stream == CAI_STREAM_PER_THREAD &&
            !pthread_equal(fence->thread, pthread_self())) {
            /* Another thread's per-thread stream has no handle here: the
             * host waits for the consumer instead. */
            if (back.captured)
                refusal = "the consumer's stream is capturing a CUDA graph "
                          "and the producer's per-thread stream belongs to "
                          "another thread";
            else
                op_failed(&op, "cudaEventSynchronize",
                          runtime.event_synchronize(back.event));
        } else {
            /* The producer's default streams are those of its context. */
            wait_in(&op, &back, fence->stream,
                    fence->have_context ? &fence->context : NULL, &refusal);
        }
    }
    destroy_in(&op, &back);
    return op_finish(&op, "producer's", refusal, err);
}

int cai_fence_destroy(cai_fence_t *fence, cai_error_t *err)
{
    struct op op;
    int status;

    if (fence == NULL)
        return cai_ok(err);
    status = op_begin(&op, "stream", err);
    if (status == 0) {
        if (ctx_save(&op) == 0)
            destroy_in(&op, fence);
        status = op_finish(&op, "", NULL, err);
    }
    free(fence);
    return status;
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
    return cai_ok(err);
}

/* The device of the current context, else the runtime's device; creates no
 * context. */
static int current_device(struct op *op, int *device)
{
    CUdevice d;

    if (!op->have_saved && ctx_save(op) != 0)
        return -1;
    if (op->have_saved && op->saved != NULL) {
        if (op_failed(op, "cuCtxGetDevice", driver.ctx_get_device(&d)))
            return -1;
        *device = (int)d;
        return 0;
    }
    return op_failed(op, "cudaGetDevice", runtime.get_device(device)) ? -1
                                                                       : 0;
}

static int locate(const void *ptr, intptr_t stream, DLDevice *out,
                  cai_error_t *err)
{
    /* Room for attribute structs of runtimes newer than our headers. */
    union {
        struct cudaPointerAttributes attributes;
        unsigned char room[256];
    } a;
    struct op op;
    int device = 0, access = 0, status;

    out->device_type = (DLDeviceType)0;
    out->device_id = 0;
    status = op_begin(&op, "data", err);
    if (status != 0)
        return status;

    if (ptr == NULL) {
        /* A zero-size array has no pointer to ask about: its stream's
         * device, else the current one. */
        if (stream != 0 && !is_default_stream(stream) &&
            stream != CAI_STREAM_NO_SYNC && ctx_save(&op) == 0 &&
            op.have_saved) {
            CUcontext target = NULL;

            if (!op_failed(&op, "cuStreamGetCtx",
                           driver.stream_get_ctx(
                               (CUstream)stream_handle(stream), &target)) &&
                ctx_switch(&op, target) == 0) {
                CUdevice d;

                if (!op_failed(&op, "cuCtxGetDevice",
                               driver.ctx_get_device(&d)))
                    device = (int)d;
            }
            ctx_restore(&op);
        } else {
            current_device(&op, &device);
        }
        status = op_end(&op, err);
        if (status != 0)
            return status;
        out->device_type = kDLCUDA;
        out->device_id = device;
        return 0;
    }

    memset(&a, 0, sizeof a);
    a.attributes.type = cudaMemoryTypeUnregistered;
    if (ctx_save(&op) != 0)
        return op_end(&op, err);
    if (op.have_saved && op.saved == NULL) {
        /* With no context current the runtime would make one (a primary
         * context on the thread's device, 0 on a fresh thread) for its
         * lookup: the driver names the memory's own context, which is
         * made current for it; memory of no context is not CUDA's. */
        CUcontext owner = NULL;

        if (driver.pointer_get_attribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT,
                                         (CUdeviceptr)(uintptr_t)ptr) ==
                CUDA_SUCCESS &&
            owner != NULL && ctx_switch(&op, owner) == 0 &&
            op_failed(&op, "cudaPointerGetAttributes",
                      runtime.pointer_get_attributes(&a.attributes, ptr))) {
            ctx_restore(&op);
            return op_end(&op, err);
        }
        ctx_restore(&op);
        if (op.call != NULL || op.restore_call != NULL)
            return op_end(&op, err);
    } else if (op_failed(&op, "cudaPointerGetAttributes",
                         runtime.pointer_get_attributes(&a.attributes,
                                                        ptr))) {
        return op_end(&op, err);
    }
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
        if (a.attributes.hostPointer != NULL &&
            a.attributes.hostPointer != ptr) {
            /* The device's address of registered host memory: only a
             * device can use this pointer. */
            out->device_type = kDLCUDA;
            out->device_id = a.attributes.device < 0 ? 0
                                                     : a.attributes.device;
            break;
        }
        if (a.attributes.devicePointer != NULL &&
            a.attributes.devicePointer != ptr)
            return cai_fail(err, CAI_EUNSUPPORTED, "data",
                            "data = %p is registered host memory whose "
                            "device address is %p; the CUDA Array Interface "
                            "needs the address a device uses", ptr,
                            a.attributes.devicePointer);
        out->device_type = kDLCUDAHost;
        break;
    case cudaMemoryTypeManaged:
        out->device_type = kDLCUDAManaged;
        break;
    case cudaMemoryTypeUnregistered:
        /* On HMM and ATS systems devices read pageable memory coherently:
         * it is unified memory. */
        if (current_device(&op, &device) == 0 &&
            !op_failed(&op, "cudaDeviceGetAttribute",
                       runtime.device_get_attribute(
                           &access, cudaDevAttrPageableMemoryAccess,
                           device)) &&
            access) {
            out->device_type = kDLCUDAManaged;
            break;
        }
        if (op.call != NULL)
            return op_end(&op, err);
        return cai_fail(err, CAI_EUNSUPPORTED, "data",
                        "data = %p is host memory not registered with CUDA "
                        "(or device memory already freed: CUDA cannot tell "
                        "them apart); the CUDA Array Interface needs memory "
                        "a device can access (device, pinned or managed)",
                        ptr);
    default:
        return cai_fail(err, CAI_EUNSUPPORTED, "data",
                        "cudaPointerGetAttributes says data = %p has memory "
                        "type %d, which caibridge does not know", ptr,
                        (int)a.attributes.type);
    }
    return cai_ok(err);
}

int cai_cuda_locate(const void *ptr, DLDevice *out, cai_error_t *err)
{
    return locate(ptr, 0, out, err);
}

int cai_cuda_locate_desc(const cai_desc_t *desc, DLDevice *out,
                         cai_error_t *err)
{
    return locate(desc->data, desc->has_stream ? desc->stream : 0, out, err);
}

#endif /* HAVE_CUDA */

int cai_fence_record(const cai_desc_t *producer, cai_fence_t **out,
                     cai_error_t *err)
{
    int64_t count;
    int rc;

    *out = NULL;
    rc = producer_needs_order(producer, err);
    if (rc <= 0)
        return rc;
    /* No element is read, so no write has to be waited for. */
    if (producer->ndim > 0 && producer->ndim <= CAI_MAX_NDIM &&
        cai_element_count(producer->ndim, producer->shape, &count) == 0 &&
        count == 0)
        return cai_ok(err);
    return record_fence(producer, out, err);
}

/* Checks the consumer's stream; 1 when it has to wait for the fence, 0
 * (err cleared) when not.  Defined here, where both builds have defined
 * struct cai_fence. */
static int consumer_waits(const cai_fence_t *fence, intptr_t consumer_stream,
                          cai_error_t *err)
{
    int rc = check_stream_value(consumer_stream, "consumer ", err);

    if (rc != 0)
        return rc;
    /* CAI v3: -1 is the consumer saying it orders the work itself; and
     * work on one stream handle is already in order. */
    if (fence == NULL || consumer_stream == CAI_STREAM_NO_SYNC ||
        (consumer_stream == fence->stream &&
         !is_default_stream(consumer_stream)))
        return cai_ok(err);
    return 1;
}

int cai_fence_wait(const cai_fence_t *fence, intptr_t consumer_stream,
                   cai_error_t *err)
{
    int rc = consumer_waits(fence, consumer_stream, err);

    return rc <= 0 ? rc : wait_fence(fence, consumer_stream, err);
}

int cai_cuda_order(const cai_desc_t *producer, intptr_t consumer_stream,
                   cai_error_t *err)
{
    int rc = check_stream_value(consumer_stream, "consumer ", err);

    if (rc != 0)
        return rc;
    /* CAI v3, Synchronization: no stream, no ordering; and -1 is the
     * consumer saying it orders the work itself. */
    if (!producer->has_stream || consumer_stream == CAI_STREAM_NO_SYNC)
        return cai_ok(err);
    rc = producer_needs_order(producer, err);
    if (rc <= 0)
        return rc;
    /* Work on one stream is already in order. */
    if (producer->stream == consumer_stream)
        return cai_ok(err);
    return order_now(producer, consumer_stream, err);
}

int cai_cuda_stream_synchronize(intptr_t stream, cai_error_t *err)
{
    int rc = check_stream_value(stream, "", err);

    if (rc != 0)
        return rc;
    if (stream == CAI_STREAM_NO_SYNC)
        return cai_ok(err);
    return synchronize(stream, err);
}
