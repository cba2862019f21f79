/* tests/abi-t: each translation unit exports a table of ABI numbers. */
#ifndef CAI_TESTS_ABI_H
#define CAI_TESTS_ABI_H

#include <stddef.h>

struct cai_abi_entry {
    const char *name;
    long long value;
};

/* From include/caibridge/dlpack.h (tests/abi-ours.c). */
extern const struct cai_abi_entry cai_abi_ours[];
extern const size_t cai_abi_ours_count;
extern const long long cai_abi_ours_version; /* major * 100 + minor */
/* The version in a tensor the library makes, as above (-1: none made). */
long long cai_abi_made_version(void);

/* From the upstream dlpack.h (tests/abi-upstream.c); count 0 without one. */
extern const struct cai_abi_entry cai_abi_upstream[];
extern const size_t cai_abi_upstream_count;
extern const long long cai_abi_upstream_version; /* as above; 0.x: 60 ... */
extern const char *const cai_abi_upstream_path;

/* tests/abi-guard.c: upstream dlpack.h included first, then caibridge.h.
 * Returns 0 when a round trip through the upstream types works, 1 when
 * that unit could not be built (no 1.x upstream header), else -1. */
int cai_abi_guard_check(void);

#endif
