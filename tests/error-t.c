/* Tests of src/error.c: status names, versions, the error struct. */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <stdio.h>
#include <string.h>

#include "caibridge.h"
#include "tap/basic.h"

#define STR_(x) #x
#define STR(x) STR_(x)

int main(void)
{
    static const int statuses[] = {CAI_OK, CAI_EINVAL, CAI_EUNSUPPORTED,
                                   CAI_ENOMEM, CAI_EREADONLY, CAI_EVERSION,
                                   CAI_ENOCUDA, CAI_ECUDA};
    const size_t n = sizeof statuses / sizeof statuses[0];
    char expected[32];
    size_t i, j;
    int distinct = 1;
    cai_error_t err;
    DLDataType t;

    plan(8 + 4 + n + 5);

    /* Versions. */
    snprintf(expected, sizeof expected, "%d.%d.%d", CAIBRIDGE_VERSION_MAJOR,
             CAIBRIDGE_VERSION_MINOR, CAIBRIDGE_VERSION_PATCH);
    is_string(expected, cai_version(), "cai_version() agrees with the macros");
    is_string(CAIBRIDGE_VERSION_STRING, cai_version(),
              "cai_version() is CAIBRIDGE_VERSION_STRING");
    is_string(STR(CAIBRIDGE_VERSION_MAJOR) "." STR(CAIBRIDGE_VERSION_MINOR)
              "." STR(CAIBRIDGE_VERSION_PATCH), CAIBRIDGE_VERSION_STRING,
              "the version string is built from the numbers");
#ifdef PACKAGE_VERSION
    is_string(PACKAGE_VERSION, cai_version(), "cai_version() is configure's");
#else
    skip("PACKAGE_VERSION not defined");
#endif
    is_int(DLPACK_MAJOR_VERSION, CAIBRIDGE_DLPACK_MAJOR,
           "CAIBRIDGE_DLPACK_MAJOR == DLPACK_MAJOR_VERSION");
    is_int(DLPACK_MINOR_VERSION, CAIBRIDGE_DLPACK_MINOR,
           "CAIBRIDGE_DLPACK_MINOR == DLPACK_MINOR_VERSION");
    is_int(1, CAIBRIDGE_DLPACK_MAJOR, "the ABI is DLPack 1.x");
    is_int(3, CAIBRIDGE_DLPACK_MINOR, "declared for DLPack 1.3");

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
    ok(CAI_OK == 0 && CAI_EINVAL < 0 && CAI_ECUDA < 0,
       "0 is success, failures are negative");

    /* The error struct: truncated, never overflowed; the field named. */
    memset(&err, 0, sizeof err);
    is_int(CAI_EINVAL, cai_typestr_parse("<f4444444444444444444444444", 27,
                                         &t, &err),
           "a long typestr is refused");
    ok(memchr(err.message, '\0', sizeof err.message) != NULL,
       "the message is NUL-terminated within the struct");
    ok(sizeof err.field >= sizeof "strides[63]",
       "the field has room for strides[63]");
    {
        const int64_t shape[] = {2}, bytes[] = {INT64_MIN + 1};
        int64_t out[1];

        is_int(CAI_EINVAL,
               cai_strides_bytes_to_elements(1, shape, bytes, 8, out, &err),
               "a huge odd stride is refused");
        is_string("strides[0] = -9223372036854775807 bytes is not a multiple "
                  "of the item size 8", err.message,
                  "... with the full message");
    }
    return 0;
}
