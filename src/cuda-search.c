/*
 * Finding the CUDA runtime: CAIBRIDGE_CUDART, one already loaded, NVIDIA's
 * pip wheels in the site-packages folders, $CONDA_PREFIX/lib, then the
 * system's by soname; every file found in a folder is checked before it is
 * loaded, and what is passed over is noted with the reason.  The search
 * hands each file it finds to the binder it is given (cuda-runtime.c's),
 * which loads it, and hands back where the runtime bound came from.
 */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda-internal.h"
#include "cuda-search.h"

#ifdef HAVE_CUDA

/* The candidates the last search passed over, "path: reason", each ended by
 * a NUL, the list by another. */
static char runtime_refused[8192];
static size_t refused_used;
/* The Python module's folders, each ended by a NUL, the list by another:
 * the site-packages folders searched, then the other sys.path folders, only
 * reported when they hold a runtime. */
static char search_dirs[16384];
static char other_dirs[16384];
static void (*search_hook)(void);
/* Why the last search or load failed, and the lock of the search's state
 * (the binder's too). */
char cai_runtime_problem[CAI_PROBLEM_SIZE];
pthread_mutex_t cai_runtime_lock = PTHREAD_MUTEX_INITIALIZER;
/* The binder of the search under way (under cai_runtime_lock). */
static const struct cai_binder *binder;

/* The last reason whole, as cai_set_problem was given it (cut only past
 * its own room), for cai_cuda_search_problem. */
static char problem_whole[4096];

/* What ends a reason cut to fit cai_error_t's message. */
static const char CUT_SHORT[] = "...; all reasons: python -m caibridge";

/* Says why loading failed.  A text longer than an error's message is cut
 * at a word's end, never inside one, and says where the rest is (every
 * candidate passed over is in the refused list). */
void CAI_PRINTF(1, 2) cai_set_problem(const char *fmt, ...)
{
    char full[4096];
    size_t room = sizeof cai_runtime_problem - sizeof CUT_SHORT, cut;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(full, sizeof full, fmt, ap);
    va_end(ap);
    memcpy(problem_whole, full, sizeof problem_whole);
    if (n >= 0 && (size_t)n < sizeof cai_runtime_problem) {
        memcpy(cai_runtime_problem, full, (size_t)n + 1);
        return;
    }
    for (cut = room; cut > 0 && full[cut] != ' '; cut--)
        ;
    while (cut > 0 && (full[cut - 1] == ' ' || full[cut - 1] == ',' ||
                       full[cut - 1] == ';' || full[cut - 1] == ':'))
        cut--;
    if (cut == 0)
        cut = room;
    memcpy(cai_runtime_problem, full, cut);
    memcpy(cai_runtime_problem + cut, CUT_SHORT, sizeof CUT_SHORT);
}


void cai_run_search_hook(void)
{
    void (*hook)(void) = __atomic_load_n(&search_hook, __ATOMIC_ACQUIRE);

    if (hook != NULL)
        hook();
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
    char reason[PATH_MAX + 256]; /* whole: the list is where it is all */
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

/* What a file that is not a regular one is, for a message. */
static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a named pipe (FIFO)";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISDIR(mode))
        return "a folder";
    return "not a file";
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
    /* Only a regular file is opened: a FIFO would block the open (and
     * cai_runtime_lock with it) until some writer came, a device may do
     * anything.  O_NONBLOCK too, for one swapped in after the look. */
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        put(why, size, "%s is %s, not a regular file", real,
            file_kind(st.st_mode));
        close(dir);
        return -1;
    }
    fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
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
        put(why, size, "%s is %s, not a regular file", real,
            file_kind(st.st_mode));
        close(fd);
        return -1;
    }
    if (unsafe(&st, 0, real, why, size) != NULL) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The real path of the file loaded last by load_checked: the one walked. */
static char checked_path[PATH_MAX];

/* Checks path, then loads the very file checked, through its descriptor.
 * 0 when bound; -1 with the reason in cai_runtime_problem, and the candidate
 * noted as refused when a check failed. */
