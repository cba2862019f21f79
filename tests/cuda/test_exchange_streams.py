"""The DLPack C exchange API's stream contract, on the recording CUDA runtime.

Producer side (the table caibridge publishes on DLPackView): a tensor handed
out by managed_tensor_from_py_object_no_sync or dltensor_from_py_object_no_sync
is safe to use on the stream current_work_stream reports, the legacy default
stream (handle 1, never NULL, which a consumer built with per-thread default
streams would read as its own).  The legacy stream is made to wait, on the
device, for an event recorded on the producer's stream; the host never
blocks.  sync=False views are handed out unordered (the user's choice).

Consumer side (caibridge.from_dlpack through a foreign type's table): the
CAI dict reports the stream the producer's table says the data is ready on;
its default stream (NULL) is the legacy stream, 1, not the per-thread one.
"""
import ctypes
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

from test_stream_order import (DEVICE, DEVICE_PTR, KDLCPU, KDLCUDA,  # noqa
                              KDLCUDAHOST, MANAGED, PINNED, PRODUCER,
                              DeviceArray, PyCapsule_New, caibridge, cuda,
                              double)
from conftest import (DLDevice, DLManagedTensorVersioned, DLPackVersion,  # noqa
                      DLTensor, DLTENSOR_FROM_PY, FROM_PY, TO_PY, WORK_STREAM,
                      ExchangeAPI, Header, VERSIONED_DELETER, dtype_of,
                      exchange_table)

P = ctypes.POINTER
LEGACY = 1


def ours():
    return exchange_table(caibridge.DLPackView)


NAMES = {"cudaStreamLegacy": "0x1", "cudaStreamPerThread": "0x2"}


def ordering(log):
    """The ordering calls of a log, without handles' decorations:
    ("record", event, stream), ("wait", stream, event), ("host", what)."""
    out = []
    for line in log:
        call, _, rest = line.partition("(")
        args = [NAMES.get(a.strip(), a.strip())
                for a in rest.split(")")[0].split(",")]
        failed = "-> error" in line
        if call == "cudaEventRecord":
            out.append(("record", args[0], args[1]) + (("failed",) * failed))
        elif call == "cudaStreamWaitEvent":
            out.append(("wait", args[0], args[1]) + (("failed",) * failed))
        elif call in ("cudaEventSynchronize", "cudaStreamSynchronize"):
            out.append(("host", args[0]))
    return out


def handed_out(view, how):
    """The table's tensor for view, the way a consumer takes it; returns
    (status, tensor or None)."""
    api = ours()
    if how == "managed":
        out = P(DLManagedTensorVersioned)()
        rc = FROM_PY(api.from_py)(view, ctypes.byref(out))
        return rc, (out if out else None)
    t = DLTensor()
    return DLTENSOR_FROM_PY(api.dltensor_from_py)(view, ctypes.byref(t)), t


def release(tensor):
    if isinstance(tensor, DLTensor) or tensor is None:
        return
    tensor.contents.deleter(tensor)


def work_stream(device_type, device_id):
    stream = ctypes.c_void_p(12345)
    assert WORK_STREAM(ours().work_stream)(device_type, device_id,
                                           ctypes.byref(stream)) == 0
    return stream.value


def view_of(cuda, stream, kind=DEVICE, device=0, **kwargs):
    cuda.pointer(DEVICE_PTR, kind, device)
    return caibridge.as_dlpack(DeviceArray(stream=stream), **kwargs)


# ---- caibridge's table: the producer side ----

@pytest.mark.parametrize("device_type, reported", [
    (KDLCPU, None),        # host data: no stream at all
    (KDLCUDA, LEGACY),     # the legacy default stream, named, not NULL
    (KDLCUDAHOST, LEGACY),
])
def test_current_work_stream(cuda, device_type, reported):
    assert work_stream(device_type, 0) == reported
    assert work_stream(device_type, 3) == reported
    assert cuda.log() == [], "a constant: no CUDA call"


@pytest.mark.parametrize("how", ["managed", "dltensor"])
def test_different_streams_are_ordered_on_the_device(cuda, how):
    view = view_of(cuda, PRODUCER)
    rc, tensor = handed_out(view, how)
    assert rc == 0
    calls = ordering(cuda.log())
    records = [c for c in calls if c[0] == "record"]
    waits = [c for c in calls if c[0] == "wait"]
    assert records == [("record", records[0][1], f"{PRODUCER:#x}")], calls
    assert waits == [("wait", f"{LEGACY:#x}", records[0][1])], \
        "the reported stream waits for the producer's event"
    assert calls.index(records[0]) < calls.index(waits[0])
    assert not [c for c in calls if c[0] == "host"], "the host never blocks"
    release(tensor)
    del view
    assert cuda.live_events() == 0, "no event outlives the view"


