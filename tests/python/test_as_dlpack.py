"""Host arrays through as_dlpack into real consumers: torch, JAX, NumPy.

Every case checks the values and that the consumer's data pointer is the
producer's (no copy).  Where a consumer refuses a layout, the test asserts
the refusal it makes, so a change in the consumer shows up here.
"""
import numpy as np
import pytest

import caibridge
from conftest import DTYPES, HostProducer, consumer, data_pointer, filled

torch, needs_torch = consumer("torch")
jax, needs_jax = consumer("jax", "dlpack")
if jax is not None:
    jax.config.update("jax_enable_x64", True)  # int64, float64, complex128


def layouts(dtype):
    """name -> array; the data of each starts 64-byte aligned."""
    return {
        "0-d": filled((), dtype),
        "zero-size": filled((0, 3), dtype),
        "1-d": filled((5,), dtype),
        "2-d": filled((2, 3), dtype),
        "3-d": filled((2, 3, 4), dtype),
        "4-d": filled((2, 1, 3, 2), dtype),
        "5-d": filled((1, 2, 3, 2, 2), dtype),
        "transposed": filled((3, 4, 5), dtype).transpose(2, 0, 1),
        "sliced": filled((6, 8), dtype)[::2, 1::3],
        "negative": filled((4, 5), dtype)[::-1, ::-2],
        "broadcast": np.broadcast_to(filled((4,), dtype), (3, 4)),
    }


LAYOUTS = list(layouts("int8"))
# JAX (XLA) takes only "compact" strides: a permutation of a dense layout.
JAX_NON_COMPACT = {"sliced", "negative", "broadcast"}


def torch_view(array, producer):
    return torch.from_dlpack(caibridge.as_dlpack(producer))


def numpy_view(array, producer):
    return np.from_dlpack(caibridge.as_dlpack(producer))


def jax_view(array, producer):
    # JAX asks only for legacy capsules; broadcast_to arrays are read-only.
    view = caibridge.as_dlpack(producer,
                               allow_readonly_legacy=array is not None
                               and not array.flags.writeable)
    return jax.dlpack.from_dlpack(view)


def pointer_of(result):
    if torch is not None and isinstance(result, torch.Tensor):
        return result.data_ptr()
    if isinstance(result, np.ndarray):
        return data_pointer(result)
    return result.unsafe_buffer_pointer()


def as_numpy(result):
    if torch is not None and isinstance(result, torch.Tensor):
        return result.numpy()
    return np.asarray(result)


def check_view(result, array):
    got = as_numpy(result)
    assert got.shape == array.shape
    assert got.dtype == array.dtype
    np.testing.assert_array_equal(got, array)
    if array.size > 0:
        assert pointer_of(result) == data_pointer(array), "the data was copied"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_consumer(dtype, layout):
    array = layouts(dtype)[layout]
    result = numpy_view(array, HostProducer(array))
    check_view(result, array)
    assert result.strides == array.strides or array.size == 0


