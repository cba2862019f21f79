/*
 * What each CUDA call that a hand-over may make costs the host, in a C
 * loop: median nanoseconds per call over REPEATS runs of LOOP calls.
 *
 *     cuda-calls LIBCUDART [LIBCUDA]
 *
 * The runtime is the one caibridge uses (bench-gpu.py passes its path); the
 * driver is libcuda.so.1 unless named.  Each call's own arguments are made
 * once (a stream, two events, a device buffer), so only the call is timed.
 * cudaLaunchHostFunc is timed for its host cost only (40 a run: more would
 * fill the stream and time a blocked launch); what it costs the stream is
 * the point of bench-gpu.py's pipeline rows.  Prints one line per
 * call: "name ns".  Exits 0 with a note when there is no GPU.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LOOP 2000
#define REPEATS 15

typedef int (*fn0)(void);
typedef int (*fn_p)(void *);
typedef int (*fn_pp)(void *, void *);
typedef int (*fn_ppu)(void *, void *, unsigned);
typedef int (*fn_malloc)(void **, size_t);
typedef int (*fn_event_create)(void **, unsigned);
typedef int (*fn_host)(void *, void (*)(void *), void *);

static void *need(void *lib, const char *name)
{
    void *f = dlsym(lib, name);

    if (f == NULL) {
        printf("# %s: not found\n", name);
        exit(0);
    }
    return f;
}

static double now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static void nothing(void *unused)
{
    (void)unused;
}

static void *rt, *drv, *stream, *ev1, *ev2, *ptr, *ctx;
static unsigned long long id;
static int capturing;
static char attrs[256];

enum {
    CTX_GET_CURRENT,
    CTX_GET_ID,
    PEEK,
    IS_CAPTURING,
    STREAM_GET_ID,
    POINTER_ATTRIBUTES,
    EVENT_RECORD,
    EVENT_RECORD_LEGACY,
    STREAM_WAIT_EVENT,
    EVENT_QUERY,
    CU_EVENT_QUERY,
    LAUNCH_HOST_FUNC,
    CALLS
};

static const char *const names[CALLS] = {
    "cuCtxGetCurrent",     "cuCtxGetId",
    "cudaPeekAtLastError", "cudaStreamIsCapturing",
    "cudaStreamGetId",     "cudaPointerGetAttributes",
    "cudaEventRecord",     "cudaEventRecord (stream 1)",
    "cudaStreamWaitEvent", "cudaEventQuery",
    "cuEventQuery",        "cudaLaunchHostFunc (host)"};
static void *fns[CALLS];

static void call(int which)
{
    switch (which) {
    case CTX_GET_CURRENT:
        ((fn_p)fns[which])(&ctx);
        break;
    case CTX_GET_ID:
        ((fn_pp)fns[which])(ctx, &id);
        break;
    case PEEK:
        ((fn0)fns[which])();
        break;
    case IS_CAPTURING:
        ((fn_pp)fns[which])(stream, &capturing);
        break;
    case STREAM_GET_ID:
        ((fn_pp)fns[which])(stream, &id);
        break;
    case POINTER_ATTRIBUTES:
        ((fn_pp)fns[which])(attrs, ptr);
        break;
    case EVENT_RECORD:
        ((fn_pp)fns[which])(ev1, stream);
        break;
    case EVENT_RECORD_LEGACY:
        ((fn_pp)fns[which])(ev2, (void *)(uintptr_t)1);
        break;
    case STREAM_WAIT_EVENT:
        ((fn_ppu)fns[which])(stream, ev2, 0);
        break;
    case EVENT_QUERY:
    case CU_EVENT_QUERY:
        ((fn_p)fns[which])(ev1);
        break;
    case LAUNCH_HOST_FUNC:
        ((fn_host)fns[which])(stream, nothing, NULL);
        break;
    }
}

int main(int argc, char **argv)
{
    static const char *const rt_names[CALLS] = {NULL,
                                                NULL,
                                                "cudaPeekAtLastError",
                                                "cudaStreamIsCapturing",
                                                "cudaStreamGetId",
                                                "cudaPointerGetAttributes",
                                                "cudaEventRecord",
                                                "cudaEventRecord",
                                                "cudaStreamWaitEvent",
                                                "cudaEventQuery",
                                                NULL,
                                                "cudaLaunchHostFunc"};
    double t[REPEATS];
    int which, r, i;

    if (argc < 2) {
        fprintf(stderr, "usage: cuda-calls LIBCUDART [LIBCUDA]\n");
        return 2;
    }
    rt = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    drv = dlopen(argc > 2 ? argv[2] : "libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (rt == NULL || drv == NULL) {
        printf("# no GPU run: %s\n", dlerror());
        return 0;
    }
    for (which = 0; which < CALLS; which++)
        fns[which] = rt_names[which] != NULL ? dlsym(rt, rt_names[which])
                                             : NULL;
    fns[CTX_GET_CURRENT] = need(drv, "cuCtxGetCurrent");
    fns[CTX_GET_ID] = dlsym(drv, "cuCtxGetId");
    fns[CU_EVENT_QUERY] = dlsym(drv, "cuEventQuery");
    if (((fn_malloc)need(rt, "cudaMalloc"))(&ptr, 1 << 20) != 0) {
        printf("# no GPU run: cudaMalloc failed\n");
        return 0;
    }
    ((fn_p)need(rt, "cudaStreamCreate"))(&stream);
    ((fn_event_create)need(rt, "cudaEventCreateWithFlags"))(&ev1, 2);
    ((fn_event_create)need(rt, "cudaEventCreateWithFlags"))(&ev2, 2);
    ((fn_p)need(drv, "cuCtxGetCurrent"))(&ctx);
    for (which = 0; which < CALLS; which++) {
        if (fns[which] == NULL) {
            printf("%s -\n", names[which]);
            continue;
        }
        for (r = 0; r < REPEATS; r++) {
            /* Host functions fill a stream after ~56: fewer, so that the
             * host's own cost is timed, not a blocked launch. */
            int n = which == LAUNCH_HOST_FUNC ? 40 : LOOP;
            double start = now_ns();

            for (i = 0; i < n; i++)
                call(which);
            t[r] = (now_ns() - start) / n;
            ((fn0)need(rt, "cudaDeviceSynchronize"))();
        }
        qsort(t, REPEATS, sizeof *t, cmp);
        printf("%s %.0f\n", names[which], t[REPEATS / 2]);
    }
    return 0;
}
