"""caibridge's Python layer on the recording CUDA runtime double: what the
module hands the core (the pointer or device to look up, the consumer's
stream from None, ints and __cuda_stream__, sync) and the exception each
failure becomes.  The core's own rules (memory kinds, the event sequence,
switching devices, cleanup after a failure) are tests/cuda/*-t.c's.

The double (tests/cuda/cudart-double.c) is selected with CAIBRIDGE_CUDART
before caibridge makes its first CUDA call; ctypes opens the same shared
object, so the test sees the calls caibridge made and chooses the answers.
Run in a process of its own (as the Automake harness does): the runtime is
bound once per process.
"""

import ctypes
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

KDLCPU, KDLCUDA, KDLCUDAHOST, KDLCUDAMANAGED = 1, 2, 3, 13
UNREGISTERED, PINNED, DEVICE, MANAGED = 0, 1, 2, 3

DEVICE_PTR = 0x7F0000001000
PRODUCER, CONSUMER = 0x5000, 0x6000


# The capsule calls, as functions of our own with their prototypes set
# once: ctypes.pythonapi's objects are shared, and setting their argtypes
# while another thread calls them fails with the GIL off (3.13t).
def pythonapi_function(name, restype, *argtypes):
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


PyCapsule_New = pythonapi_function("PyCapsule_New", ctypes.py_object,
                                   ctypes.c_void_p, ctypes.c_char_p,
                                   ctypes.c_void_p)
PyCapsule_GetName = pythonapi_function("PyCapsule_GetName", ctypes.c_char_p,
                                       ctypes.py_object)
PyCapsule_GetPointer = pythonapi_function(
    "PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object,
    ctypes.c_char_p)
PyCapsule_SetName = pythonapi_function("PyCapsule_SetName", ctypes.c_int,
                                       ctypes.py_object, ctypes.c_char_p)


def double_path(name="libcudart-double.so"):
    """The double: the copy in the private folder make check made
    (CAIBRIDGE_TEST_DOUBLES, tests/cuda/private-doubles.sh), else the one
    next to the staged package: <build>/python/stage/caibridge and
    <build>/tests/cuda/.libs."""
    private = os.environ.get("CAIBRIDGE_TEST_DOUBLES")
    if private:
        path = pathlib.Path(private) / name
        assert path.exists(), f"the CUDA runtime double is not there: {path}"
        return path
    spec = importlib.util.find_spec("caibridge")
    assert spec is not None and spec.origin, "caibridge is not importable"
    build = pathlib.Path(spec.origin).resolve().parents[3]
    path = build / "tests" / "cuda" / ".libs" / name
    assert path.exists(), f"the CUDA runtime double is not built: {path}"
    return path


# Must be in the environment before caibridge's first CUDA call.
os.environ["CAIBRIDGE_CUDART"] = str(double_path())

import caibridge  # noqa: E402


class Controls(ctypes.Structure):
    _fields_ = [
        ("reset", ctypes.CFUNCTYPE(None)),
        ("set_version", ctypes.CFUNCTYPE(None, ctypes.c_int)),
        ("set_current_device", ctypes.CFUNCTYPE(None, ctypes.c_int)),
        ("current_device", ctypes.CFUNCTYPE(ctypes.c_int)),
        ("set_pointer", ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int,
                                         ctypes.c_int)),
        ("fail", ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int)),
        ("log", ctypes.CFUNCTYPE(ctypes.c_char_p)),
        ("live_events", ctypes.CFUNCTYPE(ctypes.c_int)),
        ("add_allocation", ctypes.CFUNCTYPE(
            None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
            ctypes.c_int, ctypes.c_void_p)),
        ("add_stream", ctypes.CFUNCTYPE(None, ctypes.c_long, ctypes.c_int)),
        ("add_stream_on_context", ctypes.CFUNCTYPE(None, ctypes.c_long,
                                                   ctypes.c_void_p)),
        ("destroy_stream", ctypes.CFUNCTYPE(None, ctypes.c_long)),
        ("create_context", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int)),
        ("current_context", ctypes.CFUNCTYPE(ctypes.c_void_p)),
        ("set_current_context", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
        ("primary_contexts", ctypes.CFUNCTYPE(ctypes.c_int)),
        ("begin_capture", ctypes.CFUNCTYPE(None, ctypes.c_long, ctypes.c_int)),
        ("end_capture", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_long)),
        ("capture_state", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_long)),
        ("set_driver_version", ctypes.CFUNCTYPE(None, ctypes.c_int)),
        ("set_pageable_access", ctypes.CFUNCTYPE(None, ctypes.c_int)),
        ("pending_error", ctypes.CFUNCTYPE(ctypes.c_int)),
        ("set_pending_error", ctypes.CFUNCTYPE(None, ctypes.c_int)),
        ("host_waits", ctypes.CFUNCTYPE(ctypes.c_int)),
    ]


