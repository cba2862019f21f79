#!/bin/sh
# A static libcaibridge.a (configure --enable-static) defines, as global
# symbols, exactly the functions caibridge.h declares with CAI_API: the
# library's internal functions and globals are local (src/local.mk), so
# they cannot clash with a program's names.  TAP on stdout.  Run from the
# build directory (as "make check" does); srcdir locates the header.
: "${srcdir:=.}"
lib=src/.libs/libcaibridge.a
header=$srcdir/include/caibridge.h
NM=${NM_FOR_TESTS:-nm}

if test ! -f "$lib"; then
    echo "1..0 # SKIP no $lib (configured without --enable-static)"
    exit 0
fi
global=`"$NM" -g --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort -u`
declared=`sed -n 's/^CAI_API[^(]*[ *]\(cai_[a-z0-9_]*\)(.*/\1/p' "$header" |
          sort -u`
n=0
for s in $global; do
    n=`expr $n + 1`
    case " `echo $declared` " in
    *" $s "*) echo "ok $n - $s is global, declared CAI_API" ;;
    *) echo "not ok $n - $s is global in $lib but is not declared CAI_API" ;;
    esac
done
for s in $declared; do
    n=`expr $n + 1`
    case " `echo $global` " in
    *" $s "*) echo "ok $n - declared $s is defined in $lib" ;;
    *) echo "not ok $n - declared $s is not defined in $lib" ;;
    esac
done
echo "1..$n"
