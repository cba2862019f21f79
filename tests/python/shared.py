"""What the Python tests and the fuzzer (tests/fuzz/fuzz_python.py, run
standalone under atheris) both use: the DLPack C structs and the exchange
API's table as ctypes reads them, the capsule calls, and producers that
are their own buffer.  Plain ctypes: no pytest, no NumPy."""
import ctypes

_P = ctypes.POINTER


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", _P(ctypes.c_int64)), ("strides", _P(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


VERSIONED_DELETER = ctypes.CFUNCTYPE(None, _P(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
    ("deleter", VERSIONED_DELETER), ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor)]


class DLManagedTensor(ctypes.Structure):
    pass


LEGACY_DELETER = ctypes.CFUNCTYPE(None, _P(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor),
                            ("manager_ctx", ctypes.c_void_p),
                            ("deleter", LEGACY_DELETER)]


# The DLPack C exchange API table, as a C consumer reads it.  PYFUNCTYPE:
# the GIL stays held and a Python error set by the callee is raised.
class Header(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("prev_api", ctypes.c_void_p)]


class ExchangeAPI(ctypes.Structure):
    _fields_ = [("header", Header), ("allocator", ctypes.c_void_p),
                ("from_py", ctypes.c_void_p), ("to_py", ctypes.c_void_p),
                ("dltensor_from_py", ctypes.c_void_p),
                ("work_stream", ctypes.c_void_p)]


FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object,
                            _P(_P(DLManagedTensorVersioned)))
TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, _P(DLManagedTensorVersioned),
                          _P(ctypes.py_object))
DLTENSOR_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object,
                                     _P(DLTensor))
WORK_STREAM = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32,
                                _P(ctypes.c_void_p))

# The capsule calls, as functions of our own with their prototypes set
# once: ctypes.pythonapi's objects are shared, and setting their argtypes
# while another thread calls them fails with the GIL off (3.13t).
def pythonapi_function(name, restype, *argtypes):
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


PyCapsule_New = pythonapi_function("PyCapsule_New", ctypes.py_object,
                                   ctypes.c_void_p, ctypes.c_char_p,
                                   ctypes.c_void_p)
PyCapsule_GetName = pythonapi_function("PyCapsule_GetName", ctypes.c_char_p,
                                       ctypes.py_object)
PyCapsule_GetPointer = pythonapi_function(
    "PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object,
    ctypes.c_char_p)
PyCapsule_SetName = pythonapi_function("PyCapsule_SetName", ctypes.c_int,
                                       ctypes.py_object, ctypes.c_char_p)
PyCapsule_IsValid = pythonapi_function("PyCapsule_IsValid", ctypes.c_int,
                                       ctypes.py_object, ctypes.c_char_p)


def exchange_table(cls):
    """The exchange API table a type publishes in its own dict."""
    return ExchangeAPI.from_address(PyCapsule_GetPointer(
        cls.__dict__["__dlpack_c_exchange_api__"], b"dlpack_exchange_api"))


# ---- Producers that are their own buffer (data None or absent).

class ArrayInterface:
    """Exposes self.iface, set on the instance, as __array_interface__."""

    iface = None

    @property
    def __array_interface__(self):
        return self.iface


class OwnBuffer(ArrayInterface, bytearray):
    """A writable object that is its own buffer."""


class OwnBytes(ArrayInterface, bytes):
    """A read-only object that is its own buffer."""
