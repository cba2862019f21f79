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
static int
report(int success, const char *fmt, va_list ap)
{
    tap_run++;
    if (!success)
        tap_failed++;
    printf("%sok %lu - ", success ? "" : "not ", tap_run);
    vprintf(fmt, ap);
    printf("\n");
    return success;
}

/* Reports success, described by the caller's fmt and its arguments. */
#define REPORT(success, fmt)       \
    do {                           \
        va_list ap_;               \
                                   \
        va_start(ap_, fmt);        \
        report(success, fmt, ap_); \
        va_end(ap_);               \
    } while (0)

/* After a failed string check: the two strings, labels aligned, NULL shown
 * as such. */
static void show_strings(const char *label1, const char *s1,
                         const char *label2, const char *s2)
{
    int width = (int)(strlen(label1) > strlen(label2) ? strlen(label1)
                                                      : strlen(label2));

    printf("#   %*s: '%s'\n#   %*s: '%s'\n", width, label1, s1 ? s1 : "(null)",
           width, label2, s2 ? s2 : "(null)");
}

int ok(int success, const char *fmt, ...)
{
    REPORT(success, fmt);
    return success;
}

int is_int(long long expected, long long seen, const char *fmt, ...)
{
    int success = expected == seen;

    REPORT(success, fmt);
    if (!success)
        printf("#   expected: %lld\n#       seen: %lld\n", expected, seen);
    return success;
}

int is_string(const char *expected, const char *seen, const char *fmt, ...)
{
    int success;

    if (expected == NULL || seen == NULL)
        success = expected == seen;
    else
        success = strcmp(expected, seen) == 0;
    REPORT(success, fmt);
    if (!success)
        show_strings("expected", expected, "seen", seen);
    return success;
}

int contains(const char *haystack, const char *needle, const char *fmt, ...)
{
    int success = haystack != NULL && needle != NULL &&
                  strstr(haystack, needle) != NULL;

    REPORT(success, fmt);
    if (!success)
        show_strings("expected to find", needle, "in", haystack);
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
