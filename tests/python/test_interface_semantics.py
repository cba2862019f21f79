"""The array interface read as NumPy reads it, and the rules around it.

One test (or a few) per rule: what `data`, `offset` and `typestr` mean
(NumPy's reading), which exception says what, that no layout can reach
outside its producer's memory, and the rules of the views and streams
around them: legacy imports read-only, the exchange table used only where
it gives what __dlpack__ gives, device= checked against the interface, one
dict per read, the streams written into a CAI dict, ASCII-safe messages.
The generated comparison with NumPy is test_numpy_oracle.py.
"""
import array
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import caibridge
from conftest import CAIProducer, InterfaceProducer, OwnBuffer, OwnBytes

CUDA = (2, 0)  # given explicitly: describing needs no GPU


def Iface(keep=None, **iface):
    return InterfaceProducer(iface, keep)


def Cai(keep=None, **iface):
    return CAIProducer(iface, keep)


def over_zeros(shape, typestr, **entries):
    """A producer of these entries over 64 zero bytes it keeps."""
    a = np.zeros(8, np.float64)
    return Iface(a, shape=shape, typestr=typestr, data=(a.ctypes.data, False),
                 version=3, **entries)


def via_numpy(producer, **kw):
    return np.from_dlpack(caibridge.as_dlpack(producer, **kw))


def address(a):
    return a.__array_interface__["data"][0]


# ---- Memory safety: nothing reaches outside the producer's memory

@pytest.mark.parametrize("offset, strides", [
    (2**63 - 1, None), (2**63 - 8, None), (2**62, (2**62,)),
    (4, (2**63 - 4,)), (1, (2**63 - 2,)), (4, (-2**63 + 4,)),
    (0, (2**62, 2**62)),
])
def test_offsets_and_strides_near_2_63_are_refused(offset, strides):
    shape = (1,) if strides is None else (2,) * len(strides)
    p = Iface(shape=shape, typestr="|u1", data=bytearray(8), offset=offset,
              strides=strides, version=3)
    with pytest.raises(ValueError, match="offset|strides|data"):
        caibridge.as_dlpack(p)
    with pytest.raises(ValueError, match="offset|strides|data"):
        caibridge.to_dlpack(p, max_version=(1, 0))


@pytest.mark.parametrize("pointer, shape, strides", [
    (2**64 - 8, (16,), None),       # runs past the top of the address space
    (16, (2,), (-32,)),             # starts below address 0
    (2**63, (3,), (2**62,)),        # the end wraps
])
def test_pointer_ranges_that_wrap_are_refused(pointer, shape, strides):
    for cls, kw in ((Iface, {}), (Cai, {"device": (1, 0)})):
        p = cls(shape=shape, typestr="|u1", data=(pointer, False),
                strides=strides, version=3)
        with pytest.raises(ValueError, match="data|strides"):
            caibridge.as_dlpack(p, **kw)


def test_a_zero_size_array_may_sit_at_any_pointer():
    for pointer in (0, 8, 2**64 - 1):
        a = via_numpy(Iface(shape=(0, 3), typestr="<f8",
                            data=(pointer, False), version=3))
        assert a.shape == (0, 3)


@pytest.mark.parametrize("step", [2, -1, -2, 3])
def test_a_memoryview_with_a_step_is_refused(step):
    buf = bytearray(range(32))
    view = memoryview(buf)[::step]
    p = Iface(shape=(len(view),), typestr="|u1", data=view, version=3)
    with pytest.raises(BufferError, match="data"):
        caibridge.as_dlpack(p)
    with pytest.raises(BufferError):
        np.asarray(p)  # NumPy refuses it too


def test_a_slice_with_a_negative_step_is_refused():
    view = memoryview(bytearray(range(16)))[4:0:-2]
    with pytest.raises(BufferError, match="data"):
        caibridge.as_dlpack(Iface(shape=(2,), typestr="|u1", data=view,
                                  version=3))


def test_a_non_contiguous_ndarray_as_data_is_refused():
    base = np.arange(16, dtype=np.uint8)
    for view in (base[::2], base[::-1], base.reshape(4, 4).T):
        with pytest.raises(BufferError, match="data"):
            caibridge.as_dlpack(Iface(shape=(view.size,), typestr="|u1",
                                      data=view, version=3))


def test_a_contiguous_memoryview_slice_is_read_where_it_starts():
    buf = bytearray(range(32))
    view = memoryview(buf)[8:24]
    a = via_numpy(Iface(shape=(4,), typestr="|u1", data=view, offset=2,
                        version=3))
    assert a.tolist() == [10, 11, 12, 13]
    assert a.flags.writeable


@pytest.mark.parametrize("offset, ok", [
    (0, True), (3, True), (4, True), (5, False), (-1, False)])
