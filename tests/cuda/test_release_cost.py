"""What a release costs the consumer's stream and the caller, and how it
behaves under faults, on the timeline double.

A release puts one event on the consumer's stream and nothing else (no
host function, which held an H200's stream for ~35 us and filled its
queue after ~56); a hand-over's CUDA calls do not grow with the releases
pending; the producers go once the consumer's work is done with no further
call into caibridge (the release waiter); and no runtime error, driver
failure, sub-interpreter or fork stops, leaks or misorders that.
"""
import ctypes
import gc
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from test_race import LEGACY, NEW, double, tl  # noqa: F401
from timeline_double import CAIArray, caibridge

HERE = pathlib.Path(__file__).resolve().parent
CUDA_ERROR_CONTEXT_IS_DESTROYED = 709


def handover(tl, src, a, b=LEGACY):
    """A producer of src on stream a taken by a CAIView on stream b; the
    CAIView (its death is the release) and a weak reference to the
    producer."""
    import weakref
    producer = CAIArray(src, a)
    alive = weakref.ref(producer)
    back = caibridge.from_dlpack(caibridge.as_dlpack(producer), stream=b)
    return back, alive


def held_back(tl, stream=LEGACY):
    """A consumer kernel on stream behind a closed gate: everything queued
    there after it waits."""
    gate = tl.gate()
    tl.fill(stream, tl.buffer(), 1, gate)
    return gate


def spin_until_gone(alives, steps=400000):
    """Pure Python with no call into caibridge and no sleep; whether every
    producer went within the bytecodes given."""
    for i in range(steps):
        if i % 2000 == 0:
            gc.collect()
            if all(a() is None for a in alives):
                return True
    return all(a() is None for a in alives)


@pytest.fixture
def still():
    """The release waiter held still (its queries would count as calls)."""
    caibridge._core._release_waiter(False)
    yield
    caibridge._core._release_waiter(True)


def lib(tl):
    f = tl.lib
    f.double_launches_blocked.restype = ctypes.c_long
    f.double_host_functions_run.restype = ctypes.c_long
    return f


def test_200_releases_behind_a_long_kernel(tl):
    """200 hand-overs to stream 1 while its kernel is held back: no host
    function, no launch finds the stream full (the double's H200 bounds:
    56 host functions, 1,024 items), no host wait; once the kernel ends
    every producer goes with no further call."""
    src = tl.buffer(value=NEW)
    a = tl.stream()
    gate = held_back(tl)
    waits = tl.c.host_waits()
    alives = []
    for _ in range(200):
        back, alive = handover(tl, src, a)
        alives.append(alive)
        del back                                   # the release
    gc.collect()
    f = lib(tl)
    assert f.double_launches_blocked() == 0
    assert tl.c.host_waits() == waits
    assert caibridge._core._release_poll() == 200
    assert all(x() is not None for x in alives)
    tl.open(gate)
    tl.drain()
    assert spin_until_gone(alives), "producers waited for another call"
    assert f.double_host_functions_run() == 0
    assert "cudaLaunchHostFunc" not in tl.c.log().decode()


POOL_CALLS = ("cudaEventCreateWithFlags(", "cudaEventDestroy(")


def round_trip_calls(tl, src, a):
    """The CUDA calls of one round trip onto stream 1, less the event
    pool's: events held by pending releases are not idle, so the pool
    cannot lend them, whatever the poll costs."""
    tl.lib.double_clear_log()
    back, _ = handover(tl, src, a)
    del back
    calls = tl.c.log().decode().splitlines()
    assert calls, "the round trip was not logged"
    return [c for c in calls if not c.startswith(POOL_CALLS)]


def settled(tl):
    tl.drain()
    caibridge._core._release_poll()
    assert caibridge._core._release_poll() == 0


@pytest.mark.parametrize("pending", [10, 200])
def test_calls_do_not_grow_with_pending(tl, still, pending):
    """A warm round trip onto stream 1 costs at most 2 calls more with
    releases pending on that stream than with none: each poll asks only
    the oldest, and needs no context when it is not done."""
    src = tl.buffer(value=NEW)
    a = tl.stream()
    round_trip_calls(tl, src, a)                    # warm
    settled(tl)
    none = round_trip_calls(tl, src, a)
    settled(tl)
    gate = held_back(tl)
    keep = [handover(tl, src, a) for _ in range(pending)]
    keep = [alive for back, alive in keep]        # the releases
    gc.collect()
    assert caibridge._core._release_poll() == pending
    many = round_trip_calls(tl, src, a)
    assert len(many) <= len(none) + 2, (none, many)
    tl.open(gate)
    tl.drain()
    caibridge._core._release_poll()
    gc.collect()
    assert all(x() is None for x in keep)


