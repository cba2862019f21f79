"""Shared producers and helpers for the caibridge Python tests."""
import gc
import weakref

import numpy as np
import pytest

import caibridge

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64", "float16", "float32", "float64", "complex64",
          "complex128"]


def aligned(shape, dtype, align=64):
    """A C-contiguous array whose data starts on an align-byte boundary
    (XLA copies host buffers that are not 64-byte aligned)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def filled(shape, dtype):
    """An aligned array of distinct, dtype-appropriate values."""
    a = aligned(shape, dtype)
    n = a.size
    values = np.arange(n) % 7 if dtype == "bool" else np.arange(n) % 100
    if np.dtype(dtype).kind == "c":
        values = values + 1j * (values % 3)
    a[...] = values.reshape(a.shape).astype(dtype)
    return a


class HostProducer:
    """Exposes only __array_interface__ (not NumPy's DLPack), like a
    third-party host producer; keeps the array it describes."""

    def __init__(self, array, **overrides):
        self.array = array
        self.iface = dict(array.__array_interface__, **overrides)

    @property
    def __array_interface__(self):
        return self.iface


class CAIProducer:
    """A CUDA Array Interface producer from a plain dict (no GPU needed when
    the device is given to as_dlpack explicitly)."""

    def __init__(self, iface, keep=None):
        self.iface = iface
        self.keep = keep

    @property
    def __cuda_array_interface__(self):
        return self.iface


def cai_of(array, **overrides):
    """A CAI v3 dict describing a host array's memory (for device=(2, 0)
    tests that never touch the data)."""
    iface = {
        "shape": array.shape,
        "typestr": array.dtype.str,
        "data": (array.__array_interface__["data"][0],
                 not array.flags.writeable),
        "strides": None if array.flags.c_contiguous else array.strides,
        "version": 3,
    }
    iface.update(overrides)
    return iface


def data_pointer(array):
    return array.__array_interface__["data"][0]


def collect():
    for _ in range(3):
        gc.collect()


@pytest.fixture
def counting_producer():
    """A host producer whose death is observable through a weakref."""
    def make(array):
        producer = HostProducer(array)
        return producer, weakref.ref(producer)
    return make
