"""Objects that export only the buffer protocol (PEP 3118) as DLPack
producers: bytes, bytearray, memoryview, array.array, mmap and ctypes arrays
go through as_dlpack and to_dlpack zero-copy when their format is a native
numeric one and their memory is C-contiguous; read-only comes from the
buffer, and the export is held exactly as long as a tensor lives."""
import array
import ctypes
import importlib
import mmap
import sys

import numpy as np
import pytest

import caibridge
from conftest import Capsule, build_extension, collect, consumer, held_by

torch, needs_torch = consumer("torch")


def address(buffer):
    """The address of a buffer's first byte, read through NumPy."""
    return np.frombuffer(buffer, np.uint8).__array_interface__["data"][0]


NATIVE_CODES = "bBhHiIlLqQfd"


@pytest.mark.parametrize("code", NATIVE_CODES)
def test_array_array_goes_to_numpy_zero_copy(code):
    source = array.array(code, [1, 2, 3, 5, 7])
    result = np.from_dlpack(caibridge.as_dlpack(source))
    assert result.dtype == np.dtype(code), "the format names the dtype"
    assert result.shape == (5,)
    assert result.__array_interface__["data"][0] == source.buffer_info()[0]
    assert result.flags.writeable, "array.array is writable"
    np.testing.assert_array_equal(result, [1, 2, 3, 5, 7])
    source[2] = 11
    assert result[2] == 11, "the same memory, not a copy"


@needs_torch
def test_array_array_of_doubles_into_torch():
    source = array.array("d", [0.5, 1.5, 2.5])
    tensor = torch.from_dlpack(caibridge.as_dlpack(source))
    assert tensor.dtype == torch.float64
    assert tensor.data_ptr() == source.buffer_info()[0]
    tensor[0] = 9.0
    assert source[0] == 9.0


@pytest.mark.parametrize("fmt, dtype", [
    ("?", np.bool_), ("n", np.intp), ("N", np.uintp), ("@d", np.float64),
])
def test_memoryview_cast_formats(fmt, dtype):
    raw = bytearray(np.arange(16, dtype=np.uint8).tobytes())
    view = memoryview(raw).cast(fmt.lstrip("@"))
    result = np.from_dlpack(caibridge.as_dlpack(view))
    assert result.dtype == np.dtype(dtype)
    assert result.__array_interface__["data"][0] == address(raw)


def test_multidimensional_memoryview_keeps_its_shape():
    raw = bytearray(np.arange(6, dtype=np.float64).tobytes())
    view = memoryview(raw).cast("d", (2, 3))
    result = np.from_dlpack(caibridge.as_dlpack(view))
    assert result.shape == (2, 3)
    np.testing.assert_array_equal(result, np.arange(6.0).reshape(2, 3))


def test_bytes_is_read_only():
    data = bytes(range(8))
    view = caibridge.as_dlpack(data)
    result = np.from_dlpack(view)
    assert result.dtype == np.uint8
    assert not result.flags.writeable, "read-only comes from the buffer"
    assert result.__array_interface__["data"][0] == address(data)
    with pytest.raises(BufferError, match="read-only"):
        view.__dlpack__()  # a legacy capsule cannot say read-only
    assert "versioned" in repr(view.__dlpack__(max_version=(1, 0)))


def test_bytearray_is_writable_and_held_while_exported():
    data = bytearray(b"\x01\x02\x03\x04")
    result = np.from_dlpack(caibridge.as_dlpack(data))
    assert result.flags.writeable
    result[0] = 42
    assert data[0] == 42
    with pytest.raises(BufferError):
        data.extend(b"more")  # the export pins the memory
    del result
    collect()
    data.extend(b"more")  # released with the last tensor
    assert len(data) == 8


@pytest.mark.parametrize("access, writable", [
    (mmap.ACCESS_READ, False), (mmap.ACCESS_WRITE, True),
])
def test_mmap(tmp_path, access, writable):
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(16)))
    with open(path, "r+b") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=access)
    result = np.from_dlpack(caibridge.as_dlpack(mapped))
    assert result.flags.writeable == writable
    np.testing.assert_array_equal(result, np.arange(16, dtype=np.uint8))
    del result
    collect()
    mapped.close()  # no export left open


