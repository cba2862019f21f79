"""from_dlpack: DLPack producers and capsules to array interfaces, and the
CUDA round trip with the device given (no GPU needed)."""
import os
import sys
import weakref

import numpy as np
import pytest

import caibridge
from caibridge import _core
from conftest import (CAIProducer, FakeTensor, HostProducer, PyCapsule_GetName,
                      PyCapsule_New, cai_of, collect, data_pointer, filled,
                      held_by)



class CountingProducer:
    """A DLPack producer over its own array; the array's death (weakref)
    shows when the consumer ran the deleter."""

    def __init__(self, array, legacy_only=False):
        self.array = array
        self.legacy_only = legacy_only
        self.requests = []

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None,
                   copy=None):
        self.requests.append({"stream": stream, "max_version": max_version})
        if self.legacy_only and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword "
                            "argument 'max_version'")
        return self.array.__dlpack__(stream=stream, max_version=max_version)


def host_interface(view):
    assert not hasattr(view, "__cuda_array_interface__")
    return view.__array_interface__


def test_from_numpy_shares_memory():
    source = filled((3, 4), "float64")
    view = caibridge.from_dlpack(source)
    result = np.asarray(view)
    assert np.shares_memory(result, source)
    assert data_pointer(result) == data_pointer(source)
    np.testing.assert_array_equal(result, source)
    iface = host_interface(view)
    assert iface["version"] == 3
    assert iface["strides"] is None
    assert iface["typestr"] == "<f8"


def test_from_numpy_strided_and_readonly():
    source = filled((6, 8), "int16")[::2, ::-3]
    view = caibridge.from_dlpack(source)
    iface = view.__array_interface__
    assert iface["strides"] == source.strides
    assert iface["data"] == (data_pointer(source), False)
    np.testing.assert_array_equal(np.asarray(view), source)

    frozen = filled((5,), "float32")
    frozen.flags.writeable = False
    view = caibridge.from_dlpack(frozen)
    assert view.__array_interface__["data"][1] is True
    assert not np.asarray(view).flags.writeable


def test_from_numpy_deleter_runs_once():
    source = filled((4,), "int32")
    alive = weakref.ref(source)
    view = caibridge.from_dlpack(source)
    result = np.asarray(view)
    del source, view
    collect()
    assert alive() is not None, "the array outlives its last user"
    result[0] = 5
    del result
    collect()
    assert alive() is None, "the deleter ran and released the array"


def test_interface_dict_is_fresh_on_each_read():
    # As ndarray.__array_interface__: a consumer may edit the dict it got.
    view = caibridge.from_dlpack(filled((2,), "uint8"))
    first = view.__array_interface__
    assert first is not view.__array_interface__
    assert first == view.__array_interface__


def test_from_torch_uses_torch_exchange_table(torch):
    source = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    before = _core._foreign_table_imports()
    view = caibridge.from_dlpack(source)
    assert _core._foreign_table_imports() == before + 1
    result = np.asarray(view)
    assert data_pointer(result) == source.data_ptr()
    np.testing.assert_array_equal(result, source.numpy())
    source[0, 0] = -1
    assert result[0, 0] == -1
    del source
    collect()
    assert result.sum() == sum(range(12)) - 0 - 1


def test_torch_table_is_used_instead_of_python_protocol(torch, monkeypatch):
    # torch.Tensor's own table serves a plain tensor: its __dlpack__ is not
    # called.  (A subclass, which may override __dlpack__, is served by its
    # __dlpack__: test_interface_semantics.py.)
    def refuse(*args, **kwargs):
        raise AssertionError("__dlpack__ should not be called")

    monkeypatch.setattr(torch.Tensor, "__dlpack__", refuse)
    view = caibridge.from_dlpack(torch.arange(5.0))
    assert np.asarray(view).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_from_torch_strided(torch):
    source = torch.arange(24, dtype=torch.int64).reshape(4, 6)[:, 1::2].t()
    view = caibridge.from_dlpack(source)
    result = np.asarray(view)
    np.testing.assert_array_equal(result, source.numpy())
    assert view.__array_interface__["strides"] == tuple(
        s * 8 for s in source.stride())


