/* Private to the library: never installed. */
#ifndef CAIBRIDGE_INTERNAL_H
#define CAIBRIDGE_INTERNAL_H

#include "caibridge.h"
#include "trace.h"

#if defined(__GNUC__)
#define CAI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define CAI_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define CAI_PRINTF(f, a)
#define CAI_UNLIKELY(x) (x)
#endif

/* Records status, field and a formatted message in err (if any); returns
 * status so callers can write "return cai_fail(...)". */
int cai_fail(cai_error_t *err, int status, const char *field, const char *fmt,
             ...) CAI_PRINTF(4, 5);

/* A NULL where an argument must point somewhere: CAI_EINVAL naming it.
 * The public functions check their pointers (no crash on NULL). */
int cai_null_arg(cai_error_t *err, const char *name);

/* Bits of an options argument this library does not know: CAI_EINVAL
 * naming them, so a newer caller's option is never silently ignored. */
int cai_unknown_bits(cai_error_t *err, const char *field, unsigned bits);

/* The options each function knows. */
#define CAI_OPTIONS_KNOWN (CAI_OPT_LEGACY_READONLY_OK | CAI_OPT_IS_COPIED)
#define CAI_RELEASE_OPTIONS_KNOWN ((unsigned)CAI_RELEASE_BLOCK)

/* Clears err for a successful call; returns 0 so callers can write
 * "return cai_ok(err)". */
static inline int cai_ok(cai_error_t *err)
{
    if (err != NULL) {
        err->status = 0;
        err->field[0] = '\0';
        err->message[0] = '\0';
    }
    return 0;
}

/* stats.c: the counters behind cai_stats.  CAI_COUNT(field, n) adds n
 * where the thing happens; a relaxed atomic add, no lock. */
extern cai_stats_t cai_counters;
#define CAI_COUNT(field, n)                                       \
    ((void)__atomic_fetch_add(&cai_counters.field, (uint64_t)(n), \
                              __ATOMIC_RELAXED))
/* A deferred owner let go now (done: it was deferred), by the waiter
 * thread or at a call; a copy made. */
void cai_count_let_go(int done);
void cai_count_copy(int to_host, size_t nbytes);

/* Name of a DLPack type for messages ("bfloat16", "float8_e4m3fn"). */
const char *cai_dtype_name(DLDataType dtype, char buf[32]);

/* Product of shape[0..ndim) into *count; 0 on success, -1 on overflow. */
int cai_element_count(int ndim, const int64_t *shape, int64_t *count);

/* The lowest (<= 0) and highest (>= 0) byte offsets that strides reach from
 * the first element over the axes longer than 1, itemsize not included;
 * returns -1, or the first axis where a product or sum overflows.  Inline:
 * the descriptor check runs it on every strided hand-over. */
static inline int cai_strided_span(int ndim, const int64_t *shape,
                                   const int64_t *strides, int64_t *lo,
                                   int64_t *hi)
{
    int64_t below = 0, above = 0, span;
    int i;

    for (i = 0; i < ndim; i++) {
        /* An axis of length 0 or 1 never applies its stride. */
        if (shape[i] <= 1)
            continue;
        if (__builtin_mul_overflow(strides[i], shape[i] - 1, &span) ||
            (span < 0 ? __builtin_add_overflow(below, span, &below)
                      : __builtin_add_overflow(above, span, &above)))
            return i;
    }
    *lo = below;
    *hi = above;
    return -1;
}

#endif
