"""The promise, path by path, on the timeline double: a consumer that names
stream 1 or 2 (or none, for device memory: the legacy stream) keeps the
producer alive until its work queued before the release has run, whether
the producer named a stream or not, on every path that hands data over.
Written from the promise: the consumer's read is held back behind a gate,
the tensor released, and the producer must still be there."""
import gc
import weakref

import pytest

from test_exchange_streams import handed_out, release
from test_race import LEGACY, NEW, PER_THREAD, double, tl  # noqa: F401
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
