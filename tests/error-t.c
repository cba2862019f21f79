/* Tests of src/error.c: status names, versions, the error struct. */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caibridge.h"
#include "tap/basic.h"

#ifndef PACKAGE_VERSION
#error "tests/error-t needs config.h for configure's PACKAGE_VERSION"
#endif

/* The version = "..." line of $srcdir/pyproject.toml's [project] table into
 * out; "" when there is none. */
static void pyproject_version(char *out, size_t size)
{
    const char *srcdir = getenv("srcdir");
    char path[4096], line[512];
    int in_project = 0;
    FILE *f;

    out[0] = '\0';
    snprintf(path, sizeof path, "%s/pyproject.toml",
             srcdir != NULL ? srcdir : ".");
    f = fopen(path, "r");
    if (f == NULL) {
        diag("cannot open %s", path);
        return;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        const char *q;

        if (line[0] == '[')
            in_project = strncmp(line, "[project]", 9) == 0;
        else if (in_project && strncmp(line, "version = \"", 11) == 0 &&
                 (q = strchr(line + 11, '"')) != NULL) {
            size_t n = (size_t)(q - (line + 11));

            if (n >= size)
                n = size - 1;
            memcpy(out, line + 11, n);
            out[n] = '\0';
            break;
        } else if (in_project && strncmp(line, "dynamic = [", 11) == 0 &&
                   strstr(line, "\"version\"") != NULL) {
            snprintf(out, size, "dynamic");
            break;
        }
    }
    fclose(f);
}

int main(void)
{
    static const int statuses[] = {
        CAI_OK,        CAI_EINVAL,   CAI_EUNSUPPORTED, CAI_ENOMEM,
        CAI_EREADONLY, CAI_EVERSION, CAI_ENOCUDA,      CAI_ECUDA};
    const size_t n = sizeof statuses / sizeof statuses[0];
    char pyversion[64];
    int major = -1, minor = -1, patch = -1;
    size_t i, j;
    int distinct = 1;
    cai_error_t err;
    DLDataType t;

    plan(4 + 4 + n + 5);

    /* Versions, against sources the header does not see: configure.ac's
     * AC_INIT (PACKAGE_VERSION, read from the header) and pyproject.toml. */
    is_string(PACKAGE_VERSION, cai_version(),
              "cai_version() is configure.ac's version");
    is_int(3, sscanf(PACKAGE_VERSION, "%d.%d.%d", &major, &minor, &patch),
           "configure.ac's version is MAJOR.MINOR.PATCH");
    ok(major == CAIBRIDGE_VERSION_MAJOR && minor == CAIBRIDGE_VERSION_MINOR &&
           patch == CAIBRIDGE_VERSION_PATCH,
       "CAIBRIDGE_VERSION_MAJOR.MINOR.PATCH %d.%d.%d is configure.ac's %s",
       CAIBRIDGE_VERSION_MAJOR, CAIBRIDGE_VERSION_MINOR,
       CAIBRIDGE_VERSION_PATCH, PACKAGE_VERSION);
    pyproject_version(pyversion, sizeof pyversion);
    /* The version's one place is the header: setup.py reads it there. */
    is_string("dynamic", pyversion,
              "pyproject.toml has no version of its "
              "own (dynamic, read from include/caibridge.h)");
    /* Status names. */
    is_string("success", cai_status_name(CAI_OK), "CAI_OK is success");
    is_string("unknown status", cai_status_name(-1000),
              "an unknown status has a name too");
    for (i = 0; i < n; i++) {
        const char *name = cai_status_name(statuses[i]);

        ok(name != NULL && name[0] != '\0' &&
               strcmp(name, "unknown status") != 0,
           "status %d has its own name (%s)", statuses[i], name);
        for (j = 0; j < i; j++)
            if (strcmp(name, cai_status_name(statuses[j])) == 0)
                distinct = 0;
    }
    ok(distinct, "no two statuses share a name");
    ok(cai_typestr_parse("<f4", 3, &t, NULL) == CAI_OK && CAI_OK == 0 &&
           cai_typestr_parse("<x4", 3, &t, NULL) < 0,
       "a call that works returns 0, one that fails a negative status");

    /* The error struct: truncated, never overflowed; the field named. */
    memset(&err, 0, sizeof err);
    is_int(CAI_EINVAL,
           cai_typestr_parse("<f4444444444444444444444444", 27, &t, &err),
           "a long typestr is refused");
    ok(memchr(err.message, '\0', sizeof err.message) != NULL,
       "the message is NUL-terminated within the struct");
    ok(sizeof err.field >= sizeof "strides[63]",
       "the field has room for strides[63]");
    {
        const int64_t shape[] = {2}, bytes[] = {INT64_MIN + 1};
        int64_t out[1];

        is_int(CAI_EUNSUPPORTED,
               cai_strides_bytes_to_elements(1, shape, bytes, 8, out, &err),
               "a huge odd stride is refused");
        is_string("strides[0] = -9223372036854775807 bytes is not a multiple "
                  "of the item size 8",
                  err.message, "... with the full message");
    }
    return 0;
}
