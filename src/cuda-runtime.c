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

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda-internal.h"
#include "cuda-release.h"
#include "cuda-search.h"

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


/* Bound for good once runtime_loaded is set (with release order); until
 * then each call searches again under runtime_lock, so a runtime that comes
 * later (torch imported, a wheel installed) is still found. */
struct cudart cai_rt;
static void *runtime_handle;
int cai_rt_version;
static int runtime_loaded;
static char runtime_path[PATH_MAX];
static const char *runtime_how = "";
static char runtime_problem[sizeof ((cai_error_t *)0)->message];
static pthread_mutex_t runtime_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
/* The Python module's folders, each ended by a NUL, the list by another. */
static char search_dirs[16384];
static void (*search_hook)(void);
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
    /* Optional: host waits relax the thread's capture mode with it. */
    *(void **)&cai_rt.thread_exchange_capture_mode =
        dlsym(handle, "cudaThreadExchangeStreamCaptureMode");
    *(void **)&cai_rt.launch_host_func = dlsym(handle, "cudaLaunchHostFunc");
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

/* Appends one reason to the list of them. */
static void add_problem(char *problems, size_t size, size_t *used,
                        const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*used >= size)
        return;
    if (*used > 0)
        *used += (size_t)snprintf(problems + *used, size - *used, "; ");
    if (*used >= size)
        return;
    va_start(ap, fmt);
    n = vsnprintf(problems + *used, size - *used, fmt, ap);
    va_end(ap);
    if (n > 0)
        *used += (size_t)n;
}

/* The runtime majors the headers' layout serves, newest first: a CUDA 13
 * build still runs on a 12.x driver through a libcudart.so.12.  In dir
 * when given (only files that exist), else by soname.  0 when bound. */
static int load_newest(const char *dir, char *problems, size_t size,
                       size_t *used)
{
    int major, driver_version = 0, first = 1;

    for (major = CUDART_VERSION / 1000; major >= OLDEST_RUNTIME / 1000;
         major--) {
        char file[PATH_MAX];

        if (dir != NULL) {
            if (snprintf(file, sizeof file, "%s/libcudart.so.%d", dir,
                         major) >= (int)sizeof file ||
                access(file, F_OK) != 0)
                continue;
        } else {
            snprintf(file, sizeof file, "libcudart.so.%d", major);
        }
        if (load_from(file, RTLD_NOW | RTLD_LOCAL, file) != 0) {
            /* Of the sonames, only the first reason: the older ones say
             * the same. */
            if (dir != NULL || first)
                add_problem(problems, size, used, "%s", runtime_problem);
            first = 0;
            continue;
        }
        first = 0;
        if (cai_rt.driver_get_version(&driver_version) == cudaSuccess &&
            driver_version > 0 &&
            driver_version / 1000 < cai_rt_version / 1000) {
            /* Driver too old for this runtime: try an older one. */
            add_problem(problems, size, used,
                        "the CUDA driver (%d.%d) is too old for %s (%d.%d)",
                        driver_version / 1000, driver_version % 1000 / 10,
                        file, cai_rt_version / 1000,
                        cai_rt_version % 1000 / 10);
            dlclose(runtime_handle);
            runtime_handle = NULL;
            memset(&cai_rt, 0, sizeof cai_rt);
            continue;
        }
        return 0; /* no driver at all is reported at the first call */
    }
    memset(&cai_rt, 0, sizeof cai_rt);
    return -1;
}

/* CAIBRIDGE_CUDART must be an absolute path (a relative one would depend on
 * the working directory at the first CUDA call) to a file that only its
 * owner, this user or root, may change, in a folder others cannot write to
 * (unless sticky, as /tmp, where they cannot replace it). */
static int check_chosen(const char *chosen, const char *what)
{
    char real[PATH_MAX], *slash;
    struct stat st;

    if (chosen[0] != '/') {
        set_problem("%s is not used: it must be an absolute path (a "
                    "relative one would depend on the working directory)",
                    what);
        return -1;
    }
    if (realpath(chosen, real) == NULL || stat(real, &st) != 0) {
        set_problem("%s could not be loaded: %s", what, strerror(errno));
        return -1;
    }
    if ((st.st_uid != 0 && st.st_uid != geteuid()) ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        set_problem("%s is not used: %s may be written by others (owner "
                    "uid %ld, mode %04o); only its owner, this user or "
                    "root, may write a library caibridge loads", what, real,
                    (long)st.st_uid, (unsigned)(st.st_mode & 07777));
        return -1;
    }
    slash = strrchr(real, '/');
    if (slash == real)
        slash[1] = '\0';
    else
        *slash = '\0';
    if (stat(real, &st) != 0) {
        set_problem("%s could not be loaded: %s: %s", what, real,
                    strerror(errno));
        return -1;
    }
    if ((st.st_uid != 0 && st.st_uid != geteuid()) ||
        ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
         (st.st_mode & S_ISVTX) == 0)) {
        set_problem("%s is not used: its folder %s may be written by "
                    "others (owner uid %ld, mode %04o), who could replace "
                    "the library", what, real, (long)st.st_uid,
                    (unsigned)(st.st_mode & 07777));
        return -1;
    }
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

