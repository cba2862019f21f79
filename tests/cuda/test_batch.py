"""Many tensors, one fence (as_dlpack_all, cai_fence_share and
cai_fence_wait_once), on the timeline double: one record per producer
stream, one wait per consumer stream, the order still right, and a stream
handle reused by a new stream waits again."""
import gc

import numpy as np
import pytest

from test_race import LEGACY, NEW, double, tl  # noqa: F401
from timeline_double import CAIArray, caibridge

N = 100


def calls(tl, name):
    return tl.c.log().decode().count(name + "(")


@pytest.fixture
def still():
    caibridge._core._release_waiter(False)
    yield
    caibridge._core._release_waiter(True)


def producers(tl, a, n=N, value=NEW):
    bufs = [tl.buffer(n=16, value=0) for _ in range(n)]
    gate = tl.gate()
    for b in bufs:
        tl.fill(a, b, value, gate)                 # the producer's work
    return bufs, [CAIArray(b, a) for b in bufs], gate


@pytest.mark.parametrize("consumer", ["handle", "legacy"])
def test_a_batch_records_once_and_waits_once(tl, still, consumer):
    """N = 100 producers on one stream A, handed to one consumer stream
    B: one record and one wait in all, and each consumer read, queued on
    B right after its hand-over, sees the producer's finished work."""
    a = tl.stream()
    b = tl.stream() if consumer == "handle" else LEGACY
    bufs, objs, gate = producers(tl, a)
    tl.lib.double_clear_log()
    views = caibridge.as_dlpack_all(objs)
    assert calls(tl, "cudaEventRecord") == 1
    outs = [tl.buffer(n=16) for _ in range(N)]
    capsules = []
    for v, src, out in zip(views, bufs, outs):
        capsules.append(v.__dlpack__(stream=b, max_version=(1, 3)))
        tl.copy(b, out, src)                       # the consumer's read
    assert calls(tl, "cudaStreamWaitEvent") == 1
    assert calls(tl, "cudaEventRecord") == 1
    tl.open(gate)
    tl.drain()
    assert all((out == NEW).all() for out in outs)
    del capsules, views
    gc.collect()


def test_each_consumer_stream_waits_once(tl, still):
    """Two consumer streams: one wait each, whatever the order."""
    a, b, c = tl.stream(), tl.stream(), tl.stream()
    bufs, objs, gate = producers(tl, a, n=10)
    views = caibridge.as_dlpack_all(objs)
    tl.lib.double_clear_log()
    keep = [v.__dlpack__(stream=s) for v in views for s in (b, c, b)]
    assert calls(tl, "cudaStreamWaitEvent") == 2
    tl.open(gate)
    del keep, views
    gc.collect()


def test_a_reused_handle_waits_again(tl, still):
    """Stream B destroyed, and a new stream given the very same handle:
    its id differs (cuStreamGetId), so the batch makes it wait again."""
    a = tl.stream()
    b = 0x7e000
    tl.c.add_stream(b, 0)
    bufs, objs, gate = producers(tl, a, n=4)
    views = caibridge.as_dlpack_all(objs)
    tl.lib.double_clear_log()
    first = views[0].__dlpack__(stream=b)
    assert calls(tl, "cudaStreamWaitEvent") == 1
    tl.c.destroy_stream(b)
    tl.c.add_stream(b, 0)                          # a new stream, same handle
    out = tl.buffer(n=16)
    second = views[1].__dlpack__(stream=b)
    tl.copy(b, out, bufs[1])
    assert calls(tl, "cudaStreamWaitEvent") == 2, tl.c.log().decode()
    tl.open(gate)
    tl.drain()
    assert (out == NEW).all()
    del first, second, views
    gc.collect()


def test_mixed_streams_and_host_data(tl, still):
    """Producers on two streams and on the host: one record per producer
    stream, none for host data; every view works alone and in any
    order."""
    a1, a2, b = tl.stream(), tl.stream(), tl.stream()
    b1, o1, g1 = producers(tl, a1, n=3)
    b2, o2, g2 = producers(tl, a2, n=3)
    host = np.arange(4.0)
    tl.lib.double_clear_log()
    views = caibridge.as_dlpack_all(o1 + [host] + o2)
    assert calls(tl, "cudaEventRecord") == 2
    assert np.from_dlpack(views[3]).tolist() == host.tolist()
    keep = [v.__dlpack__(stream=b) for v in reversed(views[4:] + views[:3])]
    assert calls(tl, "cudaStreamWaitEvent") == 2
    tl.open(g1)
    tl.open(g2)
    del keep, views
    gc.collect()


def test_views_outlive_each_other(tl, still):
    """The shared fence goes with the last view: the others' deaths leave
    it whole, and its event is destroyed or pooled once."""
    a, b = tl.stream(), tl.stream()
    bufs, objs, gate = producers(tl, a, n=5)
    views = caibridge.as_dlpack_all(objs)
    last = views.pop()
    del views
    gc.collect()
    out = tl.buffer(n=16)
    capsule = last.__dlpack__(stream=b)
    tl.copy(b, out, bufs[-1])
    tl.open(gate)
    tl.drain()
    assert (out == NEW).all()
    del capsule, last
    gc.collect()
    assert tl.c.live_events() <= 8


def test_errors_name_the_object():
    with pytest.raises(TypeError, match=r"objs\[1\]"):
        caibridge.as_dlpack_all([np.ones(2), object()])
    with pytest.raises(TypeError, match="iterable"):
        caibridge.as_dlpack_all(3)
    assert caibridge.as_dlpack_all([]) == []
