"""The CUDA runtime double's timeline, for the Python tests that check data
(tests/cuda/timeline.c has the semantics): streams that run in time on their
own threads, "kernels" that fill or copy host-backed "device" memory when
their stream reaches them, gates the test opens, and violations the double
records (a stale handle, a host wait that never finished, ...).

Time is the test's: a kernel behind a gate runs when the test opens the gate
(or, for gate_open_on_host_wait, when a host thread blocks in a CUDA wait for
that kernel's stream or one ordered after it), never after a sleep, so the
answers do not depend on the machine's load.  As in CUDA, stream 2 is a
queue per thread and stream 1 one per context.
"""
import ctypes

import numpy as np

from test_stream_order import (Controls, DEVICE, MANAGED, PINNED,  # noqa
                               caibridge, double_path)

_F = ctypes.CFUNCTYPE
_long, _int, _vp, _size = (ctypes.c_long, ctypes.c_int, ctypes.c_void_p,
                           ctypes.c_size_t)

# A host function as cudaLaunchHostFunc takes it.  The double's stream
# worker calls it from a thread of its own, which ctypes attaches to the
# interpreter by taking the GIL: a host wait that holds the GIL deadlocks.
HOST_FN = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


class TimelineControls(Controls):
    """struct cudart_double after its older members (cudart-double.h)."""
    _fields_ = [
        ("fail_after", _F(None, ctypes.c_char_p, _int, _int)),
        ("timeline_on", _F(None)),
        ("gate_new", _F(_int)),
        ("gate_open", _F(None, _int)),
        ("gate_open_on_host_wait", _F(None, _int)),
        ("launch_fill", _F(None, _long, _vp, _size, _int, _int)),
        ("launch_copy", _F(None, _long, _vp, _vp, _size, _int)),
        ("drain", _F(None)),
        ("stream_create", _F(_long, _int)),
        ("violations", _F(_int)),
        ("violation_log", _F(ctypes.c_char_p)),
        ("calls", _F(_long)),
        ("add_pool_allocation", _F(None, _vp, _size, _int)),
        ("set_cuda11_set_device", _F(None, _int)),
        ("set_concurrent_managed_access", _F(None, _int)),
        ("host_read", _F(None, _vp, _size)),
        ("instantiate", _F(_long, _long)),
        ("replay", _F(_int, _long, _long)),
        ("live_async_allocations", _F(_int)),
        ("stream_create_blocking", _F(_long, _int)),
    ]


class CAIArray:
    """A CAI v3 producer of bytes: a view of buf (registered with the double
    as CUDA memory) whose work is queued on stream."""

    def __init__(self, buf, stream):
        self.buf = buf
        self.__cuda_array_interface__ = {
            "data": (buf.ctypes.data, False), "shape": buf.shape,
            "typestr": "|u1", "strides": None, "version": 3,
            "stream": stream}


@caibridge.add_dlpack
class PatchedArray(CAIArray):
    """The same, made a DLPack producer by add_dlpack."""


class Forward:
    """A DLPack producer of another's data: its own type, so from_dlpack
    takes the Python protocol.  stream, when set, replaces the consumer's
    (-1: a consumer that asks for no ordering)."""

    _unset = object()

    def __init__(self, inner, stream=_unset):
        self.inner, self.stream = inner, stream

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        if self.stream is not Forward._unset:
            kwargs["stream"] = self.stream
        return self.inner.__dlpack__(**kwargs)


class ToDLPack:
    """to_dlpack(obj, sync=sync) as a DLPack producer, so that NumPy can
    take it."""

    def __init__(self, obj, sync=True):
        self.obj, self.sync = obj, sync

    def __dlpack_device__(self):
        return PatchedArray.__dlpack_device__(self.obj)

    def __dlpack__(self, **kwargs):
        return caibridge.to_dlpack(self.obj, sync=self.sync, **kwargs)


class Timeline:
    """The double, with the timeline on from start()."""

    def __init__(self):
        self.lib = ctypes.CDLL(str(double_path()))
        self.lib.cudart_double_controls.restype = ctypes.POINTER(
            TimelineControls)
        self.c = self.lib.cudart_double_controls().contents
        self.lib.cudaLaunchHostFunc.argtypes = [_vp, HOST_FN, _vp]
        self.lib.cudaLaunchHostFunc.restype = _int
        self._keep = []

    def start(self):
        self.c.reset()
        self.c.timeline_on()
        self._keep = []

    def stop(self):
        """Drains, and returns the violations' log ('' when none); the
        double is reset (the timeline off)."""
        self.c.drain()
        log = self.c.violation_log().decode() if self.c.violations() else ""
        self.c.reset()
        self._keep = []
        return log

    def buffer(self, kind=DEVICE, n=64, value=0, device=0):
        """n bytes of value, registered as memory of kind on device."""
        buf = np.full(n, value, dtype=np.uint8)
        self.c.add_allocation(buf.ctypes.data, n, kind, device, None)
        self._keep.append(buf)
        return buf

    def stream(self, device=0, blocking=False):
        """A new stream: non-blocking as torch's, or blocking as CuPy's
        (cudaStreamCreate's): the legacy stream of its context synchronizes
        with it, so while it captures (self.c.begin_capture) any use of the
        legacy stream fails with cudaErrorStreamCaptureImplicit (906) and
        invalidates the capture."""
        if blocking:
            return self.c.stream_create_blocking(device)
        return self.c.stream_create(device)

    def gate(self, on_host_wait=False):
        g = self.c.gate_new()
        if on_host_wait:
            self.c.gate_open_on_host_wait(g)
        return g

    def fill(self, stream, buf, value, gate=0):
        self.c.launch_fill(stream, buf.ctypes.data, buf.nbytes, value, gate)

    def copy(self, stream, dst, src, gate=0):
        self.c.launch_copy(stream, dst.ctypes.data, src.ctypes.data,
                           dst.nbytes, gate)

    def host_func(self, stream, fn):
        """Queues fn() on stream, run by the stream's worker thread."""
        callback = HOST_FN(lambda _data: fn())
        self._keep.append(callback)
        assert self.lib.cudaLaunchHostFunc(stream, callback, None) == 0

    def open(self, gate):
        self.c.gate_open(gate)

    def drain(self):
        self.c.drain()

    def violations(self):
        return self.c.violation_log().decode() if self.c.violations() else ""
