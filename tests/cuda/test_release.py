"""Releases on the timeline double: the consumer's stream is named only
when it cannot be gone (1, 2 on the same thread), nothing waits on the
host, the producer stays alive until the consumer's work is done, a
capsule no consumer took lets the producer go at once, and the release
settings are read strictly."""
import gc
import os
import pathlib
import subprocess
import sys
import weakref

import pytest

from test_exchange_streams import handed_out, release
from test_race import LEGACY, NEW, double, on_new_thread, tl  # noqa: F401
from test_streams import release_capsule
from timeline_double import CAIArray, caibridge


def view_of(src, a):
    """as_dlpack of a producer of src on stream a, and a weak reference to
    that producer, which only the view keeps alive."""
    producer = CAIArray(src, a)
    return caibridge.as_dlpack(producer), weakref.ref(producer)


def dlpack_then_consume(view, b):
    capsule = view.__dlpack__(stream=b, max_version=(1, 3))
    return lambda: release_capsule(capsule)


def from_dlpack_of_view(view, b):
    keep = [caibridge.from_dlpack(view, stream=b)]
    return keep.clear


def from_dlpack_of_capsule_holder(view, b):
    class Holder:
        def __dlpack_device__(self):
            return view.__dlpack_device__()

        def __dlpack__(self, **kwargs):
            return view.__dlpack__(**kwargs)

    keep = [caibridge.from_dlpack(Holder(), stream=b)]
    return keep.clear


PATHS = [dlpack_then_consume, from_dlpack_of_view,
         from_dlpack_of_capsule_holder]