def test_from_jax_shares_memory(jax):
    source = jax.numpy.arange(10.0, dtype=jax.numpy.float32) * 3
    view = caibridge.from_dlpack(source)
    result = np.asarray(view)
    assert data_pointer(result) == source.unsafe_buffer_pointer()
    np.testing.assert_array_equal(result, np.asarray(source))


def test_counting_producer_versioned_first():
    def take(array):
        producer = CountingProducer(array)
        view = caibridge.from_dlpack(producer)
        assert producer.requests == [{"stream": None, "max_version": (1, 3)}]
        return view

    held_by(lambda: filled((3,), "float32"), take)


def test_counting_producer_legacy_fallback():
    producer = CountingProducer(filled((3,), "float32"), legacy_only=True)
    view = caibridge.from_dlpack(producer)
    assert [r["max_version"] for r in producer.requests] == [(1, 3), None]
    np.testing.assert_array_equal(np.asarray(view), producer.array)


@pytest.mark.parametrize("versioned", [False, True])
def test_from_capsule_marks_it_used(versioned):
    source = filled((4,), "int8")
    capsule = source.__dlpack__(max_version=(1, 0) if versioned else None)
    view = caibridge.from_dlpack(capsule)
    name = b"used_dltensor_versioned" if versioned else b"used_dltensor"
    assert PyCapsule_GetName(capsule) == name
    with pytest.raises(ValueError, match="already taken"):
        caibridge.from_dlpack(capsule)
    np.testing.assert_array_equal(np.asarray(view), source)


@pytest.mark.parametrize("versioned", [False, True])
def test_deleter_runs_exactly_once(versioned):
    fake = FakeTensor(filled((2, 3), "float32"), versioned=versioned)
    view = caibridge.from_dlpack(fake.capsule())
    np.testing.assert_array_equal(np.asarray(view), fake.array)
    assert fake.calls == 0
    del view
    collect()
    assert fake.calls == 1


def test_newer_major_version_refused_after_only_its_deleter():
    fake = FakeTensor(filled((2,), "float32"), major=2)
    with pytest.raises(BufferError, match="version 2"):
        caibridge.from_dlpack(fake.capsule())
    assert fake.calls == 1


def test_unsupported_device_refused_after_deleter():
    fake = FakeTensor(filled((2,), "float32"), device=(10, 0))
    with pytest.raises(BufferError, match="device type 10"):
        caibridge.from_dlpack(fake.capsule())
    assert fake.calls == 1


def test_readonly_flag_honoured():
    fake = FakeTensor(filled((2,), "float32"), flags=1)
    view = caibridge.from_dlpack(fake.capsule())
    assert view.__array_interface__["data"][1] is True
    del view
    collect()
    assert fake.calls == 1


def test_not_a_producer():
    with pytest.raises(TypeError, match="DLPack producer"):
        caibridge.from_dlpack(object())
    with pytest.raises(TypeError, match="not a DLPack tensor"):
        caibridge.from_dlpack(PyCapsule_New(1, b"something_else", None))


# ---- The CUDA side, with the device given explicitly --------------------

CUDA_DEVICES = [(2, 0), (2, 1), (3, 0), (13, 0)]


def cuda_round_trip(array, device=(2, 0), stream=None, **overrides):
    producer = CAIProducer(cai_of(array, **overrides), keep=array)
    view = caibridge.as_dlpack(producer, device=device)
    assert view.__dlpack_device__() == device
    kwargs = {} if stream is None else {"stream": stream}
    return caibridge.from_dlpack(view, **kwargs), producer


@pytest.mark.parametrize("device", CUDA_DEVICES)
@pytest.mark.parametrize("make", [
    lambda: filled((3, 4), "float32"),
    lambda: filled((4, 6), "int16")[::2, 1::2],
    lambda: filled((5, 3), "complex128").T,
    lambda: filled((), "uint8"),
    lambda: filled((0, 4), "float64"),
    lambda: np.broadcast_to(filled((3,), "int32"), (2, 3)),
], ids=["contiguous", "sliced", "transposed", "0-d", "zero-size",
        "broadcast"])
