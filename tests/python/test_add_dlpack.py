"""caibridge.add_dlpack: a class with __array_interface__ (or
__cuda_array_interface__) becomes a DLPack producer itself, so NumPy,
PyTorch and JAX take its instances directly, zero-copy, with read-only
kept and the instance alive exactly as long as the consumer's tensor."""
import array
import ctypes
import weakref

import numpy as np
import pytest

import caibridge
from conftest import (DLManagedTensorVersioned, HostProducer,
                      PyCapsule_GetPointer, call_deleter, collect, consumer,
                      data_pointer, exchange_table, filled, held_by,
                      tensor_from_py)

torch, needs_torch = consumer("torch")
jax, needs_jax = consumer("jax", "dlpack")

P = ctypes.POINTER


@caibridge.add_dlpack
class Host(HostProducer):
    """A host array type patched with the decorator."""


class Called(HostProducer):
    """The same, patched by a call."""


def test_decorator_and_call_return_the_class():
    assert caibridge.add_dlpack(Called) is Called
    for cls in (Host, Called):
        assert "__dlpack__" in cls.__dict__
        assert "__dlpack_device__" in cls.__dict__


def test_patching_twice_is_harmless():
    class Twice(HostProducer):
        pass
    caibridge.add_dlpack(Twice)
    assert caibridge.add_dlpack(Twice) is Twice
    np.testing.assert_array_equal(np.from_dlpack(Twice(np.arange(3))),
                                  np.arange(3))


def test_methods_describe_themselves():
    method = Host.__dict__["__dlpack__"]
    assert "max_version" in method.__doc__
    assert Host.__dlpack__.__name__ == "__dlpack__"
    bound = Host(filled((2,), "int8")).__dlpack__
    assert callable(bound)
    assert "dltensor" in repr(bound())


@pytest.mark.parametrize("consumer", ["numpy", "torch", "jax"])
def test_consumer_takes_the_instance_zero_copy(consumer):
    if {"torch": torch, "jax": jax}.get(consumer, np) is None:
        pytest.skip(f"{consumer} is not installed for this Python")
    array_ = filled((3, 4), "float32")
    producer = Host(array_)
    alive = weakref.ref(producer)
    if consumer == "numpy":
        result = np.from_dlpack(producer)
        pointer = result.__array_interface__["data"][0]
        values = np.asarray(result)
    elif consumer == "torch":
        result = torch.from_dlpack(producer)
        pointer = result.data_ptr()
        values = result.numpy()
    else:
        result = jax.dlpack.from_dlpack(producer)
        pointer = result.unsafe_buffer_pointer()
        values = np.asarray(result)
    assert pointer == data_pointer(array_), "zero-copy"
    np.testing.assert_array_equal(values, array_)
    del producer
    collect()
    assert alive() is not None, "the tensor keeps the instance alive"
    del result, values
    collect()
    assert alive() is None, "and releases it with the tensor"


def test_strided_instance():
    base = filled((6, 8), "int16")
    strided = base[::2, ::-3]
    result = np.from_dlpack(Host(strided))
    assert result.strides == strided.strides
    assert result.__array_interface__["data"][0] == data_pointer(strided)
    np.testing.assert_array_equal(result, strided)


@needs_jax
def test_read_only_is_kept():
    array_ = filled((4,), "float64")
    array_.flags.writeable = False
    producer = Host(array_)
    result = np.from_dlpack(producer)
    assert not result.flags.writeable
    with pytest.raises(BufferError, match="read-only"):
        producer.__dlpack__()  # a legacy capsule cannot say so
    with pytest.raises(BufferError, match="read-only"):
        jax.dlpack.from_dlpack(producer)  # JAX asks for legacy only
    capsule = producer.__dlpack__(max_version=(1, 0))
    pointer = PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    assert DLManagedTensorVersioned.from_address(pointer).flags & 1


