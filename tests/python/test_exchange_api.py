"""The DLPack C exchange API (DLPack 1.2/1.3) that DLPackView publishes on
its type, driven the way a C consumer drives it (through ctypes, holding
the GIL as the API requires) and by a real consumer, tvm-ffi."""
import ctypes
import os
import subprocess
import sys
import textwrap
import warnings
import weakref

import numpy as np
import pytest

import caibridge
from conftest import (DLTENSOR_FROM_PY, FROM_PY, TO_PY, VERSIONED_DELETER,
                      WORK_STREAM, Header,
                      DLManagedTensorVersioned, DLTensor, ExchangeAPI,
                      FakeTensor, HostProducer, PyCapsule_New, call_deleter,
                      collect, data_pointer, dtype_of, exchange_table,
                      filled)

P = ctypes.POINTER


SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p,
                             ctypes.c_char_p)
# PYFUNCTYPE: the GIL stays held, and a Python error the callee sets is
# raised, as a C consumer would see it.
ALLOCATOR = ctypes.PYFUNCTYPE(ctypes.c_int, P(DLTensor),
                              P(P(DLManagedTensorVersioned)), ctypes.c_void_p,
                              SET_ERROR)


def table():
    return exchange_table(caibridge.DLPackView)


def test_published_on_the_type():
    assert "__dlpack_c_exchange_api__" in caibridge.DLPackView.__dict__
    api = table()
    assert (api.header.major, api.header.minor) == (1, 3)
    assert api.header.prev_api is None
    for name in ("allocator", "from_py", "to_py", "dltensor_from_py",
                 "work_stream"):
        assert getattr(api, name), f"{name} is set"


