#!/bin/sh
# make check's time limit (tests/time-limit.sh), through Automake's own TAP
# driver as make check runs every test: a test that hangs, and a child it
# started, are stopped, and the harness reports an ERROR naming the test;
# a test that passes or fails in time is reported as before.  TAP on stdout.
: "${srcdir:=.}"
driver=$srcdir/build-aux/tap-driver.sh
limit=$srcdir/tests/time-limit.sh
tmp=`mktemp -d "${TMPDIR:-/tmp}/caibridge-limit.XXXXXX"` || exit 99
trap 'rm -rf "$tmp"' EXIT
n=0

check() {
    n=`expr $n + 1`
    if eval "$1"; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        sed 's/^/# /' "$tmp/out" "$tmp/t.log" "$tmp/t.trs" 2>/dev/null
    fi
}

# Whether process $1 has ended (a zombie has), after its signal had up to
# 10 s to arrive.
gone() {
    i=0
    while test $i -lt 100; do
        state=`sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1`
        case $state in '' | Z) return 0 ;; esac
        sleep 0.1
        i=`expr $i + 1`
    done
    return 1
}

# Runs the test script $1 as make check would, under CAI_TEST_TIMEOUT=$2.
harness() {
    rm -f "$tmp/t.log" "$tmp/t.trs"
    CAI_TEST_TIMEOUT=$2 ${SHELL:-/bin/sh} "$driver" \
        --test-name tests/stuck-t.sh --log-file "$tmp/t.log" \
        --trs-file "$tmp/t.trs" --color-tests no --enable-hard-errors yes \
        --expect-failure no -- ${SHELL:-/bin/sh} "$limit" \
        ${SHELL:-/bin/sh} "$1" >"$tmp/out" 2>&1
}

echo 1..10

check 'test -n "$CAI_TEST_LIMITED"' \
    "make check ran this test under the limit (CAI_TEST_LIMITED is set)"
check 'test ! -f Makefile || {
    grep -q "^CAI_TEST_LIMIT = .*time-limit.sh" Makefile &&
    grep -q "^LOG_COMPILER = \$(CAI_TEST_LIMIT)" Makefile &&
    if grep -q "^PY_LOG_COMPILER" Makefile; then
        grep -q "^PY_LOG_COMPILER = \$(CAI_TEST_LIMIT)" Makefile; fi; }' \
    "C and Python tests run under it too (the Makefile says so)"

# One assertion, then it and a child it started hang.
cat >"$tmp/hang.sh" <<EOF
echo 1..2
echo ok 1 - before the hang
sleep 3600 &
echo \$! >"$tmp/child"
exec sleep 3600
EOF
harness "$tmp/hang.sh" 2
check 'grep -q "^ERROR: tests/stuck-t.sh - Bail out! .*hang.sh: no result" "$tmp/out"' \
    "a hang ends as an ERROR naming the test"
check 'grep -q "no result after 2 s.*CAI_TEST_TIMEOUT" "$tmp/out"' \
    "and the message gives the limit and how to change it"
check 'grep -q "^:test-result: ERROR" "$tmp/t.trs"' \
    "the harness counts it as an error"
check 'gone `cat "$tmp/child"`' "the test's child was stopped too"

printf 'echo 1..1\necho ok 1 - quick\n' >"$tmp/pass.sh"
harness "$tmp/pass.sh" 30
check 'grep -q "^PASS: tests/stuck-t.sh 1 - quick" "$tmp/out" &&
    ! grep -q "Bail out" "$tmp/out"' "a test in time passes as before"

printf 'echo 1..1\necho "not ok 1 - wrong"\nexit 1\n' >"$tmp/fail.sh"
harness "$tmp/fail.sh" 30
check 'grep -q "^FAIL: tests/stuck-t.sh 1 - wrong" "$tmp/out" &&
    ! grep -q "Bail out" "$tmp/out"' \
    "a failure in time is that failure, not a time-out"

harness "$tmp/pass.sh" 0
check 'grep -q "^PASS: tests/stuck-t.sh 1 - quick" "$tmp/out"' \
    "CAI_TEST_TIMEOUT=0: no limit"

harness "$tmp/pass.sh" soon
check 'grep -q "Bail out! CAI_TEST_TIMEOUT=soon is not a number" "$tmp/out"' \
    "a limit that is not a number is refused, naming the variable"
