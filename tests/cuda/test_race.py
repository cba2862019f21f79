"""Race tests on data, on the timeline double: every path
of the Python face hands over bytes that a producer's "kernel" writes on
stream A once a gate opens, to a consumer that reads them on stream B or on
the host.  With ordering, the consumer reads what the producer wrote, every
time; with sync=False (or stream=-1) the same test reads the old bytes,
which shows that it can fail.

The gates make the outcome certain, not likely: gate_open first lets every
stream run as far as it can, so an unordered consumer has read before the
producer writes; a gate that opens on a host wait runs the producer's
kernel only while the host waits for it.
"""
import ctypes
import gc
import os
import threading
import weakref

import numpy as np
import pytest

from test_exchange_streams import ForeignTable, handed_out, release
from test_stream_order import KDLCPU
from test_streams import release_capsule
from timeline_double import (DEVICE, MANAGED, PINNED, CAIArray, Forward,
                             PatchedArray, Timeline, ToDLPack, caibridge)

N = 64
OLD, NEW = 0, 7
LEGACY, PER_THREAD = 1, 2


@pytest.fixture(scope="module")
def double():
    return Timeline()


@pytest.fixture
def tl(double):
    double.start()
    yield double
    assert double.stop() == "", "the double saw a CUDA rule broken"


# ---- device consumers: the consumer's stream waits for the producer ----

# Each hand-over takes (tl, src, A, B, ordered) and returns what must stay
# alive until the consumer's kernel has run, and the stream the consumer
# then launches on.

def via_as_dlpack(tl, src, a, b, ordered):
    view = caibridge.as_dlpack(CAIArray(src, a), sync=ordered)
    return [view, view.__dlpack__(stream=b, max_version=(1, 3))], b


def via_to_dlpack(tl, src, a, b, ordered):
    return [caibridge.to_dlpack(CAIArray(src, a), stream=b,
                                sync=ordered)], b


def via_add_dlpack(tl, src, a, b, ordered):
    producer = PatchedArray(src, a)
    return [producer.__dlpack__(stream=b if ordered else -1)], b


def via_caiview(tl, src, a, b, ordered):
    """A CAIView whose data is ready on A, re-exported to B."""
    capsule = caibridge.to_dlpack(CAIArray(src, None), max_version=(1, 3))
    view = caibridge.from_dlpack(capsule, stream=a)
    assert view.__cuda_array_interface__["stream"] == a
    return [view, view.__dlpack__(stream=b if ordered else -1)], b


def via_from_dlpack(tl, src, a, b, ordered):
    """A DLPack producer (through the Python protocol) for a CAI consumer,
    which launches on the stream the CAI dict names."""
    view = caibridge.as_dlpack(CAIArray(src, a), sync=ordered)
    back = caibridge.from_dlpack(Forward(view), stream=b)
    return [view, back], back.__cuda_array_interface__["stream"]


def via_from_dlpack_of_a_view(tl, src, a, b, ordered):
    view = caibridge.as_dlpack(CAIArray(src, a), sync=ordered)
    back = caibridge.from_dlpack(view, stream=b)
    return [view, back], back.__cuda_array_interface__["stream"]


def via_exchange_export(how):
    """caibridge's C exchange table, read by a C consumer: the tensor is
    ready on the work stream the table reports."""
    def hand_over(tl, src, a, b, ordered):
        view = caibridge.as_dlpack(CAIArray(src, a), sync=ordered)
        rc, tensor = handed_out(view, how)
        assert rc == 0
        tl._keep.append(tensor)
        return [view, tensor], LEGACY
    hand_over.__name__ = f"via_exchange_export_{how}"
    return hand_over


def via_exchange_import(tl, src, a, b, ordered):
    """A foreign type's C exchange table read by from_dlpack: the CAI dict
    names the table's work stream (A), which a CAI consumer orders B
    after."""
    foreign = ForeignTable(stream=a, data=src.ctypes.data, size=src.size,
                           dtype="uint8")
    back = caibridge.from_dlpack(foreign.type())
    assert back.__cuda_array_interface__["stream"] == a
    consumer = caibridge.as_dlpack(back, sync=ordered)
    return [foreign, back, consumer,
            consumer.__dlpack__(stream=b, max_version=(1, 3))], b