def test_a_zero_size_array_offset_stays_within_the_buffer(offset, ok):
    p = Iface(shape=(0,), typestr="|u1", data=bytearray(4), offset=offset,
              version=3)
    if ok:
        assert via_numpy(p).shape == (0,)
    else:
        with pytest.raises(ValueError, match="offset"):
            caibridge.as_dlpack(p)


def test_an_empty_buffer_takes_offset_0_only():
    for data in (b"", bytearray(), memoryview(b"")):
        assert via_numpy(Iface(shape=(0,), typestr="<f4", data=data,
                               version=3)).shape == (0,)
        with pytest.raises(ValueError, match="offset"):
            caibridge.as_dlpack(Iface(shape=(0,), typestr="<f4", data=data,
                                      offset=1, version=3))


def test_copy_of_a_layout_outside_the_buffer_is_never_made():
    p = Iface(shape=(2,), typestr="|u1", data=bytearray(8), offset=4,
              strides=(2**63 - 4,), version=3)
    with pytest.raises(ValueError):
        caibridge.to_dlpack(p, max_version=(1, 0))


# ---- data, offset and typestr as NumPy reads them

def test_offset_is_ignored_for_a_pointer_as_numpy_ignores_it():
    a = np.arange(8, dtype=np.uint8)
    p = Iface(a, shape=(4,), typestr="|u1", data=(a.ctypes.data, False),
              offset=2, version=3)
    got = via_numpy(p)
    assert got.tolist() == np.asarray(p).tolist() == [0, 1, 2, 3]
    assert address(got) == a.ctypes.data


def test_offset_is_not_even_read_for_a_pointer():
    a = np.arange(8, dtype=np.uint8)
    for offset in ("x", -1, 2**70):
        p = Iface(a, shape=(4,), typestr="|u1", data=(a.ctypes.data, False),
                  offset=offset, version=3)
        assert via_numpy(p).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("absent", [True, False])
def test_data_none_or_absent_is_the_objects_own_buffer(absent):
    obj = OwnBuffer(b"abcdefgh")
    obj.iface = {"shape": (3,), "typestr": "|u1", "version": 3, "offset": 2}
    if not absent:
        obj.iface["data"] = None
    a = via_numpy(obj)
    assert a.tolist() == list(b"cde")
    assert a.flags.writeable
    a[0] = ord("X")
    assert obj == bytearray(b"abXdefgh")


def test_the_own_buffer_keeps_its_read_only_flag():
    obj = OwnBytes(b"abcdefgh")
    obj.iface = {"shape": (2,), "typestr": "<u2", "version": 3}
    a = via_numpy(obj)
    assert not a.flags.writeable
    assert a.tolist() == np.frombuffer(obj, "<u2", count=2).tolist()


def test_data_none_on_an_object_without_a_buffer_is_a_type_error():
    p = Iface(shape=(2,), typestr="|u1", data=None, version=3)
    with pytest.raises(TypeError, match="data"):
        caibridge.as_dlpack(p)


def test_read_only_comes_from_the_buffer():
    for data, writable in ((b"abcd", False), (bytearray(b"abcd"), True),
                           (memoryview(bytearray(4)).toreadonly(), False),
                           (array.array("b", [1, 2, 3, 4]), True)):
        a = via_numpy(Iface(shape=(4,), typestr="|u1", data=data, version=3))
        assert a.flags.writeable == writable


@pytest.mark.parametrize("typestr, dtype", [
    ("f8", "<f8"), ("=f8", "<f8"), ("|f8", "<f8"), ("i4", "<i4"),
    ("u1", "|u1"), (">u1", "|u1"), (">i1", "|i1"), (">b1", "|b1"),
    ("c16", "<c16"), ("b1", "|b1")])
def test_typestr_forms_numpy_reads(typestr, dtype):
    p = over_zeros((2,), typestr)
    assert via_numpy(p).dtype == np.dtype(dtype) == np.asarray(p).dtype


@pytest.mark.parametrize("typestr", [
    "<M8[s]", "<m8[ns]", "<M8", "|O", "|O8", "|V8", "|S4", "<U2", ">f8",
    ">i4", "<f16", "<c32"])
def test_types_numpy_reads_but_dlpack_cannot_hold_are_buffer_errors(typestr):
    p = over_zeros((1,), typestr)
    with pytest.raises(BufferError, match="typestr"):
        caibridge.as_dlpack(p)


@pytest.mark.parametrize("typestr", [
    "<f3", "<i3", "<b2", "<u16", "x", "", "<", "<f0", "<M4", "<fé"])
def test_malformed_typestrs_are_value_errors(typestr):
    p = over_zeros((1,), typestr)
    with pytest.raises(ValueError, match="typestr"):
        caibridge.as_dlpack(p)
    with pytest.raises(TypeError):
        np.dtype(typestr)  # NumPy does not read them either


