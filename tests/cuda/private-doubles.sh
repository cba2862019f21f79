# Sourced before each test (tests/cuda/local.mk).  caibridge loads a CUDA
# runtime only from folders that nobody but its owner (or root) may write,
# all the way from /.  A tree unpacked with umask 002 has 0775 folders, so
# the runtime doubles built in it would be refused: each test gets copies
# in a fresh 0700 folder under $TMPDIR (or /tmp), named by
# CAIBRIDGE_TEST_DOUBLES and removed when the test ends.
# The folders and libraries the tests make themselves (the search tests'
# wheel and conda folders) are made with umask 022 for the same reason,
# whatever the umask of whoever runs make check.
# $1: the folder libtool built the doubles in.
umask 022
cai_built_doubles=$1
if test -f "$cai_built_doubles/libcudart-double.so"; then
  CAIBRIDGE_TEST_DOUBLES=`umask 077 && \
    mktemp -d "${TMPDIR:-/tmp}/caibridge-doubles.XXXXXX"` || exit 1
  trap 'rm -rf "$CAIBRIDGE_TEST_DOUBLES"' 0
  for cai_lib in libcudart-double.so libcudart-partial.so libplanted.so \
      libnvtx-record.so; do
    if test -f "$cai_built_doubles/$cai_lib"; then
      cp "$cai_built_doubles/$cai_lib" "$CAIBRIDGE_TEST_DOUBLES/" &&
        chmod 0755 "$CAIBRIDGE_TEST_DOUBLES/$cai_lib" || exit 1
    fi
  done
  export CAIBRIDGE_TEST_DOUBLES
fi