DEVICE_PATHS = [via_as_dlpack, via_to_dlpack, via_add_dlpack, via_caiview,
                via_from_dlpack, via_from_dlpack_of_a_view,
                via_exchange_export("managed"),
                via_exchange_export("dltensor"), via_exchange_import]


def release_all(keep):
    for item in keep:
        if isinstance(item, ctypes._Pointer):
            release(item)
    keep.clear()


@pytest.mark.parametrize("hand_over", DEVICE_PATHS,
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("ordered", [True, False],
                         ids=["ordered", "race"])
def test_device_consumer(tl, hand_over, ordered):
    src, out = tl.buffer(), tl.buffer()
    a, b = tl.stream(), tl.stream()
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)                      # the producer's kernel
    keep, consumer = hand_over(tl, src, a, b, ordered)
    tl.copy(consumer, out, src)                     # the consumer's kernel
    tl.open(gate)
    tl.drain()
    if ordered:
        assert (out == NEW).all(), "the consumer read before the producer"
    else:
        assert (out == OLD).all(), "the race was not seen unordered"
    release_all(keep)


# ---- host consumers: NumPy reads pinned and managed memory ----

def host_as_dlpack(src, a, ordered):
    return caibridge.as_dlpack(CAIArray(src, a), sync=ordered)


def host_to_dlpack(src, a, ordered):
    return ToDLPack(CAIArray(src, a), sync=ordered)


def host_add_dlpack(src, a, ordered):
    producer = PatchedArray(src, a)
    return producer if ordered else Forward(producer, stream=-1)


def host_caiview(src, a, ordered):
    capsule = caibridge.to_dlpack(CAIArray(src, None), max_version=(1, 3))
    view = caibridge.from_dlpack(capsule, stream=a)
    return view if ordered else Forward(view, stream=-1)


HOST_PATHS = [host_as_dlpack, host_to_dlpack, host_add_dlpack, host_caiview]


@pytest.mark.parametrize("producer", HOST_PATHS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind", [PINNED, MANAGED], ids=["pinned", "managed"])
@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "race"])
def test_numpy_reads_host_accessible_memory(tl, producer, kind, ordered):
    src = tl.buffer(kind)
    a = tl.stream()
    gate = tl.gate(on_host_wait=True)
    tl.fill(a, src, NEW, gate)
    seen = np.from_dlpack(producer(src, a, ordered)).copy()
    if ordered:
        assert (seen == NEW).all(), "NumPy read before the producer wrote"
    else:
        assert (seen == OLD).all(), "the race was not seen unordered"
        tl.open(gate)


def as_cpu(x, **kwargs):
    """A consumer asking for host memory with dl_device=(kDLCPU, 0): the
    bytes, as a CAIView of kDLCPU data."""
    capsule = x.__dlpack__(max_version=(1, 3), dl_device=(KDLCPU, 0),
                           **kwargs)
    back = caibridge.from_dlpack(capsule)
    assert back.__dlpack_device__() == (KDLCPU, 0)
    return np.asarray(back).copy()


