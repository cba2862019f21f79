/*
 * Binding the CUDA runtime and driver: found and loaded at first use, never
 * linked, so the library works for host memory on machines with no CUDA at
 * all, and a process that already runs a CUDA runtime (PyTorch's, CuPy's)
 * shares it.  The toolkit headers give types and constants only; every
 * call goes through a pointer resolved with dlsym.
 */
/* dl_iterate_phdr, dlinfo, RTLD_NOLOAD, O_PATH, secure_getenv */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda-internal.h"
#include "cuda-release.h"
#include "cuda-search.h"

#ifdef HAVE_CUDA

#define ENTRY_POINT(name, field)             \
    {                                        \
        name, offsetof(struct cudart, field) \
    }
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
    ENTRY_POINT("cudaEventQuery", event_query),
    ENTRY_POINT("cudaEventDestroy", event_destroy),
    ENTRY_POINT("cudaStreamSynchronize", stream_synchronize),
    ENTRY_POINT("cudaStreamIsCapturing", stream_is_capturing),
    ENTRY_POINT("cudaGetErrorString", get_error_string),
    ENTRY_POINT("cudaRuntimeGetVersion", runtime_get_version),
    ENTRY_POINT("cudaDriverGetVersion", driver_get_version),
    ENTRY_POINT("cudaGetLastError", get_last_error),
    ENTRY_POINT("cudaPeekAtLastError", peek_at_last_error),
    ENTRY_POINT("cudaDeviceSynchronize", device_synchronize),
    ENTRY_POINT("cudaStreamGetCaptureInfo", stream_get_capture_info),
};


#define DRIVER_ENTRY_POINT(name, field)        \
    {                                          \
        name, offsetof(struct cudriver, field) \
    }
static const struct entry_point driver_entry_points[] = {
    DRIVER_ENTRY_POINT("cuInit", init),
    DRIVER_ENTRY_POINT("cuCtxGetCurrent", ctx_get_current),
    DRIVER_ENTRY_POINT("cuCtxSetCurrent", ctx_set_current),
    DRIVER_ENTRY_POINT("cuCtxGetDevice", ctx_get_device),
    DRIVER_ENTRY_POINT("cuStreamGetCtx", stream_get_ctx),
    DRIVER_ENTRY_POINT("cuPointerGetAttribute", pointer_get_attribute),
    DRIVER_ENTRY_POINT("cuPointerGetAttributes", pointer_get_attributes),
    DRIVER_ENTRY_POINT("cuDevicePrimaryCtxGetState", primary_ctx_get_state),
    DRIVER_ENTRY_POINT("cuDevicePrimaryCtxRetain", primary_ctx_retain),
    /* The ABI of CUDA 11 and later; cuda.h maps the plain name to it. */
    DRIVER_ENTRY_POINT("cuDevicePrimaryCtxRelease_v2", primary_ctx_release),
};


/* Bound for good once runtime_loaded is set (with release order); until
 * then each call searches again under cai_runtime_lock, so a runtime that comes
 * later (torch imported, a wheel installed) is still found. */
struct cudart cai_rt;
static void *runtime_handle;
int cai_rt_version;
static int runtime_loaded;
static char runtime_path[PATH_MAX];
static const char *runtime_how = "";
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
struct cudriver cai_drv;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

/* Set in a child forked after the runtime was loaded: CUDA cannot be used
 * there, and says only "initialization error". */
volatile int cai_forked_after_load;
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