/* Bound: say where from, and publish cai_rt to the lock-free readers. */
static void found(const char *how)
{
    Dl_info info;
    void *symbol;

    runtime_how = how;
    memcpy(&symbol, &cai_rt.runtime_get_version, sizeof symbol);
    if (dladdr(symbol, &info) != 0 &&
        info.dli_fname != NULL)
        snprintf(runtime_path, sizeof runtime_path, "%s", info.dli_fname);
    __atomic_store_n(&runtime_loaded, 1, __ATOMIC_RELEASE);
}

/* The order: CAIBRIDGE_CUDART, a runtime already in the process, NVIDIA's
 * pip wheels (the Python module's folders), $CONDA_PREFIX/lib, then the
 * supported sonames; newest major first in each place.  Under runtime_lock. */
static void load_runtime(void)
{
    const char *chosen = environment("CAIBRIDGE_CUDART");
    const char *conda = environment("CONDA_PREFIX");
    const char *dir;
    char loaded[PATH_MAX] = "";
    char what[PATH_MAX + 32];
    char problems[sizeof runtime_problem] = "";
    size_t used = 0;

    pthread_once(&fork_once, watch_fork);
    if (chosen != NULL && chosen[0] != '\0') {
        snprintf(what, sizeof what, "CAIBRIDGE_CUDART=%s", chosen);
        if (check_chosen(chosen, what) == 0 &&
            load_from(chosen, RTLD_NOW | RTLD_LOCAL, what) == 0)
            found("CAIBRIDGE_CUDART");
        else
            memset(&cai_rt, 0, sizeof cai_rt);
        return;
    }
    if (dl_iterate_phdr(find_loaded_cudart, loaded) != 0) {
        if (load_from(loaded, RTLD_NOW | RTLD_NOLOAD, loaded) == 0) {
            found("already loaded");
            return;
        }
        add_problem(problems, sizeof problems, &used, "%s", runtime_problem);
        memset(&cai_rt, 0, sizeof cai_rt);
    }
    for (dir = search_dirs; *dir != '\0'; dir += strlen(dir) + 1)
        if (load_newest(dir, problems, sizeof problems, &used) == 0) {
            found("pip wheel");
            return;
        }
    if (conda != NULL && conda[0] == '/') {
        snprintf(what, sizeof what, "%s/lib", conda);
        if (load_newest(what, problems, sizeof problems, &used) == 0) {
            found("conda");
            return;
        }
    }
    if (load_newest(NULL, problems, sizeof problems, &used) == 0) {
        found("system");
        return;
    }
    set_problem("no CUDA runtime: CAIBRIDGE_CUDART is unset, none is "
                "loaded in the process, none is in NVIDIA's pip wheels on "
                "sys.path or in $CONDA_PREFIX/lib, and %s", problems);
}

int cai_runtime_ready(const char *field, cai_error_t *err)
{
    char problem[sizeof runtime_problem];
    void (*hook)(void);
    int loaded;

    if (__atomic_load_n(&runtime_loaded, __ATOMIC_ACQUIRE))
        return 0;
    /* Outside the lock: the hook may take the caller's own locks. */
    hook = __atomic_load_n(&search_hook, __ATOMIC_ACQUIRE);
    if (hook != NULL)
        hook();
    pthread_mutex_lock(&runtime_lock);
    if (!runtime_loaded)
        load_runtime();
    loaded = runtime_loaded;
    memcpy(problem, runtime_problem, sizeof problem);
    pthread_mutex_unlock(&runtime_lock);
    if (CAI_UNLIKELY(!loaded))
        return cai_fail(err, CAI_ENOCUDA, field, "%s", problem);
    return 0;
}

void cai_cuda_search_hook(void (*hook)(void))
{
    __atomic_store_n(&search_hook, hook, __ATOMIC_RELEASE);
}

int cai_cuda_search_dirs(const char *const *dirs, size_t count)
{
    char list[sizeof search_dirs];
    size_t i, used = 0;

    for (i = 0; i < count; i++) {
        size_t n = strlen(dirs[i]);

        if (n == 0)
            continue;
        if (used + n + 2 > sizeof list)
            return -1;
        memcpy(list + used, dirs[i], n + 1);
        used += n + 1;
    }
    list[used] = '\0';
    pthread_mutex_lock(&runtime_lock);
    memcpy(search_dirs, list, used + 1);
    pthread_mutex_unlock(&runtime_lock);
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
    if (bind_all(handle, driver_entry_points, sizeof driver_entry_points /
                 sizeof *driver_entry_points, &table, &missing) != 0) {
        note_missing_driver(handle);
        return;
    }
    /* cuInit creates no context; a stub or broken driver leaves us with
     * the runtime's calls, which say what is wrong. */
    if (table.init(0) != CUDA_SUCCESS)
        return;
    /* Optional (driver 12.0+); without it events are not pooled. */
    *(void **)&table.ctx_get_id = dlsym(handle, "cuCtxGetId");
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

void cai_cuda_search_hook(void (*hook)(void))
{
    (void)hook;
}

int cai_cuda_search_dirs(const char *const *dirs, size_t count)
{
    (void)dirs;
    (void)count;
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
