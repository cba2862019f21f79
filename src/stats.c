/*
 * The counters of cai_stats: added to where the thing happens (one line
 * each, CAI_COUNT), with relaxed atomics, so a counted path costs one
 * atomic add and no lock.
 */
#include "config.h"

#include <string.h>

#include "cuda-release.h"
#include "internal.h"

cai_stats_t cai_counters;

/* The Python module's release waiter, by cai_thread_id (0: none yet). */
static unsigned long long waiter;

void cai_release_mark_waiter(void)
{
    __atomic_store_n(&waiter, cai_thread_id(), __ATOMIC_RELAXED);
}

void cai_count_let_go(int done)
{
    if (!done)
        return;
    if (cai_thread_id() == __atomic_load_n(&waiter, __ATOMIC_RELAXED))
        CAI_COUNT(let_go_waiter, 1);
    else
        CAI_COUNT(let_go_call, 1);
}

void cai_count_copy(int to_host, size_t nbytes)
{
    if (to_host) {
        CAI_COUNT(host_copies, 1);
        CAI_COUNT(host_copy_bytes, nbytes);
    } else {
        CAI_COUNT(device_copies, 1);
        CAI_COUNT(device_copy_bytes, nbytes);
    }
}

/* Version 1's fields end with cuda_errors. */
#define STATS_V1_SIZE (offsetof(cai_stats_t, cuda_errors) + sizeof(uint64_t))

#define LOAD(field) __atomic_load_n(&cai_counters.field, __ATOMIC_RELAXED)

int cai_stats(cai_stats_t *out, size_t size, cai_error_t *err)
{
    cai_stats_t now;
    long pending = cai_release_pending_count();

    if (out == NULL)
        return cai_null_arg(err, "out");
    if (size < STATS_V1_SIZE)
        return cai_fail(err, CAI_EINVAL, "size",
                        "size %zu is too small for cai_stats_t version 1 "
                        "(%zu bytes)",
                        size, (size_t)STATS_V1_SIZE);
    memset(&now, 0, sizeof now);
    now.version = CAI_STATS_VERSION;
    now.size = (uint32_t)(size < sizeof now ? size : sizeof now);
    now.views = LOAD(views);
    now.records = LOAD(records);
    now.waits = LOAD(waits);
    now.waits_skipped = LOAD(waits_skipped);
    now.host_waits = LOAD(host_waits);
    now.releases_now = LOAD(releases_now);
    now.releases_deferred = LOAD(releases_deferred);
    now.releases_pending = pending > 0 ? (uint64_t)pending : 0;
    now.let_go_waiter = LOAD(let_go_waiter);
    now.let_go_call = LOAD(let_go_call);
    now.device_copies = LOAD(device_copies);
    now.device_copy_bytes = LOAD(device_copy_bytes);
    now.host_copies = LOAD(host_copies);
    now.host_copy_bytes = LOAD(host_copy_bytes);
    now.cuda_errors = LOAD(cuda_errors);
    memcpy(out, &now, now.size);
    return cai_ok(err);
}

void cai_stats_reset(void)
{
    uint64_t *c = (uint64_t *)&cai_counters.views;
    size_t i, n = (sizeof cai_counters - offsetof(cai_stats_t, views)) /
                  sizeof(uint64_t);

    for (i = 0; i < n; i++)
        __atomic_store_n(&c[i], 0, __ATOMIC_RELAXED);
}