/* Fills runtime from handle; on failure says why in cai_runtime_problem. */
static int bind_runtime(void *handle, const char *what)
{
    const char *missing = NULL;
    cudaError_t rc;

    if (bind_all(handle, entry_points,
                 sizeof entry_points / sizeof *entry_points, &cai_rt,
                 &missing) != 0) {
        cai_set_problem("%s is not a usable CUDA runtime: it has no %s", what,
                        missing);
        return -1;
    }
    /* Optional: host waits relax the thread's capture mode with it. */
    *(void **)&cai_rt.thread_exchange_capture_mode =
        dlsym(handle, "cudaThreadExchangeStreamCaptureMode");
    /* Optional: device copies (cuda-copy.c) say so when they are absent. */
    *(void **)&cai_rt.malloc_async = dlsym(handle, "cudaMallocAsync");
    *(void **)&cai_rt.free_async = dlsym(handle, "cudaFreeAsync");
    *(void **)&cai_rt.memcpy_async = dlsym(handle, "cudaMemcpyAsync");
    *(void **)&cai_rt.memcpy_2d_async = dlsym(handle, "cudaMemcpy2DAsync");
    rc = cai_rt.runtime_get_version(&cai_rt_version);
    if (rc != cudaSuccess) {
        cai_set_problem("%s: cudaRuntimeGetVersion failed with CUDA error %d",
                        what, (int)rc);
        return -1;
    }
    if (cai_rt_version < OLDEST_RUNTIME) {
        cai_set_problem(
            "%s is CUDA runtime %d.%d; caibridge needs 11.0 or newer", what,
            cai_rt_version / 1000, cai_rt_version % 1000 / 10);
        return -1;
    }
    return 0;
}


/* The binder's load: 0 when bound; -1 with the reason in
 * cai_runtime_problem and nothing bound. */
static int load_from(const char *file, int flags, const char *what)
{
    void *handle = dlopen(file, flags);

    if (handle == NULL) {
        const char *why = dlerror();

        cai_set_problem("%s could not be loaded: %s", what,
                        why != NULL ? why : "unknown dlopen error");
        return -1;
    }
    if (bind_runtime(handle, what) != 0) {
        dlclose(handle);
        memset(&cai_rt, 0, sizeof cai_rt);
        return -1;
    }
    /* Kept for the life of the process: callers hold its events and state. */
    runtime_handle = handle;
    return 0;
}


static void note_fork(void)
{
    cai_forked_after_load = 1;
}

static void watch_fork(void)
{
    pthread_atfork(NULL, NULL, note_fork);
}

/* A runtime bound by load_from but then passed over: unbound. */
static void unload_runtime(void)
{
    dlclose(runtime_handle);
    runtime_handle = NULL;
    memset(&cai_rt, 0, sizeof cai_rt);
}

/* The driver's version (0 when it does not say) and the bound runtime's,
 * for the search to pass over a runtime newer than the driver. */
static void runtime_versions(int *driver, int *runtime)
{
    if (cai_rt.driver_get_version(driver) != cudaSuccess)
        *driver = 0;
    *runtime = cai_rt_version;
}

static const struct cai_binder binder = {load_from, runtime_versions,
                                         unload_runtime};

int cai_runtime_close(void)
{
    int loaded;

    pthread_mutex_lock(&cai_runtime_lock);
    loaded = runtime_loaded;
    if (loaded && runtime_handle != NULL)
        unload_runtime();
    __atomic_store_n(&runtime_loaded, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&cai_runtime_lock);
    return loaded;
}

/* Bound: say where from, and publish cai_rt to the lock-free readers.  file
 * is the file checked and loaded, or "" to ask the loader. */
static void found(const char *how, const char *file)
{
    Dl_info info;
    void *symbol;

    runtime_how = how;
    memcpy(&symbol, &cai_rt.runtime_get_version, sizeof symbol);
    if (file[0] != '\0')
        snprintf(runtime_path, sizeof runtime_path, "%s", file);
    else if (dladdr(symbol, &info) != 0 && info.dli_fname != NULL)
        snprintf(runtime_path, sizeof runtime_path, "%s", info.dli_fname);
    __atomic_store_n(&runtime_loaded, 1, __ATOMIC_RELEASE);
}


