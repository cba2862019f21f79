"""Copies keep the promise (issue 41), on the timeline double: a device
copy keeps its source until the queued copy has read it, on every path and
consumer stream; its memory is freed where it lives, never on a stream
that may be gone; a host copy orders after the view's fence, on the host
with the GIL released; a copy onto another device's stream is refused."""
import ctypes
import gc
import os
import pathlib
import subprocess
import sys
import weakref

import numpy as np
import pytest

from test_copy import Host, N, NEW, OLD, data_of, double, live, tl  # noqa
from test_race import LEGACY, PER_THREAD, on_new_thread
from timeline_double import CAIArray, PatchedArray, caibridge

REUSED = 99   # what a pool's next user writes into freed memory


def via_view(producer, b):
    view = caibridge.as_dlpack(producer)
    return view.__dlpack__(stream=b, copy=True, max_version=(1, 3))


def via_to_dlpack(producer, b):
    return caibridge.to_dlpack(producer, stream=b, copy=True,
                               max_version=(1, 3))


def via_add_dlpack(producer, b):
    return producer.__dlpack__(stream=b, copy=True, max_version=(1, 3))


def via_caiview(producer, b):
    capsule = caibridge.to_dlpack(producer, max_version=(1, 3))
    view = caibridge.from_dlpack(capsule, stream=LEGACY)
    return view.__dlpack__(stream=b, copy=True, max_version=(1, 3))


PATHS = [via_view, via_to_dlpack, via_add_dlpack, via_caiview]


def let_go(alive):
    """Runs the pending releases until alive() is None (the waiter may hold
    one it took while this thread had the GIL); counted in polls."""
    for _ in range(100000):
        if alive() is None:
            return
        caibridge._core._release_poll(True)
        gc.collect()


