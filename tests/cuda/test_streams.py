"""Stream values and stream ordering of the Python face, on the recording
CUDA runtime: what a stream argument means, when the producer's stream is
read, CPU consumers of host-accessible memory, and the reverse edge when a
consumer releases the data."""
import ctypes
import gc
import os
import sys

import pytest

from test_cuda_double import (DEVICE, DEVICE_PTR, KDLCPU, KDLCUDA,  # noqa
                              KDLCUDAHOST, KDLCUDAMANAGED, MANAGED, PINNED,
                              PRODUCER, CONSUMER, CudaStream, DeviceArray,
                              caibridge, cuda, double)

LEGACY = 1


def ordering(log):
    """The ordering calls of a log: ("record", event, stream),
    ("wait", stream, event), ("host", event or stream)."""
    out = []
    for line in log:
        call, _, rest = line.partition("(")
        args = [a.strip() for a in rest.split(")")[0].split(",")]
        if "-> error" in line:
            continue
        if call == "cudaEventRecord":
            out.append(("record", args[0], args[1]))
        elif call == "cudaStreamWaitEvent":
            out.append(("wait", args[0], args[1]))
        elif call in ("cudaEventSynchronize", "cudaStreamSynchronize"):
            out.append(("host", args[0]))
    return out


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
    assert waits and waits[-1][1] == f"{LEGACY:#x}"


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