@pytest.mark.parametrize("make", [
    lambda: filled((3, 4), "float32"),
    lambda: filled((4, 6), "int16")[::2, ::-3],
    lambda: np.broadcast_to(filled((3,), "complex128"), (2, 3)),
    lambda: filled((), "uint8"),
], ids=["contiguous", "strided", "broadcast", "0-d"])
def test_managed_tensor_from_view(make):
    array = make()
    producer = HostProducer(array)
    alive = weakref.ref(producer)
    view = caibridge.as_dlpack(producer)
    out = P(DLManagedTensorVersioned)()
    assert FROM_PY(table().from_py)(view, ctypes.byref(out)) == 0
    managed = out.contents
    t = managed.dl_tensor
    assert (managed.version.major, managed.version.minor) == (1, 3)
    assert t.data == data_pointer(array)
    assert (t.device.device_type, t.device.device_id) == (1, 0)
    assert t.ndim == array.ndim
    expected = dtype_of(array.dtype)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (
        expected.code, expected.bits, 1)
    assert [t.shape[i] for i in range(t.ndim)] == list(array.shape)
    assert [t.strides[i] for i in range(t.ndim)] == [
        s // array.itemsize for s in array.strides]
    assert managed.flags == (0 if array.flags.writeable else 1)
    del view, producer
    collect()
    assert alive() is not None, "the tensor holds the producer"
    call_deleter(out)
    collect()
    assert alive() is None, "its deleter released it"


def test_dltensor_from_view_borrows_view_storage():
    array = filled((5, 6), "float64")[1::2, ::-1]
    view = caibridge.as_dlpack(HostProducer(array))
    before = sys.getrefcount(view)
    t = DLTensor()
    assert DLTENSOR_FROM_PY(table().dltensor_from_py)(view, ctypes.byref(t)) \
        == 0
    assert sys.getrefcount(view) == before, "borrowed: no reference taken"
    assert t.data == data_pointer(array)
    assert t.byte_offset == 0
    assert [t.shape[i] for i in range(2)] == list(array.shape)
    assert [t.strides[i] for i in range(2)] == [s // 8 for s in array.strides]
    second = DLTensor()
    DLTENSOR_FROM_PY(table().dltensor_from_py)(view, ctypes.byref(second))
    assert ctypes.addressof(second.shape.contents) == \
        ctypes.addressof(t.shape.contents), "the view's own storage is lent"


def test_wrong_object_type_raises():
    out = P(DLManagedTensorVersioned)()
    with pytest.raises(TypeError, match="DLPackView"):
        FROM_PY(table().from_py)(np.zeros(2), ctypes.byref(out))
    with pytest.raises(TypeError, match="DLPackView"):
        DLTENSOR_FROM_PY(table().dltensor_from_py)(
            [], ctypes.byref(DLTensor()))


def test_readonly_flag_through_table():
    array = filled((4,), "int32")
    array.flags.writeable = False
    out = P(DLManagedTensorVersioned)()
    FROM_PY(table().from_py)(caibridge.as_dlpack(HostProducer(array)),
                             ctypes.byref(out))
    assert out.contents.flags == 1
    call_deleter(out)


def test_managed_tensor_to_py_object():
    fake = FakeTensor(filled((2, 3), "int64")[:, ::2])
    result = ctypes.py_object()
    tensor = ctypes.cast(ctypes.addressof(fake.struct),
                         P(DLManagedTensorVersioned))
    assert TO_PY(table().to_py)(tensor, ctypes.byref(result)) == 0
    view = result.value
    # The callee handed over a new reference; ctypes does not own it.
    ctypes.pythonapi.Py_DecRef.argtypes = [ctypes.py_object]
    ctypes.pythonapi.Py_DecRef(view)
    del result
    assert isinstance(view, caibridge.CAIView)
    np.testing.assert_array_equal(np.asarray(view), fake.array)
    assert fake.calls == 0
    del view
    collect()
    assert fake.calls == 1, "the view ran the deleter once"


def test_managed_tensor_to_py_object_refuses_after_deleting():
    fake = FakeTensor(filled((2,), "float32"), major=2)
    tensor = ctypes.cast(ctypes.addressof(fake.struct),
                         P(DLManagedTensorVersioned))
    with pytest.raises(BufferError):
        TO_PY(table().to_py)(tensor, ctypes.byref(ctypes.py_object()))
    assert fake.calls == 1, "ownership was taken: the deleter ran"


def test_allocator():
    shape = (ctypes.c_int64 * 2)(3, 4)
    proto = DLTensor(ndim=2, shape=shape, dtype=dtype_of("float32"))
    proto.device.device_type, proto.device.device_id = 1, 0
    errors = []
    set_error = SET_ERROR(lambda ctx, kind, msg: errors.append((kind, msg)))
    out = P(DLManagedTensorVersioned)()
    allocate = ALLOCATOR(table().allocator)
    assert allocate(ctypes.byref(proto), ctypes.byref(out), None,
                    set_error) == 0
    t = out.contents.dl_tensor
    assert t.data % 64 == 0
    assert [t.shape[i] for i in range(2)] == [3, 4]
    assert [t.strides[i] for i in range(2)] == [4, 1]
    memory = (ctypes.c_float * 12).from_address(t.data)
    memory[11] = 2.5
    assert memory[11] == 2.5
    assert not errors
    call_deleter(out)

    proto.device.device_type = 2
    assert allocate(ctypes.byref(proto), ctypes.byref(out), None,
                    set_error) == -1
    assert errors and errors[0][0] == b"BufferError"


def test_current_work_stream_is_default():
    stream = ctypes.c_void_p(1234)
    assert WORK_STREAM(table().work_stream)(1, 0, ctypes.byref(stream)) == 0
    assert stream.value is None, "host data: no stream"
    # CUDA: the legacy default stream as its handle 1, never NULL (which
    # consumers built for per-thread default streams read as stream 2).
    assert WORK_STREAM(table().work_stream)(2, 0, ctypes.byref(stream)) == 0
    assert stream.value == 1


# ---- A foreign producer's table, read by from_dlpack ---------------------

FOREIGN_FROM_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object,
                                   P(P(DLManagedTensorVersioned)))
FOREIGN_WORK_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32,
                                       ctypes.c_int32, P(ctypes.c_void_p))
EXCHANGE_API_NAME = b"dlpack_exchange_api"  # outlives the capsules


class ForeignTable:
    """A producer type's DLPack exchange table made with ctypes: it hands
    out FakeTensors on device, and its current_work_stream answers what the
    test sets (work; fails with -1 when fail is set), recording each call.
    null_deleter hands out tensors without a deleter; refuse makes the
    table fail (-1, no Python error set) instead of handing one out."""

    def __init__(self, device):
        self.device, self.work, self.fail = device, None, False
        self.null_deleter, self.refuse = False, False
        self.tensors, self.asked = [], []
        self._from_py = FOREIGN_FROM_PY(self.from_py)
        self._work_stream = FOREIGN_WORK_STREAM(self.work_stream)
        self.api = ExchangeAPI(
            header=Header(1, 3, None),
            from_py=ctypes.cast(self._from_py, ctypes.c_void_p).value,
            work_stream=ctypes.cast(self._work_stream, ctypes.c_void_p).value)
        capsule = PyCapsule_New(ctypes.addressof(self.api), EXCHANGE_API_NAME,
                                None)
        self.producer_type = type("ForeignArray", (), {
            "__dlpack_c_exchange_api__": capsule,
            "__init__": lambda obj, array: setattr(obj, "array", array)})

    def from_py(self, obj, out):
        if self.refuse:
            return -1
        fake = FakeTensor(obj.array, device=self.device)
        if self.null_deleter:
            fake.struct.deleter = VERSIONED_DELETER()
        self.tensors.append(fake)
        out[0] = ctypes.cast(ctypes.addressof(fake.struct),
                             P(DLManagedTensorVersioned))
        return 0

    def work_stream(self, device_type, device_id, out):
        self.asked.append((device_type, device_id))
        out[0] = self.work
        return -1 if self.fail else 0