def test_ctypes_little_endian_array():
    values = (ctypes.c_double * 2 * 3)(*[(ctypes.c_double * 2)(i, -i)
                                          for i in range(3)])
    result = np.from_dlpack(caibridge.as_dlpack(values))
    assert result.shape == (3, 2)
    assert result.dtype == np.float64
    assert result.__array_interface__["data"][0] == ctypes.addressof(values)


def test_to_dlpack_takes_buffers_too():
    source = array.array("i", [4, 5, 6])
    capsule = caibridge.to_dlpack(source, max_version=(1, 3))
    result = np.from_dlpack(Capsule(capsule))
    np.testing.assert_array_equal(result, [4, 5, 6])
    assert result.__array_interface__["data"][0] == source.buffer_info()[0]




@needs_torch
def test_producer_lives_exactly_as_long_as_the_tensor():
    held_by(lambda: array.array("f", [1.0, 2.0]),
            lambda source: torch.from_dlpack(caibridge.as_dlpack(source)))


# ---- refused, with BufferError ----

@pytest.mark.parametrize("make", [
    lambda: memoryview(array.array("d", range(8)))[::2],
    lambda: memoryview(array.array("d", range(8)))[::-1],
    lambda: memoryview(bytearray(24)).cast("d", (3, 1))[::2],
], ids=["step", "reversed", "2-d step"])
def test_strided_memoryview_is_refused(make):
    with pytest.raises(BufferError, match="C-contiguous"):
        caibridge.as_dlpack(make())


def test_fortran_ordered_memoryview_is_refused():
    # Contiguous in Fortran order only: read as C order, its values would
    # come out transposed.
    fortran = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    view = memoryview(fortran)
    assert view.f_contiguous and not view.c_contiguous
    with pytest.raises(BufferError, match="not C-contiguous"):
        caibridge.as_dlpack(view)
    with pytest.raises(BufferError, match="not C-contiguous"):
        caibridge.to_dlpack(view)


@pytest.fixture(scope="module")
def xexporter(tmp_path_factory):
    """tests/python/xexporter.c, built for this interpreter."""
    sys.path.insert(0, build_extension(tmp_path_factory, "xexporter"))
    try:
        return importlib.import_module("xexporter")
    finally:
        sys.path.pop(0)


@pytest.mark.parametrize("format, itemsize", [
    ("d", 4), ("<i", 8), ("B", 2), ("Zf", 4)])
def test_itemsize_disagreeing_with_format_is_refused(xexporter, format,
                                                     itemsize):
    exporter = xexporter.Exporter(bytearray(16), format, itemsize)
    assert memoryview(exporter).itemsize == itemsize
    with pytest.raises(BufferError, match="format '%s' has items of" %
                       format):
        caibridge.as_dlpack(exporter)


def test_itemsize_agreeing_with_format_is_read(xexporter):
    # The exporter itself is right: with an agreeing pair it converts.
    memory = bytearray(np.arange(4, dtype=np.float64).tobytes())
    exporter = xexporter.Exporter(memory, "d", 8)
    np.testing.assert_array_equal(
        np.from_dlpack(caibridge.as_dlpack(exporter)), [0.0, 1.0, 2.0, 3.0])


@pytest.mark.parametrize("make, why", [
    (lambda: array.array("u", "text"), "format"),
    (lambda: memoryview(bytearray(4)).cast("c"), "format"),
    (lambda: (ctypes.c_double.__ctype_be__ * 2)(), "byte order"),
    (lambda: (ctypes.c_int32.__ctype_be__ * 2)(), "byte order"),
    (lambda: (type("S", (ctypes.Structure,),
                   {"_fields_": [("a", ctypes.c_int8),
                                 ("b", ctypes.c_double)]}) * 2)(), "format"),
], ids=["unicode", "char", "big-endian double", "big-endian int",
        "struct"])
def test_formats_without_a_dlpack_type_are_refused(make, why):
    if sys.byteorder == "big" and why == "byte order":
        pytest.skip("big-endian host: these formats are native there")
    with pytest.raises(BufferError, match=why):
        caibridge.as_dlpack(make())


def test_device_other_than_host_is_refused():
    with pytest.raises(ValueError, match="host memory"):
        caibridge.as_dlpack(bytearray(8), device=(2, 0))
    # Pinned memory is host memory too.
    view = caibridge.as_dlpack(bytearray(8), device=(3, 0))
    assert view.__dlpack_device__() == (3, 0)


def test_objects_without_any_protocol_are_still_a_type_error():
    with pytest.raises(TypeError, match="buffer protocol"):
        caibridge.as_dlpack(object())
