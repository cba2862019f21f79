/*
 * A small TAP producer for caibridge's C tests.
 *
 * plan(n) first (or plan_lazy() and the plan is printed at exit); each check
 * prints "ok N - description" or "not ok N - description" and, on failure,
 * a diagnostic with what was expected and what was seen.
 */
#ifndef CAI_TAP_BASIC_H
#define CAI_TAP_BASIC_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TAP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define TAP_NORETURN __attribute__((noreturn))
#else
#define TAP_PRINTF(f, a)
#define TAP_NORETURN
#endif

#ifdef __cplusplus
extern "C" {
#endif

void plan(unsigned long count);
void plan_lazy(void);
TAP_NORETURN void skip_all(const char *reason, ...) TAP_PRINTF(1, 2);

int ok(int success, const char *fmt, ...) TAP_PRINTF(2, 3);
int is_int(long long expected, long long seen, const char *fmt, ...)
    TAP_PRINTF(3, 4);
int is_string(const char *expected, const char *seen, const char *fmt, ...)
    TAP_PRINTF(3, 4);
/* Passes when needle occurs in haystack. */
int contains(const char *haystack, const char *needle, const char *fmt, ...)
    TAP_PRINTF(3, 4);
void skip(const char *reason, ...) TAP_PRINTF(1, 2);
void diag(const char *fmt, ...) TAP_PRINTF(1, 2);
TAP_NORETURN void bail(const char *fmt, ...) TAP_PRINTF(1, 2);

#ifdef __cplusplus
}
#endif

#endif
