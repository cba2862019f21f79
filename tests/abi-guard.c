/*
 * tests/abi-t: an upstream DLPack 1.x header included FIRST, then
 * caibridge.h.  The shared include guard must make ours a no-op: any
 * redefinition fails this unit's compilation.  The round trip below then
 * runs caibridge's functions on the upstream header's types.
 */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include "abi.h"

#ifdef CAI_DLPACK_UPSTREAM_H
#include CAI_DLPACK_UPSTREAM_H
#endif

#if defined(CAI_DLPACK_UPSTREAM_H) && defined(DLPACK_MAJOR_VERSION)
#include "caibridge.h"
#include "test-util.h"

int cai_abi_guard_check(void)
{
    float data[6] = {0};
    cai_desc_t desc, back;
    DLManagedTensorVersioned *t = NULL;

    float_desc(&desc, data, 2, 2, 3);
    desc.readonly = 1;
    if (cai_desc_to_dlpack_versioned(&desc, 0, NULL, NULL, &t, NULL) != 0)
        return -1;
    if (cai_desc_from_dlpack_versioned(t, &back, NULL) != 0 ||
        back.data != data || back.shape[1] != 3 || !back.readonly ||
        t->version.major != DLPACK_MAJOR_VERSION ||
        (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0) {
        t->deleter(t);
        return -1;
    }
    t->deleter(t);
    return 0;
}

#else

int cai_abi_guard_check(void)
{
    return 1;
}

#endif
