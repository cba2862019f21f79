/*
 * Binding the CUDA runtime and driver: found and loaded at first use, never
 * linked, so the library works for host memory on machines with no CUDA at
 * all, and a process that already runs a CUDA runtime (PyTorch's, CuPy's)
 * shares it.  The toolkit headers give types and constants only; every
 * call goes through a pointer resolved with dlsym.
 */
#define _GNU_SOURCE /* dl_iterate_phdr, RTLD_NOLOAD, secure_getenv */
#include "config.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cuda-internal.h"

#ifdef HAVE_CUDA

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
    ENTRY_POINT("cudaDeviceSynchronize", device_synchronize),
    ENTRY_POINT("cudaStreamGetCaptureInfo", stream_get_capture_info),
};


#define DRIVER_ENTRY_POINT(name, field) {name, offsetof(struct cudriver, field)}
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


/* Written once under pthread_once, read-only afterwards. */
struct cudart cai_rt;
static void *runtime_handle;
int cai_rt_version;
static char runtime_problem[sizeof ((cai_error_t *)0)->message];
static pthread_once_t runtime_once = PTHREAD_ONCE_INIT;
struct cudriver cai_drv;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

/* Set in a child forked after the runtime was loaded: CUDA cannot be used
 * there, and says only "initialization error". */
volatile int cai_forked_after_load;

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
                 sizeof *entry_points, &cai_rt, &missing) != 0) {
        set_problem("%s is not a usable CUDA runtime: it has no %s", what,
                    missing);
        return -1;
    }
    rc = cai_rt.runtime_get_version(&cai_rt_version);
    if (rc != cudaSuccess) {
        set_problem("%s: cudaRuntimeGetVersion failed with CUDA error %d",
                    what, (int)rc);
        return -1;
    }
    if (cai_rt_version < OLDEST_RUNTIME) {
        set_problem("%s is CUDA runtime %d.%d; caibridge needs 11.0 or newer",
                    what, cai_rt_version / 1000, cai_rt_version % 1000 / 10);
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
        if (cai_rt.driver_get_version(&driver_version) == cudaSuccess &&
            driver_version > 0 &&
            driver_version / 1000 < cai_rt_version / 1000) {
            /* Driver too old for this runtime: try an older one. */
            if (used < size)
                used += (size_t)snprintf(
                    problems + used, size - used,
                    "%sthe CUDA driver (%d.%d) is too old for %s (%d.%d)",
                    used > 0 ? "; " : "", driver_version / 1000,
                    driver_version % 1000 / 10, soname,
                    cai_rt_version / 1000, cai_rt_version % 1000 / 10);
            dlclose(runtime_handle);
            runtime_handle = NULL;
            memset(&cai_rt, 0, sizeof cai_rt);
            continue;
        }
        return; /* no driver at all is reported at the first call */
    }
    memset(&cai_rt, 0, sizeof cai_rt);
    set_problem("%s", problems);
}

static void note_fork(void)
{
    cai_forked_after_load = 1;
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
            memset(&cai_rt, 0, sizeof cai_rt);
        return;
    }
    if (dl_iterate_phdr(find_loaded_cudart, loaded) != 0) {
        if (load_from(loaded, RTLD_NOW | RTLD_NOLOAD, loaded) == 0)
            return;
        snprintf(first_problem, sizeof first_problem, "%s", runtime_problem);
    }
    load_by_soname(problems, sizeof problems);
    if (cai_rt.get_error_string != NULL)
        return;
    if (first_problem[0] != '\0')
        set_problem("%s; and %s", first_problem, problems);
    else
        set_problem("no CUDA runtime: CAIBRIDGE_CUDART is unset, none is "
                    "loaded in the process, and %s", problems);
}

int cai_runtime_ready(const char *field, cai_error_t *err)
{
    pthread_once(&runtime_once, load_runtime);
    if (CAI_UNLIKELY(cai_rt.get_error_string == NULL))
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

    *version = 0;
    rc = cai_runtime_ready("", err);
    if (rc != 0)
        return rc;
    *version = cai_rt_version;
    return cai_ok(err);
}


#endif /* HAVE_CUDA */