def test_protocol_keywords():
    array_ = filled((5,), "int32")
    producer = Host(array_)
    assert producer.__dlpack_device__() == (1, 0)
    assert "\"dltensor\"" in repr(producer.__dlpack__())
    assert "dltensor_versioned" in repr(
        producer.__dlpack__(max_version=(1, 3)))
    assert "\"dltensor\"" in repr(producer.__dlpack__(max_version=(0, 8)))
    producer.__dlpack__(dl_device=(1, 0), copy=False, stream=None)
    with pytest.raises(BufferError, match="dl_device"):
        producer.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="stream"):
        producer.__dlpack__(stream=5)
    with pytest.raises(TypeError, match="unexpected keyword"):
        producer.__dlpack__(colour="red")
    with pytest.raises(TypeError, match="positional"):
        producer.__dlpack__(None)


@needs_torch
def test_copy_true_copies():
    array_ = filled((2, 3), "float32")[:, ::2]
    producer = Host(array_)
    alive = weakref.ref(producer)
    capsule = producer.__dlpack__(max_version=(1, 0), copy=True)
    pointer = PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    managed = DLManagedTensorVersioned.from_address(pointer)
    assert managed.flags & 2, "IS_COPIED"
    assert managed.dl_tensor.data != data_pointer(array_)
    del producer
    collect()
    assert alive() is None, "a copy holds nothing of the producer"
    result = torch.from_dlpack(capsule)
    np.testing.assert_array_equal(result.numpy(), array_)


def test_bad_interface_errors_name_the_field():
    producer = Host(filled((3,), "int8"), typestr="<x9")
    with pytest.raises((TypeError, ValueError, BufferError),
                       match="typestr"):
        producer.__dlpack__()


@needs_torch
def test_subclass_inherits():
    class Sub(Host):
        pass
    result = torch.from_dlpack(Sub(filled((2, 2), "int64")))
    assert result.shape == (2, 2)


@needs_torch
def test_slots_class():
    @caibridge.add_dlpack
    class Slotted:
        __slots__ = ("array", "__weakref__")

        def __init__(self, a):
            self.array = a

        @property
        def __array_interface__(self):
            return self.array.__array_interface__

    a = filled((3,), "uint16")
    assert torch.from_dlpack(Slotted(a)).data_ptr() == data_pointer(a)


def test_exchange_api_is_published():
    capsule = Host.__dict__["__dlpack_c_exchange_api__"]
    assert "dlpack_exchange_api" in repr(capsule)
    a = filled((2, 5), "float64")
    producer = Host(a)
    before = caibridge._core._foreign_table_imports()
    view = caibridge.from_dlpack(producer)
    assert caibridge._core._foreign_table_imports() == before + 1, \
        "from_dlpack took the class's exchange API"
    assert view.__array_interface__["data"][0] == data_pointer(a)


# ---- types that cannot take the methods ----

@pytest.mark.parametrize("cls", [int, array.array, np.ndarray, memoryview])
def test_static_types_are_refused(cls):
    with pytest.raises(TypeError, match="as_dlpack"):
        caibridge.add_dlpack(cls)


def test_not_a_class_is_refused():
    with pytest.raises(TypeError, match="class"):
        caibridge.add_dlpack(Host(filled((1,), "int8")))


def test_own_dlpack_is_not_overwritten():
    class Own(HostProducer):
        def __dlpack__(self, **kwargs):
            raise AssertionError("not ours")

    with pytest.raises(TypeError, match="already"):
        caibridge.add_dlpack(Own)


def test_exchange_table_from_c():
    """The patched class's table driven as a C consumer drives it."""
    api = exchange_table(Host)
    assert (api.header.major, api.header.minor) == (1, 3)
    a = filled((4,), "int32")

    def take(producer):
        out = tensor_from_py(api, producer)
        assert out.contents.dl_tensor.data == data_pointer(a)
        assert out.contents.flags == 0
        return out

    # The tensor holds the instance until its deleter runs.
    held_by(lambda: Host(a), take, release=call_deleter)
    with pytest.raises(TypeError, match="add_dlpack"):
        tensor_from_py(api, HostProducer(a))