def test_foreign_error_never_stops_a_poll(tl, still):
    """A framework's error left pending on this thread: 200 releases whose
    work is done are still polled and let go (the driver's query touches
    no runtime error), and the error is still there for its owner."""
    src = tl.buffer(value=NEW)
    a = tl.stream()
    gate = held_back(tl)
    alives = []
    for _ in range(200):
        back, alive = handover(tl, src, a)
        alives.append(alive)
        del back
    tl.open(gate)
    tl.drain()
    tl.c.set_pending_error(700)                    # an illegal address
    for _ in range(3):
        back, _ = handover(tl, src, a)             # each hand-over polls
        del back
    gc.collect()
    assert all(x() is None for x in alives)
    assert tl.c.pending_error() == 700
    tl.c.set_pending_error(0)


@pytest.mark.parametrize("skip", range(4))
def test_failed_context_query_is_an_error(tl, still, skip):
    """cuCtxGetId failing with anything but "destroyed" (999 here), at each
    of its first calls in a hand-over and release: never a release counted
    done while its work is queued, never an event dropped undestroyed,
    never a hand-over returned unordered without an error."""
    src = tl.buffer(value=NEW)
    a = tl.stream()
    back, _ = handover(tl, src, a)                 # warm
    del back
    tl.drain()
    caibridge._core._release_poll()
    events = tl.c.live_events()
    gate = held_back(tl)
    pending, alives = [], []
    tl.c.fail_after(b"cuCtxGetId", 999, skip)
    for _ in range(3):
        try:
            back, alive = handover(tl, src, a)
        except caibridge.CUDAError as e:
            assert "cuCtxGetId" in str(e) and "999" in str(e)
            continue
        alives.append(alive)
        pending.append(back)
        del back
    try:
        pending.clear()                            # the releases
        gc.collect()
        caibridge._core._release_poll()
    except caibridge.CUDAError:
        pass
    # The consumer's kernel has not run: nothing it reads may have gone.
    assert all(x() is not None for x in alives) or not alives
    tl.c.fail(b"cuCtxGetId", 0)
    tl.open(gate)
    tl.drain()
    caibridge._core._release_poll()
    gc.collect()
    assert all(x() is None for x in alives)
    assert tl.c.live_events() <= events + 8, "events leaked"


def test_failed_context_query_never_leaves_a_hand_over_unordered(tl):
    """The view made, then cuCtxGetId failing (999) at its hand-over: an
    error, or a consumer that reads the producer's finished work; never
    an unordered read."""
    src, out = tl.buffer(value=0), tl.buffer()
    a, b = tl.stream(), tl.stream()
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)                     # the producer's work
    view = caibridge.as_dlpack(CAIArray(src, a))
    tl.c.fail_after(b"cuCtxGetId", 999, 0)
    try:
        capsule = view.__dlpack__(stream=b, max_version=(1, 3))
    except caibridge.CUDAError as e:
        assert "cuCtxGetId" in str(e)
        capsule = None
    tl.c.fail(b"cuCtxGetId", 0)
    if capsule is not None:
        tl.copy(b, out, src)                       # the consumer's read
    tl.open(gate)
    tl.drain()
    if capsule is not None:
        assert (out == NEW).all(), "the consumer read unfinished data"
    del capsule, view


def test_ended_context_is_told_by_709(tl, still):
    """The double answers cuCtxGetId with 709 for a context that ended, as
    an H200 did: the release of a reset context's consumer lets the
    producer go, and its dead event is never touched."""
    src = tl.buffer(value=NEW)
    a = tl.stream()
    gate = held_back(tl)
    back, alive = handover(tl, src, a)
    del back
    gc.collect()
    assert alive() is not None
    ctx = tl.c.current_context()
    tl.lib.cudaDeviceReset()
    tl.lib.cuCtxGetId.argtypes = [ctypes.c_void_p,
                                  ctypes.POINTER(ctypes.c_ulonglong)]
    out = ctypes.c_ulonglong()
    assert tl.lib.cuCtxGetId(ctx, ctypes.byref(out)) == \
        CUDA_ERROR_CONTEXT_IS_DESTROYED
    caibridge._core._release_poll()
    gc.collect()
    assert alive() is None
    tl.open(gate)