@pytest.mark.parametrize("hand_over", PATHS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("producer_stream", ["handle", "legacy"])
def test_destroyed_consumer_stream_is_never_named(tl, hand_over,
                                                  producer_stream):
    """`with cupy.cuda.Stream(): a = cupy.from_dlpack(view)`, the stream
    collected before the array: its handle is never named at release."""
    src = tl.buffer()
    a = tl.stream() if producer_stream == "handle" else LEGACY
    b = tl.stream()
    view = caibridge.as_dlpack(CAIArray(src, a))
    release_it = hand_over(view, b)
    del view
    tl.c.destroy_stream(b)
    release_it()
    gc.collect()
    assert tl.violations() == ""


@pytest.mark.parametrize("stream", [LEGACY, 2])
def test_unconsumed_capsule_does_not_wait(tl, stream):
    """A capsule no consumer took: no consumer work, so no event, no wait,
    and the producer goes at once."""
    src = tl.buffer()
    a = tl.stream()
    view, alive = view_of(src, a)
    capsule = view.__dlpack__(stream=stream, max_version=(1, 3))
    gate = tl.gate()
    tl.fill(stream, tl.buffer(), NEW, gate)         # unrelated work
    waits, calls = tl.c.host_waits(), tl.c.calls()
    del capsule
    calls = tl.c.calls() - calls
    tl.open(gate)
    assert tl.c.host_waits() == waits
    assert calls == 0, "CUDA calls at the release"
    del view
    gc.collect()
    assert alive() is None


def test_release_returns_at_once_and_keeps_the_producer(tl):
    """The consumer's kernel is held back: the release returns with no
    blocking call, the producer stays alive, and is collected once the
    kernel has run (at the next poll: here a hand-over)."""
    src, out = tl.buffer(value=NEW), tl.buffer()
    a = tl.stream()
    view, alive = view_of(src, a)
    rc, tensor = handed_out(view, "managed")
    assert rc == 0
    del view
    gate = tl.gate()
    tl.copy(LEGACY, out, src, gate)
    waits = tl.c.host_waits()
    release(tensor)
    gc.collect()
    assert tl.c.host_waits() == waits
    assert alive() is not None
    assert caibridge._core._release_poll() == 1
    tl.open(gate)
    tl.drain()
    other = caibridge.as_dlpack(CAIArray(tl.buffer(), a))  # polls
    del other
    gc.collect()
    assert alive() is None
    assert (out == NEW).all()


def test_producer_goes_without_another_call(tl):
    """Once the consumer's stream has passed the release, a host function
    there schedules the poll (a pending call of the interpreter): the
    producer is collected with no further call into caibridge."""
    src, out = tl.buffer(value=NEW), tl.buffer()
    a = tl.stream()
    view, alive = view_of(src, a)
    keep = [caibridge.from_dlpack(view, stream=LEGACY)]
    del view
    gate = tl.gate()
    tl.copy(LEGACY, out, src, gate)
    keep.clear()                                    # the release
    gc.collect()
    assert alive() is not None
    tl.open(gate)
    tl.drain()
    steps = 0
    while alive() is not None and steps < 100000:   # bytecodes, not time
        steps += 1
        if steps % 1000 == 0:
            gc.collect()
    assert alive() is None, "the producer waited for another call"
    assert (out == NEW).all()


ENV_CODE = ("import warnings\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always')\n"
            "    import caibridge\n"
            "for w in seen:\n"
            "    print(w.category.__name__, w.message)\n")


def env_run(**values):
    env = dict(os.environ, **values)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(pathlib.Path(__file__).resolve().parent)]
        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    out = subprocess.run([sys.executable, "-c", ENV_CODE], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


@pytest.mark.parametrize("value", ["0", "1", "8", "4294967297", ""])
def test_event_pool_setting(value):
    assert env_run(CAIBRIDGE_EVENT_POOL=value) == []


@pytest.mark.parametrize("value", ["abc", "0x10", "-4294967295", "1e3",
                                   " 8"])
def test_event_pool_setting_not_understood(value):
    lines = env_run(CAIBRIDGE_EVENT_POOL=value)
    assert len(lines) == 1 and lines[0].startswith(
        "RuntimeWarning CAIBRIDGE_EVENT_POOL=%r is not understood" % value)


@pytest.mark.parametrize("value, warned", [("block", False), ("poll", False),
                                           ("blocking", True)])
def test_release_setting(value, warned):
    lines = env_run(CAIBRIDGE_RELEASE=value)
    assert bool(lines) == warned, lines


NO_DRIVER = r'''
import numpy as np, caibridge
host = np.arange(4, dtype=np.float32)
class Labelled:
    def __init__(self, stream):
        self.__cuda_array_interface__ = {
            "data": (host.ctypes.data, False), "shape": (4,),
            "typestr": "<f4", "version": 3, "stream": stream}
try:
    info = caibridge.cuda_runtime_info()
except caibridge.CUDAError as e:
    print("no runtime:", e)
    raise SystemExit
print("driver_missing", info["driver_missing"])
for stream in (None, 1, 2):
    for kind in (3, 13):                    # kDLCUDAHost, kDLCUDAManaged
        view = caibridge.as_dlpack(Labelled(stream), device=(kind, 0))
        print(stream, kind, np.from_dlpack(view).tolist())
'''


def test_no_driver_no_wait():
    """With no CUDA driver no work was ever queued: a host reader of memory
    labelled pinned or managed reads it, whatever stream the producer
    names, and no call fails."""
    env = dict(os.environ)
    env.pop("CAIBRIDGE_CUDART", None)
    out = subprocess.run([sys.executable, "-c", NO_DRIVER], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    if lines[0].startswith("no runtime:"):
        pytest.skip("no CUDA runtime is installed for this Python: "
                    + lines[0])
    if _driver_answers():
        pytest.skip("a CUDA driver answers here; this case needs a machine "
                    "without one")
    assert lines[0] == "driver_missing []"
    assert lines[1:] == [f"{s} {k} [0.0, 1.0, 2.0, 3.0]"
                         for s in ("None", "1", "2") for k in (3, 13)]


def _driver_answers():
    return os.path.exists("/dev/nvidiactl")


def test_partial_driver_is_named():
    """A driver lacking an entry point is not bound (contexts could not be
    saved and put back), and cuda_runtime_info() says which it lacks."""
    from test_stream_order import double_path
    partial = double_path("libcudart-partial.so")
    env = dict(os.environ, CAIBRIDGE_CUDART=str(partial))
    code = ("import caibridge\n"
            "print(caibridge.cuda_runtime_info()['driver_missing'])\n")
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['cuStreamGetCtx']"
    env["CAIBRIDGE_CUDART"] = str(double_path())
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_stream_2_released_on_another_thread_keeps_nothing(tl):
    """A consumer's stream 2 taken on this thread and released on another:
    there it names that thread's own stream 2, another stream, so no edge
    is made and the producer goes without waiting for anything, even while
    that other stream 2 is busy (naming it would keep the producer for
    unrelated work)."""
    src = tl.buffer()
    a = tl.stream()
    view, alive = view_of(src, a)
    held = [view.__dlpack__(stream=2, max_version=(1, 3))]
    del view
    gate = tl.gate()

    def elsewhere():
        tl.fill(2, tl.buffer(), NEW, gate)          # that thread's stream 2
        release_capsule(held[0])

    on_new_thread(elsewhere)
    held.clear()
    caibridge._core._release_poll()
    gc.collect()
    kept = alive() is not None
    tl.open(gate)
    tl.drain()
    assert not kept, "the producer was kept for another thread's work"
    assert tl.violations() == ""
