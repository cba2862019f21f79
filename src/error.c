/* Error reporting and version: the caller owns the error struct. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

int cai_fail(cai_error_t *err, int status, const char *field, const char *fmt,
             ...)
{
    if (err != NULL) {
        va_list ap;

        err->status = status;
        snprintf(err->field, sizeof err->field, "%s", field ? field : "");
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

int cai_null_arg(cai_error_t *err, const char *name)
{
    return cai_fail(err, CAI_EINVAL, name, "%s is NULL", name);
}

int cai_unknown_bits(cai_error_t *err, const char *field, unsigned bits)
{
    return cai_fail(err, CAI_EINVAL, field,
                    "%s has bits 0x%x that this library (caibridge %s) "
                    "does not know",
                    field, bits, CAIBRIDGE_VERSION_STRING);
}

const char *cai_version(void)
{
    return CAIBRIDGE_VERSION_STRING;
}

const char *cai_status_name(int status)
{
    switch (status) {
    case CAI_OK:
        return "success";
    case CAI_EINVAL:
        return "invalid descriptor";
    case CAI_EUNSUPPORTED:
        return "cannot be expressed by the target";
    case CAI_ENOMEM:
        return "out of memory";
    case CAI_EREADONLY:
        return "read-only data asked for as a legacy tensor";
    case CAI_EVERSION:
        return "unsupported DLPack major version";
    case CAI_ENOCUDA:
        return "CUDA unavailable";
    case CAI_ECUDA:
        return "CUDA call failed";
    default:
        return "unknown status";
    }
}
