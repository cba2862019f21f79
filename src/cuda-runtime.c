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
 * then each call searches again under runtime_lock, so a runtime that comes
 * later (torch imported, a wheel installed) is still found. */
struct cudart cai_rt;
static void *runtime_handle;
int cai_rt_version;
static int runtime_loaded;
static char runtime_path[PATH_MAX];
static const char *runtime_how = "";
static char runtime_problem[sizeof((cai_error_t *)0)->message];
/* The candidates the last search passed over, "path: reason", each ended by
 * a NUL, the list by another. */
static char runtime_refused[8192];
static size_t refused_used;
static pthread_mutex_t runtime_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
/* The Python module's folders, each ended by a NUL, the list by another:
 * the site-packages folders searched, then the other sys.path folders, only
 * reported when they hold a runtime. */
static char search_dirs[16384];
static char other_dirs[16384];
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

    if (bind_all(handle, entry_points,
                 sizeof entry_points / sizeof *entry_points, &cai_rt,
                 &missing) != 0) {
        set_problem("%s is not a usable CUDA runtime: it has no %s", what,
                    missing);
        return -1;
    }
    /* Optional: host waits relax the thread's capture mode with it. */
    *(void **)&cai_rt.thread_exchange_capture_mode =
        dlsym(handle, "cudaThreadExchangeStreamCaptureMode");
    *(void **)&cai_rt.launch_host_func = dlsym(handle, "cudaLaunchHostFunc");
    /* Optional: device copies (cuda-copy.c) say so when they are absent. */
    *(void **)&cai_rt.malloc_async = dlsym(handle, "cudaMallocAsync");
    *(void **)&cai_rt.free_async = dlsym(handle, "cudaFreeAsync");
    *(void **)&cai_rt.memcpy_async = dlsym(handle, "cudaMemcpyAsync");
    *(void **)&cai_rt.memcpy_2d_async = dlsym(handle, "cudaMemcpy2DAsync");
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

/* Notes a candidate passed over, for cai_cuda_search_refused; a list too
 * long for the room keeps its first entries. */
static void CAI_PRINTF(2, 3) refuse(const char *path, const char *fmt, ...)
{
    char reason[sizeof runtime_problem];
    va_list ap;
    int n;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    n = snprintf(runtime_refused + refused_used,
                 sizeof runtime_refused - 1 - refused_used, "%s: %s", path,
                 reason);
    if (n < 0 || (size_t)n >= sizeof runtime_refused - 1 - refused_used)
        return;
    refused_used += (size_t)n + 1;
    runtime_refused[refused_used] = '\0';
}

/* A reason into why; a long path is cut short. */
static void CAI_PRINTF(3, 4) put(char *why, size_t size, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, size, fmt, ap);
    va_end(ap);
}

/* Only this user or root may own what caibridge loads, and the folders on
 * the way to it; others may not write either (a folder only when sticky,
 * as /tmp, where they cannot replace what they do not own).  NULL when st
 * passes, else the reason, in why. */
