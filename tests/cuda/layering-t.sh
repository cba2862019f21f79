#!/bin/sh
# The runtime search (src/cuda-search.c) and the binder (src/cuda-runtime.c)
# make no circle: the binder calls the search, which hands back what it
# found; the search uses nothing the binder defines (it is lent the
# binder's load through a table).  TAP on stdout.  Run from the build
# directory.
NM=${NM_FOR_TESTS:-nm}

object() { # the compiled object of src/NAME.c, PIC first
    for o in src/.libs/libcaibridge_core_la-$1.o \
             src/libcaibridge_core_la-$1.o; do
        if test -f "$o"; then echo "$o"; return 0; fi
    done
    return 1
}
search=`object cuda-search` && runtime=`object cuda-runtime` || {
    echo "1..0 # SKIP the core's objects are not built here"; exit 0; }
if ! "$NM" --defined-only "$runtime" >/dev/null 2>&1; then
    echo "1..0 # SKIP $NM --defined-only does not work here"
    exit 0
fi
defined() {
    "$NM" --defined-only "$1" | awk 'NF >= 3 && $2 ~ /[A-Z]/ { print $3 }' |
        sort -u
}
undefined() { "$NM" --undefined-only "$1" | awk '{ print $NF }' | sort -u; }
cuda_built() { grep -q '^#define HAVE_CUDA 1' config.h 2>/dev/null; }

echo 1..2
tmp=`mktemp` || exit 1
trap 'rm -f "$tmp"' 0
undefined "$search" >"$tmp"
circle=`defined "$runtime" | comm -12 - "$tmp"`
if test -z "$circle"; then
    echo "ok 1 - cuda-search uses nothing cuda-runtime defines"
else
    echo "not ok 1 - cuda-search uses what cuda-runtime defines:" $circle
fi
if ! cuda_built || undefined "$runtime" | grep -qx cai_search_runtime; then
    echo "ok 2 - cuda-runtime calls the search (or CUDA is not built)"
else
    echo "not ok 2 - cuda-runtime does not call cai_search_runtime"
fi
