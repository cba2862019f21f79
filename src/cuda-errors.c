/*
 * One CUDA operation's bookkeeping and how its failure is reported: the
 * first failed call and a failed restore.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cuda-internal.h"

#ifdef HAVE_CUDA

/* Errors that mean "no usable driver or device here", as opposed to a call
 * that failed on a working GPU. */
static int means_no_driver(int rc)
{
    switch (rc) {
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoDevice:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
        return 1;
    default:
        return 0;
    }
}

/* Errors that stay on the context once a kernel caused them: every later
 * call returns them, whatever it was. */
static int is_sticky(int rc)
{
    switch (rc) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
        return 1;
    default:
        return 0;
    }
}


int cai_op_begin(struct op *op, const char *field, cai_error_t *err)
{
    int status = cai_runtime_ready(field, err);

    memset(op, 0, sizeof *op);
    op->field = field;
    return status;
}

int cai_op_failed(struct op *op, const char *call, int rc)
{
    if (rc == CUDA_SUCCESS)
        return 0;
    CAI_COUNT(cuda_errors, 1);
    /* A failed runtime call (cuda*, not the driver's cu*) is now the
     * thread's last error. */
    if (strncmp(call, "cuda", 4) == 0)
        op->runtime_failed = 1;
    if (op->call == NULL) {
        op->call = call;
        op->rc = rc;
    }
    return 1;
}

/* Why the driver says "no": the version it reports, 0 when none. */
static void describe_driver(char *out, size_t size)
{
    int version = 0;

    if (cai_rt.driver_get_version(&version) != cudaSuccess || version == 0)
        snprintf(out, size, " (no CUDA driver is installed or loadable)");
    else if (version / 1000 < cai_rt_version / 1000 ||
             version < cai_rt_version)
        snprintf(out, size, " (driver %d.%d, older than runtime %d.%d)",
                 version / 1000, version % 1000 / 10, cai_rt_version / 1000,
                 cai_rt_version % 1000 / 10);
    else
        out[0] = '\0';
}

/* Reports the operation's outcome in err. */
int cai_op_end(struct op *op, cai_error_t *err)
{
    char restore[112] = "", hint[120] = "";
    const char *text;
    int status;

    if (op->call == NULL && op->restore_call == NULL)
        return cai_ok(err);
    if (op->call == NULL) {
        op->call = op->restore_call;
        op->rc = op->restore_rc;
        op->restore_call = NULL;
    }
    status = means_no_driver(op->rc) ? CAI_ENOCUDA : CAI_ECUDA;
    text = cai_rt.get_error_string((cudaError_t)op->rc);
    /* CUDA overwrites the thread's last error at each failure, so after
     * a failed runtime call of ours it is ours: cleared, so that the
     * framework's next launch check does not report it as its own.  It is
     * never looked at before an operation, which would cost a call each
     * time; a driver call's failure leaves it as it was. */
    if (op->runtime_failed)
        cai_rt.get_last_error();
    if (op->restore_call != NULL)
        snprintf(restore, sizeof restore,
                 "; restoring the caller's "
                 "context failed too: %s (CUDA error %d), its current "
                 "context changed",
                 op->restore_call, op->restore_rc);
    if (op->rc == cudaErrorInitializationError && cai_forked_after_load)
        snprintf(hint, sizeof hint,
                 "; this process was forked after CUDA "
                 "was loaded, and CUDA cannot be used in a forked child");
    else if (status == CAI_ENOCUDA) {
        snprintf(hint, sizeof hint, "; no usable CUDA driver or device");
        describe_driver(hint + strlen(hint), sizeof hint - strlen(hint));
    } else if (is_sticky(op->rc))
        snprintf(hint, sizeof hint,
                 "; a sticky error: it may come from "
                 "earlier asynchronous work (a kernel), not this call");
    return cai_fail(
        err, status, op->field, "%s failed: %s (CUDA error %d)%s%s", op->call,
        text != NULL ? text : "no description", op->rc, restore, hint);
}

#endif /* HAVE_CUDA */