@pytest.mark.parametrize("path", PATHS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("stream", ["legacy", "per-thread", "handle",
                                    "none"])
def test_copy_keeps_its_source_until_it_has_read_it(tl, path, stream):
    """The consumer's stream is held back, so the copy is still queued at
    hand-over; the source's memory is overwritten as soon as its owner
    goes (a pool's next user), so a copy that read after the owner went
    reads that."""
    src = tl.buffer(value=NEW)
    a = tl.stream() if stream == "none" else None
    inner = (PatchedArray if path is via_add_dlpack else CAIArray)(src, a)
    alive = weakref.ref(inner)
    weakref.finalize(inner, src.fill, REUSED)
    if stream == "none" and path is via_caiview:
        # The CAIView's stream is the one its -1 copy goes on.
        producer = caibridge.from_dlpack(
            caibridge.to_dlpack(inner, max_version=(1, 3)), stream=a)
        copy_of = lambda p, b: p.__dlpack__(  # noqa: E731
            stream=b, copy=True, max_version=(1, 3))
    else:
        producer, copy_of = inner, path
    del inner
    b = {"legacy": LEGACY, "per-thread": PER_THREAD,
         "handle": tl.stream() if stream == "handle" else None,
         "none": -1}[stream]
    # stream=-1: a view's copy goes on the legacy stream (after its
    # fence), a one-shot path's on the producer's stream, named just now.
    held = b if stream != "none" else LEGACY if path is via_view else a
    gate = tl.gate()
    tl.fill(held, tl.buffer(), 0, gate)       # the copy waits behind this
    capsule = copy_of(producer, b)
    del producer
    gc.collect()
    assert alive() is not None, "the source went before the copy read it"
    tl.open(gate)
    tl.drain()
    view, ptr = data_of(capsule)
    got = np.frombuffer(ctypes.string_at(ptr, N), dtype=np.uint8)
    assert (got == NEW).all(), "the copy read memory reused after its source"
    let_go(alive)
    assert alive() is None, "the source was kept after the copy ran"
    del view, capsule
    gc.collect()
    tl.drain()
    assert live(tl) == 0


def test_copy_on_a_handle_is_freed_after_the_handle_is_gone(tl):
    """The consumer destroyed its stream before releasing the copy (the
    copy still queued there): the free names no destroyed handle, runs
    after the copy, and frees the memory."""
    src = tl.buffer(value=NEW)
    b = tl.stream()
    gate = tl.gate()
    tl.fill(b, tl.buffer(), 0, gate)
    capsule = caibridge.to_dlpack(CAIArray(src, None), stream=b, copy=True)
    tl.c.destroy_stream(b)
    del capsule
    gc.collect()
    assert tl.violations() == "", "the free named a destroyed stream"
    assert live(tl) == 1, "the copy was freed before it ran"
    tl.open(gate)
    tl.drain()
    assert live(tl) == 0, "the copy's memory leaked"


@pytest.mark.parametrize("stream", [LEGACY, PER_THREAD])
def test_default_stream_copy_is_freed_in_its_own_context(tl, stream):
    """A copy made on stream 1 or 2 in a non-primary context (PyCUDA's)
    and released where another context is current: the free goes on the
    legacy stream of the copy's context, after the copy."""
    before = tl.c.current_context()
    made_in, elsewhere = tl.c.create_context(0), tl.c.create_context(0)
    try:
        tl.c.set_current_context(made_in)
        src = tl.buffer(value=NEW)
        gate = tl.gate()
        tl.fill(stream, tl.buffer(), 0, gate)
        capsule = caibridge.to_dlpack(CAIArray(src, None), stream=stream,
                                      copy=True)
        tl.c.set_current_context(elsewhere)
        del capsule
        gc.collect()
        assert live(tl) == 1, "the copy was freed before it ran"
        tl.open(gate)
        tl.drain()
        assert live(tl) == 0, "the copy's memory leaked"
    finally:
        tl.c.set_current_context(before)


def test_copy_of_an_ended_context_is_not_freed_there(tl):
    """The context the copy was made in was destroyed before the release
    (its memory with it): nothing is named in it."""
    destroy = tl.lib.cuCtxDestroy_v2
    destroy.argtypes, destroy.restype = [ctypes.c_void_p], ctypes.c_int
    before = tl.c.current_context()
    made_in = tl.c.create_context(0)
    try:
        tl.c.set_current_context(made_in)
        src = tl.buffer(value=NEW)
        capsule = caibridge.to_dlpack(CAIArray(src, None), stream=LEGACY,
                                      copy=True)
        tl.drain()
        tl.c.set_current_context(before)
        assert destroy(made_in) == 0
        del capsule
        gc.collect()
        assert tl.violations() == "", "the free named an ended context"
    finally:
        tl.c.set_current_context(before)
    tl.base = tl.c.live_async_allocations()   # gone with the context


@pytest.mark.parametrize("path", [via_view, via_to_dlpack],
                         ids=lambda f: f.__name__)
def test_copy_onto_another_devices_stream_is_refused(tl, path):
    src = tl.buffer(value=NEW)
    producer = CAIArray(src, None)
    before = sys.getrefcount(producer)
    with pytest.raises(BufferError, match=r"device 1.*device 0"):
        path(producer, tl.stream(1))
    tl.drain()
    assert live(tl) == 0
    assert sys.getrefcount(producer) == before


def test_host_copy_waits_on_the_views_fence_not_this_threads_stream_2(tl):
    """The producer's stream 2 is the view maker's: a host copy asked on
    another thread (with a context of its own) must still wait for it."""
    src = tl.buffer()
    tl.fill(PER_THREAD, src, NEW, tl.gate(on_host_wait=True))
    context = tl.c.current_context()
    view = caibridge.as_dlpack(CAIArray(src, PER_THREAD))

    def host_copy():
        tl.c.set_current_context(context)
        return view.__dlpack__(dl_device=(1, 0), copy=True,
                               max_version=(1, 3))

    got = np.from_dlpack(Host(on_new_thread(host_copy)))
    assert (got == NEW).all(), "the host copy did not wait for the producer"


def test_no_stream_copy_of_a_view_names_no_producer_handle(tl):
    """stream=-1 on a view whose producer's stream was destroyed since the
    view was made: the copy goes on the legacy stream after the fence."""
    src = tl.buffer()
    a = tl.stream()
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)
    view = caibridge.as_dlpack(CAIArray(src, a))
    tl.c.destroy_stream(a)
    capsule = view.__dlpack__(stream=-1, copy=True, max_version=(1, 3))
    assert tl.violations() == "", "the copy named a destroyed stream"
    tl.open(gate)
    tl.drain()
    back, ptr = data_of(capsule)
    assert ctypes.string_at(ptr, N) == bytes([NEW]) * N
    del back, capsule, view
    gc.collect()
    tl.drain()
    assert live(tl) == 0


