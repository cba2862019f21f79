/* CAIBRIDGE_CUDART is taken only as an absolute path to a file that others
 * cannot change, in folders (each one up to the root) others cannot change,
 * each refusal says why (owned by another user, or writable by others), and
 * a failed search is not kept: the call after the cause is gone finds the
 * runtime. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda-search.h"
#include "cuda-test.h"

static char dir[64], file[128], sub[96], deep[160];

static void copy_file(const char *from, const char *to)
{
    char command[2 * PATH_MAX + 16];

    snprintf(command, sizeof command, "cp '%s' '%s'", from, to);
    if (system(command) != 0)
        bail("cannot copy %s to %s", from, to);
}

/* The message of a runtime version call that must fail. */
static char err_of_last[sizeof((cai_error_t *)0)->message];

static void refused(const char *needle, const char *what)
{
    cai_error_t err;
    int version = -1;

    is_int(CAI_ENOCUDA, cai_cuda_runtime_version(&version, &err),
           "%s: refused", what);
    contains(err.message, needle, "%s: the message says why", what);
    memcpy(err_of_last, err.message, sizeof err_of_last);
}

/* The refusal is also in the list of candidates passed over. */
static void listed(const char *needle, const char *what)
{
    char list[4096];

    ok(cai_cuda_search_refused(list, sizeof list) == 1 &&
           strstr(list, needle) != NULL,
       "%s: listed as refused: %s", what, list);
}

int main(void)
{
    char path[PATH_MAX];
    const char *how;
    cai_error_t err;
    int version = 0;

    if (!cai_cuda_built())
        skip_all("built without CUDA support: no runtime is ever loaded");
    plan_lazy();

    if (setenv("CAIBRIDGE_CUDART", "libcudart-double.so", 1) != 0)
        bail("cannot set CAIBRIDGE_CUDART");
    refused("CAIBRIDGE_CUDART=libcudart-double.so is not used: it must be "
            "an absolute path",
            "relative path");

    snprintf(dir, sizeof dir, "/tmp/caibridge-search-XXXXXX");
    if (mkdtemp(dir) == NULL)
        bail("cannot make a directory: %s", strerror(errno));
    snprintf(file, sizeof file, "%s/libcudart.so.13", dir);
    copy_file(CUDART_DOUBLE_PATH, file);
    if (setenv("CAIBRIDGE_CUDART", file, 1) != 0)
        bail("cannot set CAIBRIDGE_CUDART");

    chmod(file, 0666);
    refused("may be written by others", "world-writable file");
    refused("mode 0666", "world-writable file, its mode");
    chmod(file, 0664);
    refused("may be written by others", "group-writable file");

    chmod(file, 0755);
    chmod(dir, 0777);
    refused("its folder", "world-writable folder");

    /* A folder further up, not sticky: the library's own folder could be
     * renamed away and replaced. */
    snprintf(sub, sizeof sub, "%s/lib", dir);
    snprintf(deep, sizeof deep, "%s/libcudart.so.13", sub);
    if (mkdir(sub, 0755) != 0)
        bail("cannot make %s: %s", sub, strerror(errno));
    copy_file(CUDART_DOUBLE_PATH, deep);
    if (setenv("CAIBRIDGE_CUDART", deep, 1) != 0)
        bail("cannot set CAIBRIDGE_CUDART");
    {
        char needle[128];

        snprintf(needle, sizeof needle,
                 "its folder %s may be written by others (mode 0777)", dir);
        refused(needle, "world-writable folder two levels up");
        listed(needle, "world-writable folder two levels up");
    }
    chmod(dir, 0700);

    if (geteuid() == 0) {
        char needle[160];

        if (chown(sub, 65534, 65534) != 0)
            bail("cannot chown %s: %s", sub, strerror(errno));
        snprintf(needle, sizeof needle,
                 "its folder %s is owned by uid 65534, neither this user",
                 sub);
        refused(needle, "folder owned by another user");
        ok(strstr(err_of_last, "written") == NULL,
           "folder owned by another user: not called writable");
        if (chown(sub, 0, 0) != 0 || chown(deep, 65534, 65534) != 0)
            bail("cannot chown %s: %s", deep, strerror(errno));
        snprintf(needle, sizeof needle,
                 "%s is owned by uid 65534, neither this user", deep);
        refused(needle, "file owned by another user");
        if (chown(deep, 0, 0) != 0)
            bail("cannot chown %s: %s", deep, strerror(errno));
    } else {
        for (int i = 0; i < 5; i++)
            skip("giving a file to another user (chown) needs root");
    }
    unlink(deep);
    rmdir(sub);
    if (setenv("CAIBRIDGE_CUDART", file, 1) != 0)
        bail("cannot set CAIBRIDGE_CUDART");
    chmod(dir, 01777);
    is_int(CAI_OK,
           cai_cuda_runtime_info(path, sizeof path, &how, &version, &err),
           "a sticky folder (as /tmp): loaded, the search tried again");
    is_string(file, path, "the path loaded is reported");
    is_string("CAIBRIDGE_CUDART", how, "how it was found is reported");
    ok(version >= 11000, "its version is reported: %d", version);

    /* Loaded for good: a later problem does not unload it. */
    chmod(file, 0666);
    is_int(CAI_OK, cai_cuda_runtime_version(&version, &err),
           "once loaded, the runtime stays");

    unlink(file);
    rmdir(dir);
    return 0;
}
