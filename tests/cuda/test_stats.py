"""caibridge.stats() on the timeline double, held against the double's call
log: every record, wait and host wait counted is a call the double saw, and
each hand-over's counts are exact, so a record, wait or release removed (or
its count) shows here.  The releases' counts say where the producer went:
at once, or kept until the consumer's work ran and let go at a call or by
the waiter thread."""
import ast
import collections
import gc
import pathlib
import weakref

import pytest

from test_race import LEGACY, NEW, double, tl  # noqa: F401
from test_streams import release_capsule
from timeline_double import CAIArray, caibridge

SYNCS = ("cudaEventSynchronize", "cudaStreamSynchronize",
         "cudaDeviceSynchronize")


@pytest.fixture
def counted(tl):
    """tl with no release pending, the counters at 0 and the waiter held
    (releases are let go at calls); yields the log's length then."""
    caibridge._core._release_poll(True)
    caibridge._core._release_waiter(False)
    caibridge._core._stats_reset()
    yield len(tl.c.log().decode().splitlines())
    caibridge._core._release_waiter(True)


def calls_since(tl, start):
    return collections.Counter(
        line.split("(")[0]
        for line in tl.c.log().decode().splitlines()[start:])


def settle(tl):
    """Runs the streams, then the poll at a call lets go what is done."""
    tl.drain()
    caibridge._core._release_poll()


def nonzero(stats):
    return {k: v for k, v in stats.items() if v}


def against_log(tl, start):
    """The counters that the log shows, checked; returns the counters."""
    s = caibridge.stats()
    log = calls_since(tl, start)
    assert s["records"] == log["cudaEventRecord"], (s, log)
    assert s["waits"] == log["cudaStreamWaitEvent"], (s, log)
    assert s["host_waits"] == sum(log[n] for n in SYNCS), (s, log)
    assert s["device_copies"] == log["cudaMallocAsync"], (s, log)
    return s


def hand_over_of(producer, consumer):
    """A view of producer, taken on consumer and released."""
    view = caibridge.as_dlpack(producer)
    release_capsule(view.__dlpack__(stream=consumer, max_version=(1, 3)))


def hand_over(tl, src, consumer=None):
    """A view of src on a new stream A, taken on consumer (None: A itself)
    and released."""
    a = tl.stream()
    hand_over_of(CAIArray(src, a), consumer or a)


def test_counters_start_at_zero_after_reset(tl):
    caibridge._core._release_poll(True)
    caibridge._core._stats_reset()
    s = caibridge.stats()
    assert set(s) == {
        "views", "records", "waits", "waits_skipped", "host_waits",
        "releases_now", "releases_deferred", "releases_pending",
        "let_go_waiter", "let_go_call", "device_copies", "device_copy_bytes",
        "host_copies", "host_copy_bytes", "cuda_errors"}
    assert nonzero(s) == {}


def test_hand_over_onto_stream_1(tl, counted):
    """Record on A, wait on 1; the release records on 1 and keeps the
    producer until that event completes (the consumer's kernel held back
    until then), let go at a call."""
    gate = tl.gate()
    tl.fill(LEGACY, tl.buffer(), NEW, gate)     # stream 1 held at the gate
    hand_over(tl, tl.buffer(value=NEW), LEGACY)
    s = caibridge.stats()
    assert (s["releases_deferred"], s["releases_pending"]) == (1, 1), s
    tl.open(gate)
    settle(tl)
    assert nonzero(against_log(tl, counted)) == {
        "views": 1, "records": 2, "waits": 1, "releases_deferred": 1,
        "let_go_call": 1}


def test_hand_over_onto_a_handle(tl, counted):
    """A handle takes no release edge (it may be gone at release): one
    record, one wait, no release counted."""
    hand_over(tl, tl.buffer(value=NEW), tl.stream())
    settle(tl)
    assert nonzero(against_log(tl, counted)) == {
        "views": 1, "records": 1, "waits": 1}


def test_same_stream_is_a_skipped_wait(tl, counted):
    hand_over(tl, tl.buffer(value=NEW))
    settle(tl)
    assert nonzero(against_log(tl, counted)) == {
        "views": 1, "records": 1, "waits_skipped": 1}


def test_batch_of_100_waits_once(tl, counted):
    src, a = tl.buffer(value=NEW), tl.stream()
    views = caibridge.as_dlpack_all([CAIArray(src, a) for _ in range(100)])
    for capsule in [v.__dlpack__(stream=LEGACY, max_version=(1, 3))
                    for v in views]:
        release_capsule(capsule)
    settle(tl)
    assert nonzero(against_log(tl, counted)) == {
        "views": 100, "records": 101, "waits": 1, "waits_skipped": 99,
        "releases_deferred": 100, "let_go_call": 100}


def test_no_ordering_counts_no_call(tl, counted):
    a = tl.stream()
    view = caibridge.as_dlpack(CAIArray(tl.buffer(), a), sync=False)
    release_capsule(view.__dlpack__(stream=LEGACY, max_version=(1, 3)))
    settle(tl)
    assert nonzero(against_log(tl, counted)) == {"views": 1}


