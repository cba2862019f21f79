"""The arguments of as_dlpack, to_dlpack and DLPackView.__dlpack__, and
what each request does: device, sync, stream, dl_device, max_version, copy.

A bad argument raises TypeError (wrong Python type) or ValueError (a bad
value) naming it; a well-formed request that cannot be met raises
BufferError; caibridge.CUDAError (a BufferError): CUDA unavailable or
failing.
"""
import ctypes
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import caibridge
from conftest import CAIProducer, HostProducer, cai_of, collect, filled
from shared import PyCapsule_GetPointer

GOOD = {"shape": (4, 3), "typestr": "<f4", "data": (4096, False),
        "version": 3}


def test_exception_kinds():
    assert issubclass(caibridge.CUDAError, BufferError)


@pytest.mark.parametrize("device, error", [
    ((2,), TypeError), ("cuda", TypeError), ([2, 0], TypeError),
    ((0, 0), ValueError), ((2, -1), ValueError), ((2**40, 0), ValueError),
    (("2", 0), TypeError)])
def test_bad_device_argument(device, error):
    with pytest.raises(error, match="device"):
        caibridge.as_dlpack(CAIProducer(GOOD), device=device)


def test_cuda_without_device_needs_cuda():
    # Without device=, the pointer is looked up with the CUDA runtime: on a
    # machine without a driver that fails with CUDAError; with one, 4096 is
    # not device memory and is refused too.
    with pytest.raises(BufferError) as info:
        caibridge.as_dlpack(CAIProducer(GOOD))
    assert str(info.value)
    if not caibridge.cuda_built():
        assert isinstance(info.value, caibridge.CUDAError)


def test_bad_arguments():
    producer = HostProducer(filled((2,), "float32"))
    with pytest.raises(TypeError, match="positional"):
        caibridge.as_dlpack(producer, (1, 0))
    with pytest.raises(TypeError, match="positional"):
        caibridge.as_dlpack()
    with pytest.raises(TypeError, match="unexpected keyword argument 'dev'"):
        caibridge.as_dlpack(producer, dev=(1, 0))
    with pytest.raises(TypeError, match="sync must be a bool"):
        caibridge.as_dlpack(producer, sync="yes")
    with pytest.raises(TypeError, match="unexpected keyword"):
        caibridge.to_dlpack(producer, cpy=True)
    view = caibridge.as_dlpack(producer)
    with pytest.raises(TypeError, match="positional"):
        view.__dlpack__(None)
    with pytest.raises(TypeError, match="max_version must be"):
        view.__dlpack__(max_version="1.0")
    with pytest.raises(TypeError, match="max_version"):
        view.__dlpack__(max_version=(1, "0"))
    with pytest.raises(TypeError, match="copy must be"):
        view.__dlpack__(copy="yes")
    with pytest.raises(TypeError, match="unexpected keyword"):
        view.__dlpack__(strem=None)
    with pytest.raises(TypeError, match="stream must be"):
        view.__dlpack__(stream="1")
    with pytest.raises(TypeError, match="cannot create"):
        caibridge.DLPackView()


def test_max_version_zero_gives_legacy():
    view = caibridge.as_dlpack(HostProducer(filled((2,), "float32")))
    assert "\"dltensor\"" in repr(view.__dlpack__(max_version=(0, 8)))
    assert "dltensor_versioned" in repr(view.__dlpack__(max_version=(1, 0)))
    assert "dltensor_versioned" in repr(view.__dlpack__(max_version=(2, 0)))


# ---- Requests of the DLPack protocol on host memory ---------------------

def capsule_flags(capsule):
    return ctypes.c_uint64.from_address(
        PyCapsule_GetPointer(capsule, b"dltensor_versioned") + 24).value


def test_host_stream_rules():
    view = caibridge.as_dlpack(HostProducer(filled((2,), "float32")))
    assert view.__dlpack__(stream=None) is not None
    # Only None is valid for host memory (DLPack; -1 included).
    for stream in (-1, 1, 2, 5):
        with pytest.raises(BufferError, match="host memory"):
            view.__dlpack__(stream=stream)
    with pytest.raises(BufferError, match="host memory"):
        caibridge.to_dlpack(HostProducer(filled((2,), "float32")), stream=1)


@pytest.mark.parametrize("sync", [True, False])
def test_cuda_stream_rules(sync):
    """Checked whether or not there is anything to order: this producer
    names no stream (and sync=False turns ordering off)."""
    view = caibridge.as_dlpack(CAIProducer(GOOD), device=(2, 0), sync=sync)
    for stream in (None, -1, 1, 2, 0x7F00DEADBEEF):
        assert view.__dlpack__(stream=stream) is not None
    with pytest.raises(ValueError, match="stream = 0 is disallowed"):
        view.__dlpack__(stream=0)
    with pytest.raises(ValueError, match="stream = -7 is not a stream"):
        view.__dlpack__(stream=-7)