@pytest.mark.parametrize("producer", HOST_PATHS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind", [PINNED, MANAGED], ids=["pinned", "managed"])
def test_cpu_device_is_a_host_wait_on_every_path(tl, producer, kind):
    """dl_device=(kDLCPU, 0) is accepted for pinned and managed memory on
    every path (issue 22, defect 4), and the host waits for the producer."""
    src = tl.buffer(kind)
    a = tl.stream()
    gate = tl.gate(on_host_wait=True)
    tl.fill(a, src, NEW, gate)
    assert (as_cpu(producer(src, a, True)) == NEW).all()


def test_cpu_device_race_is_seen_through_to_dlpack(tl):
    src = tl.buffer(PINNED)
    a = tl.stream()
    gate = tl.gate(on_host_wait=True)
    tl.fill(a, src, NEW, gate)
    seen = as_cpu(ToDLPack(CAIArray(src, a), sync=False))
    assert (seen == OLD).all()
    tl.open(gate)


@pytest.mark.parametrize("producer", HOST_PATHS, ids=lambda f: f.__name__)
def test_cpu_device_takes_device_zero_only(tl, producer):
    """(kDLCPU, 5) is not where pinned memory is: refused, as a device of
    another id would be."""
    src = tl.buffer(PINNED)
    x = producer(src, tl.stream(), True)
    with pytest.raises(BufferError, match=r"dl_device = \(1, 5\)"):
        x.__dlpack__(max_version=(1, 3), dl_device=(KDLCPU, 5))


@pytest.mark.parametrize("producer", HOST_PATHS, ids=lambda f: f.__name__)
def test_device_memory_is_not_given_to_the_cpu(tl, producer):
    """Only as a copy (test_copy.py): copy=False is refused."""
    src = tl.buffer(DEVICE)
    x = producer(src, tl.stream(), True)
    with pytest.raises(BufferError, match="copy=False"):
        x.__dlpack__(max_version=(1, 3), dl_device=(KDLCPU, 0), copy=False)


@pytest.mark.parametrize("producer", HOST_PATHS, ids=lambda f: f.__name__)
def test_managed_memory_without_concurrent_access(tl, producer):
    """A device without concurrentManagedAccess: the host may not touch
    managed memory while any kernel runs there, the producer's or not."""
    tl.c.set_concurrent_managed_access(0)
    src, other = tl.buffer(MANAGED), tl.buffer()
    a, c = tl.stream(), tl.stream()
    gate = tl.gate(on_host_wait=True)
    tl.fill(a, src, NEW, gate)
    tl.fill(c, other, NEW, tl.gate(on_host_wait=True))  # another's kernel
    seen = np.from_dlpack(producer(src, a, True))
    tl.c.host_read(src.ctypes.data, src.nbytes)
    assert (seen == NEW).all()
    assert tl.violations() == ""


# ---- the reverse edge: released, the producer's later work waits ----

def released_as_capsule(producer, ordered):
    view = caibridge.as_dlpack(producer, sync=ordered)
    capsule = view.__dlpack__(stream=LEGACY, max_version=(1, 3))
    return lambda: release_capsule(capsule)


def released_as_caiview(producer, ordered):
    view = caibridge.as_dlpack(producer, sync=ordered)
    keep = [caibridge.from_dlpack(view, stream=LEGACY)]
    return keep.clear


def released_through_the_table(producer, ordered):
    view = caibridge.as_dlpack(producer, sync=ordered)
    rc, tensor = handed_out(view, "managed")
    assert rc == 0
    return lambda: release(tensor)


EDGES = [(hand_over, producer_stream)
         for hand_over in (released_as_capsule, released_as_caiview,
                           released_through_the_table)
         for producer_stream in ("handle", "legacy")]


@pytest.mark.parametrize("hand_over, producer_stream", EDGES,
                         ids=[f"{h.__name__}-{s}" for h, s in EDGES])
@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "race"])
def test_reverse_edge(tl, hand_over, producer_stream, ordered):
    """The consumer reads src on stream 1 (behind a gate) and releases it:
    the release returns at once, with no host wait, and the producer object
    stays alive until the read is done, then goes at the next poll.
    Without ordering (sync=False) the producer goes while the read is still
    held back: the check can fail."""
    src, out = tl.buffer(value=NEW), tl.buffer()
    a = tl.stream() if producer_stream == "handle" else LEGACY
    producer = CAIArray(src, a)
    alive = weakref.ref(producer)
    release_it = hand_over(producer, ordered)
    del producer
    gate = tl.gate()
    tl.copy(LEGACY, out, src, gate)                 # the consumer's read
    waits = tl.c.host_waits()
    release_it()
    gc.collect()
    assert tl.c.host_waits() == waits, "the release waited on the host"
    if ordered:
        assert alive() is not None, "the producer went before the read"
    else:
        assert alive() is None, "the race was not seen without the edge"
    tl.open(gate)
    tl.drain()
    assert caibridge._core._release_poll() == 0
    gc.collect()
    assert alive() is None, "the producer outlived the read"
    assert (out == NEW).all()


def test_blocking_release_orders_in_place_producer_writes(tl):
    """The opt-in (CAIBRIDGE_RELEASE=block): the host waits at release for
    the consumer's read, so the producer's next write cannot overtake it."""
    src, out = tl.buffer(value=NEW), tl.buffer()
    a = tl.stream()
    producer = CAIArray(src, a)
    release_it = released_as_capsule(producer, True)
    gate = tl.gate(on_host_wait=True)
    tl.copy(LEGACY, out, src, gate)
    caibridge._core._set_release_blocking(True)
    try:
        release_it()
    finally:
        caibridge._core._set_release_blocking(False)
    tl.fill(a, src, 9)                              # the producer's next
    tl.drain()
    assert (out == NEW).all(), "the producer overwrote before the read"


