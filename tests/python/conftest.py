"""Shared producers and helpers for the caibridge Python tests."""
import ctypes
import gc
import importlib
import os
import shutil
import subprocess
import sysconfig
import threading
import weakref

import numpy as np
import pytest

import caibridge  # noqa: F401  (loaded before the helpers below)
from shared import (  # noqa: F401  (re-exported to the tests)
    DLTENSOR_FROM_PY, FROM_PY, LEGACY_DELETER, TO_PY, VERSIONED_DELETER,
    WORK_STREAM, ArrayInterface, DLDataType, DLDevice, DLManagedTensor,
    DLManagedTensorVersioned, DLPackVersion, DLTensor, ExchangeAPI, Header,
    OwnBuffer, OwnBytes, PyCapsule_GetName, PyCapsule_GetPointer,
    PyCapsule_IsValid, PyCapsule_New, PyCapsule_SetName, exchange_table)


def consumer(name, *submodules):
    """An optional consumer: (module, mark).  The module is None when it
    cannot be imported, and the mark skips a test that needs it, naming why:
    CAIBRIDGE_WHY_NO_<NAME> when set (CI's interpreter matrix says there why
    it did not install it), else the import error."""
    why = None
    if name == "jax" and os.environ.get("CAIBRIDGE_TEST_NO_JAX"):
        return None, pytest.mark.skip(
            reason="jax: CAIBRIDGE_TEST_NO_JAX is set (JAX's XLA does not "
                   "run under AddressSanitizer)")
    try:
        module = importlib.import_module(name)
        for sub in submodules:
            importlib.import_module(name + "." + sub)
    except ImportError as exc:
        module = None
        why = os.environ.get("CAIBRIDGE_WHY_NO_" + name.upper()) or (
            "not installed for this Python (%s)" % exc)
    return module, pytest.mark.skipif(module is None,
                                      reason="%s: %s" % (name, why))


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


class Capsule:
    """A host producer of one ready capsule, as np.from_dlpack and JAX's
    from_dlpack take one."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        return self.capsule


class HostProducer(ArrayInterface):
    """Exposes only __array_interface__ (not NumPy's DLPack), like a
    third-party host producer; keeps the array it describes."""

    def __init__(self, array, **overrides):
        self.array = array
        self.iface = dict(array.__array_interface__, **overrides)


class InterfaceProducer(ArrayInterface):
    """An __array_interface__ producer from a plain dict; keep holds what
    its pointer points into."""

    def __init__(self, iface, keep=None):
        self.iface = iface
        self.keep = keep


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


def held_by(make, take, release=None):
    """The object make() returns outlives the caller's last reference to it
    while the holder take(obj) returns lives, and dies once the holder is
    gone (after release(holder), when given, has run)."""
    obj = make()
    alive = weakref.ref(obj)
    holder = take(obj)
    del obj
    collect()
    assert alive() is not None, "the holder keeps it alive"
    if release is not None:
        release(holder)
    del holder
    collect()
    assert alive() is None, "released with its holder"


class DLPackWrapper:
    """A DLPack-only type around any DLPack producer; records the keyword
    arguments of each __dlpack__ call."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = []

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.inner.__dlpack__(**kwargs)


# ---- Optional consumers, skipped per test (never per file) with a reason.

def required(name, *submodules):
    """The consumer for a fixture, or a skip naming why it is missing."""
    module, mark = consumer(name, *submodules)
    if module is None:
        pytest.skip(mark.kwargs["reason"])
    return module


@pytest.fixture(scope="session")
def torch():
    return required("torch")


@pytest.fixture(scope="session")
def jax():
    """JAX with 64-bit types.  CAIBRIDGE_TEST_NO_JAX=1 (set by the
    AddressSanitizer run: XLA does not run under ASan) skips the tests that
    use it, and only those."""
    if os.environ.get("CAIBRIDGE_TEST_NO_JAX"):
        pytest.skip("CAIBRIDGE_TEST_NO_JAX is set (JAX's XLA does not run "
                    "under AddressSanitizer)")
    jax = required("jax", "dlpack")
    jax.config.update("jax_enable_x64", True)  # int64, float64, complex128
    return jax


@pytest.fixture
def counting_producer():
    """A host producer whose death is observable through a weakref."""
    def make(array):
        producer = HostProducer(array)
        return producer, weakref.ref(producer)
    return make


# ---- The DLPack C side (its structs: shared.py, shared with the fuzzer).

def managed(capsule):
    """The DLManagedTensorVersioned a versioned capsule holds."""
    return DLManagedTensorVersioned.from_address(
        PyCapsule_GetPointer(capsule, b"dltensor_versioned"))


def tensor_from_py(api, obj):
    """The exchange table's managed_tensor_from_py_object_no_sync, called
    as a C consumer calls it: the tensor, whose deleter the caller runs."""
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    assert FROM_PY(api.from_py)(obj, ctypes.byref(out)) == 0
    return out


def call_deleter(tensor):
    tensor.contents.deleter(tensor)


class FakeTensor:
    """A DLPack tensor made in Python over a NumPy array, whose deleter
    counts its calls; capsule() wraps it without a destructor, so only a
    consumer can run the deleter."""

    def __init__(self, array, versioned=True, major=1, device=(1, 0),
                 flags=0):
        self.array = array
        self.calls = 0
        self.versioned = versioned
        self.shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
        self.strides = (ctypes.c_int64 * max(array.ndim, 1))(
            *[s // array.itemsize for s in array.strides])
        tensor = DLTensor(
            data=data_pointer(array), device=DLDevice(*device),
            ndim=array.ndim, dtype=dtype_of(array.dtype),
            shape=self.shape, strides=self.strides, byte_offset=0)
        if versioned:
            self.deleter = VERSIONED_DELETER(self._deleted)
            self.struct = DLManagedTensorVersioned(
                version=DLPackVersion(major, 0), manager_ctx=None,
                deleter=self.deleter, flags=flags, dl_tensor=tensor)
        else:
            self.deleter = LEGACY_DELETER(self._deleted)
            self.struct = DLManagedTensor(dl_tensor=tensor, manager_ctx=None,
                                          deleter=self.deleter)

    def _deleted(self, _pointer):
        self.calls += 1

    def capsule(self):
        name = b"dltensor_versioned" if self.versioned else b"dltensor"
        return PyCapsule_New(ctypes.addressof(self.struct), name, None)


def dtype_of(dtype):
    dtype = np.dtype(dtype)
    code = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}[dtype.kind]
    return DLDataType(code, dtype.itemsize * 8, 1)


# ---- Taking a tensor out of a capsule as a consumer does, and running its
# deleter on a native thread that has no Python thread state.
# Capsule names must outlive the capsule: module-level bytes objects.
USED_VERSIONED = b"used_dltensor_versioned"
USED_LEGACY = b"used_dltensor"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong),
                                 ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_void_p]
