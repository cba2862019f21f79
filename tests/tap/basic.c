/* The TAP producer behind tests/tap/basic.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap/basic.h"

static unsigned long tap_planned;
static unsigned long tap_run;
static unsigned long tap_failed;
static int tap_lazy;

static void tap_finish(void)
{
    fflush(stdout);
    if (tap_lazy)
        printf("1..%lu\n", tap_run);
    else if (tap_planned != tap_run)
        printf("# planned %lu tests but ran %lu\n", tap_planned, tap_run);
    if (tap_failed > 0)
        printf("# failed %lu of %lu tests\n", tap_failed, tap_run);
    fflush(stdout);
}

void plan(unsigned long count)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("1..%lu\n", count);
    tap_planned = count;
    atexit(tap_finish);
}

void plan_lazy(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    tap_lazy = 1;
    atexit(tap_finish);
}

void skip_all(const char *reason, ...)
{
    va_list ap;

    printf("1..0 # SKIP ");
    va_start(ap, reason);
    vprintf(reason, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(0);
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 0)))
#endif
static int report(int success, const char *fmt, va_list ap)
{
    tap_run++;
    if (!success)
        tap_failed++;
    printf("%sok %lu - ", success ? "" : "not ", tap_run);
    vprintf(fmt, ap);
    printf("\n");
    return success;
}

int ok(int success, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    report(success, fmt, ap);
    va_end(ap);
    return success;
}

int is_int(long long expected, long long seen, const char *fmt, ...)
{
    va_list ap;
    int success = expected == seen;

    va_start(ap, fmt);
    report(success, fmt, ap);
    va_end(ap);
    if (!success)
        printf("#   expected: %lld\n#       seen: %lld\n", expected, seen);
    return success;
}

int is_string(const char *expected, const char *seen, const char *fmt, ...)
{
    va_list ap;
    int success;

    if (expected == NULL || seen == NULL)
        success = expected == seen;
    else
        success = strcmp(expected, seen) == 0;
    va_start(ap, fmt);
    report(success, fmt, ap);
    va_end(ap);
    if (!success)
        printf("#   expected: '%s'\n#       seen: '%s'\n",
               expected ? expected : "(null)", seen ? seen : "(null)");
    return success;
}

int contains(const char *haystack, const char *needle, const char *fmt, ...)
{
    va_list ap;
    int success = haystack != NULL && needle != NULL &&
                  strstr(haystack, needle) != NULL;

    va_start(ap, fmt);
    report(success, fmt, ap);
    va_end(ap);
    if (!success)
        printf("#   expected to find: '%s'\n#                 in: '%s'\n",
               needle ? needle : "(null)", haystack ? haystack : "(null)");
    return success;
}

void skip(const char *reason, ...)
{
    va_list ap;

    tap_run++;
    printf("ok %lu # SKIP ", tap_run);
    va_start(ap, reason);
    vprintf(reason, ap);
    va_end(ap);
    printf("\n");
}

void diag(const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

void bail(const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    printf("Bail out! ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(255);
}