def test_copy_onto_a_capturing_stream_is_refused(tl):
    """Its replays would read the source long after it may be gone."""
    src = tl.buffer(value=NEW)
    producer = CAIArray(src, None)
    b = tl.stream()
    view = caibridge.as_dlpack(producer)
    before = sys.getrefcount(producer)
    tl.c.begin_capture(b, 1)
    try:
        with pytest.raises(BufferError, match="capturing"):
            view.__dlpack__(stream=b, copy=True, max_version=(1, 3))
    finally:
        tl.c.end_capture(b)
    tl.drain()
    assert live(tl) == 0
    assert sys.getrefcount(producer) == before


def test_host_copy_names_no_producer_handle_destroyed_since_the_view(tl):
    src = tl.buffer()
    a = tl.stream()
    tl.fill(a, src, NEW)
    view = caibridge.as_dlpack(CAIArray(src, a))
    tl.drain()
    tl.c.destroy_stream(a)
    capsule = view.__dlpack__(dl_device=(1, 0), copy=True,
                              max_version=(1, 3))
    assert tl.violations() == "", "the host copy named a destroyed stream"
    assert (np.from_dlpack(Host(capsule)) == NEW).all()


def caiview_of(producer):
    """A CAIView of producer's data, ready on producer's stream."""
    capsule = caibridge.to_dlpack(CAIArray(producer.buf, None),
                                  max_version=(1, 3))
    stream = producer.__cuda_array_interface__["stream"]
    return caibridge.from_dlpack(capsule, stream=stream or LEGACY)


HOST_PATHS = {
    "as_dlpack": lambda producer: caibridge.as_dlpack(producer).__dlpack__(
        dl_device=(1, 0), copy=True),
    "caiview": lambda producer: caiview_of(producer).__dlpack__(
        dl_device=(1, 0), copy=True),
    "to_dlpack": lambda producer: caibridge.to_dlpack(
        producer, dl_device=(1, 0), copy=True),
    "add_dlpack": lambda producer: producer.__dlpack__(dl_device=(1, 0),
                                                       copy=True),
}


@pytest.mark.parametrize("path", sorted(HOST_PATHS))
@pytest.mark.parametrize("where", ["producer", "copy"])
def test_host_copy_waits_without_the_gil(tl, path, where):
    """A Python host function (a framework's callback) queued before the
    copy, on the producer's stream or on the stream the copy itself goes
    on: a host wait holding the GIL deadlocks (the double gives up after
    10 s and records it)."""
    src = tl.buffer()
    a = tl.stream() if where == "producer" else None
    ran = []

    def fill():
        src[:] = NEW
        ran.append(True)

    # The host function can run only once the host waits for it.
    on = a if a is not None else LEGACY
    tl.fill(on, tl.buffer(), 0, tl.gate(on_host_wait=True))
    tl.host_func(on, fill)
    capsule = HOST_PATHS[path](PatchedArray(src, a))
    assert tl.violations() == "", "a host wait held the GIL"
    assert ran == [True]
    assert (np.from_dlpack(Host(capsule)) == NEW).all()