def test_destroyed_producer_stream_is_never_named(tl):
    """`with Stream() as s: v = as_dlpack(x)`: s is gone when the consumer
    releases; the double records any use of a destroyed handle."""
    src = tl.buffer()
    a, b = tl.stream(), tl.stream()
    view = caibridge.as_dlpack(CAIArray(src, a))
    capsule = view.__dlpack__(stream=b, max_version=(1, 3))
    tl.c.destroy_stream(a)
    del capsule, view
    assert tl.violations() == ""


# ---- the pool, threads and contexts ----

def test_the_event_pool_is_as_the_environment_says(tl):
    """This file runs twice: with the event pool on (what users get) and,
    as test_race_no_pool.py, with CAIBRIDGE_EVENT_POOL=0.  A warm second
    hand-over makes no event only when the pool is on."""
    src = tl.buffer()
    a, b = tl.stream(), tl.stream()
    made = []
    for _ in range(2):
        view = caibridge.as_dlpack(CAIArray(src, a))
        capsule = view.__dlpack__(stream=b, max_version=(1, 3))
        del capsule, view
        made.append(tl.c.log().decode().count("cudaEventCreateWithFlags"))
    pooled = os.environ.get("CAIBRIDGE_EVENT_POOL", "") != "0"
    if pooled:
        assert made[1] == made[0], "a warm hand-over made an event"
    else:
        assert made[1] == 2 * made[0] > 0, "an event was kept"


def on_new_thread(fn):
    """fn() run to its end on a thread that never used CUDA; its result."""
    out = {}

    def run():
        out["value"] = fn()
    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out["value"]


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "race"])
def test_stream_2_across_threads(tl, ordered):
    """Stream 2 is each thread's own: a producer's stream 2 on one thread is
    not the consumer's stream 2 on another, so the consumer's must wait."""
    src, out = tl.buffer(), tl.buffer()
    gate = tl.gate()

    def produce():
        tl.fill(PER_THREAD, src, NEW, gate)         # that thread's stream 2
        return caibridge.as_dlpack(CAIArray(src, PER_THREAD), sync=ordered)
    view = on_new_thread(produce)
    capsule = view.__dlpack__(stream=PER_THREAD, max_version=(1, 3))
    tl.copy(PER_THREAD, out, src)                   # this thread's stream 2
    tl.open(gate)
    tl.drain()
    del capsule, view
    if ordered:
        assert (out == NEW).all(), "the consumer read before the producer"
    else:
        assert (out == OLD).all(), "the race was not seen unordered"


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "race"])
def test_stream_1_of_the_datas_device(tl, ordered):
    """Data on device 1, asked for on stream 1 while device 0's context is
    current: stream 1 is device 1's, so the wait must be queued there."""
    src, out = tl.buffer(device=1), tl.buffer(device=1)
    a = tl.stream(1)
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)
    view = caibridge.as_dlpack(CAIArray(src, a), sync=ordered)
    capsule = view.__dlpack__(stream=LEGACY, max_version=(1, 3))
    assert tl.c.current_device() == 0, "the caller's context was not put back"
    tl.c.set_current_device(1)
    tl.copy(LEGACY, out, src)                       # device 1's stream 1
    tl.c.set_current_device(0)
    tl.open(gate)
    tl.drain()
    del capsule, view
    if ordered:
        assert (out == NEW).all(), "the wait went to another device's stream"
    else:
        assert (out == OLD).all(), "the race was not seen unordered"


