"""The promise, path by path, on the timeline double: a consumer that names
stream 1 or 2 (or none, for device memory: the legacy stream) keeps the
producer alive until its work queued before the release has run, whether
the producer named a stream or not, on every path that hands data over.
Written from the promise: the consumer's read is held back behind a gate,
the tensor released, and the producer must still be there."""
import ctypes
import gc
import weakref

import pytest

from test_batch import calls, still  # noqa: F401
from test_exchange_streams import handed_out, release
from test_race import LEGACY, NEW, OLD, PER_THREAD, double, tl  # noqa: F401
from test_streams import release_capsule
from timeline_double import CAIArray, PatchedArray, caibridge


def via_view(producer, consumer):
    view = caibridge.as_dlpack(producer)
    capsule = view.__dlpack__(stream=consumer, max_version=(1, 3))
    return lambda: release_capsule(capsule)


def via_view_no_stream_given(producer, consumer):
    """Device memory asked for with no stream: read on stream 1."""
    view = caibridge.as_dlpack(producer)
    capsule = view.__dlpack__(max_version=(1, 3))
    return lambda: release_capsule(capsule)


def via_to_dlpack(producer, consumer):
    capsule = caibridge.to_dlpack(producer, stream=consumer,
                                  max_version=(1, 3))
    return lambda: release_capsule(capsule)


def via_to_dlpack_no_stream_given(producer, consumer):
    """to_dlpack of device memory with no stream: read on stream 1."""
    capsule = caibridge.to_dlpack(producer, max_version=(1, 3))
    return lambda: release_capsule(capsule)


def via_add_dlpack(producer, consumer):
    capsule = producer.__dlpack__(stream=consumer, max_version=(1, 3))
    return lambda: release_capsule(capsule)


def via_caiview(producer, consumer):
    """A CAIView (its own import unordered) re-exported to the consumer;
    the CAIView itself is dropped before the release."""
    view = caibridge.from_dlpack(caibridge.as_dlpack(producer), stream=-1)
    capsule = view.__dlpack__(stream=consumer, max_version=(1, 3))
    del view
    return lambda: release_capsule(capsule)


def via_from_dlpack(producer, consumer):
    """A CAI consumer of a view: it launches on the stream it named."""
    keep = [caibridge.from_dlpack(caibridge.as_dlpack(producer),
                                  stream=consumer)]
    return keep.clear


def via_exchange(producer, consumer):
    """The C exchange table: its consumer works on the legacy stream."""
    rc, tensor = handed_out(caibridge.as_dlpack(producer), "managed")
    assert rc == 0
    return lambda: release(tensor)


PATHS = {
    via_view: (LEGACY, PER_THREAD),
    via_view_no_stream_given: (LEGACY,),
    via_to_dlpack: (LEGACY, PER_THREAD),
    via_to_dlpack_no_stream_given: (LEGACY,),
    via_add_dlpack: (LEGACY, PER_THREAD),
    via_caiview: (LEGACY, PER_THREAD),
    via_from_dlpack: (LEGACY, PER_THREAD),
    via_exchange: (LEGACY,),
}
CASES = [(path, consumer) for path, streams in PATHS.items()
         for consumer in streams]


@pytest.mark.parametrize("producer_stream", ["none", "handle", "legacy"])
@pytest.mark.parametrize(
    "path,consumer", CASES,
    ids=[f"{p.__name__}-{c}" for p, c in CASES])
def test_producer_is_kept_until_the_consumers_work_ran(
        tl, path, consumer, producer_stream):
    src, out = tl.buffer(value=NEW), tl.buffer()
    a = {"none": None, "handle": tl.stream(), "legacy": LEGACY}[
        producer_stream]
    kind = PatchedArray if path is via_add_dlpack else CAIArray
    producer = kind(src, a)
    alive = weakref.ref(producer)
    release_it = path(producer, consumer)
    del producer
    gate = tl.gate()
    tl.copy(consumer, out, src, gate)               # the consumer's read
    release_it()
    gc.collect()
    assert alive() is not None, (
        "the producer went while the consumer's read was still queued")
    tl.open(gate)
    tl.drain()
    caibridge._core._release_poll()
    gc.collect()
    assert alive() is None, "the producer was kept after the work ran"
    assert (out == NEW).all()


@pytest.mark.parametrize("path", [via_view, via_to_dlpack, via_add_dlpack])
def test_no_ordering_asked_takes_no_edge(tl, path):
    """stream=-1: the consumer orders its own work; nothing is recorded at
    release and the producer goes at once."""
    src = tl.buffer(value=NEW)
    kind = PatchedArray if path is via_add_dlpack else CAIArray
    producer = kind(src, None)
    alive = weakref.ref(producer)
    release_it = path(producer, -1)
    del producer
    calls = tl.c.calls()
    release_it()
    gc.collect()
    assert alive() is None
    assert tl.c.calls() == calls


