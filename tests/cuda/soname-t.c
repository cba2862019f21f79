/*
 * With no runtime chosen or loaded, the supported libcudart majors are
 * tried newest first, and one whose driver is too old is passed over: a
 * CUDA 13 build still runs on a 12.x driver.  Copies of the double named
 * libcudart.so.13 and libcudart.so.12 (each reports its name's version)
 * are put first on the library path of a child run of this program, with
 * the driver version the double reports chosen per run.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda-test.h"

static char dir[64];

static void copy_file(const char *from, const char *to)
{
    char buf[65536];
    FILE *in = fopen(from, "rb"), *out;
    size_t n;

    if (in == NULL)
        bail("cannot read %s", from);
    out = fopen(to, "wb");
    if (out == NULL)
        bail("cannot write %s", to);
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            bail("cannot write %s", to);
    fclose(in);
    if (fclose(out) != 0)
        bail("cannot write %s", to);
}

/* The child: loads whatever the library path offers and reports. */
static int child(void)
{
    cai_error_t err;
    DLDevice device;
    int version = 0, rc;

    rc = cai_cuda_runtime_version(&version, &err);
    printf("version=%d status=%d message=%s\n", version, rc,
           rc == 0 ? "" : err.message);
    if (rc == 0) {
        rc = cai_cuda_locate(NULL, &device, &err);
        printf("locate status=%d message=%s\n", rc,
               rc == 0 ? "" : err.message);
    }
    return 0;
}

/* Runs the child with the driver version the double reports. */
static void run(int driver, char *out, size_t size)
{
    char command[512];
    const char *path = getenv("LD_LIBRARY_PATH");
    FILE *pipe;
    size_t n;

    snprintf(command, sizeof command,
             "env -u CAIBRIDGE_CUDART LD_LIBRARY_PATH='%s%s%s' "
             "CUDART_DOUBLE_DRIVER_VERSION=%d /proc/%ld/exe child",
             dir, path != NULL ? ":" : "", path != NULL ? path : "", driver,
             (long)getpid());
    pipe = popen(command, "r");
    if (pipe == NULL)
        bail("cannot run the child");
    n = fread(out, 1, size - 1, pipe);
    out[n] = '\0';
    pclose(pipe);
}

int main(int argc, char **argv)
{
    char path[128], out[1024];

    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child();
    if (!cai_cuda_built())
        skip_all("built without CUDA support");
    snprintf(dir, sizeof dir, "/tmp/caibridge-soname-XXXXXX");
    if (mkdtemp(dir) == NULL)
        bail("cannot make a directory: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/libcudart.so.13", dir);
    copy_file(CUDART_DOUBLE_PATH, path);
    snprintf(path, sizeof path, "%s/libcudart.so.12", dir);
    copy_file(CUDART_DOUBLE_PATH, path);
    plan_lazy();

    run(13000, out, sizeof out);
    contains(out, "version=13000 status=0",
             "driver 13.0: libcudart.so.13 "
             "is used");

    run(12040, out, sizeof out);
    contains(out, "version=12000 status=0",
             "driver 12.4: libcudart.so.13 "
             "is passed over for libcudart.so.12");
    contains(out, "locate status=0", "driver 12.4: CUDA works through it");

    run(11080, out, sizeof out);
    contains(out, "status=-6", "driver 11.8: no runtime it can run");
    contains(out, "the CUDA driver (11.8) is too old for libcudart.so.13",
             "driver 11.8: the message names the driver and the runtime");

    run(0, out, sizeof out);
    contains(out, "version=13000 status=0",
             "no driver: the newest runtime "
             "is kept (its version needs no driver)");

    snprintf(path, sizeof path, "%s/libcudart.so.13", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/libcudart.so.12", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}