def test_stream_just_below_minus_one_is_refused():
    # -1 is "no ordering"; -2 and below are no stream at all.
    view = caibridge.as_dlpack(CAIProducer(GOOD), device=(2, 0), sync=False)
    with pytest.raises(ValueError, match="stream = -2 is not a stream"):
        view.__dlpack__(stream=-2)
    with pytest.raises(ValueError, match="stream = -2 is not a stream"):
        caibridge.to_dlpack(CAIProducer(GOOD), device=(2, 0), sync=False,
                            stream=-2)


@pytest.mark.parametrize("device", [(3, 0), (13, 0)],
                         ids=["pinned", "managed"])
def test_dl_device_cpu_for_host_accessible_memory(device):
    # Pinned and managed memory may be asked for as kDLCPU device 0, the
    # only CPU device there is; another CPU device id is refused.
    array = filled((4,), "float32")
    producer = CAIProducer(cai_of(array), keep=array)
    view = caibridge.as_dlpack(producer, device=device)
    assert view.__dlpack__(dl_device=(1, 0), max_version=(1, 0)) is not None
    with pytest.raises(BufferError, match=r"dl_device = \(1, 5\)"):
        view.__dlpack__(dl_device=(1, 5), max_version=(1, 0))
    with pytest.raises(BufferError, match=r"dl_device = \(1, 5\)"):
        caibridge.to_dlpack(producer, device=device, dl_device=(1, 5),
                            max_version=(1, 0))


def test_dl_device_rules():
    view = caibridge.as_dlpack(HostProducer(filled((2,), "float32")))
    assert view.__dlpack__(dl_device=(1, 0)) is not None
    with pytest.raises(BufferError, match="dl_device"):
        view.__dlpack__(dl_device=(2, 0))
    cuda = caibridge.as_dlpack(CAIProducer(GOOD), device=(2, 1))
    assert cuda.__dlpack__(dl_device=(2, 1)) is not None
    # CUDA memory for a host consumer is a copy: refused with copy=False
    # (naming both devices), else made (here, without a driver, it says so).
    with pytest.raises(BufferError, match=r"copy=False.*kDLCUDA.*kDLCPU"):
        cuda.__dlpack__(dl_device=(1, 0), copy=False)
    with pytest.raises(BufferError, match="no usable CUDA driver"):
        cuda.__dlpack__(dl_device=(1, 0))
    with pytest.raises(BufferError, match="dl_device"):
        cuda.__dlpack__(dl_device=(2, 0))


@pytest.mark.parametrize("make", [
    lambda: filled((3, 4), "float32"),
    lambda: filled((6, 8), "int16")[::-2, 1::3],
    lambda: np.broadcast_to(filled((3,), "complex64"), (4, 3)),
    lambda: filled((), "float64"),
    lambda: filled((0, 5), "uint8"),
], ids=["contiguous", "negative-strided", "broadcast", "0-d", "zero-size"])
def test_copy_true_makes_contiguous_copy(make):
    array = make()
    producer = HostProducer(array)
    alive = weakref.ref(producer)
    view = caibridge.as_dlpack(producer)
    capsule = view.__dlpack__(max_version=(1, 3), copy=True)
    assert capsule_flags(capsule) & 2, "IS_COPIED is set"
    copy = np.from_dlpack(_Capsule(capsule))
    np.testing.assert_array_equal(copy, array)
    assert copy.flags.c_contiguous
    assert copy.flags.writeable
    if array.size:
        assert copy.ctypes.data != array.__array_interface__["data"][0]
    del view, producer, capsule
    collect()
    assert alive() is None, "a copy holds no reference to the producer"
    np.testing.assert_array_equal(copy, array)