def test_stream_2_copy_on_a_thread_without_context_goes_on_legacy(tl):
    """Stream 2 of a thread with no context holds no work of its own: the
    copy goes on the legacy stream, where it runs and is freed."""
    src = tl.buffer(value=NEW)
    tl.c.log()
    capsule = on_new_thread(lambda: caibridge.to_dlpack(
        CAIArray(src, None), stream=PER_THREAD, copy=True))
    assert "cudaMallocAsync(64, cudaStreamLegacy)" in tl.c.log().decode()
    tl.drain()
    view, ptr = data_of(capsule)
    assert ctypes.string_at(ptr, N) == bytes([NEW]) * N
    del view, capsule
    gc.collect()
    tl.drain()
    assert live(tl) == 0


def test_no_stream_copy_of_a_view_is_freed_on_a_live_stream(tl):
    """stream=-1 has no consumer stream: the copy and its free go on the
    legacy stream, never on "handle -1"."""
    src = tl.buffer(value=NEW)
    capsule = caibridge.as_dlpack(CAIArray(src, tl.stream())).__dlpack__(
        stream=-1, copy=True)
    tl.drain()
    del capsule
    gc.collect()
    tl.drain()
    log = tl.c.log().decode()
    assert "cudaFreeAsync(cudaStreamLegacy)" in log, log
    assert tl.violations() == ""
    assert live(tl) == 0


BIG = 64 << 20   # above glibc's largest mmap threshold: freed is unmapped


def reversed_halves(src):
    """BIG bytes as 2 rows read last row first: 2 one-row pieces."""
    half = BIG // 2

    class Strided:
        __cuda_array_interface__ = {
            "data": (src.ctypes.data + half, False), "shape": (2, half),
            "typestr": "|u1", "strides": (-half, 1), "version": 3,
            "stream": None}
    return Strided()


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
        "fsmblks", "uordblks", "fordblks", "keepcost")]


def mapped_bytes():
    """glibc's bytes in mmapped blocks; None where it cannot say."""
    libc = ctypes.CDLL(None)
    fn = getattr(libc, "mallinfo2", None)
    if fn is None:
        return None
    fn.restype = MallInfo2
    return fn().hblkhd


def test_failed_host_copy_frees_its_memory(tl):
    src = tl.buffer(n=BIG)
    producer = reversed_halves(src)
    held = caibridge.as_dlpack(producer).__dlpack__(dl_device=(1, 0))
    base = mapped_bytes()
    del held
    if base is None or base - mapped_bytes() < BIG:
        pytest.skip("malloc does not report its mapped blocks (not glibc's, "
                    "or a sanitizer's): a leak could not be seen")
    base = mapped_bytes()
    tl.c.fail_after(b"cudaMemcpyAsync", 2, 1)
    with pytest.raises(BufferError, match="cudaMemcpyAsync"):
        caibridge.as_dlpack(producer).__dlpack__(dl_device=(1, 0))
    tl.drain()
    assert mapped_bytes() == base, "the failed host copy's block leaked"


HELD_BACK = r'''
import ctypes, sys
sys.path[:0] = [{here!r}]
from test_copy_promise import reversed_halves, BIG
from timeline_double import Timeline, caibridge
tl = Timeline()
tl.start()
src = tl.buffer(n=BIG, value=7)
gate = tl.gate()
tl.fill(1, tl.buffer(), 0, gate)          # the pieces wait behind this
tl.c.fail_after(b"cudaMemcpyAsync", 2, 1)
tl.c.fail(b"cudaStreamSynchronize", 1)
try:
    caibridge.as_dlpack(reversed_halves(src)).__dlpack__(dl_device=(1, 0))
except BufferError as e:
    print("raised", e)
tl.open(gate)
tl.drain()                                # the held piece writes now
print("survived", tl.stop() == "")
'''


def test_host_block_is_not_freed_under_held_back_pieces():
    """A host copy fails after one piece was queued (held back behind a
    gate), and the wait for it fails too: its block stays allocated, so
    the piece, when it runs, writes into memory that is still the
    block's.  Run apart: a block freed (unmapped) would crash."""
    here = str(pathlib.Path(__file__).resolve().parent)
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", HELD_BACK.format(here=here)],
                         env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    assert "raised" in out.stdout and "survived True" in out.stdout, \
        out.stdout + out.stderr