@pytest.mark.parametrize("work, reported", [
    (None, 1),  # NULL is the legacy default stream, not the per-thread one
    (0x5000, 0x5000),
], ids=["default", "a-stream"])
def test_foreign_table_current_work_stream_reported(work, reported):
    foreign = ForeignTable(device=(2, 3))
    foreign.work = work
    array = filled((2, 3), "float32")
    view = caibridge.from_dlpack(foreign.producer_type(array))
    assert foreign.asked == [(2, 3)], "asked for the tensor's device"
    cai = view.__cuda_array_interface__
    assert cai["stream"] == reported
    assert cai["data"] == (data_pointer(array), False)
    assert cai["shape"] == (2, 3)
    assert foreign.tensors[0].calls == 0
    del view
    collect()
    assert foreign.tensors[0].calls == 1, "the view ran the deleter once"


def test_foreign_table_work_stream_even_unordered():
    # stream=-1 orders nothing: the CAI stream is still the one the table
    # says the data is ready on (None would claim it is ready now).
    foreign = ForeignTable(device=(2, 0))
    foreign.work = 0x5000
    view = caibridge.from_dlpack(foreign.producer_type(filled((2,), "int8")),
                                 stream=-1)
    assert view.__cuda_array_interface__["stream"] == 0x5000
    assert foreign.asked == [(2, 0)]


def test_foreign_table_no_work_stream_for_host_data():
    host = ForeignTable(device=(1, 0))
    array = filled((2,), "int8")
    view = caibridge.from_dlpack(host.producer_type(array))
    assert view.__array_interface__["data"][0] == data_pointer(array)
    assert host.asked == []


def test_foreign_table_work_stream_failure():
    foreign = ForeignTable(device=(2, 0))
    foreign.fail = True
    with pytest.raises(BufferError, match="current_work_stream failed"):
        caibridge.from_dlpack(foreign.producer_type(filled((2,), "int8")))
    assert foreign.tensors[0].calls == 1, "the tensor taken was released"


def test_foreign_table_null_deleter_when_work_stream_fails():
    # DLPack allows a NULL deleter ("no way to provide a destructor"): the
    # tensor taken is dropped without a call, and the error is raised.
    foreign = ForeignTable(device=(2, 0))
    foreign.fail = True
    foreign.null_deleter = True
    with pytest.raises(BufferError, match="current_work_stream failed"):
        caibridge.from_dlpack(foreign.producer_type(filled((2,), "int8")))
    assert foreign.tensors[0].calls == 0


def test_foreign_table_null_deleter_view():
    foreign = ForeignTable(device=(2, 0))
    foreign.null_deleter = True
    array = filled((3,), "int8")
    view = caibridge.from_dlpack(foreign.producer_type(array))
    assert view.__cuda_array_interface__["data"][0] == data_pointer(array)
    del view
    collect()
    assert foreign.tensors[0].calls == 0


class DLPackOnly:
    """What a producer type with a table also has: __dlpack__, here
    NumPy's, recording its calls."""

    def __init__(self, array):
        self.array, self.calls = array, 0

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.calls += 1
        return self.array.__dlpack__(**kwargs)


def with_table(api, keep):
    """A DLPackOnly subclass whose type publishes api; keep holds what the
    table's pointers point into."""
    capsule = PyCapsule_New(ctypes.addressof(api), EXCHANGE_API_NAME, None)
    return type("Tabled", (DLPackOnly,), {
        "__dlpack_c_exchange_api__": capsule, "_keep": keep})


@pytest.mark.parametrize("missing", ["from_py", "work_stream"])
def test_foreign_table_missing_entry_is_no_table(missing):
    foreign = ForeignTable(device=(1, 0))
    setattr(foreign.api, missing, None)
    producer = with_table(foreign.api, foreign)(filled((4,), "int16"))
    before = caibridge._core._foreign_table_imports()
    view = caibridge.from_dlpack(producer)
    assert caibridge._core._foreign_table_imports() == before
    assert producer.calls == 1 and foreign.tensors == [], "__dlpack__ served"
    assert np.asarray(view).tolist() == [0, 1, 2, 3]