def run_script(body, timeout=120, env=None):
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                       if p])
    prelude = textwrap.dedent('''
        import gc, os, sys
        from timeline_double import CAIArray, Timeline, caibridge
        from test_release_cost import handover, held_back, spin_until_gone
        tl = Timeline()
        tl.start()
        src = tl.buffer(value=7)
        a = tl.stream()
        ''')
    out = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(
        body)], env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def subinterpreter_runner():
    try:
        import _testcapi
        return _testcapi.run_in_subinterp
    except (ImportError, AttributeError):
        pytest.skip("CPython's _testcapi.run_in_subinterp is needed to end "
                    "a sub-interpreter")


def test_ended_subinterpreter_leaves_the_waiter(tl):
    """A sub-interpreter that imported caibridge ends: the main
    interpreter's producers still go promptly with no further call."""
    subinterpreter_runner()
    out = run_script('''
        import _testcapi
        assert _testcapi.run_in_subinterp("import caibridge") == 0
        gate = held_back(tl)
        back, alive = handover(tl, src, a)
        del back
        gc.collect()
        tl.open(gate)
        tl.drain()
        print("gone", spin_until_gone([alive]))
        print("violations", repr(tl.violations()))
        ''')
    assert "gone True" in out, out
    assert "violations ''" in out, out


def test_subinterpreter_ending_with_releases_pending_leaks_no_event(tl):
    """40 releases pending when their sub-interpreter ends: once the work
    is done, every event is destroyed or pooled (at most 8 kept)."""
    subinterpreter_runner()
    out = run_script('''
        import _testcapi
        gate = held_back(tl)
        events = tl.c.live_events()
        # No NumPy in a sub-interpreter: a producer of plain bytes.
        sub = "\\n".join([
            "import gc, caibridge",
            "class P:",
            "    def __init__(self):",
            "        self.__cuda_array_interface__ = {",
            "            'data': (%d, False), 'shape': (64,), 'version': 3,"
            % src.ctypes.data,
            "            'typestr': '|u1', 'stream': %d}" % a,
            "keep = [caibridge.from_dlpack(caibridge.as_dlpack(P()),",
            "                              stream=1) for _ in range(40)]",
            "keep.clear()",
            "gc.collect()",
            "assert caibridge._core._release_poll() >= 40",
        ])
        assert _testcapi.run_in_subinterp(sub) == 0
        tl.open(gate)
        tl.drain()
        caibridge._core._release_poll(True)
        gc.collect()
        print("pending", caibridge._core._release_poll())
        print("events", tl.c.live_events() - events)
        print("violations", repr(tl.violations()))
        ''')
    assert "pending 0" in out, out
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert int(lines["events"]) <= 8, out
    assert "violations ''" in out, out


def test_poll_puts_back_no_context(tl):
    """Without the pool, a poll on a thread with no context destroys the
    done events in their own context and leaves the thread with none."""
    out = run_script('''
        import threading
        caibridge._core._release_waiter(False)
        gate = held_back(tl)
        keep = [handover(tl, src, a)[0] for _ in range(3)]
        keep.clear()
        gc.collect()
        tl.open(gate)
        tl.drain()
        seen = {}

        def poll():
            seen["before"] = tl.c.current_context()
            seen["left"] = caibridge._core._release_poll()
            seen["after"] = tl.c.current_context()
        t = threading.Thread(target=poll)
        t.start()
        t.join()
        print("before", seen["before"], "after", seen["after"],
              "left", seen["left"])
        print("destroyed", tl.c.log().decode().count("cudaEventDestroy("))
        ''', env={"CAIBRIDGE_EVENT_POOL": "0"})
    assert "before None after None left 0" in out, out
    assert "destroyed 0" not in out, out


def test_forked_child_makes_no_cuda_call(tl):
    """A child forked with releases pending neither polls nor waits on the
    parent's events, at a poll or at exit."""
    out = run_script('''
        import atexit, warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        caibridge._core._release_waiter(False)
        gate = held_back(tl)
        keep = [handover(tl, src, a)[0] for _ in range(30)]
        keep.clear()
        gc.collect()
        print("parent pending", caibridge._core._release_poll())
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            before = tl.c.calls()
            left = caibridge._core._release_poll()
            atexit._run_exitfuncs()
            os.write(w, b"%d %d" % (left, tl.c.calls() - before))
            os._exit(0)
        os.waitpid(pid, 0)
        left, calls = map(int, os.read(r, 100).split())
        print("child pending", left, "calls", calls)
        tl.open(gate)
        tl.drain()
        caibridge._core._release_poll()
        print("after", caibridge._core._release_poll())
        ''')
    assert "parent pending 30" in out, out
    assert "child pending 0 calls 0" in out, out
    assert "after 0" in out, out


