#!/bin/sh
# The shared library exports exactly the functions caibridge.h declares with
# CAI_API, all named cai_*, and nothing else (no internal helper, no stray
# symbol of a dependency), each at the symbol version CAIBRIDGE_0.1 of
# src/libcaibridge.map, which lists exactly them.  TAP on stdout.
#
# Run from the build directory (as "make check" does); srcdir locates the
# header.
: "${srcdir:=.}"
lib=src/.libs/libcaibridge.so
header=$srcdir/include/caibridge.h
NM=${NM_FOR_TESTS:-nm}

if test ! -f "$lib"; then
    echo "1..0 # SKIP no $lib (shared library not built on this platform)"
    exit 0
fi
if ! "$NM" -D --defined-only "$lib" >/dev/null 2>&1; then
    echo "1..0 # SKIP $NM -D --defined-only does not work here"
    exit 0
fi

exported=`"$NM" -D --defined-only "$lib" | awk 'NF >= 3 && $2 != "A" { print $3 }' |
          sed 's/@.*//' | sort -u`
# name@@VERSION for each exported symbol that has a version (GNU nm).
versioned=`"$NM" -D --defined-only "$lib" | awk 'NF >= 3 && $2 != "A" { print $3 }' |
           grep '@' | sort -u`
map=$srcdir/src/libcaibridge.map
mapped=`sed -n 's/^ *\(cai_[a-z0-9_]*\);$/\1/p' "$map" | sort -u`
declared=`sed -n 's/^CAI_API[^(]*[ *]\(cai_[a-z0-9_]*\)(.*/\1/p' "$header" |
          sort -u`
internal="cai_fail cai_desc_check cai_dtype_name cai_element_count cai_ok
          cai_strided_span cai_tensor_new cai_tensor_detach"
key="cai_version cai_status_name cai_typestr_parse cai_typestr_format
     cai_desc_validate cai_desc_to_dlpack_versioned cai_desc_to_dlpack
     cai_desc_from_dlpack_versioned cai_desc_from_dlpack cai_desc_from_dltensor
     cai_strides_bytes_to_elements cai_is_c_contiguous cai_layout_extent"

n=0
fail=0
check() { # check SUCCESS DESCRIPTION
    n=`expr $n + 1`
    if test "$1" = 0; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        fail=1
    fi
}
has() { # has WORD LIST
    case " `echo $2` " in *" $1 "*) return 0 ;; esac
    return 1
}

test -n "$exported"; check $? "$lib exports something"
test `echo "$declared" | wc -w` -ge 15; check $? \
    "the header declares the API with CAI_API (`echo $declared | wc -w` found)"
for s in $exported; do
    case $s in cai_*) r=0 ;; *) r=1 ;; esac
    check $r "exported $s is named cai_*"
    has "$s" "$declared"; check $? "exported $s is declared CAI_API in caibridge.h"
done
for s in $declared; do
    has "$s" "$exported"; check $? "declared $s is exported"
done
# The version script lists exactly the declared functions; where the
# linker took it (the symbols carry versions), each is CAIBRIDGE_0.1.
for s in $declared; do
    has "$s" "$mapped"; check $? "declared $s is in src/libcaibridge.map"
done
for s in $mapped; do
    has "$s" "$declared"; check $? "mapped $s is declared CAI_API"
done
if test -n "$versioned"; then
    for s in $exported; do
        has "$s@@CAIBRIDGE_0.1" "$versioned"
        check $? "exported $s has the symbol version CAIBRIDGE_0.1"
    done
else
    echo "# no symbol versions in $lib (the linker took no version script)"
fi
for s in $key; do
    has "$s" "$exported"; check $? "key function $s is exported"
done
for s in $internal; do
    if has "$s" "$exported"; then r=1; else r=0; fi
    check $r "internal $s is hidden"
done
echo "1..$n"
exit 0
