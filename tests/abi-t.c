/*
 * The DLPack ABI of include/caibridge/dlpack.h against an independent
 * upstream dlpack.h found by configure: sizes, field offsets and sizes,
 * enumerator and flag values, version macros.  Each header is compiled in
 * its own unit (tests/abi-ours.c, tests/abi-upstream.c), since both use the
 * guard DLPACK_DLPACK_H_; tests/abi-guard.c includes the upstream one first
 * and then caibridge.h.
 */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include <string.h>

#include "abi.h"
#include "tap/basic.h"

#ifndef CAI_DLPACK_LOOKED
#define CAI_DLPACK_LOOKED "nowhere"
#endif

static const struct cai_abi_entry *ours(const char *name)
{
    size_t i;

    for (i = 0; i < cai_abi_ours_count; i++)
        if (strcmp(cai_abi_ours[i].name, name) == 0)
            return &cai_abi_ours[i];
    return NULL;
}

/* The checks that need no upstream header: the version the library writes
 * into its tensors, and our own table. */
static void ours_alone(void)
{
    /* What the library writes into its tensors at run time (from
     * caibridge.h's CAIBRIDGE_DLPACK_*) is the version its dlpack.h
     * declares (DLPACK_*_VERSION). */
    is_int(cai_abi_ours_version, cai_abi_made_version(),
           "tensors made by the library carry our header's version");
    ok(cai_abi_ours_count >= 30 && ours("DLPACK_MAJOR_VERSION") != NULL,
       "our table is whole (%lu entries, the major version among them)",
       (unsigned long)cai_abi_ours_count);
    ok(ours("DLPACK_MAJOR_VERSION") != NULL &&
           ours("DLPACK_MAJOR_VERSION")->value == cai_abi_ours_version / 100,
       "our table's major version is our header's (%lld.%lld)",
       cai_abi_ours_version / 100, cai_abi_ours_version % 100);
}

int main(void)
{
    size_t i;
    int full = cai_abi_upstream_version >= cai_abi_ours_version;
    int guard;

    if (cai_abi_upstream_count == 0) {
        /* Only the comparison needs the upstream header. */
        plan(3 + 1);
        ours_alone();
        skip("no independent dlpack.h found (looked in %s): the upstream "
             "comparison is not made",
             CAI_DLPACK_LOOKED);
        return 0;
    }
    plan(cai_abi_upstream_count + 4 + 3);
    diag("upstream: %s (version %lld.%lld)", cai_abi_upstream_path,
         cai_abi_upstream_version / 100, cai_abi_upstream_version % 100);
    ours_alone();

    for (i = 0; i < cai_abi_upstream_count; i++) {
        const struct cai_abi_entry *up = &cai_abi_upstream[i];
        const struct cai_abi_entry *our = ours(up->name);

        if (our == NULL)
            ok(0, "%s: declared upstream, missing in ours", up->name);
        else
            is_int(up->value, our->value, "%s = %lld", up->name, up->value);
    }

    /* The upstream header is the independent side: ours may be newer than
     * it (a subset is then compared), never older. */
    ok(cai_abi_ours_version >= cai_abi_upstream_version,
       "ours (%lld.%lld) is not older than upstream (%lld.%lld)",
       cai_abi_ours_version / 100, cai_abi_ours_version % 100,
       cai_abi_upstream_version / 100, cai_abi_upstream_version % 100);
    if (full)
        is_int((long long)cai_abi_ours_count,
               (long long)cai_abi_upstream_count,
               "every fact of ours is checked against the %lld.%lld header",
               cai_abi_upstream_version / 100, cai_abi_upstream_version % 100);
    else
        ok(cai_abi_ours_count > cai_abi_upstream_count,
           "ours, newer, declares more facts than the %lld.%lld header "
           "(%lu > %lu)",
           cai_abi_upstream_version / 100, cai_abi_upstream_version % 100,
           (unsigned long)cai_abi_ours_count,
           (unsigned long)cai_abi_upstream_count);
    ok(cai_abi_upstream_count >= 30,
       "the upstream table is not empty (%lu entries)",
       (unsigned long)cai_abi_upstream_count);

    guard = cai_abi_guard_check();
    if (guard == 1)
        skip("upstream header is 0.x: caibridge.h refuses it by design");
    else
        is_int(0, guard,
               "upstream dlpack.h first, then caibridge.h: "
               "compiles and converts");
    return 0;
}