int cai_runtime_ready(const char *field, cai_error_t *err)
{
    char problem[sizeof cai_runtime_problem], path[PATH_MAX];
    const char *how;
    int loaded;

    if (__atomic_load_n(&runtime_loaded, __ATOMIC_ACQUIRE))
        return 0;
    /* Outside the lock: the hook may take the caller's own locks. */
    cai_run_search_hook();
    pthread_once(&fork_once, watch_fork);
    pthread_mutex_lock(&cai_runtime_lock);
    if (!runtime_loaded &&
        cai_search_runtime(&binder, &how, path, sizeof path) == 0)
        found(how, path);
    loaded = runtime_loaded;
    memcpy(problem, cai_runtime_problem, sizeof problem);
    pthread_mutex_unlock(&cai_runtime_lock);
    if (CAI_UNLIKELY(!loaded))
        return cai_fail(err, CAI_ENOCUDA, field, "%s", problem);
    return 0;
}


int cai_cuda_runtime_info(char *path, size_t size, const char **how,
                          int *version, cai_error_t *err)
{
    int rc = cai_runtime_ready("", err);

    *how = "";
    *version = 0;
    if (size > 0)
        path[0] = '\0';
    if (rc != 0)
        return rc;
    /* Written before runtime_loaded was published, never after. */
    snprintf(path, size, "%s", runtime_path);
    *how = runtime_how;
    *version = cai_rt_version;
    return cai_ok(err);
}

/* The driver entry points a driver lacks, each followed by a NUL, the list
 * by another: such a driver is not bound (contexts could not be saved and
 * put back), and python -m caibridge says why.  Written once, under
 * driver_once. */
static char driver_missing[512];

static void note_missing_driver(void *handle)
{
    size_t i, used = 0, n;

    for (i = 0; i < sizeof driver_entry_points / sizeof *driver_entry_points;
         i++) {
        if (dlsym(handle, driver_entry_points[i].name) != NULL)
            continue;
        n = strlen(driver_entry_points[i].name) + 1;
        if (used + n + 1 > sizeof driver_missing)
            break;
        memcpy(driver_missing + used, driver_entry_points[i].name, n);
        used += n;
    }
    driver_missing[used] = '\0';
}

const char *cai_cuda_driver_missing(void)
{
    (void)cai_have_driver();
    return driver_missing;
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
    if (bind_all(handle, driver_entry_points,
                 sizeof driver_entry_points / sizeof *driver_entry_points,
                 &table, &missing) != 0) {
        note_missing_driver(handle);
        return;
    }
    /* cuInit creates no context; a stub or broken driver leaves us with
     * the runtime's calls, which say what is wrong. */
    if (table.init(0) != CUDA_SUCCESS)
        return;
    /* Optional (driver 12.0+); without it events are not pooled. */
    *(void **)&table.ctx_get_id = dlsym(handle, "cuCtxGetId");
    *(void **)&table.event_query = dlsym(handle, "cuEventQuery");
    *(void **)&table.stream_get_id = dlsym(handle, "cuStreamGetId");
    cai_drv = table;
}

int cai_have_driver(void)
{
    pthread_once(&driver_once, load_driver);
    return cai_drv.ctx_get_current != NULL;
}


int cai_cuda_built(void)
{
    return 1;
}

int cai_cuda_runtime_version(int *version, cai_error_t *err)
{
    int rc;

    if (version == NULL)
        return cai_null_arg(err, "version");
    *version = 0;
    rc = cai_runtime_ready("", err);
    if (rc != 0)
        return rc;
    *version = cai_rt_version;
    return cai_ok(err);
}

int cai_cuda_headers_version(void)
{
    return CUDART_VERSION;
}

#else /* !HAVE_CUDA */

const char *cai_cuda_driver_missing(void)
{
    return "";
}

int cai_cuda_headers_version(void)
{
    return 0;
}


int cai_cuda_runtime_info(char *path, size_t size, const char **how,
                          int *version, cai_error_t *err)
{
    *how = "";
    *version = 0;
    if (size > 0)
        path[0] = '\0';
    return cai_cuda_runtime_version(version, err);
}

#endif /* HAVE_CUDA */
