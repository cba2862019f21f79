/*
 * Control side of the recording CUDA runtime double (cudart-double.c).
 *
 * The double is loaded by caibridge through CAIBRIDGE_CUDART (or found
 * already loaded); a test dlopens the same file, which gives it the same
 * instance, and drives it through these functions.  Every CUDA call is
 * logged as one line:
 *
 *   name(arguments)               the call succeeded
 *   name(arguments) = result      it succeeded and wrote result
 *   name(arguments) -> error N    it failed with CUDA error N
 *
 * Streams and pointers are logged in hex ("0x5000"), events as ev1, ev2...
 * in creation order since the last reset.
 */
#ifndef CAI_CUDART_DOUBLE_H
#define CAI_CUDART_DOUBLE_H

#include <stddef.h>

/* Devices the double pretends to have (0 .. DOUBLE_DEVICE_COUNT - 1). */
#define DOUBLE_DEVICE_COUNT 4

/* Memory types as cudaPointerGetAttributes reports them. */
enum {
    DOUBLE_UNREGISTERED = 0,
    DOUBLE_PINNED = 1,
    DOUBLE_DEVICE = 2,
    DOUBLE_MANAGED = 3
};

struct cudart_double {
    /* Empties the log, the pointer table and the failures; device 0 is
     * current again.  Events still alive stay alive and are counted. */
    void (*reset)(void);
    /* The runtime version reported from now on (13000 at start). */
    void (*set_version)(int version);
    void (*set_current_device)(int device);
    int (*current_device)(void);
    /* ptr is reported with this memory type and device; others are
     * unregistered host memory. */
    void (*set_pointer)(const void *ptr, int type, int device);
    /* From now on, call (or every call needing a driver when call is "*")
     * fails with error.  cudaGetErrorString, cudaGetLastError and
     * cudaRuntimeGetVersion never fail, as in the real runtime. */
    void (*fail)(const char *call, int error);
    /* The log since the last reset, one line per call. */
    const char *(*log)(void);
    /* Events created and not yet destroyed. */
    int (*live_events)(void);
};

#endif
