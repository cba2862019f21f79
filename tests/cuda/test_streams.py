"""Stream values and stream ordering of the Python face, on the recording
CUDA runtime: what a stream argument means, when the producer's stream is
read, CPU consumers of host-accessible memory, and the reverse edge when a
consumer releases the data."""
import ctypes

import pytest

from test_stream_order import (DEVICE, DEVICE_PTR, KDLCPU, KDLCUDA,  # noqa
                              KDLCUDAHOST, KDLCUDAMANAGED, MANAGED, PINNED,
                              PRODUCER, CONSUMER, CudaStream, DeviceArray,
                              PyCapsule_GetName, PyCapsule_GetPointer,
                              PyCapsule_SetName, caibridge, cuda, double)

LEGACY = 1


NAMES = {"cudaStreamLegacy": "0x1", "cudaStreamPerThread": "0x2"}


def ordering(log):
    """The ordering calls of a log: ("record", event, stream),
    ("wait", stream, event), ("host", event or stream)."""
    out = []
    for line in log:
        call, _, rest = line.partition("(")
        args = [NAMES.get(a.strip(), a.strip())
                for a in rest.split(")")[0].split(",")]
        if "-> error" in line:
            continue
        if call == "cudaEventRecord":
            out.append(("record", args[0], args[1]))
        elif call == "cudaStreamWaitEvent":
            out.append(("wait", args[0], args[1]))
        elif call in ("cudaEventSynchronize", "cudaStreamSynchronize"):
            out.append(("host", args[0]))
    return out


def release_capsule(capsule):
    """Takes the tensor out of capsule as a consumer does (the capsule is
    renamed used) and releases it through its deleter."""
    name = PyCapsule_GetName(capsule)
    pointer = PyCapsule_GetPointer(capsule, name)
    used = b"used_" + name
    release_capsule.names.append(used)           # must outlive the capsule
    PyCapsule_SetName(capsule, used)
    deleter_at = pointer + (DELETER_VERSIONED if name == b"dltensor_versioned"
                            else DELETER_LEGACY)
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
        ctypes.c_void_p.from_address(deleter_at).value)
    deleter(pointer)


release_capsule.names = []
# Where the deleter is (64-bit): after version and manager_ctx in a
# versioned tensor; after the 48-byte DLTensor and manager_ctx in a legacy
# one.
DELETER_VERSIONED = 8 + 8
DELETER_LEGACY = 48 + 8


def view_of(cuda, stream, kind=DEVICE, device=0, **kwargs):
    cuda.pointer(DEVICE_PTR, kind, device)
    return caibridge.as_dlpack(DeviceArray(stream=stream), **kwargs)


class Producer:
    """A DLPack producer of CUDA data recording the stream it is asked for."""

    def __init__(self, cuda, kind=DEVICE):
        cuda.pointer(DEVICE_PTR, kind, 0)
        self.inner = caibridge.as_dlpack(DeviceArray())
        self.device = self.inner.__dlpack_device__()
        self.streams = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        self.streams.append(stream)
        return self.inner.__dlpack__(stream=stream, max_version=max_version)


# ---- __cuda_stream__ handle 0 is the legacy stream; a bare 0 is not ----

def test_cuda_stream_object_with_handle_zero_is_legacy(cuda):
    """torch.cuda.default_stream().__cuda_stream__() is (0, 0): the NULL
    stream, which the runtime reads as the legacy default stream."""
    view = view_of(cuda, PRODUCER)
    cuda.reset()
    view.__dlpack__(stream=CudaStream(0))
    waits = [c for c in ordering(cuda.log()) if c[0] == "wait"]
    assert waits and waits[0][1] == f"{LEGACY:#x}"


def test_from_dlpack_with_handle_zero_asks_for_legacy(cuda):
    producer = Producer(cuda)
    view = caibridge.from_dlpack(producer, stream=CudaStream(0))
    assert producer.streams == [LEGACY]
    assert view.__cuda_array_interface__["stream"] == LEGACY


@pytest.mark.parametrize("call", ["dlpack", "from_dlpack", "to_dlpack"])
def test_bare_zero_is_still_refused(cuda, call):
    view = view_of(cuda, PRODUCER)
    with pytest.raises(ValueError, match="stream = 0 is disallowed"):
        if call == "dlpack":
            view.__dlpack__(stream=0)
        elif call == "from_dlpack":
            caibridge.from_dlpack(Producer(cuda), stream=0)
        else:
            caibridge.to_dlpack(DeviceArray(stream=PRODUCER), stream=0)


@pytest.mark.parametrize("call", ["dlpack", "from_dlpack", "to_dlpack",
                                  "patched"])
@pytest.mark.parametrize("stream", [-2, -7])
def test_negative_streams_other_than_minus_one_are_refused(cuda, call,
                                                           stream):
    """Only -1 (no ordering) is a negative stream value (issue 20, item
    12: stream=-2 accepted for CUDA data).  The producer names no stream,
    so nothing but the argument check stands in the way."""
    view = view_of(cuda, None)
    with pytest.raises(ValueError, match=f"stream = {stream} is not a "
                       "stream"):
        if call == "dlpack":
            view.__dlpack__(stream=stream)
        elif call == "from_dlpack":
            caibridge.from_dlpack(Producer(cuda), stream=stream)
        elif call == "to_dlpack":
            caibridge.to_dlpack(DeviceArray(), stream=stream)
        else:
            Patched().__dlpack__(stream=stream)