def test_forked_childs_hand_over_fails_cleanly(tl):
    """CUDA refuses every call in a child forked after the parent used it
    (the double as CUDA: error 3).  A child's new hand-over raises a
    BufferError that says the process was forked, and the child exits
    normally (issue 44)."""
    out = run_script('''
        back, alive = handover(tl, src, a)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                handover(tl, src, a)
                os.write(w, b"no error")
            except BufferError as e:
                os.write(w, str(e).encode())
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print("child:", os.read(r, 1000).decode())
        print("status", status)
        ''')
    assert "status 0" in out, out
    assert "forked" in out and "CUDA error 3" in out, out


FORKS = 200


def test_fork_loop_while_threads_hand_over(tl):
    """200 forks while 4 threads hand over and release, with the waiter
    polling (issue 44): every child starts, finds CUDA refused for its own
    hand-over (a BufferError naming the fork), and exits normally through
    the interpreter's and the libraries' exit code.  Each child has a time
    limit, enforced by the parent: a child that hangs anywhere (in fork's
    child side, at its first call, at exit) fails the test and is
    killed."""
    out = run_script('''
        import select, signal, threading
        LIMIT = 60
        stop = threading.Event()
        errors, done = [], [0]

        def churn():
            try:
                while not stop.is_set():
                    back, alive = handover(tl, src, a)
                    del back
                    done[0] += 1
                    # The double's streams run on this machine's cores: a
                    # loaded one falls behind and its event table (16,384)
                    # fills with pending releases.  Bounded by waiting.
                    if (done[0] %% 256 == 0 and
                            caibridge._core._release_poll() > 2048):
                        caibridge._core._release_poll(True)
            except BaseException as e:   # reported by the main thread
                errors.append(repr(e))

        threads = [threading.Thread(target=churn) for _ in range(4)]
        for t in threads:
            t.start()
        results = {}
        while done[0] == 0 and not errors:
            pass
        for i in range(%d):
            pid = os.fork()
            if pid == 0:
                try:
                    handover(tl, src, a)
                    code = 3
                except BufferError as e:
                    code = 0 if "forked" in str(e) else 4
                sys.exit(code)
            fd = os.pidfd_open(pid)
            ready, _, _ = select.select([fd], [], [], LIMIT)
            os.close(fd)
            if not ready:
                os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            end = ("hung" if not ready else
                   "exit %%d" %% os.WEXITSTATUS(status)
                   if os.WIFEXITED(status) else
                   "signal %%d" %% os.WTERMSIG(status))
            results[end] = results.get(end, 0) + 1
        handed = done[0]
        stop.set()
        for t in threads:
            t.join()
        tl.drain()
        print("children", sorted(results.items()))
        print("churn errors", errors[:1], "still handing over", handed > 0)
        ''' % FORKS, timeout=FORKS * 70)
    assert f"children [('exit 0', {FORKS})]" in out, out
    assert "churn errors [] still handing over True" in out, out


def test_jax_calling_pattern(tl):
    """JAX 0.10's from_dlpack calls __dlpack__(stream=S) with S its stream
    for external events, a handle (docs/cuda.rst's JAX row): S waits for
    the producer at hand-over; the release names no stream (a handle may
    be gone by then), so the producer goes at once."""
    import weakref
    from test_streams import release_capsule
    src = tl.buffer(value=NEW)
    a, jax_stream = tl.stream(), tl.stream()
    producer = CAIArray(src, a)
    alive = weakref.ref(producer)
    view = caibridge.as_dlpack(producer)
    del producer
    tl.lib.double_clear_log()
    capsule = view.__dlpack__(stream=jax_stream)   # JAX passes stream= only
    assert "cudaStreamWaitEvent(%#x" % jax_stream in tl.c.log().decode()
    del view
    tl.lib.double_clear_log()
    release_capsule(capsule)
    gc.collect()
    assert "cudaEventRecord" not in tl.c.log().decode()
    assert alive() is None
