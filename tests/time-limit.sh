#!/bin/sh
# Runs one test of `make check` under a time limit: COMMAND... TEST, as
# Automake's harness gives it (the test is the last argument).  A test that
# has not ended after CAI_TEST_TIMEOUT seconds (default 900; 0: no limit)
# is stopped with everything it started, and a TAP "Bail out!" line naming
# it makes the harness report it as an ERROR: a hang fails its test instead
# of stalling make check or CI until the job's own limit.
limit=${CAI_TEST_TIMEOUT:-900}
for test in "$@"; do :; done

case $limit in
'' | *[!0-9]*)
    echo "Bail out! CAI_TEST_TIMEOUT=$limit is not a number of seconds"
    exit 99
    ;;
esac
# Tells the test it runs under the limit (tests/time-limit-t.sh checks).
CAI_TEST_LIMITED=$limit
export CAI_TEST_LIMITED
if test "$limit" -eq 0; then
    exec "$@"
fi
if ! command -v timeout >/dev/null 2>&1; then
    echo "# no time limit for $test: timeout(1) is not installed"
    exec "$@"
fi

# timeout runs the test in a process group of its own and signals the whole
# group, so a test's children (a forked child, a subprocess) end too.  That
# group is not the terminal's: an interrupt of make is passed on to it.
timeout -k 10 "$limit" "$@" &
pid=$!
trap 'kill -TERM -"$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null' \
    HUP INT TERM
while :; do
    wait "$pid"
    rc=$?
    # A trapped signal ends wait early (above 128) while timeout still runs.
    kill -0 "$pid" 2>/dev/null || break
done
if test "$rc" -eq 124 || test "$rc" -eq 137; then
    echo "Bail out! $test: no result after $limit s, the time limit" \
        "(CAI_TEST_TIMEOUT): it hung or ran far too long"
fi
exit "$rc"