def test_foreign_table_found_through_prev_api():
    older = ForeignTable(device=(1, 0))
    newer = ExchangeAPI(header=Header(2, 0, ctypes.addressof(older.api)))
    producer = with_table(newer, older)(filled((4,), "int16"))
    view = caibridge.from_dlpack(producer)
    assert len(older.tensors) == 1 and producer.calls == 0, "table served"
    assert view.__array_interface__["data"][0] == \
        data_pointer(producer.array)


LOOPING_CHAIN = textwrap.dedent("""
    import ctypes, sys
    sys.path.insert(0, sys.argv[1])
    import caibridge
    from conftest import filled
    from test_exchange_api import ExchangeAPI, Header, with_table

    # Two tables of a major version we do not know, each the other's prev.
    a, b = ExchangeAPI(header=Header(2, 0)), ExchangeAPI(header=Header(3, 0))
    a.header.prev_api = ctypes.addressof(b)
    b.header.prev_api = ctypes.addressof(a)
    producer = with_table(a, b)(filled((3,), "int8"))
    print(caibridge.from_dlpack(producer).__array_interface__["shape"],
          producer.calls)
""")


def test_foreign_table_looping_prev_api_is_no_table():
    # Run apart: a walk that never ends would hang this process.  The
    # timeout only turns such a hang into a failure.
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", LOOPING_CHAIN, here],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["(3,)", "1"], "__dlpack__ served"


# ---- A table that refuses: __dlpack__ gives the producer's answer -------

def test_foreign_table_refusal_goes_to_dlpack():
    foreign = ForeignTable(device=(1, 0))
    foreign.refuse = True
    producer = with_table(foreign.api, foreign)(filled((2,), "int8"))
    view = caibridge.from_dlpack(producer)
    assert producer.calls == 1
    assert np.asarray(view).tolist() == [0, 1]


def test_foreign_table_refusal_without_dlpack_stands():
    foreign = ForeignTable(device=(1, 0))
    foreign.refuse = True
    with pytest.raises(BufferError, match="refused the object"):
        caibridge.from_dlpack(foreign.producer_type(filled((2,), "int8")))


def quantized(torch):
    with warnings.catch_warnings():  # deprecated in torch 2.10 and later
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.tensor([1.0, 2.0]), 0.1, 0,
                                         torch.quint8)


@pytest.mark.parametrize("make", [
    quantized,
    lambda torch: torch.tensor([[1.0, 0.0], [0.0, 2.0]]).to_sparse(),
], ids=["quantized", "sparse"])
def test_torch_refusals_are_torchs_own(torch, make):
    # torch's table raises RuntimeError; its __dlpack__, and so NumPy,
    # BufferError: caibridge answers as __dlpack__ does.
    tensor = make(torch)
    with pytest.raises(BufferError) as own:
        tensor.__dlpack__()
    with pytest.raises(BufferError) as ours:
        caibridge.from_dlpack(tensor)
    assert str(ours.value) == str(own.value)
    with pytest.raises(BufferError):
        np.from_dlpack(tensor)


# ---- A real consumer of the table ---------------------------------------

@pytest.fixture
def tvm_ffi():
    # Skips only the tests that need it: the ctypes tests above still run.
    return pytest.importorskip("tvm_ffi")


def test_tvm_ffi_consumes_through_the_table(tvm_ffi):
    # tvm-ffi tries the type's table first and falls back to a legacy
    # __dlpack__() only on BufferError.  Read-only data cannot go as a
    # legacy capsule, so success proves the table was used.
    array = filled((3, 4), "float32")
    array.flags.writeable = False
    producer = HostProducer(array)
    alive = weakref.ref(producer)
    view = caibridge.as_dlpack(producer)
    with pytest.raises(BufferError):
        view.__dlpack__()
    tensor = tvm_ffi.from_dlpack(view)
    assert tensor.data_ptr() == data_pointer(array)
    assert tuple(tensor.shape) == array.shape
    assert tuple(tensor.strides) == (4, 1)
    assert str(tensor.dtype) == "float32"
    np.testing.assert_array_equal(np.from_dlpack(tensor), array)
    del view, producer
    collect()
    assert alive() is not None
    del tensor
    collect()
    assert alive() is None, "tvm-ffi ran the deleter"


def test_tvm_ffi_strided(tvm_ffi):
    array = filled((6, 4), "int32")[::2, ::-1]
    tensor = tvm_ffi.from_dlpack(caibridge.as_dlpack(HostProducer(array)))
    assert tensor.data_ptr() == data_pointer(array)
    assert tuple(tensor.strides) == (8, -1)
