#!/bin/sh
# The C example of docs/guide/c.rst, compiled from the page by make
# (tests/guide-c-example), runs and prints what the page's code says.
# TAP on stdout.  Run from the build directory, as make check does.
prog=./tests/guide-c-example
echo "1..2"
if test ! -x "$prog"; then
    echo "not ok 1 - $prog was not built from docs/guide/c.rst"
    echo "not ok 2 - # SKIP nothing to run"
    exit 0
fi
out=`$prog 2>&1`
rc=$?
if test $rc -eq 0; then
    echo "ok 1 - the docs/guide/c.rst example exits 0"
else
    echo "not ok 1 - the docs/guide/c.rst example exits $rc"
fi
echo "$out" | sed 's/^/# /'
case "$out" in
"a 2-dimensional float32 tensor, 3 x 4")
    echo "ok 2 - it made the 3 x 4 float32 tensor it describes" ;;
*)
    echo "not ok 2 - it printed something else" ;;
esac