@caibridge.add_dlpack
class Patched(DeviceArray):
    """DeviceArray made a DLPack producer by add_dlpack."""


# ---- from_dlpack(stream=-1) never claims the data is ready ----

def test_from_dlpack_minus_one_through_the_protocol_is_refused(cuda):
    """-1 asks the producer not to order its work, and __dlpack__ does not
    say which stream that work is on: a CAI 'stream: None' would tell the
    CAI consumer that no synchronization is needed.  Refused, before the
    producer is asked."""
    producer = Producer(cuda)
    with pytest.raises(ValueError, match=r"stream = -1"):
        caibridge.from_dlpack(producer, stream=-1)
    assert producer.streams == []


def test_from_dlpack_minus_one_on_a_cuda_capsule_is_refused(cuda):
    view = view_of(cuda, None)
    capsule = view.__dlpack__(stream=-1, max_version=(1, 3))
    with pytest.raises(ValueError, match=r"stream = -1"):
        caibridge.from_dlpack(capsule, stream=-1)
    # The capsule is still the caller's: it can be taken properly.
    back = caibridge.from_dlpack(capsule, stream=CONSUMER)
    assert back.__cuda_array_interface__["stream"] == CONSUMER


def test_from_dlpack_minus_one_is_fine_for_host_data(cuda):
    import numpy as np
    array = np.arange(4, dtype=np.float32)
    view = caibridge.from_dlpack(array, stream=-1)
    assert view.__array_interface__["data"][0] == \
        array.__array_interface__["data"][0]


def test_from_dlpack_minus_one_of_a_view_reports_the_producers_stream(cuda):
    view = view_of(cuda, PRODUCER)
    back = caibridge.from_dlpack(view, stream=-1)
    assert back.__cuda_array_interface__["stream"] == PRODUCER
    assert not [c for c in ordering(cuda.log()) if c[0] == "wait"]


# ---- the fence: taken when the view is made ----

def run_on_thread(fn):
    import threading
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_per_thread_stream_is_resolved_when_the_view_is_made(cuda):
    """Stream 2 is the per-thread default stream of the thread that made
    the view: the event goes on that one, at once, and a __dlpack__ on
    another thread (whose stream 2 is another stream) waits for it rather
    than taking the two 2s for one stream."""
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    view = caibridge.as_dlpack(DeviceArray(stream=2))
    made = ordering(cuda.log())
    assert [c[0] for c in made] == ["record"] and made[0][2] == "0x2"
    cuda.reset()

    def consumer():
        cuda._c.set_current_device(0)  # a thread that uses CUDA
        return view.__dlpack__(stream=2)

    capsule = run_on_thread(consumer)
    calls = ordering(cuda.log())
    assert calls == [("wait", "0x2", made[0][1])], calls
    del capsule


def test_destroyed_producer_stream_is_not_named_again(cuda):
    """CAI lets a producer's stream end with the producer's own object; the
    view's event outlives it, and hand-overs never name the stream."""
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    cuda.add_stream(PRODUCER, 0)
    view = caibridge.as_dlpack(DeviceArray(stream=PRODUCER))
    cuda._c.destroy_stream(PRODUCER)
    cuda.reset()
    capsule = view.__dlpack__(stream=CONSUMER, max_version=(1, 3))
    assert not any(f"{PRODUCER:#x}" in line for line in cuda.log())
    assert [c[0] for c in ordering(cuda.log())] == ["wait"]
    del capsule


def test_no_fence_without_ordering(cuda):
    for stream, kwargs in ((None, {}), (PRODUCER, {"sync": False})):
        events = cuda.live_events()
        view = view_of(cuda, stream, **kwargs)
        assert ordering(cuda.log()) == []
        assert cuda.live_events() == events
        del view


# ---- CPU consumers of host-accessible memory: the host waits ----

@pytest.mark.parametrize("kind", [PINNED, MANAGED])
def test_no_stream_means_a_host_wait(cuda, kind):
    """NumPy asks pinned or managed memory for a capsule with no stream and
    reads it on the host at once: the host waits for the fence."""
    view = view_of(cuda, PRODUCER, kind=kind)
    cuda.reset()
    capsule = view.__dlpack__(max_version=(1, 3))
    calls = ordering(cuda.log())
    assert calls == [("host", "ev1")], calls
    assert cuda._c.host_waits() == 1
    del capsule