def test_cuda_round_trip_describes_same_memory(make, device):
    array = make()
    back, producer = cuda_round_trip(array, device=device)
    original = producer.__cuda_array_interface__
    cai = back.__cuda_array_interface__
    assert cai["version"] == 3
    assert cai["shape"] == original["shape"]
    assert cai["typestr"] == original["typestr"]
    if array.size:
        assert cai["data"] == original["data"]
    assert cai["data"][1] == (not array.flags.writeable)
    if array.flags.c_contiguous:
        assert cai["strides"] is None
    elif array.size:
        assert cai["strides"] == array.strides
    assert cai["stream"] == 1, "None means the legacy default stream"
    assert back.__dlpack_device__() == device
    if device[0] == 2:
        assert not hasattr(back, "__array_interface__")
        return
    # Pinned and managed memory is host memory too, read once the host has
    # waited for stream 1: without a CUDA driver that wait fails.
    try:
        host = back.__array_interface__
    except caibridge.CUDAError as exc:
        assert "CUDA error 35" in str(exc), str(exc)
    else:
        assert host == {k: v for k, v in cai.items() if k != "stream"}


class RecordingCUDAProducer:
    """A DLPack producer of CUDA memory (the device given, no GPU touched)
    that records the stream each __dlpack__ call asks for."""

    def __init__(self, array):
        self.view = caibridge.as_dlpack(CAIProducer(cai_of(array), keep=array),
                                        device=(2, 0))
        self.streams = []

    def __dlpack_device__(self):
        return self.view.__dlpack_device__()

    def __dlpack__(self, stream=None, max_version=None, dl_device=None,
                   copy=None):
        self.streams.append(stream)
        return self.view.__dlpack__(stream=stream, max_version=max_version)


class Stream:
    def __cuda_stream__(self):
        return (0, 1234)


@pytest.mark.parametrize("stream, asked, reported", [
    (None, 1, 1),  # the legacy default stream, as the DLPack spec says
    (1, 1, 1),
    (2, 2, 2),
    (0x7F00DEADBEEF, 0x7F00DEADBEEF, 0x7F00DEADBEEF),
    (Stream(), 1234, 1234),
], ids=["None", "legacy", "per-thread", "handle", "__cuda_stream__"])
def test_cuda_producer_asked_for_the_consumer_stream(stream, asked, reported):
    producer = RecordingCUDAProducer(filled((4,), "float32"))
    kwargs = {} if stream is None else {"stream": stream}
    back = caibridge.from_dlpack(producer, **kwargs)
    assert producer.streams == [asked], "the stream handed to __dlpack__"
    assert back.__cuda_array_interface__["stream"] == reported


def test_cuda_producer_unordered_is_refused():
    # -1 orders nothing and __dlpack__ names no stream: the CAI dict could
    # only say "stream: None", which claims the data is ready.
    producer = RecordingCUDAProducer(filled((4,), "float32"))
    with pytest.raises(ValueError, match="stream = -1"):
        caibridge.from_dlpack(producer, stream=-1)


def test_host_producer_asked_for_no_stream():
    producer = CountingProducer(filled((3,), "float32"))
    caibridge.from_dlpack(producer, stream=5)
    assert [r["stream"] for r in producer.requests] == [None], \
        "host memory takes no stream"


def test_cuda_stream_object():
    view = caibridge.as_dlpack(
        CAIProducer(cai_of(filled((2,), "int8"))), device=(2, 0))
    assert "dltensor" in repr(view.__dlpack__(stream=Stream()))
    with pytest.raises(TypeError, match="stream"):
        view.__dlpack__(stream=object())


def test_cuda_stream_zero_refused():
    with pytest.raises(ValueError, match="stream = 0"):
        cuda_round_trip(filled((4,), "float32"), stream=0)


def test_cuda_readonly_round_trip():
    array = filled((4,), "float32")
    array.flags.writeable = False
    back, _ = cuda_round_trip(array)
    assert back.__cuda_array_interface__["data"][1] is True


def test_cuda_round_trip_keeps_producer():
    held_by(lambda: CAIProducer(cai_of(filled((4,), "float32"))),
            lambda producer: caibridge.from_dlpack(
                caibridge.as_dlpack(producer, device=(2, 0))))


