/* tests/abi-t: the ABI numbers of caibridge's own DLPack header. */
#include "caibridge.h"

#include "abi.h"
#include "test-util.h"

const struct cai_abi_entry cai_abi_ours[] = {
#include "abi-table.h"
};
const size_t cai_abi_ours_count =
    sizeof cai_abi_ours / sizeof cai_abi_ours[0] - 1;
const long long cai_abi_ours_version =
    DLPACK_MAJOR_VERSION * 100 + DLPACK_MINOR_VERSION;

/* The version the library writes into a tensor it makes, as major * 100 +
 * minor; -1 when it makes none. */
long long cai_abi_made_version(void)
{
    static float data[2];
    cai_desc_t desc;
    DLManagedTensorVersioned *t = NULL;
    long long v;

    float_desc(&desc, data, 1, 2, 0);
    if (cai_desc_to_dlpack_versioned(&desc, 0, NULL, NULL, &t, NULL) != 0)
        return -1;
    v = t->version.major * 100LL + t->version.minor;
    t->deleter(t);
    return v;
}
