"""Host waits let go of the GIL (issue 22, defect 3), on the timeline double.

A host function that a framework queued on the producer's stream before the
fence (cupy's Stream.launch_host_func, numba's add_callback) runs on the
driver's thread and needs the GIL: a host wait that holds it deadlocks (the
double gives up after 10 s and records a violation).  And another Python
thread runs while one thread waits for the producer.  The gates decide when
the producer's work runs; no test reads a clock.
"""
import threading

import numpy as np
import pytest

from test_race import OLD, NEW, release_all, tl, double  # noqa: F401
from timeline_double import (MANAGED, PINNED, CAIArray, PatchedArray,
                             ToDLPack, caibridge)


def host_read_view(src, a):
    return np.from_dlpack(caibridge.as_dlpack(CAIArray(src, a))).copy()


def host_read_to_dlpack(src, a):
    return np.from_dlpack(ToDLPack(CAIArray(src, a))).copy()


def host_read_add_dlpack(src, a):
    return np.from_dlpack(PatchedArray(src, a)).copy()


def host_read_caiview(src, a):
    capsule = caibridge.to_dlpack(CAIArray(src, None), max_version=(1, 3))
    return np.from_dlpack(caibridge.from_dlpack(capsule, stream=a)).copy()


HOST_READS = [host_read_view, host_read_to_dlpack, host_read_add_dlpack,
              host_read_caiview]


@pytest.mark.parametrize("read", HOST_READS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind", [PINNED, MANAGED], ids=["pinned", "managed"])
def test_host_function_before_the_fence_needs_the_gil(tl, read, kind):
    """The producer's kernel runs only once the host waits; then a Python
    host function, then the fence."""
    src = tl.buffer(kind)
    a = tl.stream()
    tl.fill(a, src, NEW, tl.gate(on_host_wait=True))
    ran = []
    tl.host_func(a, lambda: ran.append((src == NEW).all()))
    seen = read(src, a)
    assert tl.violations() == "", "the host wait held the GIL"
    assert ran == [True]
    assert (seen == NEW).all()


def test_host_function_before_the_blocking_release(tl):
    """The blocking release (CAIBRIDGE_RELEASE=block) waits on the host
    for the consumer's stream, where a host function needs the GIL."""
    src = tl.buffer()
    a = tl.stream()
    view = caibridge.as_dlpack(CAIArray(src, a))
    # A CAIView dies holding the GIL (a ctypes call to a deleter would
    # have let go of it already).
    keep = [caibridge.from_dlpack(view, stream=1)]
    tl.fill(1, tl.buffer(), NEW, tl.gate(on_host_wait=True))
    ran = []
    tl.host_func(1, lambda: ran.append(1))
    caibridge._core._set_release_blocking(True)
    try:
        keep.clear()                                # waits for stream 1
    finally:
        caibridge._core._set_release_blocking(False)
    assert tl.violations() == "", "the release held the GIL"
    assert ran == [1]


@pytest.mark.parametrize("read", HOST_READS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind", [PINNED, MANAGED], ids=["pinned", "managed"])
def test_host_function_before_the_fence_needs_the_gil(tl, read, kind):
    """The producer's kernel runs only once the host waits; then a Python
    host function, then the fence."""
    src = tl.buffer(kind)
    a = tl.stream()
    tl.fill(a, src, NEW, tl.gate(on_host_wait=True))
    ran = []
    tl.host_func(a, lambda: ran.append((src == NEW).all()))
    seen = read(src, a)
    assert tl.violations() == "", "the host wait held the GIL"
    assert ran == [True]
    assert (seen == NEW).all()


@pytest.mark.parametrize("read", HOST_READS, ids=lambda f: f.__name__)
def test_another_thread_runs_during_a_host_wait(tl, read):
    """One thread waits for the producer on the host; the main thread, which
    needs the GIL to run at all, sees the wait begin, does its own work
    and only then opens the producer's gate."""
    src = tl.buffer(PINNED)
    a = tl.stream()
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)
    result = []
    waiter = threading.Thread(target=lambda: result.append(read(src, a)))
    waits = tl.c.host_waits()
    waiter.start()
    steps = 0
    while tl.c.host_waits() == waits:               # until the wait begins
        steps += 1
    for _ in range(100):                            # Python work meanwhile
        steps += 1
    still_waiting = not result
    tl.open(gate)
    waiter.join()
    assert still_waiting, "the waiting thread held the GIL"
    assert tl.violations() == ""
    assert (result[0] == NEW).all()
    assert (src == NEW).all() and steps >= 100


def test_sync_off_never_waits(tl):
    """With ordering off there is no wait to hold anything: the old bytes."""
    src = tl.buffer(PINNED)
    a = tl.stream()
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)
    seen = np.from_dlpack(ToDLPack(CAIArray(src, a), sync=False)).copy()
    assert (seen == OLD).all()
    tl.open(gate)
