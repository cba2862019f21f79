"""The CUDA paths of add_dlpack, add_array_interface and CAIView.__dlpack__
on the recording CUDA runtime double: the device found from the pointer,
and the consumer's stream made to wait on the producer's with an event.
Run in a process of its own, like test_stream_order.py, whose double and
producers it shares."""
import os
import sys

import numpy as np
import pytest

import caibridge
from test_stream_order import (  # noqa: F401  (cuda, double: fixtures)
    CONSUMER, DEVICE, DEVICE_PTR, KDLCPU, KDLCUDA, PRODUCER, CudaStream,
    DeviceArray, cuda, double, event_ordering, fence_waited, ordered)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
from conftest import DLPackWrapper  # noqa: E402

OTHER = 0x7000
# The pointer lookup: the caller's context, the attributes.
LOOKUP = ["cuCtxGetCurrent() = P0",
          f"cudaPointerGetAttributes({DEVICE_PTR:#x})"]


@caibridge.add_dlpack
class PatchedDevice(DeviceArray):
    """A CuPy-free CAI v3 class made a DLPack producer."""


def test_patched_cai_class_is_located(cuda):
    cuda.pointer(DEVICE_PTR, DEVICE, 1)
    assert PatchedDevice().__dlpack_device__() == (KDLCUDA, 1)
    assert cuda.log() == LOOKUP


@pytest.mark.parametrize("consumer, seen", [
    (CONSUMER, CONSUMER), (None, 1), (2, 2), (CudaStream(CONSUMER), CONSUMER),
])
def test_patched_dlpack_orders_streams(cuda, consumer, seen):
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    producer = PatchedDevice(stream=PRODUCER)
    capsule = producer.__dlpack__(stream=consumer, max_version=(1, 0))
    assert "dltensor_versioned" in repr(capsule)
    log = cuda.log()
    assert log[:len(LOOKUP)] == LOOKUP
    assert ordered(log) == (PRODUCER, seen)
    assert cuda.live_events() == 0


def test_patched_dlpack_refuses_stream_zero_and_host(cuda):
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    producer = PatchedDevice(stream=PRODUCER)
    with pytest.raises(ValueError, match="stream = 0"):
        producer.__dlpack__(stream=0)
    # Device memory for the host is a copy: refused when copy=False.
    with pytest.raises(BufferError, match=r"copy=False.*kDLCUDA.*kDLCPU"):
        producer.__dlpack__(dl_device=(KDLCPU, 0), copy=False)
    assert not any("cudaEventRecord" in line for line in cuda.log()), \
        "nothing was ordered for a refused request"
    # A copy whose allocation fails (the pointer here is not memory).
    cuda.fail("cudaMallocAsync", 2)
    with pytest.raises(BufferError, match="cudaMallocAsync failed"):
        producer.__dlpack__(copy=True)


def test_patched_no_sync(cuda):
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    PatchedDevice(stream=PRODUCER).__dlpack__(stream=-1)
    assert cuda.log() == LOOKUP


def test_to_dlpack_dl_device_on_cuda(cuda):
    cuda.pointer(DEVICE_PTR, DEVICE, 1)
    caibridge.to_dlpack(DeviceArray(), dl_device=(KDLCUDA, 1))
    with pytest.raises(BufferError, match="dl_device"):
        caibridge.to_dlpack(DeviceArray(), dl_device=(KDLCUDA, 0))


# ---- a DLPack-only CUDA type gains __cuda_array_interface__ ----

@caibridge.add_array_interface
class DLPackOnly(DLPackWrapper):
    """CUDA data behind caibridge's own DLPackView; records each call."""

    def __init__(self, stream=None):
        super().__init__(caibridge.as_dlpack(DeviceArray(stream=stream)))


def test_dlpack_only_cuda_type_gets_a_cai(cuda):
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    producer = DLPackOnly(stream=PRODUCER)
    cuda.reset()
    assert not hasattr(producer, "__array_interface__")
    assert producer.calls == [], "the probe exported nothing"
    cai = producer.__cuda_array_interface__
    assert cai["data"] == (DEVICE_PTR, False)
    assert cai["stream"] == 1, "ready on the legacy default stream"
    assert producer.calls == [{"stream": 1, "max_version": (1, 3),
                               "copy": False}]
    # The inner view's fence, recorded when it was made, waited on (then the
    # reverse edge as the tensor described is released).
    waited = fence_waited(1)
    assert cuda.log()[:len(waited)] == waited


# ---- CAIView re-exports with the same stream rules ----

def test_caiview_dlpack_orders_its_stream(cuda):
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    view = caibridge.from_dlpack(caibridge.as_dlpack(DeviceArray()),
                                 stream=CONSUMER)
    assert view.__cuda_array_interface__["stream"] == CONSUMER
    cuda.reset()
    capsule = view.__dlpack__(stream=OTHER, max_version=(1, 0))
    assert "dltensor_versioned" in repr(capsule)
    assert cuda.log() == event_ordering(CONSUMER, OTHER)
    cuda.reset()
    view.__dlpack__(stream=CONSUMER)  # the same stream: already in order
    view.__dlpack__(stream=-1)
    assert cuda.log() == []
    with pytest.raises(ValueError, match="stream = 0"):
        view.__dlpack__(stream=0)
    cuda.fail("cudaMallocAsync", 2)  # the pointer here is not memory
    with pytest.raises(BufferError, match="cudaMallocAsync failed"):
        view.__dlpack__(copy=True)


def test_caiview_of_cuda_into_a_consumer(cuda):
    cuda.pointer(DEVICE_PTR, DEVICE, 0)
    view = caibridge.from_dlpack(caibridge.as_dlpack(DeviceArray()))
    assert view.__dlpack_device__() == (KDLCUDA, 0)
    again = caibridge.from_dlpack(view, stream=CONSUMER)
    assert again.__cuda_array_interface__["data"][0] == DEVICE_PTR
    np.testing.assert_equal(again.__cuda_array_interface__["shape"], (4,))