@needs_torch
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_consumer(dtype, layout):
    if layout == "negative":
        pytest.skip("torch has no negative strides: torch.from_dlpack aborts "
                    "the process (c10::Error in computeStorageNbytes)")
    array = layouts(dtype)[layout]
    result = torch_view(array, HostProducer(array))
    check_view(result, array)
    if array.size > 0:
        itemsize = array.dtype.itemsize
        assert result.stride() == tuple(s // itemsize for s in array.strides)


@needs_jax
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_jax_consumer(dtype, layout):
    array = layouts(dtype)[layout]
    producer = HostProducer(array)
    if layout in JAX_NON_COMPACT and array.size > 0:
        with pytest.raises(Exception, match="striding"):
            jax_view(array, producer)
        return
    check_view(jax_view(array, producer), array)


@needs_jax
def test_jax_copies_unaligned_data():
    # XLA's CPU client needs 64-byte aligned buffers and copies the others;
    # the values still arrive intact.
    array = filled((9,), "float32")[1:]
    result = jax_view(array, HostProducer(array))
    np.testing.assert_array_equal(np.asarray(result), array)
    assert pointer_of(result) != data_pointer(array)


def readonly(dtype="float32"):
    array = filled((3, 4), dtype)
    array.flags.writeable = False
    return array


def test_readonly_versioned_numpy():
    array = readonly()
    result = np.from_dlpack(caibridge.as_dlpack(HostProducer(array)))
    assert not result.flags.writeable
    check_view(result, array)


def test_readonly_versioned_flag_in_capsule():
    import ctypes
    capsule = caibridge.as_dlpack(HostProducer(readonly())).__dlpack__(
        max_version=(1, 3))
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    tensor = get(capsule, b"dltensor_versioned")
    # DLManagedTensorVersioned: version (8 bytes), manager_ctx, deleter, flags.
    flags = ctypes.c_uint64.from_address(tensor + 24).value
    assert flags & 1, "READ_ONLY is set"
    assert not flags & 2, "IS_COPIED is not set"


@needs_torch
def test_readonly_torch_takes_versioned():
    array = readonly()
    check_view(torch_view(array, HostProducer(array)), array)


@needs_jax
def test_readonly_jax_needs_opt_in():
    array = readonly()
    with pytest.raises(BufferError, match="allow_readonly_legacy=True"):
        jax.dlpack.from_dlpack(caibridge.as_dlpack(HostProducer(array)))
    view = caibridge.as_dlpack(HostProducer(array), allow_readonly_legacy=True)
    check_view(jax.dlpack.from_dlpack(view), array)


def test_readonly_legacy_capsule_refused():
    view = caibridge.as_dlpack(HostProducer(readonly()))
    with pytest.raises(BufferError, match="allow_readonly_legacy"):
        view.__dlpack__()
    with pytest.raises(BufferError, match="allow_readonly_legacy"):
        caibridge.to_dlpack(HostProducer(readonly()))
    assert caibridge.to_dlpack(HostProducer(readonly()),
                               allow_readonly_legacy=True) is not None


@needs_torch
def test_numpy_array_itself_is_a_producer():
    array = filled((4, 4), "float64")
    result = torch.from_dlpack(caibridge.as_dlpack(array))
    assert result.data_ptr() == data_pointer(array)


@needs_torch
def test_consumer_writes_are_visible_to_producer():
    array = filled((3,), "int32")
    result = torch_view(array, HostProducer(array))
    result[1] = 77
    assert array[1] == 77


def test_buffer_object_data():
    # __array_interface__ may give data as a buffer object (or None for the
    # object's own buffer); the view keeps that export alive.
    raw = bytearray(range(16))
    producer = HostProducer(np.frombuffer(raw, np.uint8), data=raw)
    result = np.from_dlpack(caibridge.as_dlpack(producer))
    np.testing.assert_array_equal(result, np.arange(16, dtype=np.uint8))
    result[0] = 99
    assert raw[0] == 99

    class OwnBuffer(bytearray):
        __array_interface__ = {"shape": (2,), "typestr": "<u2",
                               "data": None, "version": 3, "offset": 2}

    own = OwnBuffer(b"\x01\x00\x02\x00\x03\x00")
    result = np.from_dlpack(caibridge.as_dlpack(own))
    assert result.tolist() == [2, 3]


def test_buffer_too_small_is_refused():
    producer = HostProducer(np.zeros(4, np.uint8), data=bytearray(2))
    with pytest.raises(ValueError, match="buffer of 2 bytes"):
        caibridge.as_dlpack(producer)


def test_readonly_buffer_object():
    producer = HostProducer(np.zeros(4, np.uint8), data=b"abcd")
    result = np.from_dlpack(caibridge.as_dlpack(producer))
    assert not result.flags.writeable
    assert bytes(result) == b"abcd"