@pytest.mark.parametrize("producer", [2, PRODUCER])
def test_release_records_on_the_reported_stream(cuda, producer):
    """The reverse edge: when the consumer deletes the table's tensor, an
    event goes on the legacy stream (the one reported), polled; nothing
    waits, and the producer's stream is never named (a handle may be
    gone)."""
    view = view_of(cuda, producer)
    rc, tensor = handed_out(view, "managed")
    assert rc == 0
    cuda.reset()
    release(tensor)
    calls = ordering(cuda.log())
    assert calls == [("record", calls[0][1], f"{LEGACY:#x}")], calls
    assert not any(f"{PRODUCER:#x}" in line for line in cuda.log())


@pytest.mark.parametrize("how", ["managed", "dltensor"])
def test_each_hand_over_waits_again(cuda, how):
    """A second consumer may have launched nothing yet: every hand-over
    queues its own wait."""
    view = view_of(cuda, PRODUCER)
    for _ in range(2):
        rc, tensor = handed_out(view, how)
        assert rc == 0
        release(tensor)
    waits = [c for c in ordering(cuda.log())
             if c[0] == "wait" and c[1] == f"{LEGACY:#x}"]
    assert len(waits) == 2


@pytest.mark.parametrize("stream, kwargs", [
    (None, {}),            # no producer stream: nothing to order
    (PRODUCER, {"sync": False}),  # the user opted out
])
@pytest.mark.parametrize("how", ["managed", "dltensor"])
def test_nothing_to_order(cuda, stream, kwargs, how):
    view = view_of(cuda, stream, **kwargs)
    rc, tensor = handed_out(view, how)
    assert rc == 0
    assert ordering(cuda.log()) == []
    release(tensor)


def test_producer_on_another_device(cuda):
    """Data on device 1 while device 0 is current: the event is made and the
    wait queued where the data is (the consumer launches there, on stream
    1, which names that device's legacy stream), and device 0 is current
    again afterwards."""
    cuda.add_stream(PRODUCER, 1)
    view = view_of(cuda, PRODUCER, device=1)
    assert view.__dlpack_device__() == (KDLCUDA, 1)
    rc, tensor = handed_out(view, "managed")
    assert rc == 0
    log = cuda.log()
    creates = [line for line in log
               if line.startswith("cudaEventCreateWithFlags")]
    assert creates and all(line.endswith("on P1") for line in creates), log
    assert [c[1] for c in ordering(log) if c[0] == "wait"] == [f"{LEGACY:#x}"]
    waited = log.index(next(line for line in log
                            if line.startswith("cudaStreamWaitEvent")))
    assert "cuCtxSetCurrent(P1)" in log[:waited], \
        "the legacy stream waited on is device 1's"
    assert cuda._c.current_device() == 0, "the caller's device is restored"
    assert work_stream(KDLCUDA, 1) == LEGACY
    release(tensor)


@pytest.mark.parametrize("call", ["cudaEventCreateWithFlags",
                                  "cudaEventRecord", "cudaStreamWaitEvent"])
@pytest.mark.parametrize("how", ["managed", "dltensor"])
def test_cuda_errors_on_each_step(cuda, call, how):
    """A failed step is a caibridge.CUDAError naming the call, raised by
    as_dlpack or by the table (status -1), never a tensor handed out
    unordered; no event is left behind."""
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    producer = DeviceArray(stream=PRODUCER)
    before = sys.getrefcount(producer)
    events = cuda.live_events()
    cuda.fail(call, 999)
    with pytest.raises(caibridge.CUDAError, match=rf"{call} failed"):
        view = caibridge.as_dlpack(producer)
        handed_out(view, how)
    view = None
    assert sys.getrefcount(producer) == before, "nothing holds the producer"
    assert cuda.live_events() == events


def test_sync_off_keeps_the_table_unordered_but_reports_legacy(cuda):
    view = view_of(cuda, PRODUCER, sync=False)
    rc, tensor = handed_out(view, "managed")
    assert rc == 0 and ordering(cuda.log()) == []
    assert work_stream(KDLCUDA, 0) == LEGACY
    release(tensor)


def test_tensor_to_py_reports_the_work_stream(cuda):
    """managed_tensor_to_py_object_no_sync: a C framework hands caibridge a
    CUDA tensor ready on caibridge's work stream (the legacy one), so the
    CAI dict says stream 1, not None."""
    shape = (ctypes.c_int64 * 1)(4)
    strides = (ctypes.c_int64 * 1)(1)
    deleted = []
    deleter = VERSIONED_DELETER(lambda p: deleted.append(1))
    tensor = DLManagedTensorVersioned(
        version=DLPackVersion(1, 3), manager_ctx=None, deleter=deleter,
        flags=0, dl_tensor=DLTensor(
            data=DEVICE_PTR, device=DLDevice(KDLCUDA, 0), ndim=1,
            dtype=dtype_of("float32"), shape=shape, strides=strides,
            byte_offset=0))
    result = ctypes.py_object()
    assert TO_PY(ours().to_py)(ctypes.pointer(tensor),
                               ctypes.byref(result)) == 0
    view = result.value
    ctypes.pythonapi.Py_DecRef.argtypes = [ctypes.py_object]
    ctypes.pythonapi.Py_DecRef(view)
    del result
    assert view.__cuda_array_interface__["stream"] == LEGACY
    del view
    assert deleted == [1]