# ---- "The same stream" is proven, never taken from a handle's value ----

@pytest.mark.parametrize("batch", [False, True], ids=["view", "batch"])
def test_a_producer_handle_taken_over_by_a_new_stream_waits(tl, still,
                                                            batch):
    """The producer's stream is destroyed after the view was made and CUDA
    gives its handle to a new stream, the consumer's: the consumer names
    the same value, but it is another stream, so it must wait."""
    p = 0x7e100
    tl.c.add_stream(p, 0)
    src, out = tl.buffer(), tl.buffer()
    gate = tl.gate()
    tl.fill(p, src, NEW, gate)                      # the producer's work
    objs = [CAIArray(src, p)]
    view = (caibridge.as_dlpack_all(objs)[0] if batch
            else caibridge.as_dlpack(objs[0]))
    tl.c.destroy_stream(p)
    tl.c.add_stream(p, 0)                           # a new stream, same handle
    tl.lib.double_clear_log()
    capsule = view.__dlpack__(stream=p, max_version=(1, 3))
    assert calls(tl, "cudaStreamWaitEvent") == 1, tl.c.log().decode()
    tl.copy(p, out, src)
    tl.open(gate)
    tl.drain()
    assert (out == NEW).all()
    del capsule, view
    gc.collect()


def test_the_producers_own_stream_needs_no_wait(tl, still):
    """The consumer on the very stream the view's fence was recorded on
    (proven by the stream's id): no wait is queued, and the read is still
    in order."""
    p = tl.stream()
    src, out = tl.buffer(), tl.buffer()
    gate = tl.gate()
    tl.fill(p, src, NEW, gate)
    view = caibridge.as_dlpack(CAIArray(src, p))
    tl.lib.double_clear_log()
    capsule = view.__dlpack__(stream=p, max_version=(1, 3))
    assert calls(tl, "cudaStreamWaitEvent") == 0, tl.c.log().decode()
    tl.copy(p, out, src)
    tl.open(gate)
    tl.drain()
    assert (out == NEW).all()
    del capsule, view
    gc.collect()


def test_the_producers_own_stream_capturing_waits_in_the_graph(tl, still):
    """The producer's own stream, capturing a graph since the view was
    made: the graph may be launched on any stream later, so the wait goes
    into it, and the replay reads the producer's data."""
    p, c = tl.stream(), tl.stream()
    src, out = tl.buffer(), tl.buffer()
    gate = tl.gate()
    tl.fill(p, src, NEW, gate)
    view = caibridge.as_dlpack(CAIArray(src, p))
    tl.c.begin_capture(p, 11)
    capsule = view.__dlpack__(stream=p, max_version=(1, 3))
    tl.copy(p, out, src)                            # captured: the read
    assert tl.c.end_capture(p) == 0
    assert tl.c.replay(tl.c.instantiate(p), c) == 0
    tl.open(gate)
    tl.drain()
    assert (out == NEW).all(), "the replayed graph read before the producer"
    del capsule, view
    gc.collect()


# ---- A batch never skips a wait it still needs ----

def batch_of(tl, a, n):
    bufs = [tl.buffer(n=16) for _ in range(n)]
    gate = tl.gate()
    for b in bufs:
        tl.fill(a, b, NEW, gate)
    return bufs, caibridge.as_dlpack_all([CAIArray(b, a) for b in bufs]), gate


def test_a_batch_waits_again_inside_a_capture(tl, still):
    """The consumer's stream waited for the batch, then began capturing a
    graph: the next hand-over must put the wait in the graph, which is
    replayed later on another stream and must read the producer's data."""
    a, b, c = tl.stream(), tl.stream(), tl.stream()
    bufs, views, gate = batch_of(tl, a, 2)
    first = views[0].__dlpack__(stream=b)
    tl.c.begin_capture(b, 9)
    second = views[1].__dlpack__(stream=b)
    out = tl.buffer(n=16)
    tl.copy(b, out, bufs[1])                        # captured: the read
    assert tl.c.end_capture(b) == 0
    graph = tl.c.instantiate(b)
    assert tl.c.replay(graph, c) == 0               # launched elsewhere
    tl.open(gate)
    tl.drain()
    assert (out == NEW).all(), "the replayed graph read before the producer"
    del first, second, views
    gc.collect()