def released_from_device_0(tl, ordered, enter):
    """A consumer on device 1's stream 1 (in the context enter makes
    current) reads and releases while device 0's context is current: the
    release's event goes on the stream 1 where the read is, so the producer
    stays until the read is done, not until device 0's idle stream 1 is."""
    src, out = tl.buffer(value=NEW, device=1), tl.buffer(device=1)
    producer = CAIArray(src, LEGACY)
    alive = weakref.ref(producer)
    enter()
    release_it = released_as_capsule(producer, ordered)
    del producer
    gate = tl.gate()
    tl.copy(LEGACY, out, src, gate)                 # the consumer's read
    tl.c.set_current_device(0)
    release_it()                                    # released on device 0
    gc.collect()
    if ordered:
        assert alive() is not None, "the producer went before the read"
    else:
        assert alive() is None, "the race was not seen without the edge"
    enter()
    tl.open(gate)
    tl.drain()
    tl.c.set_current_device(0)
    assert caibridge._core._release_poll() == 0
    gc.collect()
    assert alive() is None, "the producer outlived the read"
    assert (out == NEW).all()
    assert tl.violations() == ""


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "race"])
def test_release_on_stream_1_of_the_datas_device(tl, ordered):
    released_from_device_0(tl, ordered, lambda: tl.c.set_current_device(1))


@pytest.mark.parametrize("consumer", [LEGACY, PER_THREAD],
                         ids=["legacy", "per-thread"])
def test_consumer_thread_without_a_context(tl, consumer):
    """A consumer's default stream on a thread with no context current: its
    work starts in a context not made yet, so the host waits instead."""
    src, out = tl.buffer(), tl.buffer()
    a = tl.stream()
    gate = tl.gate(on_host_wait=True)
    tl.fill(a, src, NEW, gate)
    view = caibridge.as_dlpack(CAIArray(src, a))

    def consume():
        capsule = view.__dlpack__(stream=consumer, max_version=(1, 3))
        tl.copy(consumer, out, src)                 # that thread's stream
        return capsule
    capsule = on_new_thread(consume)
    tl.open(gate)
    tl.drain()
    del capsule
    view = None
    assert (out == NEW).all(), "the consumer read before the producer"


def test_kept_events_stay_bounded_across_contexts(tl):
    """Hand-overs on device 0 and device 1 in turn: each context keeps its
    own events, so once warm the live events stay as many (an event kept
    for one context and taken for another fails to record and is lost, a
    leak that grows with every hand-over)."""
    def rounds(count):
        for round in range(count):
            device = round % 2
            src = tl.buffer(device=device)
            a, b = tl.stream(device), tl.stream(device)
            view = caibridge.as_dlpack(CAIArray(src, a))
            capsule = view.__dlpack__(stream=b, max_version=(1, 3))
            del capsule, view
        tl.drain()
        return tl.c.live_events()
    warm = rounds(4)
    assert rounds(8) == warm, "events were lost"
    if os.environ.get("CAIBRIDGE_EVENT_POOL", "") == "0":
        assert warm == 0


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "race"])
def test_release_on_stream_1_of_another_context(tl, ordered):
    """The same on stream 1 of a context that is not device 1's primary
    one: the context the consumer's stream 1 was in at hand-over is the
    one its release records in.  Device 1's primary context is ended
    first, as no earlier test may have left it, so that a release into it
    finds nothing to record on."""
    reset = tl.lib.cuDevicePrimaryCtxReset_v2
    reset.restype = ctypes.c_int
    reset.argtypes = [ctypes.c_int]
    assert reset(1) == 0
    ctx = tl.c.create_context(1)
    released_from_device_0(tl, ordered,
                           lambda: tl.c.set_current_context(ctx))


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "race"])
def test_release_on_stream_1_after_device_switches(tl, ordered):
    """Warm hand-overs on both devices first (each context's device is then
    known by its id), then a consumer on device 1's stream 1 releases while
    device 0 is current: the producer stays until that read is done."""
    src, out = tl.buffer(value=NEW, device=1), tl.buffer(device=1)
    for device in (1, 0, 1, 0):
        tl.c.set_current_device(device)
        warm = tl.buffer(value=NEW, device=device)
        released_as_capsule(CAIArray(warm, LEGACY), ordered)()
    tl.drain()
    tl.c.set_current_device(1)
    producer = CAIArray(src, LEGACY)
    alive = weakref.ref(producer)
    release_it = released_as_capsule(producer, ordered)
    del producer
    gate = tl.gate()
    tl.copy(LEGACY, out, src, gate)                 # the consumer's read
    tl.c.set_current_device(0)
    release_it()                                    # released on device 0
    gc.collect()
    if ordered:
        assert alive() is not None, "the producer went before the read"
    else:
        assert alive() is None, "the race was not seen without the edge"
    tl.open(gate)
    tl.drain()
    assert caibridge._core._release_poll() == 0
    gc.collect()
    assert alive() is None, "the producer outlived the read"
    assert (out == NEW).all()
    assert tl.violations() == ""