# ---- a foreign table: caibridge as the consumer ----

class ForeignTable:
    """A producer type's exchange API, driven by the test: its tensors are
    `size` elements of CUDA data at `data` on `device`, and
    current_work_stream reports `stream` (None: the NULL default stream) or
    fails."""

    def __init__(self, device=(KDLCUDA, 0), stream=None, stream_fails=False,
                 from_fails=False, data=DEVICE_PTR, size=4, dtype="float32"):
        self.device, self.stream, self.data = device, stream, data
        self.dtype = dtype
        self.stream_fails, self.from_fails = stream_fails, from_fails
        self.asked = []
        self.deleted = 0
        self._shape = (ctypes.c_int64 * 1)(size)
        self._strides = (ctypes.c_int64 * 1)(1)
        self._deleter = VERSIONED_DELETER(self._delete)
        self._tensors = []
        self._from = FROM_PY(self._from_py)
        self._stream = WORK_STREAM(self._work_stream)
        self.api = ExchangeAPI(header=Header(1, 3, None),
                               from_py=ctypes.cast(self._from,
                                                   ctypes.c_void_p),
                               work_stream=ctypes.cast(self._stream,
                                                       ctypes.c_void_p))
        capsule = PyCapsule_New(ctypes.addressof(self.api),
                                b"dlpack_exchange_api", None)
        self.type = type("ForeignTensor", (), {
            "__dlpack_c_exchange_api__": capsule,
            "__dlpack_device__": lambda s: self.device,
            "__dlpack__": self._dlpack,
        })

    def _dlpack(self, **kwargs):
        # A table that refuses leaves the answer to __dlpack__.
        if self.from_fails:
            raise BufferError("__dlpack__ refuses it too")
        pytest.fail("the table was not used")

    def _delete(self, _pointer):
        self.deleted += 1

    def _from_py(self, obj, out):
        if self.from_fails:
            return -1
        t = DLManagedTensorVersioned(
            version=DLPackVersion(1, 3), manager_ctx=None,
            deleter=self._deleter, flags=0, dl_tensor=DLTensor(
                data=self.data, device=DLDevice(*self.device), ndim=1,
                dtype=dtype_of(self.dtype), shape=self._shape,
                strides=self._strides, byte_offset=0))
        self._tensors.append(t)
        out[0] = ctypes.pointer(t)
        return 0

    def _work_stream(self, device_type, device_id, out):
        self.asked.append((device_type, device_id))
        if self.stream_fails:
            return -1
        out[0] = self.stream
        return 0


@pytest.mark.parametrize("stream_arg", [None, -1])
@pytest.mark.parametrize("work, reported", [
    (None, LEGACY),        # the NULL default stream is the legacy one
    (PRODUCER, PRODUCER),
])
def test_consumer_reports_the_producers_work_stream(cuda, stream_arg, work,
                                                    reported):
    foreign = ForeignTable(stream=work)
    x = foreign.type()
    before = caibridge._core._foreign_table_imports()
    view = caibridge.from_dlpack(x, stream=stream_arg)
    assert caibridge._core._foreign_table_imports() == before + 1
    cai = view.__cuda_array_interface__
    assert cai["stream"] == reported, \
        "the CAI consumer is told where the data is ready, never None"
    assert foreign.asked == [(KDLCUDA, 0)]
    assert ordering(cuda.log()) == [], "the CAI consumer orders itself"
    del view
    assert foreign.deleted == 1


def test_consumer_asks_the_work_stream_of_the_datas_device(cuda):
    foreign = ForeignTable(device=(KDLCUDA, 2), stream=PRODUCER)
    view = caibridge.from_dlpack(foreign.type())
    assert foreign.asked == [(KDLCUDA, 2)]
    assert view.__cuda_array_interface__["stream"] == PRODUCER


def test_consumer_failures(cuda):
    foreign = ForeignTable(stream_fails=True)
    with pytest.raises(BufferError, match="current_work_stream failed"):
        caibridge.from_dlpack(foreign.type())
    assert foreign.deleted == 1, "the tensor taken is deleted"
    foreign = ForeignTable(from_fails=True)
    with pytest.raises(BufferError, match="__dlpack__ refuses it too"):
        caibridge.from_dlpack(foreign.type())
    assert foreign.deleted == 0 and foreign.asked == []