def test_a_batch_on_stream_2_of_another_thread_waits_there(tl, still):
    """Stream 2 is a queue per thread: a batch handed over on this thread's
    stream 2 has not ordered another thread's."""
    import threading
    a = tl.stream()
    bufs, views, gate = batch_of(tl, a, 2)
    first = views[0].__dlpack__(stream=PER_THREAD)
    tl.lib.double_clear_log()
    out = tl.buffer(n=16)
    got = []

    def other():
        tl.c.set_current_device(0)                  # a thread using CUDA
        got.append(views[1].__dlpack__(stream=PER_THREAD))
        tl.copy(PER_THREAD, out, bufs[1])

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert calls(tl, "cudaStreamWaitEvent") == 1, tl.c.log().decode()
    tl.open(gate)
    tl.drain()
    assert (out == NEW).all()
    del first
    got.clear()
    views.clear()
    gc.collect()


def test_a_batch_handed_to_more_streams_than_it_remembers(tl, still):
    """Six consumer streams, more than a fence notes: each waits once when
    first met, and every one is still ordered when met again."""
    a = tl.stream()
    streams = [tl.stream() for _ in range(6)]
    bufs, views, gate = batch_of(tl, a, 3)
    tl.lib.double_clear_log()
    keep = [views[0].__dlpack__(stream=s) for s in streams]
    assert calls(tl, "cudaStreamWaitEvent") == 6
    outs = []
    for s in streams:
        keep.append(views[1].__dlpack__(stream=s))
        out = tl.buffer(n=16)
        tl.copy(s, out, bufs[1])
        outs.append(out)
    tl.open(gate)
    tl.drain()
    assert all((out == NEW).all() for out in outs)
    del keep, views
    gc.collect()


# ---- Polls: none waits under a lock, none lets a producer go unasked ----

def pending_release(tl, value=NEW):
    """A release pending behind the consumer's read, held by a gate; the
    producer's weak reference and the gate."""
    src = tl.buffer(value=value)
    producer = CAIArray(src, None)
    alive = weakref.ref(producer)
    release_it = via_view(producer, LEGACY)
    del producer
    gate = tl.gate()
    tl.copy(LEGACY, tl.buffer(), src, gate)
    release_it()
    gc.collect()
    assert alive() is not None
    return alive, gate


def test_a_waiting_poll_holds_no_one_back(tl, still):
    """A thread waits for every pending release (_release_poll(True), as at
    exit); meanwhile another thread's hand-over, which polls first, must go
    ahead, not wait behind it for the consumer's work."""
    import threading
    import time
    alive, gate = pending_release(tl)
    waits = tl.c.host_waits()
    waiter = threading.Thread(target=caibridge._core._release_poll,
                              args=(True,))
    waiter.start()
    for _ in range(2000):                           # until it is blocked
        if tl.c.host_waits() > waits:
            break
        time.sleep(0.001)
    assert tl.c.host_waits() > waits, "the waiting poll never waited"
    other = caibridge.as_dlpack(CAIArray(tl.buffer(), tl.stream()))  # polls
    assert waiter.is_alive(), (
        "the hand-over went ahead only once the waiting poll had ended")
    tl.open(gate)
    waiter.join()
    gc.collect()
    assert alive() is None
    del other


@pytest.mark.parametrize("error, goes", [(999, False), (700, True)],
                         ids=["unknown-error", "illegal-address"])
def test_a_failed_query_lets_go_only_work_that_never_runs(tl, still, error,
                                                          goes):
    """cuEventQuery fails for a live context: an error that says the
    context takes no more work (700) lets the producer go, reported; any
    other is no answer, reported, and the producer is kept."""
    alive, gate = pending_release(tl)
    tl.c.fail(b"cuEventQuery", error)
    with pytest.raises(caibridge.CUDAError, match="cuEventQuery"):
        caibridge._core._release_poll()
    gc.collect()
    assert (alive() is None) == goes
    tl.c.fail(b"cuEventQuery", 0)
    tl.open(gate)
    tl.drain()
    caibridge._core._release_poll()
    gc.collect()
    assert alive() is None