@pytest.mark.parametrize("typestr", ["<f", "<i", "u", "|b"])
def test_a_typestr_without_its_size_is_refused(typestr):
    # NumPy reads these as its one-letter type codes ('<f' is float32, '|b'
    # is int8); the protocol asks for the size, and caibridge does not guess.
    p = over_zeros((1,), typestr)
    with pytest.raises(ValueError, match="typestr"):
        caibridge.as_dlpack(p)


def test_strides_not_a_multiple_of_the_item_size_are_buffer_errors():
    p = over_zeros((3,), "<u2", strides=(3,))
    with pytest.raises(BufferError, match=r"strides\[0\]"):
        caibridge.as_dlpack(p)
    with pytest.raises(BufferError):
        np.asarray(p).__dlpack__()  # as NumPy's own export


def test_a_zero_size_array_takes_any_strides_as_numpy_does():
    p = over_zeros((0, 3), "<f8", strides=(3, 5))
    assert via_numpy(p).shape == np.from_dlpack(np.asarray(p)).shape


def test_a_malformed_entry_wins_over_an_unexportable_type():
    p = over_zeros((2,), ">f8", strides=(8, 8))
    with pytest.raises(ValueError, match="strides"):
        caibridge.as_dlpack(p)


# ---- Views: legacy imports, the exchange table, device=, fresh dicts

def test_a_legacy_capsule_is_imported_read_only():
    a = np.arange(4.0)
    view = caibridge.from_dlpack(a.__dlpack__())
    assert view.__array_interface__["data"][1] is True
    assert not np.asarray(view).flags.writeable


def test_a_legacy_only_producer_is_imported_read_only():
    a = np.arange(4.0)

    class Legacy:
        def __dlpack__(self, stream=None):
            return a.__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    assert not np.asarray(caibridge.from_dlpack(Legacy())).flags.writeable


def test_legacy_writable_opts_in():
    a = np.arange(4.0)
    view = caibridge.from_dlpack(a.__dlpack__(), legacy_writable=True)
    b = np.asarray(view)
    assert b.flags.writeable
    b[0] = 7
    assert a[0] == 7


def test_a_versioned_capsule_keeps_its_own_flag():
    a = np.arange(4.0)
    assert np.asarray(caibridge.from_dlpack(a)).flags.writeable
    a.flags.writeable = False
    assert not np.asarray(caibridge.from_dlpack(a)).flags.writeable


def test_device_contradicting_host_memory_is_refused():
    a = np.arange(4.0)
    for device in (CUDA, (2, 1), (4, 0)):
        with pytest.raises(ValueError, match="device"):
            caibridge.as_dlpack(a, device=device)
        with pytest.raises(ValueError, match="device"):
            caibridge.to_dlpack(a, device=device)
    # Host memory under another name is still host memory.
    assert caibridge.as_dlpack(a, device=(1, 0)).__dlpack_device__() == (1, 0)
    assert caibridge.as_dlpack(a, device=(3, 0)).__dlpack_device__() == (3, 0)


def test_a_cai_producer_may_say_host_with_device():
    a = np.arange(4.0)
    p = Cai(a, shape=(4,), typestr="<f8", data=(a.ctypes.data, False),
            version=3)
    assert np.from_dlpack(caibridge.as_dlpack(p, device=(1, 0))).tolist() \
        == a.tolist()


def test_each_read_of_the_interface_is_a_fresh_dict():
    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    view = caibridge.from_dlpack(a)
    first = view.__array_interface__
    assert view.__array_interface__ is not first
    first.pop("strides")
    first["shape"] = (1000,)
    first["data"] = (0, False)
    again = view.__array_interface__
    assert again["shape"] == (3, 2)
    assert np.asarray(view).tolist() == a.tolist()


def test_each_read_of_the_cai_is_a_fresh_dict():
    a = np.arange(4.0)
    cap = caibridge.to_dlpack(Cai(a, shape=(4,), typestr="<f8",
                                  data=(a.ctypes.data, False), version=3),
                              device=CUDA, max_version=(1, 0))
    view = caibridge.from_dlpack(cap)
    first = view.__cuda_array_interface__
    first["shape"] = (10**6,)
    assert view.__cuda_array_interface__["shape"] == (4,)
    assert view.__cuda_array_interface__ is not first


try:
    import torch
except ImportError:  # pragma: no cover
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")


@needs_torch
def test_a_conjugated_tensor_is_refused_as_its_dlpack_refuses_it():
    t = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).conj()
    with pytest.raises(BufferError, match="conjugate"):
        t.__dlpack__()
    with pytest.raises(BufferError, match="conjugate"):
        caibridge.from_dlpack(t)


@needs_torch
def test_a_tensor_requiring_grad_is_refused_as_its_dlpack_refuses_it():
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="gradient"):
        caibridge.from_dlpack(t)