static int load_checked(const char *path, const char *what)
{
    char why[PATH_MAX + 256], name[64], real[PATH_MAX];
    int fd = open_checked(path, real, why, sizeof why), rc, tries;

    if (fd < 0) {
        if (fd == -1)
            cai_set_problem("%s is not used: %s", what, why);
        else
            cai_set_problem("%s could not be loaded: %s", what, why);
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
            cai_set_problem("%s could not be loaded: %s", what,
                            strerror(errno));
            return -1;
        }
        fd = rc;
    }
    if (access(name, F_OK) != 0)
        snprintf(name, sizeof name, "%s", ""); /* no /proc: by its path */
    memcpy(checked_path, real, sizeof checked_path);
    rc = binder->load(name[0] != '\0' ? name : checked_path,
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

/* Whether an entry of LD_LIBRARY_PATH that names a folder relative to the
 * working directory (an empty one, as in "/x:", or "lib") holds file: the
 * loader would load it from there by soname, and whoever can write the
 * working directory could plant it.  Such a file is refused, not loaded
 * (the loader reads LD_LIBRARY_PATH at start, so it cannot be told to
 * skip the entry). */
static int relative_library_path_holds(const char *file, char *problems,
                                       size_t size, size_t *used)
{
    const char *paths = getenv("LD_LIBRARY_PATH"), *entry, *end;
    char candidate[PATH_MAX];
    struct stat st;

    if (paths == NULL)
        return 0;
    for (entry = paths;; entry = end + 1) {
        size_t n;

        end = strchr(entry, ':');
        n = end != NULL ? (size_t)(end - entry) : strlen(entry);
        if ((n == 0 || entry[0] != '/') &&
            snprintf(candidate, sizeof candidate, "%.*s%s%s", (int)n, entry,
                     n > 0 ? "/" : "", file) < (int)sizeof candidate &&
            lstat(candidate, &st) == 0) {
            refuse(candidate,
                   "not loaded: LD_LIBRARY_PATH's entry \"%.*s\" names a "
                   "folder relative to the working directory",
                   (int)n, entry);
            add_problem(problems, size, used,
                        "%s is not loaded: LD_LIBRARY_PATH names the "
                        "working directory",
                        file);
            return 1;
        }
        if (end == NULL)
            return 0;
    }
}

/* The runtime majors the headers' layout serves, newest first: a CUDA 13
 * build still runs on a 12.x driver through a libcudart.so.12.  In dir
 * when given (only files that exist, each checked), else by soname.  0 when
 * bound. */
static int load_newest(const char *dir, char *problems, size_t size,
                       size_t *used)
{
    int major, driver_version = 0, runtime_version = 0, first = 1;

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
            rc = relative_library_path_holds(file, problems, size, used)
                     ? -2
                     : binder->load(file, RTLD_NOW | RTLD_LOCAL, file);
            if (rc == -2) {
                first = 0;
                continue;
            }
        }
        if (rc != 0) {
            /* Of the sonames, only the first reason: the older ones say
             * the same. */
            if (dir != NULL || first)
                add_problem(problems, size, used, "%s", cai_runtime_problem);
            first = 0;
            continue;
        }
        first = 0;
        binder->versions(&driver_version, &runtime_version);
        if (driver_version > 0 &&
            driver_version / 1000 < runtime_version / 1000) {
            /* Driver too old for this runtime: try an older one. */
            add_problem(problems, size, used,
                        "the CUDA driver (%d.%d) is too old for %s (%d.%d)",
                        driver_version / 1000, driver_version % 1000 / 10,
                        file, runtime_version / 1000,
                        runtime_version % 1000 / 10);
            refuse(file, "the CUDA driver (%d.%d) is too old for it (%d.%d)",
                   driver_version / 1000, driver_version % 1000 / 10,
                   runtime_version / 1000, runtime_version % 1000 / 10);
            binder->unload();
            continue;
        }
        return 0; /* no driver at all is reported at the first call */
    }
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
        cai_set_problem("%s is not used: it must be an absolute path (a "
                        "relative one would depend on the working directory)",
                        what);
        return -1;
    }
    return load_checked(chosen, what);
}