class _Capsule:
    """Hands an existing capsule to np.from_dlpack."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def test_copy_is_independent_of_source():
    array = filled((4,), "int32")
    capsule = caibridge.as_dlpack(array).__dlpack__(copy=True,
                                                    max_version=(1, 0))
    copy = np.from_dlpack(_Capsule(capsule))
    copy[0] = 99
    assert array[0] != 99


def test_copy_of_readonly_is_writable_legacy():
    array = filled((4,), "float32")
    array.flags.writeable = False
    view = caibridge.as_dlpack(HostProducer(array))
    # A legacy capsule is fine for a copy (NumPy imports legacy capsules
    # read-only, so the writable check uses the versioned one).
    legacy = np.from_dlpack(_Capsule(view.__dlpack__(copy=True)))
    np.testing.assert_array_equal(legacy, array)
    copy = np.from_dlpack(_Capsule(view.__dlpack__(copy=True,
                                                   max_version=(1, 0))))
    copy[0] = 5
    assert copy[0] == 5 and array[0] != 5
    versioned = view.__dlpack__(copy=True, max_version=(1, 3))
    assert capsule_flags(versioned) == 2, "IS_COPIED, not READ_ONLY"


def test_copy_false_never_copies():
    array = filled((3, 3), "float64")[::2]
    view = caibridge.as_dlpack(HostProducer(array))
    result = np.from_dlpack(_Capsule(view.__dlpack__(copy=False)))
    assert result.ctypes.data == array.__array_interface__["data"][0]
    assert capsule_flags(view.__dlpack__(copy=False, max_version=(1, 0))) == 0


def test_copy_of_device_memory_without_a_driver():
    """A device copy needs CUDA: without a driver it says so, cleanly."""
    cuda = caibridge.as_dlpack(CAIProducer(GOOD), device=(2, 0))
    with pytest.raises(BufferError, match="copy: .*no usable CUDA driver"):
        cuda.__dlpack__(copy=True)
    # The refusal names pinned and managed memory as what they are (host
    # memory CUDA can reach), not as device memory, which is copied.
    for device, kind in (((3, 0), "pinned host"), ((13, 0), "managed")):
        with pytest.raises(BufferError,
                           match=r"copy=True: %s memory \(device type %d\) "
                                 r"is copied only for a consumer on the host, "
                                 r"dl_device=\(1, 0\)" % (kind, device[0])):
            caibridge.as_dlpack(CAIProducer(GOOD), device=device).__dlpack__(
                copy=True, dl_device=device)
        with pytest.raises(BufferError, match="%s memory" % kind):
            caibridge.to_dlpack(CAIProducer(GOOD), device=device, copy=True,
                                dl_device=device)


# ---- Stream ordering of CUDA data (no GPU: ordering needs the driver) ---

def cai_with_stream(stream):
    return CAIProducer(dict(GOOD, stream=stream))


def test_ordering_needs_cuda():
    # A view takes its fence on the producer's stream when it is made.
    with pytest.raises(caibridge.CUDAError):
        caibridge.as_dlpack(cai_with_stream(7), device=(2, 0))
    with pytest.raises(caibridge.CUDAError):
        caibridge.to_dlpack(cai_with_stream(7), device=(2, 0), stream=5)


def test_ordering_skipped_when_not_needed():
    producer = cai_with_stream(7)
    assert caibridge.to_dlpack(producer, device=(2, 0), stream=-1) \
        is not None, "-1: no ordering"
    assert caibridge.to_dlpack(producer, device=(2, 0), stream=7) \
        is not None, "same stream: in order"
    plain = caibridge.as_dlpack(CAIProducer(GOOD), device=(2, 0))
    assert plain.__dlpack__(stream=5) is not None, "no producer stream"
    off = caibridge.as_dlpack(cai_with_stream(7), device=(2, 0), sync=False)
    assert off.__dlpack__(stream=5) is not None, "sync=False"
    assert caibridge.to_dlpack(cai_with_stream(7), device=(2, 0), stream=5,
                               sync=False) is not None


SYNC_SPELLINGS = {"0": 0, "false": 0, "No": 0, "OFF": 0, "1": 1, "TRUE": 1,
                  "yes": 1, "On": 1, "": 1}
SYNC_CODE = ("import warnings\n"
             "with warnings.catch_warnings(record=True) as seen:\n"
             "    warnings.simplefilter('always')\n"
             "    import caibridge\n"
             "class P:\n"
             "    __cuda_array_interface__ = {'shape': (2,), 'typestr': '<f4',"
             " 'data': (4096, False), 'version': 3, 'stream': 7}\n"
             "if not caibridge.SYNC_ENABLED:  # ordering off: no CUDA call\n"
             "    v = caibridge.as_dlpack(P(), device=(2, 0))\n"
             "    v.__dlpack__(stream=5)\n"
             "print(caibridge.SYNC_ENABLED)\n"
             "for w in seen:\n"
             "    print(w.category.__name__, w.message)\n")


def sync_env_run(value):
    """SYNC_ENABLED, then one line per warning, in a process whose
    CAIBRIDGE_SYNC is value."""
    env = dict(os.environ, CAIBRIDGE_SYNC=value)
    out = subprocess.run([sys.executable, "-c", SYNC_CODE], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


@pytest.mark.parametrize("value", sorted(SYNC_SPELLINGS))
def test_sync_env_variable(value):
    assert sync_env_run(value) == [str(SYNC_SPELLINGS[value])], \
        "read without a warning"


@pytest.mark.parametrize("value", ["2", "disable", "0 "])
def test_sync_env_variable_not_understood(value):
    # Ordering stays on, and the warning names the variable and the value.
    lines = sync_env_run(value)
    assert lines[0] == "1"
    assert len(lines) == 2 and lines[1].startswith(
        "RuntimeWarning CAIBRIDGE_SYNC=%r is not understood" % value), lines
