"""caibridge.add_array_interface: a class with only __dlpack__ and
__dlpack_device__ gains __array_interface__ (host memory) and
__cuda_array_interface__ (CUDA memory), each absent (AttributeError) when
the memory is of the other kind.  CAI's lifetime rule applies: the instance
keeps its memory; the tensor taken to read the layout is asked for without
a copy and released before the property returns."""
import weakref

import numpy as np
import pytest

import caibridge
from conftest import (DLPackWrapper, FakeTensor, collect, consumer,
                      data_pointer, filled, held_by)

torch, needs_torch = consumer("torch")


@caibridge.add_array_interface
class Wrapped(DLPackWrapper):
    """A DLPack-only type given the two interfaces."""


def test_call_returns_the_class():
    class Other(Wrapped):
        pass
    assert caibridge.add_array_interface(Other) is Other
    assert "__array_interface__" in Other.__dict__
    assert "__cuda_array_interface__" in Other.__dict__


def test_numpy_asarray_is_zero_copy():
    a = filled((3, 4), "float32")
    producer = Wrapped(a)
    result = np.asarray(producer)
    assert result.__array_interface__["data"][0] == data_pointer(a)
    np.testing.assert_array_equal(result, a)
    assert result.flags.writeable
    result[0, 0] = 99
    assert a[0, 0] == 99


@needs_torch
def test_torch_backed_type_into_numpy():
    t = torch.arange(12, dtype=torch.int32).reshape(3, 4)[:, 1:]
    result = np.asarray(Wrapped(t))
    assert result.__array_interface__["data"][0] == t.data_ptr()
    assert result.strides == tuple(s * 4 for s in t.stride())
    np.testing.assert_array_equal(result, t.numpy())


def test_the_interface_dict():
    a = filled((2, 3), "int16")[:, ::-1]
    iface = Wrapped(a).__array_interface__
    assert iface["shape"] == (2, 3)
    assert iface["typestr"] == "<i2"
    assert iface["data"] == (data_pointer(a), False)
    assert iface["strides"] == a.strides
    assert iface["version"] == 3


def test_read_only_is_kept():
    a = filled((4,), "float64")
    a.flags.writeable = False
    result = np.asarray(Wrapped(a))
    assert not result.flags.writeable
    assert Wrapped(a).__array_interface__["data"][1] is True


def test_asks_for_no_copy_and_no_stream_on_the_host():
    producer = Wrapped(filled((2,), "uint8"))
    producer.__array_interface__
    assert producer.calls[-1].get("copy") is False, \
        "the layout must be the instance's own memory"
    assert producer.calls[-1].get("stream") is None


def test_hasattr_probes():
    producer = Wrapped(filled((2,), "uint8"))
    assert hasattr(producer, "__array_interface__")
    producer.calls.clear()
    assert not hasattr(producer, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match="host memory"):
        producer.__cuda_array_interface__
    assert producer.calls == [], "the probe exported nothing"


def test_cuda_memory_has_only_the_cai():
    fake = FakeTensor(np.zeros(4, np.float32), device=(2, 0))
    producer = Wrapped(_Once(fake))
    assert not hasattr(producer, "__array_interface__")
    cai = producer.__cuda_array_interface__
    assert cai["data"][0] == data_pointer(fake.array)
    assert cai["stream"] == 1, "data made ready on the legacy default stream"
    assert producer.calls[-1]["stream"] == 1
    assert fake.calls == 1, "the tensor was released before returning"


class _Once:
    """Hands out one FakeTensor's capsule; its deleter counts calls."""

    def __init__(self, fake):
        self.fake = fake

    def __dlpack_device__(self):
        device = self.fake.struct.dl_tensor.device
        return (device.device_type, device.device_id)

    def __dlpack__(self, **kwargs):
        return self.fake.capsule()


def test_tensor_is_released_before_the_property_returns():
    fake = FakeTensor(filled((3,), "int32"))
    producer = Wrapped(_Once(fake))
    iface = producer.__array_interface__
    assert fake.calls == 1
    assert iface["data"][0] == data_pointer(fake.array)


def test_a_copying_producer_is_refused():
    fake = FakeTensor(filled((3,), "int32"), flags=2)  # IS_COPIED
    with pytest.raises(BufferError, match="cop"):
        Wrapped(_Once(fake)).__array_interface__
    assert fake.calls == 1, "the refused tensor is released"


def test_lifetime_is_cai_s():
    """The dict holds nothing; NumPy keeps the instance, which keeps the
    memory."""
    producer = Wrapped(filled((5,), "float64"))
    alive = weakref.ref(producer)
    iface = producer.__array_interface__
    del producer
    collect()
    assert alive() is None, "the dict does not keep the instance"
    assert iface["shape"] == (5,)

    # NumPy's array keeps the instance.
    held_by(lambda: Wrapped(filled((5,), "float64")), np.asarray)


def test_pre_1_0_producer_without_keywords():
    @caibridge.add_array_interface
    class Old:
        def __init__(self, a):
            self.a = a

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__(stream=stream)

    a = filled((3,), "int64")
    result = np.asarray(Old(a))
    assert result.__array_interface__["data"][0] == data_pointer(a)


def test_static_types_are_refused():
    with pytest.raises(TypeError, match="from_dlpack"):
        caibridge.add_array_interface(np.ndarray)


def test_own_interface_is_not_overwritten():
    class Own(Wrapped):
        __array_interface__ = {}

    with pytest.raises(TypeError, match="already"):
        caibridge.add_array_interface(Own)