def test_no_waiter_without_the_drivers_query():
    """A driver without cuEventQuery (here, one not bound at all): nothing
    can be learned without a call, so no thread is started to wake up for
    nothing; releases go at calls."""
    import os
    import subprocess
    import sys
    from test_stream_order import double_path
    partial = double_path().parent / "libcudart-partial.so"
    env = dict(os.environ, PARTIAL_DOUBLE=str(partial))
    code = (
        "import gc, os, pathlib, caibridge, timeline_double\n"
        "partial = os.environ['PARTIAL_DOUBLE']\n"
        "os.environ['CAIBRIDGE_CUDART'] = partial\n"
        "timeline_double.double_path = lambda: pathlib.Path(partial)\n"
        "from timeline_double import Timeline, CAIArray\n"
        "from test_streams import release_capsule\n"
        "tl = Timeline(); tl.start()\n"
        "src = tl.buffer(value=7)\n"
        "view = caibridge.as_dlpack(CAIArray(src, None))\n"
        "c = view.__dlpack__(stream=1, max_version=(1, 3))\n"
        "del view\n"
        "g = tl.gate(); tl.copy(1, tl.buffer(), src, g)\n"
        "release_capsule(c); gc.collect()\n"
        "assert caibridge.cuda_runtime_info()['driver_missing']\n"
        "print(caibridge._core._release_poll(), "
        "caibridge._core._release_waiter(True))\n"
        "tl.open(g); tl.drain()\n"
        "print(caibridge._core._release_poll())\n")
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(
        [here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                  if p])
    # Generous: on a loaded machine a fresh interpreter may take a while.
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "False", "0"], out.stdout


@pytest.mark.parametrize("failing", ["cudaEventRecord",
                                     "cudaEventCreateWithFlags"])
def test_a_release_that_cannot_record_waits_for_the_consumer(tl, still,
                                                             failing):
    """The release's record fails on the consumer's stream 1, whose read is
    still queued behind a host function that needs the interpreter: the
    host waits for that stream, with the interpreter let go, and only then
    lets the producer go."""
    src, out = tl.buffer(value=NEW), tl.buffer()
    producer = CAIArray(src, None)
    seen = []
    alive = weakref.ref(producer, lambda _: seen.append(out.copy()))
    # A CAIView: its release runs in its deallocator, the interpreter held
    # (a capsule's deleter called through ctypes would run without it).
    release_it = via_from_dlpack(producer, LEGACY)
    del producer
    ran = []
    # The host function, which needs the interpreter, runs only once the
    # host waits: a gate that opens then holds the stream before it.
    gate = tl.gate(on_host_wait=True)
    tl.fill(LEGACY, tl.buffer(), OLD, gate)
    tl.host_func(LEGACY, lambda: ran.append(1))
    tl.copy(LEGACY, out, src)                       # the consumer's read
    tl.c.fail(failing.encode(), 400)
    release_it()
    tl.c.fail(failing.encode(), 0)
    gc.collect()
    assert alive() is None
    assert ran == [1]
    assert len(seen) == 1 and (seen[0] == NEW).all(), (
        "the producer went before the consumer's read had run")


# ---- Where a default stream is: its context, its thread ----

def test_a_consumer_in_another_context_is_kept_there(tl, still):
    """The consumer's stream 1 is that of a context of its own (as
    cuCtxCreate makes); released on a thread whose current context is
    another, the release still records in the consumer's, and keeps the
    producer until the read there has run."""
    a = tl.stream()
    src, out = tl.buffer(value=NEW), tl.buffer()
    producer = CAIArray(src, a)
    alive = weakref.ref(producer)
    view = caibridge.as_dlpack(producer)
    del producer
    mine = tl.c.current_context()
    theirs = tl.c.create_context(0)
    tl.c.set_current_context(theirs)
    capsule = view.__dlpack__(stream=LEGACY, max_version=(1, 3))
    gate = tl.gate()
    tl.copy(LEGACY, out, src, gate)                 # their stream 1
    tl.c.set_current_context(mine)
    del view
    release_capsule(capsule)
    gc.collect()
    assert alive() is not None, (
        "released in the releasing thread's context, not the consumer's")
    tl.open(gate)
    tl.drain()
    caibridge._core._release_poll()
    gc.collect()
    assert alive() is None
    assert (out == NEW).all()


def test_each_threads_stream_2_is_its_own_line(tl, still):
    """Two threads' stream 2 are two streams: a release held back on one
    never holds back the other's, which goes at the next poll."""
    import threading
    held_src, free_src = tl.buffer(value=NEW), tl.buffer(value=NEW)
    held_p, free_p = CAIArray(held_src, None), CAIArray(free_src, None)
    held_alive, free_alive = weakref.ref(held_p), weakref.ref(free_p)
    gate = tl.gate()

    def consume(producer, gated):
        tl.c.set_current_device(0)
        view = caibridge.as_dlpack(producer)
        capsule = view.__dlpack__(stream=PER_THREAD, max_version=(1, 3))
        del view
        tl.copy(PER_THREAD, tl.buffer(), producer.buf, gate if gated else 0)
        release_capsule(capsule)
        if not gated:                               # its read has run
            assert tl.lib.cudaStreamSynchronize(ctypes.c_void_p(2)) == 0

    first = threading.Thread(target=consume, args=(held_p, True))
    first.start()
    first.join()
    second = threading.Thread(target=consume, args=(free_p, False))
    second.start()
    second.join()
    del held_p, free_p
    caibridge._core._release_poll()
    gc.collect()
    assert free_alive() is None, "a done release held behind another line"
    assert held_alive() is not None
    tl.open(gate)
    tl.drain()
    caibridge._core._release_poll()
    gc.collect()
    assert held_alive() is None