def test_device_copy(tl, counted):
    """Record on A, wait on 1, the copy queued on 1, and the source kept
    until the copy has read it: an event recorded after the copy, a
    deferred release let go at a call once it has run."""
    a = tl.stream()
    view = caibridge.as_dlpack(CAIArray(tl.buffer(value=NEW), a))
    release_capsule(view.__dlpack__(stream=LEGACY, copy=True,
                                    max_version=(1, 3)))
    settle(tl)
    assert nonzero(against_log(tl, counted)) == {
        "views": 1, "records": 2, "waits": 1, "device_copies": 1,
        "device_copy_bytes": 64, "releases_deferred": 1, "let_go_call": 1}


def test_host_copy_is_a_host_wait(tl, counted):
    """Two host waits: for the view's fence, then for the copy."""
    a = tl.stream()
    view = caibridge.as_dlpack(CAIArray(tl.buffer(value=NEW), a))
    release_capsule(view.__dlpack__(copy=True, dl_device=(1, 0),
                                    max_version=(1, 3)))
    settle(tl)
    assert nonzero(against_log(tl, counted)) == {
        "views": 1, "records": 1, "host_waits": 2, "host_copies": 1,
        "host_copy_bytes": 64}


def test_blocking_release_waits_on_the_host(tl, counted):
    caibridge._core._set_release_blocking(True)
    try:
        hand_over(tl, tl.buffer(value=NEW), LEGACY)
    finally:
        caibridge._core._set_release_blocking(False)
    settle(tl)
    assert nonzero(against_log(tl, counted)) == {
        "views": 1, "records": 2, "waits": 1, "host_waits": 1,
        "releases_now": 1}


def test_failed_wait_is_a_cuda_error(tl, counted):
    a = tl.stream()
    view = caibridge.as_dlpack(CAIArray(tl.buffer(), a))
    tl.c.fail(b"cudaStreamWaitEvent", 1)
    with pytest.raises(caibridge.CUDAError, match="cudaStreamWaitEvent"):
        view.__dlpack__(stream=LEGACY, max_version=(1, 3))
    settle(tl)
    assert nonzero(against_log(tl, counted)) == {
        "records": 1, "waits": 1, "cuda_errors": 1}


def test_deferred_release_let_go_by_the_waiter(tl):
    """The consumer's kernel held back: the release is pending; once it has
    run, the waiter thread lets the producer go, with no call of ours."""
    caibridge._core._release_poll(True)
    caibridge._core._stats_reset()
    src, out = tl.buffer(value=NEW), tl.buffer()
    producer = CAIArray(src, tl.stream())
    alive = weakref.ref(producer)
    keep = [caibridge.from_dlpack(caibridge.as_dlpack(producer),
                                  stream=LEGACY)]
    del producer
    gate = tl.gate()
    tl.copy(LEGACY, out, src, gate)
    keep.clear()                                    # the release
    gc.collect()
    s = caibridge.stats()
    assert (s["releases_deferred"], s["releases_pending"]) == (1, 1)
    assert alive() is not None
    tl.open(gate)
    tl.drain()
    steps = 0
    while alive() is not None and steps < 100000:   # bytecodes, not time
        steps += 1
        if steps % 1000 == 0:
            gc.collect()
    assert alive() is None, "the producer waited for another call"
    s = caibridge.stats()
    assert (s["releases_pending"], s["let_go_waiter"], s["let_go_call"]) == (
        0, 1, 0), s


def documented_counts():
    """The two dicts docs/ordering.rst shows for a hand-over onto 1."""
    top = pathlib.Path(__file__).resolve().parents[2]
    page = top / "docs" / "ordering.rst"
    lines = [line.strip() for line in page.read_text().splitlines()]
    return [ast.literal_eval(line) for line in lines
            if line.startswith("{'views'")]


def test_docs_page_counts_are_the_doubles(tl):
    """docs/ordering.rst's counts, before and after the consumer's kernel
    ran, are what this hand-over gives."""
    shown = documented_counts()
    assert len(shown) == 2, shown
    caibridge._core._release_poll(True)
    caibridge._core._stats_reset()
    gate = tl.gate()
    tl.fill(LEGACY, tl.buffer(), NEW, gate)     # the consumer's kernel
    src = tl.buffer(value=NEW)
    producer = CAIArray(src, tl.stream())
    alive = weakref.ref(producer)
    hand_over_of(producer, LEGACY)
    del producer
    assert nonzero(caibridge.stats()) == shown[0]
    tl.open(gate)
    tl.drain()
    steps = 0
    while alive() is not None and steps < 100000:   # bytecodes, not time
        steps += 1
        if steps % 1000 == 0:
            gc.collect()
    assert nonzero(caibridge.stats()) == shown[1]


def test_python_m_caibridge_shows_the_counters():
    """python -m caibridge --json carries the counters and says whether the
    NVTX marks are built in; its text lists the counters."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "caibridge", "--json"],
                         capture_output=True, text=True, timeout=120)
    data = json.loads(out.stdout)
    assert set(data["stats"]) == set(caibridge.stats())
    assert data["build"]["nvtx"] == caibridge._core._build_info()["nvtx"]
    text = subprocess.run([sys.executable, "-m", "caibridge"],
                          capture_output=True, text=True, timeout=120).stdout
    assert "counters (caibridge.stats()" in text
    assert "  releases_pending:" in text and "NVTX marks:" in text
