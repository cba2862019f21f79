"""to_dlpack speaks __dlpack__'s copy and dl_device, and device types have
names (caibridge.DeviceType), used in reprs."""
import ctypes

import numpy as np
import pytest

import caibridge
from conftest import HostProducer, collect, data_pointer, filled, managed



def test_to_dlpack_copy_true():
    a = filled((3, 4), "float64")[:, ::-2]
    capsule = caibridge.to_dlpack(HostProducer(a), max_version=(1, 0),
                                  copy=True)
    m = managed(capsule)
    assert m.flags & 2, "IS_COPIED"
    assert m.dl_tensor.data != data_pointer(a)
    copy = np.ctypeslib.as_array(
        ctypes.cast(m.dl_tensor.data, ctypes.POINTER(ctypes.c_double)),
        shape=a.shape)
    np.testing.assert_array_equal(copy, a)


def test_to_dlpack_copy_false_and_none_share_memory():
    a = filled((5,), "int32")
    for copy in (False, None):
        m = managed(caibridge.to_dlpack(HostProducer(a), max_version=(1, 0),
                                        copy=copy))
        assert m.dl_tensor.data == data_pointer(a)
        assert not m.flags & 2


def test_to_dlpack_copy_of_read_only_is_writable_legacy():
    a = filled((2,), "uint8")
    a.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        caibridge.to_dlpack(HostProducer(a))
    caibridge.to_dlpack(HostProducer(a), copy=True)  # a writable copy


def test_to_dlpack_dl_device():
    a = filled((2,), "float32")
    caibridge.to_dlpack(HostProducer(a), dl_device=(1, 0))
    with pytest.raises(BufferError, match="dl_device"):
        caibridge.to_dlpack(HostProducer(a), dl_device=(2, 0))
    with pytest.raises(TypeError, match="dl_device"):
        caibridge.to_dlpack(HostProducer(a), dl_device="cpu")
    with pytest.raises(TypeError, match="copy"):
        caibridge.to_dlpack(HostProducer(a), copy="yes")


def test_copy_releases_the_producer_at_once():
    import weakref
    producer = HostProducer(filled((2,), "float32"))
    alive = weakref.ref(producer)
    capsule = caibridge.to_dlpack(producer, copy=True)
    del producer
    collect()
    assert alive() is None, "a copy holds nothing of the producer"
    del capsule


def test_device_type_names():
    D = caibridge.DeviceType
    assert (D.kDLCPU, D.kDLCUDA, D.kDLCUDAHost, D.kDLCUDAManaged) == \
        (1, 2, 3, 13)
    assert D(10) is D.kDLROCM
    assert isinstance(D.kDLCUDA, int)
    assert caibridge.kDLCUDA == 2 and caibridge.kDLCPU is D.kDLCPU


def test_device_type_in_reprs():
    view = caibridge.as_dlpack(HostProducer(filled((2,), "int8")))
    assert "device=(kDLCPU, 0)" in repr(view)
    assert "device=(kDLCPU, 0)" in repr(caibridge.from_dlpack(view))