_libc.pthread_create.restype = ctypes.c_int
_libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
_libc.pthread_join.restype = ctypes.c_int

# DLManagedTensorVersioned: version (8 bytes), manager_ctx, deleter.
# DLManagedTensor: DLTensor (48 bytes), manager_ctx, deleter.
DELETER_OFFSET = {True: 16, False: 56}


def take_tensor(capsule):
    """Takes the tensor out of a DLPack capsule as a consumer would (the
    capsule is renamed used, so only we may delete it); returns (tensor
    address, deleter address)."""
    versioned = PyCapsule_IsValid(capsule, b"dltensor_versioned") == 1
    name = b"dltensor_versioned" if versioned else b"dltensor"
    tensor = PyCapsule_GetPointer(capsule, name)
    assert tensor, "not a DLPack capsule"
    assert PyCapsule_SetName(
        capsule, USED_VERSIONED if versioned else USED_LEGACY) == 0
    deleter = ctypes.c_void_p.from_address(tensor +
                                           DELETER_OFFSET[versioned]).value
    assert deleter, "the tensor has no deleter"
    return tensor, deleter


def start_native(deleter, tensor):
    """A pthread whose start routine is the deleter: it runs with no
    Python thread state.  (void (*)(T *) called as void *(*)(void *): the
    same registers on every ABI CPython runs on; the result is unused.)"""
    tid = ctypes.c_ulong()
    rc = _libc.pthread_create(ctypes.byref(tid), None, deleter, tensor)
    assert rc == 0, f"pthread_create: {os.strerror(rc)}"
    return tid.value


def join_native(tid):
    # ctypes releases the GIL for the call, so the deleter can take it.
    assert _libc.pthread_join(tid, None) == 0


class Worker(threading.Thread):
    """A thread whose exception fails the test: join() raises it again in
    the thread that joins (a bare thread's exception is only printed)."""

    def __init__(self, target, *args):
        super().__init__(target=target, args=args)
        self.error = None

    def run(self):
        try:
            super().run()
        except BaseException as e:  # noqa: B902 - handed to join()
            self.error = e

    def join(self, timeout=None):
        super().join(timeout)
        if self.error is not None:
            raise AssertionError(f"{self.name} raised {self.error!r}") \
                from self.error


def build_extension(tmp_path_factory, name):
    """Builds tests/python/<name>.c as an extension module for this
    interpreter, with its own compiler settings; the module's directory.
    Skips, naming why, without a C compiler."""
    here = os.path.dirname(os.path.abspath(__file__))
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(cc[0]) is None:
        pytest.skip(f"no C compiler ({cc[0]}) to build the test module "
                    f"{name}")
    out = tmp_path_factory.mktemp(name)
    target = out / (name + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(cc + ["-shared", "-fPIC", "-O1",
                         "-I", sysconfig.get_paths()["include"],
                         "-I", os.path.join(here, "..", "..", "include"),
                         os.path.join(here, name + ".c"),
                         "-o", str(target), "-lpthread"], check=True)
    return str(out)
