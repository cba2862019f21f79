/* cai_shutdown: what caibridge keeps for the process, let go before a
 * plugin is unloaded. */
#include "config.h"

#include "cuda-internal.h"
#include "cuda-release.h"

#ifdef HAVE_CUDA

int cai_shutdown(cai_error_t *err)
{
    struct cai_fence pooled;
    struct op op;
    long pending = cai_release_pending_count();
    int status;

    if (pending > 0)
        return cai_fail(err, CAI_EINVAL, "releases",
                        "%ld deferred releases are still pending; call "
                        "cai_release_poll(1, &err) first",
                        pending);
    if (cai_event_pool_drain(&pooled)) {
        /* Pooled events exist only once the runtime is loaded. */
        status = cai_op_begin(&op, "", err);
        if (status != 0)
            return status;
        cai_ctx_save(&op);
        do
            cai_destroy_in(&op, &pooled);
        while (cai_event_pool_drain(&pooled));
        status = cai_op_finish(&op, "", NULL, err);
        if (status != 0)
            return status;
    }
    (void)cai_runtime_close();
    return cai_ok(err);
}

#else /* !HAVE_CUDA */

int cai_shutdown(cai_error_t *err)
{
    return cai_ok(err);
}

#endif /* HAVE_CUDA */