@pytest.mark.parametrize("kind", [PINNED, MANAGED], ids=["pinned", "managed"])
@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "race"])
def test_numpy_reads_a_caiview_by_its_array_interface(tl, kind, ordered):
    """np.asarray reads a CAIView of host-accessible memory through
    __array_interface__: the host first waits for the stream the view
    reports (none reported: nothing to wait for, the race control)."""
    src = tl.buffer(kind)
    a = tl.stream()
    gate = tl.gate(on_host_wait=True)
    tl.fill(a, src, NEW, gate)
    capsule = caibridge.to_dlpack(CAIArray(src, None), max_version=(1, 3))
    view = caibridge.from_dlpack(capsule, stream=a if ordered else None)
    seen = np.asarray(view).copy()
    if ordered:
        assert (seen == NEW).all(), "NumPy read before the producer wrote"
    else:
        assert (seen == OLD).all(), "the race was not seen unordered"
        tl.open(gate)


def test_managed_memory_with_concurrent_access_waits_for_its_stream_only(tl):
    """With concurrent managed access the host waits for the producer's
    stream only: another stream's kernel, behind a gate this test opens at
    the end, does not hold the read up (a device-wide wait would hang)."""
    src, other = tl.buffer(MANAGED), tl.buffer()
    a, c = tl.stream(), tl.stream()
    gate = tl.gate(on_host_wait=True)
    tl.fill(a, src, NEW, gate)
    later = tl.gate()
    tl.fill(c, other, NEW, later)                   # another's kernel
    seen = np.from_dlpack(caibridge.as_dlpack(CAIArray(src, a))).copy()
    assert (seen == NEW).all()
    assert tl.violations() == "", "the host waited for the whole device"
    tl.open(later)


def python_host_function_after(tl, stream, src, gate):
    """The producer's kernel on stream, then a host function that needs
    the GIL: a host wait that keeps the GIL never sees the stream done."""
    ran = []
    tl.fill(stream, src, NEW, gate)
    tl.host_func(stream, lambda: ran.append(1))
    return ran


def test_one_shot_order_from_a_thread_without_a_context_lets_go_of_the_gil(
        tl):
    """to_dlpack(..., stream=2) on a thread with no context waits on the
    host (its stream 2 has no context yet); it lets go of the GIL while it
    waits."""
    src = tl.buffer()
    a = tl.stream()
    ran = python_host_function_after(tl, a, src, tl.gate(on_host_wait=True))
    on_new_thread(lambda: caibridge.to_dlpack(CAIArray(src, a), stream=2,
                                              max_version=(1, 3)))
    assert tl.violations() == "", "the host wait held the GIL"
    assert ran == [1]


def test_view_wait_from_a_thread_without_a_context_lets_go_of_the_gil(tl):
    """The same for a view's fence, waited on from such a thread."""
    src = tl.buffer()
    a = tl.stream()
    ran = python_host_function_after(tl, a, src, tl.gate(on_host_wait=True))
    view = caibridge.as_dlpack(CAIArray(src, a))
    capsule = on_new_thread(
        lambda: view.__dlpack__(stream=2, max_version=(1, 3)))
    assert tl.violations() == "", "the host wait held the GIL"
    assert ran == [1]
    del capsule
    view = None


def test_consumer_capture_already_invalidated_is_refused(tl):
    """A consumer stream whose graph capture is already invalidated gets no
    wait: the hand-over is refused with the reason, and the capture is
    left as it was (a wait queued there fails in CUDA)."""
    src = tl.buffer()
    a, b = tl.stream(), tl.stream()
    tl.c.begin_capture(b, 5)
    lib = tl.lib
    ev = ctypes.c_void_p()
    assert lib.cudaEventCreateWithFlags(ctypes.byref(ev), 2) == 0
    assert lib.cudaEventRecord(ev, ctypes.c_void_p(a)) == 0
    # A wait on work outside the capture, not marked external, breaks it.
    lib.cudaStreamWaitEvent(ctypes.c_void_p(b), ev, 0)
    assert tl.c.capture_state(b) == 2
    view = caibridge.as_dlpack(CAIArray(src, a))
    with pytest.raises(BufferError, match="already invalidated"):
        view.__dlpack__(stream=b, max_version=(1, 3))
    assert "cudaStreamWaitEvent(0x%x" % b not in \
        tl.c.log().decode().split("cudaEventRecord")[-1]
    tl.c.end_capture(b)
    lib.cudaEventDestroy(ev)