@needs_torch
def test_a_tensor_subclass_goes_through_its_own_dlpack():
    calls = []

    class Sub(torch.Tensor):
        def __dlpack__(self, *args, **kw):
            calls.append(kw)
            return torch.Tensor.__dlpack__(self, *args, **kw)

    t = torch.arange(4.0).as_subclass(Sub)
    before = caibridge._core._foreign_table_imports()
    assert np.asarray(caibridge.from_dlpack(t)).tolist() == [0, 1, 2, 3]
    assert calls and caibridge._core._foreign_table_imports() == before


@needs_torch
def test_a_plain_tensor_still_takes_the_table():
    before = caibridge._core._foreign_table_imports()
    t = torch.arange(4.0)
    assert np.asarray(caibridge.from_dlpack(t)).tolist() == [0, 1, 2, 3]
    assert caibridge._core._foreign_table_imports() == before + 1


# ---- Streams

def cuda_capsule():
    a = np.arange(4.0)
    return caibridge.to_dlpack(Cai(a, shape=(4,), typestr="<f8",
                                   data=(a.ctypes.data, False), version=3),
                               device=CUDA, max_version=(1, 0))


@pytest.mark.parametrize("stream", [-5, -2, -2**63])
def test_a_stream_below_minus_1_is_refused(stream):
    with pytest.raises(ValueError, match="stream"):
        caibridge.from_dlpack(cuda_capsule(), stream=stream)


@pytest.mark.parametrize("stream, written", [
    (1, 1), (2, 2), (12345, 12345)])
def test_the_stream_written_into_a_cai_dict(stream, written):
    view = caibridge.from_dlpack(cuda_capsule(), stream=stream)
    assert view.__cuda_array_interface__["stream"] == written


def test_unordered_cuda_capsule_is_refused():
    # -1 orders nothing and a capsule names no stream: "stream: None" would
    # claim the data is ready.
    with pytest.raises(ValueError, match="stream = -1"):
        caibridge.from_dlpack(cuda_capsule(), stream=-1)


class CountingStream:
    def __init__(self, pair):
        self.pair = pair
        self.calls = 0

    def __cuda_stream__(self):
        self.calls += 1
        return self.pair


def test_cuda_stream_is_asked_once():
    a = np.arange(4.0)
    for x in (cuda_capsule(),
              caibridge.as_dlpack(Cai(a, shape=(4,), typestr="<f8",
                                      data=(a.ctypes.data, False),
                                      version=3), device=CUDA)):
        s = CountingStream((0, 77))
        view = caibridge.from_dlpack(x, stream=s)
        assert s.calls == 1
        assert view.__cuda_array_interface__["stream"] == 77


@pytest.mark.parametrize("pair, exc", [
    ((0, 2**64), ValueError), ((0, 2**70), ValueError), ((0, -5), ValueError),
    ((2**70, 5), TypeError), ((1, 5), TypeError), ((0,), TypeError),
    ("x", TypeError)])
def test_a_bad_cuda_stream_answer_is_a_documented_error(pair, exc):
    with pytest.raises(exc, match="stream"):
        caibridge.from_dlpack(cuda_capsule(), stream=CountingStream(pair))


def test_stream_minus_1_is_refused_for_host_memory():
    a = np.arange(4.0)
    with pytest.raises(BufferError, match="stream"):
        caibridge.as_dlpack(a).__dlpack__(stream=-1)
    with pytest.raises(BufferError, match="stream"):
        caibridge.to_dlpack(a, stream=-1)
    # None is the one stream for host memory.
    assert np.from_dlpack(caibridge.as_dlpack(a)).tolist() == a.tolist()


# ---- Messages stay text

@pytest.mark.parametrize("typestr", ["<fé", "<" + "é" * 8, "é" * 200,
                                     "<f\udcff", "\U0001F600" * 70])
def test_a_non_ascii_typestr_is_a_value_error(typestr):
    p = Iface(shape=(1,), typestr=typestr, data=(0, False), version=3)
    with pytest.raises(ValueError, match="typestr"):
        caibridge.as_dlpack(p)


def test_a_non_utf8_runtime_path_gives_a_cuda_error():
    code = textwrap.dedent("""
        import caibridge
        class Cai:
            __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4",
                                        "data": (4096, False), "version": 3}
        try:
            caibridge.as_dlpack(Cai())
        except caibridge.CUDAError as e:
            print("CUDAError", len(str(e)) > 0)
        except Exception as e:
            print(type(e).__name__)
    """)
    env = dict(os.environb)
    # The path is cut somewhere in the message; "data" in it once made the
    # message be decoded strictly.
    env[b"CAIBRIDGE_CUDART"] = b"/nonexistent/data/" + b"\xc3\xa9\xff" * 120
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, timeout=60)
    assert out.stdout.decode().split() == ["CUDAError", "True"], out