class Double:
    def __init__(self, path):
        self._lib = ctypes.CDLL(str(path))
        self._lib.cudart_double_controls.restype = ctypes.POINTER(Controls)
        self._c = self._lib.cudart_double_controls().contents

    def reset(self):
        self._c.reset()

    def pointer(self, ptr, kind, device):
        self._c.set_pointer(ptr, kind, device)

    def current_device(self, device):
        self._c.set_current_device(device)

    def fail(self, call, error):
        self._c.fail(call.encode(), error)

    def add_stream(self, handle, device):
        self._c.add_stream(handle, device)

    def log(self):
        """The calls since the last reset; the driver's one-time cuInit is
        left out (it comes with whichever test binds the driver first)."""
        return [line for line in self._c.log().decode().splitlines()
                if line != "cuInit(0)"]

    def live_events(self):
        return self._c.live_events()


class DeviceArray:
    """A CAI v3 producer of float32 data at a fake device address."""

    def __init__(self, ptr=DEVICE_PTR, shape=(4,), stream=None):
        self.__cuda_array_interface__ = {
            "data": (ptr, False),
            "shape": shape,
            "typestr": "<f4",
            "strides": None,
            "version": 3,
            "stream": stream,
        }


class CudaStream:
    """cuda.core's stream protocol."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.fixture(scope="module")
def double():
    d = Double(double_path())
    d.reset()
    d.pointer(DEVICE_PTR, DEVICE, 0)
    caibridge.as_dlpack(DeviceArray())
    # The first CUDA call binds the runtime, which asks for its version.
    assert d.log() == ["cudaRuntimeGetVersion() = 13000",
                       "cuCtxGetCurrent() = P0",
                       f"cudaPointerGetAttributes({DEVICE_PTR:#x})"], (
        "caibridge is not using the double: was a CUDA runtime already "
        "bound in this process?")
    return d


@pytest.fixture
def cuda(double):
    double.reset()
    return double


def name(stream):
    """A stream as the double logs it: the headers' names for the default
    stream handles."""
    return {1: "cudaStreamLegacy", 2: "cudaStreamPerThread"}.get(
        stream, f"{stream:#x}")


def fence_recorded(p):
    """as_dlpack's calls after the pointer lookup: the view's fence on
    stream handle p (device 0's primary context current)."""
    return [
        "cuCtxGetCurrent() = P0",
        f"cuStreamGetCtx({p:#x}) = P0",
        f"cudaStreamIsCapturing({p:#x}) = 0",
        "cudaEventCreateWithFlags(cudaEventDisableTiming) = ev1 on P0",
        f"cudaEventRecord(ev1, {p:#x})",
    ]


def view_made(p):
    """as_dlpack's calls for data on device 0 with producer stream handle p:
    the pointer lookup and the fence in one operation, so one look at the
    caller's context."""
    return (["cuCtxGetCurrent() = P0",
             f"cudaPointerGetAttributes({DEVICE_PTR:#x})"] +
            fence_recorded(p)[1:] + stream_id_noted(p))


def stream_id_noted(p):
    """A view's fence on a handle notes that stream's id, which proves a
    later consumer naming the same handle the same stream (the double
    gives a handle it was not told of an id of its own)."""
    return [f"cuStreamGetId({p:#x}) = {(1 << 40) + p}"]


def waits_on_ev1(s):
    """Stream s made to wait on event ev1 (the default streams' device
    looked up first)."""
    return (["cuCtxGetDevice() = 0"] if s in (1, 2) else []) + [
        f"cudaStreamIsCapturing({name(s)}) = 0",
        f"cudaStreamWaitEvent({name(s)}, ev1, cudaEventWaitDefault)",
    ]


def fence_waited(s):
    """__dlpack__'s calls: stream s waits on the view's fence (ev1)."""
    return [            "cuCtxGetCurrent() = P0"] + waits_on_ev1(s)


def event_ordering(p, s):
    """One hand-over ordered at once (no view keeps a fence): device 0's
    primary context current, p a stream handle."""
    return fence_recorded(p) + waits_on_ev1(s) + ["cudaEventDestroy(ev1)"]


def ordered(log):
    """(producer stream, consumer stream) of the ordering in a call log: the
    streams the module handed the core (the sequence is order-t.c's)."""
    record = [line for line in log if line.startswith("cudaEventRecord(")]
    wait = [line for line in log if line.startswith("cudaStreamWaitEvent(")]
    assert len(record) == len(wait) == 1, log
    return (handle(record[0].split(", ")[1].rstrip(")")),
            handle(wait[0][len("cudaStreamWaitEvent("):].split(",")[0]))


def handle(logged):
    """A stream as the double logs it, back to its handle (see name())."""
    named = {"cudaStreamLegacy": 1, "cudaStreamPerThread": 2}
    return named[logged] if logged in named else int(logged, 16)


# ---- where the data is ----

def test_device_memory_is_on_its_own_device(cuda):
    cuda.pointer(DEVICE_PTR, DEVICE, 1)
    view = caibridge.as_dlpack(DeviceArray())
    device = view.__dlpack_device__()
    log = [line for line in cuda.log() if not line.startswith("cuCtxGetId")]
    del view
    assert device == (KDLCUDA, 1)
    # cuCtxGetId is asked only with the event pool on.
    assert log == [                          "cuCtxGetCurrent() = P0",
                          f"cudaPointerGetAttributes({DEVICE_PTR:#x})"]


def test_unregistered_host_memory_is_refused(cuda):
    with pytest.raises(BufferError) as info:
        caibridge.as_dlpack(DeviceArray())
    assert not isinstance(info.value, caibridge.CUDAError), \
        "a refusal of the memory, not a CUDA failure"


def test_refused_memory_with_a_stream_records_nothing(cuda):
    """The lookup and the fence are one operation: memory refused by the
    lookup gets no fence, and no event is made."""
    with pytest.raises(BufferError):
        caibridge.as_dlpack(DeviceArray(stream=PRODUCER))
    assert cuda.log() == ["cuCtxGetCurrent() = P0",
                          f"cudaPointerGetAttributes({DEVICE_PTR:#x})",
                          "cuCtxGetDevice() = 0",
                          # 88: cudaDevAttrPageableMemoryAccess
                          "cudaDeviceGetAttribute(88, 0) = 0"]
    assert cuda.live_events() == 0


@pytest.mark.parametrize("kind,dl", [(PINNED, KDLCUDAHOST),
                                     (MANAGED, KDLCUDAMANAGED)])
def test_host_accessible_memory_gets_its_fence_in_the_lookup(cuda, kind, dl):
    cuda.pointer(DEVICE_PTR, kind, 0)
    view = caibridge.as_dlpack(DeviceArray(stream=PRODUCER))
    assert view.__dlpack_device__() == (dl, 0)
    assert cuda.log() == view_made(PRODUCER)


def test_lookup_and_fence_with_no_context_current(cuda):
    """A thread with no context current: the driver finds the memory's
    context for the lookup and the stream's for the fence, within the one
    operation, and the thread has no context current afterwards (none was
    made)."""
    cuda.pointer(DEVICE_PTR, DEVICE, 1)
    cuda.add_stream(PRODUCER, 1)
    cuda._c.set_current_context(None)
    made = cuda._c.primary_contexts()
    view = caibridge.as_dlpack(DeviceArray(stream=PRODUCER))
    device = view.__dlpack_device__()
    log = [line for line in cuda.log() if not line.startswith("cuCtxGetId")]
    del view
    assert device == (KDLCUDA, 1)
    # cuCtxGetId is asked only with the event pool on.
    assert log == [
        "cuCtxGetCurrent() = NULL",
        f"cuPointerGetAttributes(4, {DEVICE_PTR:#x}) = P1 2 1 0",
        "cuCtxSetCurrent(P1)",
        f"cudaPointerGetAttributes({DEVICE_PTR:#x})",
        "cuCtxSetCurrent(NULL)",
        f"cuStreamGetCtx({PRODUCER:#x}) = P1",
        "cuCtxSetCurrent(P1)",
        f"cudaStreamIsCapturing({PRODUCER:#x}) = 0",
        "cudaEventCreateWithFlags(cudaEventDisableTiming) = ev1 on P1",
        f"cudaEventRecord(ev1, {PRODUCER:#x})",
        f"cuStreamGetId({PRODUCER:#x}) = 1",
        "cuCtxSetCurrent(NULL)",
    ]
    assert cuda._c.current_context() is None
    assert cuda._c.primary_contexts() == made


def test_sync_off_view_with_its_device_makes_no_call(cuda):
    view = caibridge.as_dlpack(DeviceArray(stream=PRODUCER),
                               device=(KDLCUDA, 0), sync=False)
    view.__dlpack__(stream=CONSUMER)
    assert cuda.log() == []


def test_sync_off_view_is_located_only(cuda):
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    view = caibridge.as_dlpack(DeviceArray(stream=PRODUCER), sync=False)
    assert view.__dlpack_device__() == (KDLCUDA, 0)
    assert cuda.log() == ["cuCtxGetCurrent() = P0",
                          f"cudaPointerGetAttributes({DEVICE_PTR:#x})"]


def test_zero_size_array_takes_the_current_device(cuda):
    cuda.current_device(2)
    view = caibridge.as_dlpack(DeviceArray(ptr=0, shape=(0,)))
    assert view.__dlpack_device__() == (KDLCUDA, 2)
    assert cuda.log() == ["cuCtxGetCurrent() = P2", "cuCtxGetDevice() = 2"]


def test_explicit_device_skips_the_lookup(cuda):
    view = caibridge.as_dlpack(DeviceArray(), device=(KDLCUDA, 3))
    assert view.__dlpack_device__() == (KDLCUDA, 3)
    assert cuda.log() == []


def test_no_driver_is_a_cuda_error(cuda):
    cuda.fail("*", 35)
    with pytest.raises(caibridge.CUDAError,
                       match=r"cuCtxGetCurrent failed.*CUDA error 35.*"
                             r"no usable CUDA driver"):
        caibridge.as_dlpack(DeviceArray())


# ---- stream ordering in __dlpack__ ----

def located(cuda, stream, device=0, **kwargs):
    """A view of data on device; the log is emptied after it is made."""
    cuda.pointer(DEVICE_PTR, DEVICE, device)
    view = caibridge.as_dlpack(DeviceArray(stream=stream), **kwargs)
    cuda.reset()
    return view


@pytest.mark.parametrize("consumer, seen", [
    (CONSUMER, CONSUMER),
    (None, 1),  # None is the legacy default stream, passed as handle 1
    (1, 1),
    (2, 2),
    (CudaStream(CONSUMER), CONSUMER),
])
def test_consumer_waits_on_the_views_fence(cuda, consumer, seen):
    """The event is recorded when the view is made, waited on by each
    __dlpack__, and destroyed with the view."""
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    view = caibridge.as_dlpack(DeviceArray(stream=PRODUCER))
    assert cuda.log() == view_made(PRODUCER)
    cuda.reset()
    capsule = view.__dlpack__(stream=consumer)
    assert type(capsule).__name__ == "PyCapsule"
    assert cuda.log() == fence_waited(seen)
    assert cuda.live_events() == 1, "the fence lives as long as the view"
    assert not any("Synchronize" in line for line in cuda.log())
    del capsule, view
    assert cuda.log()[-1] == "cudaEventDestroy(ev1)"
    assert cuda.live_events() == 0


@pytest.mark.parametrize("consumer, seen", [
    (None, 1),
    (CONSUMER, CONSUMER),
    (CudaStream(CONSUMER), CONSUMER),
])
def test_from_dlpack_of_a_view_orders_on_the_consumer_stream(cuda, consumer,
                                                             seen):
    view = located(cuda, PRODUCER)
    kwargs = {} if consumer is None else {"stream": consumer}
    back = caibridge.from_dlpack(view, **kwargs)
    # The view's fence was recorded on PRODUCER when it was made.
    assert cuda.log() == fence_waited(seen)
    assert back.__cuda_array_interface__["stream"] == seen


def test_producer_on_another_device(cuda):
    """The fence is made in the producer stream's context (device 1's), and
    the caller's context is current again afterwards."""
    cuda.pointer(DEVICE_PTR, DEVICE, 1)
    cuda.add_stream(PRODUCER, 1)
    view = caibridge.as_dlpack(DeviceArray(stream=PRODUCER))
    assert cuda.log() == [
        "cuCtxGetCurrent() = P0",
        f"cudaPointerGetAttributes({DEVICE_PTR:#x})",
        f"cuStreamGetCtx({PRODUCER:#x}) = P1",
        "cuCtxSetCurrent(P1)",
        f"cudaStreamIsCapturing({PRODUCER:#x}) = 0",
        "cudaEventCreateWithFlags(cudaEventDisableTiming) = ev1 on P1",
        f"cudaEventRecord(ev1, {PRODUCER:#x})",
        f"cuStreamGetId({PRODUCER:#x}) = 2",
        "cuCtxSetCurrent(P0)",
    ]
    caller = cuda._c.current_context()
    cuda.reset()
    cuda.add_stream(PRODUCER, 1)
    capsule = view.__dlpack__(stream=CONSUMER)
    assert [line for line in cuda.log() if "Wait" in line] == [
        f"cudaStreamWaitEvent({CONSUMER:#x}, ev1, cudaEventWaitDefault)"]
    assert cuda._c.current_context() == caller
    del capsule


@pytest.mark.parametrize("producer, consumer, kwargs", [
    (None, CONSUMER, {}),          # the producer named no stream
    (PRODUCER, -1, {}),            # the consumer orders itself
    (PRODUCER, CONSUMER, {"sync": False}),  # the user opted out
])
def test_no_ordering_call(cuda, producer, consumer, kwargs):
    view = located(cuda, producer, **kwargs)
    view.__dlpack__(stream=consumer)
    assert cuda.log() == []


def test_stream_zero_is_refused(cuda):
    view = located(cuda, PRODUCER)
    with pytest.raises(ValueError, match="stream = 0 is disallowed"):
        view.__dlpack__(stream=0)
    assert cuda.log() == []


def test_failed_record_still_destroys_the_event(cuda):
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    cuda.fail("cudaEventRecord", 400)
    with pytest.raises(caibridge.CUDAError,
                       match=r"cudaEventRecord failed.*CUDA error 400"):
        caibridge.as_dlpack(DeviceArray(stream=PRODUCER))
    assert "cudaEventDestroy(ev1)" in cuda.log()
    assert cuda.live_events() == 0


def test_device_data_is_not_exported_to_the_cpu(cuda):
    view = located(cuda, PRODUCER)
    with pytest.raises(BufferError):
        view.__dlpack__(stream=CONSUMER, dl_device=(KDLCPU, 0))
    assert not any("cudaStreamSynchronize" in line for line in cuda.log())


def test_sync_off_by_environment():
    """CAIBRIDGE_SYNC=0 at import turns ordering off for the whole process."""
    script = f"""
import ctypes, caibridge
from test_stream_order import Double, DeviceArray, double_path
d = Double(double_path())
d.pointer({DEVICE_PTR}, 2, 0)
view = caibridge.as_dlpack(DeviceArray(stream={PRODUCER}))
d.reset()
view.__dlpack__(stream={CONSUMER})
print(d.log())
"""
    env = dict(os.environ, CAIBRIDGE_SYNC="0")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(pathlib.Path(__file__).resolve().parent)]
        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    out = subprocess.run([sys.executable, "-c", script], env=env,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- DLPack producer -> CAI consumer ----

class DLPackProducer:
    """A DLPack producer of CUDA data that records the stream it is given."""

    def __init__(self, cuda):
        cuda.pointer(DEVICE_PTR, DEVICE, 0)
        self.inner = caibridge.as_dlpack(DeviceArray())
        self.streams = []

    def __dlpack_device__(self):
        return (KDLCUDA, 0)

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        self.streams.append(stream)
        return self.inner.__dlpack__(stream=stream, max_version=max_version)


@pytest.mark.parametrize("stream, passed", [
    (CONSUMER, CONSUMER),
    (None, 1),
    (CudaStream(CONSUMER), CONSUMER),
])
def test_cai_consumer_gets_the_stream_it_asked_for(cuda, stream, passed):
    producer = DLPackProducer(cuda)
    view = caibridge.from_dlpack(producer, stream=stream)
    cai = view.__cuda_array_interface__
    assert producer.streams == [passed]
    assert cai["stream"] == passed
    assert cai["data"][0] == DEVICE_PTR