@pytest.mark.parametrize("blocking", [True, False])
def test_double_legacy_stream_during_a_blocking_capture(tl, blocking):
    """The double as CUDA: while a blocking stream (CuPy's, made with
    tl.stream(blocking=True)) captures, a record on the legacy stream of
    its context fails with cudaErrorStreamCaptureImplicit (906) and
    invalidates the capture; a non-blocking stream's capture (torch's) is
    not touched."""
    b = tl.stream(blocking=blocking)
    lib = tl.lib
    ev = ctypes.c_void_p()
    assert lib.cudaEventCreateWithFlags(ctypes.byref(ev), 2) == 0
    tl.c.begin_capture(b, 6)
    rc = lib.cudaEventRecord(ev, ctypes.c_void_p(1))
    assert (rc, tl.c.capture_state(b)) == ((906, 2) if blocking else (0, 1))
    assert tl.c.end_capture(b) == (901 if blocking else 0)
    lib.cudaEventDestroy(ev)


@pytest.mark.parametrize("hand_over", [released_as_capsule,
                                       released_as_caiview,
                                       released_through_the_table],
                         ids=lambda h: h.__name__)
def test_release_on_legacy_during_a_blocking_capture(tl, hand_over):
    """A consumer reads on stream 1 (behind a gate) and releases while a
    CuPy-like blocking stream of the same context captures a graph (a GC
    release in the middle of a CuPy capture).  CUDA refuses any use of the
    legacy stream then, and a record there would invalidate the capture:
    the capture stays valid, the release raises nothing, and the producer
    is kept until the read has run (issue 41 finding 10)."""
    src, out = tl.buffer(value=NEW), tl.buffer()
    producer = CAIArray(src, tl.stream())
    alive = weakref.ref(producer)
    release_it = hand_over(producer, True)
    del producer
    gate = tl.gate()
    tl.copy(LEGACY, out, src, gate)                 # the consumer's read
    cupy = tl.stream(blocking=True)
    tl.c.begin_capture(cupy, 7)
    release_it()
    gc.collect()
    assert tl.c.capture_state(cupy) == 1, "the release broke the capture"
    assert alive() is not None, "the producer went before the read"
    tl.open(gate)
    tl.drain()
    caibridge._core._release_poll()
    gc.collect()
    assert alive() is None, "the producer outlived the read"
    assert tl.c.end_capture(cupy) == 0
    assert tl.c.pending_error() == 0, "906 was left as the last error"


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "race"])
def test_stream_1_with_another_devices_context_current(tl, ordered):
    """Data on device 0, handed over to stream 1 while a context of device 1
    (not its primary) is current: the wait goes on device 0's stream 1,
    where the consumer of device 0's data reads, though one operation asks
    both contexts their ids (each its own, never the other's)."""
    src, out = tl.buffer(device=0), tl.buffer(device=0)
    a = tl.stream(device=0)
    tl.c.set_current_device(0)
    warm = CAIArray(tl.buffer(value=NEW, device=0), a)
    release_capsule(caibridge.as_dlpack(warm).__dlpack__(
        stream=LEGACY, max_version=(1, 3)))  # device 0's id is known now
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)                      # the producer's write
    view = caibridge.as_dlpack(CAIArray(src, a), sync=ordered)
    tl.c.set_current_context(tl.c.create_context(1))
    capsule = view.__dlpack__(stream=LEGACY, max_version=(1, 3))
    tl.c.set_current_device(0)
    tl.copy(LEGACY, out, src)                       # the consumer's read
    tl.open(gate)
    tl.drain()
    release_capsule(capsule)
    if ordered:
        assert (out == NEW).all(), "read before the producer's write"
    else:
        assert not (out == NEW).all(), "the race was not seen unordered"
    assert tl.violations() == ""
