/* tests/abi-t: the ABI numbers of caibridge's own DLPack header. */
#include <caibridge/dlpack.h>

#include "abi.h"

const struct cai_abi_entry cai_abi_ours[] = {
#include "abi-table.h"
};
const size_t cai_abi_ours_count =
    sizeof cai_abi_ours / sizeof cai_abi_ours[0] - 1;
const long long cai_abi_ours_version =
    DLPACK_MAJOR_VERSION * 100 + DLPACK_MINOR_VERSION;
