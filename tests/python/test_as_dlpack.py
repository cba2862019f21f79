"""Host arrays through as_dlpack into real consumers: torch, JAX, NumPy.

Every case checks the values and that the consumer's data pointer is the
producer's (no copy).  Where a consumer refuses a layout, the test asserts
the refusal it makes, so a change in the consumer shows up here.
"""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import caibridge
from conftest import (DTYPES, DLManagedTensorVersioned, HostProducer,
                      PyCapsule_GetPointer, data_pointer, filled)


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


def torch_view(torch, producer):
    return torch.from_dlpack(caibridge.as_dlpack(producer))


def element_strides(view):
    """The strides of the DLTensor in a versioned capsule of view."""
    capsule = view.__dlpack__(max_version=(1, 3))
    tensor = DLManagedTensorVersioned.from_address(
        PyCapsule_GetPointer(capsule, b"dltensor_versioned")).dl_tensor
    return [tensor.strides[i] for i in range(tensor.ndim)]


def jax_view(jax, array, producer):
    # JAX asks only for legacy capsules; broadcast_to arrays are read-only.
    view = caibridge.as_dlpack(producer,
                               allow_readonly_legacy=array is not None
                               and not array.flags.writeable)
    return jax.dlpack.from_dlpack(view)


def pointer_of(result):
    if isinstance(result, np.ndarray):
        return data_pointer(result)
    if hasattr(result, "data_ptr"):  # torch
        return result.data_ptr()
    return result.unsafe_buffer_pointer()  # JAX


def check_view(result, array):
    got = np.asarray(result)
    assert got.shape == array.shape
    assert got.dtype == array.dtype
    np.testing.assert_array_equal(got, array)
    if array.size > 0:
        assert pointer_of(result) == data_pointer(array), "the data was copied"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_consumer(dtype, layout):
    array = layouts(dtype)[layout]
    view = caibridge.as_dlpack(HostProducer(array))
    check_view(np.from_dlpack(view), array)
    assert np.from_dlpack(view).strides == array.strides or array.size == 0
    # The element strides themselves: a wrong one can wrap around 2**64 back
    # to the right byte stride once a consumer multiplies by the item size.
    if array.size > 0:
        assert element_strides(view) == [s // array.itemsize
                                          for s in array.strides]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_consumer(dtype, layout, torch, request):
    if layout == "negative":
        torch_aborts_on_negative_strides(
            request.getfixturevalue("torch_on_negative_strides"), dtype)
        return
    array = layouts(dtype)[layout]
    result = torch_view(torch, HostProducer(array))
    check_view(result, array)
    if array.size > 0:
        itemsize = array.dtype.itemsize
        assert result.stride() == tuple(s // itemsize for s in array.strides)


NEGATIVE_INTO_TORCH = textwrap.dedent("""
    import os
    import sys
    import numpy as np
    import torch
    import caibridge

    sys.path.insert(0, sys.argv[1])
    from conftest import DTYPES, filled

    for dtype in DTYPES:
        array = filled((4, 5), dtype)[::-1, ::-2]
        view = caibridge.as_dlpack(array)
        mine = np.from_dlpack(view)  # caibridge's capsule, read by NumPy
        ours = mine.tolist() == array.tolist() and \\
            mine.strides == array.strides
        for source in (view, array):  # caibridge's, NumPy's own __dlpack__
            pid = os.fork()
            if pid == 0:
                torch.from_dlpack(source)
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            end = (f"signal-{os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                   else f"exit-{os.WEXITSTATUS(status)}")
            print(dtype, type(source).__name__, int(ours), end, flush=True)
""")


@pytest.fixture(scope="module")
def torch_on_negative_strides(torch):
    """What torch.from_dlpack does with negative strides, per dtype, each
    in a forked child (it aborts the process on them)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", NEGATIVE_INTO_TORCH, here],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = {}
    for line in out.stdout.splitlines():
        dtype, source, ours, end = line.split()
        seen[dtype, source] = (ours == "1", end)
    return seen, out.stderr


def torch_aborts_on_negative_strides(seen, dtype):
    """torch.from_dlpack aborts (an uncaught c10::Error) on negative strides,
    from caibridge as from NumPy's own __dlpack__, while caibridge's capsule
    reads right in NumPy.  If torch learns negative strides, this fails and
    the case can run in-process."""
    seen, stderr = seen
    # Under AddressSanitizer (libasan preloaded), the C++ throw itself ends
    # the child: ASan's __cxa_throw interceptor finds no real one to call.
    asan = "libasan" in os.environ.get("LD_PRELOAD", "")
    for source in ("DLPackView", "ndarray"):
        ours, end = seen[dtype, source]
        assert ours, f"{dtype}: caibridge's capsule read wrong in NumPy"
        if asan and end == "exit-1":
            assert "__cxa_throw" in stderr, stderr[-2000:]
            continue
        assert end == f"signal-{int(signal.SIGABRT)}", \
            f"{dtype}, {source}: torch ended with {end}\n{stderr[-2000:]}"
        assert "c10::Error" in stderr


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_jax_consumer(dtype, layout, jax):
    array = layouts(dtype)[layout]
    producer = HostProducer(array)
    if layout in JAX_NON_COMPACT and array.size > 0:
        with pytest.raises(Exception, match="striding"):
            jax_view(jax, array, producer)
        return
    check_view(jax_view(jax, array, producer), array)


def test_jax_copies_unaligned_data(jax):
    # XLA's CPU client needs 64-byte aligned buffers and copies the others;
    # the values still arrive intact.
    array = filled((9,), "float32")[1:]
    result = jax_view(jax, array, HostProducer(array))
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
    from shared import PyCapsule_GetPointer
    tensor = PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    # DLManagedTensorVersioned: version (8 bytes), manager_ctx, deleter, flags.
    flags = ctypes.c_uint64.from_address(tensor + 24).value
    assert flags & 1, "READ_ONLY is set"
    assert not flags & 2, "IS_COPIED is not set"


def test_readonly_torch_takes_versioned(torch):
    array = readonly()
    check_view(torch_view(torch, HostProducer(array)), array)


@pytest.mark.parametrize("export", [
    lambda array: caibridge.as_dlpack(HostProducer(array)),
    lambda array: array,  # NumPy's own __dlpack__
], ids=["caibridge", "numpy"])
def test_torch_ignores_read_only(torch, export):
    """torch.from_dlpack hands out a writable tensor for a versioned export
    marked READ_ONLY, from caibridge as from NumPy's own __dlpack__:
    writing through it changes the read-only data.  If torch learns
    READ_ONLY, this fails: then say so in the docs' peers section."""
    array = filled((4,), "uint8")
    array.flags.writeable = False
    tensor = torch.from_dlpack(export(array))
    assert data_pointer(array) == tensor.data_ptr(), "zero-copy"
    tensor[0] = 120
    assert array[0] == 120, "torch wrote through the read-only export"
    assert not array.flags.writeable


def test_readonly_jax_needs_opt_in(jax):
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


def test_numpy_array_itself_is_a_producer(torch):
    array = filled((4, 4), "float64")
    result = torch.from_dlpack(caibridge.as_dlpack(array))
    assert result.data_ptr() == data_pointer(array)


def test_consumer_writes_are_visible_to_producer(torch):
    array = filled((3,), "int32")
    result = torch_view(torch, HostProducer(array))
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