@pytest.mark.parametrize("path", [via_view, via_to_dlpack, via_add_dlpack,
                                  via_caiview])
def test_a_handle_consumer_takes_no_edge(tl, still, path):
    """A consumer on a stream handle (torch's side stream, CuPy's, JAX's):
    the handle may be gone by the release, so nothing is named then and
    the producer goes at once; the consumer keeps it alive (docs/cuda.rst's
    table says so)."""
    src = tl.buffer(value=NEW)
    b = tl.stream()
    kind = PatchedArray if path is via_add_dlpack else CAIArray
    producer = kind(src, None)
    alive = weakref.ref(producer)
    release_it = path(producer, b)
    del producer
    gate = tl.gate()
    tl.copy(b, tl.buffer(), src, gate)
    tl.lib.double_clear_log()
    release_it()
    gc.collect()
    assert alive() is None
    assert tl.c.log().decode() == "", "the release named a stream"
    tl.open(gate)


def test_a_copy_freed_during_a_blocking_capture_keeps_the_capture(tl, still):
    """A device copy made on stream 1 and released (a GC release) while a
    CuPy-like blocking stream of its context captures a graph: its free
    names no legacy stream, which would invalidate that capture, and goes
    after the copy all the same."""
    a = tl.stream()
    src = tl.buffer(value=NEW)
    view = caibridge.as_dlpack(CAIArray(src, a))
    capsule = view.__dlpack__(stream=LEGACY, copy=True, max_version=(1, 3))
    tl.drain()
    caibridge._core._release_poll()
    cupy = tl.stream(blocking=True)
    tl.c.begin_capture(cupy, 8)
    live = tl.c.live_async_allocations()
    release_capsule(capsule)
    assert tl.c.capture_state(cupy) == 1, "the free broke the capture"
    assert tl.c.end_capture(cupy) == 0
    tl.drain()
    assert tl.c.live_async_allocations() == live - 1, "the copy was not freed"
    assert tl.c.pending_error() == 0, "906 was left as the last error"
    del view


def via_batch(producer, consumer):
    """as_dlpack_all: a view of a batch, its fence shared."""
    view = caibridge.as_dlpack_all([producer])[0]
    capsule = view.__dlpack__(stream=consumer, max_version=(1, 3))
    return lambda: release_capsule(capsule)


ORDERED = [(p, c) for p in (via_view, via_batch, via_to_dlpack,
                            via_add_dlpack, via_caiview, via_from_dlpack)
           for c in (LEGACY, PER_THREAD)] + [(via_exchange, LEGACY)]


@pytest.mark.parametrize("path,consumer", ORDERED,
                         ids=[f"{p.__name__}-{c}" for p, c in ORDERED])
def test_ordered_after_the_producer_and_kept_until_read(tl, path, consumer):
    """Both halves of the promise in one: the producer's write is held back
    on its own stream; the consumer's read, queued with no gate of its own,
    must wait for it (ordered), and the producer must outlive that read
    (kept), though the tensor is released before either ran."""
    src, out = tl.buffer(), tl.buffer()
    a = tl.stream()
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)                      # the producer's write
    kind = PatchedArray if path is via_add_dlpack else CAIArray
    producer = kind(src, a)
    alive = weakref.ref(producer)
    release_it = path(producer, consumer)
    del producer
    tl.copy(consumer, out, src)                     # the consumer's read
    release_it()
    gc.collect()
    assert alive() is not None, "released before the read had run"
    tl.open(gate)
    tl.drain()
    caibridge._core._release_poll()
    gc.collect()
    assert (out == NEW).all(), "the read ran before the producer's write"
    assert alive() is None


def test_host_memory_through_the_table_takes_no_edge(tl, still):
    """The exchange table names stream 1 for host data too; no consumer
    stream reads host memory, so its release makes no CUDA call."""
    import numpy as np
    host = np.zeros(8, np.uint8)
    rc, tensor = handed_out(caibridge.as_dlpack(host), "managed")
    assert rc == 0
    tl.lib.double_clear_log()
    release(tensor)
    assert tl.c.log().decode() == "", "a host tensor's release called CUDA"