@pytest.mark.parametrize("kind", [PINNED, MANAGED])
def test_cpu_device_is_accepted_for_host_accessible_memory(cuda, kind):
    view = view_of(cuda, PRODUCER, kind=kind)
    cuda.reset()
    capsule = view.__dlpack__(max_version=(1, 3), dl_device=(KDLCPU, 0))
    assert ordering(cuda.log()) == [("host", "ev1")]
    back = caibridge.from_dlpack(capsule)
    assert back.__dlpack_device__() == (KDLCPU, 0)
    assert back.__array_interface__["data"][0] == DEVICE_PTR
    # kDLCPU takes stream=None only (DLPack), -1 included.
    cuda.reset()
    for stream in (-1, CONSUMER):
        with pytest.raises(BufferError, match="only None is valid"):
            view.__dlpack__(dl_device=(KDLCPU, 0), stream=stream)
    assert ordering(cuda.log()) == []


def test_host_accessible_memory_with_a_stream_waits_on_the_device(cuda):
    view = view_of(cuda, PRODUCER, kind=PINNED)
    cuda.reset()
    capsule = view.__dlpack__(stream=CONSUMER)
    assert [c[0] for c in ordering(cuda.log())] == ["wait"]
    assert cuda._c.host_waits() == 0
    del capsule


def test_device_memory_is_still_not_host_memory(cuda):
    """Not without a copy (test_copy.py has the copy)."""
    view = view_of(cuda, PRODUCER)
    with pytest.raises(BufferError, match="copy=False"):
        view.__dlpack__(dl_device=(KDLCPU, 0), copy=False)


# ---- the reverse edge: released, the producer waits for the consumer ----

def test_release_records_on_the_consumers_default_stream(cuda):
    """At release an event goes on the consumer's stream 1 and is polled
    with the driver's query (the runtime's last error is left alone);
    nothing waits, neither a stream nor the host, and nothing else goes on
    the stream (no host function)."""
    view = view_of(cuda, PRODUCER)
    capsule = view.__dlpack__(stream=LEGACY, max_version=(1, 3))
    cuda.reset()
    release_capsule(capsule)
    calls = ordering(cuda.log())
    assert calls == [("record", calls[0][1], "0x1")], calls
    assert any(line.startswith("cuEventQuery(") for line in cuda.log())
    assert not any(line.startswith(("cudaEventQuery(", "cudaLaunchHostFunc("))
                   for line in cuda.log())
    assert not any(f"{PRODUCER:#x}" in line for line in cuda.log())


def test_release_never_names_a_consumers_stream_handle(cuda):
    """The consumer's stream handle may be gone by release: it is never
    named, and nothing waits; the consumer orders its own work."""
    view = view_of(cuda, PRODUCER)
    capsule = view.__dlpack__(stream=CONSUMER, max_version=(1, 3))
    cuda.reset()
    release_capsule(capsule)
    assert ordering(cuda.log()) == []
    assert not any(f"{CONSUMER:#x}" in line or f"{PRODUCER:#x}" in line
                   for line in cuda.log())


def test_release_of_a_cai_view_takes_the_edge(cuda):
    """from_dlpack(view, stream=1): the CAIView's death is the release."""
    view = view_of(cuda, PRODUCER)
    back = caibridge.from_dlpack(view, stream=LEGACY)
    cuda.reset()
    del back
    assert [c[0] for c in ordering(cuda.log())] == ["record"]


@pytest.mark.parametrize("stream, kwargs", [
    (-1, {}),                      # the consumer orders itself
    (None, {"kind": PINNED}),      # a host consumer has finished reading
    (CONSUMER, {"sync": False}),   # ordering off for this view
])
def test_release_without_a_reverse_edge(cuda, stream, kwargs):
    view = view_of(cuda, PRODUCER, **kwargs)
    capsule = view.__dlpack__(stream=stream)
    cuda.reset()
    del capsule
    assert ordering(cuda.log()) == []


def test_per_thread_consumer_released_elsewhere_is_left(cuda):
    """A consumer's stream 2 is its own thread's: released on another
    thread, it has no name there and is left unordered (documented);
    released on its own thread, the event goes on it."""
    view = view_of(cuda, LEGACY)
    capsule = view.__dlpack__(stream=2)
    cuda.reset()

    def elsewhere():
        cuda._c.set_current_device(0)   # a thread that uses CUDA too
        release_capsule(capsule)
    run_on_thread(elsewhere)
    assert ordering(cuda.log()) == []
    capsule = view.__dlpack__(stream=2)
    cuda.reset()
    release_capsule(capsule)
    calls = ordering(cuda.log())
    assert [c[0] for c in calls] == ["record"]
    assert calls[0][2] == "0x2"


def test_capsule_calls_are_safe_from_many_threads(cuda):
    """release_capsule from 8 threads at once (issue 44): its capsule calls
    are functions of the tests' own with prototypes set once, so no thread
    changes another's argtypes mid-call (which fails with the GIL off)."""
    import threading

    for fn, name in ((PyCapsule_GetName, "PyCapsule_GetName"),
                     (PyCapsule_GetPointer, "PyCapsule_GetPointer"),
                     (PyCapsule_SetName, "PyCapsule_SetName")):
        assert fn is not getattr(ctypes.pythonapi, name)
    view = view_of(cuda, PRODUCER)
    errors, start = [], threading.Barrier(8)

    def work():
        try:
            start.wait()
            for _ in range(200):
                release_capsule(view.__dlpack__(stream=-1))
        except BaseException as e:   # reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