static const char *unsafe(const struct stat *st, int folder, const char *path,
                          char *why, size_t size)
{
    const char *which = folder ? "its folder " : "";

    if (st->st_uid != 0 && st->st_uid != geteuid())
        put(why, size,
            "%s%s is owned by uid %ld, neither this user "
            "(uid %ld) nor root, who could replace the library",
            which, path, (long)st->st_uid, (long)geteuid());
    else if ((st->st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
             !(folder && (st->st_mode & S_ISVTX) != 0))
        put(why, size,
            "%s%s may be written by others (mode %04o), "
            "who could replace the library",
            which, path, (unsigned)(st->st_mode & 07777));
    else
        return NULL;
    return why;
}

/* Opens the library at path for loading once every check passed: an
 * absolute path whose file and each folder from the root down pass unsafe().
 * The walk opens each folder within the one above it, never following a
 * link, and the file's descriptor is what gets loaded: nothing swapped in
 * after the checks is used.  The path walked, links resolved, in real (of
 * PATH_MAX).  -1 with the reason in why when a check fails, -2 when the
 * file cannot be reached at all. */
static int open_checked(const char *path, char *real, char *why, size_t size)
{
#ifdef O_PATH
    const int folder_flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
#else
    const int folder_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
#endif
    char *name, *next;
    struct stat st;
    int dir, fd;

    if (path[0] != '/') {
        put(why, size,
            "not an absolute path (a relative one would "
            "depend on the working directory)");
        return -1;
    }
    if (realpath(path, real) == NULL) {
        put(why, size, "%s", strerror(errno));
        return -2;
    }
    dir = open("/", folder_flags);
    if (dir < 0 || fstat(dir, &st) != 0) {
        put(why, size, "/: %s", strerror(errno));
        if (dir >= 0)
            close(dir);
        return -1;
    }
    if (unsafe(&st, 1, "/", why, size) != NULL) {
        close(dir);
        return -1;
    }
    for (name = real + 1; (next = strchr(name, '/')) != NULL;
         name = next + 1) {
        int child;

        *next = '\0';
        child = openat(dir, name, folder_flags);
        if (child < 0 || fstat(child, &st) != 0 || !S_ISDIR(st.st_mode)) {
            /* A link or a file where realpath saw a folder: swapped. */
            int swapped = child >= 0 || errno == ELOOP || errno == ENOTDIR;

            put(why, size, "%s: %s", real,
                swapped ? "changed while it was checked" : strerror(errno));
            if (child >= 0)
                close(child);
            close(dir);
            return swapped ? -1 : -2;
        }
        close(dir);
        dir = child;
        if (unsafe(&st, 1, real, why, size) != NULL) {
            close(dir);
            return -1;
        }
        *next = '/';
    }
    fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    close(dir);
    if (fd < 0 || fstat(fd, &st) != 0) {
        int loop = errno == ELOOP;

        put(why, size, "%s: %s", real,
            loop ? "changed while it was checked" : strerror(errno));
        if (fd >= 0)
            close(fd);
        return loop ? -1 : -2;
    }
    if (!S_ISREG(st.st_mode)) {
        put(why, size, "%s is not a regular file", real);
        close(fd);
        return -1;
    }
    if (unsafe(&st, 0, real, why, size) != NULL) {
        close(fd);
        return -1;
    }
    return fd;
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

/* The real path of the file loaded last by load_checked: the one walked. */
static char checked_path[PATH_MAX];

/* Checks path, then loads the very file checked, through its descriptor.
 * 0 when bound; -1 with the reason in runtime_problem, and the candidate
 * noted as refused when a check failed. */
static int load_checked(const char *path, const char *what)
{
    char why[sizeof runtime_problem], name[64], real[PATH_MAX];
    int fd = open_checked(path, real, why, sizeof why), rc, tries;

    if (fd < 0) {
        if (fd == -1)
            set_problem("%s is not used: %s", what, why);
        else
            set_problem("%s could not be loaded: %s", what, why);
        refuse(path, "%s", why);
        return -1;
    }
    /* The path of the descriptor the file was opened on.  A library loaded
     * earlier under that very name (through a descriptor since closed)
     * would be given back for it, so another descriptor is taken then; one
     * found as the same file under another name is the file itself. */
    for (tries = 0; tries < 8; tries++) {
        struct link_map *map = NULL;
        void *old;
        int taken;

        snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
        old = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
        if (old == NULL)
            break;
        taken = dlinfo(old, RTLD_DI_LINKMAP, &map) == 0 && map != NULL &&
                map->l_name != NULL && strcmp(map->l_name, name) == 0;
        dlclose(old);
        if (!taken)
            break;
        rc = dup(fd);
        close(fd);
        if (rc < 0) {
            set_problem("%s could not be loaded: %s", what, strerror(errno));
            return -1;
        }
        fd = rc;
    }
    if (access(name, F_OK) != 0)
        snprintf(name, sizeof name, "%s", ""); /* no /proc: by its path */
    memcpy(checked_path, real, sizeof checked_path);
    rc = load_from(name[0] != '\0' ? name : checked_path,
                   RTLD_NOW | RTLD_LOCAL, what);
    close(fd);
    return rc;
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
 * when given (only files that exist, each checked), else by soname.  0 when
 * bound. */
static int load_newest(const char *dir, char *problems, size_t size,
                       size_t *used)
{
    int major, driver_version = 0, first = 1;

    for (major = CUDART_VERSION / 1000; major >= OLDEST_RUNTIME / 1000;
         major--) {
        char file[PATH_MAX];
        struct stat st;
        int rc;

        if (dir != NULL) {
            if (snprintf(file, sizeof file, "%s/libcudart.so.%d", dir,
                         major) >= (int)sizeof file ||
                lstat(file, &st) != 0)
                continue;
            rc = load_checked(file, file);
        } else {
            snprintf(file, sizeof file, "libcudart.so.%d", major);
            rc = load_from(file, RTLD_NOW | RTLD_LOCAL, file);
        }
        if (rc != 0) {
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
            refuse(file, "the CUDA driver (%d.%d) is too old for it (%d.%d)",
                   driver_version / 1000, driver_version % 1000 / 10,
                   cai_rt_version / 1000, cai_rt_version % 1000 / 10);
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

/* Runtimes in the folders on sys.path that are not site-packages folders
 * are noted, never loaded: the working directory, a script's folder or a
 * PYTHONPATH entry may be anyone's. */
static void note_other_dirs(char *problems, size_t size, size_t *used)
{
    const char *dir;
    int major;

    for (dir = other_dirs; *dir != '\0'; dir += strlen(dir) + 1)
        for (major = CUDART_VERSION / 1000; major >= OLDEST_RUNTIME / 1000;
             major--) {
            char file[PATH_MAX];
            struct stat st;

            if (snprintf(file, sizeof file, "%s/libcudart.so.%d", dir, major) <
                    (int)sizeof file &&
                lstat(file, &st) == 0) {
                refuse(file, "not searched: only the site-packages folders "
                             "(site.getsitepackages() and the user site) are");
                add_problem(problems, size, used,
                            "%s is not searched: it "
                            "is not in a site-packages folder",
                            file);
            }
        }
}

/* CAIBRIDGE_CUDART must be an absolute path (a relative one would depend on
 * the working directory at the first CUDA call) that passes open_checked. */
static int load_chosen(const char *chosen, const char *what)
{
    if (chosen[0] != '/') {
        set_problem("%s is not used: it must be an absolute path (a "
                    "relative one would depend on the working directory)",
                    what);
        return -1;
    }
    return load_checked(chosen, what);
}

static void note_fork(void)
{
    cai_forked_after_load = 1;
}

static void watch_fork(void)
{
    pthread_atfork(NULL, NULL, note_fork);
}

/* Bound: say where from, and publish cai_rt to the lock-free readers.  file
 * is the file checked and loaded, or NULL to ask the loader. */
static void found(const char *how, const char *file)
{
    Dl_info info;
    void *symbol;

    runtime_how = how;
    memcpy(&symbol, &cai_rt.runtime_get_version, sizeof symbol);
    if (file != NULL)
        snprintf(runtime_path, sizeof runtime_path, "%s", file);
    else if (dladdr(symbol, &info) != 0 && info.dli_fname != NULL)
        snprintf(runtime_path, sizeof runtime_path, "%s", info.dli_fname);
    __atomic_store_n(&runtime_loaded, 1, __ATOMIC_RELEASE);
}

/* The order: CAIBRIDGE_CUDART, a runtime already in the process, NVIDIA's
 * pip wheels in the site-packages folders (the Python module's), then
 * $CONDA_PREFIX/lib, then the supported sonames; newest major first in
 * each place.  A file found in a folder is loaded only if open_checked
 * passes it.  Under runtime_lock. */
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
    refused_used = 0;
    runtime_refused[0] = '\0';
    if (chosen != NULL && chosen[0] != '\0') {
        snprintf(what, sizeof what, "CAIBRIDGE_CUDART=%s", chosen);
        if (load_chosen(chosen, what) == 0)
            found("CAIBRIDGE_CUDART", checked_path);
        else
            memset(&cai_rt, 0, sizeof cai_rt);
        return;
    }
    if (dl_iterate_phdr(find_loaded_cudart, loaded) != 0) {
        if (load_from(loaded, RTLD_NOW | RTLD_NOLOAD, loaded) == 0) {
            found("already loaded", NULL);
            return;
        }
        add_problem(problems, sizeof problems, &used, "%s", runtime_problem);
        memset(&cai_rt, 0, sizeof cai_rt);
    }
    note_other_dirs(problems, sizeof problems, &used);
    for (dir = search_dirs; *dir != '\0'; dir += strlen(dir) + 1) {
        if (dir[0] != '/') {
            refuse(dir, "not searched: a relative folder would depend on "
                        "the working directory");
            add_problem(problems, sizeof problems, &used,
                        "%s is not "
                        "searched: it is a relative folder",
                        dir);
            continue;
        }
        if (load_newest(dir, problems, sizeof problems, &used) == 0) {
            found("pip wheel", checked_path);
            return;
        }
    }
    if (conda != NULL && conda[0] != '\0') {
        snprintf(what, sizeof what, "%s/lib", conda);
        if (conda[0] != '/') {
            refuse(what,
                   "not searched: CONDA_PREFIX=%s is not an absolute "
                   "path (a relative one would depend on the working "
                   "directory)",
                   conda);
            add_problem(problems, sizeof problems, &used,
                        "CONDA_PREFIX=%s "
                        "is not searched: it is not an absolute path",
                        conda);
        } else if (load_newest(what, problems, sizeof problems, &used) == 0) {
            found("conda", checked_path);
            return;
        }
    }
    if (load_newest(NULL, problems, sizeof problems, &used) == 0) {
        found("system", NULL);
        return;
    }
    set_problem("no CUDA runtime: CAIBRIDGE_CUDART is unset, none is "
                "loaded in the process, none is in NVIDIA's pip wheels in "
                "the site-packages folders or in $CONDA_PREFIX/lib, and %s",
                problems);
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

/* Packs dirs into list (of room size) as search_dirs is kept; -1 if they do
 * not fit. */
static int pack_dirs(char *list, size_t size, const char *const *dirs,
                     size_t count)
{
    size_t i, used = 0;

    for (i = 0; i < count; i++) {
        size_t n = strlen(dirs[i]);

        if (n == 0)
            continue;
        if (used + n + 2 > size)
            return -1;
        memcpy(list + used, dirs[i], n + 1);
        used += n + 1;
    }
    list[used] = '\0';
    return 0;
}

int cai_cuda_search_dirs(const char *const *dirs, size_t count,
                         const char *const *others, size_t other_count)
{
    char list[sizeof search_dirs], other_list[sizeof other_dirs];

    if (pack_dirs(list, sizeof list, dirs, count) != 0 ||
        pack_dirs(other_list, sizeof other_list, others, other_count) != 0)
        return -1;
    pthread_mutex_lock(&runtime_lock);
    memcpy(search_dirs, list, sizeof list);
    memcpy(other_dirs, other_list, sizeof other_list);
    pthread_mutex_unlock(&runtime_lock);
    return 0;
}

size_t cai_cuda_search_refused(char *list, size_t size)
{
    size_t n = 0, used = 0;
    const char *entry;

    if (size < 1)
        return 0;
    pthread_mutex_lock(&runtime_lock);
    for (entry = runtime_refused; *entry != '\0'; entry += strlen(entry) + 1) {
        size_t len = strlen(entry);

        if (used + len + 2 > size)
            break;
        memcpy(list + used, entry, len + 1);
        used += len + 1;
        n++;
    }
    pthread_mutex_unlock(&runtime_lock);
    list[used] = '\0';
    return n;
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

int cai_cuda_search_dirs(const char *const *dirs, size_t count,
                         const char *const *others, size_t other_count)
{
    (void)dirs;
    (void)count;
    (void)others;
    (void)other_count;
    return 0;
}

size_t cai_cuda_search_refused(char *list, size_t size)
{
    if (size > 0)
        list[0] = '\0';
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