/* A search's end: the runtime was bound, from file (checked and loaded)
 * or, for "", by the loader's choice. */
static int bound(const char *where, const char *file, const char **how,
                 char *path, size_t size)
{
    *how = where;
    snprintf(path, size, "%s", file);
    return 0;
}

/* The order: CAIBRIDGE_CUDART, a runtime already in the process, NVIDIA's
 * pip wheels in the site-packages folders (the Python module's), then
 * $CONDA_PREFIX/lib, then the supported sonames; newest major first in
 * each place.  A file found in a folder is loaded only if open_checked
 * passes it.  Under cai_runtime_lock. */
int cai_search_runtime(const struct cai_binder *with, const char **how,
                       char *path, size_t size)
{
    const char *chosen = environment("CAIBRIDGE_CUDART");
    const char *conda = environment("CONDA_PREFIX");
    const char *dir;
    char loaded[PATH_MAX] = "";
    char what[PATH_MAX + 32];
    char problems[sizeof cai_runtime_problem] = "";
    size_t used = 0;

    binder = with;
    refused_used = 0;
    runtime_refused[0] = '\0';
    if (chosen != NULL && chosen[0] != '\0') {
        snprintf(what, sizeof what, "CAIBRIDGE_CUDART=%s", chosen);
        if (load_chosen(chosen, what) == 0)
            return bound("CAIBRIDGE_CUDART", checked_path, how, path, size);
        return -1;
    }
    if (dl_iterate_phdr(find_loaded_cudart, loaded) != 0) {
        if (binder->load(loaded, RTLD_NOW | RTLD_NOLOAD, loaded) == 0)
            return bound("already loaded", "", how, path, size);
        add_problem(problems, sizeof problems, &used, "%s",
                    cai_runtime_problem);
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
        if (load_newest(dir, problems, sizeof problems, &used) == 0)
            return bound("pip wheel", checked_path, how, path, size);
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
            return bound("conda", checked_path, how, path, size);
        }
    }
    if (load_newest(NULL, problems, sizeof problems, &used) == 0)
        return bound("system", "", how, path, size);
    /* Short, so the reasons fit an error's message. */
    cai_set_problem("no CUDA runtime (CAIBRIDGE_CUDART unset, none loaded, "
                    "none in pip wheels or $CONDA_PREFIX/lib): %s",
                    problems);
    return -1;
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
    pthread_mutex_lock(&cai_runtime_lock);
    memcpy(search_dirs, list, sizeof list);
    memcpy(other_dirs, other_list, sizeof other_list);
    pthread_mutex_unlock(&cai_runtime_lock);
    return 0;
}

size_t cai_cuda_search_refused(char *list, size_t size)
{
    size_t n = 0, used = 0;
    const char *entry;

    if (size < 1)
        return 0;
    pthread_mutex_lock(&cai_runtime_lock);
    for (entry = runtime_refused; *entry != '\0'; entry += strlen(entry) + 1) {
        size_t len = strlen(entry);

        if (used + len + 2 > size)
            break;
        memcpy(list + used, entry, len + 1);
        used += len + 1;
        n++;
    }
    pthread_mutex_unlock(&cai_runtime_lock);
    list[used] = '\0';
    return n;
}

size_t cai_cuda_search_problem(char *text, size_t size)
{
    size_t n;

    if (size < 1)
        return 0;
    pthread_mutex_lock(&cai_runtime_lock);
    n = strlen(problem_whole);
    if (n >= size)
        n = size - 1;
    memcpy(text, problem_whole, n);
    pthread_mutex_unlock(&cai_runtime_lock);
    text[n] = '\0';
    return n;
}

#else /* !HAVE_CUDA */

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

size_t cai_cuda_search_problem(char *text, size_t size)
{
    if (size > 0)
        text[0] = '\0';
    return 0;
}

#endif /* HAVE_CUDA */
