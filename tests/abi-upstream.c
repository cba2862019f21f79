/*
 * tests/abi-t: the ABI numbers of an independent upstream dlpack.h, which
 * configure found (CAI_DLPACK_UPSTREAM_H).  This unit never sees
 * caibridge's headers: both use the guard DLPACK_DLPACK_H_.
 */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include "abi.h"

#ifdef CAI_DLPACK_UPSTREAM_H
#include CAI_DLPACK_UPSTREAM_H

const struct cai_abi_entry cai_abi_upstream[] = {
#include "abi-table.h"
};
const size_t cai_abi_upstream_count =
    sizeof cai_abi_upstream / sizeof cai_abi_upstream[0] - 1;
#ifdef DLPACK_MAJOR_VERSION
const long long cai_abi_upstream_version =
    DLPACK_MAJOR_VERSION * 100 + DLPACK_MINOR_VERSION;
#else
const long long cai_abi_upstream_version = DLPACK_VERSION / 10;
#endif
const char *const cai_abi_upstream_path = CAI_DLPACK_UPSTREAM_H;

#else

const struct cai_abi_entry cai_abi_upstream[] = {{NULL, 0}};
const size_t cai_abi_upstream_count = 0;
const long long cai_abi_upstream_version = 0;
const char *const cai_abi_upstream_path = NULL;

#endif