def test_cuda_capsule_stream_reported():
    array = filled((4,), "float32")
    view = caibridge.as_dlpack(CAIProducer(cai_of(array)), device=(2, 0))
    back = caibridge.from_dlpack(view.__dlpack__(stream=5), stream=5)
    assert back.__cuda_array_interface__["stream"] == 5
    back = caibridge.from_dlpack(view.__dlpack__(stream=-1))
    assert back.__cuda_array_interface__["stream"] is None


# ---- hostile DLPack producers


class Boom(RuntimeError):
    pass


class FakeProducer:
    def __init__(self, capsule=None, device=(1, 0), raises=None):
        self.capsule, self.device, self.raises = capsule, device, raises

    def __dlpack__(self, stream=None, max_version=None, dl_device=None,
                   copy=None):
        if self.raises is not None:
            raise self.raises("nope")
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def fresh_capsule():
    return caibridge.to_dlpack(HostProducer(filled((4, 4), "float32")),
                               max_version=(1, 3))


@pytest.mark.parametrize("case,expected,needle", [
    ("not a capsule", TypeError, "capsule"),
    ("foreign capsule", TypeError, "capsule"),
    ("used capsule", ValueError, "already"),
    ("device not a tuple", TypeError, "__dlpack_device__"),
    ("device type 0", ValueError, "device_type"),
    ("device id negative", ValueError, "device_id"),
    ("__dlpack__ raises", Boom, "nope"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_hostile_dlpack_producer(case, expected, needle):
    if case == "not a capsule":
        p = FakeProducer(capsule=[1, 2])
    elif case == "foreign capsule":
        p = FakeProducer(capsule=PyCapsule_New(id(fresh_capsule),
                                               b"something_else", None))
    elif case == "used capsule":
        c = fresh_capsule()
        caibridge.from_dlpack(c)
        p = FakeProducer(capsule=c)
    elif case == "device not a tuple":
        p = FakeProducer(capsule=fresh_capsule(), device=[1, 0])
    elif case == "device type 0":
        p = FakeProducer(capsule=fresh_capsule(), device=(0, 0))
    elif case == "device id negative":
        p = FakeProducer(capsule=fresh_capsule(), device=(1, -1))
    else:
        p = FakeProducer(raises=Boom)
    before = sys.getrefcount(p)
    with pytest.raises(expected) as info:
        caibridge.from_dlpack(p)
    assert needle.lower() in str(info.value).lower()
    del info
    assert sys.getrefcount(p) == before


# ---- Pinned and managed memory: host memory to NumPy as well -------------

@pytest.mark.parametrize("device", [(3, 0), (13, 0)],
                         ids=["pinned", "managed"])
def test_pinned_and_managed_views_read_by_numpy(device):
    # A capsule with no stream asked: the data is ready (stream None), so
    # no wait is needed and none is made (no CUDA driver here).
    array = filled((2, 3), "float32")
    tensor = FakeTensor(array, device=device)
    view = caibridge.from_dlpack(tensor.capsule())
    host = view.__array_interface__
    assert "stream" not in host, "the CAI 'stream' is not NumPy's"
    assert host == {k: v for k, v in view.__cuda_array_interface__.items()
                    if k != "stream"}
    result = np.asarray(view)
    assert result.dtype == np.float32, "not an object array"
    assert data_pointer(result) == data_pointer(array), "zero-copy"
    np.testing.assert_array_equal(result, array)


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"),
                    reason="a CUDA driver is installed: this case needs a "
                    "machine without one")
def test_pinned_view_host_read_without_a_driver():
    # The view reports stream 5; with no CUDA driver no work can have been
    # queued on it, so a host read needs no wait and no call fails.
    data = filled((4,), "int8")
    tensor = FakeTensor(data, device=(3, 0))
    view = caibridge.from_dlpack(tensor.capsule(), stream=5)
    assert view.__cuda_array_interface__["stream"] == 5
    assert view.__array_interface__["data"][0] == data.ctypes.data


def test_device_memory_view_has_no_array_interface():
    tensor = FakeTensor(filled((4,), "int8"), device=(2, 0))
    view = caibridge.from_dlpack(tensor.capsule())
    with pytest.raises(AttributeError, match="CUDA device memory"):
        view.__array_interface__
